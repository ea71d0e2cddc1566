//! A session's spans, read from its projection's updates: a [`SessionTracer`] per session
//! turns each update into the spans that ended with it. A turn is a span (the root of a trace
//! of its own); each tool call a child of the turn (a subagent's calls, of the Task/Agent call
//! that ran them); each wait for a person's answer a child of the call it asks about. A
//! decision made without waiting (a policy's) is an event on its call's span.
//!
//! Every id is derived from what the log holds, never drawn at random: a turn's trace from
//! its session and the seq of the event that began it, a call's span from its `tool_use_id`,
//! a wait's from its request id. Any node that reads the same session names the same trace,
//! and a trace id can be worked out from a session and a seq ([`turn_trace_id`]).

use std::collections::{HashMap, VecDeque};

use opentelemetry::trace::{SpanId, Status, TraceId};
use opentelemetry::KeyValue;
use sha2::{Digest, Sha256};
use switchboard_session::projection::Block;
use switchboard_session::{Behavior, DecidedBy, SessionState, Update};

/// Calls and waits a turn keeps open at most: past it, new ones are not traced (a CLI that
/// starts calls and never ends them cannot grow the daemon).
pub const MAX_OPEN: usize = 1024;
/// Events a span keeps at most.
pub const MAX_EVENTS: usize = 16;
/// An attribute's text is cut to this many bytes.
pub const MAX_TEXT: usize = 256;
/// The longest a turn begun before this node read it is taken to have run.
const DAY_MS: u64 = 86_400_000;

/// A span that ended, with everything it is exported with.
#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    /// Its trace (its turn's).
    pub trace_id: TraceId,
    /// Its own id.
    pub span_id: SpanId,
    /// Its parent's, `None` for a turn.
    pub parent: Option<SpanId>,
    /// `turn`, `execute_tool Bash`, `permission Bash`.
    pub name: String,
    /// When it began (Unix milliseconds).
    pub start_ms: u64,
    /// When it ended (Unix milliseconds).
    pub end_ms: u64,
    /// What it was: its session, tool, decision, cost, ...
    pub attributes: Vec<KeyValue>,
    /// Its events: a name, when, and their attributes.
    pub events: Vec<(String, u64, Vec<KeyValue>)>,
    /// Ok, an error with why, or unset (ended without an outcome).
    pub status: Status,
}

/// The trace of a session's turn that began with the event at `seq`.
pub fn turn_trace_id(session: &str, seq: u64) -> TraceId {
    let parts: [&[u8]; 4] = [b"switchboard trace\0", session.as_bytes(), &[0], &seq.to_be_bytes()];
    TraceId::from_bytes(digest(&parts))
}

/// A span's id: of a session's `what` (`turn`, `tool`, `permission`) named `key`.
fn span_id(session: &str, what: &str, key: &str) -> SpanId {
    let parts: [&[u8]; 6] =
        [b"switchboard span\0", session.as_bytes(), &[0], what.as_bytes(), &[0], key.as_bytes()];
    SpanId::from_bytes(digest(&parts))
}

/// The first `N` bytes of SHA-256 over `parts`, one after the other; never all zero (an
/// all-zero id is invalid: one in 2^64 is made valid).
fn digest<const N: usize>(parts: &[&[u8]]) -> [u8; N] {
    let mut hash = Sha256::new();
    for part in parts {
        hash.update(part);
    }
    let mut id = [0u8; N];
    id.copy_from_slice(&hash.finalize()[..N]);
    if id == [0; N] {
        id[N - 1] = 1;
    }
    id
}

/// `text` cut to [`MAX_TEXT`] bytes, at a character's boundary.
fn cut(text: &str) -> String {
    switchboard_store::search::cut(text, MAX_TEXT).to_owned()
}

/// A span begun and not ended yet.
#[derive(Debug)]
struct Open {
    span_id: SpanId,
    parent: Option<SpanId>,
    name: String,
    start_ms: u64,
    attributes: Vec<KeyValue>,
    events: Vec<(String, u64, Vec<KeyValue>)>,
}

impl Open {
    fn event(&mut self, name: &str, ts_ms: u64, attributes: Vec<KeyValue>) {
        if self.events.len() < MAX_EVENTS {
            self.events.push((name.to_owned(), ts_ms, attributes));
        }
    }
}

