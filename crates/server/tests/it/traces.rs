//! OpenTelemetry traces against a real OTLP receiver (`e2e/otlp_receiver.py`, a gRPC server
//! built on PyPI's `opentelemetry-proto`): a session with the real CLI makes a span per turn,
//! a child per tool call and a child of its call per wait for a person, with their times,
//! decisions and outcomes; on a fleet of two nodes, each node sends the turns it runs, named
//! by the node, and an answer given through the other node shows on the wait.

use std::sync::Arc;

use serde_json::{json, Value};
use switchboard_server::traces::tracer::turn_trace_id;
use switchboard_server::traces::TraceOptions;
use switchboard_store::{SqliteStore, Store};
use switchboard_testkit::otlp::OtlpReceiver;
use switchboard_testkit::{CliSandbox, FakeApi, Reply, Scenario};

use crate::{Server, WAIT};

/// Asks for Bash, allows Read.
const POLICY: &str = "[permissions]\nallow = [\"Read\"]\nask = [\"Bash\"]\n";

/// The spans of `session` that `receiver` was sent, once `done` holds of them (the daemons
/// are flushed first, and again while it does not), within [`WAIT`].
async fn spans_of(
    receiver: &OtlpReceiver,
    servers: &[&Server],
    session: &str,
    done: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        for server in servers {
            server.daemon.flush_traces().await;
        }
        let spans: Vec<Value> = receiver
            .spans()
            .into_iter()
            .filter(|span| span["attributes"]["session.id"] == session)
            .collect();
        if done(&spans) {
            return spans;
        }
        assert!(tokio::time::Instant::now() < deadline, "spans of {session}: {spans:#?}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

fn traced(endpoint: &str) -> TraceOptions {
    let mut options = TraceOptions::new(endpoint);
    options.every = std::time::Duration::from_millis(200);
    options
}

fn named<'a>(spans: &'a [Value], name: &str) -> Vec<&'a Value> {
    spans.iter().filter(|span| span["name"] == name).collect()
}

/// `span`'s start and end, in nanoseconds.
fn times(span: &Value) -> (u64, u64) {
    (span["start_ns"].as_u64().unwrap(), span["end_ns"].as_u64().unwrap())
}

/// Whether `inner` lies within `outer`'s time.
fn within(inner: &Value, outer: &Value) -> bool {
    let ((start, end), (outer_start, outer_end)) = (times(inner), times(outer));
    outer_start <= start && start <= end && end <= outer_end
}

const OK: i64 = 1;
const ERROR: i64 = 2;

