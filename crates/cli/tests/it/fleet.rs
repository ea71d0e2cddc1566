//! `switchboard serve --database-url`: daemons on one PostgreSQL (a real server of the test's
//! own; skipped with a message where PostgreSQL is not installed), with the real CLI.

use serde_json::{json, Value};
use switchboard_store::{PostgresStore, Store};
use switchboard_testkit::servers::{Nats, Postgres};
use switchboard_testkit::{CliSandbox, FakeApi, Reply, Scenario};

use crate::serve::{
    client, create_session, frames_until, http, session_events, start_daemon_with_env, subscribe,
    wait_session, Daemon,
};

/// A password PostgreSQL's trust authentication ignores: it must never reach a log.
const PASSWORD: &str = "hunter2-not-for-logs";

async fn start_node(
    data: &std::path::Path,
    api: &FakeApi,
    sandbox: &CliSandbox,
    url: &str,
    node: &str,
) -> (Daemon, String) {
    let daemon = start_daemon_with_env(
        data,
        api,
        sandbox,
        &["--node", node],
        &[("SWITCHBOARD_DATABASE_URL", url)],
    )
    .await;
    let token = std::fs::read_to_string(data.join("token")).unwrap();
    (daemon, token)
}

/// Nodes on one database and one bus, each with a data directory of its own: each node's
/// daemon, its token, its directory. Gamma's roots and capacity come from a config file:
/// `roots = ["repos"]` (its data directory's `repos`), `capacity = 7`.
async fn start_nodes(
    names: &[&str],
    api: &FakeApi,
    sandbox: &CliSandbox,
    database: &str,
    nats: &str,
) -> Vec<(Daemon, String, tempfile::TempDir)> {
    let mut nodes = Vec::new();
    for name in names {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config.toml");
        let config_text = config.display().to_string();
        let mut env = vec![("SWITCHBOARD_DATABASE_URL", database), ("SWITCHBOARD_NATS_URL", nats)];
        if *name == "gamma" {
            std::fs::write(&config, "roots = [\"repos\"]\ncapacity = 7\n").unwrap();
            env.push(("SWITCHBOARD_CONFIG", &config_text));
        }
        let daemon = start_daemon_with_env(dir.path(), api, sandbox, &["--node", name], &env).await;
        let token = std::fs::read_to_string(dir.path().join("token")).unwrap();
        nodes.push((daemon, token, dir));
    }
    nodes
}

/// A gRPC client of the daemon at `url` (its one port), sending `token`.
async fn grpc_client(
    url: &str,
    token: &str,
) -> switchboard_server::grpc::pb::switchboard_client::SwitchboardClient<
    tonic::service::interceptor::InterceptedService<
        tonic::transport::Channel,
        impl tonic::service::Interceptor,
    >,
> {
    let channel = tonic::transport::Endpoint::from_shared(url.to_owned())
        .unwrap()
        .connect_timeout(std::time::Duration::from_secs(10))
        .timeout(std::time::Duration::from_secs(30))
        .connect()
        .await
        .unwrap();
    let bearer: tonic::metadata::MetadataValue<tonic::metadata::Ascii> =
        format!("Bearer {}", token.trim()).parse().unwrap();
    switchboard_server::grpc::pb::switchboard_client::SwitchboardClient::with_interceptor(
        channel,
        move |mut request: tonic::Request<()>| {
            request.metadata_mut().insert("authorization", bearer.clone());
            Ok(request)
        },
    )
}

async fn sigkill(mut daemon: Daemon) -> String {
    let pid = daemon.child.id().unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    daemon.child.wait().await.unwrap();
    daemon.stderr.await.unwrap()
}

