//! Claude Code's hooks into the daemon: the `PreToolUse` and `PermissionRequest` hooks of an
//! interactive CLI that `switchboard claude` runs (HTTP hooks: the CLI posts each tool call to
//! the first before it runs it, and each permission dialog it shows to the second) are
//! answered by the session's policy, and by a person where the policy asks.
//!
//! - **Who may ask.** Each terminal session gets a key of its own when it registers
//!   ([`crate::hook_keys::HookKeys::register`]), handed to its terminal over the authenticated terminal socket and
//!   from there to the CLI in settings read through a file descriptor: never on a command line,
//!   in a file a path names, or in an environment a tool inherits. The hook sends it as its
//!   bearer token; an unknown or missing key is `401`, checked before a byte of the body is
//!   read. The daemon keeps only the key's SHA-256 digest. Once the session ends (its terminal
//!   detached or went away) its CLI runs on without Switchboard: a dialog's hook still waiting
//!   is answered `{}` (the dialog is the terminal's), and later calls are left to the CLI.
//! - **What is asked.** The `PreToolUse` hook's input goes to the session as the policy's own
//!   `PreToolUse` hook callback, through its
//!   [`HookGate`](switchboard_transport::terminal::HookGate), as every session's tool calls do:
//!   a deny is final, no rule leaves the call to the CLI, and an ask rule is answered `ask`, so
//!   the CLI shows its own dialog. Every dialog it shows also comes to its `PermissionRequest`
//!   hook, which goes to the session as a request of its own (judged by the policy, or waiting
//!   for a person in every face, notifications and links included). The first answer wins:
//!   the hook's closes the dialog; one given in the terminal first makes the hook's moot, and
//!   the session learns it from the transcript (`switchboard_session`'s `core/dialog.rs`). A
//!   subagent's call, whose result that transcript does not hold, is held at its `PreToolUse`
//!   hook instead until a person afar answers, as a session Switchboard did not start is.
//! - **Failing closed.** A `PreToolUse` hook whose call cannot be put to the session (it ended,
//!   too many wait) is answered `deny` with the reason, which the model reads; one that cannot
//!   reach the daemon at all is blocked by the CLI itself (`switchboard claude` sets the hook's
//!   `onFailure` to `block`). A dialog's hook that gets no answer here leaves the dialog to the
//!   person at the terminal, who is asked either way.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use switchboard_protocol::control::{CanUseToolRequest, ControlResponseBody, HookCallbackRequest};
use switchboard_protocol::{ControlRequestPayload, PermissionResult};
use switchboard_transport::terminal::HookGate;

use crate::daemon::{Daemon, ExternalHello};
use crate::error::ApiError;

/// How long a hook's body may take to arrive.
pub const HOOK_BODY_TIMEOUT: Duration = Duration::from_secs(30);

/// The largest hook input read (a tool call's input included).
pub const MAX_HOOK_BODY_BYTES: usize = 4 * 1024 * 1024;

/// The longest tool name taken.
const MAX_TOOL_NAME_BYTES: usize = 256;

/// What Claude Code posts to a `PreToolUse` or `PermissionRequest` hook (the fields read; the
/// whole input goes to the session as it came).
#[derive(Debug, Deserialize)]
pub struct HookCall {
    /// `PreToolUse` or `PermissionRequest`.
    pub hook_event_name: String,
    /// The tool.
    pub tool_name: String,
    /// Its input.
    pub tool_input: Value,
    /// The `tool_use` block the call came from (`PreToolUse` only).
    #[serde(default)]
    pub tool_use_id: Option<String>,
    /// The subagent that makes the call.
    #[serde(default)]
    pub agent_id: Option<String>,
}

impl HookCall {
    /// Refuses the input of another hook than `event`, or a tool name out of bounds.
    fn check(&self, event: &str) -> Result<(), ApiError> {
        if self.hook_event_name != event {
            let named: String = self.hook_event_name.chars().take(64).collect();
            return Err(ApiError::invalid(format!(
                "this is the {event} hook's address, not {named:?}'s"
            )));
        }
        if self.tool_name.is_empty() || self.tool_name.len() > MAX_TOOL_NAME_BYTES {
            return Err(ApiError::invalid(format!(
                "tool_name must be 1 to {MAX_TOOL_NAME_BYTES} bytes"
            )));
        }
        Ok(())
    }
}