/// One session, two turns: in the first, a Read the CLI allows on its own and a Bash a person allows;
/// in the second, a Bash a person denies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_is_a_trace_with_its_tool_calls_and_a_persons_waits() {
    let receiver = OtlpReceiver::start().await;
    let api = FakeApi::start(
        Scenario::new()
            .reply(Reply::tool_use("Read", json!({"file_path": "notes.txt"})).when_prompt("RUN"))
            .reply(
                Reply::tool_use("Bash", json!({"command": "echo traced"}))
                    .when_tool_result_contains("hello"),
            )
            .reply(Reply::text("ran it").when_tool_result_contains("traced"))
            .reply(Reply::tool_use("Bash", json!({"command": "echo refused"})).when_prompt("DENY"))
            .reply(Reply::text("not then").when_tool_result_contains("not today")),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    std::fs::write(sandbox.workdir().join("notes.txt"), "hello\n").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("db")).unwrap());
    let server = Server::start_with(store, &api, &sandbox, |config| {
        config.traces = Some(traced(receiver.endpoint()));
    })
    .await;
    let (id, _) = crate::metrics::allowed_then_denied_under(&server, &sandbox, POLICY).await;
    let spans = spans_of(&receiver, &[&server], &id, |spans| {
        named(spans, "turn").len() == 2 && named(spans, "permission Bash").len() == 2
    })
    .await;
    // Nothing twice: a span per turn, per call, per wait.
    assert_eq!(spans.len(), 2 + 3 + 2, "{spans:#?}");
    let turns = named(&spans, "turn");
    let (first, second) = (turns[0], turns[1]);
    for (turn, prompt) in [(first, "RUN it"), (second, "DENY it")] {
        assert_eq!(turn["parent_span_id"], "", "a turn is its trace's root");
        assert_eq!(turn["status"]["code"], OK, "{turn}");
        assert_eq!(turn["resource"]["service.name"], "switchboard");
        assert_eq!(turn["attributes"]["switchboard.turn.subtype"], "success");
        assert!(turn["attributes"]["gen_ai.usage.output_tokens"].as_i64().unwrap() > 0, "{turn}");
        // Its trace is named by its session and the seq of the event that began it: the
        // prompt's.
        let seq = turn["attributes"]["switchboard.turn.seq"].as_i64().unwrap() as u64;
        let (_, events) = server.get(&format!("/api/sessions/{id}/events")).await;
        let began = events.as_array().unwrap().iter().find(|event| event["seq"] == seq).unwrap();
        assert_eq!(began["event"]["line"]["message"]["content"], prompt, "{began}");
        assert_eq!(turn["trace_id"], turn_trace_id(&id, seq).to_string());
        let children: Vec<&Value> =
            spans.iter().filter(|span| span["trace_id"] == turn["trace_id"]).collect();
        for child in &children {
            assert!(within(child, turn), "{child} within {turn}");
        }
    }
    assert!(times(first).1 <= times(second).0, "the turns one after the other");

    // The first turn: the Read allowed without a wait (an event on its call), the Bash
    // a person allowed (a wait, the call's child).
    let of_first = |name: &str| -> Vec<&Value> {
        named(&spans, name)
            .into_iter()
            .filter(|span| span["trace_id"] == first["trace_id"])
            .collect()
    };
    let read = of_first("execute_tool Read");
    assert_eq!(read.len(), 1, "{spans:#?}");
    let read = read[0];
    assert_eq!(read["parent_span_id"], first["span_id"]);
    assert_eq!(read["status"]["code"], OK);
    assert_eq!(read["attributes"]["gen_ai.tool.name"], "Read");
    let decided = &read["events"][0];
    assert_eq!(decided["name"], "permission", "{spans:#?}");
    assert_eq!(decided["attributes"]["switchboard.permission.decision"], "allow");
    // Read in the session's own directory: the CLI's own rules allow it (the policy's hook
    // raised no objection), and it says so with the call's result.
    assert_eq!(decided["attributes"]["switchboard.permission.decided_by"], "cli");
    let bash = of_first("execute_tool Bash");
    assert_eq!(bash.len(), 1, "{spans:#?}");
    let bash = bash[0];
    assert_eq!((&bash["parent_span_id"], &bash["status"]["code"]), (&first["span_id"], &json!(OK)));
    assert!(times(read).1 <= times(bash).0, "the Read, then the Bash");
    let wait = of_first("permission Bash");
    assert_eq!(wait.len(), 1, "{spans:#?}");
    let wait = wait[0];
    assert_eq!(wait["parent_span_id"], bash["span_id"], "a wait is its call's child");
    assert!(within(wait, bash), "{wait} within {bash}");
    assert_eq!(wait["attributes"]["switchboard.permission.decision"], "allow");
    assert_eq!(wait["attributes"]["switchboard.permission.decided_by"], "person");

    // The second: the Bash a person denied fails.
    let of_second: Vec<&Value> =
        spans.iter().filter(|span| span["trace_id"] == second["trace_id"]).collect();
    assert_eq!(of_second.len(), 3, "{of_second:#?}");
    let bash = of_second.iter().find(|span| span["name"] == "execute_tool Bash").unwrap();
    assert_eq!(bash["status"]["code"], ERROR, "{bash}");
    let wait = of_second.iter().find(|span| span["name"] == "permission Bash").unwrap();
    assert_eq!(wait["parent_span_id"], bash["span_id"]);
    assert_eq!(wait["attributes"]["switchboard.permission.decision"], "deny");
    server.stop().await;
}

