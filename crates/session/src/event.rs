//! What a session reports: every line in both directions, and Switchboard's own events.
//!
//! A [`SessionEvent`] is a line with its exact bytes, a change of state, model, mode or cost,
//! a permission request or decision with who decided, a hook, a timeout, or the exit.
//! [`SessionEvent::to_json_text`] is what the daemon stores, and
//! [`SessionEvent::from_stored`] its inverse.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use switchboard_protocol::codec::LineError;
use switchboard_protocol::{Message, PermissionUpdate};

use crate::origin::TurnOrigin;
use crate::policy::Behavior;

/// The state of a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionState {
    /// The CLI is starting (or `initialize` has not been answered).
    Starting,
    /// Waiting for a prompt.
    Idle,
    /// A turn is running.
    Working,
    /// A turn waits for a person to answer a permission request.
    AwaitingPermission,
    /// The CLI is compacting the conversation.
    Compacting,
    /// The CLI exited normally (or because we ended it).
    Exited,
    /// The CLI died unexpectedly.
    Crashed,
}

impl SessionState {
    /// `starting`, `idle`, ...
    pub fn as_str(self) -> &'static str {
        match self {
            SessionState::Starting => "starting",
            SessionState::Idle => "idle",
            SessionState::Working => "working",
            SessionState::AwaitingPermission => "awaiting_permission",
            SessionState::Compacting => "compacting",
            SessionState::Exited => "exited",
            SessionState::Crashed => "crashed",
        }
    }

    /// Whether the CLI is gone.
    pub fn is_final(self) -> bool {
        matches!(self, SessionState::Exited | SessionState::Crashed)
    }
}

/// Which way a line went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LineDirection {
    /// Written by the CLI.
    FromCli,
    /// Written by Switchboard to the CLI.
    ToCli,
}

/// One protocol line, with its exact bytes.
#[derive(Debug, Clone)]
pub struct WireLine {
    /// Which way it went.
    pub direction: LineDirection,
    /// The line as sent or received, without the newline.
    pub raw: Arc<str>,
    /// Its typed view.
    pub message: Arc<Message>,
}

/// Who or what decided a permission request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum DecidedBy {
    /// A policy rule, or the policy's default when `rule` is `None`.
    Policy {
        /// The rule.
        rule: Option<String>,
    },
    /// A person (or program) through a session handle.
    Person {
        /// Who, as the caller named themselves.
        who: String,
    },
    /// Nobody answered in time.
    Timeout,
    /// The CLI withdrew the request (`control_cancel_request`, after an interrupt).
    Cancelled,
    /// The CLI went away with the request pending.
    LinkClosed,
    /// The CLI itself: it ran the tool without asking (its own rules or permission mode),
    /// after the policy's hook raised no objection.
    Cli,
    /// A person at the session's own terminal, in the CLI's dialog, before anyone answered
    /// from afar (`switchboard claude`).
    Terminal,
}

impl DecidedBy {
    /// Its kind's word, as its JSON's `kind` says it (`policy`, `person`, `link_closed`, ...).
    pub fn kind(&self) -> &'static str {
        match self {
            DecidedBy::Policy { .. } => "policy",
            DecidedBy::Person { .. } => "person",
            DecidedBy::Timeout => "timeout",
            DecidedBy::Cancelled => "cancelled",
            DecidedBy::LinkClosed => "link_closed",
            DecidedBy::Cli => "cli",
            DecidedBy::Terminal => "terminal",
        }
    }
}

