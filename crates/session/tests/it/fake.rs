//! Failure paths with `fake-claude`.

use std::time::Duration;

use serde_json::json;
use switchboard_session::{
    spawn_session, Policy, SessionConfig, SessionError, SessionEvent, SessionState,
};
use switchboard_testkit::fake_cli;

fn config(dir: &std::path::Path, script: Option<serde_json::Value>) -> SessionConfig {
    let mut config = SessionConfig::new(dir, Policy::default());
    config.cli.program = Some(fake_cli());
    config.control_timeout = Duration::from_secs(10);
    if let Some(script) = script {
        let path = dir.join("script.json");
        std::fs::write(&path, script.to_string()).unwrap();
        config.cli.env.insert("FAKE_CLAUDE_SCRIPT".into(), path.display().to_string());
    }
    config
}

#[tokio::test]
async fn a_missing_cli_fails_to_start_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path(), None);
    config.cli.program = Some("/no/such/claude".into());
    let error = spawn_session(config).err().unwrap();
    assert!(matches!(error, SessionError::Transport(_)));
    assert!(error.to_string().contains("/no/such/claude"));
}

#[tokio::test]
async fn a_crash_mid_turn_ends_the_session_as_crashed() {
    let dir = tempfile::tempdir().unwrap();
    let script = json!([
        {"expect": "control_request", "subtype": "initialize"}, {"reply": {}},
        {"expect": "user"},
        {"emit": {"type": "system", "subtype": "init", "session_id": "$SESSION"}},
        {"stderr": "boom: out of memory\n"},
        {"crash": true},
    ]);
    let (handle, mut events) = spawn_session(config(dir.path(), Some(script))).unwrap();
    handle.send_text("go").await.unwrap();
    let mut exited = None;
    while let Some(event) = events.recv().await {
        if let SessionEvent::Exited { description, requested, .. } = &event {
            exited = Some((description.clone(), *requested));
        }
    }
    let (description, requested) = exited.unwrap();
    assert!(!requested);
    assert!(
        description.contains("signal 6") && description.contains("boom: out of memory"),
        "{description}"
    );
    assert_eq!(handle.snapshot().state, SessionState::Crashed);
    assert!(matches!(handle.send_text("again").await, Err(SessionError::Ended)));
}

#[tokio::test]
async fn a_hung_cli_is_shut_down_by_signal() {
    let dir = tempfile::tempdir().unwrap();
    let script = json!([{"hang_ignoring_term": true}]);
    let (handle, mut events) = spawn_session(config(dir.path(), Some(script))).unwrap();
    let drain = tokio::spawn(async move { while events.recv().await.is_some() {} });
    handle.shutdown(Duration::from_millis(200)).await.unwrap();
    drain.await.unwrap();
    assert_eq!(handle.snapshot().state, SessionState::Exited, "a requested end is not a crash");
}

#[tokio::test]
async fn garbage_and_a_huge_line_are_reported_and_the_session_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let script = json!([
        {"expect": "control_request", "subtype": "initialize"}, {"reply": {}},
        {"expect": "user"},
        {"emit_raw": "not json at all\n"},
        {"emit_big": 8_000_000},
        {"turn": "fine"},
    ]);
    let (handle, mut events) = spawn_session(config(dir.path(), Some(script))).unwrap();
    handle.send_text("go").await.unwrap();
    let mut bad = 0;
    let mut biggest = 0;
    let mut result = None;
    while let Some(event) = events.recv().await {
        match &event {
            SessionEvent::BadLine(error) => {
                bad += 1;
                assert!(error.preview.starts_with("not json"));
            }
            SessionEvent::Line(line) => {
                biggest = biggest.max(line.raw.len());
                if let switchboard_protocol::Message::Result(r) = line.message.as_ref() {
                    result = r.result.clone();
                }
            }
            _ => {}
        }
    }
    assert_eq!(bad, 1);
    assert!(biggest > 8_000_000);
    assert_eq!(result.as_deref(), Some("fine"));
}

#[tokio::test]
async fn a_control_request_the_cli_never_answers_times_out() {
    let dir = tempfile::tempdir().unwrap();
    // Like 2.1.37 with an unknown subtype: no answer, ever.
    let script = json!([
        {"expect": "control_request", "subtype": "initialize"}, {"reply": {}},
        {"expect": "control_request", "subtype": "mcp_status"},
        {"sleep_ms": 60000},
    ]);
    let mut config = config(dir.path(), Some(script));
    config.control_timeout = Duration::from_millis(300);
    let (handle, mut events) = spawn_session(config).unwrap();
    let drain = tokio::spawn(async move {
        let mut timed_out = 0;
        while let Some(event) = events.recv().await {
            if matches!(event, SessionEvent::ControlTimedOut { .. }) {
                timed_out += 1;
            }
        }
        timed_out
    });
    let error = handle.mcp_status().await.unwrap_err();
    assert!(error.to_string().contains("did not answer mcp_status"), "{error}");
    handle.shutdown(Duration::from_millis(200)).await.unwrap();
    assert_eq!(drain.await.unwrap(), 1);
}