/// A daemon that cannot reach its collector runs its sessions all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_is_away_holds_nothing_up() {
    // A port nothing listens on: bound, then let go.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let api = FakeApi::start(Scenario::new().reply(Reply::text("hello").when_prompt("HI")))
        .await
        .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let store: Arc<dyn Store> = Arc::new(switchboard_store::MemoryStore::new());
    let server = Server::start_with(store, &api, &sandbox, |config| {
        config.traces = Some(traced(&format!("http://127.0.0.1:{port}")));
    })
    .await;
    for _ in 0..2 {
        let (_, mut ws) =
            server.open_session(json!({"cwd": sandbox.workdir(), "prompt": "HI"})).await;
        ws.until(crate::is_result).await;
    }
    tokio::time::timeout(WAIT, server.daemon.flush_traces()).await.expect("a flush gives up");
    server.stop().await;
}

/// Two nodes on one PostgreSQL and NATS, each sending to one receiver: a session on node a
/// whose request a person answers through node b, and a session on node b.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleets_nodes_each_send_the_turns_they_run() {
    let Some(database) = switchboard_testkit::servers::Postgres::start() else { return };
    let Some(nats) = switchboard_testkit::servers::Nats::start() else { return };
    let receiver = OtlpReceiver::start().await;
    let api = FakeApi::start(
        Scenario::new()
            .reply(Reply::tool_use("Bash", json!({"command": "echo fleet"})).when_prompt("RUN"))
            .reply(Reply::text("ran it").when_tool_result_contains("fleet"))
            .reply(Reply::text("hello from b").when_prompt("HI")),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let mut nodes = Vec::new();
    for name in ["a", "b"] {
        let endpoint = receiver.endpoint().to_owned();
        nodes.push(
            crate::bus::node(
                &database,
                &nats,
                name,
                crate::bus::NO_SAFETY_NET,
                &api,
                &sandbox,
                move |config| {
                    config.traces = Some(traced(&endpoint));
                },
            )
            .await,
        );
    }
    let (a, b) = (&nodes[0], &nodes[1]);
    let (status, session) = a
        .post(
            "/api/sessions",
            json!({"cwd": sandbox.workdir(), "prompt": "RUN it", "policy": POLICY, "node": "a"}),
        )
        .await;
    assert_eq!(status, 201, "{session}");
    let on_a = session["id"].as_str().unwrap().to_owned();
    let mut follower = b.ws(&format!("/api/sessions/{on_a}/subscribe?after=0")).await;
    let asked = follower.until(|frame| frame["event"]["event"] == "permission_requested").await;
    let request = asked.last().unwrap()["event"]["request_id"].as_str().unwrap().to_owned();
    let path = format!("/api/sessions/{on_a}/permissions/{request}");
    let (status, answered) = b.post(&path, json!({"behavior": "allow"})).await;
    assert_eq!(status, 200, "{answered}");
    follower.until(crate::is_result).await;
    let (status, session) = a
        .post("/api/sessions", json!({"cwd": sandbox.workdir(), "prompt": "HI", "node": "b"}))
        .await;
    assert_eq!(status, 201, "{session}");
    let on_b = session["id"].as_str().unwrap().to_owned();
    let mut ws = b.ws(&format!("/api/sessions/{on_b}/subscribe?after=0")).await;
    ws.until(crate::is_result).await;

    let servers = [a, b];
    let spans = spans_of(&receiver, &servers, &on_a, |spans| named(spans, "turn").len() == 1).await;
    assert_eq!(spans.len(), 3, "a turn, its call, its wait: {spans:#?}");
    for span in &spans {
        assert_eq!(span["resource"]["service.instance.id"], "a", "sent by the node that ran it");
        assert_eq!(span["trace_id"], spans[0]["trace_id"]);
    }
    let wait = named(&spans, "permission Bash")[0];
    assert_eq!(wait["attributes"]["switchboard.permission.decided_by"], "person");
    assert_eq!(wait["attributes"]["switchboard.permission.decision"], "allow");
    let spans = spans_of(&receiver, &servers, &on_b, |spans| named(spans, "turn").len() == 1).await;
    assert_eq!(spans.len(), 1, "{spans:#?}");
    assert_eq!(spans[0]["resource"]["service.instance.id"], "b");
    for node in nodes {
        node.stop().await;
    }
}