/// A permission request waiting for a person.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingPermission {
    /// The CLI's request id; answers name it.
    pub request_id: String,
    /// The tool.
    pub tool_name: String,
    /// The tool's input.
    pub input: Value,
    /// The tool call.
    pub tool_use_id: Option<String>,
    /// The CLI's "always allow" offers.
    pub suggestions: Vec<PermissionUpdate>,
    /// Why it is asked, in words: the CLI's reason ([`Self::cli_reason`]) when it gives one,
    /// else the policy's.
    pub reason: String,
    /// The subagent's Task/Agent call, when a subagent asks.
    pub agent_id: Option<String>,
    /// Seconds the person has before the timeout decides.
    pub timeout_secs: u64,
    /// When it was asked (Unix milliseconds).
    pub asked_at_ms: u64,
    /// The rule "allow always" (`remember`) adds to the session's policy: `Bash(<command>)`
    /// for a shell command, the tool's name (every call of it) otherwise. Empty in logs
    /// written before it was told.
    #[serde(default)]
    pub always_allows: String,
    /// Who started the turn that asks: whoever sent the CLI its latest message
    /// (`token NAME (CHANNEL)`, `relay frontend (relay)`), as it came with that message
    /// (`SessionHandle::send_message_from`). `None` when unknown (a session run without a
    /// daemon, a turn begun in a terminal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_by: Option<String>,
    /// Who started the turn, typed, when the session knew it: every open turn's sender the
    /// same one ([`crate::OpenTurns`]). What a rule on origin was judged by.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient_origin")]
    pub origin: Option<TurnOrigin>,
    /// The policy rule that asks a person (`None`: no rule does; the policy's default asks,
    /// or the CLI does on its own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// Why the CLI asks, in its own words (its `decision_reason`: "This command requires
    /// approval"), when it says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cli_reason: Option<String>,
    /// What Claude Code says of how this request may be answered (2.1.330 on); every face acts
    /// on it. Empty from older CLIs and in logs written before it was read.
    #[serde(default, skip_serializing_if = "PermissionHints::is_empty")]
    pub hints: PermissionHints,
    /// When it was parked (Unix milliseconds): the CLI was told to defer the call and has
    /// ended, and the request waits with no process; an answer resumes the session. `None`
    /// while the CLI waits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parked_at_ms: Option<u64>,
    /// When a parked request stops waiting and is denied, as an unanswered ask is (Unix
    /// milliseconds: the policy's `park_expires_secs` after it was parked). `None`: it waits
    /// until someone answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub park_expires_at_ms: Option<u64>,
}

/// How long a parked request's one-tap links last: it waits for a person with no process, for
/// as long as that takes.
pub const PARKED_LINK_LIFETIME_MS: u64 = 30 * 24 * 3600 * 1000;

impl PendingPermission {
    /// When it stops waiting for a person (Unix milliseconds), as its links and notices say:
    /// its timeout, or for a parked request its policy's `park_expires_secs` after it was
    /// parked, else [`PARKED_LINK_LIFETIME_MS`] (the longest a link lives).
    pub fn expires_ms(&self) -> u64 {
        match self.parked_at_ms {
            Some(parked) => self
                .park_expires_at_ms
                .unwrap_or_else(|| parked.saturating_add(PARKED_LINK_LIFETIME_MS)),
            None => self.asked_at_ms.saturating_add(self.timeout_secs.saturating_mul(1000)),
        }
    }
}

/// Claude Code's own hints on a permission request, as its `can_use_tool` gives them.
///
/// [`PermissionHints::person_only`] requests are answered by a person in the session, never by a
/// one-tap button in a notification, a link page's Approve, a policy allow or a standing
/// grant; [`PermissionHints::no_standing_rule`] ones are allowed once, never "always". The CLI's
/// words (`title`, the rule, the server) are its output: cut to a few hundred characters, and
/// shown as text, never as markup.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PermissionHints {
    /// A person must answer in the session itself (the CLI's `requires_user_interaction`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub requires_user_interaction: bool,
    /// A built-in safety check is involved: `false` when one of them takes a person's approval
    /// (`rm -rf ~/`), `true` when each may be approved automatically (a sensitive file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub classifier_approvable: Option<bool>,
    /// Approve must not be one stray key away: nothing preselected, no one-key approve.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub default_to_no: bool,
    /// No "allow always" for this ask (the CLI's `suppress_always_allow_rule`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suppress_always_allow_rule: bool,
    /// The person's own `permissions.ask` rule that made Claude Code ask.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matched_ask_rule: Option<AskRule>,
    /// The ask's heading in Claude Code's words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// An MCP tool's server, and where it was configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_server: Option<McpServer>,
    /// Follows from the above ([`Self::settled`]): only a person, looking at the request in the
    /// session, may approve it. Claude Code says it needs a person's interaction, or a safety
    /// check that no automatic approval may pass, or the person's own ask rule forced it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub person_only: bool,
    /// Follows from the above: "allow always" is withheld. Claude Code says so, or a person must
    /// look each time (a standing grant would answer the next one without them).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_standing_rule: bool,
}

