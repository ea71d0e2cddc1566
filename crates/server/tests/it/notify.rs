//! Notifications with the real CLI, to local receivers: a webhook receiver that checks every
//! signature and is down at first, and an ntfy-compatible fake whose Approve button the test
//! presses as a phone would. Nothing is lost, nothing is doubled, a request is approved from
//! the notification and another denied through a webhook's link with a reason the model reads;
//! a notice still waiting when a daemon stops goes out from the next one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use serde_json::{json, Value};
use switchboard_server::notify::{ChannelConfig, ChannelKind, NotifyConfig};
use switchboard_server::{Daemon, DaemonConfig};
use switchboard_store::{MemoryStore, Store};
use switchboard_testkit::{CliSandbox, FakeApi, Reply, Scenario};

use crate::links::post;
use crate::{is_result, touch_and_ls, Server, WAIT};

const SECRET: &str = "webhook-secret-0123456789";

/// What a receiver got: each request's headers and body, in order; it answers `503` while
/// `down` is above zero (counting down), `200` after.
#[derive(Default)]
pub(crate) struct Received {
    requests: Vec<(HeaderMap, String)>,
    down: usize,
    refused: usize,
}

#[derive(Clone, Default)]
pub(crate) struct Receiver {
    got: Arc<Mutex<Received>>,
    changed: Arc<tokio::sync::Notify>,
}

impl Receiver {
    /// Serves on port 0; its base URL.
    pub(crate) async fn start(&self) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let app = self.router();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        format!("http://{address}")
    }

    /// What it serves: every request taken (or refused while down).
    fn router(&self) -> axum::Router {
        async fn take(
            State(receiver): State<Receiver>,
            headers: HeaderMap,
            body: String,
        ) -> StatusCode {
            let status = {
                let mut got = receiver.got.lock().unwrap();
                if got.down > 0 {
                    got.down -= 1;
                    got.refused += 1;
                    StatusCode::SERVICE_UNAVAILABLE
                } else {
                    got.requests.push((headers, body));
                    StatusCode::OK
                }
            };
            receiver.changed.notify_waiters();
            status
        }
        axum::Router::new().fallback(take).with_state(self.clone())
    }

    fn set_down(&self, count: usize) {
        self.got.lock().unwrap().down = count;
    }

    /// What was taken (headers, the body as sent, parsed), once `done` holds for the bodies.
    pub(crate) async fn until(
        &self,
        done: impl Fn(&[Value]) -> bool,
    ) -> Vec<(HeaderMap, String, Value)> {
        tokio::time::timeout(WAIT, async {
            loop {
                let changed = self.changed.notified();
                let taken = self.taken();
                let bodies: Vec<Value> = taken.iter().map(|(_, _, body)| body.clone()).collect();
                if done(&bodies) {
                    return taken;
                }
                changed.await;
            }
        })
        .await
        .expect("the receiver got what was expected in time")
    }

    fn taken(&self) -> Vec<(HeaderMap, String, Value)> {
        let got = self.got.lock().unwrap();
        got.requests
            .iter()
            .map(|(headers, body)| {
                (headers.clone(), body.clone(), serde_json::from_str(body).unwrap())
            })
            .collect()
    }
}

pub(crate) fn channel(name: &str, kind: ChannelKind, url: String) -> ChannelConfig {
    let secret = (kind == ChannelKind::Webhook).then(|| SECRET.to_owned());
    ChannelConfig {
        name: name.into(),
        kind,
        url,
        secret,
        token: None,
        events: None,
        ca_file: None,
        after_secs: None,
        // The tests' receivers are on loopback.
        allow_private: true,
        push: None,
    }
}

pub(crate) fn fast(channels: Vec<ChannelConfig>) -> NotifyConfig {
    NotifyConfig {
        channels,
        retry_initial: Duration::from_millis(20),
        retry_max: Duration::from_millis(200),
        ..NotifyConfig::default()
    }
}

