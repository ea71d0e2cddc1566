//! Tool calls a crash cannot re-run: a call whose start is in a run's log and whose result is
//! not is **unsettled**. Its CLI ended while it ran (killed, crashed, stopped, its daemon gone),
//! so whether it took effect is unknown, and Claude Code on its own does not always say so: the
//! real 2.1.37 and 2.1.120, resumed, drop the call from the conversation (the model reads "No
//! response requested." where its call was), and 2.1.330 gives it a result of its own ("Tool
//! call interrupted … its outcome is unknown"). Before such a session runs again, each is
//! settled (`interrupted`: its outcome is unknown; `done`: it took effect, with a note), and the
//! resumed run's first prompt tells the model.
//!
//! Pure: a run's stored events in ([`OpenCalls::read`]), read through the projection; the
//! calls started and not answered out. A call the policy or a person denied never ran, nor
//! did one parked for a person's answer or one whose request was still waiting for a person
//! when its CLI ended.

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::event::SessionEvent;
use crate::policy::Behavior;
use crate::projection::{Block, Projector, Update};

/// The most open calls a run's reader holds (a run has a handful in flight at once).
pub const MAX_OPEN: usize = 1024;

/// A call started and never answered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UnsettledCall {
    /// The call's id.
    pub tool_use_id: String,
    /// The tool.
    pub tool_name: String,
    /// Its input.
    pub input: Value,
    /// The log's sequence number of the event that showed it.
    pub seq: u64,
}

/// How a person (or the policy's `on_unsettled`) settles a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Settle {
    /// Its outcome is unknown: the model is told to check before relying on it or running it
    /// again.
    Interrupted,
    /// It took effect: the model is told so (with the note).
    Done,
}

/// Reads one run's events; what is open at the end is unsettled.
#[derive(Debug)]
pub struct OpenCalls {
    projector: Projector,
    open: IndexMap<String, UnsettledCall>,
    /// Calls put to a person and not answered: they never ran.
    waiting: std::collections::HashSet<String>,
}

impl Default for OpenCalls {
    fn default() -> Self {
        OpenCalls::new()
    }
}

impl OpenCalls {
    /// A reader of a run from its start.
    pub fn new() -> OpenCalls {
        OpenCalls {
            projector: Projector::without_partial_inputs(),
            open: IndexMap::new(),
            waiting: std::collections::HashSet::new(),
        }
    }

    /// Reads event `seq`.
    pub fn read(&mut self, seq: u64, event: &SessionEvent) {
        let mut updates = Vec::new();
        self.projector.apply(event, &mut |update| updates.push(update));
        for update in updates {
            match update {
                Update::Block {
                    block: Block::ToolUse { tool_use_id, name, input, .. }, ..
                } => {
                    if let Some(known) = self.open.get_mut(&tool_use_id) {
                        known.input = input;
                        continue;
                    }
                    if self.open.len() >= MAX_OPEN {
                        self.open.shift_remove_index(0);
                    }
                    let call = UnsettledCall {
                        tool_use_id: tool_use_id.clone(),
                        tool_name: name,
                        input,
                        seq,
                    };
                    self.open.insert(tool_use_id, call);
                }
                Update::ToolResult { tool_use_id, .. } => {
                    self.open.shift_remove(&tool_use_id);
                }
                Update::PermissionDecided { tool_use_id: Some(id), behavior, .. } => {
                    self.waiting.remove(&id);
                    if behavior == Behavior::Deny {
                        self.open.shift_remove(&id);
                    }
                }
                // Parked: it never ran, and waits for a person's answer with no process.
                Update::PermissionAsked(pending) if pending.parked_at_ms.is_some() => {
                    if let Some(id) = &pending.tool_use_id {
                        self.open.shift_remove(id);
                    }
                }
                // Put to a person: it runs only once they allow it.
                Update::PermissionAsked(pending) => {
                    if let Some(id) = pending.tool_use_id {
                        if self.waiting.len() < MAX_OPEN {
                            self.waiting.insert(id);
                        }
                    }
                }
                _ => {}
            }
        }
    }

    /// A call settled since (by a person or the policy).
    pub fn settled(&mut self, tool_use_id: &str) {
        self.open.shift_remove(tool_use_id);
    }

    /// The calls still open: started, never answered, and not waiting for a person (a call
    /// whose request died with its CLI or daemon never ran).
    pub fn open(&self) -> Vec<UnsettledCall> {
        self.open
            .values()
            .filter(|call| !self.waiting.contains(&call.tool_use_id))
            .cloned()
            .collect()
    }
}

