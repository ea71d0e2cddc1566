//! The session core's permission requests: the CLI's `can_use_tool` asks judged by the policy
//! or held for a person, hook callbacks (the policy's own `PreToolUse` hook among them), the
//! answers, their cancellation and timeouts' end, and what a tool call's result says about the
//! decision that let it run. An `impl SessionCore` block of its own; the table of asked
//! requests lives in the core.

use super::*;

impl PermissionAnswer {
    /// A deny answer as the CLI is told it (interrupting the turn if the person asked to),
    /// and the message the log keeps: theirs, or who denied the call.
    pub(super) fn denial(&self, who: &str) -> (PermissionResult, String) {
        let message =
            self.message.clone().unwrap_or_else(|| format!("{who} denied this tool call"));
        let result = if self.interrupt {
            PermissionResult::deny_and_interrupt(message.clone())
        } else {
            PermissionResult::deny(message.clone())
        };
        (result, message)
    }
}

impl SessionCore {
    /// Answers a permission request. The first answer wins; later ones get
    /// [`AnswerError::AlreadyAnswered`].
    pub fn answer_permission(
        &mut self,
        request_id: &str,
        answer: PermissionAnswer,
        who: &str,
    ) -> Result<Vec<Effect>, AnswerError> {
        self.changed = true;
        if self.elicitations.contains(request_id) {
            return self.answer_elicitation(request_id, answer, who);
        }
        // Parked in an earlier run and answered already: this run carries that answer.
        if self.parked_answers.values().any(|parked| parked.pending.request_id == request_id) {
            return Err(AnswerError::AlreadyAnswered(request_id.to_owned()));
        }
        if self.parked_here.contains(request_id) {
            return Err(AnswerError::Parked(request_id.to_owned()));
        }
        // A changed input is a new call: the policy's deny rules hold for it too (the policy
        // saw only the model's input), so an answer cannot run what the policy forbids.
        if let (AnswerBehavior::Allow, Some(changed), Some(asked)) =
            (answer.behavior, &answer.updated_input, self.asked.get(request_id))
        {
            let tool = &asked.request.tool_name;
            let facts = CallFacts {
                origin: asked.pending.origin.clone(),
                mcp_source: self.facts(tool, asked.pending.hints.mcp_server.as_ref()).mcp_source,
            };
            let decision = self.policy.decide_call(tool, changed, &self.match_context, &facts);
            if decision.behavior == Behavior::Deny {
                return Err(AnswerError::DeniedInput(decision.reason));
            }
        }
        // "Always" only where Claude Code offers a standing rule: where it says a person must
        // look each time, or that the rule would reach past this call, the answer is refused
        // (the request still waits, for an answer without it).
        if let (AnswerBehavior::Allow, Some(asked)) = (answer.behavior, self.asked.get(request_id))
        {
            let standing = answer.remember || answer.updated_permissions.is_some();
            if standing && asked.pending.hints.no_standing_rule {
                return Err(AnswerError::NoStandingRule(request_id.to_owned()));
            }
        }
        let Some(asked) = self.asked.shift_remove(request_id) else {
            return Err(if self.answered_set.contains(request_id) {
                AnswerError::AlreadyAnswered(request_id.to_owned())
            } else {
                AnswerError::Unknown(request_id.to_owned())
            });
        };
        let mut effects = Vec::new();
        let request = &asked.request;
        let by = DecidedBy::Person { who: who.to_owned() };
        // What the CLI is told, and the decision the log keeps of it.
        let (result, behavior, message, input_changed, updates) = match answer.behavior {
            AnswerBehavior::Allow => {
                let mut input =
                    answer.updated_input.clone().unwrap_or_else(|| request.input.clone());
                // Answers fill in a question's input, and no other tool's.
                if let (Some(answers), "AskUserQuestion") =
                    (&answer.answers, request.tool_name.as_str())
                {
                    input = ask_user_question_input(&input, answers.clone());
                }
                let updates = match (&answer.updated_permissions, answer.remember) {
                    (Some(updates), _) => {
                        updates.iter().cloned().map(PermissionUpdate::into_session_scoped).collect()
                    }
                    (None, true) => self.remember(request),
                    (None, false) => Vec::new(),
                };
                if answer.remember {
                    self.remember_locally(request);
                }
                let input_changed = input != request.input;
                let result = PermissionResult::allow_with_updates(input, updates.clone());
                (result, Behavior::Allow, format!("allowed by {who}"), input_changed, updates)
            }
            AnswerBehavior::Deny => {
                let (result, message) = answer.denial(who);
                (result, Behavior::Deny, message, false, Vec::new())
            }
        };
        self.respond_asked(request_id, &asked, &result, &mut effects);
        let decided = SessionEvent::PermissionDecided {
            request_id: request_id.to_owned(),
            tool_name: request.tool_name.clone(),
            behavior,
            by,
            message,
            input_changed,
            updated_permissions: updates,
            decided_at_ms: now_ms(),
            tool_use_id: request.tool_use_id.clone(),
            origin: asked.pending.origin.clone(),
        };
        self.settle(&asked, decided, &mut effects);
        self.after_permission_resolved(request_id, &mut effects);
        Ok(effects)
    }

