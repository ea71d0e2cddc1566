//! A terminal's permission dialog, answered from wherever a person is first. For a session in
//! a person's terminal (`switchboard claude`), the policy's `PreToolUse` hook answers an ask
//! rule's call `ask` at once, so the CLI shows its own dialog; the CLI also runs its
//! `PermissionRequest` hook while the dialog shows (measured: 2.1.100 to 2.1.330), and that
//! hook comes here ([`PERMISSION_HOOK_ID`]) as a request like any other, waiting for a person
//! in every face (the policy's deny closes it; its allow does not, since the dialog is there
//! because the person's own rules ask, or only a person may answer). A subagent's dialog is
//! the terminal's alone: its result is not in the transcript read here. The CLI takes the
//! first answer:
//!
//! - **From afar**: the hook's answer ([`dialog_answer`]) closes the dialog, and the CLI notes
//!   that it took it (`transcript::hook_permission_decision`). Only then is the person's
//!   decision logged: until the transcript says which answer the CLI took, it is held
//!   ([`Settling`]).
//! - **In the terminal**: the CLI ignores the hook's answer (or drops the hook: an Esc). The
//!   call's result tells what the person chose (`transcript::rejected`), and the decision is
//!   logged as [`DecidedBy::Terminal`]; any answer given afar meanwhile is not.
//!
//! An answer in the terminal that lets the call run is known only when its result comes, so
//! until the tool ends the request still waits in Switchboard (and an answer there changes
//! nothing).

use serde::Deserialize;

use super::*;
use switchboard_protocol::content::ToolResultBlock;
use switchboard_protocol::transcript::{self, HookPermissionDecision};

/// The `callback_id` under which a terminal's `PermissionRequest` hook reaches the session.
pub const PERMISSION_HOOK_ID: &str = "switchboard-permission-request";

/// An answer as a `PermissionRequest` hook's output: allow (with a changed input, and standing
/// rules, when the answer has them) or deny (with the reason, interrupting the turn when the
/// answer says so).
pub fn dialog_answer(result: &PermissionResult, input: &Value) -> Value {
    let decision = match result {
        PermissionResult::Allow(allow) => {
            let mut decision = serde_json::json!({"behavior": "allow"});
            if allow.updated_input.as_ref().is_some_and(|updated| updated != input) {
                decision["updatedInput"] = allow.updated_input.clone().unwrap_or_default();
            }
            if let Some(updates) = allow.updated_permissions.as_ref().filter(|u| !u.is_empty()) {
                decision["updatedPermissions"] = serde_json::to_value(updates).unwrap_or_default();
            }
            decision
        }
        PermissionResult::Deny(deny) => {
            let mut decision = serde_json::json!({"behavior": "deny", "message": deny.message});
            if deny.interrupt == Some(true) {
                decision["interrupt"] = Value::Bool(true);
            }
            decision
        }
        PermissionResult::Unknown(_) => serde_json::json!({
            "behavior": "deny",
            "message": "Switchboard could not decide on the call: an answer it cannot read",
        }),
    };
    serde_json::json!({"hookSpecificOutput": {
        "hookEventName": "PermissionRequest",
        "decision": decision,
    }})
}

/// A dialog that was answered, waiting for the transcript to say which answer the CLI took.
#[derive(Debug)]
pub(super) struct Settling {
    request_id: String,
    tool_name: String,
    /// The answer given afar (logged if the CLI took it), or none: the hook went away (an Esc
    /// in the terminal, which refuses the call).
    far: Option<SessionEvent>,
}

impl Settling {
    /// Its end as logged when the transcript never tells: the answer given afar as given, a
    /// withdrawn one as withdrawn.
    fn untold(self, tool_use_id: String) -> SessionEvent {
        self.far.unwrap_or_else(|| {
            SessionEvent::decided(
                &self.request_id,
                &self.tool_name,
                Behavior::Deny,
                DecidedBy::Cancelled,
                "withdrawn in the terminal, and its result never came".to_owned(),
            )
            .with_tool_use_id(Some(tool_use_id))
        })
    }

    /// Its end as the CLI took it, `allowed` by a `PermissionRequest` hook's answer: the one
    /// given afar when that is it, another of the person's hooks' else.
    fn took(self, tool_use_id: &str, allowed: bool) -> SessionEvent {
        let behavior = if allowed { Behavior::Allow } else { Behavior::Deny };
        match self.far {
            Some(far @ SessionEvent::PermissionDecided { behavior: given, .. })
                if given == behavior =>
            {
                far
            }
            _ => SessionEvent::decided(
                &self.request_id,
                &self.tool_name,
                behavior,
                DecidedBy::Cli,
                "another of the CLI's PermissionRequest hooks answered it".to_owned(),
            )
            .with_tool_use_id(Some(tool_use_id.to_owned())),
        }
    }
}

