//! The sans-IO heart of a session: state machine, control-request correlation, permission
//! decisions, usage and the subagent tree. Inputs in, [`Effect`]s out; no runtime, no process.
//!
//! Every control request in either direction ends exactly once: ours by a response, a timeout
//! or the link closing; the CLI's by our answer, a `control_cancel_request`, a timeout or the
//! link closing. Nothing here waits for a person: a pending approval is an entry in a table.
//!
//! [`SessionCore`] takes inputs (a line, a command, a timer, the exit) and returns [`Effect`]s
//! (`Send`, `Emit`, `StartTimer`, `ControlDone`, `End`). It owns the state machine
//! ([`SessionState`]), the table of our control requests (ids `sb-N`), the CLI's pending
//! permission requests and hook callbacks, recently answered ids ("already answered"), user
//! messages held until `initialize` is answered, usage, cost, the subagent tree, and the slash
//! commands and skills the CLI offers ([`SlashCommandInfo`], from `initialize` and
//! `system/init`, bounded); [`SessionSnapshot`] is what it shows of them.
//!
//! - **The policy sees every tool call.** `on_started` adds a `PreToolUse` hook
//!   ([`POLICY_HOOK_ID`]) to the `initialize` it sends (and re-sends on a reconnect); the
//!   hook's callback is answered from the policy at once (deny, ask, or no opinion). Each
//!   `tool_use` is remembered until its result (bounded) so that who allowed or refused it is
//!   recorded once: the hook, a `can_use_tool` answer, the CLI holding a deny rule, or the CLI
//!   on its own (`DecidedBy::Cli`). The permission side is `core/permissions.rs`;
//!   parked approvals (held at that hook, answered `defer`) are `core/parking.rs`.
//! - A control request that does not decode is still answered: a `can_use_tool` is denied
//!   with the reason (`LineError::control_request` carries its id).
//! - **On a reconnect** the core re-sends `initialize` and reconciles its pending permission
//!   requests with the list the CLI returns, answering again any it had answered.
//! - **Transcript mode** ([`SessionCore::set_transcript`], for an interactive CLI): no
//!   `initialize` is sent, a prompt is a `user` line the CLI wrote, a turn ends at
//!   `protocol::transcript::turn_end`, and of our control requests only `interrupt` goes out
//!   (done once written: the Esc key has no answer); the rest are refused with the reason.
//! - [`SessionCore::control_before_prompts`] sends a control request that prompts wait for (a
//!   warm CLI's `set_permission_mode`); if it fails they are reported undelivered and the CLI
//!   is ended (`Effect::End`).

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;
use switchboard_protocol::codec::ControlRef;
use switchboard_protocol::content::ContentBlock;
use switchboard_protocol::control::{
    session_grants, CanUseToolRequest, ControlError, ControlSuccess, HookCallbackRequest,
    HookMatcher, InitializeRequest, InitializeResponse,
};
use switchboard_protocol::permission::{ask_user_question_input, PermissionUpdate, RuleValue};
use switchboard_protocol::{
    ControlRequest, ControlRequestPayload, ControlResponse, ControlResponseBody, Drift, Message,
    PermissionResult, Received, SystemMessage, TextOr, UserMessage,
};

use crate::event::{
    now_ms, AskRule, DecidedBy, LineDirection, McpServer, PendingHook, PendingPermission,
    PermissionHints, SessionEvent, SessionState, WireLine,
};
use crate::policy::{Behavior, CallFacts, MatchContext, Policy};

/// How long we wait for the CLI to answer one of our control requests. 2.1.37 never answers
/// an unknown subtype, so this is what ends such a request.
pub const CONTROL_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a hook callback waits for an answer before the session answers `{}` (no opinion,
/// the CLI goes on as if no hook ran).
pub const HOOK_TIMEOUT: Duration = Duration::from_secs(60);

/// Request ids answered recently, kept to tell "already answered" from "unknown".
pub const ANSWERED_MEMORY: usize = 1024;

/// The callback id of the `PreToolUse` hook every session registers in `initialize`. Through
/// it the policy sees every tool call, including those the CLI allows on its own (a Read in
/// the working directory, a read-only Bash command), which never reach `can_use_tool`.
pub const POLICY_HOOK_ID: &str = "switchboard-policy";

/// Tool calls remembered from their `tool_use` block until their result, to record who
/// allowed or refused each one (the policy's hook, a `can_use_tool` answer, or the CLI on its
/// own); the oldest are forgotten past this many.
pub const CALL_MEMORY: usize = 1024;

/// What the session knows of a tool call before its result.
#[derive(Debug, Clone)]
struct ToolCall {
    tool_name: String,
    input: Value,
    /// The policy's hook left it to the CLI (the hook's request id), or a decision was
    /// recorded (`Decided`), or nothing was heard yet.
    verdict: CallVerdict,
    /// A subagent's (its `PreToolUse` hook named one).
    subagent: bool,
    /// A terminal's dialog about it reached the session (`core/dialog.rs`).
    dialog: bool,
}

#[derive(Debug, Clone, PartialEq)]
enum CallVerdict {
    Unheard,
    Deferred(String),
    Decided,
}

/// Something the shell must do.
#[derive(Debug)]
pub enum Effect {
    /// Write this line (already encoded, with its newline) to the CLI.
    Send(Arc<str>),
    /// Report this event.
    Emit(SessionEvent),
    /// Call [`SessionCore::on_timer`] with this timer after the duration.
    StartTimer(Timer, Duration),
    /// Our control request `request_id` ended.
    ControlDone(String, Result<ControlSuccess, ControlFailure>),
    /// End the CLI: the session cannot go on as it was asked to (a request its prompts
    /// waited for failed; they were reported undelivered).
    End,
}

/// A timer the core asked for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Timer {
    /// Our control request has waited long enough.
    Control(String),
    /// A permission request has waited long enough for a person.
    Permission(String),
    /// A hook callback has waited long enough.
    Hook(String),
    /// A call held at the policy's hook has waited long enough with the CLI running: it is
    /// parked ([`crate::policy::Policy::park_after`]).
    Park(String),
}

/// How much longer than the ask's timeout the CLI waits on the policy's hook while a call is
/// held there (the core answers at the timeout; the CLI must not give up first).
pub const HELD_HOOK_MARGIN_SECS: u64 = 60;

/// Why one of our control requests failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ControlFailure {
    /// The CLI answered with an error.
    #[error("the CLI refused {subtype}: {error}")]
    Refused {
        /// The request's subtype.
        subtype: String,
        /// The CLI's message.
        error: String,
        /// 2.1.330's `error_code`.
        error_code: Option<String>,
        /// Pending permission requests, when the request was `initialize` (2.1.37 puts them
        /// in the "Already initialized" error).
        pending: Vec<ControlRequest>,
    },
    /// No answer in time.
    #[error("the CLI did not answer {subtype} within {seconds} s")]
    TimedOut {
        /// The request's subtype.
        subtype: String,
        /// The timeout.
        seconds: u64,
    },
    /// The CLI went away.
    #[error("the CLI exited before answering {subtype}")]
    LinkClosed {
        /// The request's subtype.
        subtype: String,
    },
}

