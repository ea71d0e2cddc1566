//! The daemon under a hostile client: bodies that never finish, floods of connections, streams
//! whose request never ends, subscribers that never read. Each attack runs while a person's
//! `/api/health` must still be answered within a second, and the daemon's memory stays bounded.

use std::sync::Arc;
use std::time::Duration;

use switchboard_server::{AuthConfig, Daemon, DaemonConfig};
use switchboard_store::{EventRecord, SessionRecord, Store};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::TOKEN;

/// A daemon with no CLI over `store`, served on loopback with `options`: its address.
async fn serve(
    store: Arc<dyn Store>,
    config: DaemonConfig,
    options: switchboard_server::ServeOptions,
) -> (String, Arc<Daemon>) {
    let daemon = Daemon::open(store, config).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    tokio::spawn(switchboard_server::serve_with(
        listener,
        daemon.clone(),
        AuthConfig::with_token(TOKEN),
        options,
        std::future::pending(),
    ));
    (address, daemon)
}

/// `GET /api/health` with the daemon's token on a connection of its own: answered 200 within a
/// second, or the test fails naming what it got.
async fn health_within_a_second(address: &str) {
    let request = format!(
        "GET /api/health HTTP/1.1\r\nhost: {address}\r\nauthorization: Bearer {TOKEN}\r\nconnection: close\r\n\r\n"
    );
    let answer = tokio::time::timeout(Duration::from_secs(1), async {
        let mut stream = tokio::net::TcpStream::connect(address).await?;
        stream.write_all(request.as_bytes()).await?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await?;
        Ok::<_, std::io::Error>(String::from_utf8_lossy(&answer).into_owned())
    })
    .await;
    match answer {
        Ok(Ok(answer)) => assert!(answer.starts_with("HTTP/1.1 200"), "health answered: {answer}"),
        Ok(Err(error)) => panic!("health failed: {error}"),
        Err(_) => panic!("health was not answered within a second"),
    }
}

/// The process's resident memory, in bytes (nextest runs each test in a process of its own).
fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|line| line.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
}