/// The call a dialog is about.
enum Awaiting {
    Call(String),
    /// A subagent's.
    Subagent,
    /// None known.
    None,
}

/// What a terminal's `PermissionRequest` hook sends.
#[derive(Debug, serde::Deserialize)]
struct PermissionRequestInput {
    tool_name: String,
    #[serde(default)]
    tool_input: Value,
    #[serde(default)]
    permission_suggestions: Option<Vec<PermissionUpdate>>,
    #[serde(default)]
    agent_id: Option<String>,
}

impl SessionCore {
    /// A terminal's `PermissionRequest` hook: the CLI shows its dialog for a call, and asks
    /// the hook too. Judged as a `can_use_tool` is, but for an allow: the policy's deny answers
    /// it, anything else waits for a person (there or afar).
    pub(super) fn on_dialog(
        &mut self,
        request_id: &str,
        hook: &HookCallbackRequest,
        effects: &mut Vec<Effect>,
    ) {
        let asked = match PermissionRequestInput::deserialize(&hook.input) {
            // A subagent's call: its result is not in the transcript read here, so an answer
            // in the terminal could not be told; the terminal has it (the policy's hook held
            // an asked one for a person afar already).
            Ok(asked) if asked.agent_id.is_none() => asked,
            // Unreadable: no answer from here; the person answers in the terminal.
            _ => return self.answer_policy_hook(request_id, serde_json::json!({}), effects),
        };
        // The hook's input has no `tool_use_id`: the call is the newest one of that tool and
        // input not asked about yet (an older identical one may run already, allowed without
        // a dialog).
        let tool_use_id = match self.call_awaiting(&asked.tool_name, &asked.tool_input) {
            Awaiting::Call(id) => Some(id),
            Awaiting::None => None,
            Awaiting::Subagent => {
                return self.answer_policy_hook(request_id, serde_json::json!({}), effects);
            }
        };
        let request = CanUseToolRequest {
            tool_name: asked.tool_name,
            input: asked.tool_input,
            tool_use_id,
            permission_suggestions: asked.permission_suggestions,
            agent_id: asked.agent_id,
            ..CanUseToolRequest::default()
        };
        self.judge(request_id, &request, Via::Dialog, effects);
    }

    /// The newest call of `tool_name` with `input` that no dialog has claimed yet, claimed.
    fn call_awaiting(&mut self, tool_name: &str, input: &Value) -> Awaiting {
        let Some((id, call)) =
            self.calls.iter_mut().rev().find(|(_, call)| {
                call.tool_name == tool_name && call.input == *input && !call.dialog
            })
        else {
            return Awaiting::None;
        };
        if call.subagent {
            return Awaiting::Subagent;
        }
        call.dialog = true;
        Awaiting::Call(id.clone())
    }

    /// Logs `event`, the end of the request `asked`: at once, or for a terminal's dialog once
    /// the transcript says the CLI took this answer (and not the terminal's).
    pub(super) fn settle(
        &mut self,
        asked: &AskedPermission,
        event: SessionEvent,
        effects: &mut Vec<Effect>,
    ) {
        match (&asked.via, &asked.request.tool_use_id) {
            (Via::Dialog, Some(tool_use_id)) if self.transcript => {
                self.hold_settling(tool_use_id, &asked.pending, Some(event), effects);
            }
            _ => effects.push(Effect::Emit(event)),
        }
    }

    /// A dialog's hook went away unanswered: the terminal answered (an Esc drops the hook).
    /// The call's result says how; the CLI's end, if it comes first, withdraws the request.
    pub(super) fn dialog_withdrawn(
        &mut self,
        request_id: &str,
        asked: AskedPermission,
        effects: &mut Vec<Effect>,
    ) {
        match &asked.request.tool_use_id {
            Some(tool_use_id) if self.transcript => {
                self.hold_settling(tool_use_id, &asked.pending, None, effects);
            }
            _ => effects.push(Effect::Emit(asked.ended(
                request_id,
                DecidedBy::Cancelled,
                "the CLI withdrew the request".to_owned(),
            ))),
        }
    }