impl PermissionHints {
    /// Whether no hint is given.
    pub fn is_empty(&self) -> bool {
        self == &PermissionHints::default()
    }

    /// The hints with what follows from them filled in ([`Self::person_only`],
    /// [`Self::no_standing_rule`]), so that every face reads the same answer.
    pub fn settled(mut self) -> Self {
        self.person_only = self.requires_user_interaction
            || self.classifier_approvable == Some(false)
            || self.matched_ask_rule.is_some();
        self.no_standing_rule = self.suppress_always_allow_rule || self.person_only;
        self
    }
}

/// A `permissions.ask` rule from the person's settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AskRule {
    /// The settings it is in (`userSettings`, `projectSettings`, ...).
    pub source: String,
    /// The tool it names.
    pub tool_name: String,
    /// Its content (`git push *`), when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_content: Option<String>,
}

/// An MCP server as a permission request names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpServer {
    /// Its name.
    pub name: String,
    /// Where it was configured (`user`, `project`, `plugin`, `claudeai`, ...: an open set).
    pub source: String,
}

/// A hook callback waiting for an answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingHook {
    /// The CLI's request id; answers name it.
    pub request_id: String,
    /// The callback id registered in `initialize`.
    pub callback_id: String,
    /// `PreToolUse`, `PostToolUse`, `Stop`, ...
    pub hook_event_name: Option<String>,
    /// The hook input.
    pub input: Value,
}