/// A session on node alpha, kept in PostgreSQL: approved, then alpha is SIGKILLed while a
/// permission waits. Every committed event is in the database, in sequence. Node beta, on the
/// same database, shows the session as alpha left it and will not resume it (it is alpha's);
/// alpha, started again, ends it with a note and resumes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_on_postgres_approve_sigkill_and_recover() {
    let Some(server) = Postgres::start() else { return };
    let url = server.url().replacen("switchboard@", &format!("switchboard:{PASSWORD}@"), 1);
    let api = FakeApi::start(
        Scenario::new()
            .reply(
                Reply::tool_use("Bash", json!({"command": "touch one.txt", "description": "x"}))
                    .when_prompt("FIRST"),
            )
            .reply(Reply::text("first done").when_tool_result())
            .reply(
                Reply::tool_use("Bash", json!({"command": "touch never.txt", "description": "x"}))
                    .when_prompt("SECOND"),
            ),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let alpha_dir = tempfile::tempdir().unwrap();
    let (alpha, token) = start_node(alpha_dir.path(), &api, &sandbox, &url, "alpha").await;

    let id = create_session(&alpha.url, &token, &sandbox, "FIRST").await;
    let session = wait_session(&alpha.url, &token, &id, |s| {
        !s["pending_permissions"].as_array().unwrap().is_empty()
    })
    .await;
    assert_eq!(session["node"], "alpha", "{session}");
    let request_id = session["pending_permissions"][0]["request_id"].as_str().unwrap().to_owned();
    let (code, _, err) = client(alpha_dir.path(), &["approve", &id, &request_id]).await;
    assert_eq!(code, Some(0), "{err}");
    wait_session(&alpha.url, &token, &id, |s| s["state"] == "idle").await;
    assert!(sandbox.file("one.txt").exists());
    http(
        &alpha.url,
        &token,
        reqwest::Method::POST,
        &format!("/api/sessions/{id}/messages"),
        Some(json!({"content": "SECOND"})),
    )
    .await;
    wait_session(&alpha.url, &token, &id, |s| s["state"] == "awaiting_permission").await;
    let logs = sigkill(alpha).await;
    assert!(!logs.contains(PASSWORD), "the database password never reaches the logs");
    assert!(logs.contains("sessions are kept in PostgreSQL"), "{logs}");

    // Everything committed is in PostgreSQL, from 1 without a gap.
    let store = PostgresStore::connect(&server.url()).await.unwrap();
    let events = store.events_after(&id, 0, 100_000).await.unwrap();
    assert!(events.iter().enumerate().all(|(i, e)| e.seq == i as u64 + 1), "contiguous from 1");
    assert!(
        events.iter().any(|e| e.kind == "permission_requested" && e.payload.contains("never.txt")),
        "the pending request was committed"
    );
    let committed = events.len();

    // Beta shares the database: it lists alpha's session as alpha left it, and leaves it be.
    let beta_dir = tempfile::tempdir().unwrap();
    let (beta, beta_token) = start_node(beta_dir.path(), &api, &sandbox, &url, "beta").await;
    let listed = http(&beta.url, &beta_token, reqwest::Method::GET, "/api/sessions", None).await;
    let seen = listed.as_array().unwrap().iter().find(|s| s["id"] == id.as_str()).unwrap().clone();
    assert_eq!(seen["node"], "alpha", "{seen}");
    assert_eq!(seen["state"], "awaiting_permission", "beta does not end alpha's sessions");
    let refused = crate::http_client()
        .post(format!("{}/api/sessions/{id}/resume", beta.url))
        .bearer_auth(&beta_token)
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status().as_u16(), 409);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], "other_node", "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("runs on alpha"), "{body}");
    assert_eq!(store.events_after(&id, 0, 100_000).await.unwrap().len(), committed);

    // Alpha again: its leftover ends with a note, and it resumes.
    let (alpha, token) = start_node(alpha_dir.path(), &api, &sandbox, &url, "alpha").await;
    let session =
        http(&alpha.url, &token, reqwest::Method::GET, &format!("/api/sessions/{id}"), None).await;
    assert_eq!(session["state"], "exited", "{session}");
    let events = session_events(&alpha.url, &token, &id).await;
    let events = events.as_array().unwrap();
    assert_eq!(events.len(), committed + 1, "history plus the note that the daemon stopped");
    assert!(events.last().unwrap()["event"]["description"]
        .as_str()
        .unwrap()
        .contains("daemon stopped"));
    let resumed = http(
        &alpha.url,
        &token,
        reqwest::Method::POST,
        &format!("/api/sessions/{id}/resume"),
        Some(json!({})),
    )
    .await;
    assert_eq!(resumed["running"], true, "{resumed}");
    assert_eq!(resumed["node"], "alpha");
    assert!(!sandbox.file("never.txt").exists(), "the unanswered tool never ran");
    drop(beta);
}

/// `--node` means nothing without a shared database; a URL PostgreSQL cannot read, or one
/// where nothing answers, stops the daemon with a message that never shows the password.
#[tokio::test]
#[allow(clippy::disallowed_methods)] // tests run our own binary
async fn serve_refuses_a_node_alone_and_a_bad_database_url() {
    let data = tempfile::tempdir().unwrap();
    let serve = |extra: Vec<String>| {
        let data = data.path().to_owned();
        async move {
            tokio::process::Command::new(env!("CARGO_BIN_EXE_switchboard"))
                .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
                .arg(data)
                .args(extra)
                .env_remove("SWITCHBOARD_DATABASE_URL")
                .output()
                .await
                .unwrap()
        }
    };
    let output = serve(vec!["--node".into(), "alpha".into()]).await;
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("--database-url"));
    let output = serve(vec!["--node".into(), "no spaces".into()]).await;
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("is not a node name"));

    let nowhere = tempfile::tempdir().unwrap();
    let socket = nowhere.path().display().to_string().replace('/', "%2F");
    for url in [
        format!("postgres://me:{PASSWORD}@[::1/db"),
        format!("postgres://me:{PASSWORD}@{socket}/db"),
    ] {
        let output = serve(vec!["--database-url".into(), url.clone()]).await;
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{url}: {stderr}");
        assert!(stderr.contains("cannot open the database"), "{stderr}");
        assert!(!stderr.contains(PASSWORD), "{stderr}");
    }
}

