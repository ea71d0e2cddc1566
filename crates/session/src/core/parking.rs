//! Parked approvals in the session core: an ask rule's call held at the policy's own
//! `PreToolUse` hook (the CLI waits on it) so that, unanswered after the policy's
//! `park_after`, it is answered `defer` and the CLI's turn ends with the request still open;
//! and the run that resumes the session, whose CLI asks about the same call again, answered
//! with the person's decision ([`ParkedAnswer`]). Only a session whose runner can let the CLI
//! go and resume it (the daemon: [`SessionCore::set_parkable`]) parks, and only on a CLI that
//! takes `defer` ([`DEFER_SINCE`]).

use super::*;

/// The first CLI version that takes a `PreToolUse` hook's `defer` (measured: 2.1.100, 2.1.250
/// and 2.1.330 end the turn with the call deferred and run it when resumed; 2.1.37 hangs).
pub const DEFER_SINCE: &str = "2.1.100";

/// A person's answer to a request that was parked, for the run that resumes the session: its
/// CLI asks again about the same call (`tool_use_id`), and this is the answer.
#[derive(Debug, Clone)]
pub struct ParkedAnswer {
    /// The request as it was parked.
    pub pending: PendingPermission,
    /// The answer.
    pub answer: PermissionAnswer,
    /// Who answered.
    pub who: String,
}

impl SessionCore {
    /// Answers that people gave to requests parked in an earlier run: when this run's CLI asks
    /// about the same call again (resumed, it asks first thing), the answer is the person's.
    pub fn set_parked_answers(&mut self, answers: Vec<ParkedAnswer>) {
        for parked in answers {
            if let Some(tool_use_id) = parked.pending.tool_use_id.clone() {
                self.parked_answers.insert(tool_use_id, parked);
            }
        }
    }

    /// Lets the policy's `park_after` park requests: whoever runs the session lets a parked
    /// session's CLI go and resumes it with the answer (the daemon does; `switchboard run`
    /// could not, and never parks).
    pub fn set_parkable(&mut self) {
        self.parkable = true;
    }

    /// Whether the policy's hook may hold an asked call and park it: the policy parks, the
    /// session is parkable, this is a CLI spoken to (not a terminal's transcript), and its
    /// version takes `defer`.
    pub(super) fn may_park(&self) -> bool {
        self.policy.park_after.is_some()
            && self.parkable
            && !self.transcript
            && self
                .snapshot
                .cli_version
                .as_deref()
                .and_then(|version| crate::controls::version_at_least(version, DEFER_SINCE))
                == Some(true)
    }

    /// An ask rule's call, held at the policy's hook (the CLI waits on it) for a person, so
    /// that it can be parked: asked as a `can_use_tool` is, and parked after the policy's
    /// `park_after` ([`Timer::Park`]) if nobody has answered.
    pub(super) fn hold_at_hook(
        &mut self,
        request_id: &str,
        tool_name: &str,
        input: Value,
        tool_use_id: Option<String>,
        decision: crate::policy::Decision,
        effects: &mut Vec<Effect>,
    ) {
        if let Some(tool_use_id) = &tool_use_id {
            self.set_verdict(tool_use_id, tool_name, &input, CallVerdict::Decided);
        }
        let request = CanUseToolRequest {
            tool_name: tool_name.to_owned(),
            input,
            tool_use_id,
            ..CanUseToolRequest::default()
        };
        let pending = PendingPermission {
            request_id: request_id.to_owned(),
            tool_name: request.tool_name.clone(),
            input: request.input.clone(),
            tool_use_id: request.tool_use_id.clone(),
            suggestions: Vec::new(),
            reason: decision.reason,
            agent_id: None,
            timeout_secs: self.policy.ask_timeout.as_secs(),
            asked_at_ms: now_ms(),
            always_allows: session_rule(&request),
            started_by: self.snapshot.sender.clone(),
            origin: self.open_turns.origin().cloned(),
            rule: decision.rule,
            cli_reason: None,
            // The hook's answer carries no rule: "always" is not offered.
            hints: PermissionHints { no_standing_rule: true, ..PermissionHints::default() },
            parked_at_ms: None,
            park_expires_at_ms: None,
        };
        self.asked.insert(
            request_id.to_owned(),
            AskedPermission { pending: pending.clone(), request, via: Via::HeldHook },
        );
        self.set_state(SessionState::AwaitingPermission, effects);
        effects.push(Effect::Emit(SessionEvent::PermissionRequested(pending)));
        effects.push(Effect::StartTimer(
            Timer::Permission(request_id.to_owned()),
            self.policy.ask_timeout,
        ));
        if let Some(park_after) = self.policy.park_after {
            effects.push(Effect::StartTimer(Timer::Park(request_id.to_owned()), park_after));
        }
    }