    /// Answers a hook callback.
    pub fn answer_hook(
        &mut self,
        request_id: &str,
        output: Value,
        who: &str,
    ) -> Result<Vec<Effect>, AnswerError> {
        self.changed = true;
        if self.hooks.shift_remove(request_id).is_none() {
            return Err(if self.answered_set.contains(request_id) {
                AnswerError::AlreadyAnswered(request_id.to_owned())
            } else {
                AnswerError::Unknown(request_id.to_owned())
            });
        }
        let mut effects = Vec::new();
        let response = ControlResponse::success(request_id, &output);
        self.write(Message::from(response), &mut effects);
        effects.push(Effect::Emit(SessionEvent::HookAnswered {
            request_id: request_id.to_owned(),
            by: who.to_owned(),
            output,
        }));
        self.mark_answered(request_id);
        Ok(effects)
    }

    pub(super) fn on_can_use_tool(
        &mut self,
        request_id: &str,
        request: &CanUseToolRequest,
        effects: &mut Vec<Effect>,
    ) {
        self.judge(request_id, request, Via::CanUseTool, effects);
    }

    /// A call the CLI asks about (`via` its `can_use_tool`, or a terminal's dialog): a parked
    /// request's answer, the policy's allow or deny, or a person's answer, asked for here.
    pub(super) fn judge(
        &mut self,
        request_id: &str,
        request: &CanUseToolRequest,
        via: Via,
        effects: &mut Vec<Effect>,
    ) {
        // Parked in an earlier run and answered since (a resumed CLI that asks before its
        // hook is registered asks this way): the person's answer.
        if let Some(parked) = self.parked_answer_for(
            request.tool_use_id.as_deref(),
            &request.tool_name,
            &request.input,
            effects,
        ) {
            let (result, decided) = self.parked_result(&request.tool_name, &request.input, parked);
            self.respond_via(request_id, via, request, &result, effects);
            effects.push(Effect::Emit(decided));
            self.mark_answered(request_id);
            return;
        }
        if let Some(tool_use_id) = &request.tool_use_id {
            // The CLI asks: this decision is the one to record.
            self.set_verdict(tool_use_id, &request.tool_name, &request.input, CallVerdict::Decided);
        }
        let hints = hints_of(request);
        let facts = self.facts(&request.tool_name, hints.mcp_server.as_ref());
        let mut decision = self.policy.decide_call(
            &request.tool_name,
            &request.input,
            &self.match_context,
            &facts,
        );
        // What Claude Code says only a person may approve, no allow of the policy's answers
        // (a standing grant is a policy rule too): a person is asked. A deny stays a deny.
        // A dialog in a person's terminal: the policy's hook has given its verdict already, and
        // the dialog is there because the CLI's own rules (the person's) ask, or only a
        // person can answer it (a question, a plan): an allow of the policy's does not close
        // it; a person does, there or afar.
        if decision.behavior == Behavior::Allow && via == Via::Dialog {
            decision.behavior = Behavior::Ask;
            decision.rule = None;
            decision.reason = format!(
                "Claude Code asks in its terminal, so the policy's allow does not answer it ({})",
                decision.reason
            );
        }
        if decision.behavior == Behavior::Allow && hints.person_only {
            decision.behavior = Behavior::Ask;
            // The rule allowed it; it does not ask (the request's `rule` names one that asks).
            decision.rule = None;
            decision.reason = format!(
                "Claude Code says a person must approve this call, so the policy's allow does \
                 not answer it ({})",
                decision.reason
            );
        }
        match decision.behavior {
            behavior @ (Behavior::Allow | Behavior::Deny) => {
                let result = if behavior == Behavior::Allow {
                    PermissionResult::allow(request.input.clone())
                } else {
                    PermissionResult::deny(decision.reason.clone())
                };
                self.respond_via(request_id, via, request, &result, effects);
                effects.push(Effect::Emit(
                    SessionEvent::decided(
                        request_id,
                        &request.tool_name,
                        behavior,
                        DecidedBy::Policy { rule: decision.rule },
                        decision.reason,
                    )
                    .with_tool_use_id(request.tool_use_id.clone())
                    .with_origin(facts.origin.clone()),
                ));
                self.mark_answered(request_id);
            }
            Behavior::Ask => {
                let pending = PendingPermission {
                    request_id: request_id.to_owned(),
                    tool_name: request.tool_name.clone(),
                    input: request.input.clone(),
                    tool_use_id: request.tool_use_id.clone(),
                    suggestions: request.permission_suggestions.clone().unwrap_or_default(),
                    reason: request
                        .decision_reason
                        .clone()
                        .unwrap_or_else(|| decision.reason.clone()),
                    agent_id: request.agent_id.clone(),
                    timeout_secs: self.policy.ask_timeout.as_secs(),
                    asked_at_ms: now_ms(),
                    always_allows: session_rule(request),
                    started_by: self.snapshot.sender.clone(),
                    origin: facts.origin.clone(),
                    rule: decision.rule,
                    cli_reason: request.decision_reason.clone(),
                    hints,
                    parked_at_ms: None,
                    park_expires_at_ms: None,
                };
                self.asked.insert(
                    request_id.to_owned(),
                    AskedPermission { pending: pending.clone(), request: request.clone(), via },
                );
                // The state first: whoever sees the request also sees the session waiting.
                self.set_state(SessionState::AwaitingPermission, effects);
                effects.push(Effect::Emit(SessionEvent::PermissionRequested(pending)));
                effects.push(Effect::StartTimer(
                    Timer::Permission(request_id.to_owned()),
                    self.policy.ask_timeout,
                ));
            }
        }
    }