/// A sink that records the kinds of the events it takes, and says when it is ended.
struct Recorder {
    kinds: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    ended: Option<tokio::sync::oneshot::Sender<()>>,
}

impl switchboard_session::EventSink for Recorder {
    fn take(&mut self, events: Vec<SessionEvent>) -> switchboard_session::SinkFuture<'_> {
        assert!(!events.is_empty(), "a sink is never called with nothing");
        assert!(self.ended.is_some(), "nothing comes after the end");
        self.kinds.lock().unwrap().extend(events.iter().map(|event| event.kind().to_owned()));
        Box::pin(async {})
    }

    fn end(mut self: Box<Self>) -> switchboard_session::SinkFuture<'static> {
        let _ = self.ended.take().unwrap().send(());
        Box::pin(async {})
    }
}

fn a_short_turn() -> serde_json::Value {
    json!([
        {"expect": "control_request", "subtype": "initialize"}, {"reply": {}},
        {"expect": "user"},
        {"emit": {"type": "system", "subtype": "init", "session_id": "$SESSION"}},
        {"emit": {"type": "assistant", "session_id": "$SESSION", "message": {"id": "m", "type": "message", "role": "assistant", "model": "x", "content": [{"type": "text", "text": "hi"}]}}},
        {"emit": {"type": "result", "subtype": "success", "session_id": "$SESSION", "is_error": false, "duration_ms": 1, "duration_api_ms": 1, "num_turns": 1, "result": "hi", "total_cost_usd": 0.0}},
    ])
}

/// The kinds of every event of a session that answers `initialize`, runs a turn and is shut
/// down: the first two read from the queue, the rest from the queue too or, with `sink`,
/// handed to a [`Recorder`] then.
async fn a_session_s_event_kinds(dir: &std::path::Path, sink: bool) -> Vec<String> {
    let (handle, mut events) = spawn_session(config(dir, Some(a_short_turn()))).unwrap();
    let mut kinds = vec![
        events.recv().await.unwrap().kind().to_owned(),
        events.recv().await.unwrap().kind().to_owned(),
    ];
    let taken = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let (ended, end) = tokio::sync::oneshot::channel();
    if sink {
        events.hand_to(Box::new(Recorder { kinds: taken.clone(), ended: Some(ended) }));
    } else {
        let taken = taken.clone();
        tokio::spawn(async move {
            while let Some(event) = events.recv().await {
                taken.lock().unwrap().push(event.kind().to_owned());
            }
            let _ = ended.send(());
        });
    }
    handle.send_text("go").await.unwrap();
    let mut state = handle.watch();
    state
        .wait_for(|snapshot| snapshot.turns == 1 && snapshot.state == SessionState::Idle)
        .await
        .unwrap();
    handle.shutdown(Duration::from_secs(5)).await.unwrap();
    end.await.expect("the events end");
    kinds.extend(taken.lock().unwrap().iter().cloned());
    kinds
}

#[tokio::test]
async fn events_handed_to_a_sink_follow_those_read_before_in_order_and_end_once() {
    let dir = tempfile::tempdir().unwrap();
    let all = a_session_s_event_kinds(dir.path(), false).await;
    assert!(all.iter().any(|kind| kind == "exited"), "{all:?}");
    let dir = tempfile::tempdir().unwrap();
    let handed = a_session_s_event_kinds(dir.path(), true).await;
    assert_eq!(handed, all, "the same events, in the same order, none twice");

    // Handed over only after the session ended: a task of its own gives the sink the rest.
    let dir = tempfile::tempdir().unwrap();
    let (handle, mut events) = spawn_session(config(dir.path(), Some(a_short_turn()))).unwrap();
    let mut kinds = vec![
        events.recv().await.unwrap().kind().to_owned(),
        events.recv().await.unwrap().kind().to_owned(),
    ];
    handle.send_text("go").await.unwrap();
    let mut state = handle.watch();
    state
        .wait_for(|snapshot| snapshot.turns == 1 && snapshot.state == SessionState::Idle)
        .await
        .unwrap();
    handle.shutdown(Duration::from_secs(5)).await.unwrap();
    let taken = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let (ended, end) = tokio::sync::oneshot::channel();
    events.hand_to(Box::new(Recorder { kinds: taken.clone(), ended: Some(ended) }));
    end.await.expect("the sink is ended");
    kinds.extend(taken.lock().unwrap().iter().cloned());
    assert_eq!(kinds, all);
}
