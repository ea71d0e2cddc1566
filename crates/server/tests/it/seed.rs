//! A long stored session, for the tests of its pages and for the bench that opens one in a
//! browser (`benches/open.rs` includes this file).

use serde_json::{json, Value};
use switchboard_store::{EventRecord, SessionRecord, Store};

/// Stores session `id`: `turns` turns of ten events each (a prompt, a streamed answer with its
/// message, a result whose cost grows by $0.001 a turn), stored from `now` (Unix ms) on, one
/// millisecond apart.
pub(crate) async fn long_session(store: &dyn Store, id: &str, turns: usize, now: u64) {
    long_session_costing(store, id, turns, now, 0.001).await;
}

/// As [`long_session`], each turn costing `step` dollars.
pub(crate) async fn long_session_costing(
    store: &dyn Store,
    id: &str,
    turns: usize,
    now: u64,
    step: f64,
) {
    store
        .create_session(&SessionRecord {
            archived: false,
            node: None,
            id: id.into(),
            claude_session_id: Some(format!("claude-{id}")),
            cwd: "/tmp/long-project".into(),
            model: Some("claude-opus-5-5".into()),
            permission_mode: Some("default".into()),
            state: switchboard_store::RecordState::Exited,
            title: Some("A long session".into()),
            cost_usd: 0.0,
            spent_usd: 0.0,
            created_ms: now,
            updated_ms: now,
            launch: switchboard_store::Launch {
                cwd: "/tmp/long-project".into(),
                ..Default::default()
            },
        })
        .await
        .unwrap();
    add_turns(store, id, 1..=turns, now, step).await;
}

/// Stores turns `turns` more of session `id` (as [`long_session_costing`] stores them), after
/// its last event.
pub(crate) async fn add_turns(
    store: &dyn Store,
    id: &str,
    turns: std::ops::RangeInclusive<usize>,
    now: u64,
    step: f64,
) {
    let mut seq = store.last_seq(id).await.unwrap();
    let mut events = Vec::new();
    let mut push = |dir: &str, line: Value| {
        seq += 1;
        let direction = if dir == "to_cli" { "to_cli" } else { "from_cli" };
        events.push(EventRecord {
            session_id: id.into(),
            seq,
            ts_ms: now + seq,
            dir: direction.into(),
            kind: "line".into(),
            payload: json!({"event": "line", "direction": direction, "line": line}).to_string(),
        });
    };
    for turn in turns {
        let message = format!("msg_{turn}");
        push(
            "to_cli",
            json!({"type": "user", "message": {"role": "user", "content": format!("Question number {turn}")}, "parent_tool_use_id": null, "session_id": ""}),
        );
        push(
            "from_cli",
            json!({"type": "stream_event", "api_message_id": message, "event": {"type": "message_start", "message": {"id": message, "type": "message", "role": "assistant", "content": [], "usage": {"input_tokens": 100 + turn, "output_tokens": 1}}}}),
        );
        push(
            "from_cli",
            json!({"type": "stream_event", "api_message_id": message, "event": {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}}),
        );
        for word in ["Answer ", "number ", &format!("{turn} ")] {
            push(
                "from_cli",
                json!({"type": "stream_event", "api_message_id": message, "event": {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": word}}}),
            );
        }
        push(
            "from_cli",
            json!({"type": "assistant", "uuid": format!("uuid-{turn}"), "message": {"id": message, "role": "assistant", "content": [{"type": "text", "text": format!("Answer number **{turn}**, with `code`.")}], "usage": {"input_tokens": 100 + turn, "output_tokens": 10}}}),
        );
        push(
            "from_cli",
            json!({"type": "stream_event", "api_message_id": message, "event": {"type": "content_block_stop", "index": 0}}),
        );
        push(
            "from_cli",
            json!({"type": "stream_event", "api_message_id": message, "event": {"type": "message_stop"}}),
        );
        push(
            "from_cli",
            json!({"type": "result", "subtype": "success", "is_error": false, "duration_ms": 1200, "total_cost_usd": step * turn as f64, "usage": {"input_tokens": 100 + turn, "output_tokens": 10}, "modelUsage": {"claude-opus-5-5": {"inputTokens": 100 * turn, "outputTokens": 10 * turn, "costUSD": step * turn as f64, "contextWindow": 200000}}}),
        );
    }
    for page in events.chunks(500) {
        store.append(page).await.unwrap();
    }
}
