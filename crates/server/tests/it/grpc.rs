//! The gRPC API, end to end: a Rust client generated from the `.proto`, on the daemon's own
//! port and token, driving the real CLI.

use std::sync::Arc;

use switchboard_server::grpc::pb;
use switchboard_server::grpc::pb::session_event::Event;
use switchboard_server::grpc::pb::switchboard_client::SwitchboardClient;
use switchboard_store::{SqliteStore, Store};
use switchboard_testkit::{CliSandbox, FakeApi, Reply, Scenario};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tonic::{Code, Request};

use crate::{touch_and_ls, Server, TOKEN, WAIT};

/// Adds the token to every call.
type Interceptor = Box<dyn FnMut(Request<()>) -> Result<Request<()>, tonic::Status> + Send>;

pub(crate) type Client = SwitchboardClient<InterceptedService<Channel, Interceptor>>;

async fn channel(server: &Server) -> Channel {
    tonic::transport::Endpoint::from_shared(server.base.clone()).unwrap().connect().await.unwrap()
}

/// A client that sends `token` (none: no `authorization` at all).
pub(crate) async fn client_with(server: &Server, token: Option<&str>) -> Client {
    let header: Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>> =
        token.map(|token| format!("Bearer {token}").parse().unwrap());
    let interceptor: Interceptor = Box::new(move |mut request: Request<()>| {
        if let Some(header) = &header {
            request.metadata_mut().insert("authorization", header.clone());
        }
        Ok(request)
    });
    SwitchboardClient::with_interceptor(channel(server).await, interceptor)
}

pub(crate) async fn client(server: &Server) -> Client {
    client_with(server, Some(TOKEN)).await
}

/// Reads a stream until `predicate` holds for an event, within [`WAIT`] in all; returns
/// everything read (and names it when the wait fails).
async fn until(
    stream: &mut tonic::Streaming<pb::SessionEvent>,
    predicate: impl Fn(&pb::SessionEvent) -> bool,
) -> Vec<pb::SessionEvent> {
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut read = Vec::new();
    loop {
        let event = tokio::time::timeout_at(deadline, stream.message())
            .await
            .unwrap_or_else(|_| panic!("what was waited for never came; read: {read:#?}"))
            .unwrap_or_else(|status| panic!("the stream failed: {status}; read: {read:#?}"))
            .unwrap_or_else(|| panic!("the stream ended first; read: {read:#?}"));
        let done = predicate(&event);
        read.push(event);
        if done {
            return read;
        }
    }
}

fn is_permission_request(event: &pb::SessionEvent) -> bool {
    matches!(event.event, Some(Event::PermissionRequest(_)))
}

