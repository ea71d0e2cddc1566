//! The fleet's bus (NATS) between daemons on one PostgreSQL, each a real server of the test's
//! own (skipped, with a message, where they are not installed). The store's safety net (a
//! quiet session's tail checking the store) is off here: what arrives came over the bus, or
//! was filled from the store because the bus said to.

use std::sync::Arc;

use serde_json::json;
use switchboard_server::bus::{Bus, BusOptions, BusStore};
use switchboard_server::grpc::pb;
use switchboard_store::{Claim, EventRecord, PostgresStore, Store};
use switchboard_testkit::servers::{Nats, Postgres};
use switchboard_testkit::{real_cli, CliSandbox, CliVersion, FakeApi, Reply, Scenario};

use crate::{seqs, Server};

pub(crate) const NO_SAFETY_NET: BusOptions = BusOptions {
    quiet_check: None,
    heartbeat: std::time::Duration::from_millis(100),
    lost_after: std::time::Duration::from_millis(1500),
};

fn event(seq: u64, payload: String) -> EventRecord {
    EventRecord {
        session_id: "s1".into(),
        seq,
        ts_ms: 1,
        dir: "switchboard".into(),
        kind: "note".into(),
        payload,
    }
}

/// A daemon on the test's PostgreSQL and NATS, as node `name` (`configure` changes the rest).
pub(crate) async fn node(
    database: &Postgres,
    nats: &Nats,
    name: &str,
    options: BusOptions,
    api: &FakeApi,
    sandbox: &CliSandbox,
    configure: impl FnOnce(&mut switchboard_server::DaemonConfig),
) -> Server {
    let store: Arc<dyn Store> = Arc::new(PostgresStore::connect(&database.url()).await.unwrap());
    let bus = Bus::connect_with(nats.url(), name, options).await.unwrap();
    let store: Arc<dyn Store> = Arc::new(BusStore::new(store, bus.clone()));
    Server::start_with(store, api, sandbox, |config| {
        config.node = Some(name.to_owned());
        config.bus = Some(bus);
        configure(config);
    })
    .await
}

async fn next(tail: &mut tokio::sync::broadcast::Receiver<Arc<EventRecord>>) -> Arc<EventRecord> {
    tokio::time::timeout(crate::WAIT, tail.recv()).await.expect("an event in time").unwrap()
}

/// A follower on node b gets what node a publishes, in order; events a stored without a word
/// on the bus, and one too large for the bus, are read from the store when the bus shows the
/// gap, so the follower still sees every seq once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_gets_every_event_once_and_the_store_fills_what_the_bus_skipped() {
    let Some(database) = Postgres::start() else { return };
    let Some(nats) = Nats::start() else { return };
    let store: Arc<dyn Store> = Arc::new(PostgresStore::connect(&database.url()).await.unwrap());
    let a = Bus::connect_with(nats.url(), "a", NO_SAFETY_NET).await.unwrap();
    let b = Bus::connect_with(nats.url(), "b", NO_SAFETY_NET).await.unwrap();
    let publishing = BusStore::new(store.clone(), a.clone());
    publishing.append(&[event(1, "{}".into())]).await.unwrap();

    let (mut tail, _follow) = b.tail(store.clone(), "s1").await.unwrap();
    publishing.append(&[event(2, "{}".into()), event(3, "{}".into())]).await.unwrap();
    assert_eq!(next(&mut tail).await.seq, 2, "from where the follower attached");
    assert_eq!(next(&mut tail).await.seq, 3);
    // Stored without a word on the bus: nothing comes until the bus shows the gap.
    store.append(&[event(4, "{}".into()), event(5, "{}".into())]).await.unwrap();
    publishing.append(&[event(6, "{}".into())]).await.unwrap();
    for seq in 4..=6 {
        assert_eq!(next(&mut tail).await.seq, seq, "filled from the store, in order");
    }
    // Larger than the bus takes (NATS's default is 1 MiB): the bus says where to read it.
    let large = format!("\"{}\"", "x".repeat(2 * 1024 * 1024));
    publishing.append(&[event(7, large.clone())]).await.unwrap();
    let seventh = next(&mut tail).await;
    assert_eq!((seventh.seq, seventh.payload.len()), (7, large.len()));
    assert!(tail.try_recv().is_err(), "nothing twice");
}

