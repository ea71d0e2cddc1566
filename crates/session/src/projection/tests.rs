//! The projection, tested on hand-written lines in the shapes the real CLIs write.

use std::sync::Arc;

use serde_json::{json, Value};
use switchboard_protocol::Message;

use super::*;
use crate::event::WireLine;

fn line(direction: LineDirection, value: Value) -> SessionEvent {
    let raw = value.to_string();
    let message = Message::decode_str(&raw).expect("a protocol line");
    SessionEvent::Line(WireLine {
        direction,
        raw: Arc::from(raw.as_str()),
        message: Arc::new(message),
    })
}

fn cli(value: Value) -> SessionEvent {
    line(LineDirection::FromCli, value)
}

fn prompt(text: &str) -> SessionEvent {
    line(
        LineDirection::ToCli,
        json!({"type":"user","message":{"role":"user","content":text},"parent_tool_use_id":null,"session_id":"","uuid":format!("u-{text}")}),
    )
}

fn stream(message_id: &str, parent: Option<&str>, event: Value) -> SessionEvent {
    cli(
        json!({"type":"stream_event","event":event,"parent_tool_use_id":parent,"session_id":"s","uuid":"x","api_message_id":message_id}),
    )
}

/// A stream event as CLIs before 2.1.330 write it: no `api_message_id`.
fn old_stream(parent: Option<&str>, event: Value) -> SessionEvent {
    cli(
        json!({"type":"stream_event","event":event,"parent_tool_use_id":parent,"session_id":"s","uuid":"x"}),
    )
}

fn assistant(message_id: &str, parent: Option<&str>, block: Value) -> SessionEvent {
    cli(
        json!({"type":"assistant","message":{"id":message_id,"type":"message","role":"assistant","model":"claude-test","content":[block]},"parent_tool_use_id":parent,"session_id":"s","uuid":format!("a-{message_id}")}),
    )
}

fn result(total_cost: f64, subtype: &str) -> SessionEvent {
    cli(
        json!({"type":"result","subtype":subtype,"is_error":subtype != "success","duration_ms":1500,"result":"done","session_id":"s","total_cost_usd":total_cost,"usage":{"input_tokens":10,"cache_read_input_tokens":90,"output_tokens":7}}),
    )
}

fn run(projector: &mut Projector, events: &[SessionEvent]) -> Vec<Update> {
    events.iter().flat_map(|event| projector.updates(event)).collect()
}

fn message_start(id: &str) -> Value {
    json!({"type":"message_start","message":{"id":id,"type":"message","role":"assistant","model":"claude-test","content":[],"usage":{"input_tokens":3,"cache_read_input_tokens":1000,"output_tokens":1}}})
}

#[test]
fn text_streams_then_settles_into_its_block() {
    let mut projector = Projector::new();
    let updates = run(
        &mut projector,
        &[
            prompt("Say hi"),
            stream("m1", None, message_start("m1")),
            stream(
                "m1",
                None,
                json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
            ),
            stream(
                "m1",
                None,
                json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hel"}}),
            ),
            stream(
                "m1",
                None,
                json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"lo"}}),
            ),
            assistant("m1", None, json!({"type":"text","text":"Hello"})),
            stream("m1", None, json!({"type":"content_block_stop","index":0})),
        ],
    );
    let kinds: Vec<&str> = updates.iter().map(kind).collect();
    assert_eq!(kinds, ["prompt", "message_started", "text_delta", "text_delta", "block"]);
    assert!(matches!(&updates[1], Update::MessageStarted { context_tokens: Some(1003), .. }));
    assert!(matches!(&updates[3], Update::TextDelta { text, index: 0, .. } if text == "lo"));
    assert!(matches!(
        &updates[4],
        Update::Block { block: Block::Text { text }, uuid: Some(uuid), .. } if text == "Hello" && uuid == "a-m1"
    ));
    assert_eq!(projector.view().title.as_deref(), Some("Say hi"));
    assert_eq!(projector.view().context_tokens, Some(1003));

    // History drops the pieces its block makes redundant.
    let mut history = updates.clone();
    settle(&mut history, |update| Some(update));
    assert_eq!(
        history.iter().map(kind).collect::<Vec<_>>(),
        ["prompt", "message_started", "block"]
    );
}

fn tool_stream(message_id: &str, fragments: &[&str]) -> Vec<SessionEvent> {
    let mut events = vec![
        stream(message_id, None, message_start(message_id)),
        stream(
            message_id,
            None,
            json!({"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t1","name":"Bash","input":{}}}),
        ),
    ];
    for fragment in fragments {
        events.push(stream(
            message_id,
            None,
            json!({"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":fragment}}),
        ));
    }
    events
}

#[test]
fn a_tool_input_is_rebuilt_from_its_fragments() {
    // Older CLIs: the stream's stop comes before the CLI's line.
    let mut projector = Projector::new();
    let mut events = tool_stream("m1", &["{\"comm", "and\":\"ls -l", "a\"}"]);
    events.push(stream("m1", None, json!({"type":"content_block_stop","index":0})));
    events.push(assistant(
        "m1",
        None,
        json!({"type":"tool_use","id":"t1","name":"Bash","input":{"command":"ls -la"}}),
    ));
    let updates = run(&mut projector, &events);
    let kinds: Vec<&str> = updates.iter().map(kind).collect();
    assert_eq!(
        kinds,
        [
            "message_started",
            "tool_use_started",
            "tool_input_delta",
            "tool_input_delta",
            "tool_input_delta",
            "block",
            "block"
        ],
        "rebuilt when the stream ends, then confirmed by the CLI's line (with its uuid)"
    );
    assert!(matches!(
        &updates[6],
        Update::Block { block: Block::ToolUse { rebuilt: false, .. }, uuid: Some(uuid), .. } if uuid == "a-m1"
    ));
    assert!(matches!(&updates[4], Update::ToolInputDelta { received_bytes: 20, .. }));
    let Update::Block { block: Block::ToolUse { input, rebuilt, name, .. }, .. } = &updates[5]
    else {
        panic!("a tool use: {:?}", updates[5]);
    };
    assert_eq!(input, &json!({"command":"ls -la"}));
    assert!(*rebuilt);
    assert_eq!(name, "Bash");
}