/// The part of a `PreToolUse` hook's answer read here: whether the policy sends the call to a
/// person.
#[derive(Debug, Default, Deserialize)]
struct Verdict {
    #[serde(default, rename = "hookSpecificOutput")]
    output: Option<VerdictOutput>,
}

#[derive(Debug, Default, Deserialize)]
struct VerdictOutput {
    #[serde(default, rename = "permissionDecision")]
    decision: Option<String>,
}

/// Withdraws a request from the session when its hook goes away unanswered (the CLI gave up
/// on it): it stops waiting for a person.
struct Waiting<'a> {
    gate: &'a HookGate,
    request_id: String,
    answered: bool,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if !self.answered {
            self.gate.withdraw(&self.request_id);
        }
    }
}

/// Puts `request` to the session through `gate` and waits for its answer (the session's own
/// timeouts end a wait; its end drops it): the answer's payload, or why there is none.
async fn put(
    gate: &HookGate,
    request: impl Into<ControlRequestPayload>,
) -> Result<Option<Value>, String> {
    let request_id = format!("hook-{}", uuid::Uuid::new_v4());
    let answered = gate.ask(&request_id, request).await?;
    let mut waiting = Waiting { gate, request_id, answered: false };
    let response = answered.await.map_err(|_| "the Switchboard session ended first".to_owned())?;
    waiting.answered = true;
    match response.response {
        ControlResponseBody::Success(success) => {
            Ok(success.response.as_ref().and_then(|raw| serde_json::from_str(raw.get()).ok()))
        }
        ControlResponseBody::Error(error) => Err(error.error),
        ControlResponseBody::Unknown(_) => Err("an answer Switchboard cannot read".to_owned()),
    }
}

/// A terminal's hook: the gate of the session whose hook key `headers` carry (checked before a
/// byte of the body is read), and the hook's input; none once the session has ended (its CLI
/// runs on without Switchboard).
async fn terminal_call(
    daemon: &Daemon,
    headers: &HeaderMap,
    body: axum::body::Body,
) -> Result<Option<(HookGate, Value)>, ApiError> {
    let key = crate::auth::bearer(headers).unwrap_or("");
    let Some(registered) = daemon.hook_keys().find(key) else {
        return Err(ApiError::unauthorized_bearer("a terminal session's hook key"));
    };
    let Some(gate) = registered.gate else { return Ok(None) };
    Ok(Some((gate, hook_input(body).await?)))
}

/// A hook's input: at most [`MAX_HOOK_BODY_BYTES`], arriving within [`HOOK_BODY_TIMEOUT`].
async fn hook_input(body: axum::body::Body) -> Result<Value, ApiError> {
    let body = crate::extract::bounded_body(body, MAX_HOOK_BODY_BYTES, HOOK_BODY_TIMEOUT).await?;
    serde_json::from_slice(&body)
        .map_err(|error| ApiError::invalid(format!("not a hook's input: {error}")))
}

