//! Budgets that pause, with the real CLI (its costs are its own, from the fake API's usage): a
//! session at its `max_budget_usd`, the daemon at its daily limit, and a token at its own each
//! pause the session, refuse its messages and tell the channels; a person who raises the limit
//! lets it go on.

use std::sync::Arc;

use serde_json::{json, Value};
use switchboard_server::notify::ChannelKind;
use switchboard_store::{MemoryStore, Store};
use switchboard_testkit::{CliSandbox, FakeApi, Reply, Scenario};

use crate::notify::{channel, fast, keys, Receiver};
use crate::{is_result, Server};

fn last_result(frames: &[Value]) -> Value {
    frames.iter().rev().find(|frame| is_result(frame)).unwrap()["event"]["line"]["result"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_pauses_at_a_budget_and_goes_on_when_a_person_raises_it() {
    let api = FakeApi::start(
        Scenario::new()
            .reply(Reply::text("One.").when_prompt("FIRST"))
            .reply(Reply::text("Two.").when_prompt("SECOND"))
            .reply(Reply::text("Three.").when_prompt("THIRD"))
            .reply(Reply::text("Four.").when_prompt("FOURTH")),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let hooks = Receiver::default();
    let hooks_url = hooks.start().await;
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let server = Server::start_with(store, &api, &sandbox, |config| {
        config.notify =
            fast(vec![channel("ops", ChannelKind::Webhook, format!("{hooks_url}/hook"))]);
    })
    .await;
    let body = json!({"cwd": sandbox.workdir(), "prompt": "FIRST", "max_budget_usd": 0.000001});
    let (status, session) = server.post("/api/sessions", body).await;
    assert_eq!(status, 201, "{session}");
    let id = session["id"].as_str().unwrap().to_owned();
    let path = format!("/api/sessions/{id}");
    let mut ws = server.ws(&format!("{path}/subscribe?after=0")).await;

    // The first turn costs more than the budget: the session pauses when it ends.
    let frames = ws.until(is_result).await;
    assert_eq!(last_result(&frames), "One.");
    let (_, paused) = server.get(&path).await;
    assert_eq!(paused["state"], "paused", "{paused}");
    assert!(paused["cost_usd"].as_f64().unwrap() > 0.000001, "the CLI reported a cost: {paused}");
    let why = paused["paused"].as_str().unwrap();
    assert!(why.starts_with("its budget of $0.000001 is spent"), "{why}");
    assert_eq!(paused["config"]["max_budget_usd"], 0.000001);
    // It takes no message, and says why and what to do.
    let (status, refused) =
        server.post(&format!("{path}/messages"), json!({"content": "SECOND"})).await;
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["error"]["code"], "budget_reached");
    assert!(refused["error"]["message"].as_str().unwrap().contains("max_budget_usd"), "{refused}");
    // The channels hear of it.
    let taken = hooks.until(|bodies| keys(bodies, "budget_reached").len() == 1).await;
    let notice = &taken.iter().find(|(_, _, body)| body["event"] == "budget_reached").unwrap().2;
    assert_eq!(notice["session"]["id"], id.as_str());
    assert!(notice["title"].as_str().unwrap().starts_with("Paused (budget)"), "{notice}");

    // A person raises it: the session goes on.
    let (status, raised) = server.patch(&path, json!({"max_budget_usd": 100})).await;
    assert_eq!(status, 200, "{raised}");
    assert_eq!(raised["state"], "idle", "{raised}");
    assert!(raised.get("paused").is_none(), "{raised}");
    let (status, _) = server.post(&format!("{path}/messages"), json!({"content": "SECOND"})).await;
    assert_eq!(status, 202);
    let frames = ws.until(is_result).await;
    assert_eq!(last_result(&frames), "Two.");
    assert_eq!(server.get(&path).await.1["state"], "idle");

    // The daemon's daily limit, set below what was spent today: the running session pauses
    // at once; removing the limit lets it go on.
    let (status, budget) = server.patch("/api/budget", json!({"daily_usd": 0.000001})).await;
    assert_eq!(status, 200, "{budget}");
    assert!(budget["spent_usd"].as_f64().unwrap() > 0.0, "{budget}");
    let (_, paused) = server.get(&path).await;
    assert_eq!(paused["state"], "paused");
    assert!(paused["paused"].as_str().unwrap().contains("the daemon's daily budget"), "{paused}");
    let (status, refused) =
        server.post("/api/sessions", json!({"cwd": sandbox.workdir(), "prompt": "THIRD"})).await;
    assert_eq!((status, refused["error"]["code"].as_str()), (409, Some("budget_reached")));
    let (status, _) = server.patch("/api/budget", json!({"daily_usd": null})).await;
    assert_eq!(status, 200);
    assert_eq!(server.get(&path).await.1["state"], "idle");

    // A token's daily limit: its turns count against it; past it, the session pauses and the
    // token starts nothing more today, while others may.
    let (_, made) = server.post("/api/tokens", json!({"name": "ci", "scope": "operate"})).await;
    let ci = made["token"].as_str().unwrap().to_owned();
    let (status, _) =
        server.patch("/api/budget", json!({"token_daily_usd": {"ci": 0.000001}})).await;
    assert_eq!(status, 200);
    let (status, _) = server
        .request_as(
            &ci,
            reqwest::Method::POST,
            &format!("{path}/messages"),
            Some(json!({"content": "THIRD"})),
        )
        .await;
    assert_eq!(status, 202);
    let frames = ws.until(is_result).await;
    assert_eq!(last_result(&frames), "Three.");
    let (_, paused) = server.get(&path).await;
    assert_eq!(paused["state"], "paused");
    assert!(paused["paused"].as_str().unwrap().contains("token ci's daily budget"), "{paused}");
    let (_, budget) = server.get("/api/budget").await;
    assert!(budget["token_spent_usd"]["ci"].as_f64().unwrap() > 0.0, "{budget}");
    let (status, refused) = server
        .request_as(
            &ci,
            reqwest::Method::POST,
            "/api/sessions",
            Some(json!({"cwd": sandbox.workdir(), "prompt": "FOURTH"})),
        )
        .await;
    assert_eq!((status, refused["error"]["code"].as_str()), (409, Some("budget_reached")));
    // Another token may start a session; raising ci's limit lets the paused one go on.
    let (status, other) =
        server.post("/api/sessions", json!({"cwd": sandbox.workdir(), "prompt": "FOURTH"})).await;
    assert_eq!(status, 201, "{other}");
    let (status, _) = server.patch("/api/budget", json!({"token_daily_usd": {"ci": 50}})).await;
    assert_eq!(status, 200);
    assert_eq!(server.get(&path).await.1["state"], "idle");
    // A bad limit is refused, and says what a limit is.
    let (status, bad) = server.patch("/api/budget", json!({"daily_usd": -1})).await;
    assert_eq!(status, 400, "{bad}");
    let (status, bad) = server.patch(&path, json!({"max_budget_usd": "lots"})).await;
    assert_eq!(status, 400, "{bad}");
    server.stop().await;
}

/// A session's first turn counts once against its budget. The fake API answers the same
/// prompt with the same usage, so a first session tells what a turn costs; a second, with a
/// budget of one and a half turns, must not pause after one. (It paused: with nothing spent
/// yet on record, what it had spent read as its cost so far, which already held the turn,
/// and the turn was added again.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_turn_counts_once_against_a_budget() {
    let api =
        FakeApi::start(Scenario::new().reply(Reply::text("Counted.").when_prompt("TURN").times(2)))
            .await
            .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let server = Server::start(store, &api, &sandbox).await;
    let turn = |body: Value| {
        let server = &server;
        async move {
            let (status, session) = server.post("/api/sessions", body).await;
            assert_eq!(status, 201, "{session}");
            let id = session["id"].as_str().unwrap().to_owned();
            let mut ws = server.ws(&format!("/api/sessions/{id}/subscribe?after=0")).await;
            ws.until(is_result).await;
            server.get(&format!("/api/sessions/{id}")).await.1
        }
    };
    let first = turn(json!({"cwd": sandbox.workdir(), "prompt": "TURN"})).await;
    let cost = first["cost_usd"].as_f64().unwrap();
    assert!(cost > 0.0, "the CLI reported a cost: {first}");
    assert_eq!(first["spent_usd"].as_f64(), Some(cost), "{first}");

    let budget = cost * 1.5;
    let second =
        turn(json!({"cwd": sandbox.workdir(), "prompt": "TURN", "max_budget_usd": budget})).await;
    assert_eq!(second["cost_usd"].as_f64(), Some(cost), "the same turn costs the same: {second}");
    assert_eq!(second["spent_usd"].as_f64(), Some(cost), "counted once: {second}");
    assert_eq!(second["state"], "idle", "one turn is within one and a half: {second}");
    server.stop().await;
}
