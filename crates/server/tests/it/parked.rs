//! Approvals that wait with no process: a policy's `park_after_secs` parks an unanswered ask
//! (the real CLI defers the call and ends), the request outlives a daemon restart, and its
//! answer resumes the session, where the call runs once.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use switchboard_store::{SqliteStore, Store};
use switchboard_testkit::{CliSandbox, FakeApi, Reply, Scenario};

use crate::{Server, WAIT};

/// Polls the session until `predicate` holds (bounded).
async fn until(server: &Server, id: &str, predicate: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (_, session) = server.get(&format!("/api/sessions/{id}")).await;
        if predicate(&session) {
            return session;
        }
        assert!(tokio::time::Instant::now() < deadline, "never came to pass: {session}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A daemon on the SQLite database `db`, with `policy` as its default: the store too, to close
/// before the next daemon opens it.
async fn daemon_on(
    db: &std::path::Path,
    api: &FakeApi,
    sandbox: &CliSandbox,
    policy: &switchboard_session::Policy,
) -> (Server, Arc<SqliteStore>) {
    let sqlite = Arc::new(SqliteStore::open(db).unwrap());
    let store: Arc<dyn Store> = sqlite.clone();
    let policy = policy.clone();
    let server =
        Server::start_with(store, api, sandbox, move |config| config.default_policy = Some(policy))
            .await;
    (server, sqlite)
}

/// Stops `server` for good and closes its store (as a killed daemon's is, for the next).
async fn stopped(server: Server, sqlite: Arc<SqliteStore>) {
    server.task.abort();
    server.daemon.stop_all().await;
    drop(server);
    sqlite.close();
}

/// The decision on request `request_id` of session `id`, from its log.
async fn decision(server: &Server, id: &str, request_id: &str) -> Value {
    let (_, events) = server.get(&format!("/api/sessions/{id}/events")).await;
    let decided = events.as_array().unwrap().iter().find(|event| {
        event["event"]["event"] == "permission_decided"
            && event["event"]["request_id"] == request_id
    });
    decided.unwrap_or_else(|| panic!("the decision is in the log: {events}")).clone()
}

/// A daemon on SQLite with the policy `policy` (TOML), whose session's `PARK` prompt makes a Bash
/// call that an ask rule holds, once that request is parked.
struct Parked {
    api: FakeApi,
    sandbox: CliSandbox,
    _dir: tempfile::TempDir,
    db: std::path::PathBuf,
    policy: switchboard_session::Policy,
    server: Server,
    sqlite: Arc<SqliteStore>,
    id: String,
    /// The session, parked.
    view: Value,
}

async fn parked(policy: &str) -> Parked {
    let api = FakeApi::start(
        Scenario::new()
            .reply(
                Reply::tool_use(
                    "Bash",
                    json!({"command": "echo ran >> ran.txt", "description": "Note it"}),
                )
                .when_prompt("PARK"),
            )
            .reply(Reply::text("Noted.").when_tool_result())
            .fallback("Nothing to say."),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let policy = switchboard_session::Policy::from_toml(policy).unwrap();
    let (server, sqlite) = daemon_on(&db, &api, &sandbox, &policy).await;
    let (status, session) =
        server.post("/api/sessions", json!({"cwd": sandbox.workdir(), "prompt": "PARK it"})).await;
    assert_eq!(status, 201, "{session}");
    let id = session["id"].as_str().unwrap().to_owned();
    let view = until(&server, &id, |s| s["state"] == "parked").await;
    Parked { api, sandbox, _dir: dir, db, policy, server, sqlite, id, view }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_request_waits_with_no_process_across_a_restart_and_its_answer_runs_the_call_once()
{
    // Nobody answers: after a second the request is parked, and the CLI is gone.
    let Parked { api, sandbox, _dir, db, policy, server, sqlite, id, view: parked } =
        parked("[permissions]\nask = [\"Bash\"]\npark_after_secs = 1\n").await;
    let pending = &parked["pending_permissions"][0];
    assert_eq!(pending["tool_name"], "Bash", "{parked}");
    assert!(pending["parked_at_ms"].as_u64().is_some(), "{pending}");
    assert_eq!(parked["running"], false, "{parked}");
    // (The run's slot is given back as its task ends, a moment after the record says parked.)
    let deadline = tokio::time::Instant::now() + WAIT;
    while server.daemon.running_count() != 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(server.daemon.running_count(), 0, "no CLI runs while it waits");
    let (_, events) = server.get(&format!("/api/sessions/{id}/events")).await;
    let kinds: Vec<&str> = events
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|event| event["event"]["event"].as_str())
        .collect();
    assert!(kinds.contains(&"exited"), "the CLI ended: {kinds:?}");
    assert!(!sandbox.file("ran.txt").exists(), "nothing ran");
    let request_id = pending["request_id"].as_str().unwrap().to_owned();

    // The daemon restarts: the request still waits, read from the log.
    stopped(server, sqlite).await;
    let (server, _sqlite) = daemon_on(&db, &api, &sandbox, &policy).await;
    let (_, waiting) = server.get(&format!("/api/sessions/{id}")).await;
    assert_eq!(waiting["state"], "parked", "{waiting}");
    assert_eq!(waiting["pending_permissions"][0]["request_id"], request_id.as_str(), "{waiting}");

    // Not resumed without an answer: the answer is what resumes it.
    let (status, refused) = server.post(&format!("/api/sessions/{id}/resume"), json!({})).await;
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["error"]["code"], "parked", "{refused}");
    // Nor is its conversation resumed by a new session (a fork is one of its own).
    let claude = waiting["claude_session_id"].as_str().unwrap();
    let (status, refused) =
        server.post("/api/sessions", json!({"cwd": sandbox.workdir(), "resume": claude})).await;
    assert_eq!(status, 409, "{refused}");
    assert!(refused["error"]["message"].as_str().unwrap().contains(&id), "{refused}");

    // Approved: the session resumes, and the call runs, once.
    let answer = format!("/api/sessions/{id}/permissions/{request_id}");
    let (status, answered) = server.post(&answer, json!({"behavior": "allow"})).await;
    assert_eq!(status, 200, "{answered}");
    // The resumed CLI carries the deferred turn on: the call runs, and the answer follows.
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (_, events) = server.get(&format!("/api/sessions/{id}/events")).await;
        if events.to_string().contains("Noted.") {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the turn never went on: {events}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let done = until(&server, &id, |s| {
        s["state"] == "idle" && s["pending_permissions"].as_array().is_some_and(Vec::is_empty)
    })
    .await;
    assert_eq!(std::fs::read_to_string(sandbox.file("ran.txt")).unwrap(), "ran\n", "{done}");
    let (status, again) = server.post(&answer, json!({"behavior": "deny"})).await;
    assert_eq!(status, 409, "{again}");
    let decided = decision(&server, &id, &request_id).await;
    assert_eq!(decided["event"]["behavior"], "allow", "{decided}");
    assert_eq!(decided["event"]["by"]["kind"], "person", "{decided}");
    server.stop().await;
}

/// A policy's `park_expires_secs`: a parked request nobody answers is denied when its time
/// comes, by the daemon that opened after the one it was parked on, with no CLI started; the
/// session is then `exited`, and its link says the request timed out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_request_nobody_answers_is_denied_when_its_policys_longest_wait_is_over() {
    let Parked { api, sandbox, _dir, db, policy, server, sqlite, id, view: parked } =
        parked("[permissions]\nask = [\"Bash\"]\npark_after_secs = 1\npark_expires_secs = 4\n")
            .await;
    let pending = parked["pending_permissions"][0].clone();
    let parked_at = pending["parked_at_ms"].as_u64().unwrap();
    assert_eq!(pending["park_expires_at_ms"].as_u64(), Some(parked_at + 4000), "{pending}");
    let request_id = pending["request_id"].as_str().unwrap().to_owned();

    // Another daemon on the log: it watches the wait, and ends it when it is over.
    stopped(server, sqlite).await;
    let (server, _sqlite) = daemon_on(&db, &api, &sandbox, &policy).await;
    let pending = serde_json::from_value(pending).unwrap();
    let link = server.daemon.approval_link(&id, &pending, "test").expect("a link");
    let ended = until(&server, &id, |s| s["state"] == "exited").await;
    assert_eq!(ended["pending_permissions"], json!([]), "{ended}");
    assert_eq!(server.daemon.running_count(), 0, "no CLI ran to end it");
    let decided = decision(&server, &id, &request_id).await;
    assert_eq!(decided["event"]["behavior"], "deny", "{decided}");
    assert_eq!(decided["event"]["by"]["kind"], "timeout", "{decided}");
    assert!(now_ms() >= parked_at + 4000, "not before its time");
    // Too late to approve: nothing resumes, nothing runs.
    let answer = format!("/api/sessions/{id}/permissions/{request_id}");
    let (status, refused) = server.post(&answer, json!({"behavior": "allow"})).await;
    assert_eq!(status, 409, "{refused}");
    let (status, page) = crate::links::open(&server, &link).await;
    assert_eq!(status, 410, "{page}");
    assert!(page.contains("timed out"), "{page}");
    assert!(!sandbox.file("ran.txt").exists(), "nothing ran");
    server.stop().await;
}

fn now_ms() -> u64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
    u64::try_from(since.as_millis()).unwrap()
}