#[test]
fn the_clis_line_wins_over_a_rebuilt_input_that_differs() {
    let mut projector = Projector::new();
    let mut events = tool_stream("m1", &["{\"command\":\"ls\"}"]);
    events.push(stream("m1", None, json!({"type":"content_block_stop","index":0})));
    events.push(assistant(
        "m1",
        None,
        json!({"type":"tool_use","id":"t1","name":"Bash","input":{"command":"ls","description":"List"}}),
    ));
    let blocks: Vec<Update> =
        run(&mut projector, &events).into_iter().filter(|u| kind(u) == "block").collect();
    assert_eq!(blocks.len(), 2);
    assert!(matches!(
        &blocks[1],
        Update::Block { block: Block::ToolUse { rebuilt: false, input, .. }, .. } if input["description"] == "List"
    ));
}

#[test]
fn a_line_before_the_stop_reports_the_call_once() {
    // 2.1.330: the CLI's line comes first; the stop then has nothing to add.
    let mut projector = Projector::new();
    let mut events = tool_stream("m1", &["{\"command\":", "\"ls\"}"]);
    events.push(assistant(
        "m1",
        None,
        json!({"type":"tool_use","id":"t1","name":"Bash","input":{"command":"ls"}}),
    ));
    events.push(stream("m1", None, json!({"type":"content_block_stop","index":0})));
    let blocks: Vec<Update> =
        run(&mut projector, &events).into_iter().filter(|u| kind(u) == "block").collect();
    assert_eq!(blocks.len(), 1);
    assert!(matches!(
        &blocks[0],
        Update::Block { block: Block::ToolUse { rebuilt: false, .. }, .. }
    ));
}

