//! The daemon over HTTP and WebSocket, running the real CLI against the fake API.

use std::sync::Arc;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use switchboard_server::{router, AuthConfig, Daemon, DaemonConfig};
use switchboard_store::{SqliteStore, Store};
use switchboard_testkit::{real_cli, CliSandbox, CliVersion, FakeApi, Reply, Scenario};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message as WsMessage;

mod audit;
mod budget;
mod bus;
mod cli_now;
mod drops;
mod grpc;
mod hostile;
mod links;
mod matrix;
mod mcp;
mod metrics;
mod notify;
mod origins;
mod parked;
mod push;
mod schedules;
mod scopes;
mod search;
mod seed;
mod terminal;
mod traces;
mod trial;
mod ui;
mod unsettled;
mod warm;
mod workbench;
mod workbench_ui;
mod worktree;

const TOKEN: &str = "test-token-0123456789";
const WAIT: Duration = Duration::from_secs(90);

/// An HTTP client whose every request has a deadline ([`WAIT`]): a daemon that stops answering
/// fails the test rather than hanging it.
fn http_client() -> reqwest::Client {
    reqwest::Client::builder().timeout(WAIT).build().unwrap()
}

struct Server {
    base: String,
    daemon: Arc<Daemon>,
    task: tokio::task::JoinHandle<()>,
}

impl Server {
    async fn start(store: Arc<dyn Store>, api: &FakeApi, sandbox: &CliSandbox) -> Server {
        Self::start_with(store, api, sandbox, |_| {}).await
    }

    /// With `configure` changing the daemon's config first. (The ping is the daemon's default,
    /// which a CPU-starved CLI on a busy CI machine still answers in time.)
    async fn start_with(
        store: Arc<dyn Store>,
        api: &FakeApi,
        sandbox: &CliSandbox,
        configure: impl FnOnce(&mut DaemonConfig),
    ) -> Server {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let config = DaemonConfig {
            claude: Some(real_cli(CliVersion::V2_1_330)),
            default_policy: None,
            external_policy: None,
            env: sandbox.env(&api.base_url()).into_iter().collect(),
            clear_env: true,
            transcripts: Some(switchboard_server::transcripts::Transcripts::new(
                sandbox.home().join(".claude"),
            )),
            ingress_base: Some(format!("ws://{address}/v1/sessions/ws/")),
            ingress_token: Some(TOKEN.to_owned()),
            ping_interval: None,
            allowed_env: Vec::new(),
            runs_file: None,
            // Nothing is kept there by the test daemon; the Files view must not show it.
            data_dir: Some(sandbox.home().join(".local/share/switchboard")),
            store_retry_limit: None,
            stall_limit: None,
            warm: Vec::new(),
            links: switchboard_server::links::LinkConfig {
                key: None,
                public_url: Some(format!("http://{address}")),
            },
            notify: Default::default(),
            budget: Default::default(),
            node: None,
            traces: None,
            bus: None,
            placement: Default::default(),
            clock: Default::default(),
        };
        let mut config = config;
        configure(&mut config);
        let daemon = Daemon::open(store, config).await.unwrap();
        let auth = AuthConfig::with_token(TOKEN);
        let base = format!("http://{address}");
        let served = daemon.clone();
        let task = tokio::spawn(async move {
            switchboard_server::serve(listener, served, auth, std::future::pending())
                .await
                .unwrap();
        });
        Server { base, daemon, task }
    }

    /// An HTTP client whose every request has one deadline ([`WAIT`]).
    fn client(&self) -> reqwest::Client {
        http_client()
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        self.request_as(TOKEN, reqwest::Method::GET, path, None).await
    }

    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.send(reqwest::Method::POST, path, body).await
    }

    async fn patch(&self, path: &str, body: Value) -> (u16, Value) {
        self.send(reqwest::Method::PATCH, path, body).await
    }

    async fn send(&self, method: reqwest::Method, path: &str, body: Value) -> (u16, Value) {
        self.request_as(TOKEN, method, path, Some(body)).await
    }

    /// A request with `token`: its status and JSON body (`null` when it has none).
    async fn request_as(
        &self,
        token: &str,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut request =
            self.client().request(method, format!("{}{path}", self.base)).bearer_auth(token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        (response.status().as_u16(), response.json().await.unwrap_or(Value::Null))
    }

    /// A WebSocket client whose socket has a small receive buffer (4 KiB), so that what it
    /// does not read stays with the daemon rather than in the kernel.
    async fn ws_small_buffer(&self, path: &str) -> Ws {
        let url = format!("{}{path}", self.base.replace("http://", "ws://"));
        let mut request = url.into_client_request().unwrap();
        request.headers_mut().insert("authorization", format!("Bearer {TOKEN}").parse().unwrap());
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        let address = self.base.trim_start_matches("http://").parse().unwrap();
        let stream = socket.connect(address).await.unwrap();
        let stream = tokio_tungstenite::MaybeTlsStream::Plain(stream);
        let (socket, _) = tokio_tungstenite::client_async(request, stream).await.unwrap();
        Ws { socket }
    }

    /// Creates a session from `body` (checked made) and follows its events from the start.
    async fn open_session(&self, body: Value) -> (String, Ws) {
        let (status, session) = self.post("/api/sessions", body).await;
        assert_eq!(status, 201, "{session}");
        let id = session["id"].as_str().unwrap().to_owned();
        let ws = self.ws(&format!("/api/sessions/{id}/subscribe?after=0")).await;
        (id, ws)
    }

    async fn ws(&self, path: &str) -> Ws {
        self.ws_as(TOKEN, path).await
    }

    /// A WebSocket at `path`, opened with `token`.
    async fn ws_as(&self, token: &str, path: &str) -> Ws {
        let url = format!("{}{path}", self.base.replace("http://", "ws://"));
        let mut request = url.into_client_request().unwrap();
        request.headers_mut().insert("authorization", format!("Bearer {token}").parse().unwrap());
        let (socket, _) = tokio::time::timeout(WAIT, tokio_tungstenite::connect_async(request))
            .await
            .unwrap_or_else(|_| panic!("no WebSocket handshake at {path} in {WAIT:?}"))
            .unwrap();
        Ws { socket }
    }

    /// A raw WebSocket client at the relay's CLI endpoint `/`, with the token.
    async fn relay_cli(
        &self,
    ) -> tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>
    {
        let root = format!("{}/", self.base.replace("http://", "ws://"));
        let mut request = root.as_str().into_client_request().unwrap();
        request.headers_mut().insert("authorization", format!("Bearer {TOKEN}").parse().unwrap());
        tokio::time::timeout(WAIT, tokio_tungstenite::connect_async(request))
            .await
            .expect("the relay's CLI endpoint answers the handshake")
            .unwrap()
            .0
    }

    /// Stops every session (within [`WAIT`]: a stop that hangs fails the test) and the server.
    async fn stop(self) {
        tokio::time::timeout(WAIT, self.daemon.stop_all())
            .await
            .expect("every session stops within the deadline");
        self.task.abort();
    }
}

struct Ws {
    socket: tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
}

impl Ws {
    async fn next(&mut self) -> Value {
        self.next_by(tokio::time::Instant::now() + WAIT, &[]).await
    }

    /// The next text frame, by `deadline`: past it, or when the socket ends, the test fails
    /// naming the last frames `seen` before.
    async fn next_by(&mut self, deadline: tokio::time::Instant, seen: &[Value]) -> Value {
        let last = || {
            let from = seen.len().saturating_sub(3);
            serde_json::to_string(&seen[from..]).unwrap_or_default()
        };
        loop {
            let frame = match tokio::time::timeout_at(deadline, self.socket.next()).await {
                Ok(Some(Ok(frame))) => frame,
                Ok(other) => panic!("the socket ended ({other:?}); the last frames: {}", last()),
                Err(_) => panic!("no frame in time; the last frames: {}", last()),
            };
            if let WsMessage::Text(text) = frame {
                return serde_json::from_str(&text).unwrap();
            }
        }
    }

    /// Frames until one satisfies `predicate` (included), all within one [`WAIT`].
    async fn until(&mut self, predicate: impl Fn(&Value) -> bool) -> Vec<Value> {
        let deadline = tokio::time::Instant::now() + WAIT;
        let mut frames = Vec::new();
        loop {
            let frame = self.next_by(deadline, &frames).await;
            let done = predicate(&frame);
            frames.push(frame);
            if done {
                return frames;
            }
        }
    }

    async fn send(&mut self, frame: Value) {
        self.socket.send(WsMessage::Text(frame.to_string().into())).await.unwrap();
    }
}

fn is_result(frame: &Value) -> bool {
    frame["event"]["event"] == "line" && frame["event"]["line"]["type"] == "result"
}

fn seqs(frames: &[Value]) -> Vec<u64> {
    frames.iter().filter_map(|frame| frame["seq"].as_u64()).collect()
}