/// A person's (or program's) answer to a permission request.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize)]
pub struct PermissionAnswer {
    /// Allow or deny.
    pub behavior: AnswerBehavior,
    /// Run this input instead of the model's.
    #[serde(default)]
    pub updated_input: Option<Value>,
    /// What the model is told on deny.
    #[serde(default)]
    pub message: Option<String>,
    /// Allow this again without asking for the rest of the session.
    #[serde(default)]
    pub remember: bool,
    /// Specific rule changes to send (instead of the ones `remember` derives).
    #[serde(default)]
    pub updated_permissions: Option<Vec<PermissionUpdate>>,
    /// AskUserQuestion: question text → chosen label.
    #[serde(default)]
    pub answers: Option<BTreeMap<String, String>>,
    /// Deny and end the turn.
    #[serde(default)]
    pub interrupt: bool,
}

/// Allow or deny.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AnswerBehavior {
    /// Run it.
    Allow,
    /// Refuse it (the default: an empty answer fails closed).
    #[default]
    Deny,
}

impl PermissionAnswer {
    /// Allow as asked.
    pub fn allow() -> Self {
        PermissionAnswer { behavior: AnswerBehavior::Allow, ..Self::default() }
    }

    /// Deny with a message.
    pub fn deny(message: impl Into<String>) -> Self {
        PermissionAnswer {
            behavior: AnswerBehavior::Deny,
            message: Some(message.into()),
            ..Self::default()
        }
    }
}

/// Why an answer was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    /// Somebody else answered first (or it timed out, or the CLI withdrew it).
    #[error("permission request {0} was already answered")]
    AlreadyAnswered(String),
    /// No such request.
    #[error("no pending request {0}")]
    Unknown(String),
    /// The answer changes the tool's input to one the policy denies; the request still waits.
    #[error("the policy denies the changed input: {0}")]
    DeniedInput(String),
    /// "Allow always" (or rule changes) for a request Claude Code allows only once: its
    /// `suppress_always_allow_rule`, or a person must look each time. The request still waits.
    #[error(
        "Claude Code offers no standing rule for permission request {0}: allow it once, or deny it"
    )]
    NoStandingRule(String),
    /// An MCP server's question answered with what its form does not take; it still waits.
    #[error("the answer does not fit the form: {0}")]
    BadContent(String),
    /// The request was parked in this run: its CLI is ending, and the answer resumes the
    /// session (the daemon's to do, once the CLI has gone).
    #[error("permission request {0} was parked: the session resumes with the answer")]
    Parked(String),
}

/// What a session looks like now.
#[derive(Debug, Clone, Serialize)]
pub struct SessionSnapshot {
    /// The state.
    pub state: SessionState,
    /// `--sdk-url`: when the CLI's socket went down, while it is down (Unix milliseconds).
    pub disconnected_since_ms: Option<u64>,
    /// The CLI's session id, once known.
    pub claude_session_id: Option<String>,
    /// The model of the last turn.
    pub model: Option<String>,
    /// The permission mode in force, as last reported.
    pub permission_mode: Option<String>,
    /// The CLI's version (from `system/init`).
    pub cli_version: Option<String>,
    /// Results received.
    pub turns: u64,
    /// User messages sent whose turn has not ended.
    pub queued_turns: u64,
    /// Who sent the latest user message, as its sender named itself
    /// ([`SessionCore::send_user_from`]): the turn's starter a permission request records.
    /// `None` when the latest came without a name.
    pub sender: Option<String>,
    /// Total cost in US dollars, as the CLI reports it (cumulative per process; 2.1.330 also
    /// counts earlier runs of a resumed session).
    pub cost_usd: f64,
    /// Permission requests waiting for a person.
    pub pending_permissions: Vec<PendingPermission>,
    /// Hook callbacks waiting for an answer.
    pub pending_hooks: Vec<PendingHook>,
    /// Slash commands and skills the CLI offers (from `initialize`, with what each does, and
    /// `system/init`), at most [`MAX_COMMANDS`].
    pub slash_commands: Vec<SlashCommandInfo>,
    /// Models offered by `initialize`.
    pub available_models: Vec<String>,
    /// The last result's text.
    pub last_result: Option<String>,
    /// Whether the last result was an error.
    pub last_result_is_error: bool,
}

struct OutgoingControl {
    subtype: String,
}

struct AskedPermission {
    pending: PendingPermission,
    request: CanUseToolRequest,
    /// How the CLI asked, which is how it is answered.
    via: Via,
}

/// How the CLI asked about a call, which is how the answer goes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Via {
    /// Its `can_use_tool` control request: a permission result.
    CanUseTool,
    /// Held at the policy's `PreToolUse` hook, which waits for the answer (a call that may be
    /// parked): the hook's decision.
    HeldHook,
    /// A terminal's `PermissionRequest` hook, run while the CLI's own dialog shows
    /// (`core/dialog.rs`): the hook's decision, unless the terminal answered first.
    Dialog,
}

impl AskedPermission {
    /// The record of this request ending without a person's answer: denied, `by` what.
    fn ended(&self, request_id: &str, by: DecidedBy, message: String) -> SessionEvent {
        SessionEvent::decided(request_id, &self.request.tool_name, Behavior::Deny, by, message)
            .with_tool_use_id(self.request.tool_use_id.clone())
            .with_origin(self.pending.origin.clone())
    }
}

/// A `PreToolUse` hook's answer: `deny`, `ask` (or `allow`), with the reason.
fn pre_tool_use_verdict(verdict: &str, reason: &str) -> Value {
    serde_json::json!({"hookSpecificOutput": {
        "hookEventName": "PreToolUse",
        "permissionDecision": verdict,
        "permissionDecisionReason": reason,
    }})
}

/// A `PreToolUse` hook's answer for a permission `result` on a call whose input was `input`:
/// Claude Code's `hookSpecificOutput` (the changed input as `updatedInput`; a deny that ends
/// the turn adds `continue: false` and its `stopReason`).
pub fn hook_answer(result: &PermissionResult, input: &Value) -> Value {
    match result {
        PermissionResult::Allow(allow) => {
            let mut output = serde_json::json!({
                "hookEventName": "PreToolUse",
                "permissionDecision": "allow",
                "permissionDecisionReason": "Allowed in Switchboard",
            });
            // A person's edit of the input runs instead of it.
            if let Some(changed) = allow.updated_input.as_ref().filter(|changed| *changed != input)
            {
                output["updatedInput"] = changed.clone();
            }
            serde_json::json!({"hookSpecificOutput": output})
        }
        PermissionResult::Deny(deny) => {
            let mut output = pre_tool_use_verdict("deny", &deny.message);
            if deny.interrupt == Some(true) {
                output["continue"] = Value::Bool(false);
                output["stopReason"] = Value::from(deny.message.clone());
            }
            output
        }
        PermissionResult::Unknown(_) => pre_tool_use_verdict(
            "deny",
            "Switchboard could not decide on the call: an answer it cannot read",
        ),
    }
}