/// Two daemons on one database and bus: a session runs on node a; node b follows it from
/// its first event over the bus and answers its permission request (forwarded to a); the
/// events b sees are a's, each once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_follows_and_answers_a_session_another_node_runs() {
    let Some(database) = Postgres::start() else { return };
    let Some(nats) = Nats::start() else { return };
    let api = FakeApi::start(
        Scenario::new()
            .reply(
                Reply::tool_use("Bash", json!({"command": "touch b.txt", "description": "x"}))
                    .when_prompt("RUN"),
            )
            .reply(Reply::text("ran it").when_tool_result()),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let mut nodes = Vec::new();
    for name in ["a", "b"] {
        nodes.push(node(&database, &nats, name, NO_SAFETY_NET, &api, &sandbox, |_| {}).await);
    }
    let (a, b) = (&nodes[0], &nodes[1]);
    let (status, session) =
        a.post("/api/sessions", json!({"cwd": sandbox.workdir(), "prompt": "RUN it"})).await;
    assert_eq!(status, 201, "{session}");
    let id = session["id"].as_str().unwrap().to_owned();
    let mut follower = b.ws(&format!("/api/sessions/{id}/subscribe?after=0")).await;
    let asked = follower.until(|frame| frame["event"]["event"] == "permission_requested").await;
    let request_id = asked.last().unwrap()["event"]["request_id"].as_str().unwrap().to_owned();

    // What only a's machine has (the session's files) is refused on b, naming a.
    let (status, refused) = b.get(&format!("/api/sessions/{id}/files")).await;
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["error"]["code"], "other_node");
    assert!(refused["error"]["message"].as_str().unwrap().contains("runs on node a"), "{refused}");
    // Answers through b are carried out on a: an unknown request is refused as a refuses it.
    let (status, refused) =
        b.post(&format!("/api/sessions/{id}/permissions/nope"), json!({"behavior": "allow"})).await;
    assert_eq!(status, 404, "{refused}");
    let (status, answered) = b
        .post(&format!("/api/sessions/{id}/permissions/{request_id}"), json!({"behavior": "allow"}))
        .await;
    assert_eq!(status, 200, "{answered}");
    let rest = follower
        .until(|frame| {
            frame["event"]["event"] == "line" && frame["event"]["line"]["type"] == "result"
        })
        .await;
    assert!(sandbox.file("b.txt").exists(), "the call b approved ran on a");
    let all: Vec<serde_json::Value> = asked.into_iter().chain(rest).collect();
    assert_eq!(seqs(&all), (1..=all.len() as u64).collect::<Vec<_>>(), "gap-free from 1");
    let (_, on_a) = a.get(&format!("/api/sessions/{id}/events")).await;
    for (frame, stored) in all.iter().zip(on_a.as_array().unwrap()) {
        assert_eq!((&frame["seq"], &frame["event"]), (&stored["seq"], &stored["event"]));
    }
    for node in nodes {
        node.stop().await;
    }
}

/// Node b's web UI approves a session that runs on node a (`e2e/fleet.test.mjs`, Playwright
/// driving Debian's Chromium): the list shows it with its node and waiting, its page shows the
/// request, Allow is carried out on a, and the rest of the turn arrives live over the bus.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nodes_web_ui_approves_a_session_another_node_runs() {
    let Some(database) = Postgres::start() else { return };
    let Some(nats) = Nats::start() else { return };
    let api = FakeApi::start(
        Scenario::new()
            .reply(
                Reply::tool_use(
                    "Bash",
                    json!({"command": "touch fleet.txt && echo FLEET_MARK", "description": "x"}),
                )
                .when_prompt("FLEET"),
            )
            .reply(Reply::text("Done on node a.").when_tool_result_contains("FLEET_MARK"))
            .reply(Reply::text("Placed on node a.").when_prompt("PLACED")),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let mut nodes = Vec::new();
    for name in ["a", "b"] {
        nodes.push(
            node(&database, &nats, name, BusOptions::default(), &api, &sandbox, |_| {}).await,
        );
    }
    let (a, b) = (&nodes[0], &nodes[1]);
    let (status, session) =
        a.post("/api/sessions", json!({"cwd": sandbox.workdir(), "prompt": "FLEET run it"})).await;
    assert_eq!(status, 201, "{session}");
    let id = session["id"].as_str().unwrap().to_owned();
    let mut on_b = b.ws(&format!("/api/sessions/{id}/subscribe?after=0")).await;
    on_b.until(|frame| frame["event"]["event"] == "permission_requested").await;
    // b's form lists both nodes with their CLI's version: wait until b has heard them.
    until_it("b hears both nodes' CLI versions", || {
        let nodes = b.daemon.bus().unwrap().nodes();
        nodes.len() == 2 && nodes.iter().all(|node| node.info.cli_version.is_some())
    })
    .await;

    let (ok, log) = crate::ui::run_script(
        "e2e/fleet.test.mjs",
        &b.base,
        &[("SESSION", id.clone()), ("CWD", sandbox.workdir().display().to_string())],
    )
    .await;
    assert!(ok, "the browser test failed:\n{log}");
    assert!(sandbox.file("fleet.txt").exists(), "the call approved on b ran on a");
    let (_, events) = a.get(&format!("/api/sessions/{id}/events")).await;
    let decided = events
        .as_array()
        .unwrap()
        .iter()
        .find(|event| event["event"]["event"] == "permission_decided")
        .cloned()
        .unwrap();
    assert!(decided["event"]["by"]["who"].as_str().unwrap().ends_with("via b)"), "{decided}");
    // The form's session runs on a, started by b's token through b.
    let (_, listed) = b.get("/api/sessions").await;
    let placed = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|session| session["title"].as_str().is_some_and(|t| t.starts_with("PLACED")))
        .cloned()
        .expect("the form's session is listed");
    assert_eq!(placed["node"], "a", "{placed}");
    for node in nodes {
        node.stop().await;
    }
}