/// Checks a webhook's signature as a receiver would: `t=SECONDS,v1=HEX` over `SECONDS.BODY`.
fn signed(headers: &HeaderMap, body: &str) -> bool {
    let header = headers["x-switchboard-signature"].to_str().unwrap();
    let timestamp: u64 = header
        .strip_prefix("t=")
        .and_then(|rest| rest.split(',').next())
        .and_then(|t| t.parse().ok())
        .unwrap();
    header == switchboard_server::notify::signature(SECRET, timestamp, body)
}

pub(crate) fn keys(bodies: &[Value], event: &str) -> Vec<String> {
    bodies
        .iter()
        .filter(|body| body["event"] == event)
        .map(|body| body["id"].as_str().unwrap().to_owned())
        .collect()
}

/// Does what an ntfy client does when its button is pressed: the action's request.
async fn press(action: &Value) -> (u16, String) {
    let mut request = crate::http_client()
        .request(
            reqwest::Method::from_bytes(action["method"].as_str().unwrap().as_bytes()).unwrap(),
            action["url"].as_str().unwrap(),
        )
        .body(action["body"].as_str().unwrap().to_owned());
    for (name, value) in action["headers"].as_object().unwrap() {
        request = request.header(name.as_str(), value.as_str().unwrap());
    }
    let response = request.send().await.unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_reach_a_webhook_that_was_down_and_a_phone_that_approves_them() {
    let api = FakeApi::start(
        Scenario::new()
            .reply(Reply::tool_use("Bash", touch_and_ls("from-ntfy.txt")).when_prompt("FIRST"))
            .reply(Reply::text("First done.").when_tool_result_contains("from-ntfy.txt"))
            .reply(Reply::tool_use("Bash", touch_and_ls("denied.txt")).when_prompt("SECOND"))
            .reply(Reply::text("Fine, I will not.").when_tool_result_contains("not on a friday")),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let hooks = Receiver::default();
    hooks.set_down(3);
    let hooks_url = hooks.start().await;
    let phone = Receiver::default();
    let phone_url = phone.start().await;
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let server = Server::start_with(store, &api, &sandbox, |config| {
        config.notify = fast(vec![
            channel("ops", ChannelKind::Webhook, format!("{hooks_url}/hook")),
            channel("phone", ChannelKind::Ntfy, format!("{phone_url}/agents")),
        ]);
    })
    .await;
    let (status, session) =
        server.post("/api/sessions", json!({"cwd": sandbox.workdir(), "prompt": "FIRST"})).await;
    assert_eq!(status, 201, "{session}");
    let id = session["id"].as_str().unwrap().to_owned();
    let mut ws = server.ws(&format!("/api/sessions/{id}/subscribe?after=0")).await;

    // The phone hears of the request, with Approve, Deny and Open; Approve is pressed.
    let got = phone.until(|bodies| !bodies.is_empty()).await;
    let message = &got[0].2;
    assert_eq!(message["topic"], "agents");
    assert!(message["message"].as_str().unwrap().contains("touch from-ntfy.txt"), "{message}");
    let link = message["click"].as_str().unwrap().to_owned();
    assert!(link.starts_with(&format!("{}/a/", server.base)), "{link}");
    let (status, page) = press(&message["actions"][0]).await;
    assert!(status == 200 && page.contains("Approved"), "{status} {page}");
    let frames = ws.until(is_result).await;
    let decided = frames.iter().find(|f| f["event"]["event"] == "permission_decided").unwrap();
    assert_eq!(decided["event"]["by"], json!({"kind": "person", "who": "link (ntfy:phone)"}));
    assert!(sandbox.file("from-ntfy.txt").exists());

    // The webhook was down for its first three tries; it gets the request and the turn's end,
    // each once, in order, signed.
    let taken = hooks.until(|bodies| keys(bodies, "session_finished").len() == 1).await;
    assert_eq!(hooks.got.lock().unwrap().refused, 3, "it was down, and tried again");
    let bodies: Vec<Value> = taken.iter().map(|(_, _, body)| body.clone()).collect();
    let events: Vec<&str> = bodies.iter().map(|body| body["event"].as_str().unwrap()).collect();
    assert_eq!(events, ["permission_requested", "session_finished"], "in order, none twice");
    for (headers, raw, body) in &taken {
        assert!(signed(headers, raw), "a valid signature: {headers:?}");
        assert_eq!(headers["x-switchboard-delivery"], body["id"].as_str().unwrap());
        assert_eq!(headers["x-switchboard-event"], body["event"].as_str().unwrap());
    }
    let request = &bodies[0];
    assert_eq!(request["session"]["id"], id.as_str());
    assert_eq!(request["request"]["tool_name"], "Bash");
    assert_eq!(request["channel"], "ops");
    assert_ne!(request["link"], message["click"], "each channel's link names it");
    assert_eq!(bodies[1]["text"], "First done.");
    // A forged signature would not pass the receiver's check.
    let mut forged = taken[0].0.clone();
    forged.insert("x-switchboard-signature", "t=1,v1=00".parse().unwrap());
    assert!(!signed(&forged, &taken[0].1));

    // Denied through the webhook's link, with a reason the model reads.
    ws.send(json!({"type": "user_message", "content": "SECOND"})).await;
    let taken = hooks.until(|bodies| keys(bodies, "permission_requested").len() == 2).await;
    let link = taken.last().unwrap().2["link"].as_str().unwrap().to_owned();
    let (status, _) = post(&server, &link, "decision=deny&message=not+on+a+friday").await;
    assert_eq!(status, 200);
    let frames = ws.until(is_result).await;
    assert_eq!(frames.last().unwrap()["event"]["line"]["result"], "Fine, I will not.");
    assert!(!sandbox.file("denied.txt").exists());
    // Every notice reached the webhook exactly once.
    let taken = hooks.until(|bodies| keys(bodies, "session_finished").len() == 2).await;
    let mut seen: HashMap<String, usize> = HashMap::new();
    for (_, _, body) in &taken {
        *seen.entry(body["id"].as_str().unwrap().to_owned()).or_default() += 1;
    }
    assert!(seen.values().all(|count| *count == 1), "nothing doubled: {seen:?}");
    assert_eq!(seen.len(), 4, "{seen:?}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notice_waiting_when_the_daemon_stops_goes_out_from_the_next_one() {
    let api = FakeApi::start(Scenario::new().reply(Reply::text("All done.").when_prompt("HELLO")))
        .await
        .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let hooks = Receiver::default();
    hooks.set_down(usize::MAX);
    let url = format!("{}/hook", hooks.start().await);
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let config = |config: &mut switchboard_server::DaemonConfig| {
        config.notify = fast(vec![channel("ops", ChannelKind::Webhook, url.clone())]);
    };
    let server = Server::start_with(store.clone(), &api, &sandbox, config).await;
    let (_, session) =
        server.post("/api/sessions", json!({"cwd": sandbox.workdir(), "prompt": "HELLO"})).await;
    let id = session["id"].as_str().unwrap().to_owned();
    let mut ws = server.ws(&format!("/api/sessions/{id}/subscribe?after=0")).await;
    ws.until(is_result).await;
    // Refused at least once: it waits in the outbox.
    tokio::time::timeout(WAIT, async {
        while hooks.got.lock().unwrap().refused == 0 {
            hooks.changed.notified().await;
        }
    })
    .await
    .unwrap();
    assert_eq!(store.outbox("ops", 10).await.unwrap().len(), 1);
    drop(ws);
    server.stop().await;
    // The first daemon and its senders are gone before the next starts.
    tokio::time::timeout(WAIT, async {
        while Arc::strong_count(&store) > 1 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the first daemon let go of the store");
    hooks.set_down(0);
    let server = Server::start_with(store.clone(), &api, &sandbox, config).await;
    let taken = hooks.until(|bodies| !bodies.is_empty()).await;
    assert_eq!(taken[0].2["event"], "session_finished");
    assert_eq!(taken[0].2["session"]["id"], id.as_str());
    tokio::time::timeout(WAIT, async {
        while !store.outbox("ops", 10).await.unwrap().is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the outbox empties once the receiver took it");
    assert_eq!(hooks.taken().len(), 1, "sent once");
    server.stop().await;
}

/// The same receiver over HTTPS, with a certificate for 127.0.0.1 signed by a certificate
/// authority of the test's own; its base URL and the authority's PEM file.
async fn start_tls(receiver: &Receiver, dir: &std::path::Path) -> (String, std::path::PathBuf) {
    let provider = || Arc::new(rustls::crypto::ring::default_provider());
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_certificate = ca.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let leaf = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    let ca_file = dir.join("ca.pem");
    std::fs::write(&ca_file, ca_certificate.pem()).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let app = receiver.router();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (acceptor, app) = (acceptor.clone(), app.clone());
            tokio::spawn(async move {
                // A client that does not trust the certificate ends the handshake here.
                let Ok(tls) = acceptor.accept(stream).await else { return };
                let service = hyper_util::service::TowerToHyperService::new(app);
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    (format!("https://{address}"), ca_file)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_over_https_is_reached_and_an_untrusted_one_is_not() {
    let api = FakeApi::start(Scenario::new().reply(Reply::text("Secure.").when_prompt("HELLO")))
        .await
        .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let hooks = Receiver::default();
    let (base, ca_file) = start_tls(&hooks, dir.path()).await;
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let server = Server::start_with(store.clone(), &api, &sandbox, |config| {
        let mut trusted = channel("tls", ChannelKind::Webhook, format!("{base}/hook"));
        trusted.ca_file = Some(ca_file.clone());
        // The same receiver without its authority: the system's roots do not vouch for it.
        let untrusted = channel("untrusted", ChannelKind::Webhook, format!("{base}/hook"));
        config.notify = fast(vec![trusted, untrusted]);
    })
    .await;
    let (_, session) =
        server.post("/api/sessions", json!({"cwd": sandbox.workdir(), "prompt": "HELLO"})).await;
    let taken = hooks.until(|bodies| !bodies.is_empty()).await;
    assert_eq!(taken[0].2["event"], "session_finished");
    assert_eq!(taken[0].2["session"]["id"], session["id"]);
    assert_eq!(taken[0].2["channel"], "tls");
    assert!(signed(&taken[0].0, &taken[0].1));
    assert_eq!(store.outbox("untrusted", 10).await.unwrap().len(), 1, "kept, not sent");
    assert_eq!(hooks.taken().len(), 1, "nothing reached the receiver without TLS trust");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_request_escalates_to_a_second_channel_and_warns_before_it_times_out() {
    let api = FakeApi::start(
        Scenario::new()
            .reply(Reply::tool_use("Bash", touch_and_ls("escalated.txt")).when_prompt("FIRST"))
            .reply(
                Reply::text("Escalated and approved.").when_tool_result_contains("escalated.txt"),
            )
            .reply(Reply::tool_use("Bash", touch_and_ls("never.txt")).when_prompt("SECOND"))
            .reply(Reply::text("Timed out.").when_tool_result()),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let first = Receiver::default();
    let first_url = first.start().await;
    let second = Receiver::default();
    let second_url = second.start().await;
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let server = Server::start_with(store, &api, &sandbox, |config| {
        let on_call = channel("on-call", ChannelKind::Webhook, format!("{first_url}/hook"));
        let mut lead = channel("lead", ChannelKind::Webhook, format!("{second_url}/hook"));
        lead.after_secs = Some(1);
        config.notify = fast(vec![on_call, lead]);
    })
    .await;
    // A person has 8 s: a warning at 4 s (halfway, as the timeout is under two minutes). The
    // first request is answered well inside that, however loaded the machine.
    let policy = "[permissions]\nask = [\"Bash\"]\nask_timeout_secs = 8\n";
    let (_, session) = server
        .post(
            "/api/sessions",
            json!({"cwd": sandbox.workdir(), "prompt": "FIRST", "policy": policy}),
        )
        .await;
    let id = session["id"].as_str().unwrap().to_owned();
    let mut ws = server.ws(&format!("/api/sessions/{id}/subscribe?after=0")).await;

    // The first channel hears at once; nobody answers; the second hears a second later, with a
    // link of its own that answers it.
    let now = first.until(|bodies| !keys(bodies, "permission_requested").is_empty()).await;
    let asked_ms = now[0].2["request"]["asked_at_ms"].as_u64().unwrap();
    // The second waits its second: its notice is stamped a second after the request (an order,
    // not an absence at some instant, which a loaded machine could race).
    let escalated = second.until(|bodies| !keys(bodies, "permission_requested").is_empty()).await;
    let body = &escalated[0].2;
    assert!(body["ts_ms"].as_u64().unwrap() >= asked_ms + 1000, "after a second: {body}");
    assert_eq!(body["channel"], "lead");
    let (status, _) = post(&server, body["link"].as_str().unwrap(), "decision=allow").await;
    assert_eq!(status, 200);
    let frames = ws.until(is_result).await;
    let decided = frames.iter().find(|f| f["event"]["event"] == "permission_decided").unwrap();
    assert_eq!(decided["event"]["by"]["who"], "link (webhook:lead)");

    // Left unanswered: both channels are warned before it times out, then the policy denies.
    ws.send(json!({"type": "user_message", "content": "SECOND"})).await;
    let warned = first.until(|bodies| !keys(bodies, "request_expiring").is_empty()).await;
    let warning = warned.iter().find(|(_, _, body)| body["event"] == "request_expiring").unwrap();
    assert!(warning.2["title"].as_str().unwrap().starts_with("Expires soon"), "{}", warning.2);
    assert!(warning.2["link"].is_string());
    second.until(|bodies| !keys(bodies, "request_expiring").is_empty()).await;
    let frames = ws.until(is_result).await;
    let decided =
        frames.iter().rev().find(|f| f["event"]["event"] == "permission_decided").unwrap();
    assert_eq!(decided["event"]["by"]["kind"], "timeout");
    // The first request, answered, was never warned about.
    let warnings = keys(
        &first.taken().into_iter().map(|(_, _, body)| body).collect::<Vec<_>>(),
        "request_expiring",
    );
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    server.stop().await;
}

/// A policy's own chain and channels, and a session's own channels: the policy's sessions ask
/// one channel at once and a second a second later, and never a third; a session that names
/// its channel is heard there only; names that are not channels are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_escalates_along_its_own_chain_and_a_session_picks_its_channels() {
    let api = FakeApi::start(
        Scenario::new()
            .reply(Reply::tool_use("Bash", touch_and_ls("chained.txt")).when_prompt("CHAIN"))
            .reply(Reply::text("Chained and approved.").when_tool_result_contains("chained.txt"))
            .reply(Reply::text("Only c.").when_prompt("ONLYC"))
            .reply(Reply::tool_use("Bash", touch_and_ls("to-c.txt")).when_prompt("ASKC"))
            .reply(Reply::text("Asked c.").when_tool_result_contains("to-c.txt"))
            .reply(Reply::text("Marked.").when_prompt("MARK")),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let (a, b, c) = (Receiver::default(), Receiver::default(), Receiver::default());
    let (a_url, b_url, c_url) = (a.start().await, b.start().await, c.start().await);
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let server = Server::start_with(store, &api, &sandbox, |config| {
        config.notify = fast(vec![
            channel("a", ChannelKind::Webhook, format!("{a_url}/hook")),
            channel("b", ChannelKind::Webhook, format!("{b_url}/hook")),
            channel("c", ChannelKind::Webhook, format!("{c_url}/hook")),
        ]);
    })
    .await;
    let policy = "[permissions]\nask = [\"Bash\"]\n\n[notify]\nchannels = [\"a\", \"b\"]\n\n\
                  [[notify.escalate]]\nchannel = \"a\"\n\n\
                  [[notify.escalate]]\nchannel = \"b\"\nafter_secs = 1\n";
    // Names that are not channels are refused, saying which.
    for (bad, name) in [
        (json!({"notify": ["nope"]}), "nope"),
        (json!({"policy": "[notify]\nchannels = [\"zzz\"]\n"}), "zzz"),
        (json!({"policy": "[[notify.escalate]]\nchannel = \"b c\"\n"}), "b c"),
        (json!({"notify": []}), "names no channel"),
        (
            json!({"policy": "[notify]\nchannels = [\"c\"]\n[[notify.escalate]]\nchannel = \"a\"\n"}),
            "reach nobody",
        ),
    ] {
        let mut body = json!({"cwd": sandbox.workdir()});
        body.as_object_mut().unwrap().extend(bad.as_object().unwrap().clone());
        let (status, refused) = server.post("/api/sessions", body).await;
        assert_eq!(status, 400, "{refused}");
        assert!(refused["error"]["message"].as_str().unwrap().contains(name), "{refused}");
    }

    let (status, session) = server
        .post(
            "/api/sessions",
            json!({"cwd": sandbox.workdir(), "prompt": "CHAIN", "policy": policy}),
        )
        .await;
    assert_eq!(status, 201, "{session}");
    let id = session["id"].as_str().unwrap().to_owned();
    let mut ws = server.ws(&format!("/api/sessions/{id}/subscribe?after=0")).await;
    let now = a.until(|bodies| !keys(bodies, "permission_requested").is_empty()).await;
    let asked_ms = now[0].2["request"]["asked_at_ms"].as_u64().unwrap();
    // b waits its second (the stamp below says so).
    let escalated = b.until(|bodies| !keys(bodies, "permission_requested").is_empty()).await;
    let body = &escalated[0].2;
    assert!(body["ts_ms"].as_u64().unwrap() >= asked_ms + 1000, "after a second: {body}");
    let (status, _) = post(&server, body["link"].as_str().unwrap(), "decision=allow").await;
    assert_eq!(status, 200);
    ws.until(is_result).await;
    // The turn's end goes to the policy's channels at once; c hears nothing of this session.
    a.until(|bodies| !keys(bodies, "session_finished").is_empty()).await;
    b.until(|bodies| !keys(bodies, "session_finished").is_empty()).await;

    // A session that names its channel: only c hears of it.
    let (status, only) = server
        .post(
            "/api/sessions",
            json!({"cwd": sandbox.workdir(), "prompt": "ONLYC", "notify": ["c"]}),
        )
        .await;
    assert_eq!(status, 201, "{only}");
    assert_eq!(only["config"]["notify"], json!(["c"]));
    let heard = c.until(|bodies| !keys(bodies, "session_finished").is_empty()).await;
    assert!(
        heard.iter().all(|(_, _, body)| body["session"]["id"] == only["id"]),
        "c hears only its session"
    );

    // The policy's chain with a session's own channel: the chain names none of them, so its
    // requests go to that channel at once.
    let (status, asking) = server
        .post(
            "/api/sessions",
            json!({"cwd": sandbox.workdir(), "prompt": "ASKC", "policy": policy, "notify": ["c"]}),
        )
        .await;
    assert_eq!(status, 201, "{asking}");
    let asked = c.until(|bodies| !keys(bodies, "permission_requested").is_empty()).await;
    let request =
        &asked.iter().find(|(_, _, body)| body["event"] == "permission_requested").unwrap().2;
    assert_eq!(request["session"]["id"], asking["id"]);
    let (status, _) = post(&server, request["link"].as_str().unwrap(), "decision=allow").await;
    assert_eq!(status, 200);
    c.until(|bodies| keys(bodies, "session_finished").len() == 2).await;

    // A last session every channel hears of: each channel delivers in order, so once a and b
    // have it, nothing of the two sessions before reached them.
    let (status, _) =
        server.post("/api/sessions", json!({"cwd": sandbox.workdir(), "prompt": "MARK"})).await;
    assert_eq!(status, 201);
    for receiver in [&a, &b] {
        let taken =
            receiver.until(|bodies| bodies.iter().any(|body| body["text"] == "Marked.")).await;
        let leaked = taken
            .iter()
            .filter(|(_, _, body)| {
                body["session"]["id"] == only["id"] || body["session"]["id"] == asking["id"]
            })
            .count();
        assert_eq!(leaked, 0, "a and b hear nothing of the sessions that chose c");
    }
    server.stop().await;
}

/// What waits for a channel the notify file no longer names is forgotten when the daemon
/// starts; a channel it names keeps its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notices_for_a_channel_that_is_no_more_are_forgotten_at_start() {
    let api = FakeApi::start(Scenario::new()).await.unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let hooks = Receiver::default();
    hooks.set_down(usize::MAX);
    let hooks_url = hooks.start().await;
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let item = |channel: &str| switchboard_store::NewOutboxItem {
        channel: channel.into(),
        key: format!("{channel}:1"),
        body: json!({"id": format!("{channel}:1"), "event": "session_finished"}).to_string(),
    };
    store.enqueue_outbox(&[item("removed"), item("ops")]).await.unwrap();
    let server = Server::start_with(store.clone(), &api, &sandbox, |config| {
        config.notify =
            fast(vec![channel("ops", ChannelKind::Webhook, format!("{hooks_url}/hook"))]);
    })
    .await;
    let forgotten = tokio::time::timeout(WAIT, async {
        while !store.outbox("removed", 10).await.unwrap().is_empty() {
            tokio::task::yield_now().await;
        }
    })
    .await;
    assert!(forgotten.is_ok(), "the removed channel's notice is forgotten");
    assert_eq!(
        store.outbox("ops", 10).await.unwrap().len(),
        1,
        "ops keeps its own (its receiver is down)"
    );
    server.stop().await;
}

/// A receiver on loopback reached by name: a channel without `allow_private` never sends to it
/// (the name resolves to a private address, checked on every try), one with it does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_sends_to_a_private_address_only_when_it_says_so() {
    use switchboard_server::notify::{Notice, Topic};
    let strict = Receiver::default();
    let strict_url = strict.start().await.replace("127.0.0.1", "localhost");
    let allowed = Receiver::default();
    let allowed_url = allowed.start().await.replace("127.0.0.1", "localhost");
    let mut refused = channel("strict", ChannelKind::Webhook, format!("{strict_url}/hook"));
    refused.allow_private = false;
    let open = channel("allowed", ChannelKind::Webhook, format!("{allowed_url}/hook"));
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let config = DaemonConfig { notify: fast(vec![refused, open]), ..DaemonConfig::default() };
    let daemon = Daemon::open(store, config).await.unwrap();
    let notice = Notice {
        topic: Topic::Test,
        key: "private-test".into(),
        body: json!({"event": "test", "id": "private-test"}),
        request: None,
    };
    daemon.notifier().queue(&notice, |_| true, |_| None);
    // The allowed channel gets it; the strict one, queued with it, never does: its notice stays
    // in the outbox (it is retried, and refused at every try).
    allowed.until(|bodies| !keys(bodies, "test").is_empty()).await;
    let waiting = daemon.store().outbox("strict", 10).await.unwrap();
    assert_eq!(waiting.len(), 1, "the strict channel's notice is still queued");
    // The allowed channel's sender removes its notice just after the receiver has it.
    let sent = tokio::time::timeout(WAIT, async {
        while !daemon.store().outbox("allowed", 10).await.unwrap().is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(sent.is_ok(), "the allowed channel's notice leaves its outbox once sent");
    assert!(strict.taken().is_empty(), "a private address was sent to without allow_private");
}