    pub(super) fn on_hook_callback(
        &mut self,
        request_id: &str,
        hook: &HookCallbackRequest,
        effects: &mut Vec<Effect>,
    ) {
        if hook.callback_id == POLICY_HOOK_ID {
            return self.on_policy_hook(request_id, hook, effects);
        }
        if hook.callback_id == PERMISSION_HOOK_ID {
            return self.on_dialog(request_id, hook, effects);
        }
        let pending = PendingHook {
            request_id: request_id.to_owned(),
            callback_id: hook.callback_id.clone(),
            hook_event_name: hook.hook_event_name().map(str::to_owned),
            input: hook.input.clone(),
        };
        self.hooks.insert(request_id.to_owned(), pending.clone());
        effects.push(Effect::Emit(SessionEvent::HookRequested(pending)));
        effects.push(Effect::StartTimer(Timer::Hook(request_id.to_owned()), HOOK_TIMEOUT));
    }

    /// The policy's `PreToolUse` hook: every tool call, before the CLI's own permission
    /// check. A deny (a rule, or `default = "deny"`) is final here; an ask rule makes the CLI
    /// ask (`can_use_tool` follows, which the policy sends to a person); anything else is left
    /// to the CLI, which asks when it would (and the policy answers) or runs the tool on its
    /// own (recorded when its result arrives).
    pub(super) fn on_policy_hook(
        &mut self,
        request_id: &str,
        hook: &HookCallbackRequest,
        effects: &mut Vec<Effect>,
    ) {
        if hook.hook_event_name() != Some("PreToolUse") {
            // Not a tool call (the hook is registered for PreToolUse only): no opinion.
            self.answer_policy_hook(request_id, serde_json::json!({}), effects);
            return;
        }
        let Some(tool_name) = hook.input.get("tool_name").and_then(Value::as_str) else {
            // A tool call the policy cannot name is not let through: fail closed.
            let output = pre_tool_use_verdict("deny", "Switchboard could not read the tool's name");
            self.answer_policy_hook(request_id, output, effects);
            return;
        };
        if let Some(cwd) = hook.input.get("cwd").and_then(Value::as_str) {
            self.learn_cwd(cwd);
        }
        let input = hook.input.get("tool_input").cloned().unwrap_or(Value::Null);
        let tool_use_id = hook
            .tool_use_id
            .clone()
            .or_else(|| hook.input.get("tool_use_id").and_then(Value::as_str).map(str::to_owned));
        if let Some(tool_use_id) = &tool_use_id {
            if hook.input.get("agent_id").is_some_and(|agent| !agent.is_null()) {
                self.note_tool_call(tool_use_id, tool_name, &input);
                if let Some(call) = self.calls.get_mut(tool_use_id) {
                    call.subagent = true;
                }
            }
        }
        // Parked in an earlier run, and answered since: the person's answer is this call's,
        // if the call is the one they saw.
        if let Some(parked) =
            self.parked_answer_for(tool_use_id.as_deref(), tool_name, &input, effects)
        {
            return self.answer_parked(request_id, tool_name, &input, parked, effects);
        }
        let facts = self.facts(tool_name, None);
        let decision = self.policy.decide_call(tool_name, &input, &self.match_context, &facts);
        if decision.behavior == Behavior::Ask && decision.rule.is_some() && self.may_park() {
            return self.hold_at_hook(request_id, tool_name, input, tool_use_id, decision, effects);
        }
        let verdict = match decision.behavior {
            Behavior::Deny => "deny",
            Behavior::Ask if decision.rule.is_some() => "ask",
            // Allowed, or no rule decides: the CLI's own judgement, then the policy again.
            _ => {
                if let Some(tool_use_id) = &tool_use_id {
                    let verdict = CallVerdict::Deferred(request_id.to_owned());
                    self.set_verdict(tool_use_id, tool_name, &input, verdict);
                }
                self.answer_policy_hook(request_id, serde_json::json!({}), effects);
                return;
            }
        };
        if let Some(tool_use_id) = &tool_use_id {
            self.set_verdict(tool_use_id, tool_name, &input, CallVerdict::Decided);
        }
        let output = pre_tool_use_verdict(verdict, &decision.reason);
        self.answer_policy_hook(request_id, output, effects);
        if decision.behavior == Behavior::Deny {
            let event = SessionEvent::decided(
                request_id,
                tool_name,
                Behavior::Deny,
                DecidedBy::Policy { rule: decision.rule },
                decision.reason,
            );
            effects
                .push(Effect::Emit(event.with_tool_use_id(tool_use_id).with_origin(facts.origin)));
        }
    }