    /// Parks the held call `request_id`, if nobody answered it yet: the CLI is told to defer it
    /// (its turn ends, and the daemon lets it go), and the request waits on with no process,
    /// announced again with when it was parked.
    pub(super) fn park(&mut self, request_id: &str, effects: &mut Vec<Effect>) {
        if !self.asked.get(request_id).is_some_and(|asked| asked.via == Via::HeldHook) {
            return;
        }
        let Some(mut asked) = self.asked.shift_remove(request_id) else { return };
        let reason = "Parked in Switchboard until a person answers: the session resumes then, and this call runs or not as they say";
        self.answer_policy_hook(request_id, pre_tool_use_verdict("defer", reason), effects);
        self.parked_here.insert(request_id.to_owned());
        let parked_at = now_ms();
        asked.pending.parked_at_ms = Some(parked_at);
        asked.pending.park_expires_at_ms = self.policy.park_expires.map(|after| {
            parked_at.saturating_add(u64::try_from(after.as_millis()).unwrap_or(u64::MAX))
        });
        effects.push(Effect::Emit(SessionEvent::PermissionRequested(asked.pending)));
        if self.asked.is_empty() && self.state == SessionState::AwaitingPermission {
            self.set_state(SessionState::Working, effects);
        }
    }

    /// The resumed CLI asks about a call parked in an earlier run: the person's answer is the
    /// hook's, logged as their decision of the parked request. A changed input is held to the
    /// policy's deny rules, as any answer's is.
    pub(super) fn answer_parked(
        &mut self,
        request_id: &str,
        tool_name: &str,
        input: &Value,
        parked: ParkedAnswer,
        effects: &mut Vec<Effect>,
    ) {
        let (result, decided) = self.parked_result(tool_name, input, parked);
        self.answer_policy_hook(request_id, hook_answer(&result, input), effects);
        effects.push(Effect::Emit(decided));
        // The resumed CLI carries on with the deferred turn by itself: it works.
        if self.state == SessionState::Idle {
            self.set_state(SessionState::Working, effects);
        }
    }

    /// What the person's answer to a parked request makes of the call `tool_name` `input`
    /// (asked again by the resumed CLI), and the record of their decision.
    pub(super) fn parked_result(
        &mut self,
        tool_name: &str,
        input: &Value,
        parked: ParkedAnswer,
    ) -> (PermissionResult, SessionEvent) {
        let ParkedAnswer { pending, answer, who } = parked;
        let (result, behavior, message, input_changed) = match answer.behavior {
            AnswerBehavior::Allow => {
                let run = answer.updated_input.clone().unwrap_or_else(|| input.clone());
                // Judged as the request was: its turn's origin, not the resumed run's.
                let facts = CallFacts {
                    origin: pending.origin.clone(),
                    ..self.facts(tool_name, pending.hints.mcp_server.as_ref())
                };
                let ruled = self.policy.decide_call(tool_name, &run, &self.match_context, &facts);
                if ruled.behavior == Behavior::Deny {
                    (
                        PermissionResult::deny(ruled.reason.clone()),
                        Behavior::Deny,
                        ruled.reason,
                        false,
                    )
                } else {
                    let changed = run != *input;
                    (
                        PermissionResult::allow(run),
                        Behavior::Allow,
                        format!("allowed by {who}"),
                        changed,
                    )
                }
            }
            AnswerBehavior::Deny => {
                let (result, message) = answer.denial(&who);
                (result, Behavior::Deny, message, false)
            }
        };
        if let Some(tool_use_id) = &pending.tool_use_id {
            self.set_verdict(tool_use_id, tool_name, input, CallVerdict::Decided);
        }
        // A later answer to it is told it was answered.
        self.mark_answered(&pending.request_id);
        let decided = SessionEvent::PermissionDecided {
            request_id: pending.request_id,
            tool_name: tool_name.to_owned(),
            behavior,
            by: DecidedBy::Person { who },
            message,
            input_changed,
            updated_permissions: Vec::new(),
            decided_at_ms: now_ms(),
            tool_use_id: pending.tool_use_id,
            origin: pending.origin,
        };
        (result, decided)
    }

    /// The person's answer to the parked call `tool_use_id`, when the resumed CLI asks about it
    /// (however it asks): theirs if the call is the one they saw (or they denied it). Another
    /// input than the one approved is not covered: the parked request ends, logged so, and the
    /// call is asked afresh.
    pub(super) fn parked_answer_for(
        &mut self,
        tool_use_id: Option<&str>,
        tool_name: &str,
        input: &Value,
        effects: &mut Vec<Effect>,
    ) -> Option<ParkedAnswer> {
        let parked = self.parked_answers.remove(tool_use_id?)?;
        if parked.pending.input == *input || parked.answer.behavior == AnswerBehavior::Deny {
            return Some(parked);
        }
        let message =
            "the resumed call's input is not the one that was approved, so it is asked again";
        let event = SessionEvent::decided(
            &parked.pending.request_id,
            tool_name,
            Behavior::Deny,
            DecidedBy::Cancelled,
            message.to_owned(),
        );
        effects.push(Effect::Emit(event.with_tool_use_id(parked.pending.tool_use_id)));
        None
    }
}
