//! `switchboard serve` and the client commands, as separate processes, with the real CLI.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};
use switchboard_store::{SqliteStore, Store};
use switchboard_testkit::{
    git, git_repository, real_cli, CliSandbox, CliVersion, FakeApi, Reply, Scenario,
};
use tokio::io::{AsyncBufReadExt, BufReader};

const TOKEN: &str = "serve-test-token-0123456789";

pub(crate) struct Daemon {
    pub(crate) child: tokio::process::Child,
    pub(crate) url: String,
    pub(crate) stderr: tokio::task::JoinHandle<String>,
}

/// Starts `switchboard serve` on port 0 with the real CLI and reads the URL it prints.
pub(crate) async fn start_daemon(
    data_dir: &Path,
    api: &FakeApi,
    sandbox: &CliSandbox,
    extra: &[&str],
) -> Daemon {
    start_daemon_with_env(data_dir, api, sandbox, extra, &[]).await
}

/// [`start_daemon`] with more environment for the daemon.
pub(crate) async fn start_daemon_with_env(
    data_dir: &Path,
    api: &FakeApi,
    sandbox: &CliSandbox,
    extra: &[&str],
    env: &[(&str, &str)],
) -> Daemon {
    let claude = real_cli(CliVersion::V2_1_330);
    start_daemon_running(data_dir, api, sandbox, &claude, extra, env).await
}

/// [`start_daemon_with_env`] with `claude` for the CLI.
pub(crate) async fn start_daemon_running(
    data_dir: &Path,
    api: &FakeApi,
    sandbox: &CliSandbox,
    claude: &Path,
    extra: &[&str],
    env: &[(&str, &str)],
) -> Daemon {
    let mut all: Vec<(String, String)> = sandbox.env(&api.base_url()).into_iter().collect();
    all.extend(env.iter().map(|(name, value)| ((*name).to_owned(), (*value).to_owned())));
    let (mut child, url) = spawn_serve(data_dir, claude, extra, all).await;
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let stderr = tokio::spawn(async move {
        let mut text = String::new();
        let _ = tokio::io::AsyncReadExt::read_to_string(&mut stderr, &mut text).await;
        text
    });
    Daemon { child, url, stderr }
}

/// Starts `switchboard serve` on port 0 with `claude` and `env`; returns the child (its
/// stderr still piped) and the URL it printed.
#[allow(clippy::disallowed_methods)] // tests run our own binary
async fn spawn_serve(
    data_dir: &Path,
    claude: &Path,
    extra: &[&str],
    env: Vec<(String, String)>,
) -> (tokio::process::Child, String) {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data_dir)
        .arg("--claude")
        .arg(claude)
        .args(extra)
        .env("RUST_LOG", "info")
        .env_remove("SWITCHBOARD_TOKEN")
        .envs(env)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(Duration::from_secs(30), stdout.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let url = first.rsplit(' ').next().unwrap().to_owned();
    assert!(url.starts_with("http://127.0.0.1:"), "{first}");
    tokio::spawn(async move { while let Ok(Some(_)) = stdout.next_line().await {} });
    (child, url)
}