/// The session's state machine.
pub struct SessionCore {
    state: SessionState,
    policy: Policy,
    match_context: MatchContext,
    next_request: u64,
    control_timeout: Duration,
    /// This run's cost, from the CLI's running totals.
    cost: crate::cost::CostCounter,
    /// Our requests awaiting the CLI's response.
    outgoing: HashMap<String, OutgoingControl>,
    /// The CLI's permission requests awaiting a person.
    asked: indexmap::IndexMap<String, AskedPermission>,
    /// The CLI's hook callbacks awaiting an answer.
    hooks: indexmap::IndexMap<String, PendingHook>,
    /// Ids answered recently (for "already answered").
    answered: VecDeque<String>,
    answered_set: HashSet<String>,
    /// User messages held until `initialize` is answered (2.1.37 refuses `initialize` after
    /// the first user message, so it must go first), and whatever else was sent before the
    /// first prompt ([`SessionCore::control_before_prompts`]).
    held: Vec<Arc<str>>,
    /// The request ids of those: `initialize`'s first.
    awaiting: Vec<String>,
    /// Those of them whose failure refuses every prompt ([`SessionCore::control_before_prompts`]).
    required: Vec<String>,
    /// Why prompts are refused: a request they waited for failed.
    refused: Option<String>,
    /// Set when we asked the CLI to end.
    shutdown_requested: bool,
    snapshot: SessionSnapshot,
    /// Set when anything the snapshot shows may have changed; cleared by `take_changed`.
    changed: bool,
    /// The `initialize` re-sent after a reconnect, whose answer lists what the CLI still waits
    /// for.
    resync: Option<String>,
    /// The `initialize` sent at start (with the policy's hook), sent again on a reconnect.
    initialize: Option<InitializeRequest>,
    /// Tool calls awaiting their result, by `tool_use_id` (at most [`CALL_MEMORY`]).
    calls: indexmap::IndexMap<String, ToolCall>,
    /// Our answers to the CLI's permission requests (the line sent), by request id (the last
    /// [`ANSWERED_MEMORY`]): a CLI that asks again, its answer lost with a socket, gets the
    /// same answer, and nobody is asked twice.
    decided: indexmap::IndexMap<String, DecidedAnswer>,
    /// The lines are an interactive CLI's transcript, not the stream-json protocol
    /// ([`SessionCore::set_transcript`]).
    transcript: bool,
    /// Our prompts the CLI has not echoed yet (by `uuid`; at most [`ANSWERED_MEMORY`]).
    unechoed: indexmap::IndexSet<String>,
    /// The CLI's socket came back since the session was last idle: a turn may have ended
    /// while it was away, its `result` lost with the old socket (2.1.37 sends nothing again).
    results_may_be_lost: bool,
    /// The CLI's init listed `interrupt_cancel_queued_v1`.
    interrupt_cancels_queued: bool,
    /// The requests in `asked` that are MCP servers' questions ([`elicitation`]).
    elicitations: HashSet<String>,
    /// Answers to parked requests, by the call's `tool_use_id`, for this run's CLI to hear when
    /// it asks about the call again ([`SessionCore::set_parked_answers`]).
    parked_answers: HashMap<String, ParkedAnswer>,
    /// Whoever runs the session can let a parked session's CLI go and resume it with the answer
    /// (the daemon): only then does the policy's `park_after` park anything.
    parkable: bool,
    /// The requests parked in this run (their answers resume the session).
    parked_here: HashSet<String>,
    /// A terminal's dialogs answered (from afar, or there) whose outcome the transcript has
    /// still to tell, by the call's `tool_use_id` (`core/dialog.rs`).
    dialogs: indexmap::IndexMap<String, dialog::Settling>,
    /// Who sent the prompts since the session was last idle: a call's origin, when they agree.
    open_turns: crate::origin::OpenTurns,
    /// Where each MCP server was configured (`init`'s `mcp_servers`), by the name its tools
    /// carry.
    mcp_sources: HashMap<String, String>,
}

impl std::fmt::Debug for SessionCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionCore").finish_non_exhaustive()
    }
}

impl SessionCore {
    /// A core deciding permissions with `policy`, for a session in `match_context.cwd`.
    pub fn new(policy: Policy, match_context: MatchContext) -> Self {
        SessionCore {
            state: SessionState::Starting,
            policy,
            match_context,
            next_request: 0,
            control_timeout: CONTROL_TIMEOUT,
            cost: crate::cost::CostCounter::default(),
            outgoing: HashMap::new(),
            asked: indexmap::IndexMap::new(),
            hooks: indexmap::IndexMap::new(),
            answered: VecDeque::new(),
            answered_set: HashSet::new(),
            held: Vec::new(),
            awaiting: Vec::new(),
            required: Vec::new(),
            refused: None,
            initialize: None,
            calls: indexmap::IndexMap::new(),
            decided: indexmap::IndexMap::new(),
            shutdown_requested: false,
            snapshot: SessionSnapshot {
                state: SessionState::Starting,
                claude_session_id: None,
                model: None,
                permission_mode: None,
                cli_version: None,
                disconnected_since_ms: None,
                turns: 0,
                queued_turns: 0,
                sender: None,
                cost_usd: 0.0,
                pending_permissions: Vec::new(),
                pending_hooks: Vec::new(),
                slash_commands: Vec::new(),
                available_models: Vec::new(),
                last_result: None,
                last_result_is_error: false,
            },
            changed: true,
            resync: None,
            transcript: false,
            unechoed: indexmap::IndexSet::new(),
            results_may_be_lost: false,
            interrupt_cancels_queued: false,
            elicitations: HashSet::new(),
            parked_answers: HashMap::new(),
            parkable: false,
            parked_here: HashSet::new(),
            dialogs: indexmap::IndexMap::new(),
            open_turns: crate::origin::OpenTurns::default(),
            mcp_sources: HashMap::new(),
        }
    }

    /// The CLI is interactive (in a person's terminal) and its lines are its transcript
    /// ([`switchboard_protocol::transcript`]): a prompt is a `user` line the CLI wrote, a
    /// turn ends at `turn_duration` or an interruption, and of our control requests only
    /// `interrupt` can reach it (as the Esc key, which the CLI does not answer).
    pub fn set_transcript(&mut self) {
        self.transcript = true;
    }

    /// Whether the snapshot may have changed since the last call (so the shell publishes it
    /// only then: most lines, stream events, change nothing it shows).
    pub fn take_changed(&mut self) -> bool {
        std::mem::take(&mut self.changed)
    }

    /// Sets how long our control requests wait.
    pub fn set_control_timeout(&mut self, timeout: Duration) {
        self.control_timeout = timeout;
    }

    /// The state.
    pub fn state(&self) -> SessionState {
        self.state
    }

    /// A copy of what the session looks like.
    pub fn snapshot(&self) -> SessionSnapshot {
        let mut snapshot = self.snapshot.clone();
        snapshot.state = self.state;
        snapshot.pending_permissions =
            self.asked.values().map(|asked| asked.pending.clone()).collect();
        snapshot.pending_hooks = self.hooks.values().cloned().collect();
        snapshot
    }

    /// The policy (session rules included).
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    // ----- commands -----------------------------------------------------------------------