#[test]
fn streams_without_a_message_id_follow_their_message_start() {
    let mut projector = Projector::new();
    let updates = run(
        &mut projector,
        &[
            old_stream(None, message_start("m9")),
            old_stream(
                None,
                json!({"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}),
            ),
            old_stream(
                None,
                json!({"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hmm"}}),
            ),
        ],
    );
    assert!(matches!(
        updates.last(),
        Some(Update::ThinkingDelta { message_id, thinking, .. }) if message_id == "m9" && thinking == "hmm"
    ));
}

#[test]
fn an_oversized_input_is_left_to_the_clis_line() {
    let mut projector = Projector::new();
    let big = format!("{{\"content\":\"{}\"}}", "x".repeat(MAX_REBUILT_INPUT_BYTES));
    let (head, tail) = big.split_at(10);
    let mut events = tool_stream("m1", &[head, tail]);
    events.push(stream("m1", None, json!({"type":"content_block_stop","index":0})));
    let updates = run(&mut projector, &events);
    assert!(!updates.iter().any(|u| kind(u) == "block"), "nothing rebuilt past the cap");
    let size = big.len() as u64;
    assert!(
        matches!(updates.last(), Some(Update::ToolInputDelta { received_bytes, .. }) if *received_bytes == size),
        "the count goes on past the cap"
    );
}

#[test]
fn results_reach_their_call_with_its_tool() {
    let mut projector = Projector::new();
    let updates = run(
        &mut projector,
        &[
            assistant(
                "m1",
                None,
                json!({"type":"tool_use","id":"t1","name":"Bash","input":{"command":"ls"}}),
            ),
            cli(
                json!({"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"a\nb","is_error":false}]},"parent_tool_use_id":null,"session_id":"s","tool_use_result":{"stdout":"a","stderr":"b!","interrupted":true}}),
            ),
            cli(
                json!({"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t0","content":[{"type":"text","text":"no"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA=="}}],"is_error":true}]},"parent_tool_use_id":null,"session_id":"s"}),
            ),
        ],
    );
    let results: Vec<&Update> = updates.iter().filter(|u| kind(u) == "tool_result").collect();
    assert!(matches!(
        results[0],
        Update::ToolResult { tool_name: Some(name), text, interrupted: true, is_error: false, .. }
            if name == "Bash" && text == "a\nb!"
    ));
    assert!(matches!(
        results[1],
        Update::ToolResult { tool_name: None, text, is_error: true, images, .. }
            if text == "no" && images.len() == 1 && images[0].media_type.as_deref() == Some("image/png")
    ));
}

#[test]
fn turns_carry_their_own_cost_and_queued_prompts_follow() {
    let mut projector = Projector::new();
    let updates = run(
        &mut projector,
        &[
            prompt("one"),
            prompt("two"),
            result(0.25, "success"),
            result(0.75, "success"),
            // A new process that counts from zero again.
            SessionEvent::State { from: SessionState::Idle, to: SessionState::Exited },
            prompt("three"),
            result(0.125, "success"),
        ],
    );
    let kinds: Vec<&str> = updates.iter().map(kind).collect();
    assert_eq!(
        kinds,
        [
            "prompt",
            "prompt",
            "dequeued",
            "turn_ended",
            "turn_ended",
            "state",
            "prompt",
            "turn_ended"
        ]
    );
    assert!(matches!(&updates[0], Update::Prompt { queued: false, .. }));
    assert!(matches!(&updates[1], Update::Prompt { queued: true, .. }));
    let costs: Vec<f64> = updates
        .iter()
        .filter_map(|u| match u {
            Update::TurnEnded { cost_usd, input_tokens, output_tokens, .. } => {
                assert_eq!((*input_tokens, *output_tokens), (100, 7));
                Some(*cost_usd)
            }
            _ => None,
        })
        .collect();
    assert_eq!(costs, [0.25, 0.5, 0.125]);
    assert_eq!(projector.view().turns, 3);
    assert_eq!(projector.view().title.as_deref(), Some("one"));
}

#[test]
fn a_new_run_leaves_nothing_of_the_old_one_open() {
    // A daemon that died mid-turn wrote no final state: the next run's start resets.
    let mut projector = Projector::new();
    run(&mut projector, &[prompt("cut off")]);
    projector.new_run();
    let updates = run(&mut projector, &[prompt("after the resume")]);
    assert!(matches!(&updates[0], Update::Prompt { queued: false, .. }), "{updates:?}");
}

#[test]
fn an_interrupted_turn_says_so() {
    let mut projector = Projector::new();
    let interrupt = line(
        LineDirection::ToCli,
        json!({"type":"control_request","request_id":"r1","request":{"subtype":"interrupt"}}),
    );
    let updates = run(
        &mut projector,
        &[
            prompt("go"),
            interrupt,
            result(0.0, "error_during_execution"),
            prompt("again"),
            result(0.0, "error_during_execution"),
        ],
    );
    let ends: Vec<(bool, bool)> = updates
        .iter()
        .filter_map(|u| match u {
            Update::TurnEnded { interrupted, failed, .. } => Some((*interrupted, *failed)),
            _ => None,
        })
        .collect();
    assert_eq!(ends, [(true, false), (false, true)]);
}

#[test]
fn subagents_form_a_tree() {
    let mut projector = Projector::new();
    let updates = run(
        &mut projector,
        &[
            assistant(
                "m1",
                None,
                json!({"type":"tool_use","id":"task1","name":"Task","input":{"description":"Look","subagent_type":"Explore","prompt":"look"}}),
            ),
            assistant(
                "m2",
                Some("task1"),
                json!({"type":"tool_use","id":"task2","name":"Agent","input":{"description":"Deeper"}}),
            ),
            assistant("m3", Some("task2"), json!({"type":"text","text":"found"})),
            cli(
                json!({"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"task2","content":"ok"}]},"parent_tool_use_id":"task1","session_id":"s"}),
            ),
        ],
    );
    let tree: Vec<(String, Option<String>, bool)> = projector
        .view()
        .subagents
        .iter()
        .map(|s| (s.tool_use_id.clone(), s.parent_tool_use_id.clone(), s.finished))
        .collect();
    assert_eq!(
        tree,
        [("task1".to_owned(), None, false), ("task2".to_owned(), Some("task1".to_owned()), true)]
    );
    assert!(updates.iter().any(|u| matches!(
        u,
        Update::Block { parent_tool_use_id: Some(parent), block: Block::Text { .. }, .. } if parent == "task2"
    )));
    assert!(updates.iter().any(|u| matches!(
        u,
        Update::ToolResult { parent_tool_use_id: Some(parent), tool_name: Some(name), .. } if parent == "task1" && name == "Agent"
    )));
}

#[test]
fn the_view_follows_model_mode_and_permissions() {
    let mut projector = Projector::new();
    let pending = PendingPermission {
        request_id: "p1".into(),
        tool_name: "Bash".into(),
        input: json!({"command":"rm -rf x"}),
        tool_use_id: Some("t1".into()),
        suggestions: vec![],
        reason: String::new(),
        agent_id: None,
        timeout_secs: 60,
        asked_at_ms: 1,
        always_allows: String::new(),
        rule: None,
        cli_reason: None,
        hints: Default::default(),
        started_by: None,
        origin: None,
        parked_at_ms: None,
        park_expires_at_ms: None,
    };
    run(
        &mut projector,
        &[
            cli(
                json!({"type":"system","subtype":"init","cwd":"/w","session_id":"s","model":"m-a","permissionMode":"default","claude_code_version":"2.1.120"}),
            ),
            SessionEvent::ModelChanged("m-b".into()),
            SessionEvent::ModeChanged("plan".into()),
            SessionEvent::PermissionRequested(pending.clone()),
        ],
    );
    let view = projector.view();
    assert_eq!(
        (
            view.cwd.as_deref(),
            view.model.as_deref(),
            view.permission_mode.as_deref(),
            view.cli_version.as_deref()
        ),
        (Some("/w"), Some("m-b"), Some("plan"), Some("2.1.120"))
    );
    assert_eq!(view.pending_permissions, [pending]);
    projector.updates(&SessionEvent::decided(
        "p1",
        "Bash",
        Behavior::Deny,
        DecidedBy::Timeout,
        "late".into(),
    ));
    assert!(projector.view().pending_permissions.is_empty());
}

#[test]
fn a_float_delay_and_a_retry_read_as_a_notice() {
    let mut projector = Projector::new();
    let updates = projector.updates(&cli(
        json!({"type":"system","subtype":"api_retry","attempt":2,"max_retries":10,"retry_delay_ms":2000,"error_status":529,"error":"overloaded","session_id":"s"}),
    ));
    assert!(matches!(
        &updates[0],
        Update::Notice { kind: NoticeKind::ApiRetry, level: Level::Warn, text } if text == "API error 529 (overloaded): retry 2 of 10 in 2 s"
    ));
}

#[test]
fn every_stored_event_reads_back_as_it_was() {
    let events = vec![
        prompt("hello"),
        cli(
            json!({"type":"result","subtype":"success","is_error":false,"session_id":"s","total_cost_usd":0}),
        ),
        SessionEvent::Stderr("warn".into()),
        SessionEvent::State { from: SessionState::Starting, to: SessionState::Idle },
        SessionEvent::ClaudeSessionId("c1".into()),
        SessionEvent::ModelChanged("m".into()),
        SessionEvent::ModeChanged("plan".into()),
        SessionEvent::CostChanged(0.5),
        SessionEvent::PermissionRequested(PendingPermission {
            request_id: "p1".into(),
            tool_name: "Bash".into(),
            input: json!({"command":"ls"}),
            tool_use_id: Some("t1".into()),
            suggestions: vec![],
            reason: "why".into(),
            agent_id: Some("a".into()),
            timeout_secs: 60,
            asked_at_ms: 5,
            always_allows: String::new(),
            rule: None,
            cli_reason: None,
            hints: Default::default(),
            started_by: None,
            origin: None,
            parked_at_ms: None,
            park_expires_at_ms: None,
        }),
        SessionEvent::decided(
            "p1",
            "Bash",
            Behavior::Allow,
            DecidedBy::Person { who: "me".into() },
            "ok".into(),
        )
        .with_tool_use_id(Some("t1".into())),
        SessionEvent::decided(
            "p2",
            "Read",
            Behavior::Deny,
            DecidedBy::Policy { rule: Some("Read(.env)".into()) },
            "no".into(),
        ),
        SessionEvent::HookRequested(crate::event::PendingHook {
            request_id: "h1".into(),
            callback_id: "c".into(),
            hook_event_name: Some("PreToolUse".into()),
            input: json!({"a":1}),
        }),
        SessionEvent::HookAnswered {
            request_id: "h1".into(),
            by: "policy".into(),
            output: json!({}),
        },
        SessionEvent::ControlTimedOut { request_id: "r".into(), subtype: "set_model".into() },
        SessionEvent::UnsupportedControlRequest { request_id: "r".into(), subtype: "x".into() },
        SessionEvent::Connected { reconnect: true },
        SessionEvent::Disconnected,
        SessionEvent::Undelivered {
            line_type: "user".into(),
            uuid: Some("u".into()),
            preview: "{".into(),
            prompt: true,
        },
        SessionEvent::Sent { line_type: "user".into(), uuid: Some("u".into()), request_id: None },
        SessionEvent::Resent {
            line_type: "control_response/success".into(),
            uuid: None,
            request_id: Some("r1".into()),
            reason: "lost".into(),
        },
        SessionEvent::Exited {
            code: Some(1),
            signal: None,
            requested: false,
            description: "exited with 1".into(),
        },
    ];
    for event in &events {
        let stored = event.to_json_text();
        let back = SessionEvent::from_stored(event.kind(), &stored).expect("reads back");
        assert_eq!(back.to_json(), event.to_json(), "{}", event.kind());
    }
    let error = SessionEvent::from_stored("started", "{}").unwrap_err();
    assert_eq!(error.to_string(), "stored started event: `started` is not a session event");
    // A line of a known type that does not fit reads back as its drift form, with the note.
    let drifted = SessionEvent::from_stored(
        "line",
        "{\"direction\":\"from_cli\",\"line\":{\"type\":\"result\"},\"event\":\"line\"}",
    )
    .unwrap();
    let SessionEvent::Line(line) = &drifted else { panic!("{drifted:?}") };
    assert!(matches!(line.message.as_ref(), Message::Drift(_)));
    let note = drifted.to_json()["drift"].as_str().unwrap().to_owned();
    assert!(note.contains("missing field `subtype`"), "{note}");
    let again = SessionEvent::from_stored("line", &drifted.to_json_text()).unwrap();
    assert_eq!(again.to_json(), drifted.to_json());
    // Only what is not a JSON object is unreadable.
    assert!(SessionEvent::from_stored("line", "{\"direction\":\"from_cli\",\"line\":[1]}").is_err());
}

/// Its kind, checked against the tag it serializes with.
fn kind(update: &Update) -> &'static str {
    let value = serde_json::to_value(update).expect("serializes");
    assert_eq!(value["update"], update.kind());
    update.kind()
}

#[test]
fn a_line_that_does_not_fit_is_noted_and_read_as_far_as_it_fits() {
    let mut projector = Projector::new();
    // 2.1.120 writes the retry delay as a float: read, not a drift.
    let updates = run(
        &mut projector,
        &[cli(
            json!({"type":"system","subtype":"api_retry","attempt":1,"max_retries":10,"retry_delay_ms":559.92,"error_status":529,"error":"overloaded","session_id":"s"}),
        )],
    );
    match updates.as_slice() {
        [Update::Notice { kind: NoticeKind::ApiRetry, text, .. }] => {
            assert!(text.contains("retry 1 of 10 in 1 s"), "{text}")
        }
        other => panic!("{other:?}"),
    }
    // A result whose usage changed shape: a drift notice, and the turn still ends.
    let updates = run(
        &mut projector,
        &[
            prompt("go"),
            cli(
                json!({"type":"result","subtype":"success","is_error":false,"result":"done","usage":"n/a","total_cost_usd":0.5,"session_id":"s"}),
            ),
        ],
    );
    let note = updates
        .iter()
        .find_map(|update| match update {
            Update::Notice { kind: NoticeKind::Drift, text, .. } => Some(text.clone()),
            _ => None,
        })
        .expect("a drift notice");
    assert!(note.contains("result/success") && note.contains("read without `usage`"), "{note}");
    assert!(
        updates.iter().any(|update| matches!(update, Update::TurnEnded { failed: false, .. })),
        "{updates:?}"
    );
    assert_eq!(projector.view().turns, 1);
}

/// The context window is the main conversation's model's, not the first model a result lists
/// (a subagent or a title may run on a smaller model): 1,000,000 for the one that answered
/// here, before and after a turn of a subagent on another model.
#[test]
fn the_context_window_is_the_answering_models() {
    let mut projector = Projector::new();
    let start = |id: &str, model: &str, parent: Option<&str>, tokens: u64| {
        stream(
            id,
            parent,
            json!({"type":"message_start","message":{"id":id,"type":"message","role":"assistant","model":model,"content":[],"usage":{"input_tokens":tokens,"output_tokens":1}}}),
        )
    };
    let result = cli(
        json!({"type":"result","subtype":"success","is_error":false,"duration_ms":10,"total_cost_usd":0.5,
            "usage":{"input_tokens":10,"output_tokens":2},
            "modelUsage":{
                "claude-haiku-4-5-20251001":{"inputTokens":5,"outputTokens":1,"costUSD":0.01,"contextWindow":200000},
                "claude-opus-5-5":{"inputTokens":10,"outputTokens":2,"costUSD":0.49,"contextWindow":1000000}}}),
    );
    let updates = run(
        &mut projector,
        &[
            prompt("go"),
            start("m1", "claude-opus-5-5", None, 1200),
            start("m2", "claude-haiku-4-5-20251001", Some("toolu_sub"), 50),
            result,
        ],
    );
    let ended = updates
        .iter()
        .find_map(|u| match u {
            Update::TurnEnded { context_tokens, context_window, .. } => {
                Some((*context_tokens, *context_window))
            }
            _ => None,
        })
        .expect("a turn end");
    assert_eq!(ended, (Some(1200), Some(1_000_000)));
    assert_eq!(projector.view().context_window, Some(1_000_000));

    // Unknown model: one window is unambiguous, two are not.
    let totals = |windows: &[(&str, u64)]| -> Vec<ModelTotals> {
        windows
            .iter()
            .map(|(model, window)| ModelTotals {
                model: (*model).into(),
                input_tokens: 0,
                output_tokens: 0,
                cost_usd: 0.0,
                context_window: Some(*window),
            })
            .collect()
    };
    assert_eq!(context_window_of(&totals(&[("a", 7)]), None), Some(7));
    assert_eq!(context_window_of(&totals(&[("a", 7), ("b", 9)]), None), None);
    assert_eq!(context_window_of(&totals(&[("a-20250101", 7), ("b", 9)]), Some("a")), Some(7));
    assert_eq!(context_window_of(&totals(&[("a", 7), ("b", 9)]), Some("a-20250101")), Some(7));
}

#[test]
fn a_partial_input_reads_as_far_as_it_has_streamed() {
    assert_eq!(
        partial_input(r#"{"file_path":"/a.rs","content":"fn ma"#),
        Some(json!({"file_path":"/a.rs","content":"fn ma"}))
    );
    assert_eq!(
        partial_input(r#"{"command":"ls","desc"#),
        Some(json!({"command":"ls"})),
        "a key without its value is left out"
    );
    assert_eq!(
        partial_input(r#"{"edits":[{"old_string":"a","new_string":"b"},{"old"#),
        Some(json!({"edits":[{"old_string":"a","new_string":"b"},{}]}))
    );
    assert_eq!(partial_input(r#"{"n":12"#), Some(json!({"n":12})));
    assert_eq!(partial_input(""), None);
    assert_eq!(partial_input("[1, 2"), None, "an input is an object");
    assert_eq!(partial_input("{\"a\": tru}"), None, "not JSON");
}

#[test]
fn a_streamed_input_is_given_parsed_often_at_first_then_at_a_bounded_total_cost() {
    let mut projector = Projector::new();
    // A Write of 64 KiB in 8-byte fragments: 8,000 deltas.
    let content = "abcdefg ".repeat(8 * 1024);
    let text = json!({"file_path": "/tmp/big.txt", "content": content}).to_string();
    let fragments: Vec<&str> =
        text.as_bytes().chunks(8).map(|chunk| std::str::from_utf8(chunk).unwrap()).collect();
    let updates = run(&mut projector, &tool_stream("m1", &fragments));
    let parsed: Vec<&Value> = updates
        .iter()
        .filter_map(|update| match update {
            Update::ToolInputDelta { partial_input: Some(input), .. } => Some(input),
            _ => None,
        })
        .collect();
    let sizes: Vec<usize> =
        parsed.iter().map(|input| input["content"].as_str().map_or(0, str::len)).collect();
    assert!(sizes.windows(2).all(|pair| pair[0] <= pair[1]), "the content only grows");
    assert!(parsed.len() > 10 && parsed.len() < 200, "{} parses of 8,000 fragments", parsed.len());
    let total: usize = parsed.iter().map(|input| input.to_string().len()).sum();
    assert!(
        total < 12 * text.len(),
        "what is carried stays a bounded multiple of the input: {total}"
    );
    assert!(*sizes.last().unwrap() > content.len() * 7 / 8, "the last one is close to whole");
}

#[test]
fn a_transcript_shows_the_clis_prompts_once_and_ends_turns_without_a_result() {
    let mut projector = Projector::new();
    projector.set_transcript();
    let typed = cli(
        json!({"type":"user","message":{"role":"user","content":"LIST the files"},"uuid":"t1","sessionId":"s","promptSource":"typed"}),
    );
    let updates = run(
        &mut projector,
        &[
            // Ours, typed into the terminal: shown when the CLI writes it, not twice.
            prompt("LIST the files"),
            typed,
            assistant("m1", None, json!({"type":"text","text":"Listing."})),
            cli(json!({"type":"mode","mode":"normal","sessionId":"s"})),
            cli(json!({"type":"system","subtype":"turn_duration","durationMs":449,"uuid":"x"})),
        ],
    );
    let prompts: Vec<_> =
        updates.iter().filter(|update| matches!(update, Update::Prompt { .. })).collect();
    assert_eq!(prompts.len(), 1, "{updates:?}");
    assert!(
        matches!(prompts[0], Update::Prompt { text, uuid, .. } if text == "LIST the files" && uuid.as_deref() == Some("t1"))
    );
    assert!(updates.iter().any(|update| matches!(
        update,
        Update::TurnEnded { duration_ms: 449, interrupted: false, failed: false, .. }
    )));
    assert_eq!(projector.view().turns, 1);
    assert_eq!(projector.view().open_turns, 0);
    let stopped = run(
        &mut projector,
        &[
            cli(json!({"type":"user","message":{"role":"user","content":"SLOW"},"uuid":"t2"})),
            cli(
                json!({"type":"user","message":{"role":"user","content":[{"type":"text","text":"[Request interrupted by user]"}]},"uuid":"t3"}),
            ),
        ],
    );
    assert!(stopped
        .iter()
        .any(|update| matches!(update, Update::TurnEnded { interrupted: true, .. })));
    assert_eq!(projector.view().turns, 2);
}

#[test]
fn a_rewind_is_told_once_answered_and_one_that_could_not_says_why() {
    let rewind = |id: &str, dry_run: bool| {
        line(
            LineDirection::ToCli,
            json!({"type":"control_request","request_id":id,"request":{"subtype":"rewind_files","user_message_id":"u-1","dry_run":dry_run}}),
        )
    };
    let answer = |id: &str, response: Value| {
        cli(
            json!({"type":"control_response","response":{"subtype":"success","request_id":id,"response":response}}),
        )
    };
    let kinds = |updates: &[Update]| -> Vec<(&'static str, String)> {
        updates
            .iter()
            .filter_map(|update| match update {
                Update::Notice { kind, text, .. } => Some((kind.as_str(), text.clone())),
                _ => None,
            })
            .collect()
    };
    let mut projector = Projector::new();
    // A dry run tells nothing; a rewind that could not says why; one that did says so.
    let updates = run(
        &mut projector,
        &[
            rewind("r1", true),
            answer("r1", json!({"canRewind": true, "filesChanged": ["/a"]})),
            rewind("r2", false),
            answer(
                "r2",
                json!({"canRewind": false, "error": "No file checkpoint found for this message."}),
            ),
            rewind("r3", false),
            answer("r3", json!({"canRewind": true})),
        ],
    );
    let told = kinds(&updates);
    assert_eq!(told.len(), 2, "{told:?}");
    assert_eq!(told[0].0, "rewind_failed");
    assert!(told[0].1.contains("No file checkpoint"), "{told:?}");
    assert_eq!(told[1].0, "rewound");
    // A rewind whose CLI exits before it answers is forgotten with it.
    run(&mut projector, &[rewind("r4", false)]);
    projector.end_run();
    let updates = run(&mut projector, &[answer("r4", json!({"canRewind": true}))]);
    assert!(kinds(&updates).is_empty());
}

fn notices(updates: &[Update]) -> Vec<(NoticeKind, Level, String)> {
    updates
        .iter()
        .filter_map(|update| match update {
            Update::Notice { kind, level, text } => Some((*kind, *level, text.clone())),
            _ => None,
        })
        .collect()
}

/// As 2.1.332 writes them: `/clear` resets the CLI's running total (0.00028 → 0 → 0.00014);
/// the session's cost adds up across it, and a turn after it costing more than everything
/// before it counts whole.
#[test]
fn a_clear_never_lowers_the_sessions_cost() {
    let mut projector = Projector::new();
    let reset = cli(
        json!({"type":"conversation_reset","new_conversation_id":"c2","uuid":"c2","trigger":"clear","user_message_uuid":"u","timestamp":"2026-11-29T10:46:43.363Z","session_id":"s"}),
    );
    let updates = run(&mut projector, &[result(0.10, "success"), result(0.30, "success"), reset]);
    assert!(updates.contains(&Update::ConversationReset { trigger: Some("clear".into()) }));
    let told = notices(&updates);
    assert_eq!(told.len(), 1);
    assert_eq!(told[0].0, NoticeKind::ConversationReset);
    assert!(told[0].2.contains("cleared (/clear)"), "{}", told[0].2);
    let updates = run(&mut projector, &[result(0.0, "success"), result(0.50, "success")]);
    let Some(Update::TurnEnded { cost_usd, total_cost_usd, .. }) = updates.last() else {
        panic!("{updates:?}")
    };
    assert!((cost_usd - 0.50).abs() < 1e-9, "the turn whole: {cost_usd}");
    assert!((total_cost_usd - 0.80).abs() < 1e-9, "{total_cost_usd}");
    assert!((projector.view().cost_usd - 0.80).abs() < 1e-9);
    assert_eq!(projector.view().conversation_resets, 1);
}

/// 2.1.332 with a claude.ai login: the window the event is about, and `unifiedWindows` with
/// every window's figures; a 429's `rejected` wins for its window.
#[test]
fn rate_limit_events_become_usage_windows_and_a_limit_a_notice() {
    let mut projector = Projector::new();
    let near = cli(
        json!({"type":"rate_limit_event","rate_limit_info":{"status":"allowed","resetsAt":1795952999,"rateLimitType":"five_hour","isUsingOverage":false,
        "unifiedWindows":{"five_hour":{"utilization":0.82,"resetsAt":1795952999,"status":"allowed_warning"},"seven_day":{"utilization":0.4,"resetsAt":1796035799,"status":"allowed"}}},
        "uuid":"r1","session_id":"s"}),
    );
    let updates = run(&mut projector, &[near]);
    let windows = &projector.view().usage_windows;
    assert_eq!(windows.len(), 2, "{windows:?}");
    assert_eq!(
        windows[0],
        UsageWindow {
            window: "five_hour".into(),
            status: "allowed_warning".into(),
            utilization: Some(0.82),
            resets_at: Some(1795952999)
        }
    );
    assert_eq!(windows[1].window, "seven_day");
    assert!(matches!(&updates[0], Update::UsageWindows { windows } if windows.len() == 2));
    assert!(notices(&updates).is_empty(), "allowed: no notice");
    let rejected = cli(
        json!({"type":"rate_limit_event","rate_limit_info":{"status":"rejected","resetsAt":1795952999,"rateLimitType":"five_hour","isUsingOverage":false},"uuid":"r2","session_id":"s"}),
    );
    let updates = run(&mut projector, std::slice::from_ref(&rejected));
    let windows = &projector.view().usage_windows;
    assert_eq!((windows[0].window.as_str(), windows[0].status.as_str()), ("five_hour", "rejected"));
    assert_eq!(windows[0].utilization, None, "this event said none");
    assert_eq!(windows.len(), 2, "seven_day kept");
    let told = notices(&updates);
    assert_eq!(
        told,
        [(NoticeKind::RateLimited, Level::Error, "The five_hour usage limit is reached.".into())]
    );
    // The CLI says it again at each retry: told once.
    assert!(notices(&run(&mut projector, &[rejected])).is_empty());
}

/// The system lines of 2.1.330 that are words for a person: each a typed notice.
#[test]
fn informational_denied_and_notification_lines_are_notices() {
    let mut projector = Projector::new();
    let updates = run(
        &mut projector,
        &[
            cli(
                json!({"type":"system","subtype":"informational","content":"Auto mode can't check actions in this session.","level":"warning","uuid":"i","session_id":"s"}),
            ),
            cli(
                json!({"type":"system","subtype":"permission_denied","tool_name":"Bash","tool_use_id":"t","decision_reason_type":"classifier","decision_reason_code":"auto_mode_no_check_in_session","decision_reason":"Classifier unavailable","message":"Auto mode is unavailable","uuid":"d","session_id":"s"}),
            ),
            cli(
                json!({"type":"system","subtype":"notification","key":"k","text":"Update available","priority":"low","uuid":"n","session_id":"s"}),
            ),
            cli(
                json!({"type":"system","subtype":"informational","content":"Stop hook said no","level":"info","prevent_continuation":true,"uuid":"j","session_id":"s"}),
            ),
        ],
    );
    assert_eq!(
        notices(&updates),
        [
            (
                NoticeKind::Informational,
                Level::Warn,
                "Auto mode can't check actions in this session.".into()
            ),
            (
                NoticeKind::PermissionDenied,
                Level::Warn,
                "Claude Code refused Bash without asking: Classifier unavailable".into()
            ),
            (NoticeKind::Notification, Level::Info, "Update available".into()),
            (
                NoticeKind::Informational,
                Level::Info,
                "Stop hook said no (the turn stops here)".into()
            ),
        ]
    );
}

/// A refusal retried on a fallback model takes the refused messages back: out of the view,
/// with a notice.
#[test]
fn a_refusal_fallback_retracts_what_was_refused() {
    let mut projector = Projector::new();
    let updates = run(
        &mut projector,
        &[cli(
            json!({"type":"system","subtype":"model_refusal_fallback","trigger":"refusal","direction":"retry","scope":"session","original_model":"claude-opus-5-5","fallback_model":"claude-sonnet-5","request_id":null,"retracted_message_uuids":["a-m1","a-m1-1"],"refused_user_message_uuid":"u-1","content":"Retried on Sonnet","uuid":"f","session_id":"s"}),
        )],
    );
    assert_eq!(updates[0], Update::Retracted { uuids: vec!["a-m1".into(), "a-m1-1".into()] });
    let told = notices(&updates);
    assert_eq!(told[0].0, NoticeKind::Refusal);
    assert!(told[0].2.contains("asked claude-sonnet-5 instead"), "{}", told[0].2);
}

#[test]
fn a_cancelled_prompt_is_told_and_no_turn_waits_for_it() {
    let mut projector = Projector::new();
    let updates = run(
        &mut projector,
        &[
            prompt("one"),
            prompt("two"),
            cli(
                json!({"type":"command_lifecycle","command_uuid":"u-two","state":"cancelled","uuid":"x","session_id":"s"}),
            ),
            result(0.01, "success"),
        ],
    );
    assert!(updates.contains(&Update::PromptCancelled { uuid: "u-two".into() }));
    assert!(!updates.contains(&Update::Dequeued), "nothing was left to run: {updates:?}");
    assert_eq!(projector.view().open_turns, 0);
}

/// 2.1.330 with a prompt sent `priority: now`: the running turn stops, and its prompt is then
/// said `cancelled`; it ran, so nothing is told of it.
#[test]
fn a_steered_turns_cancelled_prompt_is_not_a_dropped_one() {
    let mut projector = Projector::new();
    let lifecycle = |uuid: &str, state: &str| {
        cli(
            json!({"type":"command_lifecycle","command_uuid":uuid,"state":state,"uuid":"x","session_id":"s"}),
        )
    };
    let updates = run(
        &mut projector,
        &[
            prompt("one"),
            lifecycle("u-one", "started"),
            prompt("two"),
            result(0.01, "success"),
            lifecycle("u-one", "cancelled"),
            lifecycle("u-two", "started"),
            result(0.02, "success"),
        ],
    );
    assert!(
        !updates.iter().any(|update| matches!(update, Update::PromptCancelled { .. })),
        "{updates:?}"
    );
    assert_eq!(projector.view().open_turns, 0);
}

/// 2.1.330's background tasks: the whole set in each `background_tasks_changed`, and how one
/// ended in its `task_notification` (a notice, and off the list even when no new set follows).
#[test]
fn background_tasks_are_listed_and_an_ended_one_is_told() {
    let mut projector = Projector::new();
    let started = cli(json!({"type":"system","subtype":"background_tasks_changed","tasks":[
            {"task_id":"bqi1p1xmf","run_id":"r","task_type":"local_bash","description":"Sleep a while"},
            {"task_id":"a2a8","task_type":"local_agent","subagent_type":"general-purpose","description":"Background helper"}],
        "uuid":"b1","session_id":"s"}));
    let updates = run(&mut projector, std::slice::from_ref(&started));
    let tasks = &projector.view().background_tasks;
    assert_eq!(tasks.len(), 2);
    assert_eq!(
        tasks[1],
        BackgroundTask {
            task_id: "a2a8".into(),
            task_type: Some("local_agent".into()),
            description: Some("Background helper".into()),
            subagent_type: Some("general-purpose".into()),
        }
    );
    assert!(matches!(&updates[0], Update::BackgroundTasks { tasks } if tasks.len() == 2));
    assert!(run(&mut projector, &[started]).is_empty(), "the same set again: nothing new");
    let stopped = cli(
        json!({"type":"system","subtype":"task_notification","task_id":"bqi1p1xmf","tool_use_id":"t1","status":"stopped","output_file":"/tmp/x","summary":"Sleep a while","uuid":"n1","session_id":"s"}),
    );
    let updates = run(&mut projector, std::slice::from_ref(&stopped));
    assert_eq!(projector.view().background_tasks.len(), 1);
    assert_eq!(
        notices(&updates),
        [(
            NoticeKind::BackgroundTask,
            Level::Info,
            "Background: “Sleep a while” was stopped.".into()
        )]
    );
    assert!(run(&mut projector, &[stopped]).is_empty(), "told once");
    // A task the turn waited for (not in the background) is not told.
    let foreground = cli(
        json!({"type":"system","subtype":"task_notification","task_id":"sub-1","status":"completed","uuid":"n2","session_id":"s"}),
    );
    assert!(run(&mut projector, &[foreground]).is_empty());

    // 2.1.250 lists the set without the task first, then says how it ended: told all the same,
    // once.
    let emptied = cli(
        json!({"type":"system","subtype":"background_tasks_changed","tasks":[],"uuid":"b2","session_id":"s"}),
    );
    let updates = run(&mut projector, &[emptied]);
    assert_eq!(updates, [Update::BackgroundTasks { tasks: vec![] }]);
    let ended = cli(
        json!({"type":"system","subtype":"task_notification","task_id":"a2a8","status":"completed","uuid":"n3","session_id":"s"}),
    );
    let updates = run(&mut projector, std::slice::from_ref(&ended));
    assert_eq!(
        notices(&updates),
        [(
            NoticeKind::BackgroundTask,
            Level::Info,
            "Background: “Background helper” finished.".into()
        )]
    );
    assert_eq!(updates.len(), 1, "the list is already empty: {updates:?}");
    assert!(run(&mut projector, &[ended]).is_empty(), "told once");
}

/// What the person might type next (2.1.120 on, asked for in `initialize`): one line of text,
/// kept until a prompt is sent.
#[test]
fn a_prompt_suggestion_is_offered_until_a_prompt_is_sent() {
    let mut projector = Projector::new();
    let suggested = cli(
        json!({"type":"prompt_suggestion","suggestion":"run the\ntests","uuid":"p1","session_id":"s"}),
    );
    let updates = run(&mut projector, &[suggested]);
    assert_eq!(updates, [Update::PromptSuggestion { suggestion: "run the tests".into() }]);
    assert_eq!(projector.view().prompt_suggestion.as_deref(), Some("run the tests"));
    let blank =
        cli(json!({"type":"prompt_suggestion","suggestion":"  ","uuid":"p2","session_id":"s"}));
    assert!(run(&mut projector, &[blank]).is_empty(), "nothing to offer");
    run(&mut projector, &[prompt("something else")]);
    assert_eq!(projector.view().prompt_suggestion, None);
}

/// Every real CLI transcript in the protocol's fixtures, projected once straight through and
/// once with the projector written out and read back before every event: it writes the same
/// again, and gives the same updates and the same view, so a checkpoint stored anywhere in a session goes on as if never stored.
#[test]
fn a_projector_read_back_from_what_it_wrote_goes_on_the_same() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../protocol/tests/fixtures");
    let mut files = Vec::new();
    for folder in std::fs::read_dir(&root).unwrap() {
        let folder = folder.unwrap().path();
        if folder.is_dir() {
            for file in std::fs::read_dir(&folder).unwrap() {
                files.push(file.unwrap().path());
            }
        }
    }
    files.sort();
    let mut projected = 0;
    for file in files.iter().filter(|file| file.extension().is_some_and(|ext| ext == "ndjson")) {
        let text = std::fs::read_to_string(file).unwrap();
        let events: Vec<SessionEvent> = text
            .lines()
            .filter_map(|entry| {
                let entry: Value = serde_json::from_str(entry).ok()?;
                // `in`: written by the CLI; `out`: by the capture client.
                let direction = match entry.get("dir")?.as_str()? {
                    "in" => LineDirection::FromCli,
                    "out" => LineDirection::ToCli,
                    _ => return None,
                };
                let raw = entry.get("msg")?.to_string();
                let message = Message::decode_str(&raw).ok()?;
                Some(SessionEvent::Line(WireLine {
                    direction,
                    raw: Arc::from(raw.as_str()),
                    message: Arc::new(message),
                }))
            })
            .collect();
        for mut straight in [Projector::new(), Projector::without_partial_inputs()] {
            let mut stored = straight.clone();
            for (n, event) in events.iter().enumerate() {
                let written = serde_json::to_value(&stored).unwrap();
                stored = serde_json::from_value(written.clone()).unwrap();
                // Objects compare whatever their order (a map's is its hasher's).
                assert_eq!(
                    serde_json::to_value(&stored).unwrap(),
                    written,
                    "{}: read back before event {n}, it writes otherwise",
                    file.display()
                );
                assert_eq!(
                    stored.updates(event),
                    straight.updates(event),
                    "{}: event {n}",
                    file.display()
                );
            }
            assert_eq!(stored.view(), straight.view(), "{}", file.display());
            projected += events.len();
        }
    }
    assert!(projected > 1000, "the fixtures hold {projected} events");
}