/// A turn going on, with its calls and waits.
#[derive(Debug)]
struct Turn {
    trace_id: TraceId,
    /// Whether its span names the model (else it is named when the turn ends, once the CLI
    /// has said it).
    model_named: bool,
    span: Open,
    /// Its tool calls, by their spans' ids (made from their `tool_use_id`s: a CLI's long id
    /// is not kept).
    calls: HashMap<SpanId, Open>,
    /// Its waits for a person, by their spans' ids (made from their request ids).
    waits: HashMap<SpanId, Open>,
}

/// One session's spans, fed its projection's updates in order.
#[derive(Debug)]
pub struct SessionTracer {
    session: String,
    project: String,
    model: Option<String>,
    turn: Option<Turn>,
    /// Prompts sent while a turn ran, each with its seq and uuid: the next turn begins with
    /// the first of them.
    queued: VecDeque<(u64, Option<String>)>,
    /// The queued prompt that runs once the turn going on has ended (its seq).
    next: Option<u64>,
}

impl SessionTracer {
    /// The tracer of session `session`, in `project` (its directory), on `model`.
    pub fn new(session: &str, project: &str, model: Option<String>) -> SessionTracer {
        SessionTracer {
            session: session.to_owned(),
            project: project.to_owned(),
            model,
            turn: None,
            queued: VecDeque::new(),
            next: None,
        }
    }