/// Polls `GET /api/nodes` until `predicate` holds (bounded).
async fn wait_nodes(url: &str, token: &str, predicate: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let nodes = http(url, token, reqwest::Method::GET, "/api/nodes", None).await;
        let nodes = nodes.as_array().cloned().unwrap_or_default();
        if predicate(&nodes) {
            return nodes;
        }
        assert!(std::time::Instant::now() < deadline, "the nodes never were so: {nodes:?}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Three daemons on one PostgreSQL and one NATS. A session starts on alpha; gamma follows it
/// from its first event (history, then live across the seam); its Bash call is approved
/// through beta's API, which forwards the answer to alpha; a second message goes in through
/// gamma. Gamma sees every event once, in order, without a gap, as PostgreSQL has them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_share_sessions_live_and_forward_commands() {
    let Some(database) = Postgres::start() else { return };
    let Some(nats) = Nats::start() else { return };
    let api = FakeApi::start(
        Scenario::new()
            .reply(
                Reply::tool_use("Bash", json!({"command": "touch one.txt", "description": "x"}))
                    .when_prompt("FIRST"),
            )
            .reply(Reply::text("first done").when_tool_result())
            .reply(Reply::text("second done").when_prompt("SECOND")),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let url = database.url();
    let nodes = start_nodes(&["alpha", "beta", "gamma"], &api, &sandbox, &url, nats.url()).await;
    let [(alpha, alpha_token, _), (beta, beta_token, beta_dir), (gamma, gamma_token, _)] =
        &nodes[..]
    else {
        unreachable!()
    };
    let beta_dir = beta_dir.path();

    // Gamma's dashboard hears of sessions made on alpha.
    let mut dashboard = {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
        let address = format!("{}/api/events", gamma.url.replace("http://", "ws://"));
        let mut request = address.into_client_request().unwrap();
        request
            .headers_mut()
            .insert("authorization", format!("Bearer {gamma_token}").parse().unwrap());
        tokio_tungstenite::connect_async(request).await.unwrap().0
    };
    let id = create_session(&alpha.url, alpha_token, &sandbox, "FIRST").await;
    let mut follower = subscribe(&gamma.url, gamma_token, &id, 0).await;
    loop {
        use futures::StreamExt as _;
        let frame = tokio::time::timeout(std::time::Duration::from_secs(60), dashboard.next())
            .await
            .expect("gamma's dashboard hears of the session")
            .unwrap()
            .unwrap();
        let tokio_tungstenite::tungstenite::Message::Text(text) = frame else { continue };
        let change: Value = serde_json::from_str(&text).unwrap();
        if change["event"] == "session_created" && change["session"]["id"] == id.as_str() {
            assert_eq!(change["from_node"], "alpha", "{change}");
            assert_eq!(change["session"]["node"], "alpha", "{change}");
            break;
        }
    }

    // Beta lists the session as alpha's and running; its request comes from beta's log.
    let asked =
        frames_until(&mut follower, |frame| frame["event"]["event"] == "permission_requested")
            .await;
    let request_id = asked.last().unwrap()["event"]["request_id"].as_str().unwrap().to_owned();
    let seen =
        http(&beta.url, beta_token, reqwest::Method::GET, &format!("/api/sessions/{id}"), None)
            .await;
    assert_eq!(seen["node"], "alpha", "{seen}");
    assert_eq!(seen["running"], true, "{seen}");
    // What waits in alpha's session, beta shows as alpha does, on every face: REST (the
    // session and its permissions), gRPC, and the CLI client.
    let waits = |pending: &Value| {
        pending.as_array().is_some_and(|pending| {
            pending.len() == 1
                && pending[0]["request_id"] == request_id.as_str()
                && pending[0]["tool_name"] == "Bash"
                && pending[0]["started_by"].as_str().is_some_and(|by| by.starts_with("token "))
        })
    };
    assert!(waits(&seen["pending_permissions"]), "beta's session: {seen}");
    let on_alpha =
        http(&alpha.url, alpha_token, reqwest::Method::GET, &format!("/api/sessions/{id}"), None)
            .await;
    assert_eq!(on_alpha["pending_permissions"], seen["pending_permissions"], "the same on alpha");
    let listed = http(
        &beta.url,
        beta_token,
        reqwest::Method::GET,
        &format!("/api/sessions/{id}/permissions"),
        None,
    )
    .await;
    assert!(waits(&listed), "beta's permissions: {listed}");
    let mut grpc = grpc_client(&beta.url, beta_token).await;
    let got = grpc
        .get_session(switchboard_server::grpc::pb::GetSessionRequest { id: id.clone() })
        .await
        .unwrap()
        .into_inner();
    let asked_ids: Vec<&str> =
        got.pending_permissions.iter().map(|pending| pending.request_id.as_str()).collect();
    assert_eq!(asked_ids, [request_id.as_str()], "beta's gRPC session: {got:?}");
    let (code, out, err) = client(beta_dir, &["sessions", "show", &id[..8]]).await;
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains(&format!("pending            {request_id} Bash")), "{out}");
    let (code, out, err) = client(beta_dir, &["sessions"]).await;
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.lines().any(|line| line.starts_with(id.as_str()) && line.contains("waiting (1)")),
        "{out}"
    );
    let answered = crate::http_client()
        .post(format!("{}/api/sessions/{id}/permissions/{request_id}", beta.url))
        .bearer_auth(beta_token)
        .json(&json!({"behavior": "allow"}))
        .send()
        .await
        .unwrap();
    assert_eq!(answered.status().as_u16(), 200, "{}", answered.text().await.unwrap());
    // Answered once: the same answer again is refused as alpha refuses it.
    let again = crate::http_client()
        .post(format!("{}/api/sessions/{id}/permissions/{request_id}", beta.url))
        .bearer_auth(beta_token)
        .json(&json!({"behavior": "allow"}))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status().as_u16(), 409);
    let refusal: Value = again.json().await.unwrap();
    assert_eq!(refusal["error"]["code"], "already_answered", "{refusal}");

    let first = frames_until(&mut follower, |frame| {
        frame["event"]["event"] == "state" && frame["event"]["to"] == "idle"
    })
    .await;
    assert!(sandbox.file("one.txt").exists(), "the approved call ran on alpha");
    let decided = first
        .iter()
        .find(|frame| frame["event"]["event"] == "permission_decided")
        .expect("the decision is in the log");
    assert!(
        decided["event"]["by"]["who"].as_str().unwrap().ends_with("(api via beta)"),
        "{decided}"
    );

    // A message through gamma reaches alpha's CLI.
    let sent = crate::http_client()
        .post(format!("{}/api/sessions/{id}/messages", gamma.url))
        .bearer_auth(gamma_token)
        .json(&json!({"content": "SECOND"}))
        .send()
        .await
        .unwrap();
    assert_eq!(sent.status().as_u16(), 202, "{}", sent.text().await.unwrap());
    let second = frames_until(&mut follower, |frame| {
        frame["event"]["event"] == "line"
            && frame["event"]["line"]["type"] == "result"
            && frame["event"]["line"]["result"] == "second done"
    })
    .await;

    // Every event once, in order, from 1: what PostgreSQL has.
    let frames: Vec<Value> = asked.into_iter().chain(first).chain(second).collect();
    let seqs: Vec<u64> = frames.iter().map(|frame| frame["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "gap-free from 1, no repeat");
    let store = PostgresStore::connect(&url).await.unwrap();
    let stored = store.events_after(&id, 0, 100_000).await.unwrap();
    for (frame, event) in frames.iter().zip(&stored) {
        assert_eq!(frame["seq"].as_u64(), Some(event.seq));
        assert_eq!(frame["event"], serde_json::from_str::<Value>(&event.payload).unwrap());
    }

    // Gamma's roots and capacity, from its config file, as alpha hears them.
    let repos = nodes[2].2.path().join("repos").display().to_string();
    wait_nodes(&alpha.url, alpha_token, |nodes| {
        nodes.iter().any(|node| {
            node["node"] == "gamma" && node["capacity"] == 7 && node["roots"] == json!([repos])
        })
    })
    .await;
}

/// Node alpha is SIGKILLed mid-turn, a permission waiting. Within a few seconds beta shows
/// the session as lost (and alpha as lost in `/api/nodes`); beta resumes it (the same
/// directory and Claude Code home here), and the log goes on from where alpha's commit left
/// it: no gap, no repeat, a note that the run ended with its node. The unanswered call never
/// ran; a new turn runs on beta.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_nodes_session_resumes_on_another_node() {
    let Some(database) = Postgres::start() else { return };
    let Some(nats) = Nats::start() else { return };
    let api = FakeApi::start(
        Scenario::new()
            .reply(
                Reply::tool_use("Bash", json!({"command": "touch never.txt", "description": "x"}))
                    .when_prompt("FIRST"),
            )
            .reply(Reply::text("on beta now").when_prompt("AGAIN")),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let url = database.url();
    let mut started = start_nodes(&["alpha", "beta"], &api, &sandbox, &url, nats.url()).await;
    let (beta, beta_token, _beta_dir) = started.pop().unwrap();
    let (alpha, alpha_token, _alpha_dir) = started.pop().unwrap();
    let id = create_session(&alpha.url, &alpha_token, &sandbox, "FIRST").await;
    wait_session(&beta.url, &beta_token, &id, |s| s["state"] == "awaiting_permission").await;
    // Each hears the other's heartbeat within a second.
    // And each says which CLI it runs.
    let nodes = wait_nodes(&beta.url, &beta_token, |nodes| {
        nodes.len() == 2 && nodes.iter().all(|node| node["cli_version"].is_string())
    })
    .await;
    assert!(nodes.iter().all(|node| node["cli_version"] == "2.1.330"), "{nodes:?}");
    let names: Vec<&str> = nodes.iter().map(|node| node["node"].as_str().unwrap()).collect();
    assert_eq!(names, ["alpha", "beta"], "{nodes:?}");
    assert!(nodes.iter().all(|node| node["lost"] == false), "{nodes:?}");

    sigkill(alpha).await;
    let lost = wait_session(&beta.url, &beta_token, &id, |s| s["node_lost"] == true).await;
    assert_eq!(lost["running"], false, "{lost}");
    assert_eq!(lost["state"], "awaiting_permission", "the last state alpha stored is kept");
    let nodes = wait_nodes(&beta.url, &beta_token, |_| true).await;
    let alpha_status = nodes.iter().find(|node| node["node"] == "alpha").unwrap().clone();
    assert_eq!(alpha_status["lost"], true, "{nodes:?}");
    let store = PostgresStore::connect(&url).await.unwrap();
    let before = store.events_after(&id, 0, 100_000).await.unwrap();
    // As if alpha died before its index writer wrote what it stored of the session.
    let (sql, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    sql.batch_execute(&format!(
        "DELETE FROM switchboard.search_paths WHERE entry IN
             (SELECT id FROM switchboard.search_entries WHERE session_id = '{id}');
         DELETE FROM switchboard.search_entries WHERE session_id = '{id}';
         DELETE FROM switchboard.search_marks WHERE session_id = '{id}';"
    ))
    .await
    .unwrap();

    let resumed = http(
        &beta.url,
        &beta_token,
        reqwest::Method::POST,
        &format!("/api/sessions/{id}/resume"),
        Some(json!({})),
    )
    .await;
    assert_eq!(resumed["running"], true, "{resumed}");
    assert_eq!(resumed["node"], "beta");
    http(
        &beta.url,
        &beta_token,
        reqwest::Method::POST,
        &format!("/api/sessions/{id}/messages"),
        Some(json!({"content": "AGAIN"})),
    )
    .await;
    // The turn's end (idle alone may be the resumed CLI's, before the prompt reached it).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    let after = loop {
        let after = store.events_after(&id, 0, 100_000).await.unwrap();
        if after.iter().any(|event| {
            event.kind == "line"
                && event.payload.contains("\"type\":\"result\"")
                && event.seq > before.len() as u64
        }) {
            break after;
        }
        assert!(std::time::Instant::now() < deadline, "the turn on beta never ended: {after:?}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    let seqs: Vec<u64> = after.iter().map(|event| event.seq).collect();
    assert_eq!(seqs, (1..=after.len() as u64).collect::<Vec<_>>(), "no gap, no repeat");
    assert_eq!(&after[..before.len()], &before[..], "what alpha stored stays as it was");
    let note = &after[before.len()];
    assert_eq!(note.kind, "exited");
    assert!(note.payload.contains("node alpha was lost"), "{}", note.payload);
    assert!(
        after.iter().any(|event| event.kind == "line" && event.payload.contains("on beta now")),
        "a turn ran on beta"
    );
    assert!(!sandbox.file("never.txt").exists(), "the unanswered call never ran");
    // The audit trail says the run ended with its node, and the session started again.
    let trail = http(&beta.url, &beta_token, reqwest::Method::GET, "/api/audit", None).await;
    let of_it: Vec<&serde_json::Value> = trail["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|record| &record["entry"])
        .filter(|entry| entry["session"] == id.as_str())
        .collect();
    let kinds: Vec<&str> = of_it.iter().map(|entry| entry["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["session_started", "session_ended", "session_started"], "{trail}");
    assert_eq!(of_it[1]["why"], "node alpha was lost while it ran");
    assert_eq!(of_it[2]["resumed"], true);
    // Beta read again what alpha stored and never indexed, naming alpha; its own turn names it.
    let query = format!("/api/search?q=session:{id}%20kind:prompt");
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    let prompts = loop {
        let found = http(&beta.url, &beta_token, reqwest::Method::GET, &query, None).await;
        let hits = found["hits"].as_array().cloned().unwrap_or_default();
        if hits.len() == 2 && found["behind"] == 0 {
            break hits;
        }
        assert!(tokio::time::Instant::now() < deadline, "{found}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    let seen: Vec<(&str, &str)> = prompts
        .iter()
        .map(|hit| (hit["text"].as_str().unwrap(), hit["node"].as_str().unwrap()))
        .collect();
    assert_eq!(seen, [("AGAIN", "beta"), ("FIRST", "alpha")]);
}

/// A second daemon under a name a live node already beats with is refused at start, saying
/// which and what to do, and the first one's session goes on untouched. (It used to start and
/// end the first one's sessions as its own leftovers.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::disallowed_methods)] // tests run our own binary
async fn a_second_daemon_under_a_live_nodes_name_is_refused() {
    let Some(database) = Postgres::start() else { return };
    let Some(nats) = Nats::start() else { return };
    let api = FakeApi::start(
        Scenario::new().reply(
            Reply::tool_use("Bash", json!({"command": "touch twin.txt", "description": "x"}))
                .when_prompt("WAIT"),
        ),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let url = database.url();
    let nodes = start_nodes(&["alpha"], &api, &sandbox, &url, nats.url()).await;
    let (alpha, alpha_token, _) = &nodes[0];
    let id = create_session(&alpha.url, alpha_token, &sandbox, "WAIT").await;
    wait_session(&alpha.url, alpha_token, &id, |s| s["state"] == "awaiting_permission").await;

    let twin = tempfile::tempdir().unwrap();
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchboard"));
    command
        .args(["serve", "--listen", "127.0.0.1:0", "--node", "alpha", "--data-dir"])
        .arg(twin.path())
        .arg("--claude")
        .arg(switchboard_testkit::real_cli(switchboard_testkit::CliVersion::V2_1_330))
        .env("SWITCHBOARD_DATABASE_URL", &url)
        .env("SWITCHBOARD_NATS_URL", nats.url())
        .env_remove("SWITCHBOARD_TOKEN")
        .kill_on_drop(true);
    let output = tokio::time::timeout(std::time::Duration::from_secs(60), command.output())
        .await
        .expect("the twin stops in time")
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("another daemon runs as node \"alpha\""), "{stderr}");
    assert!(stderr.contains("--node"), "says what to do: {stderr}");
    // Alpha's session still waits for its answer, on alpha.
    let session = wait_session(&alpha.url, alpha_token, &id, |s| s["running"] == true).await;
    assert_eq!(session["state"], "awaiting_permission", "{session}");
    assert_eq!(session["node"], "alpha", "{session}");
}

/// Polls `GET path` on `url` with `token` until `done` holds for its status and body (60 s).
async fn until_answer(
    url: &str,
    token: &str,
    path: &str,
    what: &str,
    done: impl Fn(u16, &Value) -> bool,
) -> Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let response = crate::http_client()
            .get(format!("{url}{path}"))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        if done(status, &body) {
            return body;
        }
        assert!(std::time::Instant::now() < deadline, "never {what}: {status} {body}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Behind one URL, who a person is and what they may spend are the same on every node: two
/// daemons on one PostgreSQL and NATS, each with a data directory of its own. A browser
/// subscribed through alpha is listed by beta, and removed through beta is gone on alpha (one
/// push key for both); a token made through alpha works through beta, and revoked through beta
/// is refused by alpha; a daily budget set through beta holds on alpha, and counts alpha's
/// turns; a one-tap link from alpha (its key) answers the request through beta, and the tool
/// runs on alpha.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_links_push_and_budgets_hold_on_every_node() {
    let Some(database) = Postgres::start() else { return };
    let Some(nats) = Nats::start() else { return };
    let api = FakeApi::start(
        Scenario::new()
            .reply(
                Reply::tool_use("Bash", json!({"command": "touch linked.txt", "description": "x"}))
                    .when_prompt("LINK"),
            )
            .reply(Reply::text("linked").when_tool_result()),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let nodes = start_nodes(&["alpha", "beta"], &api, &sandbox, &database.url(), nats.url()).await;
    let [(alpha, alpha_token, _), (beta, beta_token, _)] = &nodes[..] else { unreachable!() };
    let (alpha_token, beta_token) = (alpha_token.trim(), beta_token.trim());
    assert_ne!(alpha_token, beta_token, "each node has its own admin token");
    let send = |method: reqwest::Method, url: String, token: &str, body: Value| {
        crate::http_client().request(method, url).bearer_auth(token).json(&body).send()
    };

    // Web Push: one key, one list of browsers. (Removed before any session exists: nothing
    // is ever sent to the push service's address.)
    let key = |url: &str, token: &str| {
        let (url, token) = (url.to_owned(), token.to_owned());
        async move { http(&url, &token, reqwest::Method::GET, "/api/push/key", None).await }
    };
    assert_eq!(key(&alpha.url, alpha_token).await, key(&beta.url, beta_token).await);
    let subscribed = send(
        reqwest::Method::POST,
        format!("{}/api/push/subscriptions", alpha.url),
        alpha_token,
        json!({"endpoint": "https://fcm.googleapis.com/fcm/send/switchboard-fleet-test",
               "keys": {"p256dh": "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4",
                        "auth": "BTBZMqHH6r4Tts7J_aSIgg"},
               "name": "phone"}),
    )
    .await
    .unwrap();
    assert_eq!(subscribed.status().as_u16(), 201, "{}", subscribed.text().await.unwrap());
    let subscription: Value = subscribed.json().await.unwrap();
    let device = subscription["id"].as_str().unwrap().to_owned();
    let listed = |device: String| {
        move |status: u16, body: &Value| {
            status == 200
                && body
                    .as_array()
                    .is_some_and(|list| list.iter().any(|s| s["id"] == device.as_str()))
        }
    };
    until_answer(
        &beta.url,
        beta_token,
        "/api/push/subscriptions",
        "beta lists alpha's browser",
        listed(device.clone()),
    )
    .await;
    let removed = send(
        reqwest::Method::DELETE,
        format!("{}/api/push/subscriptions/{device}", beta.url),
        beta_token,
        Value::Null,
    )
    .await
    .unwrap();
    assert!(removed.status().is_success(), "{}", removed.text().await.unwrap());
    until_answer(
        &alpha.url,
        alpha_token,
        "/api/push/subscriptions",
        "alpha drops it",
        |status, body| status == 200 && body.as_array().is_some_and(Vec::is_empty),
    )
    .await;

    // A token made through alpha works through beta; revoked through beta, alpha refuses it.
    let made = send(
        reqwest::Method::POST,
        format!("{}/api/tokens", alpha.url),
        alpha_token,
        json!({"name": "phone", "scope": "operate"}),
    )
    .await
    .unwrap();
    assert_eq!(made.status().as_u16(), 201, "{}", made.text().await.unwrap());
    let phone = made.json::<Value>().await.unwrap()["token"].as_str().unwrap().to_owned();
    until_answer(&beta.url, &phone, "/api/sessions", "beta takes alpha's token", |status, _| {
        status == 200
    })
    .await;
    let revoked = send(
        reqwest::Method::DELETE,
        format!("{}/api/tokens/phone", beta.url),
        beta_token,
        Value::Null,
    )
    .await
    .unwrap();
    assert_eq!(revoked.status().as_u16(), 200, "{}", revoked.text().await.unwrap());
    until_answer(
        &alpha.url,
        &phone,
        "/api/sessions",
        "alpha refuses the revoked token",
        |status, _| status == 401,
    )
    .await;
    let tokens = http(&alpha.url, alpha_token, reqwest::Method::GET, "/api/tokens", None).await;
    assert!(!tokens.to_string().contains("phone"), "{tokens}");

    // A daily budget set through beta holds on alpha.
    let set = send(
        reqwest::Method::PATCH,
        format!("{}/api/budget", beta.url),
        beta_token,
        json!({"daily_usd": 100.0}),
    )
    .await
    .unwrap();
    assert_eq!(set.status().as_u16(), 200, "{}", set.text().await.unwrap());
    until_answer(
        &alpha.url,
        alpha_token,
        "/api/budget",
        "alpha holds beta's limit",
        |status, body| status == 200 && body["daily_usd"] == 100.0,
    )
    .await;

    // A link from alpha's notice answers through beta; the tool runs on alpha.
    let id = create_session(&alpha.url, alpha_token, &sandbox, "LINK").await;
    wait_session(&alpha.url, alpha_token, &id, |s| s["state"] == "awaiting_permission").await;
    let pending = http(
        &alpha.url,
        alpha_token,
        reqwest::Method::GET,
        &format!("/api/sessions/{id}/permissions"),
        None,
    )
    .await;
    let request = pending[0]["request_id"].as_str().unwrap().to_owned();
    let link = http(
        &alpha.url,
        alpha_token,
        reqwest::Method::POST,
        &format!("/api/sessions/{id}/permissions/{request}/link"),
        None,
    )
    .await;
    let link = link["link"].as_str().unwrap();
    assert!(link.starts_with(&alpha.url), "alpha's own address: {link}");
    let through_beta = link.replace(&alpha.url, &beta.url);
    let page = crate::http_client().get(&through_beta).send().await.unwrap();
    assert_eq!(page.status().as_u16(), 200, "beta shows alpha's link");
    let answered = crate::http_client()
        .post(&through_beta)
        .header("content-type", "application/x-www-form-urlencoded")
        .body("decision=allow")
        .send()
        .await
        .unwrap();
    let status = answered.status().as_u16();
    let text = answered.text().await.unwrap();
    assert!(status == 200 && text.contains("Approved"), "{status} {text}");
    let session = wait_session(&alpha.url, alpha_token, &id, |s| s["state"] == "idle").await;
    assert!(sandbox.file("linked.txt").exists(), "the approved call ran on alpha");
    let used = crate::http_client().get(&through_beta).send().await.unwrap();
    assert_eq!(used.status().as_u16(), 410, "used, through beta too");

    // Alpha's turn counts against the one daily budget, as beta reads it.
    let cost = session["cost_usd"].as_f64().unwrap();
    assert!(cost > 0.0, "the CLI reported a cost: {session}");
    until_answer(
        &beta.url,
        beta_token,
        "/api/budget",
        "beta counts alpha's spend",
        |status, body| {
            status == 200
                && body["spent_usd"].as_f64().is_some_and(|spent| (spent - cost).abs() < 1e-9)
        },
    )
    .await;
}

/// Two daemons on one PostgreSQL and one bus share one book of schedules: a schedule due every
/// two seconds, added through one node, runs each due run once (claimed in the database), on
/// whichever node claims it, its session placed on either node and linked to its run there (so
/// its end lets the next run start); both nodes show the same schedule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_run_each_due_run_once() {
    let Some(database) = Postgres::start() else { return };
    let Some(nats) = Nats::start() else { return };
    let api = FakeApi::start(Scenario::new().reply(Reply::text("tock").when_prompt("TICK")))
        .await
        .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let url = database.url();
    // On one bus too: a run may be placed on the other node, and stays the schedule's there.
    let nodes = start_nodes(&["alpha", "beta"], &api, &sandbox, &url, nats.url()).await;
    let [(alpha, alpha_token, _), (beta, beta_token, _)] = &nodes[..] else { unreachable!() };
    let made = http(
        &alpha.url,
        alpha_token,
        reqwest::Method::POST,
        "/api/schedules",
        Some(json!({"name": "tick", "cron": "*/2 * * * * *", "overlap": "queue",
            "task": {"cwd": sandbox.workdir(), "prompt": "TICK", "node": "beta"}})),
    )
    .await;
    assert_eq!(made["schedule"]["name"], "tick", "{made}");
    // Five runs, whichever node starts each.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let view = loop {
        let view =
            http(&beta.url, beta_token, reqwest::Method::GET, "/api/schedules/tick", None).await;
        let started = view["state"]["runs"]
            .as_array()
            .map_or(0, |runs| runs.iter().filter(|run| run["outcome"] == "started").count());
        if started >= 5 {
            break view;
        }
        assert!(std::time::Instant::now() < deadline, "five runs never started: {view}");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    http(
        &alpha.url,
        alpha_token,
        reqwest::Method::PATCH,
        "/api/schedules/tick",
        Some(json!({"paused": true})),
    )
    .await;
    let runs = view["state"]["runs"].as_array().unwrap();
    let mut dues: Vec<u64> = runs.iter().map(|run| run["due_ms"].as_u64().unwrap()).collect();
    let all = dues.len();
    dues.sort_unstable();
    dues.dedup();
    assert_eq!(dues.len(), all, "each due run dealt with once: {view}");
    // Every run's session is one session, and every session of the schedule is one run.
    let store = PostgresStore::connect(&database.url()).await.unwrap();
    let sessions: Vec<_> = store
        .list_sessions()
        .await
        .unwrap()
        .into_iter()
        .filter(|record| record.launch.run.as_ref().is_some_and(|run| run.name == "tick"))
        .collect();
    let started: Vec<&str> = runs
        .iter()
        .filter(|run| run["outcome"] == "started")
        .map(|run| run["session"].as_str().unwrap())
        .collect();
    // (A run may have started after the view was read.)
    assert!(sessions.len() >= started.len(), "{} sessions, {} runs", sessions.len(), started.len());
    let mut due_of_session: Vec<u64> =
        sessions.iter().filter_map(|record| record.launch.run.as_ref()?.due_ms).collect();
    let count = due_of_session.len();
    due_of_session.sort_unstable();
    due_of_session.dedup();
    assert_eq!(due_of_session.len(), count, "no due time has two sessions");
    for id in &started {
        assert!(sessions.iter().any(|record| record.id == *id), "run {id} is a session");
    }
    assert!(
        sessions.iter().all(|record| record
            .launch
            .run
            .as_ref()
            .is_some_and(|run| run.due_ms.is_some())),
        "every run's session is linked to its due time, on whichever node it ran"
    );
    // Both nodes read the same book.
    let from_alpha =
        http(&alpha.url, alpha_token, reqwest::Method::GET, "/api/schedules/tick", None).await;
    assert_eq!(from_alpha["schedule"]["cron"], "*/2 * * * * *");
    drop(nodes);
}