    /// Answers the request `asked` with `result`: the CLI's `can_use_tool` as a permission
    /// result, a call held at the policy's hook as the hook's decision.
    pub(super) fn respond_asked(
        &mut self,
        request_id: &str,
        asked: &AskedPermission,
        result: &PermissionResult,
        effects: &mut Vec<Effect>,
    ) {
        self.respond_via(request_id, asked.via, &asked.request, result, effects);
    }

    /// Answers the request `request_id` about the call `request` with `result`, the way the
    /// CLI asked (`via`).
    pub(super) fn respond_via(
        &mut self,
        request_id: &str,
        via: Via,
        request: &CanUseToolRequest,
        result: &PermissionResult,
        effects: &mut Vec<Effect>,
    ) {
        let output = match via {
            Via::CanUseTool => {
                let tool_use_id = request.tool_use_id.as_deref();
                return self.respond_permission(request_id, tool_use_id, result, effects);
            }
            Via::HeldHook => hook_answer(result, &request.input),
            Via::Dialog => dialog_answer(result, &request.input),
        };
        let response = ControlResponse::success(request_id, &output);
        self.write(Message::from(response), effects);
    }

    pub(super) fn answer_policy_hook(
        &mut self,
        request_id: &str,
        output: Value,
        effects: &mut Vec<Effect>,
    ) {
        let response = ControlResponse::success(request_id, &output);
        self.write(Message::from(response), effects);
        self.mark_answered(request_id);
    }

    /// A `tool_use` block: remembered until its result.
    pub(super) fn note_tool_call(&mut self, id: &str, tool_name: &str, input: &Value) {
        if self.calls.contains_key(id) {
            return;
        }
        let call = ToolCall {
            tool_name: tool_name.to_owned(),
            input: input.clone(),
            verdict: CallVerdict::Unheard,
            subagent: false,
            dialog: false,
        };
        self.calls.insert(id.to_owned(), call);
        if self.calls.len() > CALL_MEMORY {
            self.calls.shift_remove_index(0);
        }
    }