    /// Reads `update`, of the event at `seq` stored at `ts_ms`; the spans it ended go to `out`.
    pub fn note(&mut self, seq: u64, ts_ms: u64, update: &Update, out: &mut Vec<Finished>) {
        match update {
            Update::Started { model, cwd, .. } => {
                if model.is_some() {
                    self.model.clone_from(model);
                }
                if let Some(cwd) = cwd {
                    if self.project.is_empty() {
                        self.project.clone_from(cwd);
                    }
                }
            }
            Update::Model { model } => self.model = Some(model.clone()),
            Update::Prompt { queued: true, uuid, .. } if self.queued.len() < MAX_OPEN => {
                self.queued.push_back((seq, uuid.clone()));
            }
            Update::PromptCancelled { uuid } => {
                self.queued.retain(|(_, queued)| queued.as_deref() != Some(uuid));
            }
            Update::Prompt { queued: false, .. } => {
                self.end_turn(ts_ms, Ending::Superseded, out);
                self.next = None;
                self.begin_turn(seq, ts_ms);
            }
            Update::Dequeued => {
                // Told just before the result of the turn it follows: that turn ends first,
                // then this one begins (with its prompt's seq).
                let begun = self.queued.pop_front().map_or(seq, |(seq, _)| seq);
                if self.turn.is_some() {
                    self.next = Some(begun);
                } else {
                    self.begin_turn(begun, ts_ms);
                }
            }
            Update::MessageStarted { parent_tool_use_id: None, model, .. } => {
                if model.is_some() {
                    self.model.clone_from(model);
                }
                self.turn_at(seq, ts_ms);
            }
            Update::ToolUseStarted { tool_use_id, name, parent_tool_use_id, .. } => {
                self.begin_call(seq, ts_ms, tool_use_id, name, parent_tool_use_id.as_deref());
            }
            Update::Block {
                block: Block::ToolUse { tool_use_id, name, .. },
                parent_tool_use_id,
                ..
            } => {
                self.begin_call(seq, ts_ms, tool_use_id, name, parent_tool_use_id.as_deref());
            }
            Update::ToolResult { tool_use_id, is_error, interrupted, .. } => {
                let key = span_id(&self.session, "tool", tool_use_id);
                let Some(turn) = &mut self.turn else { return };
                let Some(mut call) = turn.calls.remove(&key) else { return };
                call.attributes.push(KeyValue::new("switchboard.tool.interrupted", *interrupted));
                let status = if *is_error { Status::error("the tool failed") } else { Status::Ok };
                out.push(finish(turn.trace_id, call, ts_ms, status));
            }
            Update::PermissionAsked(pending) => {
                let session = self.session.clone();
                let key = span_id(&session, "permission", &pending.request_id);
                let call = pending.tool_use_id.as_deref().map(|id| span_id(&session, "tool", id));
                let turn = self.turn_at(seq, ts_ms);
                if turn.waits.len() >= MAX_OPEN || turn.waits.contains_key(&key) {
                    return;
                }
                // Under its call (the turn when the CLI names none), never begun before it: the
                // request's time is the actor's, its call's the store's.
                let (parent, begun) = match call.and_then(|call| turn.calls.get(&call)) {
                    Some(call) => (call.span_id, call.start_ms),
                    None => (turn.span.span_id, turn.span.start_ms),
                };
                let mut attributes = vec![
                    KeyValue::new("session.id", session.clone()),
                    KeyValue::new("gen_ai.tool.name", cut(&pending.tool_name)),
                    KeyValue::new("switchboard.permission.request_id", cut(&pending.request_id)),
                ];
                if let Some(rule) = &pending.rule {
                    attributes.push(KeyValue::new("switchboard.permission.rule", cut(rule)));
                }
                let asked = if pending.asked_at_ms > 0 { pending.asked_at_ms } else { ts_ms };
                turn.waits.insert(
                    key,
                    Open {
                        span_id: key,
                        parent: Some(parent),
                        name: format!("permission {}", cut(&pending.tool_name)),
                        start_ms: asked.max(begun),
                        attributes,
                        events: Vec::new(),
                    },
                );
            }
            Update::PermissionDecided {
                request_id,
                tool_name,
                behavior,
                by,
                tool_use_id,
                decided_at_ms,
                ..
            } => {
                let key = span_id(&self.session, "permission", request_id);
                let call = tool_use_id.as_deref().map(|id| span_id(&self.session, "tool", id));
                let Some(turn) = &mut self.turn else { return };
                let at = if *decided_at_ms > 0 { *decided_at_ms } else { ts_ms };
                let decided = decided(behavior, by);
                if let Some(mut wait) = turn.waits.remove(&key) {
                    wait.attributes.extend(decided);
                    let status = match behavior {
                        Behavior::Allow => Status::Ok,
                        Behavior::Deny | Behavior::Ask => Status::Unset,
                    };
                    out.push(finish(turn.trace_id, wait, at, status));
                } else {
                    // Decided without a wait: an event on its call (the CLI's own decision is
                    // told with the call's result, so the call may have just ended, in this
                    // batch), else on the turn.
                    let mut attributes = decided;
                    attributes.push(KeyValue::new("gen_ai.tool.name", cut(tool_name)));
                    if let Some(open) = call.and_then(|call| turn.calls.get_mut(&call)) {
                        open.event("permission", at, attributes);
                    } else if let Some(ended) = call
                        .and_then(|call| out.iter_mut().rev().find(|ended| ended.span_id == call))
                    {
                        if ended.events.len() < MAX_EVENTS {
                            ended.events.push(("permission".to_owned(), at, attributes));
                        }
                    } else {
                        turn.span.event("permission", at, attributes);
                    }
                }
            }
            Update::TurnEnded {
                parent_tool_use_id: None,
                subtype,
                interrupted,
                failed,
                duration_ms,
                input_tokens,
                output_tokens,
                cost_usd,
                ..
            } => {
                if self.turn.is_none() {
                    // Begun before this node read the session: from its reported length (a
                    // day at most: a CLI's number is not trusted to date a span).
                    self.begin_turn(seq, ts_ms.saturating_sub((*duration_ms).min(DAY_MS)));
                }
                let turn = self.turn.as_mut().expect("a turn was begun above");
                let span = &mut turn.span.attributes;
                span.push(KeyValue::new("switchboard.turn.subtype", cut(subtype)));
                span.push(KeyValue::new("switchboard.turn.interrupted", *interrupted));
                span.push(KeyValue::new("gen_ai.usage.input_tokens", *input_tokens as i64));
                span.push(KeyValue::new("gen_ai.usage.output_tokens", *output_tokens as i64));
                if cost_usd.is_finite() {
                    span.push(KeyValue::new("switchboard.cost_usd", *cost_usd));
                }
                let ending = if *failed { Ending::Failed(cut(subtype)) } else { Ending::Ended };
                self.end_turn(ts_ms, ending, out);
                if let Some(next) = self.next.take() {
                    self.begin_turn(next, ts_ms);
                }
            }
            Update::State { to: to @ (SessionState::Exited | SessionState::Crashed), .. } => {
                let ending =
                    if *to == SessionState::Crashed { Ending::Crashed } else { Ending::Exited };
                self.end_turn(ts_ms, ending, out);
                self.queued.clear();
                self.next = None;
            }
            _ => {}
        }
    }