    /// The CLI process is up. With `initialize`, user messages wait for its answer; an
    /// `initialize` payload gets the policy's `PreToolUse` hook ([`POLICY_HOOK_ID`]).
    pub fn on_started(&mut self, initialize: Option<ControlRequestPayload>) -> Vec<Effect> {
        self.changed = true;
        let mut effects = Vec::new();
        let initialize = initialize.map(|payload| match payload {
            ControlRequestPayload::Initialize(request) => {
                let request = request.with_hook(
                    "PreToolUse",
                    vec![HookMatcher {
                        matcher: None,
                        hook_callback_ids: vec![POLICY_HOOK_ID.to_owned()],
                        // A call held at the hook (one that may be parked) waits there for a
                        // person: the CLI's own hook timeout (60 s by default) must not end it.
                        timeout: (self.policy.park_after.is_some() && self.parkable).then(|| {
                            self.policy.ask_timeout.as_secs().saturating_add(HELD_HOOK_MARGIN_SECS)
                        }),
                        extra: Default::default(),
                    }],
                );
                self.initialize = Some(request.clone());
                ControlRequestPayload::Initialize(request)
            }
            other => other,
        });
        match initialize {
            Some(payload) => {
                let (request_id, mut sent) = self.control(payload);
                self.awaiting.push(request_id);
                effects.append(&mut sent);
            }
            None => self.set_state(SessionState::Idle, &mut effects),
        }
        effects
    }

    /// Sends one of our control requests before the first prompt, which waits for its answer
    /// as it waits for `initialize`'s: a warm CLI's permission mode is set so before it runs
    /// anything ([`crate::pool`]). If it fails (refused, or no answer in time), no prompt is
    /// ever written (each is reported undelivered) and the CLI is ended ([`Effect::End`]): the
    /// session must not run in another mode than it asked for.
    pub fn control_before_prompts(
        &mut self,
        payload: ControlRequestPayload,
    ) -> (String, Vec<Effect>) {
        let (request_id, effects) = self.control(payload);
        if !self.state.is_final() {
            self.awaiting.push(request_id.clone());
            self.required.push(request_id.clone());
        }
        (request_id, effects)
    }

    /// Holds prompts until [`SessionCore::release_prompts`], as if a request were awaited: a
    /// warm CLI's session replays the CLI's answer to `initialize` and then sets its mode, and
    /// must not look idle in between.
    pub fn hold_prompts(&mut self) {
        self.awaiting.push(String::new());
    }

    /// Ends [`SessionCore::hold_prompts`].
    pub fn release_prompts(&mut self) -> Vec<Effect> {
        let mut effects = Vec::new();
        self.awaited("", true, &mut effects);
        effects
    }

    /// Sends one of our control requests; returns its request id. The answer comes as
    /// [`Effect::ControlDone`].
    pub fn control(&mut self, payload: ControlRequestPayload) -> (String, Vec<Effect>) {
        self.changed = true;
        self.next_request += 1;
        let request_id = format!("sb-{}", self.next_request);
        let subtype = payload.tag().unwrap_or("unknown").to_owned();
        let mut effects = Vec::new();
        if self.state.is_final() {
            effects.push(Effect::ControlDone(
                request_id.clone(),
                Err(ControlFailure::LinkClosed { subtype }),
            ));
            return (request_id, effects);
        }
        if self.transcript {
            // A terminal takes keys, not requests: an interrupt is the Esc key, done once
            // typed; nothing else can be asked of it.
            let done = if matches!(payload, ControlRequestPayload::Interrupt(_)) {
                self.write(
                    Message::from(ControlRequest::new(request_id.clone(), payload)),
                    &mut effects,
                );
                Ok(ControlSuccess { request_id: request_id.clone(), ..ControlSuccess::default() })
            } else {
                Err(ControlFailure::Refused {
                    error: format!(
                        "an interactive session in a terminal takes prompts and interrupts only; use its terminal for {subtype}"
                    ),
                    subtype,
                    error_code: None,
                    pending: Vec::new(),
                })
            };
            effects.push(Effect::ControlDone(request_id.clone(), done));
            return (request_id, effects);
        }
        self.outgoing.insert(request_id.clone(), OutgoingControl { subtype });
        self.write(Message::from(ControlRequest::new(request_id.clone(), payload)), &mut effects);
        effects.push(Effect::StartTimer(Timer::Control(request_id.clone()), self.control_timeout));
        (request_id, effects)
    }

    /// Notes that we are ending the CLI (so its exit is not a crash).
    pub fn on_shutdown_requested(&mut self) {
        self.shutdown_requested = true;
    }

    // ----- inputs from the CLI ------------------------------------------------------------

    /// A line from the CLI.
    pub fn on_line(&mut self, received: Received) -> Vec<Effect> {
        let mut effects = Vec::new();
        let message = Arc::new(received.message);
        effects.push(Effect::Emit(SessionEvent::Line(WireLine {
            direction: LineDirection::FromCli,
            raw: received.raw,
            message: message.clone(),
        })));
        let session_id = if self.transcript {
            switchboard_protocol::transcript::session_id(&message)
        } else {
            message.session_id()
        };
        if let Some(session_id) = session_id {
            if self.snapshot.claude_session_id.as_deref() != Some(session_id) {
                self.snapshot.claude_session_id = Some(session_id.to_owned());
                self.changed = true;
                effects.push(Effect::Emit(SessionEvent::ClaudeSessionId(session_id.to_owned())));
            }
        }
        if !matches!(message.as_ref(), Message::StreamEvent(_)) {
            self.changed = true;
        }
        if self.transcript {
            self.on_transcript_line(&message, &mut effects);
        }
        match message.readable() {
            Message::Drift(drift) => self.on_drift(drift, &mut effects),
            Message::System(system) => self.on_system(system, &mut effects),
            Message::Assistant(assistant) => {
                for block in &assistant.message.content {
                    if let ContentBlock::ToolUse(tool) = block {
                        self.note_tool_call(&tool.id, &tool.name, &tool.input);
                    }
                }
                if let Some(model) =
                    assistant.message.model.as_deref().filter(|model| *model != "<synthetic>")
                {
                    self.note_model(model, &mut effects);
                }
                self.resume_working(&mut effects);
            }
            Message::User(user) => {
                if let Some(uuid) = &user.uuid {
                    self.unechoed.shift_remove(uuid);
                }
                for result in user.tool_results() {
                    self.on_tool_result(result, &mut effects);
                }
            }
            Message::StreamEvent(_) => self.resume_working(&mut effects),
            Message::Result(result) => {
                self.snapshot.turns += 1;
                self.snapshot.queued_turns = self.snapshot.queued_turns.saturating_sub(1);
                // After a reconnect, a turn's result may never come: when every prompt has
                // come back (the CLI took them all) and this result ends the last turn the CLI
                // has, no other is still to run.
                if self.results_may_be_lost && self.unechoed.is_empty() {
                    self.snapshot.queued_turns = 0;
                }
                if self.snapshot.queued_turns == 0 {
                    self.results_may_be_lost = false;
                    self.open_turns.idle();
                }
                self.snapshot.last_result = result.result.clone();
                self.snapshot.last_result_is_error = result.is_error;
                if let Some(total) = result.cost_usd() {
                    // This run's cost, adding up across a `/clear` ([`crate::cost`]).
                    self.cost.on_result(total);
                    let cost = self.cost.sum();
                    if self.snapshot.cost_usd != cost {
                        self.snapshot.cost_usd = cost;
                        effects.push(Effect::Emit(SessionEvent::CostChanged(cost)));
                    }
                }
                if self.snapshot.queued_turns == 0
                    && self.asked.is_empty()
                    && !self.state.is_final()
                {
                    self.set_state(SessionState::Idle, &mut effects);
                }
            }
            Message::ConversationReset(_) => self.cost.on_reset(),
            // The CLI took a prompt (2.1.330): a `cancelled` for it later (a prompt sent with
            // `priority: now` stops the running turn, whose prompt is then said cancelled)
            // is not one turn less, its turn has ended.
            Message::CommandLifecycle(lifecycle) if lifecycle.state == "started" => {
                self.unechoed.shift_remove(&lifecycle.command_uuid);
            }
            // A queued prompt dropped (`cancel_async_message`, 2.1.330 says so in a
            // `command_lifecycle`): it will have no turn, so the session is idle once the turns
            // before it end.
            Message::CommandLifecycle(lifecycle) if lifecycle.state == "cancelled" => {
                // Only a prompt of ours that had not run yet.
                let waiting = self.unechoed.shift_remove(&lifecycle.command_uuid);
                self.snapshot.queued_turns =
                    self.snapshot.queued_turns.saturating_sub(u64::from(waiting));
            }
            Message::ControlRequest(request) => self.on_control_request(request, &mut effects),
            Message::ControlResponse(response) => self.on_control_response(response, &mut effects),
            Message::ControlCancelRequest(cancel) => {
                self.on_cancel(&cancel.request_id, &mut effects)
            }
            _ => {}
        }
        // Every turn of ours has ended, however the CLI said so (a result, `idle`, a cancelled
        // prompt, a transcript's turn end): a turn it starts next is no prompt's of ours.
        if self.snapshot.queued_turns == 0 {
            self.open_turns.idle();
        }
        effects
    }