/// `POST /hooks/pre-tool-use`: a terminal session's CLI asks whether a tool call may run. The
/// call goes to the session as its policy's `PreToolUse` hook (as every session's does): a deny
/// is final, no rule leaves it to the CLI, and an ask rule is answered `ask`, so that the CLI
/// shows its own dialog in the terminal while its `PermissionRequest` hook
/// ([`permission_request`]) puts the call to a person wherever they are.
pub(crate) async fn pre_tool_use(
    State(daemon): State<Arc<Daemon>>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Result<Json<Value>, ApiError> {
    let Some((gate, input)) = terminal_call(&daemon, &headers, body).await? else {
        // The session ended, and its CLI runs on without Switchboard: the CLI decides.
        return Ok(Json(json!({})));
    };
    if input.get("agent_id").is_some_and(|agent| !agent.is_null()) {
        // A subagent's call: its result is not in the transcript the session reads, so an
        // answer in the terminal could not be told. An asked one waits for a person afar at
        // this hook, as a session Switchboard did not start does.
        return decide(&gate, input).await.map(Json);
    }
    policy_verdict(&gate, input).await.map(|(_, verdict)| Json(verdict))
}

/// `POST /hooks/permission-request`: a terminal session's CLI shows its permission dialog for a
/// call and asks its `PermissionRequest` hook too. The call goes to the session as that hook's
/// request ([`switchboard_session::core::PERMISSION_HOOK_ID`]): judged by the policy, or waiting
/// for a person in every face. Whichever answers first, the hook or the person at the terminal,
/// is the answer the CLI takes; the session learns which from the transcript. Where no answer
/// comes from here (the session ended, or cannot take the request) the hook says nothing, and
/// the dialog waits for the terminal.
pub(crate) async fn permission_request(
    State(daemon): State<Arc<Daemon>>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Result<Json<Value>, ApiError> {
    let Some((gate, input)) = terminal_call(&daemon, &headers, body).await? else {
        return Ok(Json(json!({})));
    };
    let call = HookCall::deserialize(&input).map_err(|error| {
        ApiError::invalid(format!("not a PermissionRequest hook's input: {error}"))
    })?;
    call.check("PermissionRequest")?;
    let hook = HookCallbackRequest {
        callback_id: switchboard_session::core::PERMISSION_HOOK_ID.to_owned(),
        input,
        ..HookCallbackRequest::default()
    };
    match put(&gate, hook).await {
        Ok(answer) => Ok(Json(answer.unwrap_or_else(|| json!({})))),
        Err(why) => {
            tracing::info!(%why, "a terminal's permission dialog is left to its terminal");
            Ok(Json(json!({})))
        }
    }
}

/// The policy's verdict on a `PreToolUse` hook's `input`, put to the session through `gate` as
/// its policy's own `PreToolUse` hook: deny, ask, or no opinion (`{}`: the CLI's own rules
/// decide). The call as the hook named it, with the verdict.
async fn policy_verdict(gate: &HookGate, input: Value) -> Result<(HookCall, Value), ApiError> {
    let call = HookCall::deserialize(&input)
        .map_err(|error| ApiError::invalid(format!("not a PreToolUse hook's input: {error}")))?;
    call.check("PreToolUse")?;
    let hook = HookCallbackRequest {
        callback_id: switchboard_session::core::POLICY_HOOK_ID.to_owned(),
        input,
        tool_use_id: call.tool_use_id.clone(),
        ..HookCallbackRequest::default()
    };
    let verdict = match put(gate, hook).await {
        Ok(verdict) => verdict.unwrap_or_else(|| json!({})),
        Err(why) => refusal(&why),
    };
    Ok((call, verdict))
}

/// The answer to a `PreToolUse` hook's `input` of a session Switchboard did not start: the
/// policy's verdict ([`policy_verdict`]), and where it asks, a person's answer (the session's
/// `can_use_tool`, waiting in every face) as the hook's decision.
pub(crate) async fn decide(gate: &HookGate, input: Value) -> Result<Value, ApiError> {
    let (call, verdict) = policy_verdict(gate, input).await?;
    let asks = Verdict::deserialize(&verdict)
        .ok()
        .and_then(|verdict| verdict.output)
        .and_then(|output| output.decision)
        .is_some_and(|decision| decision == "ask");
    if !asks {
        // Denied, or left to the CLI: the session's answer is the hook's.
        return Ok(verdict);
    }
    let request = CanUseToolRequest {
        tool_name: call.tool_name,
        input: call.tool_input.clone(),
        tool_use_id: call.tool_use_id,
        agent_id: call.agent_id,
        ..CanUseToolRequest::default()
    };
    let answer = match put(gate, request).await {
        Ok(Some(answer)) => answer,
        Ok(None) => return Ok(refusal("an empty answer")),
        Err(why) => return Ok(refusal(&why)),
    };
    let result = PermissionResult::deserialize(&answer)
        .unwrap_or_else(|_| PermissionResult::deny("Switchboard could not read the answer"));
    Ok(switchboard_session::hook_answer(&result, &call.tool_input))
}

/// What the hook command `switchboard hook` adds to the input it passes on: the CLI's process
/// (found past the shell the CLI runs hooks in), the run id in its environment (a CLI the
/// daemon started has one), and the terminal session `switchboard claude` registered for it.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct HookCaller {
    #[serde(default)]
    pid: Option<u32>,
    #[serde(default)]
    run: Option<String>,
    #[serde(default)]
    terminal: Option<String>,
}

/// The part of any hook's input read to find its session.
#[derive(Debug, Deserialize)]
struct HookHead {
    hook_event_name: String,
    session_id: String,
    #[serde(default)]
    transcript_path: Option<PathBuf>,
    #[serde(default)]
    cwd: Option<PathBuf>,
}

/// `POST /hooks/claude`: a hook that `switchboard hooks install` put in the person's Claude
/// Code settings, passed on by `switchboard hook`, from any Claude Code session on the machine.
/// A session the daemon governs already (one it runs, a terminal's) is left alone (`{}`).
/// Otherwise `SessionStart` makes the session one Switchboard follows ([`Daemon::external`]),
/// `PreToolUse` is decided by the policy, an asked call held until a person answers
/// ([`decide`]), and `SessionEnd` ends the following.
pub(crate) async fn claude_hook(
    State(daemon): State<Arc<Daemon>>,
    axum::Extension(token): axum::Extension<crate::tokens::Caller>,
    Query(caller): Query<HookCaller>,
    body: axum::body::Body,
) -> Result<Json<Value>, ApiError> {
    // The machine's own sessions are no ceiling's: only the hooks `hooks install` wrote speak.
    crate::faces::refuse_ceiling(&token, "it speaks for no session's hooks")?;
    let body = crate::extract::bounded_body(body, MAX_HOOK_BODY_BYTES, HOOK_BODY_TIMEOUT).await?;
    let input: Value = serde_json::from_slice(&body)
        .map_err(|error| ApiError::invalid(format!("not a hook's input: {error}")))?;
    let head = HookHead::deserialize(&input)
        .map_err(|error| ApiError::invalid(format!("not a Claude Code hook's input: {error}")))?;
    if daemon.governs(
        &head.session_id,
        caller.run.as_deref(),
        caller.pid,
        caller.terminal.as_deref(),
    ) {
        return Ok(Json(json!({})));
    }
    let hello = |head: HookHead| -> Result<ExternalHello, ApiError> {
        let (Some(transcript_path), Some(cwd)) = (head.transcript_path, head.cwd) else {
            return Err(ApiError::invalid("a hook's input names its transcript_path and cwd"));
        };
        Ok(ExternalHello {
            claude_session_id: head.session_id,
            cwd,
            transcript_path,
            pid: caller.pid,
        })
    };
    match head.hook_event_name.as_str() {
        "SessionStart" => {
            daemon.external(hello(head)?).await?;
            Ok(Json(json!({})))
        }
        "PreToolUse" => match daemon.external(hello(head)?).await? {
            Some(external) => decide(&external.gate, input).await.map(Json),
            // Let go in Switchboard: the CLI decides.
            None => Ok(Json(json!({}))),
        },
        "SessionEnd" => {
            daemon.external_ended(&head.session_id);
            Ok(Json(json!({})))
        }
        other => {
            let event: String = other.chars().take(64).collect();
            Err(ApiError::invalid(format!(
                "Switchboard takes the SessionStart, PreToolUse and SessionEnd hooks, not {event:?}"
            )))
        }
    }
}

/// The hook's `deny` for a call Switchboard could not put to the session, or whose answer it
/// could not read: the model reads why.
fn refusal(why: &str) -> Value {
    json!({"hookSpecificOutput": {
        "hookEventName": "PreToolUse",
        "permissionDecision": "deny",
        "permissionDecisionReason": format!("Switchboard could not decide on the call: {why}"),
    }})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_becomes_the_hooks_decision() {
        let input = json!({"command": "ls"});
        let allowed =
            switchboard_session::hook_answer(&PermissionResult::allow(input.clone()), &input);
        assert_eq!(allowed["hookSpecificOutput"]["permissionDecision"], "allow");
        assert!(allowed["hookSpecificOutput"].get("updatedInput").is_none(), "unchanged");
        let edited = switchboard_session::hook_answer(
            &PermissionResult::allow(json!({"command": "ls -a"})),
            &input,
        );
        assert_eq!(edited["hookSpecificOutput"]["updatedInput"]["command"], "ls -a");
        let denied = switchboard_session::hook_answer(&PermissionResult::deny("not here"), &input);
        assert_eq!(denied["hookSpecificOutput"]["permissionDecision"], "deny");
        assert_eq!(denied["hookSpecificOutput"]["permissionDecisionReason"], "not here");
        assert!(denied.get("continue").is_none(), "the turn goes on");
        let stopped = switchboard_session::hook_answer(
            &PermissionResult::deny_and_interrupt("too late"),
            &input,
        );
        assert_eq!(stopped["continue"], false, "the turn ends");
        assert_eq!(stopped["stopReason"], "too late");
    }
}