/// What the resumed run's first prompt tells the model of the calls settled before it.
pub fn note_for_model(settled: &[(UnsettledCall, Settle, Option<String>)]) -> Option<String> {
    if settled.is_empty() {
        return None;
    }
    let mut text = String::from(
        "Switchboard: this session's last run ended while tool calls were running; their results were never recorded.",
    );
    for (call, settle, note) in settled {
        let what = crate::policy::trial::summary(&call.tool_name, &call.input);
        let said = match settle {
            Settle::Interrupted => "its outcome is unknown: check whether it took effect before relying on it, and do not run it again without checking".to_owned(),
            Settle::Done => match note {
                Some(note) => format!("it took effect (a person confirmed: {note}); do not run it again"),
                None => "it took effect (a person confirmed); do not run it again".to_owned(),
            },
        };
        text.push_str(&format!(
            "\n- {} `{what}` (call {}): {said}.",
            call.tool_name, call.tool_use_id
        ));
    }
    Some(text)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::{json, Value};
    use switchboard_protocol::Message;

    use super::*;
    use crate::event::{DecidedBy, LineDirection, PendingPermission, WireLine};

    fn line(direction: LineDirection, value: Value) -> SessionEvent {
        let raw = value.to_string();
        let message = Message::decode_str(&raw).expect("a protocol line");
        SessionEvent::Line(WireLine {
            direction,
            raw: Arc::from(raw.as_str()),
            message: Arc::new(message),
        })
    }

    fn call(id: &str) -> SessionEvent {
        line(
            LineDirection::FromCli,
            json!({"type":"assistant","message":{"id":format!("m-{id}"),"type":"message","role":"assistant",
                "model":"m","content":[{"type":"tool_use","id":id,"name":"Bash","input":{"command":format!("deploy {id}")}}]},
                "parent_tool_use_id":null,"session_id":"s","uuid":format!("a-{id}")}),
        )
    }

    fn result(id: &str) -> SessionEvent {
        line(
            LineDirection::FromCli,
            json!({"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":id,"content":"ok"}]},
                "parent_tool_use_id":null,"session_id":"s","uuid":format!("u-{id}")}),
        )
    }

    fn asked(id: &str, parked: bool) -> SessionEvent {
        SessionEvent::PermissionRequested(PendingPermission {
            request_id: format!("r-{id}"),
            tool_name: "Bash".into(),
            input: json!({}),
            tool_use_id: Some(id.into()),
            suggestions: Vec::new(),
            reason: String::new(),
            agent_id: None,
            timeout_secs: 600,
            asked_at_ms: 0,
            always_allows: String::new(),
            started_by: None,
            origin: None,
            rule: None,
            cli_reason: None,
            hints: Default::default(),
            parked_at_ms: parked.then_some(1),
            park_expires_at_ms: None,
        })
    }

    fn decided(id: &str, behavior: Behavior) -> SessionEvent {
        SessionEvent::decided(
            &format!("r-{id}"),
            "Bash",
            behavior,
            DecidedBy::Person { who: "a".into() },
            String::new(),
        )
        .with_tool_use_id(Some(id.into()))
    }

    #[test]
    fn only_calls_that_may_have_run_and_have_no_result_are_unsettled() {
        let mut calls = OpenCalls::new();
        let events = [
            call("done"),
            result("done"),
            call("ran-unasked"),
            call("allowed"),
            asked("allowed", false),
            decided("allowed", Behavior::Allow),
            call("denied"),
            asked("denied", false),
            decided("denied", Behavior::Deny),
            call("waiting"),
            asked("waiting", false),
            call("parked"),
            asked("parked", true),
            call("settled"),
        ];
        for (seq, event) in events.iter().enumerate() {
            calls.read(seq as u64 + 1, event);
        }
        calls.settled("settled");
        let open: Vec<String> = calls.open().into_iter().map(|call| call.tool_use_id).collect();
        assert_eq!(open, ["ran-unasked", "allowed"]);
        let note =
            note_for_model(&[(calls.open()[1].clone(), Settle::Done, Some("shipped".into()))])
                .unwrap();
        assert!(note.ends_with("- Bash `deploy allowed` (call allowed): it took effect (a person confirmed: shipped); do not run it again."), "{note}");
    }
}
