//! The daemon's warm pool (`serve --warm`): CLIs started ahead of their sessions.

use std::sync::Arc;

use serde_json::{json, Value};
use switchboard_server::WarmSpec;
use switchboard_store::{SqliteStore, Store};
use switchboard_testkit::{CliSandbox, FakeApi, Reply, Scenario};

use crate::{is_result, Server, WAIT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_cli_takes_a_new_sessions_prompt_after_no_api_call_of_its_own() {
    let api = FakeApi::start(Scenario::new().reply(Reply::text("Warm hello."))).await.unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("db")).unwrap());
    let cwd = sandbox.workdir();
    let server = Server::start_with(store, &api, &sandbox, |config| {
        config.warm = vec![WarmSpec { cwd: cwd.clone(), model: None, count: 1 }];
    })
    .await;
    let mut warm = server.daemon.watch_warm();
    let ready = tokio::time::timeout(WAIT, warm.wait_for(|list| list[0].ready == 1))
        .await
        .expect("the pool warms up")
        .unwrap()[0]
        .clone();
    let (_, health) = server.get("/api/health").await;
    assert_eq!(health["warm"][0]["ready"], 1, "{health}");
    assert_eq!(health["warm"][0]["cwd"], cwd.display().to_string());
    assert!(api.requests().is_empty(), "a warm CLI calls no API: {:?}", api.requests());

    let (status, session) = server
        .post("/api/sessions", json!({"cwd": cwd, "prompt": "hello", "permission_mode": "plan"}))
        .await;
    assert_eq!(status, 201, "{session}");
    let id = session["id"].as_str().unwrap().to_owned();
    let mut ws = server.ws(&format!("/api/sessions/{id}/subscribe?after=0")).await;
    let frames = ws.until(is_result).await;
    let started = &frames[0]["event"];
    assert_eq!(started["event"], "started", "{started}");
    assert_eq!(started["warm"], true, "the session took the warm CLI");
    let result = &frames.last().unwrap()["event"]["line"];
    assert_eq!(result["result"], "Warm hello.", "{result}");
    let lines: Vec<&Value> = frames
        .iter()
        .filter(|frame| frame["event"]["event"] == "line")
        .map(|frame| &frame["event"]["line"])
        .collect();
    assert_eq!(lines[0]["request"]["subtype"], "initialize", "the log opens as a cold one");
    assert!(
        lines.iter().any(|line| line["request"]["subtype"] == "set_permission_mode"
            && line["request"]["mode"] == "plan"),
        "the session's mode was set on the warm CLI"
    );
    assert_eq!(api.requests().len(), 1, "one request, for the prompt: {:?}", api.requests());
    let (_, view) = server.get(&format!("/api/sessions/{id}")).await;
    assert_eq!(view["permission_mode"], "plan", "{view}");

    // Another model does not fit: that session starts cold, and the warm CLI stays for the
    // next session that fits.
    let replaced = tokio::time::timeout(WAIT, warm.wait_for(|list| list[0].ready == 1))
        .await
        .unwrap()
        .unwrap()[0]
        .clone();
    assert_ne!(replaced.pids, ready.pids, "a new CLI took the served one's place");
    let (status, other) = server
        .post("/api/sessions", json!({"cwd": cwd, "model": "claude-haiku-4-5-20251001"}))
        .await;
    assert_eq!(status, 201, "{other}");
    let other_id = other["id"].as_str().unwrap();
    let (_, events) = server.get(&format!("/api/sessions/{other_id}/events")).await;
    assert_eq!(events[0]["event"]["event"], "started", "{events}");
    assert_eq!(events[0]["event"]["warm"], false, "{events}");
    assert_eq!(server.daemon.warm_status()[0].ready, 1);

    let pid = replaced.pids[0];
    server.stop().await;
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "stopping the daemon ends its warm CLIs"
    );
}