/// Everything a session reports, in order.
#[derive(Debug, Clone)]
pub enum SessionEvent {
    /// A line in either direction.
    Line(WireLine),
    /// A line from the CLI that could not be decoded; the session goes on.
    BadLine(LineError),
    /// A line the CLI wrote to stderr.
    Stderr(String),
    /// The state changed.
    State {
        /// Before.
        from: SessionState,
        /// After.
        to: SessionState,
    },
    /// The CLI's session id became known or changed (a fork gets a new one).
    ClaudeSessionId(String),
    /// The model the session runs changed (from `system/init`, or a reply by another model
    /// after a switch): the one place the session's model is read from the lines.
    ModelChanged(String),
    /// The permission mode changed (`system/init`, `system/status`, a `set_permission_mode`
    /// answer, `initialize`).
    ModeChanged(String),
    /// This run's cost so far changed: the sum of its results' steps ([`crate::cost`]), which
    /// a `/clear` does not lower. The session's cost across runs is the projection's view.
    CostChanged(f64),
    /// A permission request now waits for a person.
    PermissionRequested(PendingPermission),
    /// A permission request was decided.
    PermissionDecided {
        /// The request.
        request_id: String,
        /// The tool.
        tool_name: String,
        /// Allow or deny (an `ask` is never final).
        behavior: Behavior,
        /// Who decided.
        by: DecidedBy,
        /// The message the model sees on deny, or the reason on allow.
        message: String,
        /// Whether the input was changed.
        input_changed: bool,
        /// Rule changes sent with an allow.
        updated_permissions: Vec<PermissionUpdate>,
        /// When it was decided (Unix milliseconds).
        decided_at_ms: u64,
        /// The tool call, when known (a decision made in the policy's `PreToolUse` hook has
        /// no permission request before it).
        tool_use_id: Option<String>,
        /// Who started the turn, when the session knew it (every open turn's sender the
        /// same one, [`crate::OpenTurns`]).
        origin: Option<TurnOrigin>,
    },
    /// A hook callback now waits for an answer.
    HookRequested(PendingHook),
    /// A hook callback was answered.
    HookAnswered {
        /// The request.
        request_id: String,
        /// Who answered (or `timeout`).
        by: String,
        /// The answer.
        output: Value,
    },
    /// A control request we sent got no answer in time.
    ControlTimedOut {
        /// Our request id.
        request_id: String,
        /// Its subtype.
        subtype: String,
    },
    /// A control request from the CLI that Switchboard does not serve; answered with an error.
    UnsupportedControlRequest {
        /// Its request id.
        request_id: String,
        /// Its subtype.
        subtype: String,
    },
    /// `--sdk-url`: the CLI's WebSocket is up.
    Connected {
        /// Not the first connection: Switchboard re-sends `initialize` to learn what the CLI
        /// still waits for.
        reconnect: bool,
    },
    /// `--sdk-url`: the CLI's WebSocket went down (what the CLI writes meanwhile is lost).
    Disconnected,
    /// `--sdk-url`: a line for the CLI was written to its socket (the `line` event says when it
    /// was queued: the two differ while the CLI is away).
    Sent {
        /// Its `type` (and `/subtype` for control messages).
        line_type: String,
        /// Its `uuid`, if it had one.
        uuid: Option<String>,
        /// Its `request_id`, for control messages.
        request_id: Option<String>,
    },
    /// `--sdk-url`: a line the CLI may not have received was sent again: a prompt it had not
    /// echoed when its socket dropped (same `uuid`: it runs once), a control response whose
    /// send failed, or a permission answer the CLI asked for again.
    Resent {
        /// Its `type` (and `/subtype` for control messages).
        line_type: String,
        /// Its `uuid`, if it had one.
        uuid: Option<String>,
        /// Its `request_id`, for control messages.
        request_id: Option<String>,
        /// Why it went again.
        reason: String,
    },
    /// `--sdk-url`: a line for the CLI that never reached it: a control request whose send
    /// failed, or, when the CLI ended, a prompt it never confirmed.
    Undelivered {
        /// Its `type` (and `/subtype` for control messages).
        line_type: String,
        /// Its `uuid`, if it had one.
        uuid: Option<String>,
        /// Its first 200 characters.
        preview: String,
        /// It was a prompt: no turn follows it.
        prompt: bool,
    },
    /// The CLI ended.
    Exited {
        /// Exit code.
        code: Option<i32>,
        /// Signal.
        signal: Option<i32>,
        /// Whether Switchboard ended it (or it ended unasked).
        requested: bool,
        /// A readable description (with the stderr tail's last line).
        description: String,
    },
}

impl SessionEvent {
    /// A decision with the input unchanged and no rule changes, made now.
    pub fn decided(
        request_id: &str,
        tool_name: &str,
        behavior: Behavior,
        by: DecidedBy,
        message: String,
    ) -> Self {
        SessionEvent::PermissionDecided {
            request_id: request_id.to_owned(),
            tool_name: tool_name.to_owned(),
            behavior,
            by,
            message,
            input_changed: false,
            updated_permissions: Vec::new(),
            decided_at_ms: now_ms(),
            tool_use_id: None,
            origin: None,
        }
    }

    /// The same decision, in a turn of `origin`.
    pub fn with_origin(mut self, known: Option<TurnOrigin>) -> Self {
        if let SessionEvent::PermissionDecided { origin, .. } = &mut self {
            *origin = known;
        }
        self
    }

    /// The same decision, naming its tool call.
    pub fn with_tool_use_id(mut self, id: Option<String>) -> Self {
        if let SessionEvent::PermissionDecided { tool_use_id, .. } = &mut self {
            *tool_use_id = id;
        }
        self
    }