fn touch_and_ls(file: &str) -> Value {
    json!({"command": format!("touch {file} && ls"), "description": "create a file"})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_streams_and_a_tool_is_approved_over_the_api() {
    let api = FakeApi::start(
        Scenario::new()
            .reply(Reply::tool_use("Bash", touch_and_ls("approved.txt")).when_prompt("RUN"))
            .reply(Reply::text("All done.").when_tool_result()),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("db")).unwrap());
    let server = Server::start(store, &api, &sandbox).await;

    let (status, session) =
        server.post("/api/sessions", json!({"cwd": sandbox.workdir(), "prompt": "RUN it"})).await;
    assert_eq!(status, 201, "{session}");
    let id = session["id"].as_str().unwrap().to_owned();
    assert_eq!(session["title"], "RUN it");

    let mut ws = server.ws(&format!("/api/sessions/{id}/subscribe?after=0")).await;
    let frames = ws.until(|frame| frame["event"]["event"] == "permission_requested").await;
    let request_id = frames.last().unwrap()["event"]["request_id"].as_str().unwrap().to_owned();
    assert_eq!(seqs(&frames), (1..=frames.len() as u64).collect::<Vec<_>>(), "gap-free from 1");

    let (_, view) = server.get(&format!("/api/sessions/{id}")).await;
    assert_eq!(view["state"], "awaiting_permission");
    assert_eq!(view["pending_permissions"][0]["request_id"], request_id.as_str());
    let (status, pending) = server.get(&format!("/api/sessions/{id}/permissions")).await;
    assert_eq!(status, 200);
    assert_eq!(pending.as_array().unwrap().len(), 1);

    let (status, answer) = server
        .post(
            &format!("/api/sessions/{id}/permissions/{request_id}"),
            json!({"behavior": "allow", "by": "alice"}),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    let (status, again) = server
        .post(&format!("/api/sessions/{id}/permissions/{request_id}"), json!({"behavior": "deny"}))
        .await;
    assert_eq!(status, 409, "{again}");
    assert_eq!(again["error"]["code"], "already_answered");

    let frames = ws.until(is_result).await;
    assert!(frames.iter().any(|f| f["event"]["event"] == "permission_decided"
        && f["event"]["by"]["who"] == "alice, token admin (api)"));
    assert!(sandbox.file("approved.txt").exists(), "the approved tool ran");

    // The same history over REST.
    let (_, events) = server.get(&format!("/api/sessions/{id}/events?after=0&limit=5000")).await;
    let events = events.as_array().unwrap();
    assert!(events.iter().any(is_result));
    assert!(events.iter().all(|e| e["seq"].is_u64() && e["ts"].is_u64() && e["dir"].is_string()));

    // Steering: a second message over the socket, then stop the session.
    ws.send(json!({"type": "user_message", "content": "RUN again"})).await;
    let ack = ws.until(|frame| frame["type"] == "ack" || frame["type"] == "error").await;
    assert_eq!(ack.last().unwrap()["type"], "ack");
    // Bad frames get an error frame naming the problem; the socket stays open.
    ws.send(json!({"type": "bogus"})).await;
    let error = ws.until(|frame| frame["type"] == "error").await;
    assert!(error.last().unwrap()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("unreadable frame"));
    ws.send(json!({"type": "permission_response", "request_id": request_id, "behavior": "allow", "colour": 1})).await;
    let error = ws.until(|frame| frame["type"] == "error").await;
    assert!(
        error.last().unwrap()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown field `colour`"),
        "{:?}",
        error.last()
    );
    ws.send(json!({"type": "permission_response", "request_id": request_id, "behavior": "allow"}))
        .await;
    let error = ws.until(|frame| frame["type"] == "error").await;
    assert_eq!(error.last().unwrap()["error"]["code"], "already_answered");
    let response = server
        .client()
        .delete(format!("{}/api/sessions/{id}", server.base))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let (_, view) = server.get(&format!("/api/sessions/{id}")).await;
    assert_eq!(view["state"], "exited");
    assert_eq!(view["running"], false);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribers_see_identical_gap_free_sequences_and_a_restart_keeps_everything() {
    let api = FakeApi::start(
        Scenario::new()
            .reply(Reply::text("one two three four five six seven eight nine ten").times(3)),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let sqlite = Arc::new(SqliteStore::open(&db).unwrap());
    let store: Arc<dyn Store> = sqlite.clone();
    let server = Server::start(store.clone(), &api, &sandbox).await;

    let (_, session) =
        server.post("/api/sessions", json!({"cwd": sandbox.workdir(), "prompt": "count"})).await;
    let id = session["id"].as_str().unwrap().to_owned();
    let mut first = server.ws(&format!("/api/sessions/{id}/subscribe")).await;
    let mut second = server.ws(&format!("/api/sessions/{id}/subscribe?after=0")).await;
    let a = first.until(is_result).await;
    let b = second.until(is_result).await;
    assert_eq!(seqs(&a), seqs(&b));
    assert_eq!(seqs(&a), (1..=a.len() as u64).collect::<Vec<_>>());

    // A subscriber that drops and reconnects from its last seq misses nothing and repeats
    // nothing, even while a new turn streams.
    let mut third = server.ws(&format!("/api/sessions/{id}/subscribe?after=0")).await;
    let early = vec![third.next().await, third.next().await, third.next().await];
    drop(third);
    let (status, _) = server
        .post(&format!("/api/sessions/{id}/messages"), json!({"content": "count again"}))
        .await;
    assert_eq!(status, 202);
    let last = early.last().unwrap()["seq"].as_u64().unwrap();
    let mut resumed = server.ws(&format!("/api/sessions/{id}/subscribe?after={last}")).await;
    let mut rest = Vec::new();
    // Until the second result.
    let mut results = 0;
    while results < 2 {
        let frame = resumed.next().await;
        if is_result(&frame) {
            results += 1;
        }
        rest.push(frame);
    }
    let mut all = seqs(&early);
    all.extend(seqs(&rest));
    assert_eq!(
        all,
        (1..=all.len() as u64).collect::<Vec<_>>(),
        "reconnected without gap or duplicate"
    );
    let total = all.len() as u64;

    // Restart: the daemon stops (its sessions end and their last events are stored).
    server.task.abort();
    server.daemon.stop_all().await;
    drop(server);
    drop(store);
    // As the old process's exit would: its store is closed (the journal folded, the lock
    // released) even if something still holds it.
    sqlite.close();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&db).unwrap());
    let server = Server::start(store, &api, &sandbox).await;
    let (_, events) = server.get(&format!("/api/sessions/{id}/events")).await;
    let events = events.as_array().unwrap();
    assert!(events.len() as u64 >= total, "the whole history is still there");
    assert_eq!(seqs(events), (1..=events.len() as u64).collect::<Vec<_>>());
    let (_, view) = server.get(&format!("/api/sessions/{id}")).await;
    assert_eq!(view["state"], "exited", "{view}");
    assert!(view["claude_session_id"].is_string());

    // Resume continues the same log; of two resumes asked at once, one starts the CLI and the
    // other is told it runs.
    let resume = format!("/api/sessions/{id}/resume");
    let ((first, view), (second, other)) =
        tokio::join!(server.post(&resume, json!({})), server.post(&resume, json!({})));
    let (view, refused) =
        if first == 200 { (view, (second, other)) } else { (other, (first, view)) };
    assert_eq!(view["id"], id.as_str(), "{view}");
    assert_eq!(refused.0, 409, "{}", refused.1);
    assert_eq!(refused.1["error"]["code"], "already_running", "{}", refused.1);
    assert_eq!(server.daemon.running_count(), 1, "one CLI");
    let (status, _) =
        server.post(&format!("/api/sessions/{id}/messages"), json!({"content": "and again"})).await;
    assert_eq!(status, 202);
    let after = events.len() as u64;
    let mut ws = server.ws(&format!("/api/sessions/{id}/subscribe?after={after}")).await;
    let frames = ws.until(is_result).await;
    assert_eq!(frames[0]["seq"].as_u64(), Some(after + 1), "the log continues where it stopped");
    server.stop().await;
}

#[tokio::test]
async fn requests_without_the_token_or_from_a_foreign_origin_are_refused() {
    let api = FakeApi::start(Scenario::new()).await.unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let store: Arc<dyn Store> = Arc::new(switchboard_store::MemoryStore::new());
    let server = Server::start(store, &api, &sandbox).await;
    let client = server.client();
    let url = format!("{}/api/sessions", server.base);
    assert_eq!(client.get(&url).send().await.unwrap().status().as_u16(), 401);
    assert_eq!(client.get(&url).bearer_auth("wrong").send().await.unwrap().status().as_u16(), 401);
    let body: Value =
        client.get(&url).bearer_auth("wrong").send().await.unwrap().json().await.unwrap();
    assert_eq!(body["error"]["code"], "unauthorized");
    assert_eq!(
        client.get(format!("{url}?token={TOKEN}")).send().await.unwrap().status().as_u16(),
        200
    );
    let cookie = format!("switchboard_token={TOKEN}");
    assert_eq!(
        client.get(&url).header("cookie", cookie).send().await.unwrap().status().as_u16(),
        200
    );
    assert_eq!(
        client.get(format!("{}/api/health", server.base)).send().await.unwrap().status().as_u16(),
        401,
        "every endpoint"
    );

    // A browser WebSocket from another origin is refused even with the token.
    let ws_url = format!("{}/api/events?token={TOKEN}", server.base.replace("http://", "ws://"));
    let mut request = ws_url.as_str().into_client_request().unwrap();
    request.headers_mut().insert("origin", "http://evil.example".parse().unwrap());
    let error = tokio_tungstenite::connect_async(request).await.unwrap_err();
    assert!(error.to_string().contains("403"), "{error}");
    let mut request = ws_url.as_str().into_client_request().unwrap();
    request.headers_mut().insert("origin", server.base.parse().unwrap());
    assert!(tokio_tungstenite::connect_async(request).await.is_ok(), "same origin is fine");
    server.stop().await;
}

#[tokio::test]
async fn malformed_input_gets_a_4xx_that_names_the_problem() {
    let api = FakeApi::start(Scenario::new()).await.unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let store: Arc<dyn Store> = Arc::new(switchboard_store::MemoryStore::new());
    let server = Server::start(store, &api, &sandbox).await;
    let post_raw = |body: &'static str| {
        server
            .client()
            .post(format!("{}/api/sessions", server.base))
            .bearer_auth(TOKEN)
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let response = post_raw("{not json").await.unwrap();
    assert_eq!(response.status().as_u16(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "invalid_request");
    let response = post_raw(r#"{"cwd": "/tmp", "colour": "red"}"#).await.unwrap();
    assert!(response.json::<Value>().await.unwrap()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("unknown field `colour`"));
    let (status, body) = server.post("/api/sessions", json!({"prompt": "no cwd"})).await;
    assert_eq!(status, 400);
    assert!(body["error"]["message"].as_str().unwrap().contains("cwd"), "{body}");
    let (status, body) = server.post("/api/sessions", json!({"cwd": "relative/dir"})).await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = server
        .post(
            "/api/sessions",
            json!({"cwd": sandbox.workdir(), "policy": "[permissions]\nallow = [\"Bash(\"]"}),
        )
        .await;
    assert_eq!(status, 400);
    assert!(body["error"]["message"].as_str().unwrap().contains("Bash("), "{body}");
    let (status, body) = server
        .post("/api/sessions", json!({"cwd": sandbox.workdir(), "permission_mode": "yolo"}))
        .await;
    assert_eq!(status, 400);
    assert!(body["error"]["message"].as_str().unwrap().contains("yolo"));
    let (status, _) = server.get("/api/sessions/nope").await;
    assert_eq!(status, 404);
    // An unknown session is 404 everywhere, not 409 "not running".
    for (path, body) in [
        ("/api/sessions/nope/messages", json!({"content": "hi"})),
        ("/api/sessions/nope/interrupt", json!({})),
        ("/api/sessions/nope/model", json!({"model": "opus"})),
        ("/api/sessions/nope/permission-mode", json!({"mode": "plan"})),
        ("/api/sessions/nope/permissions/r1", json!({"behavior": "allow"})),
    ] {
        let (status, answer) = server.post(path, body).await;
        assert_eq!(status, 404, "{path}: {answer}");
        assert_eq!(answer["error"]["code"], "not_found", "{path}");
    }
    // One that exists but does not run is 409.
    let stopped = switchboard_store::SessionRecord {
        archived: false,
        node: None,
        id: "stopped".into(),
        claude_session_id: None,
        cwd: "/tmp".into(),
        model: None,
        permission_mode: None,
        state: switchboard_store::RecordState::Exited,
        title: None,
        cost_usd: 0.0,
        spent_usd: 0.0,
        created_ms: 1,
        updated_ms: 1,
        launch: Default::default(),
    };
    server.daemon.store().create_session(&stopped).await.unwrap();
    let (status, answer) =
        server.post("/api/sessions/stopped/messages", json!({"content": "hi"})).await;
    assert_eq!((status, answer["error"]["code"].as_str()), (409, Some("not_running")));
    // Paging near 2^64 does not wrap around to the start of the log.
    let events: Vec<switchboard_store::EventRecord> = (1..=3)
        .map(|seq| switchboard_store::EventRecord {
            session_id: "stopped".into(),
            seq,
            ts_ms: 1,
            dir: "switchboard".into(),
            kind: "stderr".into(),
            payload: json!({"event": "stderr", "text": "x"}).to_string(),
        })
        .collect();
    server.daemon.store().append(&events).await.unwrap();
    for after in [u64::MAX, u64::MAX - 1, 1 << 63, (1 << 63) - 1] {
        let (status, page) =
            server.get(&format!("/api/sessions/stopped/events?after={after}")).await;
        assert_eq!((status, page), (200, json!([])), "after={after}");
    }
    let (_, page) = server.get("/api/sessions/stopped/events?after=1").await;
    assert_eq!(page.as_array().unwrap().len(), 2);
    // A subscriber from near the end of the numbers gets no history and a working socket (no
    // `after + 1` overflows): a frame it sends is answered.
    for after in [u64::MAX, (1 << 63) - 1] {
        let mut ws = server.ws(&format!("/api/sessions/stopped/subscribe?after={after}")).await;
        ws.send(json!({"type": "interrupt"})).await;
        let frames = ws.until(|frame| frame["type"] == "error" || frame["type"] == "ack").await;
        assert!(frames.iter().all(|frame| frame["type"] != "event"), "after={after}: {frames:?}");
    }
    let (status, _) = server.get("/api/no/such/thing").await;
    assert_eq!(status, 404);
    // One error shape everywhere: a bad query string, a wrong method, a plain request to a
    // WebSocket endpoint, the relay's own endpoints.
    let (status, body) = server.get("/api/sessions/stopped/events?after=soon").await;
    assert_eq!((status, body["error"]["code"].as_str()), (400, Some("invalid_request")), "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("query string"), "{body}");
    let wrong_method = server
        .client()
        .delete(format!("{}/api/health", server.base))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(wrong_method.status().as_u16(), 405);
    let body: Value = wrong_method.json().await.unwrap();
    assert_eq!(body["error"]["code"], "method_not_allowed");
    let (status, body) = server.get("/api/events").await;
    assert_eq!((status, body["error"]["code"].as_str()), (426, Some("upgrade_required")), "{body}");
    let put_root = server.client().put(format!("{}/", server.base)).send().await.unwrap();
    assert_eq!(put_root.status().as_u16(), 405);
    assert_eq!(put_root.json::<Value>().await.unwrap()["error"]["code"], "method_not_allowed");
    let huge = "x".repeat(20 * 1024 * 1024);
    let response = server
        .client()
        .post(format!("{}/api/sessions", server.base))
        .bearer_auth(TOKEN)
        .json(&json!({"cwd": huge}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 413);
    server.stop().await;
}

#[tokio::test]
async fn hostile_create_requests_are_refused_quickly_without_echoing_files() {
    let api = FakeApi::start(Scenario::new()).await.unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let store: Arc<dyn Store> = Arc::new(switchboard_store::MemoryStore::new());
    let server = Server::start(store, &api, &sandbox).await;
    let create = |extra: Value| {
        let mut body = json!({"cwd": sandbox.workdir()});
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        server.post("/api/sessions", body)
    };
    let refused = |(status, body): (u16, Value), needle: &str| {
        assert_eq!(status, 400, "{body}");
        let message = body["error"]["message"].as_str().unwrap().to_owned();
        assert!(message.contains(needle), "{message:?} should name {needle:?}");
        message
    };
    refused(create(json!({"prompt": ""})).await, "prompt is empty");
    // Environment values are secrets: kept for a resume, never shown to a client.
    let mcp = json!({"mcpServers": {"search": {"command": "x", "env": {"API_KEY": "s3cr3t-mcp"}, "headers": {"authorization": "Bearer s3cr3t-header"}}}});
    let (status, created) = create(json!({
        "env": {"SERVICE_TOKEN": "s3cr3t-value"},
        "mcp_config": [mcp.to_string()],
        "claude": "/bin/true",
        "prompt": "a first prompt",
    }))
    .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["config"]["env"]["SERVICE_TOKEN"], "(hidden)", "{created}");
    assert!(!created.to_string().contains("s3cr3t"), "{created}");
    assert!(created.to_string().contains("API_KEY"), "names stay: {created}");
    let (_, listed) = server.get("/api/sessions").await;
    assert!(!listed.to_string().contains("s3cr3t"), "{listed}");
    let stored = server.daemon.store().list_sessions().await.unwrap();
    assert_eq!(stored[0].launch.env["SERVICE_TOKEN"], "s3cr3t-value", "kept for a resume");
    // What is kept is how to launch the CLI again, not the request: no first prompt, no
    // session to resume or fork.
    let kept = serde_json::to_value(&stored[0].launch).unwrap();
    let kept: Vec<&String> = kept.as_object().unwrap().keys().collect();
    for once in ["prompt", "resume", "fork", "resume_at"] {
        assert!(!kept.iter().any(|key| *key == once), "{once} is kept: {kept:?}");
    }
    server.daemon.stop(&stored[0].id, true).await.unwrap();
    refused(create(json!({"prompt": "  \n "})).await, "prompt is empty");
    // Environment: names must be names; loader variables need the daemon's consent.
    refused(create(json!({"env": {"": "x"}})).await, "not valid");
    refused(create(json!({"env": {"A=B": "x"}})).await, "not valid");
    refused(create(json!({"env": {"LD_PRELOAD": "/tmp/evil.so"}})).await, "--allow-env LD_PRELOAD");
    refused(create(json!({"env": {"LD_AUDIT": "/tmp/evil.so"}})).await, "LD_AUDIT");
    refused(create(json!({"env": {"NODE_OPTIONS": "--require /tmp/x.js"}})).await, "NODE_OPTIONS");
    // Policy files: devices and pipes are refused without being read (a read of /dev/zero
    // never ends; a pipe with no writer blocks whoever opens it).
    refused(create(json!({"policy": "/dev/zero"})).await, "not a regular file");
    let fifo = sandbox.workdir().join("policy.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    refused(create(json!({"policy": fifo.display().to_string()})).await, "not a regular file");
    let big = sandbox.workdir().join("big.toml");
    std::fs::write(&big, "#".repeat(2 * 1024 * 1024)).unwrap();
    refused(create(json!({"policy": big.display().to_string()})).await, "larger than 1024 KiB");
    // A file that is not a policy: the error says where, never what.
    let secret = sandbox.workdir().join("secret.txt");
    std::fs::write(&secret, "hunter2-secret-line\nmore secret words\n").unwrap();
    let message = refused(create(json!({"policy": secret.display().to_string()})).await, "line 1");
    assert!(!message.contains("hunter2") && !message.contains("secret words"), "{message}");
    let cmdline = refused(create(json!({"policy": "/proc/self/cmdline"})).await, "cmdline");
    assert!(!cmdline.contains("--"), "nothing of the daemon's command line: {cmdline}");
    refused(create(json!({"policy": "/no/such/policy.toml"})).await, "not found");
    // A CLI version: this daemon's, or refused; never with a program of its own.
    refused(create(json!({"cli_version": "2.1.37"})).await, "runs Claude Code 2.1.330, not 2.1.37");
    refused(create(json!({"cli_version": "latest"})).await, "not a version");
    refused(create(json!({"cli_version": "2.1.330", "claude": "/bin/true"})).await, "not both");
    refused(create(json!({"node": "elsewhere"})).await, "shares no bus");
    let (status, created) = create(json!({"cli_version": "2.1.330"})).await;
    assert_eq!(status, 201, "{created}");
    server.daemon.stop(created["id"].as_str().unwrap(), true).await.unwrap();
    // Nothing was created by any of these.
    let (_, sessions) = server.get("/api/sessions").await;
    assert_eq!(sessions, json!([]));
    server.stop().await;
}

#[tokio::test]
async fn without_auth_the_relay_socket_refuses_other_sites() {
    let store: Arc<dyn Store> = Arc::new(switchboard_store::MemoryStore::new());
    let daemon = Daemon::open(store, DaemonConfig::default()).await.unwrap();
    let app = router(daemon.clone(), AuthConfig::no_auth());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let task = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let upgrade = |headers: &[(&str, &str)]| {
        let mut request = format!("ws://{address}/").into_client_request().unwrap();
        for (name, value) in headers {
            request.headers_mut().insert(
                axum::http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
        }
        tokio_tungstenite::connect_async(request)
    };
    // A cross-site page (a browser always names its origin) and a rebound host name.
    let error = upgrade(&[("origin", "http://evil.example")]).await.unwrap_err();
    assert!(error.to_string().contains("403"), "{error}");
    let error = upgrade(&[("host", "evil.example:80")]).await.unwrap_err();
    assert!(error.to_string().contains("403"), "{error}");
    let page = crate::http_client()
        .get(format!("http://{address}/"))
        .header("host", "evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(page.status().as_u16(), 403, "the page too");
    assert!(
        daemon.store().list_sessions().await.unwrap().is_empty(),
        "a refused socket made no session"
    );
    // A CLI (no Origin) on a loopback name still connects.
    let (mut cli, _) = upgrade(&[]).await.unwrap();
    cli.close(None).await.unwrap();
    assert!(daemon.store().list_sessions().await.unwrap().len() <= 1);
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_feed_reports_session_changes() {
    let api = FakeApi::start(Scenario::new().reply(Reply::text("hi"))).await.unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let store: Arc<dyn Store> = Arc::new(switchboard_store::MemoryStore::new());
    let server = Server::start(store, &api, &sandbox).await;
    let mut feed = server.ws("/api/events").await;
    let (_, session) =
        server.post("/api/sessions", json!({"cwd": sandbox.workdir(), "prompt": "hello"})).await;
    let id = session["id"].as_str().unwrap();
    let frames =
        feed.until(|frame| frame["event"] == "session_changed" && frame["state"] == "idle").await;
    assert!(frames.iter().any(|f| f["event"] == "session_created" && f["session"]["id"] == id));
    assert!(frames.iter().all(|f| f["event"] != "session_changed" || f["session_id"] == id));
    assert!(frames.last().unwrap()["cost_usd"].as_f64().unwrap() > 0.0);
    server.stop().await;
}

/// Every route exists (answers something other than the fallback's 404 "no such endpoint")
/// and is documented in docs/api.md.
#[tokio::test]
async fn every_route_is_served_and_documented() {
    let docs =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/api.md")).unwrap();
    let api = FakeApi::start(Scenario::new()).await.unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let store: Arc<dyn Store> = Arc::new(switchboard_store::MemoryStore::new());
    let server = Server::start(store, &api, &sandbox).await;
    // Both ways: every route is documented, and every documented route exists.
    let routes: Vec<(String, String)> = switchboard_server::api::routes()
        .iter()
        .map(|route| (route.method.to_owned(), route.path.to_owned()))
        .collect();
    let documented: Vec<(String, String)> = docs
        .lines()
        .filter_map(|line| line.strip_prefix("### "))
        .filter_map(|heading| {
            let mut words = heading.split_whitespace();
            Some((words.next()?.to_owned(), words.next()?.to_owned()))
        })
        .collect();
    for route in &routes {
        assert!(
            documented.contains(route),
            "docs/api.md does not document `{} {}`",
            route.0,
            route.1
        );
    }
    for route in &documented {
        assert!(
            routes.contains(route),
            "docs/api.md documents `{} {}`, which is no route",
            route.0,
            route.1
        );
    }
    // The Auth section's table gives every API route's scope, as the router checks it.
    let scopes: Vec<String> = switchboard_server::api::routes()
        .iter()
        .filter_map(|route| match route.guard {
            switchboard_server::api::Guard::Api(scope) => {
                Some(format!("| `{} {}` | {scope} |", route.method, route.path))
            }
            switchboard_server::api::Guard::Own => None,
        })
        .collect();
    let table: Vec<&str> = docs.lines().filter(|line| line.starts_with("| `")).collect();
    for row in &scopes {
        assert!(table.contains(&row.as_str()), "docs/api.md's scope table lacks {row}");
    }
    let rows = table
        .iter()
        .filter(|line| {
            ["GET", "POST", "PATCH", "DELETE"]
                .iter()
                .any(|method| line.starts_with(&format!("| `{method} /")))
        })
        .count();
    assert_eq!(rows, scopes.len(), "the scope table has a row for each API route, no more");
    for (method, path) in routes.iter().filter(|(_, path)| !path.contains("{slot}")) {
        let concrete = path.replace("{id}", "some-id").replace("{request_id}", "some-request");
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let response = server
            .client()
            .request(method.clone(), format!("{}{concrete}", server.base))
            .bearer_auth(TOKEN)
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        assert_ne!(body["error"]["message"], "no such endpoint", "{method} {path} is not routed");
    }
    server.stop().await;
}

/// A subscriber that stops reading while thousands of events go by is told it lagged and then
/// gets every event from the log: nothing missing, nothing twice, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_subscriber_lags_and_catches_up_from_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("script.json");
    std::fs::write(
        &script,
        json!([
            {"expect": "control_request", "subtype": "initialize"}, {"reply": {}},
            {"expect": "user"},
            {"stream_lines": {"rate": 1_000_000.0, "count": 3000}},
            {"turn": "done"},
            {"wait_eof": true},
        ])
        .to_string(),
    )
    .unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("db")).unwrap());
    let config = DaemonConfig {
        claude: Some(switchboard_testkit::fake_cli()),
        env: vec![("FAKE_CLAUDE_SCRIPT".into(), script.display().to_string())],
        ..DaemonConfig::default()
    };
    let daemon = Daemon::open(store.clone(), config).await.unwrap();
    let record =
        daemon.create(switchboard_server::CreateSession::new(dir.path().to_owned())).await.unwrap();
    let mut subscription = daemon.subscribe(&record.id, 0);
    // Take one event so the subscription is following the live tail, then stop reading.
    let first = subscription.next().await.unwrap().unwrap();
    assert!(matches!(first, switchboard_server::Subscribed::Event(ref e) if e.seq == 1));
    let handle = daemon.handle(&record.id).unwrap();
    handle.send_text("go").await.unwrap();
    let mut watch = handle.watch();
    let _ = tokio::time::timeout(WAIT, watch.wait_for(|s| s.turns == 1)).await.unwrap().map(|_| ());
    daemon.stop(&record.id, false).await.unwrap();
    let last = store.last_seq(&record.id).await.unwrap();
    assert!(last > 3000, "{last}");

    let mut seen = vec![1];
    let mut lagged = 0;
    while *seen.last().unwrap() < last {
        match tokio::time::timeout(WAIT, subscription.next()).await.unwrap().unwrap().unwrap() {
            switchboard_server::Subscribed::Event(event) => seen.push(event.seq),
            switchboard_server::Subscribed::Lagged => lagged += 1,
            other => panic!("the store did not fail: {other:?}"),
        }
    }
    assert!(lagged >= 1, "the subscriber was told it lagged");
    assert_eq!(seen, (1..=last).collect::<Vec<_>>(), "every event once, in order");
}

/// The web-UI backend's endpoints over Claude Code's own transcripts: list, get, replay on connect, push
/// on append, replay from a uuid, and taking a session over by resuming it (real CLI).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_transcripts_are_served_pushed_and_taken_over() {
    let api = FakeApi::start(
        Scenario::new()
            .reply(Reply::text("first answer").when_prompt("FIRST"))
            .reply(Reply::text("taken over").when_prompt("SECOND")),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let store: Arc<dyn Store> = Arc::new(switchboard_store::MemoryStore::new());
    let server = Server::start(store, &api, &sandbox).await;

    // A session that ran (and ended) leaves a transcript in the CLI's HOME.
    let (_, session) =
        server.post("/api/sessions", json!({"cwd": sandbox.workdir(), "prompt": "FIRST"})).await;
    let id = session["id"].as_str().unwrap().to_owned();
    let mut ws = server.ws(&format!("/api/sessions/{id}/subscribe")).await;
    ws.until(is_result).await;
    server.daemon.stop(&id, false).await.unwrap();
    let (_, view) = server.get(&format!("/api/sessions/{id}")).await;
    let claude_id = view["claude_session_id"].as_str().unwrap().to_owned();

    let (status, list) = server.get("/api/claude/sessions").await;
    assert_eq!(status, 200);
    assert!(
        list.as_array()
            .unwrap()
            .iter()
            .any(|t| t["id"] == claude_id.as_str() && t["title"] == "FIRST"),
        "{list}"
    );
    let (status, one) = server.get(&format!("/api/claude/sessions/{claude_id}")).await;
    assert_eq!(status, 200);
    assert_eq!(one["cwd"], sandbox.workdir().display().to_string());
    let (status, _) = server.get("/api/claude/sessions/no-such-session").await;
    assert_eq!(status, 404);

    // Connect: every existing line first.
    let path = std::path::PathBuf::from(one["path"].as_str().unwrap());
    let existing: Vec<Value> = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut compat = server.ws(&format!("/api/claude/sessions/{claude_id}/subscribe")).await;
    let mut replayed = Vec::new();
    for _ in 0..existing.len() {
        replayed.push(compat.next().await);
    }
    assert_eq!(replayed, existing);

    // An append (by anyone) is pushed.
    {
        use std::io::Write;
        let mut file = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
        writeln!(file, "{}", json!({"type": "note", "uuid": "appended-1"})).unwrap();
    }
    assert_eq!(compat.next().await["uuid"], "appended-1");

    // Replay from a uuid sends what follows it.
    let first_user =
        existing.iter().find(|l| l["type"] == "user").unwrap()["uuid"].as_str().unwrap().to_owned();
    compat.send(json!({"type": "subscribe", "fromUuid": first_user})).await;
    let position = existing.iter().position(|l| l["uuid"] == first_user.as_str()).unwrap();
    let expected_next = if position + 1 < existing.len() {
        existing[position + 1].clone()
    } else {
        json!({"type": "note", "uuid": "appended-1"})
    };
    assert_eq!(compat.next().await, expected_next);

    // A read token follows the transcript but may not take it over.
    let (_, made) = server.post("/api/tokens", json!({"name": "watcher", "scope": "read"})).await;
    let mut watcher = server
        .ws_as(
            made["token"].as_str().unwrap(),
            &format!("/api/claude/sessions/{claude_id}/subscribe"),
        )
        .await;
    watcher.send(json!({"type": "user_message", "content": "NOT ME"})).await;
    let refused = watcher.until(|frame| frame["type"] == "error").await;
    let refused = refused.last().unwrap()["error"].as_str().unwrap().to_owned();
    assert!(refused.contains("the operate scope"), "{refused}");

    // A user message takes the session over: Switchboard resumes it and the CLI's new lines
    // arrive on this socket.
    compat.send(json!({"type": "user_message", "content": "SECOND"})).await;
    let frames = compat
        .until(|frame| {
            frame["type"] == "assistant" && frame["message"]["content"][0]["text"] == "taken over"
        })
        .await;
    assert!(
        frames.iter().any(|f| f["type"] == "user" && f["message"]["content"] == "SECOND"),
        "the prompt is in the transcript"
    );
    // An acknowledgement is taken silently; an unknown message is not.
    compat.send(json!({"type": "ack", "uuid": "appended-1"})).await;
    compat.send(json!({"type": "bogus"})).await;
    let error = compat.until(|frame| frame["type"] == "error").await;
    let error = error.last().unwrap()["error"].as_str().unwrap();
    assert!(error.contains("unknown message type \"bogus\""), "the ack got no error: {error}");
    server.stop().await;
}

/// A 200 MB transcript is read incrementally with bounded memory, and lines appended while it
/// is watched arrive through the file notification.
#[tokio::test]
async fn a_200_mb_transcript_is_read_incrementally_and_followed() {
    use std::io::Write;
    use switchboard_server::transcripts::{watch_file, TranscriptTail, READ_CHUNK_BYTES};
    // Under the build directory: 200 MB may not fit a /tmp that is a small tmpfs.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let path = dir.path().join("big.jsonl");
    let filler = "x".repeat(1000);
    let lines = 200_000;
    {
        let mut file = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
        for index in 0..lines {
            writeln!(file, r#"{{"type":"assistant","uuid":"u{index}","text":"{filler}"}}"#)
                .unwrap();
        }
    }
    assert!(std::fs::metadata(&path).unwrap().len() > 200_000_000);
    let (_watcher, mut changed) = watch_file(&path).unwrap();
    let mut tail = TranscriptTail::new(&path);
    let mut count = 0usize;
    let mut last = String::new();
    loop {
        let batch = tail.read_available(1000);
        if batch.is_empty() {
            break;
        }
        // Never more than one read chunk beyond the lines handed out.
        assert!(tail.buffered() <= READ_CHUNK_BYTES, "{} bytes buffered", tail.buffered());
        count += batch.len();
        last = batch.last().unwrap().clone();
    }
    assert_eq!(count, lines);
    assert!(last.contains("\"uuid\":\"u199999\""));
    // Drain notifications from the initial write, then append while watched.
    while changed.try_recv().is_ok() {}
    {
        let mut file = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
        writeln!(file, r#"{{"type":"user","uuid":"appended"}}"#).unwrap();
    }
    tokio::time::timeout(WAIT, changed.recv()).await.expect("notified of the append").unwrap();
    assert_eq!(tail.read_available(10), [r#"{"type":"user","uuid":"appended"}"#]);
}

/// A daemon over a memory store running an `--sdk-url` session of the real 2.1.37 started with
/// `prompt`, and a subscription to its events.
struct SdkUrlSession {
    api: FakeApi,
    sandbox: CliSandbox,
    server: Server,
    id: String,
    ws: Ws,
}

async fn start_sdk_url_session(scenario: Scenario, prompt: &str) -> SdkUrlSession {
    let api = FakeApi::start(scenario).await.unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let store: Arc<dyn Store> = Arc::new(switchboard_store::MemoryStore::new());
    let server = Server::start(store, &api, &sandbox).await;
    let claude = real_cli(CliVersion::V2_1_37);
    let body = json!({"cwd": sandbox.workdir(), "prompt": prompt, "transport": "sdk-url", "claude": claude});
    let (status, session) = server.post("/api/sessions", body).await;
    assert_eq!(status, 201, "{session}");
    let id = session["id"].as_str().unwrap().to_owned();
    let ws = server.ws(&format!("/api/sessions/{id}/subscribe")).await;
    SdkUrlSession { api, sandbox, server, id, ws }
}

/// `--sdk-url` with the real 2.1.37: a full turn with an approval over the WebSocket, a
/// server-side drop while the permission is pending (the CLI reconnects, `initialize` resyncs,
/// the old request id still answers), a wrong token refused, and 2.1.330 refused with a reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_url_sessions_connect_survive_a_drop_and_refuse_strangers() {
    let SdkUrlSession { api, sandbox, server, id, mut ws } = start_sdk_url_session(
        Scenario::new()
            .reply(Reply::tool_use("Bash", touch_and_ls("over-websocket.txt")).when_prompt("RUN"))
            .reply(Reply::text("Done over the socket.").when_tool_result()),
        "RUN it",
    )
    .await;
    let frames = ws.until(|frame| frame["event"]["event"] == "permission_requested").await;
    assert!(frames
        .iter()
        .any(|f| f["event"]["event"] == "connected" && f["event"]["reconnect"] == false));
    let request_id = frames.last().unwrap()["event"]["request_id"].as_str().unwrap().to_owned();

    // A stranger with the wrong token is refused.
    let slot = server.daemon.ingress_slots().pop().unwrap();
    let url = format!("{}/v1/sessions/ws/{}", server.base.replace("http://", "ws://"), slot.id);
    let mut request = url.as_str().into_client_request().unwrap();
    request.headers_mut().insert("authorization", "Bearer wrong".parse().unwrap());
    let error = tokio_tungstenite::connect_async(request).await.unwrap_err();
    assert!(error.to_string().contains("401"), "{error}");

    // Drop the CLI's socket while the permission is pending: it reconnects, and the re-sent
    // initialize reports the request as still pending.
    slot.disconnect();
    ws.until(|frame| frame["event"]["event"] == "connected" && frame["event"]["reconnect"] == true)
        .await;
    let (status, answer) = server
        .post(&format!("/api/sessions/{id}/permissions/{request_id}"), json!({"behavior": "allow"}))
        .await;
    assert_eq!(status, 200, "{answer}");
    let frames = ws.until(is_result).await;
    assert_eq!(frames.last().unwrap()["event"]["line"]["result"], "Done over the socket.");
    assert!(sandbox.file("over-websocket.txt").exists(), "the tool ran once, after the reconnect");
    let runs = api
        .conversation_requests()
        .iter()
        .filter(|r| r.last_user_text().contains("RUN it"))
        .count();
    assert_eq!(runs, 1, "the prompt was never sent twice");

    // A CLI that refuses --sdk-url for non-Anthropic hosts is refused up front.
    let (status, body) = server
        .post("/api/sessions", json!({"cwd": sandbox.workdir(), "transport": "sdk-url", "claude": real_cli(CliVersion::V2_1_330)}))
        .await;
    assert_eq!(status, 400);
    assert!(body["error"]["message"].as_str().unwrap().contains("refuses --sdk-url"), "{body}");
    server.stop().await;
}

/// `--sdk-url` with the real 2.1.37: multi-turn, set model, an interrupt while streaming, and a
/// drop while idle followed by another turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_url_multi_turn_model_interrupt_and_idle_drop() {
    let SdkUrlSession { api, sandbox: _sandbox, server, id, mut ws } = start_sdk_url_session(
        Scenario::new()
            .reply(Reply::text("first").when_prompt("ONE"))
            .reply(Reply::text("never finishes, interrupted").when_prompt("LONG").hold_after(1))
            .reply(Reply::text("after the drop").when_prompt("THREE")),
        "ONE",
    )
    .await;
    ws.until(is_result).await;

    let (status, _) = server
        .post(&format!("/api/sessions/{id}/model"), json!({"model": "claude-haiku-4-5-20251001"}))
        .await;
    assert_eq!(status, 200);
    server.post(&format!("/api/sessions/{id}/messages"), json!({"content": "LONG"})).await;
    ws.until(|frame| frame["event"]["line"]["event"]["delta"]["type"] == "text_delta").await;
    let (status, _) = server.post(&format!("/api/sessions/{id}/interrupt"), json!({})).await;
    assert_eq!(status, 200);
    let frames = ws.until(is_result).await;
    assert_eq!(frames.last().unwrap()["event"]["line"]["subtype"], "error_during_execution");
    let long = api.wait_for(|request| request.last_user_text().contains("LONG")).await;
    assert_eq!(long.model(), "claude-haiku-4-5-20251001", "the model switch took effect");

    // Drop while idle; the CLI reconnects and the next turn works.
    server.daemon.ingress_slots().pop().unwrap().disconnect();
    ws.until(|frame| frame["event"]["event"] == "connected" && frame["event"]["reconnect"] == true)
        .await;
    server.post(&format!("/api/sessions/{id}/messages"), json!({"content": "THREE"})).await;
    let frames = ws.until(is_result).await;
    assert_eq!(frames.last().unwrap()["event"]["line"]["result"], "after the drop");
    // The record follows the switch (the session's own model_changed event, not a line
    // interpreted again).
    let (_, log) = server.get(&format!("/api/sessions/{id}/events")).await;
    let switched = log.as_array().unwrap().iter().any(|event| {
        event["event"]["event"] == "model_changed"
            && event["event"]["model"] == "claude-haiku-4-5-20251001"
    });
    assert!(switched, "the switch is an event of the log");
    let (_, session) = server.get(&format!("/api/sessions/{id}")).await;
    assert_eq!(session["model"], "claude-haiku-4-5-20251001", "{session}");

    // The view says what the log means, over HTTP and to a view subscriber alike: the switch,
    // the interrupted turn, the answers.
    let (status, view) = server.get(&format!("/api/sessions/{id}/view")).await;
    assert_eq!(status, 200, "{view}");
    let mut live = server.ws(&format!("/api/sessions/{id}/subscribe?view=true&after=0")).await;
    let frames = live
        .until(|frame| {
            frame["updates"]
                .as_array()
                .unwrap()
                .iter()
                .any(|u| u["update"] == "turn_ended" && u["result"] == "after the drop")
        })
        .await;
    let mut seqs = frames.iter().map(|frame| {
        assert_eq!(frame["type"], "view", "{frame}");
        frame["seq"].as_u64().unwrap()
    });
    let first = seqs.next().unwrap();
    seqs.try_fold(first, |last, seq| (seq > last).then_some(seq)).expect("in order, each once");
    let streamed: Vec<Value> =
        frames.iter().flat_map(|frame| frame["updates"].as_array().unwrap().clone()).collect();
    for updates in [view["updates"].as_array().unwrap(), &streamed] {
        assert!(updates
            .iter()
            .any(|u| u["update"] == "model" && u["model"] == "claude-haiku-4-5-20251001"));
        let ends: Vec<(&Value, &Value)> = updates
            .iter()
            .filter(|u| u["update"] == "turn_ended")
            .map(|u| (&u["interrupted"], &u["failed"]))
            .collect();
        assert_eq!(
            ends,
            [
                (&json!(false), &json!(false)),
                (&json!(true), &json!(false)),
                (&json!(false), &json!(false))
            ]
        );
        let texts: Vec<&Value> = updates
            .iter()
            .filter(|u| u["update"] == "block" && u["block"]["kind"] == "text")
            .map(|u| &u["block"]["text"])
            .collect();
        assert_eq!(texts, [&json!("first"), &json!("after the drop")]);
    }
    server.stop().await;
}

/// `--sdk-url` with the real 2.1.37: the socket drops mid-turn; the CLI reconnects and the turn
/// ends normally (what 2.1.37 wrote while away is lost: it replays nothing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_url_drop_mid_turn() {
    let SdkUrlSession { api, sandbox: _sandbox, server, id, mut ws } = start_sdk_url_session(
        Scenario::new().reply(Reply::text("one two three four").when_prompt("GO").hold_after(1)),
        "GO",
    )
    .await;
    ws.until(|frame| frame["event"]["line"]["event"]["delta"]["type"] == "text_delta").await;
    server.daemon.ingress_slots().pop().unwrap().disconnect();
    ws.until(|frame| frame["event"]["event"] == "connected" && frame["event"]["reconnect"] == true)
        .await;
    api.release();
    let frames = ws.until(is_result).await;
    assert_eq!(frames.last().unwrap()["event"]["line"]["subtype"], "success");
    let (_, events) = server.get(&format!("/api/sessions/{id}/events")).await;
    let events = events.as_array().unwrap();
    assert_eq!(
        seqs(events),
        (1..=events.len() as u64).collect::<Vec<_>>(),
        "the log has no gap of its own"
    );
    assert!(events.iter().any(|e| e["event"]["event"] == "disconnected"), "the drop is recorded");
    server.stop().await;
}

/// The hybrid transport's `POST /session/{slot}/events` feeds the same session as the socket,
/// with the same auth and de-duplication.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hybrid_post_ingress_feeds_the_session() {
    let SdkUrlSession { api: _api, sandbox: _sandbox, server, id, mut ws } =
        start_sdk_url_session(Scenario::new().reply(Reply::text("hello")), "hi").await;
    ws.until(is_result).await;
    let slot = server.daemon.ingress_slots().pop().unwrap();
    let url = format!("{}/session/{}/events", server.base, slot.id);
    let client = server.client();
    let body = json!({"events": [{"type": "keep_alive", "uuid": "k-1"}, {"type": "keep_alive", "uuid": "k-1"}]});
    let refused = client.post(&url).bearer_auth("wrong").json(&body).send().await.unwrap();
    assert_eq!(refused.status().as_u16(), 401);
    let accepted = client.post(&url).bearer_auth(slot.token()).json(&body).send().await.unwrap();
    assert_eq!(accepted.status().as_u16(), 200);
    let frames = ws.until(|frame| frame["event"]["line"]["uuid"] == "k-1").await;
    assert_eq!(frames.last().unwrap()["dir"], "from_cli");
    let bad = client.post(&url).bearer_auth(slot.token()).body("{not json").send().await.unwrap();
    assert_eq!(bad.status().as_u16(), 400);
    let (_, events) = server.get(&format!("/api/sessions/{id}/events")).await;
    let copies =
        events.as_array().unwrap().iter().filter(|e| e["event"]["line"]["uuid"] == "k-1").count();
    assert_eq!(copies, 1, "a repeated uuid is dropped");
    server.stop().await;
}

/// The agents-ui relay protocol's relay: an externally launched 2.1.37 connects at `/` with the token; a frontend
/// at `/ws` sees the status lines and every raw line, and its user message reaches the CLI.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seed_003_relay_serves_an_external_cli_and_frontends() {
    let api = FakeApi::start(
        Scenario::new()
            .reply(Reply::text("relayed answer").when_prompt("RELAY"))
            .reply(Reply::tool_use("Bash", touch_and_ls("relay-allowed.txt")).when_prompt("TOOLS"))
            .reply(
                Reply::tool_use("Bash", touch_and_ls("relay-denied.txt"))
                    .when_tool_result_contains("relay-allowed.txt"),
            )
            .reply(Reply::text("Fine, not that one.").when_tool_result_contains("no thanks")),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let store: Arc<dyn Store> = Arc::new(switchboard_store::MemoryStore::new());
    let server = Server::start(store, &api, &sandbox).await;
    let mut frontend = server.ws(&format!("/ws?token={TOKEN}")).await;

    // A stranger without the token is refused at `/`.
    let root = format!("{}/", server.base.replace("http://", "ws://"));
    let mut request = root.as_str().into_client_request().unwrap();
    request.headers_mut().insert("authorization", "Bearer wrong".parse().unwrap());
    assert!(tokio_tungstenite::connect_async(request)
        .await
        .unwrap_err()
        .to_string()
        .contains("401"));

    let mut cli = launch_relay_cli(&sandbox, &api, &root);
    frontend
        .until(|frame| frame["type"] == "status" && frame["text"] == "claude code connected")
        .await;
    frontend
        .send(json!({"type": "user", "message": {"role": "user", "content": "RELAY this"}, "parent_tool_use_id": null, "session_id": ""}))
        .await;
    let frames = frontend.until(|frame| frame["type"] == "result").await;
    assert_eq!(frames.last().unwrap()["result"], "relayed answer");
    assert!(
        frames.iter().any(|f| f["type"] == "system" && f["subtype"] == "init"),
        "raw lines reach the frontend"
    );
    // An answer to nothing waiting is refused with a status line.
    frontend.send(json!({"type": "control_response", "response": {"subtype": "success", "request_id": "x"}})).await;
    let refused = frontend.until(|frame| frame["type"] == "status").await;
    assert!(refused.last().unwrap()["text"].as_str().unwrap().contains("no permission request x"));
    // Frontends answer permission requests, in either of the relay protocol's forms: the
    // agents-ui relay's allow, then the standard form's deny with a message for the model. The
    // user line names its CLI by Claude session id.
    let claude_session = frames
        .iter()
        .find_map(|frame| frame["session_id"].as_str().filter(|id| !id.is_empty()))
        .unwrap()
        .to_owned();
    frontend
        .send(json!({"type": "user", "message": {"role": "user", "content": "TOOLS please"}, "parent_tool_use_id": null, "session_id": claude_session}))
        .await;
    let asked = frontend.until(|frame| frame["request"]["subtype"] == "can_use_tool").await;
    let first = asked.last().unwrap()["request_id"].as_str().unwrap().to_owned();
    frontend
        .send(
            json!({"type": "control_response", "request_id": first, "permission": {"allow": true}}),
        )
        .await;
    let asked = frontend.until(|frame| frame["request"]["subtype"] == "can_use_tool").await;
    assert!(sandbox.file("relay-allowed.txt").exists(), "the frontend's allow ran the call");
    let second = asked.last().unwrap()["request_id"].as_str().unwrap().to_owned();
    frontend
        .send(json!({"type": "control_response", "response": {"subtype": "success", "request_id": second,
            "response": {"behavior": "deny", "message": "no thanks"}}}))
        .await;
    let frames = frontend.until(|frame| frame["type"] == "result").await;
    assert_eq!(frames.last().unwrap()["result"], "Fine, not that one.");
    assert!(!sandbox.file("relay-denied.txt").exists(), "the frontend's deny held");
    // A second answer to the same request is refused: the first one won.
    frontend
        .send(json!({"type": "control_response", "request_id": second, "permission": {"allow": true}}))
        .await;
    let refused = frontend.until(|frame| frame["type"] == "status").await;
    assert!(refused.last().unwrap()["text"].as_str().unwrap().contains("no permission request"));

    // The relay session is a Switchboard session like any other: stored and listed.
    let (_, sessions) = server.get("/api/sessions").await;
    let relay = sessions
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["config"]["transport"] == "relay")
        .cloned()
        .unwrap();
    assert_eq!(
        relay["cwd"],
        sandbox.workdir().display().to_string(),
        "the cwd comes from system/init"
    );
    // The frontend's decisions are recorded as a person's: its token's, on the relay.
    let (_, events) =
        server.get(&format!("/api/sessions/{}/events", relay["id"].as_str().unwrap())).await;
    let decided: Vec<&Value> = events
        .as_array()
        .unwrap()
        .iter()
        .map(|event| &event["event"])
        .filter(|event| event["event"] == "permission_decided")
        .collect();
    assert_eq!(decided.len(), 2, "{decided:?}");
    for event in &decided {
        assert_eq!(event["by"], json!({"kind": "person", "who": "token admin (relay)"}), "{event}");
    }
    assert_eq!(decided[0]["behavior"], "allow");
    assert_eq!(decided[1]["behavior"], "deny");
    cli.kill().await.unwrap();
    frontend
        .until(|frame| frame["type"] == "status" && frame["text"] == "claude code disconnected")
        .await;
    server.stop().await;
}

/// A relay CLI at `/` that sends `count` stamped `stream_event` lines as fast as its socket
/// takes them, answering pings meanwhile; `sent` hears of every thousand lines written. Returns
/// the socket's halves once every line is written (keep them: dropping them ends the session).
async fn flood_relay(
    server: &Server,
    count: usize,
    sent: tokio::sync::mpsc::UnboundedSender<usize>,
) -> (impl Sized, tokio::task::JoinHandle<()>) {
    let (mut sink, mut incoming) = server.relay_cli().await.split();
    let reader = tokio::spawn(async move { while let Some(Ok(_)) = incoming.next().await {} });
    let padding = "x".repeat(1000);
    let sending = tokio::spawn(async move {
        for n in 0..count {
            let line = json!({"type": "stream_event", "session_id": "s-1", "parent_tool_use_id": null,
                "uuid": format!("00000000-0000-4000-8000-{n:012x}"),
                "event": {"type": "content_block_delta", "index": 0,
                    "delta": {"type": "text_delta", "text": format!("n={n} {padding}")}}});
            sink.feed(WsMessage::Text(format!("{line}\n").into())).await.unwrap();
            if n % 1000 == 999 {
                sink.flush().await.unwrap();
                let _ = sent.send(n + 1);
            }
        }
        sink.flush().await.unwrap();
        sink
    });
    let sink = tokio::time::timeout(WAIT, sending).await.expect("the CLI could not send").unwrap();
    (sink, reader)
}

/// Reads a relay frontend until it has had flood lines `0..count`, each once and in order.
async fn read_flood(frontend: &mut Ws, count: usize) {
    let mut next = 0;
    while next < count {
        let frame = frontend.next().await;
        if frame["type"] != "stream_event" {
            continue;
        }
        let text = frame["event"]["delta"]["text"].as_str().unwrap();
        let n: usize = text[2..text.find(' ').unwrap()].parse().unwrap();
        assert_eq!(n, next, "line {next} is missing or out of order");
        next += 1;
    }
}

/// A relay frontend that falls behind misses nothing: the CLIs wait for it. (Lines that
/// outran a frontend by the relay's buffer of 1,024 used to be skipped.) The frontend reads
/// nothing until the CLI has sent 4,000 lines (4 MB), then reads every line, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_frontend_that_falls_behind_misses_no_line() {
    const LINES: usize = 8_000;
    let api = FakeApi::start(Scenario::new()).await.unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let store: Arc<dyn Store> = Arc::new(switchboard_store::MemoryStore::new());
    let server = Server::start_with(store, &api, &sandbox, |config| {
        config.stall_limit = Some(WAIT);
    })
    .await;
    let mut frontend = server.ws_small_buffer(&format!("/ws?token={TOKEN}")).await;
    let (sent, mut progress) = tokio::sync::mpsc::unbounded_channel();
    let flood = async { flood_relay(&server, LINES, sent).await };
    let reading = async {
        while progress.recv().await.is_some_and(|sent| sent < 4_000) {}
        read_flood(&mut frontend, LINES).await;
    };
    let ((_cli, reader), ()) = tokio::join!(flood, reading);
    reader.abort();
    server.stop().await;
}

/// A run that ends brings its session's stored view checkpoints up to its log: a relay CLI's
/// 3,000 lines, then its session stopped; the store holds the checkpoint at 2,048 (what a
/// daemon that never read the session starts a page from), memory none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_ends_stores_its_sessions_view_checkpoints() {
    const LINES: usize = 3_000;
    let api = FakeApi::start(Scenario::new()).await.unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let store: Arc<dyn Store> = Arc::new(switchboard_store::MemoryStore::new());
    let server = Server::start(store.clone(), &api, &sandbox).await;
    let mut frontend = server.ws(&format!("/ws?token={TOKEN}")).await;
    let (sent, _progress) = tokio::sync::mpsc::unbounded_channel();
    let ((_cli, reader), ()) =
        tokio::join!(flood_relay(&server, LINES, sent), read_flood(&mut frontend, LINES));
    let sessions = store.list_sessions().await.unwrap();
    let [session] = sessions.as_slice() else { panic!("one relay session: {sessions:?}") };
    let kept = store.view_checkpoints().unwrap();
    let format = switchboard_server::view::STATE_FORMAT;
    let stored = kept.view_checkpoint(&session.id, u64::MAX, format).await.unwrap();
    assert_eq!(stored, None, "none while it runs");
    tokio::time::timeout(WAIT, server.daemon.stop(&session.id, false)).await.unwrap().unwrap();
    tokio::time::timeout(WAIT, server.daemon.view_checkpoints_settled()).await.unwrap();
    let stored = kept.view_checkpoint(&session.id, u64::MAX, format).await.unwrap().unwrap();
    assert_eq!(stored.seq, 2048);
    let event = store.events_after(&session.id, 2047, 1).await.unwrap();
    assert_eq!(event[0].ts_ms, stored.ts_ms, "the checkpoint names its event's time");
    assert!(server.daemon.view_checkpoints().is_empty(), "a catch-up keeps none in memory");
    reader.abort();
    server.stop().await;
}

/// A relay frontend that stops reading is dropped after the stall limit, and the CLI and the
/// other frontends go on: the one that reads gets every line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_relay_frontend_is_dropped_and_holds_no_one_back() {
    relay_with_a_stuck_frontend(12_000, None).await;
}

/// A relay frontend that is sent replies it never reads is dropped too: every write to a
/// frontend is bounded, not only the feed's (a reply that could not be written held its
/// frontend's feed, and so every relay CLI, for good).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_frontend_stuck_on_its_replies_holds_no_one_back() {
    // 60,000 lines the relay refuses, in one frame: their replies (about 6 MB) are more than
    // the stuck frontend's socket takes.
    let refused =
        json!({"type": "control_response", "response": {"subtype": "success", "request_id": "x"}});
    relay_with_a_stuck_frontend(4_000, Some(format!("{refused}\n").repeat(60_000))).await;
}

