//! Every pinned CLI version (`scripts/cli-versions`) through the daemon: a prompt, a tool call
//! allowed and one denied over the API, an API error retried, an interrupt, and a resume, with
//! every line read cleanly (no bad line, no drift).

use std::sync::Arc;

use serde_json::{json, Value};
use switchboard_store::{MemoryStore, Store};
use switchboard_testkit::{pinned_versions, real_cli_of, CliSandbox, FakeApi, Reply, Scenario};

use crate::{is_result, touch_and_ls, Server, Ws};

macro_rules! pinned {
    ($($name:ident => $version:literal),* $(,)?) => {
        /// The versions these tests cover, oldest first.
        const COVERED: &[&str] = &[$($version),*];
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                smoke($version).await;
            }
        )*
    };
}

pinned! {
    smoke_1_0_112 => "1.0.112",
    smoke_2_1_37 => "2.1.37",
    smoke_2_1_100 => "2.1.100",
    smoke_2_1_120 => "2.1.120",
    smoke_2_1_250 => "2.1.250",
    smoke_2_1_330 => "2.1.330",
    smoke_2_1_332 => "2.1.332",
}

#[test]
fn every_pinned_version_has_a_smoke_test() {
    assert_eq!(COVERED, pinned_versions(), "scripts/cli-versions and the tests above differ");
}

fn is_text_delta(frame: &Value) -> bool {
    let line = &frame["event"]["line"];
    line["type"] == "stream_event" && line["event"]["delta"]["type"] == "text_delta"
}

async fn answer(server: &Server, id: &str, ws: &mut Ws, behavior: &str) {
    let frames = ws.until(|frame| frame["event"]["event"] == "permission_requested").await;
    let request_id = frames.last().unwrap()["event"]["request_id"].as_str().unwrap().to_owned();
    let (status, body) = server
        .post(
            &format!("/api/sessions/{id}/permissions/{request_id}"),
            json!({"behavior": behavior, "message": "not this one", "by": "matrix"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
}

async fn turn(ws: &mut Ws) -> Value {
    let frames = ws.until(is_result).await;
    frames.last().unwrap()["event"]["line"].clone()
}

async fn smoke(version: &str) {
    let api = FakeApi::start(
        Scenario::new()
            .reply(Reply::tool_use("Bash", touch_and_ls("allowed.txt")).when_prompt("ALLOW"))
            .reply(Reply::text("Allowed done.").when_tool_result_contains("allowed.txt"))
            .reply(Reply::tool_use("Bash", touch_and_ls("denied.txt")).when_prompt("DENY"))
            .reply(Reply::text("Denied done.").when_tool_result())
            .reply(Reply::http_error(529, "overloaded_error", "Overloaded", 1).when_prompt("RETRY"))
            .reply(Reply::text("Recovered.").when_prompt("RETRY"))
            .reply(Reply::text("one two three four five six").when_prompt("LONG").hold_after(2))
            .reply(Reply::text("Recalled.").when_prompt("RECALL")),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let claude = real_cli_of(version);
    let server =
        Server::start_with(store, &api, &sandbox, |config| config.claude = Some(claude)).await;

    // A prompt, and a tool call allowed over the API.
    let (status, session) =
        server.post("/api/sessions", json!({"cwd": sandbox.workdir(), "prompt": "ALLOW it"})).await;
    assert_eq!(status, 201, "{version}: {session}");
    let id = session["id"].as_str().unwrap().to_owned();
    let mut ws = server.ws(&format!("/api/sessions/{id}/subscribe?after=0")).await;
    answer(&server, &id, &mut ws, "allow").await;
    assert_eq!(turn(&mut ws).await["result"], "Allowed done.", "{version}");
    assert!(sandbox.file("allowed.txt").exists(), "{version}: the allowed call ran");

    // A second turn: a tool call denied.
    server.post(&format!("/api/sessions/{id}/messages"), json!({"content": "DENY it"})).await;
    answer(&server, &id, &mut ws, "deny").await;
    assert_eq!(turn(&mut ws).await["result"], "Denied done.", "{version}");
    assert!(!sandbox.file("denied.txt").exists(), "{version}: the denied call did not run");

    // An API error the CLI retries.
    server.post(&format!("/api/sessions/{id}/messages"), json!({"content": "RETRY please"})).await;
    assert_eq!(turn(&mut ws).await["result"], "Recovered.", "{version}");

    // An interrupt while the answer streams.
    server.post(&format!("/api/sessions/{id}/messages"), json!({"content": "LONG story"})).await;
    ws.until(is_text_delta).await;
    let (status, body) = server.post(&format!("/api/sessions/{id}/interrupt"), json!({})).await;
    assert_eq!(status, 200, "{version}: {body}");
    let result = turn(&mut ws).await;
    assert_eq!(result["subtype"], "error_during_execution", "{version}: {result}");
    api.release();

    // Stopped, resumed, and the conversation goes on.
    let response = server
        .client()
        .delete(format!("{}/api/sessions/{id}", server.base))
        .bearer_auth(crate::TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200, "{version}");
    let (status, body) = server.post(&format!("/api/sessions/{id}/resume"), json!({})).await;
    assert_eq!(status, 200, "{version}: {body}");
    let (_, events) = server.get(&format!("/api/sessions/{id}/events?after=0&limit=5000")).await;
    let last = events.as_array().unwrap().last().unwrap()["seq"].as_u64().unwrap();
    let mut ws = server.ws(&format!("/api/sessions/{id}/subscribe?after={last}")).await;
    server.post(&format!("/api/sessions/{id}/messages"), json!({"content": "RECALL it"})).await;
    assert_eq!(turn(&mut ws).await["result"], "Recalled.", "{version}");
    let request = api.wait_for(|request| request.last_user_text().contains("RECALL")).await;
    assert!(
        request.body.to_string().contains("ALLOW it"),
        "{version}: the resumed CLI sent the earlier conversation"
    );

    // Every line was read cleanly.
    let (_, events) = server.get(&format!("/api/sessions/{id}/events?after=0&limit=5000")).await;
    let events = events.as_array().unwrap();
    assert!(events.len() > 20, "{version}: {events:?}");
    let unclean: Vec<&Value> = events
        .iter()
        .filter(|event| {
            event["event"]["event"] == "bad_line" || event["event"].get("drift").is_some()
        })
        .collect();
    assert!(unclean.is_empty(), "{version}: {unclean:#?}");
    server.stop().await;
}