    /// A short name for logs and JSON output.
    pub fn kind(&self) -> &'static str {
        match self {
            SessionEvent::Line(_) => "line",
            SessionEvent::BadLine(_) => "bad_line",
            SessionEvent::Stderr(_) => "stderr",
            SessionEvent::State { .. } => "state",
            SessionEvent::ClaudeSessionId(_) => "claude_session_id",
            SessionEvent::ModelChanged(_) => "model_changed",
            SessionEvent::ModeChanged(_) => "mode_changed",
            SessionEvent::CostChanged(_) => "cost_changed",
            SessionEvent::PermissionRequested(_) => "permission_requested",
            SessionEvent::PermissionDecided { .. } => "permission_decided",
            SessionEvent::HookRequested(_) => "hook_requested",
            SessionEvent::HookAnswered { .. } => "hook_answered",
            SessionEvent::ControlTimedOut { .. } => "control_timed_out",
            SessionEvent::UnsupportedControlRequest { .. } => "unsupported_control_request",
            SessionEvent::Connected { .. } => "connected",
            SessionEvent::Disconnected => "disconnected",
            SessionEvent::Undelivered { .. } => "undelivered",
            SessionEvent::Sent { .. } => "sent",
            SessionEvent::Resent { .. } => "resent",
            SessionEvent::Exited { .. } => "exited",
        }
    }

    /// [`SessionEvent::to_json`] as text. A line is spliced in as it came (it is valid JSON),
    /// without parsing it again: this runs for every event a daemon stores.
    pub fn to_json_text(&self) -> String {
        match self {
            SessionEvent::Line(line) => {
                let direction = match line.direction {
                    LineDirection::FromCli => "from_cli",
                    LineDirection::ToCli => "to_cli",
                };
                let mut text = String::with_capacity(line.raw.len() + 48);
                text.push_str("{\"direction\":\"");
                text.push_str(direction);
                text.push_str("\",\"line\":");
                text.push_str(&line.raw);
                if let Message::Drift(drift) = line.message.as_ref() {
                    text.push_str(",\"drift\":");
                    text.push_str(&Value::from(drift.reason.as_str()).to_string());
                }
                text.push_str(",\"event\":\"line\"}");
                text
            }
            other => other.to_json().to_string(),
        }
    }

    /// The event as one JSON object: `{"event": kind, ...}`. Lines carry their direction and
    /// the line itself as JSON.
    pub fn to_json(&self) -> Value {
        use serde_json::json;
        let mut value = match self {
            SessionEvent::Line(line) => {
                let mut value = json!({
                    "direction": line.direction,
                    "line": serde_json::from_str::<Value>(&line.raw).unwrap_or(Value::Null),
                });
                if let Message::Drift(drift) = line.message.as_ref() {
                    value["drift"] = Value::from(drift.reason.as_str());
                }
                value
            }
            SessionEvent::BadLine(error) => json!({
                "line": error.position.line, "offset": error.position.offset,
                "error": error.kind.to_string(), "preview": error.preview,
            }),
            SessionEvent::Stderr(text) => json!({ "text": text }),
            SessionEvent::State { from, to } => json!({ "from": from, "to": to }),
            SessionEvent::ClaudeSessionId(id) => json!({ "claude_session_id": id }),
            SessionEvent::ModelChanged(model) => json!({ "model": model }),
            SessionEvent::ModeChanged(mode) => json!({ "mode": mode }),
            SessionEvent::CostChanged(cost) => json!({ "cost_usd": cost }),
            SessionEvent::PermissionRequested(pending) => {
                serde_json::to_value(pending).unwrap_or_default()
            }
            SessionEvent::PermissionDecided {
                request_id,
                tool_name,
                behavior,
                by,
                message,
                input_changed,
                updated_permissions,
                decided_at_ms,
                tool_use_id,
                origin,
            } => {
                let mut value = json!({
                    "request_id": request_id, "tool_name": tool_name, "behavior": behavior, "by": by,
                    "message": message, "input_changed": input_changed, "updated_permissions": updated_permissions,
                    "decided_at_ms": decided_at_ms, "tool_use_id": tool_use_id,
                });
                if let Some(origin) = origin {
                    value["origin"] = json!(origin);
                }
                value
            }
            SessionEvent::HookRequested(pending) => {
                serde_json::to_value(pending).unwrap_or_default()
            }
            SessionEvent::HookAnswered { request_id, by, output } => json!({
                "request_id": request_id, "by": by, "output": output,
            }),
            SessionEvent::ControlTimedOut { request_id, subtype }
            | SessionEvent::UnsupportedControlRequest { request_id, subtype } => json!({
                "request_id": request_id, "subtype": subtype,
            }),
            SessionEvent::Connected { reconnect } => json!({ "reconnect": reconnect }),
            SessionEvent::Disconnected => json!({}),
            SessionEvent::Undelivered { line_type, uuid, preview, prompt } => json!({
                "line_type": line_type, "uuid": uuid, "preview": preview, "prompt": prompt,
            }),
            SessionEvent::Sent { line_type, uuid, request_id } => json!({
                "line_type": line_type, "uuid": uuid, "request_id": request_id,
            }),
            SessionEvent::Resent { line_type, uuid, request_id, reason } => json!({
                "line_type": line_type, "uuid": uuid, "request_id": request_id, "reason": reason,
            }),
            SessionEvent::Exited { code, signal, requested, description } => json!({
                "code": code, "signal": signal, "requested": requested, "description": description,
            }),
        };
        if let Value::Object(map) = &mut value {
            map.insert("event".to_owned(), Value::from(self.kind()));
        }
        value
    }
}