/// A relay with a 500 ms stall limit and two frontends: one reads `lines` flooded lines and must
/// get them all; the other sends `stuck_frame` (if any) and never reads (its 4 KiB socket
/// fills, and it holds the CLI back until it is dropped).
async fn relay_with_a_stuck_frontend(lines: usize, stuck_frame: Option<String>) {
    let api = FakeApi::start(Scenario::new()).await.unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let store: Arc<dyn Store> = Arc::new(switchboard_store::MemoryStore::new());
    let server = Server::start_with(store, &api, &sandbox, |config| {
        config.stall_limit = Some(Duration::from_millis(500));
    })
    .await;
    let mut reading = server.ws(&format!("/ws?token={TOKEN}")).await;
    let mut stuck = server.ws_small_buffer(&format!("/ws?token={TOKEN}")).await;
    if let Some(frame) = stuck_frame {
        stuck.socket.send(WsMessage::Text(frame.into())).await.unwrap();
    }
    let reader_task = tokio::spawn(async move {
        read_flood(&mut reading, lines).await;
        reading
    });
    let (sent, _progress) = tokio::sync::mpsc::unbounded_channel();
    let (_cli, reader) = flood_relay(&server, lines, sent).await;
    tokio::time::timeout(WAIT, reader_task)
        .await
        .expect("the reading frontend was held back")
        .unwrap();
    // The stuck one was dropped, not merely passed by: read now, its socket ends (after what
    // its buffers held) within the deadline.
    let dropped = tokio::time::timeout(WAIT, async {
        loop {
            match stuck.socket.next().await {
                Some(Ok(WsMessage::Close(_))) | Some(Err(_)) | None => return,
                Some(Ok(_)) => {}
            }
        }
    })
    .await;
    assert!(dropped.is_ok(), "the stuck frontend's socket was never closed");
    reader.abort();
    server.stop().await;
}