    /// Holds a dialog's end until the transcript tells which answer the CLI took (at most
    /// [`CALL_MEMORY`]: the oldest is logged as it stands to make room).
    fn hold_settling(
        &mut self,
        tool_use_id: &str,
        pending: &PendingPermission,
        far: Option<SessionEvent>,
        effects: &mut Vec<Effect>,
    ) {
        let settling = Settling {
            request_id: pending.request_id.clone(),
            tool_name: pending.tool_name.clone(),
            far,
        };
        self.dialogs.insert(tool_use_id.to_owned(), settling);
        if self.dialogs.len() > CALL_MEMORY {
            if let Some((id, oldest)) = self.dialogs.shift_remove_index(0) {
                effects.push(Effect::Emit(oldest.untold(id)));
            }
        }
    }

    /// The transcript says the CLI took a `PermissionRequest` hook's answer: the one given
    /// afar is the decision. If the request still waits here, another hook of the person's
    /// answered it: the CLI decided.
    pub(super) fn on_hook_permission_decision(
        &mut self,
        decision: &HookPermissionDecision,
        effects: &mut Vec<Effect>,
    ) {
        if let Some(settling) = self.dialogs.shift_remove(&decision.tool_use_id) {
            effects.push(Effect::Emit(settling.took(&decision.tool_use_id, decision.allowed)));
            return;
        }
        let Some(request_id) = self.dialog_asking(&decision.tool_use_id) else { return };
        let Some(asked) = self.asked.shift_remove(&request_id) else { return };
        // Our hook's answer no longer matters; it ends the hook's wait.
        self.answer_policy_hook(&request_id, serde_json::json!({}), effects);
        let behavior = if decision.allowed { Behavior::Allow } else { Behavior::Deny };
        let message = "another of the CLI's PermissionRequest hooks answered it".to_owned();
        let event = SessionEvent::decided(
            &request_id,
            &asked.request.tool_name,
            behavior,
            DecidedBy::Cli,
            message,
        )
        .with_tool_use_id(Some(decision.tool_use_id.clone()));
        effects.push(Effect::Emit(event));
        self.after_permission_resolved(&request_id, effects);
    }

    /// The request of a dialog still waiting here for the call `tool_use_id`.
    fn dialog_asking(&self, tool_use_id: &str) -> Option<String> {
        self.asked
            .iter()
            .find(|(_, asked)| {
                asked.via == Via::Dialog
                    && asked.request.tool_use_id.as_deref() == Some(tool_use_id)
            })
            .map(|(request_id, _)| request_id.clone())
    }

    /// A call's result, in a terminal's transcript: if its dialog was answered with no hook's
    /// answer taken, the person answered in the terminal (and a refusal there is the only
    /// error result that begins with the CLI's rejection). Whether it was such a call.
    pub(super) fn dialog_result(
        &mut self,
        result: &ToolResultBlock,
        effects: &mut Vec<Effect>,
    ) -> bool {
        let tool_use_id = result.tool_use_id.as_str();
        // An approval there keeps the hook waiting; an Esc drops it, refusing the call.
        let (request_id, tool_name, withdrawn) =
            if let Some(settling) = self.dialogs.shift_remove(tool_use_id) {
                (settling.request_id, settling.tool_name, settling.far.is_none())
            } else if let Some(request_id) = self.dialog_asking(tool_use_id) {
                // Answered in the terminal while its hook still waits: that wait ends.
                let Some(asked) = self.asked.shift_remove(&request_id) else { return false };
                self.answer_policy_hook(&request_id, serde_json::json!({}), effects);
                self.after_permission_resolved(&request_id, effects);
                (request_id, asked.request.tool_name, false)
            } else {
                return false;
            };
        let refused = transcript::rejected(result) || (withdrawn && result.is_error == Some(true));
        let (behavior, message) = if refused {
            (Behavior::Deny, "denied in the terminal")
        } else {
            (Behavior::Allow, "approved in the terminal")
        };
        let event = SessionEvent::decided(
            &request_id,
            &tool_name,
            behavior,
            DecidedBy::Terminal,
            message.to_owned(),
        )
        .with_tool_use_id(Some(tool_use_id.to_owned()));
        effects.push(Effect::Emit(event));
        true
    }

    /// The CLI ended: answers given afar whose fate the transcript never told are logged as
    /// given; dialogs whose hook went away, as withdrawn.
    pub(super) fn dialogs_ended(&mut self, effects: &mut Vec<Effect>) {
        for (tool_use_id, settling) in std::mem::take(&mut self.dialogs) {
            effects.push(Effect::Emit(settling.untold(tool_use_id)));
        }
    }
}
