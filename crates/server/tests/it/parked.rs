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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_request_waits_with_no_process_across_a_restart_and_its_answer_runs_the_call_once()
{
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
    let sqlite = Arc::new(SqliteStore::open(&db).unwrap());
    let store: Arc<dyn Store> = sqlite.clone();
    let policy = switchboard_session::Policy::from_toml(
        "[permissions]\nask = [\"Bash\"]\npark_after_secs = 1\n",
    )
    .unwrap();
    let configured = policy.clone();
    let server = Server::start_with(store.clone(), &api, &sandbox, move |config| {
        config.default_policy = Some(configured)
    })
    .await;
    let (status, session) =
        server.post("/api/sessions", json!({"cwd": sandbox.workdir(), "prompt": "PARK it"})).await;
    assert_eq!(status, 201, "{session}");
    let id = session["id"].as_str().unwrap().to_owned();

    // Nobody answers: after a second the request is parked, and the CLI is gone.
    let parked = until(&server, &id, |s| s["state"] == "parked").await;
    let pending = &parked["pending_permissions"][0];
    assert_eq!(pending["tool_name"], "Bash", "{parked}");
    assert!(pending["parked_at_ms"].as_u64().is_some(), "{pending}");
    assert_eq!(parked["running"], false, "{parked}");
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
    server.task.abort();
    server.daemon.stop_all().await;
    drop(server);
    drop(store);
    sqlite.close();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&db).unwrap());
    let server = Server::start_with(store, &api, &sandbox, move |config| {
        config.default_policy = Some(policy)
    })
    .await;
    let (_, waiting) = server.get(&format!("/api/sessions/{id}")).await;
    assert_eq!(waiting["state"], "parked", "{waiting}");
    assert_eq!(waiting["pending_permissions"][0]["request_id"], request_id.as_str(), "{waiting}");

    // Not resumed without an answer: the answer is what resumes it.
    let (status, refused) = server.post(&format!("/api/sessions/{id}/resume"), json!({})).await;
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["error"]["code"], "parked", "{refused}");

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
    let (_, events) = server.get(&format!("/api/sessions/{id}/events")).await;
    let decided = events
        .as_array()
        .unwrap()
        .iter()
        .find(|event| {
            event["event"]["event"] == "permission_decided"
                && event["event"]["request_id"] == request_id.as_str()
        })
        .unwrap_or_else(|| panic!("the decision is in the log: {events}"));
    assert_eq!(decided["event"]["behavior"], "allow", "{decided}");
    assert_eq!(decided["event"]["by"]["kind"], "person", "{decided}");
    server.stop().await;
}