    /// Records what was heard of a call (which may come before its `tool_use` block).
    pub(super) fn set_verdict(
        &mut self,
        tool_use_id: &str,
        tool_name: &str,
        input: &Value,
        verdict: CallVerdict,
    ) {
        self.note_tool_call(tool_use_id, tool_name, input);
        if let Some(call) = self.calls.get_mut(tool_use_id) {
            call.verdict = verdict;
        }
    }

    /// A tool's result: who let the call run (or refused it) is recorded here when no hook
    /// answer or `can_use_tool` did. A call that ran without a `can_use_tool` was allowed by
    /// the CLI on its own; one the CLI refused without asking, that the policy denies, was
    /// held by the policy's deny rules, which the CLI has as its `--disallowedTools`.
    pub(super) fn on_tool_result(
        &mut self,
        result: &switchboard_protocol::content::ToolResultBlock,
        effects: &mut Vec<Effect>,
    ) {
        let tool_use_id = result.tool_use_id.as_str();
        let is_error = result.is_error == Some(true);
        if self.transcript && self.dialog_result(result, effects) {
            self.calls.shift_remove(tool_use_id);
            return;
        }
        let Some(call) = self.calls.shift_remove(tool_use_id) else { return };
        let request_id = match &call.verdict {
            CallVerdict::Decided => return,
            CallVerdict::Deferred(hook_request) => hook_request.clone(),
            CallVerdict::Unheard => tool_use_id.to_owned(),
        };
        let event = if !is_error {
            let message = match call.verdict {
                CallVerdict::Deferred(_) => {
                    "the CLI allowed it on its own (its rules or permission mode); no policy rule objected"
                }
                // No hook answer was heard for this call (a CLI that refused the hook's
                // registration): the policy never saw it.
                _ => "the CLI allowed it on its own (its rules or permission mode); the policy did not see it",
            };
            SessionEvent::decided(
                &request_id,
                &call.tool_name,
                Behavior::Allow,
                DecidedBy::Cli,
                message.to_owned(),
            )
        } else {
            let facts = self.facts(&call.tool_name, None);
            let decision =
                self.policy.decide_call(&call.tool_name, &call.input, &self.match_context, &facts);
            match (&call.verdict, decision.behavior, decision.rule) {
                (CallVerdict::Unheard, Behavior::Deny, Some(rule)) => SessionEvent::decided(
                    &request_id,
                    &call.tool_name,
                    Behavior::Deny,
                    DecidedBy::Policy { rule: Some(rule.clone()) },
                    format!("denied by policy rule {rule} (held by the CLI, which has the policy's deny rules as its own)"),
                ),
                // Failed, or refused by the CLI's own settings: nothing to say about who.
                _ => return,
            }
        };
        let origin = self.open_turns.origin().cloned();
        effects.push(Effect::Emit(
            event.with_tool_use_id(Some(tool_use_id.to_owned())).with_origin(origin),
        ));
    }

    pub(super) fn on_cancel(&mut self, request_id: &str, effects: &mut Vec<Effect>) {
        if let Some(asked) = self.asked.shift_remove(request_id) {
            if asked.via == Via::Dialog {
                // A terminal's dialog whose hook went away: answered there (its result says
                // how).
                self.dialog_withdrawn(request_id, asked, effects);
            } else {
                effects.push(Effect::Emit(asked.ended(
                    request_id,
                    DecidedBy::Cancelled,
                    "the CLI withdrew the request".to_owned(),
                )));
            }
            self.after_permission_resolved(request_id, effects);
        } else if self.hooks.shift_remove(request_id).is_some() {
            self.mark_answered(request_id);
        }
    }

    pub(super) fn respond_permission(
        &mut self,
        request_id: &str,
        tool_use_id: Option<&str>,
        result: &PermissionResult,
        effects: &mut Vec<Effect>,
    ) {
        if self.decline_elicitation(request_id, effects) {
            return;
        }
        let line =
            self.write(Message::from(ControlResponse::permission(request_id, result)), effects);
        let tool_use_id = tool_use_id.map(str::to_owned);
        self.decided.insert(request_id.to_owned(), DecidedAnswer { tool_use_id, line });
        if self.decided.len() > ANSWERED_MEMORY {
            self.decided.shift_remove_index(0);
        }
    }