#[allow(clippy::disallowed_methods)] // tests run our own binary
pub(crate) async fn client(data_dir: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .args(args)
        .arg("--data-dir")
        .arg(data_dir)
        .env_remove("SWITCHBOARD_TOKEN")
        .env_remove("SWITCHBOARD_URL")
        .output()
        .await
        .unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// A client command left running (`sessions tail`), its stdout piped.
#[allow(clippy::disallowed_methods)] // tests run our own binary
fn spawn_client(data_dir: &Path, args: &[&str]) -> tokio::process::Child {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .args(args)
        .arg("--data-dir")
        .arg(data_dir)
        .env_remove("SWITCHBOARD_TOKEN")
        .env_remove("SWITCHBOARD_URL")
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

/// Starts a session in the sandbox with `prompt`; its id.
pub(crate) async fn create_session(
    url: &str,
    token: &str,
    sandbox: &CliSandbox,
    prompt: &str,
) -> String {
    let created = http(
        url,
        token,
        reqwest::Method::POST,
        "/api/sessions",
        Some(json!({"cwd": sandbox.workdir(), "prompt": prompt})),
    )
    .await;
    created["id"].as_str().unwrap().to_owned()
}

pub(crate) async fn http(
    url: &str,
    token: &str,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> Value {
    let mut request =
        crate::http_client().request(method, format!("{url}{path}")).bearer_auth(token);
    if let Some(body) = body {
        request = request.json(&body);
    }
    request.send().await.unwrap().json().await.unwrap_or(Value::Null)
}

/// A session's stored events (`GET /api/sessions/{id}/events`).
pub(crate) async fn session_events(url: &str, token: &str, id: &str) -> Value {
    http(url, token, reqwest::Method::GET, &format!("/api/sessions/{id}/events"), None).await
}

/// The one session of the daemon at `url` whose transport is `transport`, once it shows.
pub(crate) async fn session_with_transport(url: &str, token: &str, transport: &str) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let sessions = http(url, token, reqwest::Method::GET, "/api/sessions", None).await;
        if let Some(session) = sessions
            .as_array()
            .into_iter()
            .flatten()
            .find(|session| session["config"]["transport"] == transport)
        {
            return session.clone();
        }
        assert!(std::time::Instant::now() < deadline, "no {transport} session: {sessions}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls the API until `predicate` holds for the session (bounded).
pub(crate) async fn wait_session(
    url: &str,
    token: &str,
    id: &str,
    predicate: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        let session =
            http(url, token, reqwest::Method::GET, &format!("/api/sessions/{id}"), None).await;
        if predicate(&session) {
            return session;
        }
        assert!(std::time::Instant::now() < deadline, "session never reached the state: {session}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A subscriber's socket.
pub(crate) type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Opens `GET /api/sessions/{id}/subscribe?after=AFTER` on `url` (bounded).
pub(crate) async fn subscribe(url: &str, token: &str, id: &str, after: u64) -> Socket {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
    let address =
        format!("{}/api/sessions/{id}/subscribe?after={after}", url.replace("http://", "ws://"));
    let mut request = address.into_client_request().unwrap();
    request.headers_mut().insert("authorization", format!("Bearer {token}").parse().unwrap());
    tokio::time::timeout(Duration::from_secs(30), tokio_tungstenite::connect_async(request))
        .await
        .expect("the subscriber connects within 30 s")
        .unwrap()
        .0
}

/// The event frames of a subscription until `predicate` holds for one, within 90 s in all.
pub(crate) async fn frames_until(
    socket: &mut Socket,
    predicate: impl Fn(&Value) -> bool,
) -> Vec<Value> {
    use futures::StreamExt as _;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    let mut frames = Vec::new();
    loop {
        let frame = tokio::time::timeout_at(deadline, socket.next())
            .await
            .unwrap_or_else(|_| panic!("what was waited for never came in 90 s: {frames:#?}"))
            .unwrap_or_else(|| panic!("the socket closed first: {frames:#?}"))
            .unwrap();
        let tokio_tungstenite::tungstenite::Message::Text(text) = frame else { continue };
        let frame: Value = serde_json::from_str(&text).unwrap();
        if frame["type"] != "event" {
            continue;
        }
        let done = predicate(&frame);
        frames.push(frame);
        if done {
            return frames;
        }
    }
}

/// The `seq` of each frame.
fn seqs(frames: &[Value]) -> Vec<u64> {
    frames.iter().map(|frame| frame["seq"].as_u64().unwrap()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_approve_sigkill_and_recover() {
    let api = FakeApi::start(
        Scenario::new()
            .reply(
                Reply::tool_use(
                    "Bash",
                    json!({"command": "touch via-cli.txt && ls", "description": "x"}),
                )
                .when_prompt("FIRST"),
            )
            .reply(Reply::text("first done").when_tool_result())
            .reply(
                Reply::tool_use(
                    "Bash",
                    json!({"command": "touch never.txt && ls", "description": "x"}),
                )
                .when_prompt("SECOND"),
            ),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let data = tempfile::tempdir().unwrap();
    let mut daemon = start_daemon(data.path(), &api, &sandbox, &[]).await;
    let token = std::fs::read_to_string(data.path().join("token")).unwrap();
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(data.path().join("token")).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o600, "the token file is private");

    let id = create_session(&daemon.url, &token, &sandbox, "FIRST").await;
    // A subscriber from the first event, across the SIGKILL and the restart below.
    let mut follower = subscribe(&daemon.url, &token, &id, 0).await;
    let session = wait_session(&daemon.url, &token, &id, |s| {
        !s["pending_permissions"].as_array().unwrap().is_empty()
    })
    .await;
    let request_id = session["pending_permissions"][0]["request_id"].as_str().unwrap().to_owned();

    let (code, out, err) = client(data.path(), &["sessions", "ls"]).await;
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains(&id) && out.contains("waiting (1)") && out.contains("FIRST"), "{out}");
    let (code, out, err) = client(data.path(), &["approve", &id, &request_id]).await;
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("approved"));
    wait_session(&daemon.url, &token, &id, |s| s["state"] == "idle").await;
    assert!(sandbox.file("via-cli.txt").exists());
    let (code, out, _) = client(data.path(), &["sessions", "show", &id, "--json"]).await;
    assert_eq!(code, Some(0));
    let shown: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(shown["state"], "idle");

    // A second turn waits on a permission; then the daemon is SIGKILLed.
    http(
        &daemon.url,
        &token,
        reqwest::Method::POST,
        &format!("/api/sessions/{id}/messages"),
        Some(json!({"content": "SECOND"})),
    )
    .await;
    wait_session(&daemon.url, &token, &id, |s| s["state"] == "awaiting_permission").await;
    let seen = frames_until(&mut follower, |frame| {
        frame["event"]["event"] == "permission_requested"
            && frame["event"]["input"].to_string().contains("never.txt")
    })
    .await;
    let pid = daemon.child.id().unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    daemon.child.wait().await.unwrap();
    let logs = daemon.stderr.await.unwrap();
    assert!(!logs.contains(&token), "the token never reaches the logs");
    assert!(logs.contains("switchboard is listening"), "{logs}");

    // The database is intact and every committed event is there, in sequence.
    let db = data.path().join("switchboard.db");
    {
        let connection = rusqlite::Connection::open(&db).unwrap();
        let check: String =
            connection.query_row("PRAGMA integrity_check", [], |row| row.get(0)).unwrap();
        assert_eq!(check, "ok");
    }
    let store = SqliteStore::open(&db).unwrap();
    let events = store.events_after(&id, 0, 100_000).await.unwrap();
    assert!(events.iter().enumerate().all(|(i, e)| e.seq == i as u64 + 1), "contiguous from 1");
    assert!(
        events.iter().any(|e| e.kind == "permission_requested" && e.payload.contains("never.txt")),
        "the pending request was committed"
    );
    let before_restart = events.len() as u64;
    store.close();
    drop(store);

    // A new daemon shows the session exited, with the whole history, and can resume it.
    let daemon = start_daemon(data.path(), &api, &sandbox, &[]).await;
    let session =
        http(&daemon.url, &token, reqwest::Method::GET, &format!("/api/sessions/{id}"), None).await;
    assert_eq!(session["state"], "exited", "{session}");
    let events = session_events(&daemon.url, &token, &id).await;
    let events = events.as_array().unwrap();
    assert_eq!(
        events.len() as u64,
        before_restart + 1,
        "history plus the note that the daemon stopped"
    );
    assert!(events.last().unwrap()["event"]["description"]
        .as_str()
        .unwrap()
        .contains("daemon stopped"));
    // The subscriber, back with the last number it saw, misses nothing and repeats nothing:
    // what it saw before the kill and after the restart is the whole log, in order, once.
    let last_seen = *seqs(&seen).last().unwrap();
    let mut follower = subscribe(&daemon.url, &token, &id, last_seen).await;
    let rest = frames_until(&mut follower, |frame| frame["event"]["event"] == "exited").await;
    let all: Vec<u64> = seqs(&seen).into_iter().chain(seqs(&rest)).collect();
    assert_eq!(all, (1..=events.len() as u64).collect::<Vec<_>>(), "gap-free across SIGKILL");
    let resumed = http(
        &daemon.url,
        &token,
        reqwest::Method::POST,
        &format!("/api/sessions/{id}/resume"),
        Some(json!({})),
    )
    .await;
    assert_eq!(resumed["running"], true, "{resumed}");
    assert!(!sandbox.file("never.txt").exists(), "the unanswered tool never ran");
    let (code, out, _) = client(data.path(), &["sessions", "rm", &id]).await;
    assert_eq!(code, Some(0));
    assert!(out.contains("stopped"));
}

#[tokio::test]
#[allow(clippy::disallowed_methods)] // tests run our own binary
async fn no_auth_is_refused_off_loopback_and_clients_without_a_daemon_say_so() {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .args([
            "serve",
            "--no-auth",
            "--listen",
            "0.0.0.0:0",
            "--data-dir",
            "/tmp/switchboard-never",
        ])
        .output()
        .await
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("only allowed on a loopback address"));
    let empty = tempfile::tempdir().unwrap();
    let (code, _, err) = client(empty.path(), &["sessions"]).await;
    assert_eq!(code, Some(1));
    assert!(err.contains("no running daemon found"), "{err}");
}

/// A bad OTLP endpoint or header is refused at start, naming it, and a header's value never
/// shows in the error.
#[tokio::test]
#[allow(clippy::disallowed_methods)] // tests run our own binary
async fn bad_trace_settings_are_refused_at_start() {
    let data = tempfile::tempdir().unwrap();
    for (endpoint, headers, says) in [
        ("localhost:4317", None, "is not http://HOST:PORT"),
        ("ftp://127.0.0.1:4317", None, "is not http://HOST:PORT"),
        ("https://127.0.0.1:4317", None, "forwards over TLS"),
        ("http://127.0.0.1:4317", Some("authorization"), "is not name=value"),
        ("http://127.0.0.1:4317", Some("authorization:secret-value="), "is not a header's name"),
    ] {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchboard"));
        command.args(["serve", "--listen", "127.0.0.1:0", "--otlp-endpoint", endpoint]);
        command.arg("--data-dir").arg(data.path());
        if let Some(headers) = headers {
            command.env("SWITCHBOARD_OTLP_HEADERS", headers);
        }
        let output = command.output().await.unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{endpoint} {headers:?}: {stderr}");
        assert!(stderr.contains(says), "{endpoint} {headers:?}: {stderr}");
        assert!(!stderr.contains("secret-value"), "{stderr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_explicit_token_is_required_and_the_wrong_one_is_refused() {
    let api = FakeApi::start(Scenario::new()).await.unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let data = tempfile::tempdir().unwrap();
    let daemon = start_daemon(data.path(), &api, &sandbox, &["--token", TOKEN]).await;
    let ok = crate::http_client()
        .get(format!("{}/api/health", daemon.url))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status().as_u16(), 200);
    let wrong = crate::http_client()
        .get(format!("{}/api/health", daemon.url))
        .bearer_auth("nope")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status().as_u16(), 401);
    assert!(!data.path().join("token").exists(), "an explicit token is not written down");

    // A second daemon on the same data directory is refused, clearly, and leaves the first
    // one's journal alone.
    #[allow(clippy::disallowed_methods)] // tests run our own binary
    let second = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .args(["serve", "--listen", "127.0.0.1:0", "--token", TOKEN, "--data-dir"])
        .arg(data.path())
        .output()
        .await
        .unwrap();
    assert_eq!(second.status.code(), Some(1));
    let error = String::from_utf8_lossy(&second.stderr);
    assert!(error.contains("in use by another Switchboard"), "{error}");
    let still = crate::http_client()
        .get(format!("{}/api/health", daemon.url))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(still.status().as_u16(), 200);
}

/// `--token-file` and `--ingress-token-file`: the tokens work, and neither is on the daemon's
/// command line (which every local user can read); a file that holds no token is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_from_files_stay_off_the_command_line() {
    let api = FakeApi::start(Scenario::new()).await.unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let data = tempfile::tempdir().unwrap();
    let secrets = tempfile::tempdir().unwrap();
    let token_file = secrets.path().join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let ingress = "ingress-from-a-file-0123456789";
    let ingress_file = secrets.path().join("ingress");
    std::fs::write(&ingress_file, ingress).unwrap();
    let (token_arg, ingress_arg) =
        (token_file.display().to_string(), ingress_file.display().to_string());
    let daemon = start_daemon(
        data.path(),
        &api,
        &sandbox,
        &["--token-file", &token_arg, "--ingress-token-file", &ingress_arg],
    )
    .await;
    let ok = crate::http_client()
        .get(format!("{}/api/health", daemon.url))
        .bearer_auth(TOKEN)
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status().as_u16(), 200);
    let pid = daemon.child.id().unwrap();
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    let cmdline = String::from_utf8_lossy(&cmdline);
    assert!(cmdline.contains("--token-file"), "{cmdline}");
    assert!(!cmdline.contains(TOKEN) && !cmdline.contains(ingress), "{cmdline}");

    let empty = secrets.path().join("empty");
    std::fs::write(&empty, "\n").unwrap();
    for (file, says) in
        [(empty.as_path(), "holds no token"), (secrets.path(), "not a regular file")]
    {
        #[allow(clippy::disallowed_methods)] // tests run our own binary
        let refused = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchboard"))
            .args(["serve", "--listen", "127.0.0.1:0", "--token-file"])
            .arg(file)
            .arg("--data-dir")
            .arg(secrets.path().join("data"))
            .env_remove("SWITCHBOARD_TOKEN")
            .output()
            .await
            .unwrap();
        assert_eq!(refused.status.code(), Some(2));
        let error = String::from_utf8_lossy(&refused.stderr);
        assert!(error.contains(says), "{error}");
    }
}

/// `sessions tail` follows a live session (gap-free, in order) while `deny` answers its
/// permission request with a message the model gets back; `tail --after N --json` resumes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tail_follows_a_session_that_deny_answers() {
    let api = FakeApi::start(
        Scenario::new()
            .reply(
                Reply::tool_use(
                    "Bash",
                    json!({"command": "touch denied.txt && ls", "description": "x"}),
                )
                .when_prompt("DENYME"),
            )
            .reply(Reply::text("understood, not touching it").when_tool_result()),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let data = tempfile::tempdir().unwrap();
    let daemon = start_daemon(data.path(), &api, &sandbox, &[]).await;
    let token = std::fs::read_to_string(data.path().join("token")).unwrap();
    let id = create_session(&daemon.url, &token, &sandbox, "DENYME").await;

    let mut tail = spawn_client(data.path(), &["sessions", "tail", &id]);
    let mut lines = BufReader::new(tail.stdout.take().unwrap()).lines();

    let session = wait_session(&daemon.url, &token, &id, |s| {
        !s["pending_permissions"].as_array().unwrap().is_empty()
    })
    .await;
    let request_id = session["pending_permissions"][0]["request_id"].as_str().unwrap().to_owned();
    let (code, out, err) =
        client(data.path(), &["deny", &id, &request_id, "--message", "not on my watch"]).await;
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("denied"), "{out}");
    wait_session(&daemon.url, &token, &id, |s| s["state"] == "idle").await;
    assert!(!sandbox.file("denied.txt").exists(), "the denied command never ran");
    let tool_result = api.requests().into_iter().find_map(|request| {
        let text = request.body.to_string();
        text.contains("not on my watch").then_some(text)
    });
    assert!(tool_result.is_some(), "the model got the denial message back");

    // The tail, written for a person: the call, the wait, the denial, the answer, the end.
    let mut seen = Vec::new();
    while !seen.last().is_some_and(|line: &String| line.starts_with("— turn done")) {
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .expect("tail went quiet before the turn ended")
            .unwrap()
            .expect("tail ended early");
        seen.push(line);
    }
    let at = |prefix: &str| {
        seen.iter()
            .position(|line| line.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix:?} in {seen:#?}"))
    };
    assert!(at("> DENYME") < at("→ Bash touch denied.txt && ls"), "{seen:#?}");
    assert!(at("→ Bash") < at("? Bash touch denied.txt && ls: waiting for you"), "{seen:#?}");
    assert!(at("? Bash") < at("✗ Bash denied by cli:"), "{seen:#?}");
    assert!(seen[at("✗ Bash denied by cli:")].ends_with(": not on my watch"), "{seen:#?}");
    assert!(at("✗ Bash") < at("understood, not touching it"), "{seen:#?}");
    tail.kill().await.unwrap();

    // With --json, every event as stored, gap-free from 1; --after resumes after a seq.
    let events = http(
        &daemon.url,
        &token,
        reqwest::Method::GET,
        &format!("/api/sessions/{id}/events?after=0&limit=5000"),
        None,
    )
    .await;
    let count = events.as_array().unwrap().len();
    let mut all = spawn_client(data.path(), &["sessions", "tail", &id, "--json"]);
    let mut lines = BufReader::new(all.stdout.take().unwrap()).lines();
    let mut seqs = Vec::new();
    while seqs.len() < count {
        let frame: Value =
            serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
        seqs.push(frame["seq"].as_u64().unwrap());
    }
    assert!(seqs.iter().enumerate().all(|(i, seq)| *seq == i as u64 + 1), "{seqs:?}");
    all.kill().await.unwrap();
    let after = seqs[seqs.len() - 3];
    let after_text = after.to_string();
    let mut resumed =
        spawn_client(data.path(), &["sessions", "tail", &id, "--after", &after_text, "--json"]);
    let mut lines = BufReader::new(resumed.stdout.take().unwrap()).lines();
    let first: Value = serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
    assert_eq!(first["seq"], after + 1, "{first}");
    resumed.kill().await.unwrap();
}

/// `new`, `send`, `interrupt`, `sessions rm`, `resume` and `open --print`, with sessions
/// named by a prefix of their id; `completions`; the config file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_commands_start_and_steer_sessions_named_by_a_prefix() {
    let api = FakeApi::start(
        Scenario::new()
            .reply(Reply::text("hi there").when_prompt("HELLO"))
            .reply(Reply::text("a story that goes on and on").when_prompt("LONG").hold_after(1))
            .reply(Reply::text("back again").when_prompt("AGAIN")),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let data = tempfile::tempdir().unwrap();
    let daemon = start_daemon(data.path(), &api, &sandbox, &[]).await;
    let token = std::fs::read_to_string(data.path().join("token")).unwrap();
    let workdir = sandbox.workdir().display().to_string();

    let (code, out, err) = client(data.path(), &["new", "--cwd", &workdir, "HELLO there"]).await;
    assert_eq!(code, Some(0), "{err}");
    let id = out.trim().to_owned();
    assert_eq!(id.len(), 36, "{out}");
    let prefix = &id[..8];
    wait_session(&daemon.url, &token, &id, |s| s["state"] == "idle").await;

    // What is in force, asked of the session's Claude Code.
    let (code, out, err) = client(data.path(), &["ask", prefix, "context"]).await;
    assert_eq!(code, Some(0), "{err}");
    assert!(out.lines().next().unwrap().contains("tokens used"), "{out}");
    assert!(out.contains("System prompt"), "{out}");
    let (code, out, err) = client(data.path(), &["ask", prefix, "hooks", "--json"]).await;
    assert_eq!(code, Some(0), "{err}");
    let hooks: Value = serde_json::from_str(&out).unwrap();
    assert!(hooks["eventCatalog"].is_array(), "{hooks}");
    let (code, out, err) = client(data.path(), &["ask", prefix, "usage"]).await;
    assert_eq!(code, Some(0), "{err}");
    let first = out.lines().next().unwrap();
    assert!(first.starts_with("this session: $") && first.ends_with(" lines"), "{out}");
    assert!(out.contains(" tokens in, "), "each model's figures: {out}");
    assert!(out.contains("no plan windows"), "an API key's login: {out}");
    let (code, out, err) = client(data.path(), &["stop-task", prefix]).await;
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out.trim(), format!("nothing runs in the background in {id}"));

    let (code, out, err) = client(data.path(), &["send", prefix, "LONG story"]).await;
    assert_eq!((code, out.trim()), (Some(0), format!("sent to {id}").as_str()), "{err}");
    api.wait_for(|request| request.last_user_text().contains("LONG")).await;
    let (code, out, err) = client(data.path(), &["interrupt", prefix]).await;
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out.trim(), format!("interrupted {id}"));
    wait_session(&daemon.url, &token, &id, |s| s["state"] == "idle").await;
    api.release();

    let (code, _, err) = client(data.path(), &["sessions", "rm", prefix]).await;
    assert_eq!(code, Some(0), "{err}");
    let (code, out, err) = client(data.path(), &["resume", prefix]).await;
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out.trim(), format!("resumed {id}"));
    client(data.path(), &["send", prefix, "AGAIN please"]).await;
    api.wait_for(|request| request.last_user_text().contains("AGAIN")).await;
    let answered = || async {
        let events = http(
            &daemon.url,
            &token,
            reqwest::Method::GET,
            &format!("/api/sessions/{id}/events?after=0&limit=5000"),
            None,
        )
        .await;
        events
            .as_array()
            .unwrap()
            .iter()
            .any(|event| event["event"]["line"]["result"] == "back again")
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !answered().await {
        assert!(std::time::Instant::now() < deadline, "the resumed session never answered");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A name no session has, or none at all, is refused with the reason.
    let (code, _, err) = client(data.path(), &["send", "zzzz", "hi"]).await;
    assert_eq!(code, Some(1));
    assert!(err.contains("no session zzzz"), "{err}");

    // The signed-in address of one session.
    let (code, out, err) = client(data.path(), &["open", "--print", prefix]).await;
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out.trim(), format!("{}/?token={}#/s/{id}", daemon.url, token.trim()));

    #[allow(clippy::disallowed_methods)] // tests run our own binary
    let completions = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .args(["completions", "bash"])
        .output()
        .await
        .unwrap();
    let script = String::from_utf8_lossy(&completions.stdout);
    assert!(completions.status.success());
    assert!(script.contains("switchboard") && script.contains("interrupt"), "{script}");
}

/// The config file gives defaults that variables and flags override; a typo in it is refused.
#[tokio::test]
#[allow(clippy::disallowed_methods)] // tests run our own binary
async fn the_config_file_gives_defaults_and_refuses_typos() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    let doctor = |env: Vec<(&'static str, String)>| {
        let config = config.clone();
        async move {
            let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchboard"))
                .args(["doctor", "--json", "--listen", "127.0.0.1:0"])
                .env("SWITCHBOARD_CONFIG", &config)
                .env_remove("SWITCHBOARD_CLAUDE")
                .envs(env)
                .output()
                .await
                .unwrap();
            (
                output.status.code(),
                String::from_utf8_lossy(&output.stdout).into_owned(),
                String::from_utf8_lossy(&output.stderr).into_owned(),
            )
        }
    };
    std::fs::write(&config, "claude = \"/from/the/config\"\n").unwrap();
    let (_, out, _) = doctor(vec![]).await;
    assert!(out.contains("/from/the/config"), "the file's default: {out}");
    let (_, out, _) = doctor(vec![("SWITCHBOARD_CLAUDE", "/from/the/variable".into())]).await;
    assert!(out.contains("/from/the/variable") && !out.contains("/from/the/config"), "{out}");
    std::fs::write(&config, "claud = \"/typo\"\n").unwrap();
    let (code, _, err) = doctor(vec![]).await;
    assert_eq!(code, Some(2));
    assert!(err.contains("unknown field `claud`"), "{err}");
    // Roots travel in one variable, ':' between them: a root with one is refused by name.
    std::fs::write(&config, "roots = [\"/srv/a:b\"]\n").unwrap();
    let (code, _, err) = doctor(vec![]).await;
    assert_eq!(code, Some(2));
    assert!(err.contains("root /srv/a:b has a ':'"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemons_secrets_never_reach_a_sessions_tools() {
    let api = FakeApi::start(
        Scenario::new()
            .reply(
                Reply::tool_use("Bash", json!({"command": "env", "description": "show env"}))
                    .when_prompt("ENV"),
            )
            .reply(Reply::text("seen").when_tool_result()),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let data = tempfile::tempdir().unwrap();
    let daemon = start_daemon_with_env(
        data.path(),
        &api,
        &sandbox,
        &["--policy", "auto-approve"],
        &[("SWITCHBOARD_TOKEN", TOKEN)],
    )
    .await;
    let ingress = std::fs::read_to_string(data.path().join("ingress-token")).unwrap();
    assert!(ingress.trim().len() >= 32, "the relay has a token of its own");
    assert_ne!(ingress.trim(), TOKEN, "never the API token");
    let id = create_session(&daemon.url, TOKEN, &sandbox, "ENV").await;
    let request = api.wait_for(|request| !request.tool_results().is_empty()).await;
    let (_, output, is_error) = request.tool_results()[0].clone();
    assert!(!is_error, "{output}");
    assert!(output.contains("PATH="), "the tool ran env: {output}");
    assert!(!output.contains(TOKEN), "the API token reached a tool: {output}");
    assert!(!output.contains(ingress.trim()), "the ingress token reached a tool");
    assert!(!output.contains("SWITCHBOARD_"), "{output}");
    wait_session(&daemon.url, TOKEN, &id, |s| s["state"] == "idle").await;

    // Nor a person's shell in the session's directory (the web UI's terminal).
    use futures::{SinkExt as _, StreamExt as _};
    use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
    use tokio_tungstenite::tungstenite::Message as WsMessage;
    let url = format!("{}/api/sessions/{id}/shell", daemon.url.replace("http://", "ws://"));
    let mut request = url.into_client_request().unwrap();
    request.headers_mut().insert("authorization", format!("Bearer {TOKEN}").parse().unwrap());
    let (mut shell, _) = tokio_tungstenite::connect_async(request).await.unwrap();
    let typed = "env; echo EN''D\r";
    shell.send(WsMessage::Binary(typed.as_bytes().to_vec().into())).await.unwrap();
    let mut seen = String::new();
    while !seen.contains("\nEND") {
        let frame = tokio::time::timeout(Duration::from_secs(30), shell.next())
            .await
            .unwrap_or_else(|_| panic!("no END: {seen}"))
            .unwrap()
            .unwrap();
        if let WsMessage::Binary(bytes) = frame {
            seen.push_str(&String::from_utf8_lossy(&bytes));
        }
    }
    assert!(seen.contains("PATH="), "the shell ran env: {seen}");
    assert!(!seen.contains(TOKEN), "the API token reached the shell");
    assert!(!seen.contains(ingress.trim()), "the ingress token reached the shell");
    assert!(!seen.contains("SWITCHBOARD_"), "{seen}");
}

#[tokio::test]
async fn an_existing_data_directory_keeps_its_mode() {
    use std::os::unix::fs::PermissionsExt;
    let api = FakeApi::start(Scenario::new()).await.unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let parent = tempfile::tempdir().unwrap();
    // A shared, sticky directory (as /tmp is): Switchboard's files go in, its mode stays.
    let shared = parent.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let daemon = start_daemon(&shared, &api, &sandbox, &[]).await;
    let mode = std::fs::metadata(&shared).unwrap().permissions().mode();
    assert_eq!(mode & 0o7777, 0o1777, "the sticky bit and the mode are kept");
    drop(daemon);
    // What Switchboard creates itself is private, parents included.
    let fresh = parent.path().join("new/deeper");
    let _daemon = start_daemon(&fresh, &api, &sandbox, &[]).await;
    for dir in [parent.path().join("new"), fresh] {
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700, "{}", dir.display());
    }
}

/// Waits (bounded) until `done` holds.
async fn eventually(what: &str, done: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(std::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A fake API whose `SPAWN` prompt runs a Bash call that starts `sleeper` in a session of its
/// own (`setsid`, in the background) and returns at once.
async fn spawn_api(sleeper: &str) -> FakeApi {
    FakeApi::start(
        Scenario::new()
            .reply(
                Reply::tool_use(
                    "Bash",
                    json!({"command": format!("setsid {sleeper} >/dev/null 2>&1 </dev/null & echo ok"), "description": "x"}),
                )
                .when_prompt("SPAWN"),
            )
            .reply(Reply::text("spawned").when_tool_result()),
    )
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_daemon_leaves_no_cli_and_its_successor_ends_the_tools() {
    let guard = switchboard_testkit::Sleeper::new(2718);
    let sleeper = guard.command();
    let api = spawn_api(sleeper).await;
    let sandbox = CliSandbox::new().unwrap();
    let data = tempfile::tempdir().unwrap();
    let mut daemon = start_daemon(data.path(), &api, &sandbox, &["--policy", "auto-approve"]).await;
    let token = std::fs::read_to_string(data.path().join("token")).unwrap();
    let id = create_session(&daemon.url, &token, &sandbox, "SPAWN").await;
    wait_session(&daemon.url, &token, &id, |s| s["state"] == "idle").await;
    assert_eq!(
        switchboard_testkit::processes_running(sleeper).len(),
        1,
        "the tool started its sleeper"
    );
    // The daemon recorded its CLI.
    let runs: Value =
        serde_json::from_str(&std::fs::read_to_string(data.path().join("cli-runs.json")).unwrap())
            .unwrap();
    let cli = runs[0]["pid"].as_u64().unwrap() as i32;
    // A person's shell in the session's directory leaves a job of its own too.
    let shell_guard = switchboard_testkit::Sleeper::new(3143);
    let shell_sleeper = shell_guard.command();
    // Kept open: the daemon dies with the shell still running.
    let _shell = {
        use futures::{SinkExt as _, StreamExt as _};
        use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
        use tokio_tungstenite::tungstenite::Message as WsMessage;
        let url = format!("{}/api/sessions/{id}/shell", daemon.url.replace("http://", "ws://"));
        let mut request = url.into_client_request().unwrap();
        let bearer = format!("Bearer {}", token.trim()).parse().unwrap();
        request.headers_mut().insert("authorization", bearer);
        let (mut shell, _) = tokio_tungstenite::connect_async(request).await.unwrap();
        let typed = format!("nohup {shell_sleeper} >/dev/null 2>&1 & echo STAR''TED\r");
        shell.send(WsMessage::Binary(typed.into_bytes().into())).await.unwrap();
        let mut seen = String::new();
        while !seen.contains("STARTED") {
            let frame = tokio::time::timeout(Duration::from_secs(30), shell.next())
                .await
                .unwrap_or_else(|_| panic!("no STARTED: {seen}"))
                .unwrap()
                .unwrap();
            if let WsMessage::Binary(bytes) = frame {
                seen.push_str(&String::from_utf8_lossy(&bytes));
            }
        }
        shell
    };
    // Started in the background: running once it has replaced the shell's fork.
    eventually("the shell's job runs", || {
        switchboard_testkit::processes_running(shell_sleeper).len() == 1
    })
    .await;
    // kill -9: no graceful stop runs.
    let pid = daemon.child.id().unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    daemon.child.wait().await.unwrap();
    // The CLI follows its parent (parent-death signal) ...
    eventually("the CLI ends with its daemon", || {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(cli), None).is_err()
            || std::fs::read_to_string(format!("/proc/{cli}/stat")).is_ok_and(|stat| {
                stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
            })
    })
    .await;
    // ... but the tool it ran in a session of its own does not.
    assert_eq!(
        switchboard_testkit::processes_running(sleeper).len(),
        1,
        "the sleeper outlived both"
    );
    // The next daemon on this data directory ends it before it serves anything.
    let _daemon = start_daemon(data.path(), &api, &sandbox, &[]).await;
    assert_eq!(
        switchboard_testkit::processes_running(sleeper),
        Vec::<u32>::new(),
        "the successor ended the leftover"
    );
    assert_eq!(
        switchboard_testkit::processes_running(shell_sleeper),
        Vec::<u32>::new(),
        "and the shell's"
    );
}

/// A session stopped the ordinary way (`DELETE`, the CLI ends on its own): a tool the CLI
/// started in a session of its own, in no group of ours, ends with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_session_ends_a_tool_in_a_session_of_its_own() {
    let guard = switchboard_testkit::Sleeper::new(2719);
    let sleeper = guard.command();
    let api = spawn_api(sleeper).await;
    let sandbox = CliSandbox::new().unwrap();
    let data = tempfile::tempdir().unwrap();
    let daemon = start_daemon(data.path(), &api, &sandbox, &["--policy", "auto-approve"]).await;
    let token = std::fs::read_to_string(data.path().join("token")).unwrap();
    let id = create_session(&daemon.url, &token, &sandbox, "SPAWN").await;
    wait_session(&daemon.url, &token, &id, |s| s["state"] == "idle").await;
    let running = switchboard_testkit::processes_running(sleeper);
    assert_eq!(running.len(), 1, "the tool started its sleeper");
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", running[0])).unwrap();
    // After the command's name: state, parent, process group, session.
    let fields: Vec<&str> = stat.rsplit_once(')').unwrap().1.split_whitespace().collect();
    let cli_runs = std::fs::read_to_string(data.path().join("cli-runs.json")).unwrap();
    let cli: Value = serde_json::from_str(&cli_runs).unwrap();
    let cli = cli[0]["pid"].as_u64().unwrap().to_string();
    assert!(
        fields[2] != cli && fields[3] != cli,
        "the sleeper is in a session of its own, not the CLI's group: {stat}"
    );

    let stopped =
        http(&daemon.url, &token, reqwest::Method::DELETE, &format!("/api/sessions/{id}"), None)
            .await;
    assert_eq!(stopped["running"], false, "{stopped}");
    eventually("the sleeper ends with its session", || {
        switchboard_testkit::processes_running(sleeper).is_empty()
    })
    .await;
    let session = wait_session(&daemon.url, &token, &id, |s| s["running"] == false).await;
    assert_eq!(session["state"], "exited", "{session}");
}

/// SIGKILLs the session's CLI (the one `cli-runs.json` in `data` names) and checks what a
/// crash leaves: the session `crashed`, the CLI gone, and the subscriber's events exactly the
/// log's (every one it saw stored, every stored one seen). The log's numbers.
async fn kill_the_cli(
    url: &str,
    token: &str,
    id: &str,
    data: &Path,
    follower: &mut Socket,
) -> Vec<u64> {
    let runs = data.join("cli-runs.json");
    eventually("the daemon records its CLI", || {
        std::fs::read_to_string(&runs).is_ok_and(|text| text.contains("pid"))
    })
    .await;
    let runs: Value = serde_json::from_str(&std::fs::read_to_string(&runs).unwrap()).unwrap();
    let cli = nix::unistd::Pid::from_raw(runs[0]["pid"].as_u64().unwrap() as i32);
    nix::sys::signal::kill(cli, nix::sys::signal::Signal::SIGKILL).unwrap();
    let session = wait_session(url, token, id, |s| s["running"] == false).await;
    assert_eq!(session["state"], "crashed", "{session}");
    eventually("the killed CLI is reaped", || nix::sys::signal::kill(cli, None).is_err()).await;
    let stored = session_events(url, token, id).await;
    let stored: Vec<u64> =
        stored.as_array().unwrap().iter().map(|event| event["seq"].as_u64().unwrap()).collect();
    let last = *stored.last().unwrap();
    let seen = frames_until(follower, |frame| frame["seq"] == last).await;
    assert!(seen.iter().any(|frame| frame["event"]["event"] == "exited"), "{seen:#?}");
    assert_eq!(seqs(&seen), stored, "what the subscriber saw is the log, and the log is all of it");
    stored
}

/// The CLI killed in the middle of a turn (SIGKILL while the model's answer streams): nothing
/// the subscriber saw is missing from the log, nothing stored was kept from it, no CLI is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cli_killed_mid_turn_loses_no_event_and_leaves_no_process() {
    let api = FakeApi::start(
        Scenario::new()
            .reply(Reply::text("a long story that never ends").hold_after(1).when_prompt("STORY"))
            .fallback("done"),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let data = tempfile::tempdir().unwrap();
    let daemon = start_daemon(data.path(), &api, &sandbox, &[]).await;
    let token = std::fs::read_to_string(data.path().join("token")).unwrap();
    let id = create_session(&daemon.url, &token, &sandbox, "STORY").await;
    let mut follower = subscribe(&daemon.url, &token, &id, 0).await;
    // The model has the prompt and its answer has begun; the stream holds.
    api.wait_for(|request| request.last_user_text().contains("STORY")).await;
    wait_session(&daemon.url, &token, &id, |s| s["state"] == "working").await;
    let stored = kill_the_cli(&daemon.url, &token, &id, data.path(), &mut follower).await;
    assert!(stored.len() > 3, "the turn had begun: {stored:?}");
    api.release();
}

/// A fake API whose `TOOL` prompt runs a Bash call that notes it ran (`ran.txt`) and then
/// runs `sleeper`; anything else is answered `done`.
async fn tool_api(sleeper: &str) -> FakeApi {
    FakeApi::start(
        Scenario::new()
            .reply(
                Reply::tool_use(
                    "Bash",
                    json!({"command": format!("echo ran >> ran.txt && {sleeper}"), "description": "x"}),
                )
                .when_prompt("TOOL"),
            )
            .fallback("done"),
    )
    .await
    .unwrap()
}

/// Resumes session `id` and sends it `AFTER`; returns once that turn's result is stored (the
/// subscription follows from `after`, the last event before the resume).
async fn resume_and_use_again(url: &str, token: &str, id: &str, after: u64) {
    // The call the kill cut off is unsettled: settled (its outcome unknown) before a resume.
    let path = format!("/api/sessions/{id}/unsettled");
    let open = http(url, token, reqwest::Method::GET, &path, None).await;
    assert_eq!(open.as_array().map(Vec::len), Some(1), "the cut-off call: {open}");
    let refused =
        http(url, token, reqwest::Method::POST, &format!("/api/sessions/{id}/resume"), None).await;
    assert_eq!(refused["error"]["code"], "unsettled", "{refused}");
    let call = open[0]["tool_use_id"].as_str().unwrap();
    let settle = json!({"settle": "interrupted"});
    let left =
        http(url, token, reqwest::Method::POST, &format!("{path}/{call}"), Some(settle)).await;
    assert_eq!(left, json!([]));
    let resumed = http(
        url,
        token,
        reqwest::Method::POST,
        &format!("/api/sessions/{id}/resume"),
        Some(json!({})),
    )
    .await;
    assert_eq!(resumed["running"], true, "{resumed}");
    let mut follower = subscribe(url, token, id, after).await;
    let path = format!("/api/sessions/{id}/messages");
    http(url, token, reqwest::Method::POST, &path, Some(json!({"content": "AFTER"}))).await;
    frames_until(&mut follower, |frame| {
        frame["event"]["event"] == "line" && frame["event"]["line"]["type"] == "result"
    })
    .await;
}

/// The CLI killed in the middle of a tool (SIGKILL while its Bash call runs): the log has every
/// event the subscriber saw and the subscriber every event the log has, the tool's process is
/// gone, and the session resumed and used again never runs the tool a second time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cli_killed_mid_tool_loses_no_event_leaves_no_process_and_runs_nothing_twice() {
    let guard = switchboard_testkit::Sleeper::new(2720);
    let sleeper = guard.command();
    let api = tool_api(sleeper).await;
    let sandbox = CliSandbox::new().unwrap();
    let data = tempfile::tempdir().unwrap();
    let daemon = start_daemon(data.path(), &api, &sandbox, &["--policy", "auto-approve"]).await;
    let token = std::fs::read_to_string(data.path().join("token")).unwrap();
    let id = create_session(&daemon.url, &token, &sandbox, "TOOL").await;
    let mut follower = subscribe(&daemon.url, &token, &id, 0).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    // Running (the shell that runs it names it too).
    while switchboard_testkit::processes_running(sleeper).is_empty() {
        if std::time::Instant::now() > deadline {
            let events = session_events(&daemon.url, &token, &id).await;
            panic!("the tool never ran: {events:#}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let stored = kill_the_cli(&daemon.url, &token, &id, data.path(), &mut follower).await;
    eventually("the tool's process ends with its CLI", || {
        switchboard_testkit::processes_running(sleeper).is_empty()
    })
    .await;

    // Resumed and used again: the killed tool does not run a second time.
    resume_and_use_again(&daemon.url, &token, &id, *stored.last().unwrap()).await;
    let ran = std::fs::read_to_string(sandbox.file("ran.txt")).unwrap();
    assert_eq!(ran, "ran\n", "the tool ran once");
    assert!(switchboard_testkit::processes_running(sleeper).is_empty());
}

/// The event frames a subscription still gets until its socket ends (within 60 s).
async fn frames_until_closed(socket: &mut Socket) -> Vec<Value> {
    use futures::StreamExt as _;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut frames = Vec::new();
    loop {
        let frame = tokio::time::timeout_at(deadline, socket.next())
            .await
            .unwrap_or_else(|_| panic!("the socket never ended: {frames:#?}"));
        let Some(Ok(frame)) = frame else { return frames };
        let tokio_tungstenite::tungstenite::Message::Text(text) = frame else { continue };
        let frame: Value = serde_json::from_str(&text).unwrap();
        if frame["type"] == "event" {
            frames.push(frame);
        }
    }
}

/// The daemon SIGKILLed while a session's foreground tool runs: the next daemon's log holds
/// every event a subscriber saw, in order, under the same numbers, and the rest after them;
/// no process is left; the session resumed and used again never runs the tool a second time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_killed_mid_tool_loses_no_event_leaves_no_process_and_runs_nothing_twice() {
    let guard = switchboard_testkit::Sleeper::new(2721);
    let sleeper = guard.command();
    let api = tool_api(sleeper).await;
    let sandbox = CliSandbox::new().unwrap();
    let data = tempfile::tempdir().unwrap();
    let mut daemon = start_daemon(data.path(), &api, &sandbox, &["--policy", "auto-approve"]).await;
    let token = std::fs::read_to_string(data.path().join("token")).unwrap();
    let id = create_session(&daemon.url, &token, &sandbox, "TOOL").await;
    let mut follower = subscribe(&daemon.url, &token, &id, 0).await;
    // The subscriber has seen the call go out; the tool runs (its shell names it too).
    let mut seen = frames_until(&mut follower, |frame| {
        frame["event"]["event"] == "line" && frame["event"]["line"].to_string().contains("ran.txt")
    })
    .await;
    eventually("the tool runs", || !switchboard_testkit::processes_running(sleeper).is_empty())
        .await;

    let pid = nix::unistd::Pid::from_raw(daemon.child.id().unwrap() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).unwrap();
    daemon.child.wait().await.unwrap();
    seen.extend(frames_until_closed(&mut follower).await);

    // The next daemon on the data directory ends what the dead one left, before it serves.
    let daemon = start_daemon(data.path(), &api, &sandbox, &[]).await;
    assert_eq!(
        switchboard_testkit::processes_running(sleeper),
        Vec::<u32>::new(),
        "no tool outlives its daemon's successor's start"
    );
    let session =
        http(&daemon.url, &token, reqwest::Method::GET, &format!("/api/sessions/{id}"), None).await;
    assert_eq!(session["state"], "exited", "{session}");
    let stored = session_events(&daemon.url, &token, &id).await;
    let stored = stored.as_array().unwrap();
    assert_eq!(
        seqs(stored),
        (1..=stored.len() as u64).collect::<Vec<_>>(),
        "the log is contiguous from 1"
    );
    // Every frame seen before the kill is in the log, the same event under the same number.
    for frame in &seen {
        let seq = frame["seq"].as_u64().unwrap();
        assert_eq!(
            stored[seq as usize - 1]["event"],
            frame["event"],
            "the event seen as {seq} is the one stored"
        );
    }
    assert_eq!(seqs(&seen), (1..=seen.len() as u64).collect::<Vec<_>>(), "seen gap-free");
    assert!(stored.last().unwrap()["event"]["description"]
        .as_str()
        .is_some_and(|text| text.contains("daemon stopped")));

    // Resumed and used again: the tool that was running does not run a second time.
    resume_and_use_again(&daemon.url, &token, &id, stored.len() as u64).await;
    let ran = std::fs::read_to_string(sandbox.file("ran.txt")).unwrap();
    assert_eq!(ran, "ran\n", "the tool ran once");
    assert!(switchboard_testkit::processes_running(sleeper).is_empty());
}

/// A webhook receiver on loopback: answers `503` while `down`, else `200`, and keeps every
/// notice it took.
#[derive(Clone, Default)]
pub(crate) struct Webhook {
    down: std::sync::Arc<std::sync::atomic::AtomicBool>,
    taken: std::sync::Arc<std::sync::Mutex<Vec<Value>>>,
    refused: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl Webhook {
    /// Serves on port 0; its URL.
    pub(crate) async fn start(&self) -> String {
        async fn take(
            axum::extract::State(hook): axum::extract::State<Webhook>,
            body: String,
        ) -> axum::http::StatusCode {
            use std::sync::atomic::Ordering;
            if hook.down.load(Ordering::SeqCst) {
                hook.refused.fetch_add(1, Ordering::SeqCst);
                return axum::http::StatusCode::SERVICE_UNAVAILABLE;
            }
            let notice: Value = serde_json::from_str(&body).unwrap_or_default();
            hook.taken.lock().unwrap().push(notice);
            axum::http::StatusCode::OK
        }
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let app = axum::Router::new().fallback(take).with_state(self.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        format!("http://{address}/hook")
    }

    /// The ids of the notices of `event` taken so far.
    fn taken(&self, event: &str) -> Vec<String> {
        let taken = self.taken.lock().unwrap();
        taken
            .iter()
            .filter(|notice| notice["event"] == event)
            .map(|notice| notice["id"].as_str().unwrap_or_default().to_owned())
            .collect()
    }

    /// The one-tap link of the `nth` request's notice (from 1), once it has come.
    pub(crate) async fn link(&self, nth: usize) -> String {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let link = self
                .taken
                .lock()
                .unwrap()
                .iter()
                .filter(|notice| notice["event"] == "permission_requested")
                .nth(nth - 1)
                .and_then(|notice| notice["link"].as_str().map(str::to_owned));
            if let Some(link) = link {
                return link;
            }
            assert!(std::time::Instant::now() < deadline, "no notice of request {nth}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// The daemon SIGKILLed while a notice waits in its outbox (its receiver refusing): the next
/// daemon on the data directory sends it, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notice_queued_when_the_daemon_is_killed_goes_out_once_from_the_next() {
    use std::sync::atomic::Ordering;
    let api = FakeApi::start(
        Scenario::new()
            .reply(
                Reply::tool_use("Bash", json!({"command": "touch x && ls", "description": "x"}))
                    .when_prompt("ASK")
                    .times(2),
            )
            .fallback("done"),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let data = tempfile::tempdir().unwrap();
    let hook = Webhook::default();
    hook.down.store(true, Ordering::SeqCst);
    let url = hook.start().await;
    let notify = data.path().join("notify.toml");
    std::fs::write(
        &notify,
        format!(
            "[[channel]]\nname = \"hook\"\nkind = \"webhook\"\nurl = \"{url}\"\nsecret = \"a-webhook-secret-0123456789\"\nallow_private = true\nevents = [\"permission_requested\"]\n"
        ),
    )
    .unwrap();
    let notify = notify.display().to_string();
    let mut daemon = start_daemon(data.path(), &api, &sandbox, &["--notify", &notify]).await;
    let token = std::fs::read_to_string(data.path().join("token")).unwrap();
    let id = create_session(&daemon.url, &token, &sandbox, "ASK").await;
    wait_session(&daemon.url, &token, &id, |s| s["state"] == "awaiting_permission").await;
    // The notice was tried and refused: it waits in the outbox.
    eventually("the receiver refuses the notice", || hook.refused.load(Ordering::SeqCst) >= 1)
        .await;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon.child.id().unwrap() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    daemon.child.wait().await.unwrap();
    assert!(hook.taken("permission_requested").is_empty());

    // The receiver is back; so is a daemon: the notice goes out from it, once.
    hook.down.store(false, Ordering::SeqCst);
    let mut next = start_daemon(data.path(), &api, &sandbox, &["--notify", &notify]).await;
    eventually("the next daemon sends the queued notice", || {
        !hook.taken("permission_requested").is_empty()
    })
    .await;
    let queued = hook.taken("permission_requested")[0].clone();
    // A second request's notice: the channel sends in order and forgets each notice before the
    // next, so once this one is taken the first is out of the outbox for good.
    let next_token = std::fs::read_to_string(data.path().join("token")).unwrap();
    let second = create_session(&next.url, &next_token, &sandbox, "ASK").await;
    wait_session(&next.url, &next_token, &second, |s| s["state"] == "awaiting_permission").await;
    eventually("the second notice goes out", || hook.taken("permission_requested").len() >= 2)
        .await;
    // Once the daemon has stopped, nothing more can go: the count then is the count for good,
    // and the first notice is not left waiting for a third daemon.
    let pid = nix::unistd::Pid::from_raw(next.child.id().unwrap() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = tokio::time::timeout(Duration::from_secs(60), next.child.wait())
        .await
        .expect("the daemon stops on SIGTERM")
        .unwrap();
    assert_eq!(status.code(), Some(0), "{}", next.stderr.await.unwrap());
    let sent = hook.taken("permission_requested");
    assert_eq!(sent.iter().filter(|id| **id == queued).count(), 1, "sent once: {sent:?}");
    assert_eq!(sent.len(), 2, "{sent:?}");
    let store = SqliteStore::open(data.path().join("switchboard.db")).unwrap();
    let left = store.outbox("hook", 10).await.unwrap();
    assert!(left.iter().all(|item| !item.body.contains(&queued)), "left queued: {left:?}");
}

/// Reads the daemon's stderr (bounded) until a line holds `needle`.
async fn stderr_line(
    lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStderr>>,
    needle: &str,
) -> String {
    loop {
        let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .unwrap_or_else(|_| panic!("no line with {needle:?}"))
            .unwrap()
            .unwrap_or_else(|| panic!("stderr ended before {needle:?}"));
        if line.contains(needle) {
            return line;
        }
    }
}

/// `switchboard serve` with a session whose CLI (the scripted stand-in) ignores SIGTERM and
/// its closed input: a graceful stop takes the whole escalation.
async fn daemon_with_a_stubborn_session(
    data: &Path,
) -> (tokio::process::Child, tokio::io::Lines<BufReader<tokio::process::ChildStderr>>) {
    let script = data.join("script.json");
    std::fs::write(&script, json!([{"hang_ignoring_term": true}]).to_string()).unwrap();
    let env = vec![("FAKE_CLAUDE_SCRIPT".to_owned(), script.display().to_string())];
    let (mut child, url) = spawn_serve(data, &switchboard_testkit::fake_cli(), &[], env).await;
    let token = std::fs::read_to_string(data.join("token")).unwrap();
    let work = data.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let created =
        http(&url, &token, reqwest::Method::POST, "/api/sessions", Some(json!({"cwd": work})))
            .await;
    assert!(created["id"].is_string(), "{created}");
    let stderr = BufReader::new(child.stderr.take().unwrap()).lines();
    (child, stderr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_gracefully_and_a_second_signal_exits_at_once() {
    let data = tempfile::tempdir().unwrap();
    let (mut child, mut stderr) = daemon_with_a_stubborn_session(data.path()).await;
    let pid = nix::unistd::Pid::from_raw(child.id().unwrap() as i32);
    let runs = data.path().join("cli-runs.json");
    eventually("the daemon records its CLI", || {
        std::fs::read_to_string(&runs).is_ok_and(|text| text.contains("pid"))
    })
    .await;
    let runs: Value = serde_json::from_str(&std::fs::read_to_string(&runs).unwrap()).unwrap();
    let cli = nix::unistd::Pid::from_raw(runs[0]["pid"].as_u64().unwrap() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    stderr_line(&mut stderr, "signal again to exit at once").await;
    // The stubborn CLI holds the graceful stop for seconds; a second signal does not wait.
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let status = tokio::time::timeout(Duration::from_secs(3), child.wait())
        .await
        .expect("the second signal ends the daemon at once")
        .unwrap();
    assert_eq!(status.code(), Some(130));
    // Exiting at once leaves no CLI behind: the stubborn one follows its daemon.
    eventually("the stubborn CLI ends with its daemon", || {
        nix::sys::signal::kill(cli, None).is_err()
            || std::fs::read_to_string(format!("/proc/{cli}/stat")).is_ok_and(|stat| {
                stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
            })
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_every_session_stores_it_and_exits_zero() {
    let api = FakeApi::start(Scenario::new().reply(Reply::text("hello"))).await.unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let data = tempfile::tempdir().unwrap();
    let mut daemon = start_daemon(data.path(), &api, &sandbox, &[]).await;
    let token = std::fs::read_to_string(data.path().join("token")).unwrap();
    let id = create_session(&daemon.url, &token, &sandbox, "hello").await;
    wait_session(&daemon.url, &token, &id, |s| s["state"] == "idle").await;
    let pid = nix::unistd::Pid::from_raw(daemon.child.id().unwrap() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status =
        tokio::time::timeout(Duration::from_secs(60), daemon.child.wait()).await.unwrap().unwrap();
    assert_eq!(status.code(), Some(0), "{}", daemon.stderr.await.unwrap());
    // The journal was folded and the lock released: the database opens, the session ended.
    let store = SqliteStore::open(data.path().join("switchboard.db")).unwrap();
    assert_eq!(
        store.get_session(&id).await.unwrap().unwrap().state,
        switchboard_store::RecordState::Exited
    );
    let runs = std::fs::read_to_string(data.path().join("cli-runs.json")).unwrap();
    assert_eq!(runs.trim(), "[]", "no CLI left running");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loop_runs_each_task_in_a_fresh_session_and_sums_them_up() {
    let api = FakeApi::start(
        Scenario::new()
            .reply(Reply::text("first done").when_prompt("TASK one"))
            .reply(Reply::text("second done").when_prompt("TASK two"))
            .reply(
                Reply::http_error(400, "invalid_request_error", "this task cannot run", 10)
                    .when_prompt("TASK fail"),
            ),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let data = tempfile::tempdir().unwrap();
    let daemon = start_daemon(data.path(), &api, &sandbox, &[]).await;
    let workdir = sandbox.workdir().display().to_string();
    let tasks = sandbox.file("tasks.txt");
    std::fs::write(&tasks, "# three tasks\nTASK one\n\n{\"prompt\": \"TASK two\"}\nTASK fail\n")
        .unwrap();
    // A relay frontend watches: every task shows there too, as a relay CLI that connects,
    // streams and goes.
    let token = std::fs::read_to_string(data.path().join("token")).unwrap();
    let (mut frontend, _) = tokio_tungstenite::connect_async(format!(
        "{}/ws?token={}",
        daemon.url.replace("http://", "ws://"),
        token.trim()
    ))
    .await
    .unwrap();
    let watched = tokio::spawn(async move {
        use futures::StreamExt;
        let mut frames = Vec::new();
        let mut gone = 0;
        while gone < 3 {
            let Ok(Some(Ok(frame))) =
                tokio::time::timeout(Duration::from_secs(120), frontend.next()).await
            else {
                break;
            };
            let Ok(text) = frame.into_text() else { continue };
            let frame: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
            gone += usize::from(frame["text"] == "claude code disconnected");
            frames.push(frame);
        }
        frames
    });
    let (code, out, err) = client(
        data.path(),
        &["loop", tasks.to_str().unwrap(), "--cwd", &workdir, "--parallel", "2", "--json"],
    )
    .await;
    assert_eq!(code, Some(1), "one task failed: {out}{err}");
    let lines: Vec<Value> = out.lines().map(|line| serde_json::from_str(line).unwrap()).collect();
    assert_eq!(lines.len(), 4, "{out}");
    let mut outcomes: Vec<&Value> = lines[..3].iter().collect();
    outcomes.sort_by_key(|outcome| outcome["task"].as_u64());
    assert_eq!(outcomes[0]["result"], "first done");
    assert_eq!(outcomes[0]["ok"], true);
    assert_eq!(outcomes[1]["result"], "second done");
    assert_eq!(outcomes[2]["ok"], false, "{}", outcomes[2]);
    assert!(outcomes.iter().all(|outcome| outcome["duration_ms"].as_u64().unwrap() > 0));
    assert!(outcomes[0]["cost_usd"].as_f64().unwrap() > 0.0);
    assert_eq!(lines[3]["summary"]["failed"], 1);
    assert_eq!(lines[3]["summary"]["tasks"], 3);
    let frames = watched.await.unwrap();
    let count = |text: &str| frames.iter().filter(|frame| frame["text"] == text).count();
    assert_eq!(count("claude code connected"), 3, "{frames:?}");
    assert_eq!(count("claude code disconnected"), 3, "{frames:?}");
    let results: Vec<&Value> = frames.iter().filter(|frame| frame["type"] == "result").collect();
    assert_eq!(results.len(), 3, "each task's lines reach the frontend: {frames:?}");
    // Each task had a session of its own (its own CLI and Claude session), stopped at its end.
    let sessions = http(&daemon.url, &token, reqwest::Method::GET, "/api/sessions", None).await;
    let sessions = sessions.as_array().unwrap();
    assert_eq!(sessions.len(), 3);
    let ids: std::collections::HashSet<&str> =
        outcomes.iter().map(|outcome| outcome["session_id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 3);
    let claude: std::collections::HashSet<&str> =
        sessions.iter().filter_map(|session| session["claude_session_id"].as_str()).collect();
    assert_eq!(claude.len(), 3, "a fresh Claude session each: {sessions:?}");
    assert!(sessions.iter().all(|session| session["running"] == false), "{sessions:?}");

    // A task list with a mistake is refused before anything runs, naming the line.
    std::fs::write(&tasks, "TASK one\n{\"prompt\": 3}\n").unwrap();
    let (code, _, err) = client(data.path(), &["loop", tasks.to_str().unwrap()]).await;
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("line 2") && err.contains("prompt"), "{err}");
    let sessions = http(&daemon.url, &token, reqwest::Method::GET, "/api/sessions", None).await;
    assert_eq!(sessions.as_array().unwrap().len(), 3, "nothing ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::disallowed_methods)] // tests run our own binary
async fn relay_ports_serve_the_relay_where_agents_ui_frontends_look() {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let api = FakeApi::start(Scenario::new()).await.unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let data = tempfile::tempdir().unwrap();
    // The range's first port is taken: the relay takes the next free one.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let first = taken.local_addr().unwrap().port();
    let range = format!("{first}-{}", first.saturating_add(20));
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data.path())
        .arg("--claude")
        .arg(real_cli(CliVersion::V2_1_330))
        .args(["--relay-ports", &range, "--allow-origin", "http://agents.example"])
        .env_remove("SWITCHBOARD_TOKEN")
        .envs(sandbox.env(&api.base_url()))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let relay = loop {
        let line = tokio::time::timeout(Duration::from_secs(30), stdout.next_line())
            .await
            .unwrap()
            .unwrap()
            .expect("the daemon says where the relay is");
        if let Some(rest) = line.trim().strip_prefix("relay: ws://") {
            break rest.split('/').next().unwrap().to_owned();
        }
    };
    let port: u16 = relay.rsplit(':').next().unwrap().parse().unwrap();
    assert!(port > first && port <= first + 20, "{relay} in {range}, past the taken {first}");
    let token = std::fs::read_to_string(data.path().join("token")).unwrap();
    let frontend = |origin: Option<&str>, token: Option<&str>| {
        let url = match token {
            Some(token) => format!("ws://{relay}/ws?token={}", token.trim()),
            None => format!("ws://{relay}/ws"),
        };
        let mut request = url.into_client_request().unwrap();
        if let Some(origin) = origin {
            request.headers_mut().insert("origin", origin.parse().unwrap());
        }
        tokio_tungstenite::connect_async(request)
    };
    // A frontend written for the relay protocol (no token) from the allowed page gets in...
    assert!(frontend(Some("http://agents.example"), None).await.is_ok());
    // ...and nothing else without the token.
    for origin in [None, Some("https://evil.example")] {
        let refused = frontend(origin, None).await.unwrap_err().to_string();
        assert!(refused.contains("401"), "{origin:?}: {refused}");
    }
    assert!(frontend(None, Some(&token)).await.is_ok(), "the token works there too");
    // A CLI needs the ingress token; the API is not served on the relay port.
    let refused = tokio_tungstenite::connect_async(format!("ws://{relay}/")).await.unwrap_err();
    assert!(refused.to_string().contains("401"), "{refused}");
    let api_there = crate::http_client()
        .get(format!("http://{relay}/api/sessions"))
        .bearer_auth(token.trim())
        .send()
        .await
        .unwrap();
    assert_eq!(api_there.status(), 404);
    drop(taken);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::disallowed_methods)] // tests run our own binary
async fn an_interrupted_loop_stops_its_running_sessions_and_exits_130() {
    let api = FakeApi::start(
        Scenario::new()
            .reply(Reply::text("a task that goes on and on").when_prompt("SLOW").hold_after(1)),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let data = tempfile::tempdir().unwrap();
    let daemon = start_daemon(data.path(), &api, &sandbox, &[]).await;
    let token = std::fs::read_to_string(data.path().join("token")).unwrap();
    let tasks = sandbox.file("tasks.txt");
    std::fs::write(&tasks, "SLOW one\nSLOW two\n").unwrap();
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .args(["loop", tasks.to_str().unwrap(), "--cwd", &sandbox.workdir().display().to_string()])
        .arg("--data-dir")
        .arg(data.path())
        .env_remove("SWITCHBOARD_TOKEN")
        .env_remove("SWITCHBOARD_URL")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // The first task is streaming (held by the fake API).
    api.wait_for(|request| request.last_user_text().contains("SLOW one")).await;
    let pid = nix::unistd::Pid::from_raw(child.id().unwrap() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let output = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("the loop ends")
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(130), "{stderr}");
    assert!(String::from_utf8_lossy(&output.stdout).contains("1 not run (interrupted)"));
    let sessions = http(&daemon.url, &token, reqwest::Method::GET, "/api/sessions", None).await;
    let sessions = sessions.as_array().unwrap();
    assert_eq!(sessions.len(), 1, "the second task never started: {sessions:?}");
    assert_eq!(sessions[0]["running"], false, "the first one's session was stopped");
}

/// `switchboard token`: a named token made on the command line works at once with its scope,
/// is kept as a digest across a restart, is listed without its secret, and is refused once
/// revoked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_commands_make_scoped_tokens_that_survive_a_restart() {
    let api = FakeApi::start(Scenario::new()).await.unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let data = tempfile::tempdir().unwrap();
    let mut daemon = start_daemon(data.path(), &api, &sandbox, &[]).await;
    let (code, phone, stderr) =
        client(data.path(), &["token", "create", "phone", "--scope", "approve"]).await;
    assert_eq!(code, Some(0), "{stderr}");
    let phone = phone.trim().to_owned();
    assert!(phone.starts_with("sb_"), "the token alone on stdout: {phone}");
    assert!(stderr.contains("shown this once"), "{stderr}");
    let (code, _, stderr) =
        client(data.path(), &["token", "create", "phone", "--scope", "read"]).await;
    assert_eq!(code, Some(1));
    assert!(stderr.contains("a token named phone exists"), "{stderr}");
    let (code, _, stderr) = client(data.path(), &["token", "create", "x", "--scope", "root"]).await;
    assert_eq!(code, Some(2), "clap refuses an unknown scope: {stderr}");
    // A token with a daily budget of its own.
    let (code, made, stderr) = client(
        data.path(),
        &["token", "create", "ci", "--scope", "operate", "--daily-budget-usd", "2.5", "--json"],
    )
    .await;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(serde_json::from_str::<Value>(&made).unwrap()["daily_budget_usd"], 2.5);
    let (code, _, stderr) = client(
        data.path(),
        &["token", "create", "ci2", "--scope", "operate", "--daily-budget-usd=-1"],
    )
    .await;
    assert_eq!(code, Some(1));
    assert!(stderr.contains("--daily-budget-usd is a number of US dollars"), "{stderr}");

    let status = |url: String, token: String, method: reqwest::Method| async move {
        let response = crate::http_client()
            .request(method, url)
            .bearer_auth(token)
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        response.status().as_u16()
    };
    let sessions = format!("{}/api/sessions", daemon.url);
    assert_eq!(status(sessions.clone(), phone.clone(), reqwest::Method::GET).await, 200);
    assert_eq!(status(sessions.clone(), phone.clone(), reqwest::Method::POST).await, 403);
    // The phone's token cannot manage tokens.
    #[allow(clippy::disallowed_methods)] // tests run our own binary
    let refused = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .args(["token", "list", "--url", &daemon.url, "--token", &phone])
        .output()
        .await
        .unwrap();
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("the admin scope"));

    // Kept as a digest, private, and good after a restart.
    let kept = std::fs::read_to_string(data.path().join("tokens.json")).unwrap();
    assert!(kept.contains("\"phone\"") && !kept.contains(&phone), "{kept}");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(data.path().join("tokens.json")).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
    let pid = nix::unistd::Pid::from_raw(daemon.child.id().unwrap() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    daemon.child.wait().await.unwrap();
    let daemon = start_daemon(data.path(), &api, &sandbox, &["--daily-budget-usd", "7"]).await;
    let sessions = format!("{}/api/sessions", daemon.url);
    assert_eq!(status(sessions.clone(), phone.clone(), reqwest::Method::GET).await, 200);
    // The budgets were kept (the token's), and the flag set the daemon's.
    let admin = std::fs::read_to_string(data.path().join("token")).unwrap();
    let budget: Value = crate::http_client()
        .get(format!("{}/api/budget", daemon.url))
        .bearer_auth(admin.trim())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        (budget["daily_usd"].as_f64(), budget["token_daily_usd"]["ci"].as_f64()),
        (Some(7.0), Some(2.5)),
        "{budget}"
    );

    let (code, list, _) = client(data.path(), &["token", "list"]).await;
    assert_eq!(code, Some(0));
    let lines: Vec<&str> = list.lines().collect();
    assert!(lines[0].starts_with("NAME") && lines[1].starts_with("admin"), "{list}");
    assert!(lines[2].starts_with("ci") && lines[3].starts_with("phone"), "{list}");
    assert!(lines[3].contains("approve"), "{list}");
    assert!(!list.contains(&phone), "{list}");
    let (_, json_list, _) = client(data.path(), &["token", "list", "--json"]).await;
    let json_list: Value = serde_json::from_str(&json_list).unwrap();
    assert_eq!(json_list[2]["name"], "phone");
    assert!(json_list[2]["last_used_ms"].is_u64(), "{json_list}");

    let (code, revoked, stderr) = client(data.path(), &["token", "revoke", "phone"]).await;
    assert_eq!((code, revoked.trim()), (Some(0), "revoked phone"), "{stderr}");
    assert_eq!(status(sessions.clone(), phone.clone(), reqwest::Method::GET).await, 401);
    let (code, _, stderr) = client(data.path(), &["token", "revoke", "../sessions"]).await;
    assert_eq!(code, Some(1));
    assert!(stderr.contains("no token named ../sessions"), "{stderr}");
}

/// A notify file that names a channel wrongly, or a public URL that is not one, stops `serve`
/// before it listens, with the reason (and never the secret).
#[tokio::test]
#[allow(clippy::disallowed_methods)] // tests run our own binary
async fn serve_refuses_a_bad_notify_file_or_public_url() {
    let data = tempfile::tempdir().unwrap();
    let notify = data.path().join("notify.toml");
    std::fs::write(
        &notify,
        "[[channel]]\nname = \"ops\"\nkind = \"webhook\"\nurl = \"https://h.example/x\"\nsecret = \"short-secret\"\n",
    )
    .unwrap();
    let run = |extra: Vec<String>| {
        let data = data.path().to_owned();
        async move {
            tokio::process::Command::new(env!("CARGO_BIN_EXE_switchboard"))
                .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
                .arg(&data)
                .args(extra)
                .env_remove("SWITCHBOARD_NOTIFY")
                .env_remove("SWITCHBOARD_PUBLIC_URL")
                .output()
                .await
                .unwrap()
        }
    };
    let output = run(vec!["--notify".into(), notify.display().to_string()]).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("channel ops") && stderr.contains("at least 16"), "{stderr}");
    assert!(!stderr.contains("short-secret"), "{stderr}");
    let output = run(vec!["--public-url".into(), "ftp://sb.example".into()]).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--public-url must be"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worktree_session_is_removed_with_its_worktree_only_when_asked_to_force() {
    let api = FakeApi::start(
        Scenario::new()
            .reply(
                Reply::tool_use(
                    "Bash",
                    json!({"command": "echo more >> notes.txt && echo RM_MARK", "description": "add"}),
                )
                .when_prompt("CHANGE"),
            )
            .reply(Reply::text("Changed.").when_tool_result_contains("RM_MARK")),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let repo = sandbox.workdir();
    git_repository(&repo, &[("notes.txt", "base\n")]);
    let data = tempfile::tempdir().unwrap();
    let daemon = start_daemon(data.path(), &api, &sandbox, &["--policy", "auto-approve"]).await;
    let repo_arg = repo.to_str().unwrap();
    let (code, out, err) = client(
        data.path(),
        &["new", "--worktree", "--cwd", repo_arg, "--json", "CHANGE the notes"],
    )
    .await;
    assert_eq!(code, Some(0), "{err}");
    let made: Value = serde_json::from_str(out.trim()).unwrap_or_else(|_| panic!("{out}"));
    let id = made["id"].as_str().unwrap().to_owned();
    let tree = std::path::PathBuf::from(made["config"]["worktree"]["path"].as_str().unwrap());
    let token = std::fs::read_to_string(data.path().join("token")).unwrap();
    wait_session(&daemon.url, token.trim(), &id, |s| s["state"] == "idle").await;
    assert_eq!(std::fs::read_to_string(tree.join("notes.txt")).unwrap(), "base\nmore\n");

    // --force and --delete-branch need --purge; a purge keeps a worktree with changes.
    let (code, _, err) = client(data.path(), &["sessions", "rm", &id, "--force"]).await;
    assert_eq!(code, Some(2), "{err}");
    let (code, _, err) = client(data.path(), &["sessions", "rm", &id, "--purge"]).await;
    assert_ne!(code, Some(0));
    assert!(err.contains("has changes"), "{err}");
    assert!(tree.exists());
    let (code, out, err) =
        client(data.path(), &["sessions", "rm", &id, "--purge", "--force", "--delete-branch"])
            .await;
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("deleted"), "{out}");
    assert!(!tree.exists(), "the worktree is gone");
    let branches = git(&repo, &["branch", "--list", "switchboard/*"]);
    assert!(branches.is_empty(), "the branch is gone: {branches}");
}