    /// `--sdk-url`: the CLI's socket is up. After a reconnect, `initialize` goes out again: its
    /// answer (an error, "Already initialized", on 2.1.37 and 2.1.120) lists the permission
    /// requests the CLI still waits for, which become the truth (2.1.37 replays nothing it sent
    /// meanwhile, and no version replays a `can_use_tool`).
    pub fn on_connected(&mut self, reconnect: bool) -> Vec<Effect> {
        self.changed = true;
        self.snapshot.disconnected_since_ms = None;
        let mut effects = vec![Effect::Emit(SessionEvent::Connected { reconnect })];
        if reconnect && !self.state.is_final() {
            self.results_may_be_lost = self.snapshot.queued_turns > 0;
            // The same payload as at start: the policy's hook stays registered.
            let initialize = self.initialize.clone().unwrap_or_default();
            let (request_id, mut sent) =
                self.control(ControlRequestPayload::Initialize(initialize));
            self.resync = Some(request_id);
            effects.append(&mut sent);
        }
        effects
    }

    /// `--sdk-url`: the CLI's socket went down.
    pub fn on_disconnected(&mut self) -> Vec<Effect> {
        self.changed = true;
        self.snapshot.disconnected_since_ms = Some(crate::event::now_ms());
        vec![Effect::Emit(SessionEvent::Disconnected)]
    }

    /// `--sdk-url`: a line for the CLI that never reached it (the transport re-sends what it
    /// safely can first: prompts until the CLI echoes them, control responses; what is left is
    /// a control request whose send failed, or, at the exit, what the CLI never got). A lost
    /// prompt is no longer a turn the session waits for.
    pub fn on_undelivered(&mut self, line: &[u8]) -> Vec<Effect> {
        let LineRef { line_type, uuid, .. } = LineRef::of(line);
        let text = String::from_utf8_lossy(line);
        let preview: String = text.trim_end().chars().take(200).collect();
        let mut effects = Vec::new();
        // A prompt that never reached the CLI starts no turn: no result will end it, and the
        // session must not wait for one.
        let prompt = line_type == "user" && is_prompt(line);
        if prompt && self.snapshot.queued_turns > 0 {
            self.snapshot.queued_turns -= 1;
            self.changed = true;
            if self.snapshot.queued_turns == 0 {
                self.open_turns.idle();
            }
            if self.snapshot.queued_turns == 0
                && self.asked.is_empty()
                && self.state == SessionState::Working
            {
                self.set_state(SessionState::Idle, &mut effects);
            }
        }
        effects.insert(
            0,
            Effect::Emit(SessionEvent::Undelivered { line_type, uuid, preview, prompt }),
        );
        effects
    }

    /// `--sdk-url`: a line for the CLI was written to its socket.
    pub fn on_sent(&mut self, line: &[u8]) -> Vec<Effect> {
        let LineRef { line_type, uuid, request_id } = LineRef::of(line);
        vec![Effect::Emit(SessionEvent::Sent { line_type, uuid, request_id })]
    }

    /// `--sdk-url`: a line the CLI may not have received was written again on a new socket.
    pub fn on_resent(&mut self, line: &[u8]) -> Vec<Effect> {
        let LineRef { line_type, uuid, request_id } = LineRef::of(line);
        let reason = match line_type.as_str() {
            "user" => "the CLI had not confirmed this prompt when its connection dropped",
            _ => "its first send failed with the connection",
        };
        let reason = reason.to_owned();
        vec![Effect::Emit(SessionEvent::Resent { line_type, uuid, request_id, reason })]
    }

    /// Sends the recorded answer to a permission request the CLI asks for again (its answer
    /// was lost with a socket): true when there was one, for the same tool call.
    fn answer_again(
        &mut self,
        request_id: &str,
        request: &CanUseToolRequest,
        effects: &mut Vec<Effect>,
    ) -> bool {
        let Some(decided) = self.decided.get(request_id) else { return false };
        if decided.tool_use_id != request.tool_use_id {
            return false;
        }
        effects.push(Effect::Send(Arc::from(format!("{}\n", decided.line))));
        effects.push(Effect::Emit(SessionEvent::Resent {
            line_type: "control_response/success".to_owned(),
            uuid: None,
            request_id: Some(request_id.to_owned()),
            reason: "the CLI asked again about a tool call it had been answered (the answer was lost with its connection)".to_owned(),
        }));
        true
    }

    /// Takes the CLI's list of pending permission requests as the truth: requests we did not
    /// know (sent while the socket was down) are decided or asked now; requests we thought
    /// pending that the CLI no longer lists are over.
    fn reconcile(&mut self, pending: &[ControlRequest], effects: &mut Vec<Effect>) {
        let listed: HashSet<&str> =
            pending.iter().map(|request| request.request_id.as_str()).collect();
        // (The list names permission requests only: an MCP server's question still waits.)
        let forgotten: Vec<String> = self
            .asked
            .keys()
            .filter(|id| !listed.contains(id.as_str()) && !self.elicitations.contains(*id))
            .cloned()
            .collect();
        for request_id in forgotten {
            if let Some(asked) = self.asked.shift_remove(&request_id) {
                effects.push(Effect::Emit(asked.ended(
                    &request_id,
                    DecidedBy::LinkClosed,
                    "the CLI no longer waits for this request".to_owned(),
                )));
                self.after_permission_resolved(&request_id, effects);
            }
        }
        for request in pending {
            if self.asked.contains_key(&request.request_id) {
                continue;
            }
            if let ControlRequestPayload::CanUseTool(can_use_tool) = &request.request {
                // One we answered: the answer was lost with the socket, and goes again.
                if !self.answer_again(&request.request_id, can_use_tool, effects) {
                    self.on_can_use_tool(&request.request_id, can_use_tool, effects);
                }
            }
        }
    }