    pub(super) fn after_permission_resolved(
        &mut self,
        request_id: &str,
        effects: &mut Vec<Effect>,
    ) {
        self.mark_answered(request_id);
        if self.asked.is_empty() && self.state == SessionState::AwaitingPermission {
            self.set_state(SessionState::Working, effects);
        }
    }

    pub(super) fn mark_answered(&mut self, request_id: &str) {
        self.elicitations.remove(request_id);
        if self.answered_set.insert(request_id.to_owned()) {
            self.answered.push_back(request_id.to_owned());
            if self.answered.len() > ANSWERED_MEMORY {
                if let Some(old) = self.answered.pop_front() {
                    self.answered_set.remove(&old);
                }
            }
        }
    }

    /// The `updatedPermissions` for "always allow": the CLI's own suggestions scoped to the
    /// session (mode switches dropped), or a rule for this exact call when it offered none.
    pub(super) fn remember(&self, request: &CanUseToolRequest) -> Vec<PermissionUpdate> {
        let suggestions = request.permission_suggestions.as_deref().unwrap_or(&[]);
        let mut grants = session_grants(suggestions);
        let has_rule = grants.iter().any(|grant| matches!(grant, PermissionUpdate::AddRules(_)));
        if !has_rule {
            let rule_content = match request.tool_name.as_str() {
                "Bash" => request.input.get("command").and_then(Value::as_str).map(str::to_owned),
                _ => None,
            };
            grants.insert(
                0,
                PermissionUpdate::allow_for_session(vec![RuleValue {
                    tool_name: request.tool_name.clone(),
                    rule_content,
                    ..RuleValue::default()
                }]),
            );
        }
        grants
    }

    /// Our own session rule, so the CLI asking again (it does, for compound commands) is
    /// answered without a person.
    pub(super) fn remember_locally(&mut self, request: &CanUseToolRequest) {
        let rule = session_rule(request);
        if let Err(error) = self.policy.add_allow(&rule) {
            tracing::warn!(%rule, %error, "cannot remember the session rule");
        }
    }
}

/// The longest title or name a hint keeps: the CLI's words, shown to people.
const MAX_HINT_CHARS: usize = 300;

/// Claude Code's hints on a request, as the session keeps them.
impl SessionCore {
    /// What a rule may know of a call of `tool_name` beyond its input: who started the turns
    /// now open, if they share it, and where its MCP server was configured (the CLI's word on
    /// this request, `server`, else what its `init` listed).
    pub(super) fn facts(&self, tool_name: &str, server: Option<&McpServer>) -> CallFacts {
        let mcp_source = match server {
            Some(server) => Some(server.source.clone()),
            None => crate::policy::when::source_of_tool(
                tool_name,
                self.mcp_sources.iter().map(|(name, source)| (name.as_str(), source.as_str())),
            ),
        };
        CallFacts { origin: self.open_turns.origin().cloned(), mcp_source }
    }

    /// Learns where each MCP server `init` lists was configured, by the name its tools carry.
    pub(super) fn learn_mcp_sources(&mut self, init: &switchboard_protocol::system::SystemInit) {
        for server in init.mcp_server_list() {
            let Some(source) = server.source else { continue };
            let name = crate::policy::when::server_in_tool_names(&server.name);
            if self.mcp_sources.len() >= crate::policy::when::MAX_MCP_SERVERS
                && !self.mcp_sources.contains_key(&name)
            {
                break;
            }
            self.mcp_sources.insert(name, source.chars().take(MAX_HINT_CHARS).collect());
        }
    }
}

fn hints_of(request: &CanUseToolRequest) -> PermissionHints {
    let cut = |text: &String| text.chars().take(MAX_HINT_CHARS).collect::<String>();
    PermissionHints {
        requires_user_interaction: request.requires_user_interaction == Some(true),
        classifier_approvable: request.classifier_approvable,
        default_to_no: request.default_to_no == Some(true),
        suppress_always_allow_rule: request.suppress_always_allow_rule == Some(true),
        matched_ask_rule: request.matched_ask_rule.as_ref().map(|rule| AskRule {
            source: cut(&rule.source),
            tool_name: cut(&rule.tool_name),
            rule_content: rule.rule_content.as_ref().map(cut),
        }),
        title: request.title.as_ref().map(cut).filter(|title| !title.trim().is_empty()),
        mcp_server: request
            .mcp_server
            .as_ref()
            .map(|server| McpServer { name: cut(&server.name), source: cut(&server.source) }),
        ..PermissionHints::default()
    }
    .settled()
}