    /// The turn going on, begun at `seq` when there is none (a turn this node did not see
    /// begin, or one no prompt began).
    fn turn_at(&mut self, seq: u64, ts_ms: u64) -> &mut Turn {
        if self.turn.is_none() {
            self.begin_turn(seq, ts_ms);
        }
        self.turn.as_mut().expect("begun above")
    }

    fn begin_turn(&mut self, seq: u64, ts_ms: u64) {
        let mut attributes = vec![
            KeyValue::new("session.id", self.session.clone()),
            KeyValue::new("switchboard.turn.seq", seq as i64),
            KeyValue::new("switchboard.project", cut(&self.project)),
        ];
        let model_named = self.model.is_some();
        if let Some(model) = &self.model {
            attributes.push(KeyValue::new("gen_ai.request.model", cut(model)));
        }
        self.turn = Some(Turn {
            model_named,
            trace_id: turn_trace_id(&self.session, seq),
            span: Open {
                span_id: span_id(&self.session, "turn", &seq.to_string()),
                parent: None,
                name: "turn".to_owned(),
                start_ms: ts_ms,
                attributes,
                events: Vec::new(),
            },
            calls: HashMap::new(),
            waits: HashMap::new(),
        });
    }

    fn begin_call(
        &mut self,
        seq: u64,
        ts_ms: u64,
        tool_use_id: &str,
        name: &str,
        subagent: Option<&str>,
    ) {
        // A subagent's (or a background task's) call after its turn ended begins no turn.
        if subagent.is_some() && self.turn.is_none() {
            return;
        }
        let session = self.session.clone();
        let key = span_id(&session, "tool", tool_use_id);
        let task = subagent.map(|id| span_id(&session, "tool", id));
        let turn = self.turn_at(seq, ts_ms);
        if turn.calls.len() >= MAX_OPEN || turn.calls.contains_key(&key) {
            return;
        }
        // A subagent's call is its Task/Agent call's child.
        let parent = task
            .and_then(|task| turn.calls.get(&task))
            .map_or(turn.span.span_id, |call| call.span_id);
        turn.calls.insert(
            key,
            Open {
                span_id: key,
                parent: Some(parent),
                name: format!("execute_tool {}", cut(name)),
                start_ms: ts_ms,
                attributes: vec![
                    KeyValue::new("session.id", session),
                    KeyValue::new("gen_ai.operation.name", "execute_tool"),
                    KeyValue::new("gen_ai.tool.name", cut(name)),
                    KeyValue::new("gen_ai.tool.call.id", cut(tool_use_id)),
                ],
                events: Vec::new(),
            },
        );
    }

    /// Ends the turn going on, if any, with what it left open.
    fn end_turn(&mut self, ts_ms: u64, ending: Ending, out: &mut Vec<Finished>) {
        let Some(turn) = self.turn.take() else { return };
        // What the turn left open ends with it, unfinished.
        let unfinished = |open: Open| {
            let mut open = open;
            open.attributes.push(KeyValue::new("switchboard.unfinished", true));
            finish(turn.trace_id, open, ts_ms, Status::Unset)
        };
        let mut left: Vec<Open> = turn.waits.into_values().collect();
        left.extend(turn.calls.into_values());
        left.sort_by_key(|open| open.start_ms);
        out.extend(left.into_iter().map(unfinished));
        let mut span = turn.span;
        let status = match ending {
            Ending::Ended => Status::Ok,
            Ending::Failed(subtype) => Status::error(subtype),
            Ending::Superseded => Status::Unset,
            // A CLI let go with a request parked for a person exits too: not an error.
            Ending::Exited => {
                span.attributes.push(KeyValue::new("switchboard.turn.ended_by", "exit"));
                Status::Unset
            }
            Ending::Crashed => Status::error("the CLI died during the turn"),
        };
        if !turn.model_named {
            if let Some(model) = &self.model {
                span.attributes.push(KeyValue::new("gen_ai.request.model", cut(model)));
            }
        }
        out.push(finish(turn.trace_id, span, ts_ms, status));
    }
}