    /// A line that could not be decoded.
    ///
    /// A control request that could not be read is still answered, or the CLI would wait for
    /// the answer forever: a permission request is denied with the reason, anything else gets
    /// an error response.
    pub fn on_bad_line(&mut self, error: switchboard_protocol::LineError) -> Vec<Effect> {
        let mut effects = Vec::new();
        let unread = error.control_request.clone();
        effects.push(Effect::Emit(SessionEvent::BadLine(error.clone())));
        if let Some(request) = unread {
            self.answer_unreadable(request, &error.kind.to_string(), &mut effects);
        }
        effects
    }

    /// A control request that could not be read is still answered, or the CLI would wait for
    /// the answer forever: a permission request is denied with the reason, a hook callback
    /// refuses the tool call, anything else gets an error response.
    fn answer_unreadable(&mut self, request: ControlRef, why: &str, effects: &mut Vec<Effect>) {
        let reason = format!("Switchboard could not read this control request: {why}");
        if request.subtype.as_deref() == Some("can_use_tool") {
            let message = format!("{reason}; denied");
            self.respond_permission(
                &request.request_id,
                None,
                &PermissionResult::deny(message.clone()),
                effects,
            );
            effects.push(Effect::Emit(SessionEvent::decided(
                &request.request_id,
                "(unreadable)",
                Behavior::Deny,
                DecidedBy::Policy { rule: None },
                message,
            )));
            self.mark_answered(&request.request_id);
        } else if request.subtype.as_deref() == Some("hook_callback") {
            // It may be the policy's PreToolUse hook: a tool call the policy cannot see is
            // refused (a hook of another event ignores the PreToolUse decision).
            let output = pre_tool_use_verdict("deny", &reason);
            let response = ControlResponse::success(request.request_id.clone(), &output);
            self.write(Message::from(response), effects);
            self.mark_answered(&request.request_id);
        } else {
            let response = ControlResponse::error(request.request_id, reason);
            self.write(Message::from(response), effects);
        }
    }

    /// A line of a known type that did not fit the model and could not be read even in part
    /// (see [`Drift`]): what its routing fields say still happens.
    fn on_drift(&mut self, drift: &Drift, effects: &mut Vec<Effect>) {
        let request_id = drift.request_id().map(str::to_owned);
        match (drift.field("type"), request_id) {
            (Some("control_request"), Some(request_id)) => {
                let subtype = drift.subtype().map(str::to_owned);
                self.answer_unreadable(ControlRef { request_id, subtype }, &drift.reason, effects);
            }
            (Some("control_response"), Some(request_id)) => {
                // Whatever our request asked, its answer cannot be used: it failed. An
                // unreadable answer to a re-sent `initialize` says nothing about what the CLI
                // still waits for: nothing pending is ended on its word.
                if self.resync.as_deref() == Some(request_id.as_str()) {
                    self.resync = None;
                }
                let reason = format!("Switchboard could not read the answer: {}", drift.reason);
                let response = ControlResponse::error(request_id, reason);
                self.on_control_response(&response, effects);
            }
            (Some("control_cancel_request"), Some(request_id)) => {
                self.on_cancel(&request_id, effects)
            }
            (Some("assistant" | "stream_event"), _) => self.resume_working(effects),
            _ => {}
        }
    }

    /// A stderr line.
    pub fn on_stderr(&mut self, line: String) -> Vec<Effect> {
        vec![Effect::Emit(SessionEvent::Stderr(line))]
    }

    /// The CLI exited. Everything pending ends now.
    pub fn on_exit(
        &mut self,
        code: Option<i32>,
        signal: Option<i32>,
        description: String,
    ) -> Vec<Effect> {
        self.changed = true;
        let mut effects = Vec::new();
        for (request_id, outgoing) in std::mem::take(&mut self.outgoing) {
            effects.push(Effect::ControlDone(
                request_id,
                Err(ControlFailure::LinkClosed { subtype: outgoing.subtype }),
            ));
        }
        for (request_id, asked) in std::mem::take(&mut self.asked) {
            effects.push(Effect::Emit(asked.ended(
                &request_id,
                DecidedBy::LinkClosed,
                "the CLI exited before the request was answered".to_owned(),
            )));
            self.mark_answered(&request_id);
        }
        for request_id in std::mem::take(&mut self.hooks).into_keys() {
            self.mark_answered(&request_id);
        }
        self.dialogs_ended(&mut effects);
        // Answers to parked requests this run's CLI never asked for (it died first): the
        // requests wait on, parked, and the next answer resumes the session again.
        for (_, parked) in std::mem::take(&mut self.parked_answers) {
            let mut pending = parked.pending;
            // Parked again now: its wait (the policy's `park_expires_secs`) starts again.
            let now = now_ms();
            pending.parked_at_ms = Some(now);
            pending.park_expires_at_ms = self.policy.park_expires.map(|after| {
                now.saturating_add(u64::try_from(after.as_millis()).unwrap_or(u64::MAX))
            });
            effects.push(Effect::Emit(SessionEvent::PermissionRequested(pending)));
        }
        self.held.clear();
        let requested = self.shutdown_requested;
        let mut clean = code == Some(0) || requested;
        let mut description = description;
        // `--sdk-url`: a CLI that cannot reach the daemon again gives up and exits 0. That is
        // no clean end: what it did meanwhile never arrived.
        if let (Some(since), false) = (self.snapshot.disconnected_since_ms.take(), requested) {
            let seconds = crate::event::now_ms().saturating_sub(since) / 1000;
            description = format!(
                "{description}, {seconds} s after its connection to the daemon was lost (it never reconnected; what it did meanwhile is missing)"
            );
            clean = false;
        }
        effects.push(Effect::Emit(SessionEvent::Exited { code, signal, requested, description }));
        self.set_state(
            if clean { SessionState::Exited } else { SessionState::Crashed },
            &mut effects,
        );
        effects
    }

    /// A timer fired.
    pub fn on_timer(&mut self, timer: Timer) -> Vec<Effect> {
        self.changed = true;
        let mut effects = Vec::new();
        match timer {
            Timer::Control(request_id) => {
                if let Some(outgoing) = self.outgoing.remove(&request_id) {
                    effects.push(Effect::Emit(SessionEvent::ControlTimedOut {
                        request_id: request_id.clone(),
                        subtype: outgoing.subtype.clone(),
                    }));
                    effects.push(Effect::ControlDone(
                        request_id.clone(),
                        Err(ControlFailure::TimedOut {
                            subtype: outgoing.subtype,
                            seconds: self.control_timeout.as_secs(),
                        }),
                    ));
                    self.awaited(&request_id, false, &mut effects);
                }
            }
            Timer::Permission(request_id) => {
                if let Some(asked) = self.asked.shift_remove(&request_id) {
                    let seconds = self.policy.ask_timeout.as_secs();
                    let message = format!(
                        "No one answered this permission request within {seconds} s, so it was denied (Switchboard permissions fail closed)."
                    );
                    self.respond_asked(
                        &request_id,
                        &asked,
                        &PermissionResult::deny(message.clone()),
                        &mut effects,
                    );
                    let ended = asked.ended(&request_id, DecidedBy::Timeout, message);
                    self.settle(&asked, ended, &mut effects);
                    self.after_permission_resolved(&request_id, &mut effects);
                }
            }
            Timer::Park(request_id) => self.park(&request_id, &mut effects),
            Timer::Hook(request_id) => {
                if self.hooks.contains_key(&request_id) {
                    if let Ok(mut answered) =
                        self.answer_hook(&request_id, serde_json::json!({}), "timeout")
                    {
                        effects.append(&mut answered);
                    }
                }
            }
        }
        effects
    }