/// Placement: a session that names no node goes to the least loaded node whose roots hold its
/// directory (here first on a tie); one that names a node runs there, over the bus; an
/// unknown node is refused by name. One that asks for a CLI version goes to a node that runs
/// it (a runs 2.1.330, b 2.1.37), and a version no node runs is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_sessions_go_to_the_node_named_or_the_least_loaded_that_can() {
    let Some(database) = Postgres::start() else { return };
    let Some(nats) = Nats::start() else { return };
    let api = FakeApi::start(Scenario::new()).await.unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let mut nodes = Vec::new();
    for (name, capacity) in [("a", 1), ("b", 4)] {
        let root = sandbox.workdir().to_path_buf();
        let server = node(&database, &nats, name, NO_SAFETY_NET, &api, &sandbox, move |config| {
            config.placement.roots = vec![root];
            config.placement.capacity = Some(capacity);
            if name == "b" {
                config.claude = Some(real_cli(CliVersion::V2_1_37));
            }
        })
        .await;
        nodes.push(server);
    }
    let (a, b) = (&nodes[0], &nodes[1]);
    // Each has heard the other, and its CLI's version (heartbeats every 100 ms here).
    let heard = |node: &Server| {
        let nodes = node.daemon.bus().map(|bus| bus.nodes()).unwrap_or_default();
        nodes.len() == 2 && nodes.iter().all(|status| status.info.cli_version.is_some())
    };
    for node in [a, b] {
        until_it("the nodes hear each other", || heard(node)).await;
    }
    let create = |body: serde_json::Value| async move { a.post("/api/sessions", body).await };
    // Both idle: a tie, so here.
    let (status, first) = create(json!({"cwd": sandbox.workdir()})).await;
    assert_eq!(status, 201, "{first}");
    assert_eq!(first["node"], "a");
    // a is full (capacity 1): the next goes to b, which runs it.
    let (status, second) = create(json!({"cwd": sandbox.workdir()})).await;
    assert_eq!(status, 201, "{second}");
    assert_eq!(second["node"], "b", "{second}");
    assert_eq!(b.daemon.running_count(), 1, "b runs it");
    assert_eq!(a.daemon.running_count(), 1);
    // Named: there, even past its capacity (capacity steers only placement by load).
    let (status, third) =
        b.post("/api/sessions", json!({"cwd": sandbox.workdir(), "node": "a"})).await;
    assert_eq!(status, 201, "{third}");
    assert_eq!(third["node"], "a");
    assert_eq!(a.daemon.running_count(), 2);
    let (status, refused) =
        b.post("/api/sessions", json!({"cwd": sandbox.workdir(), "node": "zeta"})).await;
    assert_eq!(status, 400, "{refused}");
    assert!(refused["error"]["message"].as_str().unwrap().contains("no node zeta"), "{refused}");
    // Outside every node's roots, and not a directory here: nobody can, so it is refused here.
    let (status, refused) = create(json!({"cwd": "/nowhere/at/all"})).await;
    assert_eq!(status, 400, "{refused}");

    // gRPC lists the nodes as GET /api/nodes does: each with its CLI, roots and room.
    let mut grpc = crate::grpc::client(a).await;
    let listed = grpc.list_nodes(pb::ListNodesRequest {}).await.unwrap().into_inner().nodes;
    let said: Vec<(&str, Option<&str>, u64, bool)> = listed
        .iter()
        .map(|node| (node.node.as_str(), node.cli_version.as_deref(), node.capacity, node.this))
        .collect();
    assert_eq!(said, [("a", Some("2.1.330"), 1, true), ("b", Some("2.1.37"), 4, false)]);
    // A CLI version: where it runs, whatever the load (over gRPC too); a node named that runs
    // another is refused (whichever node is asked), and so are a version nobody runs, a
    // directory no node that runs it has, and what is no version.
    let (status, fourth) = create(json!({"cwd": sandbox.workdir(), "cli_version": "2.1.37"})).await;
    assert_eq!((status, &fourth["node"]), (201, &json!("b")), "{fourth}");
    let fifth = grpc
        .create_session(pb::CreateSessionRequest {
            cwd: sandbox.workdir().display().to_string(),
            cli_version: Some("2.1.37".into()),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(fifth.node.as_deref(), Some("b"));
    for asked in [a, b] {
        let body = json!({"cwd": sandbox.workdir(), "cli_version": "2.1.37", "node": "a"});
        let (status, refused) = asked.post("/api/sessions", body).await;
        assert_eq!(status, 400, "{refused}");
        let message = refused["error"]["message"].as_str().unwrap();
        assert!(message.contains("runs Claude Code 2.1.330, not 2.1.37"), "{refused}");
    }
    let (status, refused) =
        create(json!({"cwd": "/nowhere/at/all", "cli_version": "2.1.37"})).await;
    assert_eq!(status, 400, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.contains("has /nowhere/at/all within its roots"), "{refused}");
    let (status, refused) = create(json!({"cwd": sandbox.workdir(), "cli_version": "9.9.9"})).await;
    assert_eq!(status, 400, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.contains("no node runs Claude Code 9.9.9"), "{refused}");
    let (status, refused) = create(json!({"cwd": sandbox.workdir(), "cli_version": "2.1;x"})).await;
    assert_eq!(status, 400, "{refused}");
    // Placement reads load from heartbeats: once b has heard that a is full, a session for
    // a's version still goes to a (capacity steers, it does not refuse), not to b.
    let a_full = || {
        let nodes = b.daemon.bus().unwrap().nodes();
        nodes.iter().any(|node| node.info.node == "a" && node.info.running >= 1)
    };
    until_it("b hears that a is full", a_full).await;
    let (status, sixth) =
        b.post("/api/sessions", json!({"cwd": sandbox.workdir(), "cli_version": "2.1.330"})).await;
    assert_eq!((status, &sixth["node"]), (201, &json!("a")), "{sixth}");
    assert_eq!(a.daemon.running_count(), 3);
    assert_eq!(b.daemon.running_count(), 3, "nothing else started");
    for node in nodes {
        node.stop().await;
    }
}

/// The rest of what a person does to a session reaches the node that runs it, whichever node
/// takes it: through node b, a model switch (the next turn asks the API for that model), a
/// permission mode (the CLI's own answer is the `mode_changed` event), an interrupt of a
/// streaming turn, a steered prompt (`priority: now`), a stop that drops a queued prompt
/// (`cancel_queued`), a question to the CLI (its context), and a stop, each carried out by the
/// CLI on node a.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_mode_interrupt_and_stop_reach_the_node_that_runs_the_session() {
    let Some(database) = Postgres::start() else { return };
    let Some(nats) = Nats::start() else { return };
    let api = FakeApi::start(
        Scenario::new()
            .reply(Reply::text("first").when_prompt("ONE"))
            .reply(Reply::text("never finishes, interrupted").when_prompt("LONG").hold_after(1))
            .reply(Reply::text("held up").when_prompt("SLOW").hold_after(1).times(2))
            .reply(Reply::text("Steered.").when_prompt("STEER"))
            .reply(Reply::text("Never asked for.").when_prompt("LATER")),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let mut nodes = Vec::new();
    for name in ["a", "b"] {
        nodes.push(node(&database, &nats, name, NO_SAFETY_NET, &api, &sandbox, |_| {}).await);
    }
    let (a, b) = (&nodes[0], &nodes[1]);
    let (status, session) =
        a.post("/api/sessions", json!({"cwd": sandbox.workdir(), "prompt": "ONE"})).await;
    assert_eq!(status, 201, "{session}");
    let id = session["id"].as_str().unwrap().to_owned();
    let mut follower = b.ws(&format!("/api/sessions/{id}/subscribe?after=0")).await;
    follower.until(crate::is_result).await;

    let model = "claude-haiku-4-5-20251001";
    let (status, body) =
        b.post(&format!("/api/sessions/{id}/model"), json!({"model": model})).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = b
        .post(&format!("/api/sessions/{id}/permission-mode"), json!({"mode": "acceptEdits"}))
        .await;
    assert_eq!(status, 200, "{body}");
    follower
        .until(|frame| {
            frame["event"]["event"] == "mode_changed" && frame["event"]["mode"] == "acceptEdits"
        })
        .await;

    let (status, body) =
        b.post(&format!("/api/sessions/{id}/messages"), json!({"content": "LONG"})).await;
    assert_eq!(status, 202, "{body}");
    follower.until(|frame| frame["event"]["line"]["event"]["delta"]["type"] == "text_delta").await;
    let (status, body) = b.post(&format!("/api/sessions/{id}/interrupt"), json!({})).await;
    assert_eq!(status, 200, "{body}");
    let interrupted = follower.until(crate::is_result).await;
    assert_eq!(interrupted.last().unwrap()["event"]["line"]["subtype"], "error_during_execution");
    api.release();
    let long = api.wait_for(|request| request.last_user_text().contains("LONG")).await;
    assert_eq!(long.model(), model, "the switch made through b reached a's CLI");

    // Steered through b: the held turn stops, and the steered prompt answers.
    let messages = format!("/api/sessions/{id}/messages");
    let (status, body) = b.post(&messages, json!({"content": "SLOW one"})).await;
    assert_eq!(status, 202, "{body}");
    follower.until(|frame| frame["event"]["line"]["event"]["delta"]["type"] == "text_delta").await;
    let (status, body) =
        b.post(&messages, json!({"content": "STEER this way", "priority": "now"})).await;
    assert_eq!(status, 202, "{body}");
    follower
        .until(|frame| crate::is_result(frame) && frame["event"]["line"]["result"] == "Steered.")
        .await;
    // A prompt queued `later`, dropped with the interrupt through b: it never runs.
    let (status, body) = b.post(&messages, json!({"content": "SLOW two"})).await;
    assert_eq!(status, 202, "{body}");
    api.wait_for(|request| request.last_user_text().contains("SLOW two")).await;
    let (status, later) =
        b.post(&messages, json!({"content": "LATER, please", "priority": "later"})).await;
    assert_eq!(status, 202, "{later}");
    let uuid = later["uuid"].as_str().unwrap().to_owned();
    let (status, body) =
        b.post(&format!("/api/sessions/{id}/interrupt"), json!({"cancel_queued": true})).await;
    assert_eq!(status, 200, "{body}");
    follower
        .until(|frame| {
            let cancelled = &frame["event"]["line"]["response"]["response"]["cancelled"];
            cancelled.as_array().is_some_and(|all| all.contains(&json!(uuid)))
        })
        .await;
    follower
        .until(|frame| frame["event"]["event"] == "state" && frame["event"]["to"] == "idle")
        .await;
    assert!(!api.conversation_requests().iter().any(|r| r.last_user_text().contains("LATER")));
    // A question for a's CLI, answered through b.
    let (status, context) = b.get(&format!("/api/sessions/{id}/cli/context")).await;
    assert_eq!(status, 200, "{context}");
    assert!(context["categories"].is_array(), "{context}");

    let (status, body) = b
        .request_as(crate::TOKEN, reqwest::Method::DELETE, &format!("/api/sessions/{id}"), None)
        .await;
    assert_eq!(status, 200, "{body}");
    follower.until(|frame| frame["event"]["event"] == "exited").await;
    assert_eq!(a.daemon.running_count(), 0, "a's CLI stopped");
    let (_, seen) = b.get(&format!("/api/sessions/{id}")).await;
    assert_eq!((&seen["running"], &seen["node"]), (&json!(false), &json!("a")), "{seen}");
    let (_, on_a) = a.get(&format!("/api/sessions/{id}/events")).await;
    let on_a = on_a.as_array().unwrap();
    let model_changed =
        on_a.iter().any(|e| e["event"]["event"] == "model_changed" && e["event"]["model"] == model);
    assert!(model_changed, "the switch is in the log");
    for node in nodes {
        node.stop().await;
    }
}

/// Waits (a while, checking) until `holds` does.
async fn until_it(what: &str, holds: impl Fn() -> bool) {
    let waited = tokio::time::timeout(crate::WAIT, async {
        while !holds() {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    });
    waited.await.unwrap_or_else(|_| panic!("{what}, in time"));
}

/// A node fenced off from a session carries out nothing for it: cut off from the bus (so the
/// other nodes may soon call it lost and take its sessions over), it refuses a person's answer
/// with 503 until it hears the bus again; once another node has taken the session over, it
/// refuses with 409 and its run stops. So an approval is never applied on two nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_cut_off_from_the_bus_or_taken_over_carries_out_nothing() {
    let Some(database) = Postgres::start() else { return };
    let Some(nats) = Nats::start() else { return };
    let api = FakeApi::start(
        Scenario::new().reply(
            Reply::tool_use("Bash", json!({"command": "touch fenced.txt", "description": "x"}))
                .when_prompt("RUN"),
        ),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let postgres = Arc::new(PostgresStore::connect(&database.url()).await.unwrap());
    let bus = Bus::connect_with(nats.url(), "a", NO_SAFETY_NET).await.unwrap();
    let store: Arc<dyn Store> = Arc::new(BusStore::new(postgres.clone(), bus.clone()));
    let a = Server::start_with(store, &api, &sandbox, |config| {
        config.node = Some("a".into());
        config.bus = Some(bus.clone());
    })
    .await;
    let (status, session) =
        a.post("/api/sessions", json!({"cwd": sandbox.workdir(), "prompt": "RUN it"})).await;
    assert_eq!(status, 201, "{session}");
    let id = session["id"].as_str().unwrap().to_owned();
    let mut watcher = a.ws(&format!("/api/sessions/{id}/subscribe?after=0")).await;
    let asked = watcher.until(|frame| frame["event"]["event"] == "permission_requested").await;
    let request_id = asked.last().unwrap()["event"]["request_id"].as_str().unwrap().to_owned();
    let answer = format!("/api/sessions/{id}/permissions/{request_id}");

    nats.freeze(true);
    until_it("node a notices it no longer hears the bus", || bus.cut_off()).await;
    let (status, refused) = a.post(&answer, json!({"behavior": "allow"})).await;
    assert_eq!(status, 503, "{refused}");
    assert!(refused["error"]["message"].as_str().unwrap().contains("cut off"), "{refused}");
    nats.freeze(false);
    until_it("node a hears the bus again", || !bus.cut_off()).await;

    // Node b takes it over, as its resume claims it: from node a, as b last read it.
    // (Read again if a's run wrote its record between the reading and the claim.)
    let mut claimed = None;
    for _ in 0..10 {
        let record = postgres.get_session(&id).await.unwrap().unwrap();
        if postgres.claim_session(Claim::of(&record, Some("b"))).await.unwrap() {
            claimed = Some(record);
            break;
        }
    }
    let record = claimed.expect("b's claim wins from a fresh reading");
    assert!(
        !postgres.claim_session(Claim::of(&record, Some("a"))).await.unwrap(),
        "a claim from the same reading loses"
    );
    let (status, refused) = a.post(&answer, json!({"behavior": "allow"})).await;
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["error"]["code"], "other_node");
    until_it("a's run of the session stops", || a.daemon.running_count() == 0).await;
    assert!(!sandbox.file("fenced.txt").exists(), "the call was never carried out");
    let record = postgres.get_session(&id).await.unwrap().unwrap();
    assert_eq!(record.node.as_deref(), Some("b"), "a's run ending left the record b's");
    // Through the pause and the take-over, the watcher saw the log and the log holds all it
    // saw: every event once, in order, none lost to the cut.
    let stored: Vec<u64> =
        postgres.events_after(&id, 0, 100_000).await.unwrap().iter().map(|e| e.seq).collect();
    let last = *stored.last().unwrap();
    let mut seen: Vec<u64> = asked.iter().filter_map(|frame| frame["seq"].as_u64()).collect();
    if seen.last() != Some(&last) {
        let rest = watcher.until(|frame| frame["seq"].as_u64() == Some(last)).await;
        seen.extend(rest.iter().filter_map(|frame| frame["seq"].as_u64()));
    }
    assert_eq!(seen, stored, "the watcher's events are the log's");
    a.stop().await;
}