/// A CLI socket that goes silent (it answers no ping) is dropped: the session records the
/// disconnection. (The client here completes the handshake, then never reads again.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_cli_socket_is_dropped() {
    let api = FakeApi::start(Scenario::new()).await.unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let store: Arc<dyn Store> = Arc::new(switchboard_store::MemoryStore::new());
    // No real CLI here: a short ping is safe.
    let server = Server::start_with(store, &api, &sandbox, |config| {
        config.ping_interval = Some(Duration::from_millis(300));
    })
    .await;
    let mut feed = server.ws(&format!("/ws?token={TOKEN}")).await;
    // Taken before the connection: the daemon's ping clock cannot start earlier than this.
    let connected = std::time::Instant::now();
    let mut silent = server.relay_cli().await;
    feed.until(|frame| frame["text"] == "claude code connected").await;
    // Never read (so never answer a ping), but keep the TCP connection open.
    feed.until(|frame| frame["text"] == "claude code disconnected").await;
    assert!(
        connected.elapsed() >= Duration::from_millis(300),
        "dropped only once a ping went unanswered, not at once ({:?})",
        connected.elapsed()
    );
    // The daemon closed the socket, not only said so: reading it now ends (after the pings
    // that went unanswered), within the deadline.
    let ended = tokio::time::timeout(WAIT, async {
        let mut pings = 0;
        loop {
            match silent.next().await {
                Some(Ok(WsMessage::Ping(_))) => pings += 1,
                Some(Ok(WsMessage::Close(_))) | Some(Err(_)) | None => return pings,
                // What the daemon sent before (`initialize`, unanswered).
                Some(Ok(_)) => {}
            }
        }
    })
    .await;
    let pings = ended.expect("the daemon closed the silent CLI's socket");
    assert!(pings >= 1, "it was pinged before it was dropped");
    server.stop().await;
}