    // ----- internals ----------------------------------------------------------------------

    /// What a transcript says that the protocol says otherwise: a prompt begins a turn (one
    /// the person typed in the terminal, or ours, typed only while the CLI is idle), and a
    /// turn's end leaves the CLI idle (whoever typed it: the CLI runs one turn at a time).
    fn on_transcript_line(&mut self, message: &Message, effects: &mut Vec<Effect>) {
        use switchboard_protocol::transcript;
        if transcript::prompt(message).is_some() {
            self.snapshot.queued_turns = self.snapshot.queued_turns.saturating_sub(1);
            if matches!(self.state, SessionState::Idle) {
                self.set_state(SessionState::Working, effects);
            }
        } else if let Some(decision) = transcript::hook_permission_decision(message) {
            self.on_hook_permission_decision(&decision, effects);
        } else if transcript::turn_end(message).is_some() {
            self.snapshot.turns += 1;
            if !self.state.is_final() {
                self.set_state(SessionState::Idle, effects);
            }
        }
    }

    fn write(&mut self, message: Message, effects: &mut Vec<Effect>) -> Arc<str> {
        let mut raw = message.encode();
        let line: Arc<str> = Arc::from(raw.as_str());
        raw.push('\n');
        effects.push(Effect::Send(Arc::from(raw)));
        effects.push(Effect::Emit(SessionEvent::Line(WireLine {
            direction: LineDirection::ToCli,
            raw: line.clone(),
            message: Arc::new(message),
        })));
        line
    }

    fn set_state(&mut self, to: SessionState, effects: &mut Vec<Effect>) {
        if self.state != to && !self.state.is_final() {
            self.changed = true;
            let from = self.state;
            self.state = to;
            effects.push(Effect::Emit(SessionEvent::State { from, to }));
        }
    }

    fn resume_working(&mut self, effects: &mut Vec<Effect>) {
        if matches!(self.state, SessionState::Idle | SessionState::Starting)
            && self.awaiting.is_empty()
        {
            self.set_state(SessionState::Working, effects);
        }
    }

    fn on_system(&mut self, system: &SystemMessage, effects: &mut Vec<Effect>) {
        match system {
            SystemMessage::Init(init) => {
                self.interrupt_cancels_queued = init
                    .capabilities
                    .iter()
                    .flatten()
                    .any(|capability| capability == "interrupt_cancel_queued_v1");
                if let Some(cwd) = &init.cwd {
                    self.learn_cwd(cwd);
                }
                self.learn_mcp_sources(init);
                if let Some(model) = &init.model {
                    self.note_model(model, effects);
                }
                self.snapshot.cli_version = init.claude_code_version.clone();
                if let Some(mode) = &init.permission_mode {
                    self.note_mode(mode.as_str(), effects);
                }
                if let Some(names) = &init.slash_commands {
                    let skills: HashSet<&str> = init
                        .skills
                        .iter()
                        .flatten()
                        .map(|skill| skill.trim_start_matches('/'))
                        .collect();
                    let commands = &mut self.snapshot.slash_commands;
                    for name in names.iter().filter_map(|name| command_name(name)) {
                        let skill = skills.contains(name.as_str());
                        if let Some(known) = commands.iter_mut().find(|known| known.name == name) {
                            known.skill = skill;
                        } else if commands.len() < MAX_COMMANDS {
                            commands.push(SlashCommandInfo {
                                name,
                                description: None,
                                argument_hint: None,
                                skill,
                            });
                        }
                    }
                }
                self.resume_working(effects);
            }
            SystemMessage::Status(status) => {
                if let Some(mode) = &status.permission_mode {
                    self.note_mode(mode.as_str(), effects);
                }
                match status.status.as_ref().and_then(|s| s.as_deref()) {
                    Some("compacting") => self.set_state(SessionState::Compacting, effects),
                    _ if self.state == SessionState::Compacting => {
                        let next = if self.asked.is_empty() {
                            SessionState::Working
                        } else {
                            SessionState::AwaitingPermission
                        };
                        self.set_state(next, effects);
                    }
                    _ => {}
                }
            }
            // The CLI's word on where it is (with CLAUDE_CODE_EMIT_SESSION_STATE_EVENTS=1):
            // `running` also when it starts a turn of its own (a background agent's news), and
            // `idle` only once held-back results and background agents are done.
            SystemMessage::SessionStateChanged(changed) => match changed.state.as_str() {
                "running" => self.resume_working(effects),
                // The CLI has nothing running and nothing queued: a prompt it took into the
                // running turn (every version folds one sent mid-turn in between tool calls,
                // the CLI's default priority `next`) had no turn of its own, and is not one
                // still to come. What it was never given (held behind `initialize`) is.
                "idle" => {
                    let held = self.held.iter().filter(|line| is_prompt(line.as_bytes())).count();
                    self.snapshot.queued_turns = self.snapshot.queued_turns.min(held as u64);
                    if self.asked.is_empty()
                        && self.snapshot.queued_turns == 0
                        && matches!(self.state, SessionState::Working)
                    {
                        self.set_state(SessionState::Idle, effects)
                    }
                }
                _ => {}
            },
            // The whole list, replaced (skills found as the agent works).
            SystemMessage::CommandsChanged(changed) => {
                let skills: HashSet<String> = self
                    .snapshot
                    .slash_commands
                    .iter()
                    .filter(|known| known.skill)
                    .map(|known| known.name.clone())
                    .collect();
                let mut commands = command_infos(changed.commands.iter().cloned());
                for command in &mut commands {
                    command.skill = skills.contains(&command.name);
                }
                self.snapshot.slash_commands = commands;
            }
            _ => {}
        }
    }

    fn on_control_request(&mut self, request: &ControlRequest, effects: &mut Vec<Effect>) {
        let request_id = request.request_id.clone();
        match &request.request {
            ControlRequestPayload::CanUseTool(can_use_tool) => {
                if !self.answer_again(&request_id, can_use_tool, effects) {
                    self.on_can_use_tool(&request_id, can_use_tool, effects)
                }
            }
            ControlRequestPayload::HookCallback(hook) => {
                self.on_hook_callback(&request_id, hook, effects)
            }
            ControlRequestPayload::Elicitation(elicitation)
                if !self.asked.contains_key(&request_id)
                    && !self.answered_set.contains(&request_id) =>
            {
                self.on_elicitation(&request_id, elicitation, effects)
            }
            // Asked again (a reconnect): it waits, or was answered, already.
            ControlRequestPayload::Elicitation(_) => {}
            other => {
                let subtype = other.tag().unwrap_or("unknown").to_owned();
                let response = ControlResponse::error(
                    request_id.clone(),
                    format!("Switchboard does not serve control requests of subtype {subtype}"),
                );
                self.write(Message::from(response), effects);
                effects.push(Effect::Emit(SessionEvent::UnsupportedControlRequest {
                    request_id,
                    subtype,
                }));
            }
        }
    }