/// How a turn ended.
enum Ending {
    /// Its result came.
    Ended,
    /// Its result says it failed (its subtype).
    Failed(String),
    /// The next turn began without a result for this one.
    Superseded,
    /// The CLI exited (or was let go, a request parked for a person).
    Exited,
    /// The CLI died.
    Crashed,
}

/// A decision's attributes.
fn decided(behavior: &Behavior, by: &DecidedBy) -> Vec<KeyValue> {
    let mut attributes = vec![
        KeyValue::new("switchboard.permission.decision", behavior.as_str()),
        KeyValue::new("switchboard.permission.decided_by", by.kind()),
    ];
    match by {
        DecidedBy::Person { who } => {
            attributes.push(KeyValue::new("switchboard.permission.who", cut(who)));
        }
        DecidedBy::Policy { rule: Some(rule) } => {
            attributes.push(KeyValue::new("switchboard.permission.decided_rule", cut(rule)));
        }
        _ => {}
    }
    attributes
}

fn finish(trace_id: TraceId, open: Open, end_ms: u64, status: Status) -> Finished {
    Finished {
        trace_id,
        span_id: open.span_id,
        parent: open.parent,
        name: open.name,
        // A clock stepped back never makes a span end before it began.
        end_ms: end_ms.max(open.start_ms),
        start_ms: open.start_ms,
        attributes: open.attributes,
        events: open.events,
        status,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use switchboard_session::PendingPermission;

    fn prompt() -> Update {
        Update::Prompt { text: "go".into(), images: Vec::new(), uuid: None, queued: false }
    }

    fn call(id: &str, name: &str, subagent: Option<&str>) -> Update {
        Update::Block {
            message_id: "m".into(),
            index: 0,
            parent_tool_use_id: subagent.map(str::to_owned),
            uuid: None,
            block: Block::ToolUse {
                tool_use_id: id.into(),
                name: name.into(),
                input: json!({}),
                rebuilt: false,
            },
        }
    }

    fn result(id: &str, is_error: bool) -> Update {
        Update::ToolResult {
            tool_use_id: id.into(),
            tool_name: None,
            parent_tool_use_id: None,
            is_error,
            text: String::new(),
            images: Vec::new(),
            interrupted: false,
        }
    }

    fn asked(request: &str, call: &str, at: u64) -> Update {
        Update::PermissionAsked(
            serde_json::from_value::<PendingPermission>(json!({
                "request_id": request, "tool_name": "Bash", "input": {}, "tool_use_id": call,
                "suggestions": [], "reason": "", "agent_id": null, "timeout_secs": 60,
                "asked_at_ms": at,
            }))
            .unwrap(),
        )
    }

    fn decided(request: &str, call: &str, at: u64, by: DecidedBy) -> Update {
        Update::PermissionDecided {
            request_id: request.into(),
            tool_name: "Bash".into(),
            behavior: Behavior::Allow,
            by,
            message: String::new(),
            tool_use_id: Some(call.into()),
            decided_at_ms: at,
            origin: None,
        }
    }

    fn ended(duration_ms: u64) -> Update {
        Update::TurnEnded {
            parent_tool_use_id: None,
            subtype: "success".into(),
            interrupted: false,
            failed: false,
            result: None,
            duration_ms,
            input_tokens: 10,
            output_tokens: 5,
            cost_usd: 0.01,
            total_cost_usd: 0.01,
            models: Vec::new(),
            context_tokens: None,
            context_window: None,
        }
    }

    fn by_name<'a>(spans: &'a [Finished], name: &str) -> &'a Finished {
        spans.iter().find(|span| span.name == name).unwrap_or_else(|| panic!("{name}: {spans:#?}"))
    }

    #[test]
    fn a_subagents_call_is_its_task_calls_child_and_a_wait_its_calls() {
        let mut tracer = SessionTracer::new("s", "/p", Some("opus".into()));
        let mut out = Vec::new();
        tracer.note(3, 1_000, &prompt(), &mut out);
        tracer.note(5, 1_010, &call("task", "Task", None), &mut out);
        tracer.note(6, 1_020, &call("sub", "Bash", Some("task")), &mut out);
        tracer.note(7, 1_030, &asked("r1", "sub", 1_025), &mut out);
        let person = DecidedBy::Person { who: "ann".into() };
        tracer.note(8, 1_090, &decided("r1", "sub", 1_080, person), &mut out);
        tracer.note(9, 1_100, &result("sub", false), &mut out);
        tracer.note(10, 1_200, &result("task", false), &mut out);
        assert_eq!(out.len(), 3, "the wait, the subagent's call, the Task call: {out:#?}");
        tracer.note(11, 1_300, &ended(300), &mut out);
        let turn = by_name(&out, "turn");
        assert_eq!(turn.trace_id, turn_trace_id("s", 3), "named by the prompt's seq");
        assert_eq!((turn.parent, turn.start_ms, turn.end_ms), (None, 1_000, 1_300));
        assert_eq!(turn.status, Status::Ok);
        let task = by_name(&out, "execute_tool Task");
        let sub = by_name(&out, "execute_tool Bash");
        let wait = by_name(&out, "permission Bash");
        assert_eq!(task.parent, Some(turn.span_id));
        assert_eq!(sub.parent, Some(task.span_id), "the subagent's call under its Task call");
        assert_eq!(wait.parent, Some(sub.span_id), "the wait under its call");
        assert_eq!((wait.start_ms, wait.end_ms), (1_025, 1_080), "from asked to decided");
        assert!(wait.attributes.contains(&KeyValue::new("switchboard.permission.who", "ann")));
        assert!(out.iter().all(|span| span.trace_id == turn.trace_id));
        // Named the same by any reader of the same log.
        let mut again = SessionTracer::new("s", "/p", None);
        let mut out_again = Vec::new();
        again.note(3, 5, &prompt(), &mut out_again);
        again.note(5, 6, &call("task", "Task", None), &mut out_again);
        again.note(10, 7, &result("task", false), &mut out_again);
        assert_eq!(out_again[0].span_id, task.span_id);
    }

    #[test]
    fn a_cli_that_goes_away_ends_its_turn_failed_and_what_it_left_unfinished() {
        let mut tracer = SessionTracer::new("s", "/p", None);
        let mut out = Vec::new();
        tracer.note(1, 100, &prompt(), &mut out);
        tracer.note(2, 110, &call("c", "Bash", None), &mut out);
        tracer.note(3, 120, &asked("r", "c", 0), &mut out);
        let gone = Update::State { from: SessionState::Working, to: SessionState::Crashed };
        // (An exit, as when a request is parked for a person, is no error: status unset.)
        tracer.note(4, 500, &gone, &mut out);
        assert_eq!(out.len(), 3, "{out:#?}");
        let turn = by_name(&out, "turn");
        assert!(matches!(turn.status, Status::Error { .. }), "{turn:?}");
        for name in ["execute_tool Bash", "permission Bash"] {
            let span = by_name(&out, name);
            assert_eq!(span.end_ms, 500);
            assert!(span.attributes.contains(&KeyValue::new("switchboard.unfinished", true)));
        }
        assert_eq!(by_name(&out, "permission Bash").start_ms, 120, "asked with no time: stored");
    }

    #[test]
    fn a_queued_prompt_begins_its_turn_once_the_one_before_has_ended() {
        let mut tracer = SessionTracer::new("s", "/p", None);
        let mut out = Vec::new();
        tracer.note(1, 100, &prompt(), &mut out);
        let queued = Update::Prompt {
            text: "then".into(),
            images: Vec::new(),
            uuid: Some("u2".into()),
            queued: true,
        };
        tracer.note(5, 150, &queued, &mut out);
        // The projection says it runs just before the first turn's result.
        tracer.note(9, 200, &Update::Dequeued, &mut out);
        tracer.note(9, 200, &ended(100), &mut out);
        assert_eq!(out.len(), 1, "{out:#?}");
        assert_eq!((out[0].trace_id, out[0].status.clone()), (turn_trace_id("s", 1), Status::Ok));
        tracer.note(12, 300, &call("c", "Bash", None), &mut out);
        tracer.note(13, 310, &result("c", false), &mut out);
        tracer.note(14, 400, &ended(200), &mut out);
        let second = &out[2];
        assert_eq!(second.name, "turn");
        assert_eq!(second.trace_id, turn_trace_id("s", 5), "named by the queued prompt's seq");
        assert_eq!((second.start_ms, second.end_ms), (200, 400));
        assert_eq!(out[1].trace_id, second.trace_id, "its call is its own");
        assert!(second.attributes.contains(&KeyValue::new("gen_ai.usage.input_tokens", 10)));
    }

    #[test]
    fn a_subagents_message_after_its_turn_ended_begins_no_turn() {
        let mut tracer = SessionTracer::new("s", "/p", None);
        let mut out = Vec::new();
        tracer.note(1, 100, &prompt(), &mut out);
        tracer.note(2, 200, &ended(100), &mut out);
        let late = Update::MessageStarted {
            message_id: "m".into(),
            parent_tool_use_id: Some("task".into()),
            model: None,
            context_tokens: None,
        };
        tracer.note(3, 300, &late, &mut out);
        tracer.note(4, 310, &call("late", "Bash", Some("task")), &mut out);
        tracer.note(5, 320, &result("late", false), &mut out);
        tracer.note(6, 400, &prompt(), &mut out);
        tracer.note(7, 500, &ended(100), &mut out);
        let turns: Vec<&Finished> = out.iter().filter(|span| span.name == "turn").collect();
        assert_eq!(out.len(), 2, "two turns and nothing else: {out:#?}");
        assert_eq!(turns[1].start_ms, 400);
    }

    #[test]
    fn a_wait_never_begins_before_its_call() {
        let mut tracer = SessionTracer::new("s", "/p", None);
        let mut out = Vec::new();
        tracer.note(1, 100, &prompt(), &mut out);
        tracer.note(2, 150, &call("c", "Bash", None), &mut out);
        // Asked by the actor's clock just before the store stamped the call.
        tracer.note(3, 150, &asked("r", "c", 149), &mut out);
        let person = DecidedBy::Person { who: "ann".into() };
        tracer.note(4, 160, &decided("r", "c", 160, person), &mut out);
        assert_eq!((out[0].start_ms, out[0].end_ms), (150, 160));
    }

    #[test]
    fn ids_are_the_documented_digests() {
        // docs/observability.md: SHA-256 over `switchboard trace\0`, the session, a 0 byte and
        // the seq (8 bytes, big-endian); the first 16 bytes.
        let mut text = b"switchboard trace\0s\0".to_vec();
        text.extend_from_slice(&7u64.to_be_bytes());
        let whole = Sha256::digest(&text);
        assert_eq!(turn_trace_id("s", 7).to_bytes(), whole[..16]);
        assert_ne!(span_id("s", "tool", "a"), span_id("s", "permission", "a"));
    }

    #[test]
    fn a_turn_this_node_did_not_see_begin_is_timed_by_its_length() {
        let mut tracer = SessionTracer::new("s", "/p", None);
        let mut out = Vec::new();
        tracer.note(40, 10_000, &ended(2_500), &mut out);
        let turn = by_name(&out, "turn");
        assert_eq!((turn.start_ms, turn.end_ms), (7_500, 10_000));
        assert_eq!(turn.trace_id, turn_trace_id("s", 40));
    }

    #[test]
    fn a_cli_that_never_ends_its_calls_cannot_grow_the_tracer() {
        let mut tracer = SessionTracer::new("s", "/p", None);
        let mut out = Vec::new();
        tracer.note(1, 1, &prompt(), &mut out);
        for n in 0..MAX_OPEN + 100 {
            tracer.note(
                2 + n as u64,
                2,
                &call(&format!("c{n}"), &"x".repeat(1000), None),
                &mut out,
            );
        }
        tracer.note(9_999, 3, &ended(2), &mut out);
        assert_eq!(out.len(), MAX_OPEN + 1, "the calls kept, and the turn");
        assert!(out.iter().all(|span| span.name.len() <= "execute_tool ".len() + MAX_TEXT));
    }
}