/// The agents-ui relay protocol's rotation: a relay CLI that moves to another Claude session on the same socket
/// gets a Switchboard session per Claude session id; moving back continues the first one.
/// (A scripted CLI: the real one changes its session id only on commands like `/clear`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_cli_gets_a_session_per_claude_session_id() {
    let api = FakeApi::start(Scenario::new()).await.unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let store: Arc<dyn Store> = Arc::new(switchboard_store::MemoryStore::new());
    let server = Server::start(store, &api, &sandbox).await;
    let mut frontend = server.ws(&format!("/ws?token={TOKEN}")).await;
    let mut cli = server.relay_cli().await;
    // Answer `initialize` like a CLI (within one deadline; a socket that ends first fails).
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut seen = Vec::new();
    let initialize = loop {
        let frame = tokio::time::timeout_at(deadline, cli.next())
            .await
            .unwrap_or_else(|_| panic!("no initialize within {WAIT:?}; frames seen: {seen:?}"));
        match frame {
            Some(Ok(WsMessage::Text(text))) => {
                let frame: Value = serde_json::from_str(text.trim()).unwrap();
                if frame["request"]["subtype"] == "initialize" {
                    break frame;
                }
                seen.push(frame);
            }
            Some(Ok(_)) => {}
            other => panic!("the relay socket ended before initialize: {other:?}; seen: {seen:?}"),
        }
    };
    let say = |value: Value| WsMessage::Text(format!("{value}\n").into());
    cli.send(say(json!({"type": "control_response", "response": {"subtype": "success",
        "request_id": initialize["request_id"], "response": {}}})))
        .await
        .unwrap();
    // Keep reading, as a CLI does (tungstenite answers the daemon's pings while reading).
    let (mut cli, mut incoming) = cli.split();
    let reader = tokio::spawn(async move { while let Some(Ok(_)) = incoming.next().await {} });
    let init = |session: &str| {
        json!({"type": "system", "subtype": "init", "session_id": session, "cwd": "/tmp/relayed",
            "model": "claude-opus-5-5", "permissionMode": "default", "tools": [], "uuid": format!("init-{session}")})
    };
    let text = |session: &str, words: &str| {
        json!({"type": "assistant", "session_id": session, "parent_tool_use_id": null,
            "uuid": format!("{session}-{words}"), "message": {"id": format!("m-{session}-{words}"),
            "role": "assistant", "content": [{"type": "text", "text": words}]}})
    };
    for line in [
        init("claude-A"),
        text("claude-A", "first in A"),
        init("claude-B"),
        text("claude-B", "only in B"),
        text("claude-A", "back in A"),
    ] {
        cli.send(say(line)).await.unwrap();
    }
    // Every raw line still reaches the frontends (once stored).
    frontend.until(|frame| frame["uuid"] == "claude-A-back in A").await;
    // The dashboard says when the session of A is back (its record changes as the line lands).
    let relay_sessions = || async {
        let (_, sessions) = server.get("/api/sessions").await;
        sessions
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["config"]["transport"] == "relay")
            .cloned()
            .collect::<Vec<Value>>()
    };
    let deadline = std::time::Instant::now() + WAIT;
    let relays = loop {
        let relays = relay_sessions().await;
        let a_back =
            relays.iter().any(|s| s["claude_session_id"] == "claude-A" && s["running"] == true);
        if relays.len() == 2 && a_back {
            break relays;
        }
        assert!(std::time::Instant::now() < deadline, "never rotated back: {relays:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let by_claude = |claude: &str| {
        relays.iter().find(|s| s["claude_session_id"] == claude).unwrap()["id"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let (a, b) = (by_claude("claude-A"), by_claude("claude-B"));
    let texts = |events: &Value| -> Vec<String> {
        events
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|e| e["event"]["line"]["message"]["content"][0]["text"].as_str())
            .map(str::to_owned)
            .collect()
    };
    let (_, a_events) = server.get(&format!("/api/sessions/{a}/events")).await;
    let (_, b_events) = server.get(&format!("/api/sessions/{b}/events")).await;
    assert_eq!(texts(&a_events), ["first in A", "back in A"]);
    assert_eq!(texts(&b_events), ["only in B"]);
    let rotated: Vec<&Value> =
        a_events.as_array().unwrap().iter().filter(|e| e["event"]["event"] == "rotated").collect();
    assert_eq!(rotated.len(), 1);
    assert_eq!(rotated[0]["event"]["to"], b.as_str());
    let seqs: Vec<u64> =
        a_events.as_array().unwrap().iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert!(seqs.windows(2).all(|pair| pair[1] == pair[0] + 1), "{seqs:?}");
    // A is the live one again; B ended when its CLI went back to A.
    let (_, a_session) = server.get(&format!("/api/sessions/{a}")).await;
    let (_, b_session) = server.get(&format!("/api/sessions/{b}")).await;
    assert_eq!(a_session["running"], true, "{a_session}");
    assert_eq!(b_session["state"], "exited", "{b_session}");
    // The audit trail: A started by the relay CLI, ended when its CLI moved on to B, B
    // started, B ended when it went back, A started again (a resume).
    let deadline = std::time::Instant::now() + WAIT;
    let records = loop {
        let (_, page) = server.get("/api/audit").await;
        let records = page["records"].as_array().unwrap().clone();
        if records.len() >= 5 {
            break records;
        }
        assert!(std::time::Instant::now() < deadline, "{page}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let trail: Vec<(&str, &str, bool)> = records
        .iter()
        .map(|record| {
            let entry = &record["entry"];
            let session = entry["session"].as_str().unwrap();
            (entry["kind"].as_str().unwrap(), session, entry["resumed"] == true)
        })
        .collect();
    assert_eq!(
        trail,
        [
            ("session_started", a.as_str(), false),
            ("session_ended", a.as_str(), false),
            ("session_started", b.as_str(), false),
            ("session_ended", b.as_str(), false),
            ("session_started", a.as_str(), true),
        ]
    );
    assert_eq!(records[0]["entry"]["started_by"], "relay CLI (ingress token)");
    let moved = format!("its relay CLI moved on to session {b}");
    assert_eq!(records[1]["entry"]["why"], moved.as_str());
    drop(cli);
    reader.abort();
    server.stop().await;
}

/// A raw HTTP/1.1 client: sends `request`, returns what the server answered until it closed
/// the connection (or `wait` passed: `None`).
async fn raw_exchange(address: &str, request: &[u8], wait: Duration) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    stream.write_all(request).await.unwrap();
    let mut answer = Vec::new();
    match tokio::time::timeout(wait, stream.read_to_end(&mut answer)).await {
        Ok(_) => Some(String::from_utf8_lossy(&answer).into_owned()),
        Err(_) => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ingress_post_checks_its_slot_before_reading_a_body() {
    // A real slot (an `--sdk-url` session's), to present the wrong token to.
    let session = start_sdk_url_session(Scenario::new().reply(Reply::text("hi")), "hello").await;
    let server = &session.server;
    let slot = server.daemon.ingress_slots().pop().expect("the session's slot");
    let address = server.base.trim_start_matches("http://").to_owned();
    // A real slot and the wrong token, 16 MiB announced: refused without waiting for them.
    let request = format!(
        "POST /session/{}/events HTTP/1.1\r\nhost: {address}\r\nauthorization: Bearer wrong\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{{\"ev",
        slot.id,
        16 * 1024 * 1024
    );
    let answer = raw_exchange(&address, request.as_bytes(), Duration::from_secs(20))
        .await
        .expect("refused without waiting for the body");
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    // 16 MiB announced and never sent: the answer must not wait for it.
    let request = format!(
        "POST /session/no-such-slot/events HTTP/1.1\r\nhost: {address}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{{\"ev",
        16 * 1024 * 1024
    );
    let answer = raw_exchange(&address, request.as_bytes(), Duration::from_secs(20))
        .await
        .expect("answered without waiting for the body");
    assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");
    assert!(answer.contains("not_found"), "one error shape: {answer}");
    let SdkUrlSession { server, .. } = session;
    server.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_client_that_trickles_its_headers_is_cut_off() {
    let store: Arc<dyn Store> = Arc::new(switchboard_store::MemoryStore::new());
    let daemon = Daemon::open(store, DaemonConfig::default()).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let auth = AuthConfig::with_token(TOKEN);
    tokio::spawn(switchboard_server::serve(listener, daemon, auth, std::future::pending()));
    // Half a request, then nothing: with time paused, the wait jumps to the daemon's timer.
    let started = tokio::time::Instant::now();
    let answer = raw_exchange(
        &address,
        b"GET /api/health HTTP/1.1\r\nhost: x\r\n",
        Duration::from_secs(3600),
    )
    .await
    .expect("the daemon closes the connection");
    assert!(!answer.contains("200"), "{answer}");
    let waited = started.elapsed();
    assert!(
        waited >= switchboard_server::HEADER_READ_TIMEOUT
            && waited < switchboard_server::HEADER_READ_TIMEOUT * 2,
        "closed after the header timeout, not before: {waited:?}"
    );
    // A client that sends nothing at all, or half of HTTP/2's preface, is cut off the same way.
    for sent in [&b""[..], b"PRI * HTTP/2.0\r\n"] {
        let started = tokio::time::Instant::now();
        let answer = raw_exchange(&address, sent, Duration::from_secs(3600))
            .await
            .expect("the daemon closes a silent connection");
        assert_eq!(answer, "");
        let waited = started.elapsed();
        assert!(
            waited >= switchboard_server::HEADER_READ_TIMEOUT
                && waited < switchboard_server::HEADER_READ_TIMEOUT * 2,
            "closed after the header timeout, not before: {waited:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn an_http2_connection_without_a_call_is_closed() {
    let store: Arc<dyn Store> = Arc::new(switchboard_store::MemoryStore::new());
    let daemon = Daemon::open(store, DaemonConfig::default()).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let auth = AuthConfig::with_token(TOKEN);
    tokio::spawn(switchboard_server::serve(listener, daemon, auth, std::future::pending()));
    // A well-behaved HTTP/2 client (it answers the daemon's pings) that calls nothing.
    let socket = tokio::net::TcpStream::connect(address).await.unwrap();
    let (_client, connection) = h2::client::handshake(socket).await.unwrap();
    let started = tokio::time::Instant::now();
    tokio::time::timeout(switchboard_server::H2_IDLE * 3, connection)
        .await
        .expect("the daemon closes it")
        .expect("with a GOAWAY, not an error");
    let waited = started.elapsed();
    assert!(
        waited >= switchboard_server::H2_IDLE && waited < switchboard_server::H2_IDLE * 2,
        "closed once idle, not before: {waited:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rest_path_called_as_grpc_needs_the_token_too() {
    let store: Arc<dyn Store> = Arc::new(switchboard_store::MemoryStore::new());
    let daemon = Daemon::open(store, DaemonConfig::default()).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let auth = AuthConfig::with_token(TOKEN);
    tokio::spawn(switchboard_server::serve(listener, daemon, auth, std::future::pending()));
    for path in ["/api/sessions", "/", "/ui/app.js", "/grpc.health.v1.Health/Watch"] {
        let request = format!(
            "POST {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-type: application/grpc\r\ncontent-length: 0\r\n\r\n"
        );
        let answer = raw_exchange(&address, request.as_bytes(), Duration::from_secs(5))
            .await
            .expect("an answer");
        assert!(answer.contains("grpc-status: 16"), "{path}: unauthenticated: {answer}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_cap_an_unfinished_connection_is_shed_and_a_full_house_of_sockets_refuses() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let store: Arc<dyn Store> = Arc::new(switchboard_store::MemoryStore::new());
    let daemon = Daemon::open(store, DaemonConfig::default()).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let auth = AuthConfig::with_token(TOKEN);
    let options = switchboard_server::ServeOptions {
        connections: switchboard_server::peers::Limits { total: 3, per_peer: 3 },
        ..Default::default()
    };
    tokio::spawn(switchboard_server::serve_with(
        listener,
        daemon,
        auth,
        options,
        std::future::pending(),
    ));
    let health = format!(
        "GET /api/health HTTP/1.1\r\nhost: {address}\r\nauthorization: Bearer {TOKEN}\r\nconnection: close\r\n\r\n"
    );
    // Three stalled clients hold every connection the daemon serves.
    let mut stalled = Vec::new();
    for _ in 0..3 {
        let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
        stream.write_all(b"GET /api/health HTTP/1.1\r\n").await.unwrap();
        stalled.push(stream);
    }
    // A fourth is served at once (long before the header timeout): the oldest stalled one
    // made room, and is closed.
    let answer = raw_exchange(&address, health.as_bytes(), Duration::from_secs(5))
        .await
        .expect("an answer at once");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let mut byte = [0u8; 1];
    let oldest = tokio::time::timeout(Duration::from_secs(5), stalled[0].read(&mut byte))
        .await
        .expect("the oldest stalled connection is closed, not left to hang");
    assert!(matches!(oldest, Ok(0) | Err(_)), "closed without an answer: {oldest:?}");

    // Three WebSockets (each a client following something) are never shed: a fourth
    // connection is closed on arrival instead.
    drop(stalled);
    let mut sockets = Vec::new();
    let deadline = tokio::time::Instant::now() + WAIT;
    while sockets.len() < 3 {
        let url = format!("ws://{address}/api/events");
        let mut request = url.into_client_request().unwrap();
        request.headers_mut().insert("authorization", format!("Bearer {TOKEN}").parse().unwrap());
        match tokio::time::timeout(WAIT, tokio_tungstenite::connect_async(request)).await {
            Ok(Ok((socket, _))) => sockets.push(socket),
            // A stalled connection not yet closed on the daemon's side still counts.
            _ => assert!(tokio::time::Instant::now() < deadline, "no room for three sockets"),
        }
    }
    let refused = raw_exchange(&address, health.as_bytes(), Duration::from_secs(5))
        .await
        .expect("closed at once");
    assert_eq!(refused, "", "closed without an answer");
    // One socket goes; its place serves again.
    drop(sockets.pop());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let answer = raw_exchange(&address, health.as_bytes(), Duration::from_secs(5)).await;
        if answer.as_deref().is_some_and(|answer| answer.starts_with("HTTP/1.1 200")) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the freed place was never served: {answer:?}"
        );
        tokio::task::yield_now().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutting_down_tells_every_socket_stops_every_session_then_closes() {
    let api = FakeApi::start(Scenario::new().reply(Reply::text("hello"))).await.unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let store: Arc<dyn Store> = Arc::new(switchboard_store::MemoryStore::new());
    let config = DaemonConfig {
        claude: Some(real_cli(CliVersion::V2_1_330)),
        env: sandbox.env(&api.base_url()).into_iter().collect(),
        clear_env: true,
        ..DaemonConfig::default()
    };
    let daemon = Daemon::open(store.clone(), config).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("ws://{}", listener.local_addr().unwrap());
    let auth = AuthConfig::with_token(TOKEN);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(switchboard_server::serve(listener, daemon.clone(), auth, async {
        let _ = stopped.await;
    }));
    let record = daemon
        .create(switchboard_server::CreateSession {
            prompt: Some("hi".into()),
            ..switchboard_server::CreateSession::new(sandbox.workdir())
        })
        .await
        .unwrap();
    let connect = |path: String| {
        let url = format!("{base}{path}");
        async move {
            let mut request = url.into_client_request().unwrap();
            request
                .headers_mut()
                .insert("authorization", format!("Bearer {TOKEN}").parse().unwrap());
            tokio_tungstenite::connect_async(request).await.unwrap().0
        }
    };
    let mut session =
        Ws { socket: connect(format!("/api/sessions/{}/subscribe", record.id)).await };
    session.until(is_result).await;
    let mut dashboard = connect("/api/events".into()).await;
    // A gRPC subscriber as well.
    let mut grpc = {
        use switchboard_server::grpc::pb;
        let channel = tonic::transport::Endpoint::from_shared(base.replace("ws://", "http://"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut client = pb::switchboard_client::SwitchboardClient::with_interceptor(
            channel,
            |mut request: tonic::Request<()>| {
                request
                    .metadata_mut()
                    .insert("authorization", format!("Bearer {TOKEN}").parse().unwrap());
                Ok(request)
            },
        );
        client
            .subscribe(pb::SubscribeRequest { id: record.id.clone(), after_seq: 0 })
            .await
            .unwrap()
            .into_inner()
    };

    stop.send(()).unwrap();
    // The subscriber hears that the daemon goes, then the session's end, then the close.
    session.until(|frame| frame["type"] == "shutdown").await;
    session.until(|frame| frame["event"]["event"] == "exited").await;
    let close = loop {
        match tokio::time::timeout(WAIT, session.socket.next()).await.unwrap() {
            Some(Ok(WsMessage::Close(frame))) => break frame,
            Some(Ok(_)) => continue,
            other => panic!("expected a close frame, got {other:?}"),
        }
    };
    assert_eq!(u16::from(close.unwrap().code), 1001, "going away");
    // The dashboard too.
    let mut saw_notice = false;
    loop {
        match tokio::time::timeout(WAIT, dashboard.next()).await.unwrap() {
            Some(Ok(WsMessage::Text(text))) => {
                saw_notice |= serde_json::from_str::<Value>(&text).unwrap()["type"] == "shutdown";
            }
            Some(Ok(WsMessage::Close(frame))) => {
                assert_eq!(u16::from(frame.unwrap().code), 1001);
                break;
            }
            Some(Ok(_)) => {}
            other => panic!("expected a close frame, got {other:?}"),
        }
    }
    assert!(saw_notice, "the dashboard was told before it closed");
    // The gRPC stream gets every event, the session's end included, then UNAVAILABLE.
    let mut exited = false;
    let ended = loop {
        match tokio::time::timeout(WAIT, grpc.message()).await.unwrap() {
            Ok(Some(event)) => {
                use switchboard_server::grpc::pb::session_event::Event;
                exited |= matches!(&event.event, Some(Event::StatusChange(change))
                    if change.to == i32::from(switchboard_server::grpc::pb::Status::Exited));
            }
            Ok(None) => panic!("the stream ended without a status"),
            Err(status) => break status,
        }
    };
    assert!(exited, "the session's end reached the gRPC subscriber");
    assert_eq!(ended.code(), tonic::Code::Unavailable, "{ended:?}");
    tokio::time::timeout(WAIT, serving).await.unwrap().unwrap().unwrap();
    // Everything was stored: the session ended, and its end is in its log.
    let stored = store.get_session(&record.id).await.unwrap().unwrap();
    assert_eq!(stored.state, switchboard_store::RecordState::Exited);
    let last = store.events_before(&record.id, u64::MAX, 3).await.unwrap();
    assert!(last.iter().any(|event| event.kind == "exited"), "{last:?}");
    // And nothing new starts once it drains.
    let refused =
        daemon.create(switchboard_server::CreateSession::new(sandbox.workdir())).await.unwrap_err();
    assert!(refused.to_string().contains("shutting down"), "{refused}");
}

/// A store whose appends fail while `failing` is set (a full disk, as the journal sees it).
#[derive(Debug, Default)]
struct FailingStore {
    inner: switchboard_store::MemoryStore,
    failing: std::sync::atomic::AtomicBool,
    /// Held (written) by a test: session record updates wait, as behind a busy writer thread.
    records: tokio::sync::RwLock<()>,
}

impl FailingStore {
    fn set_failing(&self, failing: bool) {
        self.failing.store(failing, std::sync::atomic::Ordering::SeqCst);
    }

    fn check(&self) -> Result<(), switchboard_store::StoreError> {
        if self.failing.load(std::sync::atomic::Ordering::SeqCst) {
            Err(switchboard_store::StoreError::Database(
                "disk I/O error: No space left on device".into(),
            ))
        } else {
            Ok(())
        }
    }
}

#[async_trait::async_trait]
impl Store for FailingStore {
    async fn create_session(
        &self,
        record: &switchboard_store::SessionRecord,
    ) -> Result<(), switchboard_store::StoreError> {
        self.inner.create_session(record).await
    }
    async fn update_session(
        &self,
        record: &switchboard_store::SessionRecord,
    ) -> Result<(), switchboard_store::StoreError> {
        let _records = self.records.read().await;
        self.inner.update_session(record).await
    }
    async fn claim_session(
        &self,
        claim: switchboard_store::Claim<'_>,
    ) -> Result<bool, switchboard_store::StoreError> {
        self.inner.claim_session(claim).await
    }
    async fn get_session(
        &self,
        id: &str,
    ) -> Result<Option<switchboard_store::SessionRecord>, switchboard_store::StoreError> {
        self.inner.get_session(id).await
    }
    async fn list_sessions(
        &self,
    ) -> Result<Vec<switchboard_store::SessionRecord>, switchboard_store::StoreError> {
        self.inner.list_sessions().await
    }
    async fn delete_session(&self, id: &str) -> Result<(), switchboard_store::StoreError> {
        self.inner.delete_session(id).await
    }
    async fn append(
        &self,
        events: &[switchboard_store::EventRecord],
    ) -> Result<(), switchboard_store::StoreError> {
        self.check()?;
        self.inner.append(events).await
    }
    async fn events_after(
        &self,
        id: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<switchboard_store::EventRecord>, switchboard_store::StoreError> {
        self.inner.events_after(id, after, limit).await
    }
    async fn events_before(
        &self,
        id: &str,
        before: u64,
        limit: usize,
    ) -> Result<Vec<switchboard_store::EventRecord>, switchboard_store::StoreError> {
        self.inner.events_before(id, before, limit).await
    }
    async fn last_seq(&self, id: &str) -> Result<u64, switchboard_store::StoreError> {
        self.inner.last_seq(id).await
    }
    async fn enqueue_outbox(
        &self,
        items: &[switchboard_store::NewOutboxItem],
    ) -> Result<(), switchboard_store::StoreError> {
        self.inner.enqueue_outbox(items).await
    }
    async fn outbox(
        &self,
        channel: &str,
        limit: usize,
    ) -> Result<Vec<switchboard_store::OutboxItem>, switchboard_store::StoreError> {
        self.inner.outbox(channel, limit).await
    }
    async fn outbox_done(&self, id: u64) -> Result<(), switchboard_store::StoreError> {
        self.inner.outbox_done(id).await
    }
    async fn outbox_forget(&self, channel: &str) -> Result<(), switchboard_store::StoreError> {
        self.inner.outbox_forget(channel).await
    }
    async fn outbox_channels(&self) -> Result<Vec<String>, switchboard_store::StoreError> {
        self.inner.outbox_channels().await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_refuses_events_loses_none_and_says_so() {
    let api = FakeApi::start(
        Scenario::new()
            .reply(Reply::text("first answer").when_prompt("ONE"))
            .reply(Reply::text("second answer").when_prompt("TWO")),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let store = Arc::new(FailingStore::default());
    let server = Server::start(store.clone(), &api, &sandbox).await;
    let (status, session) =
        server.post("/api/sessions", json!({"cwd": sandbox.workdir(), "prompt": "ONE"})).await;
    assert_eq!(status, 201, "{session}");
    let id = session["id"].as_str().unwrap().to_owned();
    let mut ws = server.ws(&format!("/api/sessions/{id}/subscribe")).await;
    ws.until(is_result).await;

    // The disk fills; a turn runs meanwhile.
    store.set_failing(true);
    let (status, _) =
        server.post(&format!("/api/sessions/{id}/messages"), json!({"content": "TWO"})).await;
    assert_eq!(status, 202);
    let failing = ws.until(|frame| frame["type"] == "store_failing").await;
    assert!(
        failing.last().unwrap()["message"].as_str().unwrap().contains("No space left"),
        "{failing:?}"
    );
    // Stored before seen: every event the subscriber got is in the log, which takes none now.
    let stored = store.inner.events_after(&id, 0, 100_000).await.unwrap();
    let stored_before = stored.last().unwrap().seq;
    assert!(
        seqs(&failing).iter().all(|seq| *seq <= stored_before),
        "an event was published while the store refused it: {failing:?}"
    );
    // A session cannot even start while its log cannot be written.
    let (status, refused) =
        server.post("/api/sessions", json!({"cwd": sandbox.workdir(), "prompt": "x"})).await;
    assert_eq!(status, 500, "{refused}");
    assert_eq!(refused["error"]["code"], "store_error");

    // Room again: everything arrives, in order, with no number skipped.
    store.set_failing(false);
    let frames = ws.until(is_result).await;
    let recovered = frames.iter().position(|frame| frame["type"] == "store_recovered");
    let first_event = frames.iter().position(|frame| frame["type"] == "event");
    assert!(recovered.is_some(), "{frames:?}");
    assert!(
        first_event.is_some_and(|event| event > recovered.unwrap()),
        "the second turn's events come only after the store took them again: {frames:?}"
    );
    assert_eq!(seqs(&frames)[0], stored_before + 1, "and from the next number: {frames:?}");
    let (_, log) = server.get(&format!("/api/sessions/{id}/events")).await;
    let seqs: Vec<u64> =
        log.as_array().unwrap().iter().map(|event| event["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "no gap, nothing used up");
    assert!(log.to_string().contains("second answer"), "the turn that ran meanwhile is all there");
    let (_, sessions) = server.get("/api/sessions").await;
    assert_eq!(sessions.as_array().unwrap().len(), 1, "the refused session left nothing behind");
    server.stop().await;
}

/// A daemon on a [`FailingStore`], running the real CLI against `api` (with a store retry
/// limit, if given).
async fn daemon_on_failing_store(
    api: &FakeApi,
    sandbox: &CliSandbox,
    store_retry_limit: Option<Duration>,
) -> (Arc<Daemon>, Arc<FailingStore>) {
    let store = Arc::new(FailingStore::default());
    let config = DaemonConfig {
        claude: Some(real_cli(CliVersion::V2_1_330)),
        env: sandbox.env(&api.base_url()).into_iter().collect(),
        clear_env: true,
        store_retry_limit,
        ..DaemonConfig::default()
    };
    (Daemon::open(store.clone(), config).await.unwrap(), store)
}

/// Nothing a subscriber sees waits for a session record's write: with every record update
/// held (a store writer busy folding), a whole turn, its state changes included, reaches the
/// subscriber; the record catches up once the store takes it. (The pump used to wait for each
/// record update before its next events.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_events_never_wait_for_a_record_write() {
    let api = FakeApi::start(Scenario::new().reply(Reply::text("hello"))).await.unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let (daemon, store) = daemon_on_failing_store(&api, &sandbox, None).await;
    let held = store.records.write().await;
    let record = daemon
        .create(switchboard_server::CreateSession {
            prompt: Some("first".into()),
            ..switchboard_server::CreateSession::new(sandbox.workdir())
        })
        .await
        .unwrap();
    let mut subscription = daemon.subscribe(&record.id, 0);
    let mut kinds = Vec::new();
    loop {
        let item = tokio::time::timeout(WAIT, subscription.next())
            .await
            .expect("a live event waited for a record write")
            .unwrap()
            .unwrap();
        let switchboard_server::Subscribed::Event(event) = item else { continue };
        kinds.push(event.kind.to_string());
        if event.kind == "state"
            && event.payload.contains("\"idle\"")
            && kinds.contains(&"cost_changed".to_owned())
        {
            break;
        }
    }
    // The store has not had the record since the session began...
    assert_eq!(
        store.inner.get_session(&record.id).await.unwrap().unwrap().state,
        switchboard_store::RecordState::Starting
    );
    // ...and has it once it takes writes again (the stop's final write follows the others).
    drop(held);
    daemon.stop(&record.id, false).await.unwrap();
    let stored = store.inner.get_session(&record.id).await.unwrap().unwrap();
    assert_eq!(stored.state, switchboard_store::RecordState::Exited);
    assert!(stored.cost_usd > 0.0, "{stored:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_keeps_refusing_stops_the_session_with_the_reason() {
    let api = FakeApi::start(Scenario::new().reply(Reply::text("hello"))).await.unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let (daemon, store) =
        daemon_on_failing_store(&api, &sandbox, Some(Duration::from_millis(300))).await;
    let record = daemon
        .create(switchboard_server::CreateSession {
            prompt: Some("first".into()),
            ..switchboard_server::CreateSession::new(sandbox.workdir())
        })
        .await
        .unwrap();
    // A first turn, stored (so that the session can be resumed later).
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let now = daemon.record(&record.id).await.unwrap().unwrap();
        if now.state == switchboard_store::RecordState::Idle && now.claude_session_id.is_some() {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the first turn never ended: {now:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut dashboard = daemon.dashboard();
    store.set_failing(true);
    daemon.running(&record.id).await.unwrap().send_text("hello").await.unwrap();
    let failed = loop {
        let change = tokio::time::timeout(WAIT, dashboard.recv()).await.unwrap().unwrap();
        if let switchboard_server::changes::Change::SessionFailed { error, .. } = change.change {
            break error;
        }
    };
    assert!(failed.contains("No space left"), "{failed}");
    // The CLI is stopped; the record says crashed.
    let mut subscription = daemon.subscribe(&record.id, 0);
    let deadline = tokio::time::Instant::now() + WAIT;
    while daemon.handle(&record.id).is_ok() {
        assert!(tokio::time::Instant::now() < deadline, "the session was never stopped");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        daemon.record(&record.id).await.unwrap().unwrap().state,
        switchboard_store::RecordState::Crashed
    );
    // Once the store takes events again, the log says how many were lost, in sequence.
    store.set_failing(false);
    daemon.resume(&record.id).await.unwrap();
    let mut kinds = Vec::new();
    let mut last = 0;
    while !kinds.contains(&"lost".to_owned()) {
        let item = tokio::time::timeout(WAIT, subscription.next()).await.unwrap().unwrap().unwrap();
        if let switchboard_server::Subscribed::Event(event) = item {
            assert_eq!(event.seq, last + 1, "no gap");
            last = event.seq;
            kinds.push(event.kind.to_string());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_upgrade_abandoned_before_the_101_leaves_no_session() {
    use tokio::io::AsyncWriteExt;
    let api = FakeApi::start(Scenario::new()).await.unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let store: Arc<dyn Store> = Arc::new(switchboard_store::MemoryStore::new());
    let server = Server::start(store, &api, &sandbox).await;
    let address = server.base.trim_start_matches("http://").to_owned();
    // A CLI that asks to upgrade and is gone before the answer.
    let mut abandoned = tokio::net::TcpStream::connect(&address).await.unwrap();
    let request = format!(
        "GET / HTTP/1.1\r\nhost: {address}\r\nauthorization: Bearer {TOKEN}\r\nconnection: upgrade\r\nupgrade: websocket\r\nsec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
    );
    abandoned.write_all(request.as_bytes()).await.unwrap();
    drop(abandoned);
    // A CLI that connects for real, and leaves: its session ends.
    let cli = server.relay_cli().await;
    let deadline = tokio::time::Instant::now() + WAIT;
    while server.daemon.store().list_sessions().await.unwrap().is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "the real CLI never got a session");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(cli);
    // Every session ends; none waits for a CLI that left before its 101.
    loop {
        let sessions = server.daemon.store().list_sessions().await.unwrap();
        let waiting: Vec<_> = sessions
            .iter()
            .filter(|session| session.state == switchboard_store::RecordState::Starting)
            .collect();
        if waiting.is_empty() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "sessions wait for CLIs that left: {waiting:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Every session has ended: the real CLI's, and the abandoned one's if its upgrade was
    // done before the daemon saw the client go (the 101 can be written to a socket whose
    // peer has just closed): at most those two.
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let sessions = server.daemon.store().list_sessions().await.unwrap();
        assert!(sessions.len() <= 2, "{sessions:?}");
        if sessions.iter().all(|session| ["exited", "crashed"].contains(&session.state.as_str())) {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "a session never ended: {sessions:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    server.stop().await;
}

#[tokio::test]
async fn an_unreadable_transcript_directory_is_the_daemons_failure() {
    let api = FakeApi::start(Scenario::new()).await.unwrap();
    let sandbox = CliSandbox::new().unwrap();
    // Where the transcripts' directory should be, a file: reading it fails for any user.
    let claude = sandbox.home().join(".claude");
    std::fs::create_dir_all(&claude).unwrap();
    std::fs::write(claude.join("projects"), "not a directory").unwrap();
    let store: Arc<dyn Store> = Arc::new(switchboard_store::MemoryStore::new());
    let server = Server::start(store, &api, &sandbox).await;
    let (status, body) = server.get("/api/claude/sessions").await;
    assert_eq!(status, 500, "{body}");
    assert_eq!(body["error"]["code"], "internal");
    server.stop().await;
}

/// A small tmpfs of our own (needs root, as CI has; the test is skipped without it, outside CI
/// only), unmounted
/// when dropped.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    #[allow(clippy::disallowed_methods)] // mount(8), not claude
    fn mount(bytes: usize) -> Option<SmallDisk> {
        let dir = tempfile::tempdir().ok()?;
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(dir.path())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|status| status.success());
        mounted.then_some(SmallDisk { dir })
    }

    fn path(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// Fills the file system: a file grows until a write fails.
    fn fill(&self) -> std::path::PathBuf {
        use std::io::Write;
        let path = self.path().join("filler");
        let mut file = std::fs::File::create(&path).unwrap();
        let block = vec![0u8; 64 * 1024];
        while file.write_all(&block).is_ok() {}
        let _ = file.flush();
        path
    }
}

impl Drop for SmallDisk {
    #[allow(clippy::disallowed_methods)] // umount(8), not claude
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg("-l").arg(self.dir.path()).status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_loses_no_event_and_a_freed_one_takes_them_all() {
    // Lines streamed while the disk is full: more than the space the journal reserved before
    // it filled up (a 1 MiB window) holds, so that its appends do run out of room.
    const STREAMED: usize = 8000;
    let Some(disk) = SmallDisk::mount(8 * 1024 * 1024) else {
        // Without root there is no file system of our own to fill; the failing store above
        // covers the same path. CI runs as root: there it must not pass without its disk.
        assert!(
            std::env::var_os("CI").is_none(),
            "no small tmpfs could be mounted for the full-disk test (CI needs root for it)"
        );
        return;
    };
    let script = disk.path().join("script.json");
    std::fs::write(
        &script,
        json!([
            {"expect": "control_request", "subtype": "initialize"}, {"reply": {}},
            {"expect": "user"}, {"turn": "first"},
            {"expect": "user"},
            {"stream_lines": {"rate": 1_000_000.0, "count": STREAMED}},
            {"turn": "second"},
            {"wait_eof": true},
        ])
        .to_string(),
    )
    .unwrap();
    let store = Arc::new(SqliteStore::open(disk.path().join("db")).unwrap());
    let config = DaemonConfig {
        claude: Some(switchboard_testkit::fake_cli()),
        env: vec![("FAKE_CLAUDE_SCRIPT".into(), script.display().to_string())],
        ..DaemonConfig::default()
    };
    let daemon = Daemon::open(store.clone(), config).await.unwrap();
    let record = daemon
        .create(switchboard_server::CreateSession {
            prompt: Some("one".into()),
            ..switchboard_server::CreateSession::new(disk.path().to_owned())
        })
        .await
        .unwrap();
    let mut subscription = daemon.subscribe(&record.id, 0);
    let mut seqs = Vec::new();
    // Results seen, in whichever phase they arrive: the store's failing and recovering are told
    // beside the events, not in their order, so a result may come after either.
    let mut results = 0;
    let mut seen = |event: &switchboard_store::EventRecord, seqs: &mut Vec<u64>| {
        seqs.push(event.seq);
        if event.payload.contains("\"type\":\"result\"") {
            results += 1;
        }
        results
    };
    let mut count = 0;
    // The first turn is stored.
    while daemon.record(&record.id).await.unwrap().unwrap().state
        != switchboard_store::RecordState::Idle
    {
        if let switchboard_server::Subscribed::Event(event) =
            tokio::time::timeout(WAIT, subscription.next()).await.unwrap().unwrap().unwrap()
        {
            count = seen(&event, &mut seqs);
        }
    }
    // The disk fills up; the second turn streams 200 lines meanwhile.
    let filler = disk.fill();
    daemon.handle(&record.id).unwrap().send_text("two").await.unwrap();
    loop {
        match tokio::time::timeout(WAIT, subscription.next()).await.unwrap().unwrap().unwrap() {
            switchboard_server::Subscribed::Event(event) => count = seen(&event, &mut seqs),
            switchboard_server::Subscribed::StoreFailing(reason) => {
                assert!(reason.contains("space") || reason.contains("full"), "{reason}");
                break;
            }
            other => panic!("expected the store to fail, got {other:?}"),
        }
    }
    // Room again: every event arrives, numbered without a gap, to the end of the second turn.
    std::fs::remove_file(filler).unwrap();
    let mut recovered = false;
    while !(recovered && count >= 2) {
        match tokio::time::timeout(WAIT, subscription.next()).await.unwrap().unwrap().unwrap() {
            switchboard_server::Subscribed::Event(event) => count = seen(&event, &mut seqs),
            switchboard_server::Subscribed::StoreRecovered => recovered = true,
            _ => {}
        }
    }
    let last = *seqs.last().unwrap();
    assert_eq!(seqs, (1..=last).collect::<Vec<_>>(), "every event once, in order");
    let stored = store.events_after(&record.id, 0, 100_000).await.unwrap();
    let stored_seqs: Vec<u64> = stored.iter().map(|event| event.seq).collect();
    assert_eq!(stored_seqs, (1..=stored.len() as u64).collect::<Vec<_>>(), "the log has no gap");
    assert!(stored.len() as u64 >= last);
    let streamed = stored.iter().filter(|event| event.payload.contains("t=")).count();
    assert!(streamed >= STREAMED, "the streamed lines are all stored: {streamed} of {STREAMED}");
    daemon.stop_all().await;
    store.close();
}

/// A real 2.1.37 CLI launched by "someone else", connecting to the relay at `root` with the
/// ingress token.
fn launch_relay_cli(sandbox: &CliSandbox, api: &FakeApi, root: &str) -> tokio::process::Child {
    sandbox
        .cli_command(&real_cli(CliVersion::V2_1_37), &api.base_url())
        .arg(format!("--sdk-url={root}"))
        .env("CLAUDE_CODE_SESSION_ACCESS_TOKEN", TOKEN)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

/// A daemon with `policy`, a relay CLI at `/`, and one turn ("RELAY it") sent by a frontend:
/// the daemon, the CLI, and the frames the frontend read up to the turn's result.
async fn relay_turn(
    api: &FakeApi,
    sandbox: &CliSandbox,
    policy: switchboard_session::Policy,
) -> (Server, tokio::process::Child, Vec<Value>) {
    let store: Arc<dyn Store> = Arc::new(switchboard_store::MemoryStore::new());
    let server =
        Server::start_with(store, api, sandbox, |config| config.default_policy = Some(policy))
            .await;
    let mut frontend = server.ws(&format!("/ws?token={TOKEN}")).await;
    let root = format!("{}/", server.base.replace("http://", "ws://"));
    let cli = launch_relay_cli(sandbox, api, &root);
    frontend
        .until(|frame| frame["type"] == "status" && frame["text"] == "claude code connected")
        .await;
    frontend
        .send(json!({"type": "user", "message": {"role": "user", "content": "RELAY it"}, "parent_tool_use_id": null, "session_id": ""}))
        .await;
    let frames = frontend.until(|frame| frame["type"] == "result").await;
    (server, cli, frames)
}

/// The policy holds for a CLI that connected on its own: no `--disallowedTools` of ours reach
/// it, so its `initialize`'s hook is all that stands between the model and a read the CLI
/// allows by itself (relative rules resolved against the CLI's own cwd).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_cli_is_held_by_the_policy_too() {
    let sandbox = CliSandbox::new().unwrap();
    std::fs::write(sandbox.file(".env"), "API_KEY=hunter2-over-the-relay\n").unwrap();
    let api = FakeApi::start(
        Scenario::new()
            .reply(
                Reply::tool_use("Read", json!({"file_path": sandbox.file(".env")}))
                    .when_prompt("RELAY"),
            )
            .reply(Reply::text("understood").when_tool_result()),
    )
    .await
    .unwrap();
    let policy = switchboard_session::Policy::from_toml(
        "[permissions]\ndeny = [\"Read(./.env)\"]\ndefault = \"allow\"",
    )
    .unwrap();
    let (server, mut cli, _) = relay_turn(&api, &sandbox, policy).await;
    let request = api.wait_for(|request| !request.tool_results().is_empty()).await;
    let (_, content, is_error) = request.tool_results()[0].clone();
    assert!(is_error, "{content}");
    assert!(!content.contains("hunter2"), "the secret crossed the relay: {content}");
    assert!(content.contains("Read(./.env)"), "the model is told the rule: {content}");
    let _ = cli.kill().await;
    server.stop().await;
}

/// The relay protocol's relay-level auto-approve is `--policy auto-approve`: a relay CLI's
/// calls run without anyone asked, and frontends see them run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_approve_lets_a_relay_clis_calls_run_as_the_relay_protocol_says() {
    let sandbox = CliSandbox::new().unwrap();
    let api = FakeApi::start(
        Scenario::new()
            .reply(Reply::tool_use("Bash", touch_and_ls("auto.txt")).when_prompt("RELAY"))
            .reply(Reply::text("ran it").when_tool_result_contains("auto.txt")),
    )
    .await
    .unwrap();
    let (server, mut cli, frames) =
        relay_turn(&api, &sandbox, switchboard_session::Policy::allow_all()).await;
    assert_eq!(frames.last().unwrap()["result"], "ran it");
    assert!(sandbox.file("auto.txt").exists(), "the call ran");
    let (_, sessions) = server.get("/api/sessions").await;
    let relay = &sessions.as_array().unwrap()[0];
    assert!(relay["pending_permissions"].as_array().unwrap().is_empty());
    let (_, events) =
        server.get(&format!("/api/sessions/{}/events", relay["id"].as_str().unwrap())).await;
    let asked_a_person = events
        .as_array()
        .unwrap()
        .iter()
        .any(|event| event["event"]["event"] == "permission_requested");
    assert!(!asked_a_person, "no one was asked");
    let _ = cli.kill().await;
    server.stop().await;
}