/// Stored events are delivered in order, every seq once and none skipped (several parts may
/// share one).
fn assert_gap_free(events: &[pb::SessionEvent], after: u64) {
    // Every seq from `after + 1`, each with all of its parts in order, nothing twice.
    let mut expected = (after + 1, 0);
    for event in events.iter().filter(|event| event.seq != 0) {
        assert_eq!((event.seq, event.part), expected, "next without a gap: {event:?}");
        assert!(event.part < event.parts, "{event:?}");
        expected = if event.part + 1 == event.parts {
            (event.seq + 1, 0)
        } else {
            (event.seq, event.part + 1)
        };
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_client_streams_approves_denies_and_resubscribes_without_a_gap() {
    let api = FakeApi::start(
        Scenario::new()
            .reply(
                Reply::text("Let me run it.")
                    .then_tool("Bash", touch_and_ls("approved.txt"))
                    .when_prompt("RUN"),
            )
            .reply(
                Reply::tool_use("Bash", touch_and_ls("denied.txt"))
                    .when_tool_result_contains("approved.txt"),
            )
            .reply(Reply::text("Understood, I will not.").when_tool_result_contains("not today")),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("db")).unwrap());
    let server = Server::start(store, &api, &sandbox).await;
    let mut grpc = client(&server).await;
    let mut changes = grpc.watch_sessions(pb::WatchSessionsRequest {}).await.unwrap().into_inner();

    let session = grpc
        .create_session(pb::CreateSessionRequest {
            cwd: sandbox.workdir().display().to_string(),
            prompt: Some("RUN it".into()),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(session.title.as_deref(), Some("RUN it"));
    let id = session.id.clone();

    let mut stream = grpc
        .subscribe(pb::SubscribeRequest { id: id.clone(), after_seq: 0 })
        .await
        .unwrap()
        .into_inner();
    let mut events = until(&mut stream, is_permission_request).await;
    let text: String = events
        .iter()
        .filter_map(|event| match &event.event {
            Some(Event::TextDelta(delta)) => Some(delta.text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(text, "Let me run it.", "text streams as deltas");
    // The tool's input grows as it streams, parsed.
    let partial: Vec<String> = events
        .iter()
        .filter_map(|event| match &event.event {
            Some(Event::ToolInputDelta(delta)) => delta.partial_input.as_ref(),
            _ => None,
        })
        .filter_map(|input| match input.fields.get("command")?.kind.as_ref()? {
            prost_types::value::Kind::StringValue(command) => Some(command.clone()),
            _ => None,
        })
        .collect();
    assert!(partial.len() >= 2, "the input arrives in pieces: {partial:?}");
    assert!(
        partial.windows(2).all(|pair| "touch approved.txt && ls".starts_with(&pair[0])
            && pair[1].starts_with(&pair[0])),
        "each partial command extends the one before: {partial:?}"
    );
    let Some(Event::PermissionRequest(asked)) = &events.last().unwrap().event else {
        unreachable!()
    };
    assert_eq!(asked.tool_name, "Bash");
    let input = asked.input.as_ref().unwrap();
    assert!(matches!(
        input.fields["command"].kind.as_ref(),
        Some(prost_types::value::Kind::StringValue(command)) if command == "touch approved.txt && ls"
    ));
    let first_request = events.last().unwrap().seq;

    grpc.answer_permission(pb::AnswerPermissionRequest {
        id: id.clone(),
        request_id: asked.request_id.clone(),
        behavior: pb::Behavior::Allow.into(),
        by: Some("grpc-test".into()),
        ..Default::default()
    })
    .await
    .unwrap();
    let again = grpc
        .answer_permission(pb::AnswerPermissionRequest {
            id: id.clone(),
            request_id: asked.request_id.clone(),
            behavior: pb::Behavior::Deny.into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(again.code(), Code::FailedPrecondition, "{again:?}");
    assert!(again.message().contains("already answered"), "{again:?}");

    events.extend(until(&mut stream, is_permission_request).await);
    assert!(sandbox.file("approved.txt").exists(), "the approved call ran");
    let decided = events.iter().find_map(|event| match &event.event {
        Some(Event::PermissionDecision(decision)) => Some(decision.clone()),
        _ => None,
    });
    let decided = decided.expect("a decision event");
    assert_eq!(decided.behavior, i32::from(pb::Behavior::Allow));
    assert_eq!(decided.decided_by, "person:grpc-test, token admin (grpc)");
    let Some(Event::PermissionRequest(second)) = &events.last().unwrap().event else {
        unreachable!()
    };
    grpc.answer_permission(pb::AnswerPermissionRequest {
        id: id.clone(),
        request_id: second.request_id.clone(),
        behavior: pb::Behavior::Deny.into(),
        message: Some("not today".into()),
        ..Default::default()
    })
    .await
    .unwrap();

    // The turn ends: its result, then its usage, then the session is idle.
    events.extend(
        until(&mut stream, |event| {
            matches!(&event.event, Some(Event::StatusChange(change)) if change.to == i32::from(pb::Status::Idle))
        })
        .await,
    );
    assert!(!sandbox.file("denied.txt").exists(), "the denied call did not run");
    let tool_results = api.wait_for(|request| {
        request.tool_results().iter().any(|(_, text, _)| text.contains("not today"))
    });
    tokio::time::timeout(WAIT, tool_results).await.expect("the model was told why");
    let position = |want: fn(&Event) -> bool| {
        events.iter().position(|event| event.event.as_ref().is_some_and(want)).unwrap()
    };
    let result = position(|event| matches!(event, Event::TurnResult(_)));
    let usage = position(|event| matches!(event, Event::UsageReport(_)));
    assert_eq!(usage, result + 1, "the usage comes right after the result");
    assert_eq!(events[usage].seq, events[result].seq, "both from the result line");
    let Some(Event::TurnResult(turn)) = &events[result].event else { unreachable!() };
    assert_eq!(turn.result.as_deref(), Some("Understood, I will not."));
    let Some(Event::UsageReport(report)) = &events[usage].event else { unreachable!() };
    assert!(report.output_tokens > 0, "{report:?}");
    assert_gap_free(&events, 0);
    let mut raw = events.iter().filter_map(|event| match &event.event {
        Some(Event::RawLine(line)) => Some(line),
        _ => None,
    });
    assert!(raw.all(|line| serde_json::from_str::<serde_json::Value>(&line.line).is_ok()));

    // Again from after the first permission request: the same events from there, no gap, no
    // duplicate.
    let last = events.last().unwrap().clone();
    let mut again = grpc
        .subscribe(pb::SubscribeRequest { id: id.clone(), after_seq: first_request })
        .await
        .unwrap()
        .into_inner();
    let replayed =
        until(&mut again, |event| event.seq == last.seq && event.part == last.part).await;
    let tail: Vec<&pb::SessionEvent> =
        events.iter().filter(|event| event.seq > first_request).collect();
    assert_eq!(replayed.iter().collect::<Vec<_>>(), tail);
    assert_gap_free(&replayed, first_request);
    // From the end of the numbers: no history and no error (no `after + 1` overflows).
    for after_seq in [u64::MAX, (1 << 63) - 1] {
        let mut far = grpc
            .subscribe(pb::SubscribeRequest { id: id.clone(), after_seq })
            .await
            .unwrap()
            .into_inner();
        match tokio::time::timeout(std::time::Duration::from_secs(2), far.message()).await {
            Err(_) | Ok(Ok(None)) => {}
            Ok(other) => panic!("a subscription after {after_seq} got {other:?}"),
        }
    }

    // The dashboard's stream saw the session made, then change until it was idle.
    let created = tokio::time::timeout(WAIT, changes.message()).await.unwrap().unwrap().unwrap();
    assert_eq!(created.event, "session_created");
    assert_eq!(created.id, id);
    assert_eq!(created.session.unwrap().cwd, sandbox.workdir().display().to_string());
    loop {
        let change = tokio::time::timeout(WAIT, changes.message()).await.unwrap().unwrap().unwrap();
        assert_eq!(change.id, id, "{change:?}");
        if change.event == "session_changed"
            && change
                .session
                .as_ref()
                .is_some_and(|session| session.status == i32::from(pb::Status::Idle))
        {
            assert!(change.session.unwrap().cost_usd > 0.0);
            break;
        }
    }

    let listed = grpc.list_sessions(pb::ListSessionsRequest {}).await.unwrap().into_inner();
    assert_eq!(listed.sessions.len(), 1);
    assert_eq!(listed.sessions[0].status, i32::from(pb::Status::Idle));
    assert!(listed.sessions[0].running);
    // What the CLI says of its context, and a queued prompt that is not there.
    let asked = grpc
        .ask_cli(pb::AskCliRequest { id: id.clone(), question: "context".into() })
        .await
        .unwrap()
        .into_inner();
    assert!(asked.answer.is_some_and(|answer| answer.fields.contains_key("categories")));
    let unknown = grpc
        .ask_cli(pb::AskCliRequest { id: id.clone(), question: "secrets".into() })
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), tonic::Code::InvalidArgument);
    let cancelled = grpc
        .cancel_queued(pb::CancelQueuedRequest {
            id: id.clone(),
            uuid: "00000000-0000-4000-8000-000000000000".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!cancelled.cancelled);
    let stopped = grpc
        .stop_session(pb::StopSessionRequest { id: id.clone(), ..Default::default() })
        .await
        .unwrap()
        .into_inner();
    assert!(!stopped.session.unwrap().running);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_errors_are_status_codes_with_readable_messages() {
    let api = FakeApi::start(Scenario::new()).await.unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("db")).unwrap());
    let server = Server::start(store, &api, &sandbox).await;

    for token in [None, Some("wrong-token")] {
        let mut stranger = client_with(&server, token).await;
        let refused = stranger.list_sessions(pb::ListSessionsRequest {}).await.unwrap_err();
        assert_eq!(refused.code(), Code::Unauthenticated, "{token:?}: {refused:?}");
        assert!(refused.message().contains("Bearer"), "{refused:?}");
        let refused = stranger
            .subscribe(pb::SubscribeRequest { id: "x".into(), after_seq: 0 })
            .await
            .unwrap_err();
        assert_eq!(refused.code(), Code::Unauthenticated);
    }

    let mut grpc = client(&server).await;
    let missing = grpc.get_session(pb::GetSessionRequest { id: "nope".into() }).await.unwrap_err();
    assert_eq!(missing.code(), Code::NotFound);
    assert!(missing.message().contains("nope"), "{missing:?}");
    let missing =
        grpc.subscribe(pb::SubscribeRequest { id: "nope".into(), after_seq: 0 }).await.unwrap_err();
    assert_eq!(missing.code(), Code::NotFound);
    let invalid = grpc
        .create_session(pb::CreateSessionRequest {
            cwd: "relative/dir".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(invalid.code(), Code::InvalidArgument);
    assert!(invalid.message().contains("absolute"), "{invalid:?}");
    let invalid = grpc
        .answer_permission(pb::AnswerPermissionRequest { id: "nope".into(), ..Default::default() })
        .await
        .unwrap_err();
    assert_eq!(invalid.code(), Code::InvalidArgument, "no behavior: {invalid:?}");
    let huge = "x".repeat(switchboard_server::api::MAX_BODY_BYTES + 1);
    let too_big = grpc
        .send_message(pb::SendMessageRequest {
            id: "nope".into(),
            text: huge,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(too_big.code(), Code::ResourceExhausted, "{:?}", too_big.message());

    // A session that is not running.
    let session = grpc
        .create_session(pb::CreateSessionRequest {
            cwd: sandbox.workdir().display().to_string(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    grpc.stop_session(pb::StopSessionRequest { id: session.id.clone(), ..Default::default() })
        .await
        .unwrap();
    // An image whose bytes are not of its type is refused before the session is looked at.
    let image = pb::Image { media_type: "image/gif".into(), data: b"\x89PNG\r\n\x1a\n".to_vec() };
    let invalid = grpc
        .send_message(pb::SendMessageRequest {
            id: session.id.clone(),
            text: String::new(),
            images: vec![image],
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(invalid.code(), Code::InvalidArgument, "{invalid:?}");
    assert!(invalid.message().contains("says it is image/gif but is image/png"), "{invalid:?}");
    let stopped = grpc
        .send_message(pb::SendMessageRequest {
            id: session.id.clone(),
            text: "hi".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(stopped.code(), Code::FailedPrecondition, "{stopped:?}");
    let unknown = grpc
        .send_message(pb::SendMessageRequest {
            id: session.id.clone(),
            text: "hi".into(),
            priority: "soon".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), Code::InvalidArgument, "{unknown:?}");
    assert!(unknown.message().contains("now, next or later"), "{unknown:?}");
    assert!(stopped.message().contains("resume"), "{stopped:?}");

    // A browser's call (it says its Origin) is refused, token or not.
    let mut browser = SwitchboardClient::with_interceptor(
        channel(&server).await,
        Box::new(|mut request: Request<()>| {
            request
                .metadata_mut()
                .insert("authorization", format!("Bearer {TOKEN}").parse().unwrap());
            request.metadata_mut().insert("origin", "https://evil.example".parse().unwrap());
            Ok(request)
        }) as Interceptor,
    );
    let refused = browser.list_sessions(pb::ListSessionsRequest {}).await.unwrap_err();
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");

    // Reflection lists the service, with the token only.
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
    use tonic_reflection::pb::v1::ServerReflectionRequest;
    let list = || {
        tokio_stream::iter([ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        }])
    };
    let mut reflection = ServerReflectionClient::with_interceptor(
        channel(&server).await,
        Box::new(|mut request: Request<()>| {
            request
                .metadata_mut()
                .insert("authorization", format!("Bearer {TOKEN}").parse().unwrap());
            Ok(request)
        }) as Interceptor,
    );
    let mut answers = reflection.server_reflection_info(list()).await.unwrap().into_inner();
    let Some(MessageResponse::ListServicesResponse(services)) =
        answers.message().await.unwrap().unwrap().message_response
    else {
        panic!("a list of services");
    };
    let names: Vec<&str> = services.service.iter().map(|service| service.name.as_str()).collect();
    assert!(names.contains(&"switchboard.v1.Switchboard"), "{names:?}");
    {
        use tonic_reflection::pb::v1alpha::server_reflection_client::ServerReflectionClient;
        use tonic_reflection::pb::v1alpha::server_reflection_request::MessageRequest;
        use tonic_reflection::pb::v1alpha::ServerReflectionRequest;
        let mut older = ServerReflectionClient::with_interceptor(
            channel(&server).await,
            Box::new(|mut request: Request<()>| {
                request
                    .metadata_mut()
                    .insert("authorization", format!("Bearer {TOKEN}").parse().unwrap());
                Ok(request)
            }) as Interceptor,
        );
        let request = ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        };
        let mut answers =
            older.server_reflection_info(tokio_stream::iter([request])).await.unwrap().into_inner();
        let answer = format!("{:?}", answers.message().await.unwrap().unwrap());
        assert!(answer.contains("switchboard.v1.Switchboard"), "v1alpha too: {answer}");
    }
    let mut anonymous = ServerReflectionClient::new(channel(&server).await);
    let refused = anonymous.server_reflection_info(list()).await.unwrap_err();
    assert_eq!(refused.code(), Code::Unauthenticated);

    // Health needs no token (for probes); REST still answers on the same port.
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel(&server).await);
    let serving = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: "switchboard.v1.Switchboard".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        serving.status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );
    let (status, body) = server.get("/api/health").await;
    assert_eq!(status, 200, "{body}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::disallowed_methods)] // runs Python (not the Claude CLI)
async fn a_python_client_generated_from_the_proto_creates_subscribes_and_approves() {
    let api = FakeApi::start(
        Scenario::new()
            .reply(
                Reply::text("Running it.")
                    .then_tool("Bash", touch_and_ls("from-python.txt"))
                    .when_prompt("RUN"),
            )
            .reply(Reply::text("Done, from Python.").when_tool_result_contains("from-python.txt")),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("db")).unwrap());
    let server = Server::start(store, &api, &sandbox).await;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let output = tokio::time::timeout(
        WAIT,
        tokio::process::Command::new(switchboard_testkit::otlp::python())
            .arg(root.join("e2e/grpc_client.py"))
            .env("SWITCHBOARD_GRPC", server.base.trim_start_matches("http://"))
            .env("SWITCHBOARD_TOKEN", TOKEN)
            .env("WORKDIR", sandbox.workdir())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the Python client finishes")
    .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the Python client failed: {stderr}");
    let seen: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|error| {
        panic!("{error}: {}\n{stderr}", String::from_utf8_lossy(&output.stdout))
    });
    assert_eq!(seen["title"], "RUN it from Python", "{seen}");
    assert_eq!(seen["text"], "Running it.Done, from Python.", "{seen}");
    assert_eq!(seen["approved"]["tool"], "Bash", "{seen}");
    assert_eq!(seen["approved"]["command"], "touch from-python.txt && ls", "{seen}");
    assert!(sandbox.file("from-python.txt").exists(), "the approved call ran");
    assert_eq!(seen["result"], "Done, from Python.", "{seen}");
    assert!(seen["output_tokens"].as_u64().unwrap() > 0, "{seen}");
    assert_eq!(seen["idle"], true, "{seen}");
    assert_eq!(seen["without_token"], "UNAUTHENTICATED", "{seen}");
    let seqs: Vec<(u64, u64, u64)> = seen["seqs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|event| {
            (event[0].as_u64().unwrap(), event[1].as_u64().unwrap(), event[2].as_u64().unwrap())
        })
        .collect();
    // Every seq from 1, each with all of its parts in order, nothing twice.
    let mut expected = (1, 0);
    for (seq, part, parts) in seqs.into_iter().filter(|(seq, _, _)| *seq != 0) {
        assert_eq!((seq, part), expected, "gap-free in Python too");
        assert!(part < parts, "{part} of {parts}");
        expected = if part + 1 == parts { (seq + 1, 0) } else { (seq, part + 1) };
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subagents_events_name_the_call_they_belong_to() {
    let sandbox = CliSandbox::new().unwrap();
    let sub = sandbox.file("sub.txt");
    std::fs::write(&sub, "SUBFILE_CONTENT\n").unwrap();
    let api = FakeApi::start(
        Scenario::new()
            .reply(
                Reply::tool_use(
                    "Agent|Task",
                    serde_json::json!({"description": "Read the sub file", "subagent_type": "general-purpose",
                        "prompt": "SUBAGENT_PROMPT: read the sub file", "run_in_background": false}),
                )
                .when_prompt("SUBAGENT"),
            )
            .reply(Reply::tool_use("Read", serde_json::json!({"file_path": sub})).when_prompt("SUBAGENT_PROMPT"))
            .reply(Reply::text("The sub file says hello.").when_tool_result_contains("SUBFILE_CONTENT"))
            .reply(Reply::text("Main agent done.").when_tool_result_contains("sub file says")),
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("db")).unwrap());
    let server = Server::start(store, &api, &sandbox).await;
    let mut grpc = client(&server).await;
    let session = grpc
        .create_session(pb::CreateSessionRequest {
            cwd: sandbox.workdir().display().to_string(),
            prompt: Some("SUBAGENT please".into()),
            policy: Some("auto-approve".into()),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut stream = grpc
        .subscribe(pb::SubscribeRequest { id: session.id.clone(), after_seq: 0 })
        .await
        .unwrap()
        .into_inner();
    let events = until(&mut stream, |event| {
        matches!(&event.event, Some(Event::TurnResult(result)) if result.parent_tool_use_id.is_none())
    })
    .await;
    let agent = events
        .iter()
        .find_map(|event| match &event.event {
            Some(Event::ToolUse(call)) if call.name == "Agent" || call.name == "Task" => {
                Some(call.tool_use_id.clone())
            }
            _ => None,
        })
        .expect("the Agent call");
    // The subagent's own call and its result say which call they belong to.
    let read = events.iter().find_map(|event| match &event.event {
        Some(Event::ToolUse(call)) if call.name == "Read" => Some(call.clone()),
        _ => None,
    });
    assert_eq!(
        read.expect("the subagent's Read").parent_tool_use_id.as_deref(),
        Some(agent.as_str())
    );
    let read_result = events.iter().find_map(|event| match &event.event {
        Some(Event::ToolResult(result)) if result.text.contains("SUBFILE_CONTENT") => {
            Some(result.clone())
        }
        _ => None,
    });
    assert_eq!(
        read_result.expect("its result").parent_tool_use_id.as_deref(),
        Some(agent.as_str())
    );
    let Some(Event::TurnResult(done)) = &events.last().unwrap().event else { unreachable!() };
    assert_eq!(done.result.as_deref(), Some("Main agent done."));
    server.stop().await;
}