/// Why a stored event could not be read back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("stored {kind} event: {reason}")]
pub struct StoredEventError {
    /// The event's kind.
    pub kind: String,
    /// What was wrong.
    pub reason: String,
}

impl SessionEvent {
    /// Reads back an event stored as [`SessionEvent::to_json_text`] wrote it, `kind` being
    /// [`SessionEvent::kind`]. A line is decoded again from its exact bytes. A bad line comes
    /// back with its position, preview and error text (its control request, answered when it
    /// happened, is not kept).
    pub fn from_stored(kind: &str, payload: &str) -> Result<SessionEvent, StoredEventError> {
        use serde_json::value::RawValue;
        let fail = |reason: String| StoredEventError { kind: kind.to_owned(), reason };
        if kind == "line" {
            #[derive(Deserialize)]
            struct Stored<'a> {
                direction: LineDirection,
                #[serde(borrow)]
                line: &'a RawValue,
            }
            let stored: Stored<'_> =
                serde_json::from_str(payload).map_err(|error| fail(error.to_string()))?;
            let raw = stored.line.get();
            let message = Message::decode_str(raw).map_err(|error| fail(error.to_string()))?;
            return Ok(SessionEvent::Line(WireLine {
                direction: stored.direction,
                raw: Arc::from(raw),
                message: Arc::new(message),
            }));
        }
        let value: Value =
            serde_json::from_str(payload).map_err(|error| fail(error.to_string()))?;
        let field = |name: &str| value.get(name).cloned().unwrap_or(Value::Null);
        let text = |name: &str| value.get(name).and_then(Value::as_str).unwrap_or("").to_owned();
        let optional = |name: &str| value.get(name).and_then(Value::as_str).map(str::to_owned);
        let typed = |name: &str| -> Result<Value, StoredEventError> {
            value.get(name).cloned().ok_or_else(|| fail(format!("no `{name}`")))
        };
        fn read<T: serde::de::DeserializeOwned>(
            value: Value,
            fail: impl Fn(String) -> StoredEventError,
        ) -> Result<T, StoredEventError> {
            serde_json::from_value(value).map_err(|error| fail(error.to_string()))
        }
        let event = match kind {
            "bad_line" => SessionEvent::BadLine(LineError {
                position: switchboard_protocol::codec::Position {
                    line: field("line").as_u64().unwrap_or(0),
                    offset: field("offset").as_u64().unwrap_or(0),
                },
                preview: text("preview"),
                kind: switchboard_protocol::codec::LineErrorKind::Malformed(text("error")),
                control_request: None,
            }),
            "stderr" => SessionEvent::Stderr(text("text")),
            "state" => SessionEvent::State {
                from: read(typed("from")?, fail)?,
                to: read(typed("to")?, fail)?,
            },
            "claude_session_id" => SessionEvent::ClaudeSessionId(text("claude_session_id")),
            "model_changed" => SessionEvent::ModelChanged(text("model")),
            "mode_changed" => SessionEvent::ModeChanged(text("mode")),
            "cost_changed" => SessionEvent::CostChanged(field("cost_usd").as_f64().unwrap_or(0.0)),
            "permission_requested" => SessionEvent::PermissionRequested(read(value, fail)?),
            "permission_decided" => SessionEvent::PermissionDecided {
                request_id: text("request_id"),
                tool_name: text("tool_name"),
                behavior: read(typed("behavior")?, fail)?,
                by: read(typed("by")?, fail)?,
                message: text("message"),
                input_changed: field("input_changed").as_bool().unwrap_or(false),
                updated_permissions: read(field("updated_permissions"), fail).unwrap_or_default(),
                decided_at_ms: field("decided_at_ms").as_u64().unwrap_or(0),
                tool_use_id: value.get("tool_use_id").and_then(Value::as_str).map(str::to_owned),
                // A word this release does not know is no origin it can vouch for.
                origin: value
                    .get("origin")
                    .and_then(Value::as_str)
                    .and_then(|text| TurnOrigin::parse(text).ok()),
            },
            "hook_requested" => SessionEvent::HookRequested(read(value, fail)?),
            "hook_answered" => SessionEvent::HookAnswered {
                request_id: text("request_id"),
                by: text("by"),
                output: field("output"),
            },
            "control_timed_out" => SessionEvent::ControlTimedOut {
                request_id: text("request_id"),
                subtype: text("subtype"),
            },
            "unsupported_control_request" => SessionEvent::UnsupportedControlRequest {
                request_id: text("request_id"),
                subtype: text("subtype"),
            },
            "connected" => {
                SessionEvent::Connected { reconnect: field("reconnect").as_bool().unwrap_or(false) }
            }
            "disconnected" => SessionEvent::Disconnected,
            "undelivered" => SessionEvent::Undelivered {
                line_type: text("line_type"),
                uuid: optional("uuid"),
                preview: text("preview"),
                prompt: field("prompt").as_bool().unwrap_or(false),
            },
            "sent" => SessionEvent::Sent {
                line_type: text("line_type"),
                uuid: optional("uuid"),
                request_id: optional("request_id"),
            },
            "resent" => SessionEvent::Resent {
                line_type: text("line_type"),
                uuid: optional("uuid"),
                request_id: optional("request_id"),
                reason: text("reason"),
            },
            "exited" => SessionEvent::Exited {
                code: field("code").as_i64().map(|code| code as i32),
                signal: field("signal").as_i64().map(|signal| signal as i32),
                requested: field("requested").as_bool().unwrap_or(false),
                description: text("description"),
            },
            other => return Err(fail(format!("`{other}` is not a session event"))),
        };
        Ok(event)
    }
}

/// Now, in Unix milliseconds (for the "when" of decisions).
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis() as u64)
        .unwrap_or(0)
}

/// An origin as stored: a word this release does not know reads as unknown, not as a broken
/// event.
fn lenient_origin<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<TurnOrigin>, D::Error> {
    let text = Option::<String>::deserialize(deserializer)?;
    Ok(text.and_then(|text| TurnOrigin::parse(&text).ok()))
}

#[cfg(test)]
mod tests {
    use super::DecidedBy;

    #[test]
    fn a_decider_kind_is_its_json_kind() {
        for by in [
            DecidedBy::Policy { rule: Some("r".into()) },
            DecidedBy::Person { who: "ana".into() },
            DecidedBy::Timeout,
            DecidedBy::Cancelled,
            DecidedBy::LinkClosed,
            DecidedBy::Cli,
            DecidedBy::Terminal,
        ] {
            assert_eq!(serde_json::to_value(&by).unwrap()["kind"], by.kind());
        }
    }
}