    /// The model the lines say the session runs; a change is an event.
    fn note_model(&mut self, model: &str, effects: &mut Vec<Effect>) {
        if self.snapshot.model.as_deref() != Some(model) {
            self.snapshot.model = Some(model.to_owned());
            effects.push(Effect::Emit(SessionEvent::ModelChanged(model.to_owned())));
        }
    }

    /// The permission mode the lines say; a change is an event.
    fn note_mode(&mut self, mode: &str, effects: &mut Vec<Effect>) {
        if self.snapshot.permission_mode.as_deref() != Some(mode) {
            self.snapshot.permission_mode = Some(mode.to_owned());
            effects.push(Effect::Emit(SessionEvent::ModeChanged(mode.to_owned())));
        }
    }

    /// A CLI that connected on its own says where it runs only in its lines: relative rules
    /// (`Read(./.env)`) are resolved against that, once known. A session that started its CLI
    /// knows its cwd from the start and keeps it.
    fn learn_cwd(&mut self, cwd: &str) {
        if self.match_context.cwd.as_os_str().is_empty() && !cwd.is_empty() {
            self.match_context.cwd = std::path::PathBuf::from(cwd);
        }
    }

    fn on_control_response(&mut self, response: &ControlResponse, effects: &mut Vec<Effect>) {
        let Some(request_id) = response.request_id() else { return };
        if self.resync.as_deref() == Some(request_id) {
            self.resync = None;
            let pending = response.pending_permission_requests().to_vec();
            self.reconcile(&pending, effects);
        }
        // 2.1.37 answers set_permission_mode twice: the second finds nothing and is dropped.
        let Some(outgoing) = self.outgoing.remove(request_id) else { return };
        let result = match &response.response {
            ControlResponseBody::Success(success) => {
                if outgoing.subtype == "initialize" {
                    self.take_initialize_response(success, effects);
                }
                if outgoing.subtype == "set_permission_mode" {
                    if let Some(Ok(mode)) = success.payload::<Value>() {
                        if let Some(mode) = mode.get("mode").and_then(Value::as_str) {
                            self.note_mode(mode, effects);
                        }
                    }
                }
                Ok(success.clone())
            }
            ControlResponseBody::Error(ControlError {
                error,
                error_code,
                pending_permission_requests,
                ..
            }) => Err(ControlFailure::Refused {
                subtype: outgoing.subtype.clone(),
                error: error.clone(),
                error_code: error_code.clone(),
                pending: pending_permission_requests.clone().unwrap_or_default(),
            }),
            ControlResponseBody::Unknown(value) => Err(ControlFailure::Refused {
                subtype: outgoing.subtype.clone(),
                error: format!("unrecognised response {value}"),
                error_code: None,
                pending: Vec::new(),
            }),
        };
        let ok = result.is_ok();
        effects.push(Effect::ControlDone(request_id.to_owned(), result));
        self.awaited(request_id, ok, effects);
    }

    fn take_initialize_response(&mut self, success: &ControlSuccess, effects: &mut Vec<Effect>) {
        if let Some(Ok(response)) = success.payload::<InitializeResponse>() {
            if let Some(commands) = response.commands {
                self.snapshot.slash_commands = command_infos(commands);
            }
            if let Some(models) = response.models {
                self.snapshot.available_models =
                    models.into_iter().map(|model| model.value).collect();
            }
            if let Some(version) = response.claude_code_version {
                self.snapshot.cli_version = Some(version);
            }
            if let Some(mode) = response.current_permission_mode {
                self.note_mode(mode.as_str(), effects);
            }
        }
    }

    /// One of the requests user messages wait for was answered (`ok`: with success) or timed
    /// out: the last one releases them, and a required one that failed refuses them.
    fn awaited(&mut self, request_id: &str, ok: bool, effects: &mut Vec<Effect>) {
        let before = self.awaiting.len();
        self.awaiting.retain(|awaited| awaited != request_id);
        let required = self.required.iter().any(|id| id == request_id);
        self.required.retain(|id| id != request_id);
        if required && !ok && self.refused.is_none() {
            self.refused = Some(request_id.to_owned());
            for raw in std::mem::take(&mut self.held) {
                effects.append(&mut self.on_undelivered(raw.as_bytes()));
            }
            effects.push(Effect::End);
            return;
        }
        if self.awaiting.is_empty() && before > 0 && self.refused.is_none() {
            self.release_held(effects);
        }
    }

    /// Nothing is awaited before the first prompt any more: release held user messages.
    fn release_held(&mut self, effects: &mut Vec<Effect>) {
        let held = std::mem::take(&mut self.held);
        if held.is_empty() {
            if self.state == SessionState::Starting {
                self.set_state(SessionState::Idle, effects);
            }
            return;
        }
        for raw in held {
            let mut line = raw.to_string();
            line.push('\n');
            effects.push(Effect::Send(Arc::from(line)));
        }
        self.set_state(SessionState::Working, effects);
    }
}

/// The rule "allow always" adds to the session's policy: the exact command of a Bash call,
/// every call of any other tool.
fn session_rule(request: &CanUseToolRequest) -> String {
    match (request.tool_name.as_str(), request.input.get("command").and_then(Value::as_str)) {
        ("Bash", Some(command)) => format!("Bash({command})"),
        (tool, _) => tool.to_owned(),
    }
}

/// Whether a `user` line for the CLI is a prompt (not only tool results, which start no turn).
/// An answer sent to one of the CLI's permission requests, kept to send again.
#[derive(Debug)]
struct DecidedAnswer {
    /// The tool call it was for (a request id asked again for another call is a new request).
    tool_use_id: Option<String>,
    /// The `control_response` line, without its newline.
    line: Arc<str>,
}

/// What names a line for the CLI in the log: its type (`type/subtype` for control messages),
/// `uuid` and `request_id`.
struct LineRef {
    line_type: String,
    uuid: Option<String>,
    request_id: Option<String>,
}

impl LineRef {
    fn of(line: &[u8]) -> LineRef {
        let envelope = switchboard_protocol::Envelope::parse(line).ok();
        let Some(envelope) = envelope else {
            return LineRef { line_type: "unknown".to_owned(), uuid: None, request_id: None };
        };
        let mut line_type = envelope.kind.as_deref().unwrap_or("unknown").to_owned();
        if let Some(subtype) = envelope.subtype.as_deref() {
            line_type = format!("{line_type}/{subtype}");
        }
        LineRef {
            line_type,
            uuid: envelope.uuid.map(|uuid| uuid.into_owned()),
            request_id: envelope.request_id.map(|id| id.into_owned()),
        }
    }
}

fn is_prompt(line: &[u8]) -> bool {
    match Message::decode(line) {
        Ok(Message::User(user)) => {
            user.parent_tool_use_id.is_none() && {
                match &user.message.content {
                    TextOr::Text(_) => true,
                    TextOr::Items(blocks) => {
                        !blocks.iter().all(|block| matches!(block, ContentBlock::ToolResult(_)))
                    }
                }
            }
        }
        _ => false,
    }
}

mod commands;
mod dialog;
pub(crate) mod elicitation;
mod parking;
mod permissions;
mod prompts;

use commands::{command_infos, command_name};
pub use commands::{SlashCommandInfo, MAX_COMMANDS};
pub use dialog::{dialog_answer, PERMISSION_HOOK_ID};
pub use elicitation::ELICITATION_TOOL;
pub use parking::{ParkedAnswer, DEFER_SINCE};

#[cfg(test)]
mod tests;