/// Reads an HTTP answer's head (up to the blank line), within 10 s.
async fn read_head(stream: &mut tokio::net::TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    tokio::time::timeout(Duration::from_secs(10), async {
        while !head.ends_with(b"\r\n\r\n") {
            if stream.read(&mut byte).await.unwrap_or(0) == 0 {
                break;
            }
            head.push(byte[0]);
        }
    })
    .await
    .expect("an answer's head within 10 s");
    String::from_utf8_lossy(&head).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_is_checked_before_its_body_and_a_link_form_is_small() {
    let store: Arc<dyn Store> = Arc::new(switchboard_store::MemoryStore::new());
    let (address, daemon) = serve(store, DaemonConfig::default(), Default::default()).await;
    // 16 MiB promised, a few bytes sent, to a link that is not one: answered at once.
    let mut forged = tokio::net::TcpStream::connect(&address).await.unwrap();
    let request = format!(
        "POST /a/not-a-link HTTP/1.1\r\nhost: {address}\r\ncontent-type: application/x-www-form-urlencoded\r\ncontent-length: {}\r\n\r\ndecision=al",
        16 * 1024 * 1024
    );
    forged.write_all(request.as_bytes()).await.unwrap();
    let head = read_head(&mut forged).await;
    assert!(head.starts_with("HTTP/1.1 404"), "{head}");

    // Thirty clients sending 15 MB each to forged links: each is refused unread, and the
    // daemon does not hold their bodies.
    let before = rss();
    let senders = (0..30).map(|at| {
        let address = address.clone();
        async move {
            let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
            let head = format!(
                "POST /a/forged-{at} HTTP/1.1\r\nhost: {address}\r\ncontent-length: 15000000\r\n\r\n"
            );
            stream.write_all(head.as_bytes()).await.unwrap();
            let chunk = vec![b'x'; 64 * 1024];
            // The daemon answers and closes; writing then fails.
            for _ in 0..(15_000_000 / chunk.len()) {
                if stream.write_all(&chunk).await.is_err() {
                    break;
                }
            }
        }
    });
    tokio::time::timeout(Duration::from_secs(60), futures::future::join_all(senders))
        .await
        .expect("every forged post is refused within a minute");
    health_within_a_second(&address).await;
    let grown = rss().saturating_sub(before);
    assert!(grown < 64 * 1024 * 1024, "memory grew {grown} bytes for 30 refused bodies");

    // A real link's form is at most 32 KiB.
    let link = daemon
        .link_key()
        .sign(&switchboard_server::links::LinkClaim {
            session: "s".into(),
            request: "r".into(),
            expires_ms: u64::MAX,
            channel: "test".into(),
        })
        .expect("a short claim signs");
    let long = format!("decision=deny&message={}", "x".repeat(40 * 1024));
    let answer = crate::http_client()
        .post(format!("http://{address}/a/{link}"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(long)
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 413);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_that_never_finish_a_body_cannot_keep_a_person_out() {
    let store: Arc<dyn Store> = Arc::new(switchboard_store::MemoryStore::new());
    // A small daemon, so that the flood is more than every place it has.
    let options = switchboard_server::ServeOptions {
        connections: switchboard_server::peers::Limits { total: 64, per_peer: 64 },
        ..Default::default()
    };
    let (address, _daemon) = serve(store, DaemonConfig::default(), options).await;
    let started = tokio::time::Instant::now();
    // 200 connections from one peer, each sending 9 of 100 promised bytes.
    let mut flood = Vec::new();
    for _ in 0..200 {
        let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
        let request = format!(
            "POST /api/sessions HTTP/1.1\r\nhost: {address}\r\nauthorization: Bearer {TOKEN}\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{{\"cwd\": \""
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        flood.push(stream);
        // The person's requests are answered all along.
        if flood.len() % 50 == 0 {
            health_within_a_second(&address).await;
        }
    }
    health_within_a_second(&address).await;
    // The newest of the flood that still hold a place are cut off once their body is late:
    // answered (408 or 400), or closed.
    let mut last = flood.pop().unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(
        switchboard_server::pacing::BODY_GRACE + Duration::from_secs(10),
        last.read_to_end(&mut answer),
    )
    .await;
    assert!(read.is_ok(), "a body that stopped arriving still held its connection");
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 4"),
        "a late body is refused: {answer}"
    );
    assert!(started.elapsed() >= switchboard_server::pacing::BODY_GRACE);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_call_whose_request_never_ends_is_ended() {
    let store: Arc<dyn Store> = Arc::new(switchboard_store::MemoryStore::new());
    let (address, _daemon) = serve(store, DaemonConfig::default(), Default::default()).await;
    let socket = tokio::net::TcpStream::connect(&address).await.unwrap();
    let (client, connection) = h2::client::handshake(socket).await.unwrap();
    tokio::spawn(connection);
    let mut client = client.ready().await.unwrap();
    let request =
        axum::http::Request::post(format!("http://{address}/grpc.health.v1.Health/Watch"))
            .header("content-type", "application/grpc")
            .header("authorization", format!("Bearer {TOKEN}"))
            .header("te", "trailers")
            .body(())
            .unwrap();
    // The request's body is opened and never sent nor ended.
    let (response, _body) = client.send_request(request, false).unwrap();
    let started = tokio::time::Instant::now();
    let ended = tokio::time::timeout(
        switchboard_server::pacing::BODY_GRACE + Duration::from_secs(10),
        async {
            let response = response.await?;
            let mut body = response.into_body();
            while let Some(chunk) = body.data().await {
                chunk?;
            }
            body.trailers().await
        },
    )
    .await
    .expect("the call is ended once its request is late");
    assert!(started.elapsed() >= switchboard_server::pacing::BODY_GRACE - Duration::from_secs(1));
    // Ended with an error status (or reset), never answered as a healthy watch.
    if let Ok(Some(trailers)) = ended {
        let status = trailers.get("grpc-status").map(|value| value.to_str().unwrap().to_owned());
        assert_ne!(status.as_deref(), Some("0"), "{trailers:?}");
    }
}

/// A named `read` token made through the API.
async fn named_token(address: &str, name: &str) -> String {
    let made: serde_json::Value = crate::http_client()
        .post(format!("http://{address}/api/tokens"))
        .bearer_auth(TOKEN)
        .json(&serde_json::json!({"name": name, "scope": "read"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    made["token"].as_str().expect("a token").to_owned()
}

/// A finished session whose log holds one event of `bytes` (a pasted image) among small ones.
async fn session_with_a_large_event(store: &Arc<dyn Store>, bytes: usize) -> String {
    let id = "large-event-session".to_owned();
    let now = switchboard_store::now_ms();
    store
        .create_session(&SessionRecord {
            id: id.clone(),
            claude_session_id: None,
            cwd: "/tmp".into(),
            model: None,
            permission_mode: None,
            state: switchboard_store::RecordState::Exited,
            title: Some("a large image".into()),
            cost_usd: 0.0,
            spent_usd: 0.0,
            created_ms: now,
            updated_ms: now,
            launch: Default::default(),
            archived: false,
            node: None,
        })
        .await
        .unwrap();
    let image = "A".repeat(bytes);
    let large = serde_json::json!({"type": "user", "message": {"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": image}}
    ]}});
    let events: Vec<EventRecord> = (1..=3u64)
        .map(|seq| EventRecord {
            session_id: id.clone(),
            seq,
            ts_ms: now,
            dir: "to_cli".into(),
            kind: "line".into(),
            payload: if seq == 2 {
                large.to_string()
            } else {
                serde_json::json!({"type": "user", "message": {"role": "user", "content": "hi"}})
                    .to_string()
            },
        })
        .collect();
    store.append(&events).await.unwrap();
    id
}

/// Opens a WebSocket to `path` by hand, with a small receive buffer, and never reads from it
/// after the handshake: the answer's status line.
async fn non_reading_socket(
    address: &str,
    path: &str,
    token: &str,
) -> (u16, tokio::net::TcpStream) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stream = socket.connect(address.parse().unwrap()).await.unwrap();
    let request = format!(
        "GET {path} HTTP/1.1\r\nhost: {address}\r\nupgrade: websocket\r\nconnection: Upgrade\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\nauthorization: Bearer {token}\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let head = read_head(&mut stream).await;
    let status = head.split_whitespace().nth(1).and_then(|code| code.parse().ok()).unwrap_or(0);
    (status, stream)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribers_that_never_read_a_large_event_hold_bounded_memory() {
    let store: Arc<dyn Store> = Arc::new(switchboard_store::MemoryStore::new());
    let id = session_with_a_large_event(&store, 5 * 1024 * 1024).await;
    let (address, daemon) = serve(store, DaemonConfig::default(), Default::default()).await;
    // The search index reads the session's log at start (nothing indexed it yet): measured
    // from when that is done, the growth is the subscribers'.
    tokio::time::timeout(Duration::from_secs(30), daemon.search_settled())
        .await
        .expect("the index's rebuild at start ends");
    let before = rss();
    let path = format!("/api/sessions/{id}/subscribe");
    // 48 non-reading subscribers (the owner's token has no count of places).
    let mut held = Vec::new();
    for _ in 0..48 {
        let (status, stream) = non_reading_socket(&address, &path, TOKEN).await;
        assert_eq!(status, 101);
        held.push(stream);
        if held.len() % 16 == 0 {
            health_within_a_second(&address).await;
        }
    }
    // Let every subscriber get as far as it can (each waits on a full socket or the outbox).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut peak = 0;
    while tokio::time::Instant::now() < deadline {
        peak = peak.max(rss().saturating_sub(before));
        assert!(daemon.watchers().outbox_used() <= switchboard_server::watchers::OUTBOX_BYTES);
        if daemon.watchers().outbox_used()
            >= switchboard_server::watchers::OUTBOX_BYTES - 6 * 1024 * 1024
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    health_within_a_second(&address).await;
    peak = peak.max(rss().saturating_sub(before));
    // Each held its own copy of the event and of its frame before (about 10 MiB each, 480 MiB
    // here); now the event is held once and frames only within the outbox.
    assert!(
        peak < (switchboard_server::watchers::OUTBOX_BYTES + 48 * 1024 * 1024) as u64,
        "the daemon grew {peak} bytes for {} non-reading subscribers",
        held.len()
    );
    assert_eq!(daemon.watchers().subscribers(&id), 48);
    drop(held);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while daemon.watchers().subscribers(&id) > 0 || daemon.watchers().outbox_used() > 0 {
        assert!(tokio::time::Instant::now() < deadline, "closed subscribers kept their places");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_token_has_a_few_places_of_a_session() {
    let store: Arc<dyn Store> = Arc::new(switchboard_store::MemoryStore::new());
    let id = session_with_a_large_event(&store, 1024).await;
    let (address, _daemon) = serve(store, DaemonConfig::default(), Default::default()).await;
    let token = named_token(&address, "reader").await;
    let path = format!("/api/sessions/{id}/subscribe");
    let mut held = Vec::new();
    for _ in 0..switchboard_server::watchers::MAX_PER_TOKEN_PER_SESSION {
        let (status, stream) = non_reading_socket(&address, &path, &token).await;
        assert_eq!(status, 101);
        held.push(stream);
    }
    let (status, _) = non_reading_socket(&address, &path, &token).await;
    assert_eq!(status, 429, "past the token's places of the session");
    // The owner is never kept out by a named token.
    let (status, _owner) = non_reading_socket(&address, &path, TOKEN).await;
    assert_eq!(status, 101);
    health_within_a_second(&address).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_that_stops_reading_is_let_go_after_the_stall_limit() {
    let store: Arc<dyn Store> = Arc::new(switchboard_store::MemoryStore::new());
    // A session whose log is far more than the sockets' buffers hold.
    let id = session_with_a_large_event(&store, 1024).await;
    let more: Vec<EventRecord> = (4..=20_000u64)
        .map(|seq| EventRecord {
            session_id: id.clone(),
            seq,
            ts_ms: 0,
            dir: "from_cli".into(),
            kind: "line".into(),
            payload: serde_json::json!({"type": "padding", "text": "x".repeat(1000)}).to_string(),
        })
        .collect();
    store.append(&more).await.unwrap();
    let config =
        DaemonConfig { stall_limit: Some(Duration::from_millis(500)), ..Default::default() };
    let (address, daemon) = serve(store, config, Default::default()).await;
    // Taken before the upgrade: the daemon's stall clock cannot start earlier than this.
    let upgraded = std::time::Instant::now();
    let (status, mut stream) =
        non_reading_socket(&address, &format!("/api/sessions/{id}/subscribe"), TOKEN).await;
    assert_eq!(status, 101);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let gone = daemon.watchers().subscribers(&id) == 0;
        if gone {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "a subscriber that reads nothing was kept");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        upgraded.elapsed() >= Duration::from_millis(500),
        "let go only after the stall limit, not at once ({:?})",
        upgraded.elapsed()
    );
    assert_eq!(daemon.watchers().outbox_used(), 0);
    // Its socket is closed: reading it now ends (after what the buffers held).
    let mut sink = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut sink))
        .await
        .expect("the socket is closed")
        .ok();
    health_within_a_second(&address).await;
}

/// A subscriber's connection cut in the middle of a frame (a 1 MiB event half read, then a
/// reset): the daemon lets it go and holds nothing for it, and a subscriber that comes back
/// gets every event, the large one whole, once each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_cut_mid_frame_is_let_go_and_a_return_misses_nothing() {
    use futures::StreamExt as _;
    use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
    let store: Arc<dyn Store> = Arc::new(switchboard_store::MemoryStore::new());
    let id = session_with_a_large_event(&store, 1024 * 1024).await;
    let (address, daemon) = serve(store, DaemonConfig::default(), Default::default()).await;
    let path = format!("/api/sessions/{id}/subscribe");
    let (status, mut stream) = non_reading_socket(&address, &path, TOKEN).await;
    assert_eq!(status, 101);
    // 64 KiB in: past the first small frame, inside the large one.
    let mut part = vec![0u8; 64 * 1024];
    tokio::time::timeout(Duration::from_secs(30), stream.read_exact(&mut part))
        .await
        .expect("the frames begin within 30 s")
        .unwrap();
    assert_eq!(daemon.watchers().subscribers(&id), 1);
    // Cut: a reset, not a close.
    stream.set_zero_linger().unwrap();
    drop(stream);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while daemon.watchers().subscribers(&id) != 0 || daemon.watchers().outbox_used() != 0 {
        assert!(tokio::time::Instant::now() < deadline, "a cut subscriber is still held");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Back again: every event, whole, once.
    let mut request = format!("ws://{address}{path}?after=0").into_client_request().unwrap();
    request.headers_mut().insert("authorization", format!("Bearer {TOKEN}").parse().unwrap());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let (mut socket, _) =
        tokio::time::timeout_at(deadline, tokio_tungstenite::connect_async(request))
            .await
            .expect("the return connects within 30 s")
            .unwrap();
    let mut seen = Vec::new();
    while seen.len() < 3 {
        let frame = tokio::time::timeout_at(deadline, socket.next())
            .await
            .expect("the events come within 30 s")
            .unwrap()
            .unwrap();
        let text = frame.into_text().unwrap();
        let frame: serde_json::Value = serde_json::from_str(&text).unwrap();
        if frame["type"] == "event" {
            seen.push((frame["seq"].as_u64().unwrap(), text.len()));
        }
    }
    assert_eq!(seen.iter().map(|(seq, _)| *seq).collect::<Vec<_>>(), [1, 2, 3]);
    assert!(seen[1].1 > 1024 * 1024, "the large event arrives whole: {} bytes", seen[1].1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_token_has_a_limit_of_followers() {
    let store: Arc<dyn Store> = Arc::new(switchboard_store::MemoryStore::new());
    let (address, _daemon) = serve(store, DaemonConfig::default(), Default::default()).await;
    let token = named_token(&address, "watcher").await;
    let open = |token: String| {
        let address = address.clone();
        async move {
            let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
            let request = format!(
                "GET /api/events HTTP/1.1\r\nhost: {address}\r\nupgrade: websocket\r\nconnection: Upgrade\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\nauthorization: Bearer {token}\r\n\r\n"
            );
            stream.write_all(request.as_bytes()).await.unwrap();
            (read_head(&mut stream).await, stream)
        }
    };
    let mut held = Vec::new();
    for _ in 0..switchboard_server::watchers::MAX_PER_TOKEN {
        let (head, stream) = open(token.clone()).await;
        assert!(head.starts_with("HTTP/1.1 101"), "{head}");
        held.push(stream);
    }
    let (head, _) = open(token.clone()).await;
    assert!(head.starts_with("HTTP/1.1 429"), "{head}");
    // The daemon's own token is not held to a named token's limit.
    let (head, _owner) = open(TOKEN.to_owned()).await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    health_within_a_second(&address).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_max_running_a_start_is_refused_with_why() {
    use futures::StreamExt;
    let api =
        switchboard_testkit::FakeApi::start(switchboard_testkit::Scenario::new()).await.unwrap();
    let sandbox = switchboard_testkit::CliSandbox::new().unwrap();
    let store: Arc<dyn Store> = Arc::new(switchboard_store::MemoryStore::new());
    let server = super::Server::start_with(store, &api, &sandbox, |config| {
        config.placement.max_running = Some(2);
    })
    .await;
    // Two relay CLIs run (each a session of this daemon's), answering as CLIs do (initialize,
    // and the daemon's pings while they read).
    let mut readers = Vec::new();
    for _ in 0..2 {
        let cli = relay_cli_ready(&server).await;
        readers.push(tokio::spawn(async move {
            use futures::StreamExt as _;
            let mut cli = cli;
            while let Some(Ok(_)) = cli.next().await {}
        }));
    }
    let deadline = tokio::time::Instant::now() + super::WAIT;
    while server.daemon.running_count() < 2 {
        assert!(tokio::time::Instant::now() < deadline, "the relay sessions never ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A third session is refused, saying why, before any CLI starts.
    let (status, body) = server
        .post("/api/sessions", serde_json::json!({"cwd": sandbox.workdir(), "prompt": "hi"}))
        .await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "max_running", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("--max-running 2"), "{message}");
    // So is a third relay CLI: its socket is closed with the reason.
    let mut third = server.relay_cli().await;
    let closed = tokio::time::timeout(super::WAIT, async {
        loop {
            match third.next().await {
                Some(Ok(tokio_tungstenite::tungstenite::Message::Close(Some(close)))) => {
                    return close.reason.to_string()
                }
                Some(Ok(_)) => {}
                other => panic!("closed without a reason: {other:?}"),
            }
        }
    })
    .await
    .expect("the third relay CLI is told");
    assert!(closed.contains("max-running"), "{closed}");
    assert_eq!(server.daemon.running_count(), 2);
    for reader in readers {
        reader.abort();
    }
}

/// Every process's command line (`/proc/PID/cmdline`, readable by every local user), as text.
fn command_lines() -> Vec<String> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| {
            let entry = entry.ok()?;
            entry.file_name().to_str()?.parse::<u32>().ok()?;
            let line = std::fs::read(entry.path().join("cmdline")).ok()?;
            Some(String::from_utf8_lossy(&line).replace('\0', " "))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inline_mcp_configs_secrets_are_not_on_the_clis_command_line() {
    let api = switchboard_testkit::FakeApi::start(
        switchboard_testkit::Scenario::new().fallback("ready."),
    )
    .await
    .unwrap();
    let sandbox = switchboard_testkit::CliSandbox::new().unwrap();
    let store: Arc<dyn Store> = Arc::new(switchboard_store::MemoryStore::new());
    let server = super::Server::start(store, &api, &sandbox).await;
    let marker = format!("argv-secret-{}", std::process::id());
    let mcp = serde_json::json!({"mcpServers": {"search": {
        "command": "/bin/true", "env": {"API_KEY": marker}
    }}});
    let (status, created) = server
        .post(
            "/api/sessions",
            serde_json::json!({"cwd": sandbox.workdir(), "mcp_config": [mcp.to_string()], "prompt": "hi"}),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    let mut ws = server.ws(&format!("/api/sessions/{id}/subscribe?after=0")).await;
    // The CLI read the config (its init names the server) from its descriptor...
    let frames = ws.until(|frame| frame["event"]["line"]["subtype"] == "init").await;
    let init = &frames.last().unwrap()["event"]["line"];
    let servers = init["mcp_servers"].to_string();
    assert!(servers.contains("search"), "the CLI has the MCP server: {init}");
    // ...and no command line on the machine holds the secret, while the CLI's names it.
    let lines = command_lines();
    assert!(
        lines.iter().any(|line| line.contains("--mcp-config=/proc/self/fd/10")),
        "the CLI reads its config from a descriptor"
    );
    assert!(!lines.iter().any(|line| line.contains(&marker)), "a command line holds the secret");
    server.daemon.stop(&id, true).await.unwrap();
}

/// A relay CLI at `/` that has answered the daemon's `initialize`.
async fn relay_cli_ready(
    server: &super::Server,
) -> tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>> {
    use futures::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message as WsMessage;
    let mut cli = server.relay_cli().await;
    let deadline = tokio::time::Instant::now() + super::WAIT;
    let initialize = loop {
        let frame = tokio::time::timeout_at(deadline, cli.next()).await.expect("an initialize");
        match frame {
            Some(Ok(WsMessage::Text(text))) => {
                let frame: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
                if frame["request"]["subtype"] == "initialize" {
                    break frame;
                }
            }
            Some(Ok(_)) => {}
            other => panic!("the relay socket ended before initialize: {other:?}"),
        }
    };
    let answer = serde_json::json!({"type": "control_response", "response": {"subtype": "success",
        "request_id": initialize["request_id"], "response": {}}});
    cli.send(WsMessage::Text(format!("{answer}\n").into())).await.unwrap();
    cli
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_connection_cannot_flood_sessions_or_take_anothers_prompt() {
    use futures::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message as WsMessage;
    let api =
        switchboard_testkit::FakeApi::start(switchboard_testkit::Scenario::new()).await.unwrap();
    let sandbox = switchboard_testkit::CliSandbox::new().unwrap();
    let store: Arc<dyn Store> = Arc::new(switchboard_store::MemoryStore::new());
    let server = super::Server::start(store, &api, &sandbox).await;
    let mut frontend = server.ws(&format!("/ws?token={}", super::TOKEN)).await;
    let cli = relay_cli_ready(&server).await;
    let (mut cli, mut incoming) = cli.split();
    let reader = tokio::spawn(async move { while let Some(Ok(_)) = incoming.next().await {} });
    // One socket announces 40 Claude sessions at once, a line in each.
    for at in 0..40 {
        let session = format!("flood-{at}");
        let init = serde_json::json!({"type": "system", "subtype": "init", "session_id": session,
            "cwd": "/tmp/relayed", "model": "claude-opus-5-5", "permissionMode": "default",
            "tools": [], "uuid": format!("init-{at}")});
        let text = serde_json::json!({"type": "assistant", "session_id": session,
            "parent_tool_use_id": null, "uuid": format!("text-{at}"), "message": {
            "id": format!("m-{at}"), "role": "assistant",
            "content": [{"type": "text", "text": format!("line {at}")}]}});
        cli.send(WsMessage::Text(format!("{init}\n{text}\n").into())).await.unwrap();
    }
    frontend.until(|frame| frame["uuid"] == "text-39").await;
    let (_, sessions) = server.get("/api/sessions").await;
    let relays: Vec<&serde_json::Value> = sessions
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["config"]["transport"] == "relay")
        .collect();
    // At most RELAY_ROTATIONS_PER_SECOND rotations in the second it took (and never more than
    // MAX_RELAY_SESSIONS), not 40 sessions.
    assert!(
        relays.len() <= switchboard_server::relay_limits::MAX_RELAY_SESSIONS,
        "{} sessions from one socket",
        relays.len()
    );
    assert!(relays.len() < 40, "{} sessions from one socket", relays.len());
    // Every line is stored in one of them.
    let mut texts = Vec::new();
    for session in &relays {
        let (_, events) =
            server.get(&format!("/api/sessions/{}/events", session["id"].as_str().unwrap())).await;
        for event in events.as_array().unwrap() {
            if let Some(text) = event["event"]["line"]["message"]["content"][0]["text"].as_str() {
                texts.push(text.to_owned());
            }
        }
    }
    texts.sort();
    let mut expected: Vec<String> = (0..40).map(|at| format!("line {at}")).collect();
    expected.sort();
    assert_eq!(texts, expected, "no line lost");

    // With a second CLI connected, a prompt that names no session is refused, saying why.
    let _second = relay_cli_ready(&server).await;
    let deadline = tokio::time::Instant::now() + super::WAIT;
    while server.daemon.relay_handles().len() < 2 {
        assert!(tokio::time::Instant::now() < deadline, "the second CLI never ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    frontend
        .socket
        .send(WsMessage::Text(
            serde_json::json!({"type": "user", "message": {"role": "user", "content": "for whom?"},
                "parent_tool_use_id": null, "session_id": ""})
            .to_string()
            .into(),
        ))
        .await
        .unwrap();
    frontend
        .until(|frame| {
            frame["type"] == "status"
                && frame["text"]
                    .as_str()
                    .is_some_and(|text| text.contains("2 claude codes are connected"))
        })
        .await;
    reader.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_name_what_the_route_takes() {
    let api =
        switchboard_testkit::FakeApi::start(switchboard_testkit::Scenario::new()).await.unwrap();
    let sandbox = switchboard_testkit::CliSandbox::new().unwrap();
    let store: Arc<dyn Store> = Arc::new(switchboard_store::MemoryStore::new());
    let server = super::Server::start(store, &api, &sandbox).await;
    // The relay's `/` takes its token in the header only, and says so (no `?token=`).
    let refused = crate::http_client()
        .get(format!("{}/", server.base))
        .header("connection", "upgrade")
        .header("upgrade", "websocket")
        .header("sec-websocket-version", "13")
        .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
        .header("authorization", "Bearer wrong")
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status().as_u16(), 401);
    let body: serde_json::Value = refused.json().await.unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("ingress token") && !message.contains("?token="), "{message}");
    // A push to a remote that is not a name is a bad request, not a worktree's refusal.
    let (status, body) = server
        .post(
            "/api/sessions/no-such-session/push",
            serde_json::json!({"remote": "--upload-pack=x"}),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("remote's name"), "{body}");
}
