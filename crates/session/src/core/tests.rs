//! Unit tests of the session core: correlation, permissions, state, without a runtime.

use serde_json::json;
use switchboard_protocol::codec::Received;
use switchboard_protocol::control::{InterruptRequest, SetPermissionModeRequest};
use switchboard_protocol::PermissionMode;

use super::*;

fn core(policy: &str) -> SessionCore {
    SessionCore::new(
        Policy::from_toml(policy).unwrap(),
        MatchContext { cwd: "/work".into(), home: None },
    )
}

fn line(text: &str) -> Received {
    Received::decode(text.as_bytes()).unwrap()
}

fn sent(effects: &[Effect]) -> Vec<serde_json::Value> {
    effects
        .iter()
        .filter_map(|effect| match effect {
            Effect::Send(line) => Some(serde_json::from_str(line.trim_end()).unwrap()),
            _ => None,
        })
        .collect()
}

fn events(effects: &[Effect]) -> Vec<&SessionEvent> {
    effects
        .iter()
        .filter_map(|effect| if let Effect::Emit(event) = effect { Some(event) } else { None })
        .collect()
}

fn done(effects: &[Effect]) -> Vec<(&String, &Result<ControlSuccess, ControlFailure>)> {
    effects
        .iter()
        .filter_map(|effect| {
            if let Effect::ControlDone(id, result) = effect {
                Some((id, result))
            } else {
                None
            }
        })
        .collect()
}

fn can_use_tool(request_id: &str, command: &str) -> Received {
    line(&json!({"type":"control_request","request_id":request_id,"request":{"subtype":"can_use_tool","tool_name":"Bash",
        "input":{"command":command},"tool_use_id":"toolu_1",
        "permission_suggestions":[{"type":"addRules","rules":[{"toolName":"Bash","ruleContent":command}],"behavior":"allow","destination":"localSettings"},
                                  {"type":"setMode","mode":"acceptEdits","destination":"session"}]}}).to_string())
}

fn started(core: &mut SessionCore) {
    let effects = core.on_started(None);
    assert_eq!(core.state(), SessionState::Idle, "{effects:?}");
}

#[test]
fn user_messages_wait_for_initialize_then_go_in_order() {
    let mut core = core("");
    let effects = core.on_started(Some(ControlRequestPayload::Initialize(Default::default())));
    assert_eq!(sent(&effects)[0]["request"]["subtype"], "initialize");
    let effects = core.send_user(UserMessage::prompt("first"));
    assert!(sent(&effects).is_empty(), "held until initialize is answered");
    let effects = core.on_line(line(r#"{"type":"control_response","response":{"subtype":"success","request_id":"sb-1","response":{"commands":[{"name":"compact"}],"models":[{"value":"opus"}]}}}"#));
    let written = sent(&effects);
    assert_eq!(written.len(), 1);
    assert_eq!(written[0]["message"]["content"], "first");
    assert_eq!(core.state(), SessionState::Working);
    let snapshot = core.snapshot();
    let names: Vec<&str> =
        snapshot.slash_commands.iter().map(|command| command.name.as_str()).collect();
    assert_eq!(names, ["compact"]);
    assert_eq!(core.snapshot().available_models, ["opus"]);
}

#[test]
fn slash_commands_merge_initialize_and_init_and_stay_bounded() {
    let mut core = core("");
    core.on_started(Some(ControlRequestPayload::Initialize(Default::default())));
    let long = "x".repeat(1000);
    let answer = json!({"type":"control_response","response":{"subtype":"success","request_id":"sb-1","response":{"commands":[
        {"name":"compact","description":"Free up context","argumentHint":"<instructions>"},
        {"name":"review","description": long},
        {"name":"bad name"}, {"name":"/"}, {"name":"evil\u{1b}[2J"}
    ]}}});
    core.on_line(line(&answer.to_string()));
    let init = json!({"type":"system","subtype":"init","session_id":"s","cwd":"/","tools":[],"model":"m",
        "permissionMode":"default","slash_commands":["compact","/review","my-skill","a b"],"skills":["my-skill"]});
    core.on_line(line(&init.to_string()));
    let commands = core.snapshot().slash_commands;
    let names: Vec<(&str, bool)> =
        commands.iter().map(|command| (command.name.as_str(), command.skill)).collect();
    assert_eq!(names, [("compact", false), ("review", false), ("my-skill", true)]);
    assert_eq!(commands[0].description.as_deref(), Some("Free up context"));
    assert_eq!(commands[0].argument_hint.as_deref(), Some("<instructions>"));
    let cut = commands[1].description.as_deref().unwrap();
    assert_eq!(cut.chars().count(), 301, "cut at 300 characters and marked");
    assert!(cut.ends_with('…'));

    let many: Vec<String> = (0..2 * MAX_COMMANDS).map(|i| format!("c{i}")).collect();
    let init = json!({"type":"system","subtype":"init","session_id":"s","cwd":"/","tools":[],"model":"m",
        "permissionMode":"default","slash_commands": many});
    core.on_line(line(&init.to_string()));
    assert_eq!(core.snapshot().slash_commands.len(), MAX_COMMANDS);
}

/// A warm CLI's start: `initialize` answered, prompts held, then the session's mode set.
fn warm_start_with_a_mode(core: &mut SessionCore) -> String {
    core.on_started(Some(ControlRequestPayload::Initialize(Default::default())));
    core.hold_prompts();
    core.on_line(line(r#"{"type":"control_response","response":{"subtype":"success","request_id":"sb-1","response":{}}}"#));
    assert_eq!(core.state(), SessionState::Starting, "not idle while the mode is still unset");
    let request = SetPermissionModeRequest { mode: PermissionMode::Plan, ..Default::default() };
    let (request_id, effects) =
        core.control_before_prompts(ControlRequestPayload::SetPermissionMode(request));
    assert_eq!(sent(&effects)[0]["request"]["subtype"], "set_permission_mode");
    assert!(core.release_prompts().is_empty());
    let effects = core.send_user(UserMessage::prompt("plan this"));
    assert!(sent(&effects).is_empty(), "held until the mode is set");
    request_id
}

#[test]
fn a_warm_sessions_prompt_runs_only_once_its_mode_is_set() {
    let mut core = core("");
    let request_id = warm_start_with_a_mode(&mut core);
    let effects = core.on_line(line(&json!({"type":"control_response","response":{"subtype":"success","request_id":request_id,"response":{"mode":"plan"}}}).to_string()));
    let written = sent(&effects);
    assert_eq!(written.len(), 1);
    assert_eq!(written[0]["message"]["content"], "plan this");
    assert_eq!(core.snapshot().permission_mode.as_deref(), Some("plan"));
}

#[test]
fn a_warm_session_whose_mode_is_refused_runs_no_prompt_and_ends() {
    for refusal in ["refused", "timed out"] {
        let mut core = core("");
        let request_id = warm_start_with_a_mode(&mut core);
        let effects = if refusal == "refused" {
            core.on_line(line(&json!({"type":"control_response","response":{"subtype":"error","request_id":request_id,"error":"no"}}).to_string()))
        } else {
            core.on_timer(Timer::Control(request_id.clone()))
        };
        assert!(sent(&effects).is_empty(), "{refusal}: the prompt never goes: {effects:?}");
        assert!(
            events(&effects)
                .iter()
                .any(|event| matches!(event, SessionEvent::Undelivered { prompt: true, .. })),
            "{refusal}: the prompt is reported undelivered: {effects:?}"
        );
        assert!(
            effects.iter().any(|effect| matches!(effect, Effect::End)),
            "{refusal}: the CLI is ended"
        );
        let effects = core.send_user(UserMessage::prompt("and this"));
        assert!(sent(&effects).is_empty(), "{refusal}: nor does a later one");
        assert!(events(&effects)
            .iter()
            .any(|event| matches!(event, SessionEvent::Undelivered { .. })));
    }
}

#[test]
fn a_control_request_ends_exactly_once() {
    let mut core = core("");
    started(&mut core);
    let (id, _) = core.control(ControlRequestPayload::Interrupt(InterruptRequest::new()));
    let response = format!(
        r#"{{"type":"control_response","response":{{"subtype":"success","request_id":"{id}"}}}}"#
    );
    let effects = core.on_line(line(&response));
    assert_eq!(done(&effects).len(), 1);
    // 2.1.37 answers set_permission_mode twice; the second answer (and the timer) find nothing.
    assert!(done(&core.on_line(line(&response))).is_empty());
    assert!(done(&core.on_timer(Timer::Control(id))).is_empty());
}

#[test]
fn unanswered_control_requests_time_out_and_exit_closes_the_rest() {
    let mut core = core("");
    started(&mut core);
    let (first, _) = core.control(ControlRequestPayload::Unknown(json!({"subtype":"frobnicate"})));
    let (second, _) = core.control(ControlRequestPayload::Interrupt(InterruptRequest::new()));
    let effects = core.on_timer(Timer::Control(first.clone()));
    assert!(matches!(done(&effects)[0].1, Err(ControlFailure::TimedOut { .. })));
    assert!(events(&effects).iter().any(|event| matches!(event, SessionEvent::ControlTimedOut { request_id, .. } if *request_id == first)));
    let effects = core.on_exit(Some(0), None, "the CLI exited with status 0".into());
    let closed = done(&effects);
    assert_eq!(closed.len(), 1);
    assert_eq!(closed[0].0, &second);
    assert!(matches!(closed[0].1, Err(ControlFailure::LinkClosed { .. })));
    assert_eq!(core.state(), SessionState::Exited);
}

#[test]
fn policy_decides_without_a_person() {
    let mut core = core("[permissions]\nallow=[\"Bash(ls:*)\"]\ndeny=[\"Bash(rm:*)\"]");
    started(&mut core);
    let effects = core.on_line(can_use_tool("r1", "ls -la"));
    assert_eq!(
        sent(&effects)[0]["response"]["response"],
        json!({"behavior":"allow","updatedInput":{"command":"ls -la"}})
    );
    let effects = core.on_line(can_use_tool("r2", "ls && rm -rf x"));
    let answer = &sent(&effects)[0]["response"]["response"];
    assert_eq!(answer["behavior"], "deny");
    assert!(answer["message"].as_str().unwrap().contains("Bash(rm:*)"));
    assert!(core.snapshot().pending_permissions.is_empty());
}

#[test]
fn a_request_records_who_sent_the_latest_message_once() {
    let mut core = core("");
    started(&mut core);
    let asked = |effects: &[Effect]| {
        effects.iter().find_map(|effect| match effect {
            Effect::Emit(SessionEvent::PermissionRequested(pending)) => {
                Some((pending.started_by.clone(), pending.origin.clone()))
            }
            _ => None,
        })
    };
    let api = Some(crate::TurnOrigin::Api { token: "phone".into() });
    let sender =
        |who: &str, origin: Option<crate::TurnOrigin>| Some(crate::Sender::new(who, origin));
    let effects = core.on_line(can_use_tool("r0", "touch a"));
    assert_eq!(asked(&effects), Some((None, None)), "no message yet: nobody started it");
    core.send_user_from(UserMessage::prompt("go"), sender("token phone (api)", api.clone()));
    let effects = core.on_line(can_use_tool("r1", "touch x"));
    assert_eq!(asked(&effects), Some((Some("token phone (api)".into()), api.clone())));
    assert_eq!(core.snapshot().sender.as_deref(), Some("token phone (api)"));
    // The next message's sender starts the next requests; while both turns are open, which
    // one a call is in is the CLI's to know: its origin is unknown.
    let relay = Some(crate::TurnOrigin::Relay);
    core.send_user_from(
        UserMessage::prompt("more"),
        sender("relay frontend (relay)", relay.clone()),
    );
    let effects = core.on_line(can_use_tool("r2", "touch y"));
    assert_eq!(asked(&effects), Some((Some("relay frontend (relay)".into()), None)));
    core.send_user(UserMessage::prompt("anon"));
    let effects = core.on_line(can_use_tool("r3", "touch z"));
    assert_eq!(asked(&effects), Some((None, None)));
    let waiting: Vec<Option<String>> =
        core.snapshot().pending_permissions.into_iter().map(|p| p.started_by).collect();
    assert_eq!(waiting.len(), 4);
}

#[test]
fn once_every_turn_has_ended_the_next_prompts_origin_is_the_calls() {
    let mut core = core("[permissions]\nallow = [\"Bash\"]\n[[permissions.when]]\norigin = [\"agent\"]\nask = [\"Bash\"]");
    started(&mut core);
    let result =
        r#"{"type":"result","subtype":"success","is_error":false,"result":"ok","session_id":"s1"}"#;
    let agent = Some(crate::Sender::new("token planner (mcp)", Some(crate::TurnOrigin::Agent)));
    let person = Some(crate::Sender::new("token admin (web UI)", Some(crate::TurnOrigin::Person)));
    let decided = |effects: &[Effect]| {
        effects.iter().find_map(|effect| match effect {
            Effect::Emit(SessionEvent::PermissionRequested(pending)) => {
                Some((Behavior::Ask, pending.rule.clone(), pending.origin.clone()))
            }
            Effect::Emit(SessionEvent::PermissionDecided { behavior, by, origin, .. }) => {
                let rule = match by {
                    DecidedBy::Policy { rule } => rule.clone(),
                    _ => None,
                };
                Some((*behavior, rule, origin.clone()))
            }
            _ => None,
        })
    };
    core.send_user_from(UserMessage::prompt("agent's"), agent);
    let effects = core.on_line(can_use_tool("r1", "make deploy"));
    assert_eq!(
        decided(&effects),
        Some((
            Behavior::Ask,
            Some("Bash (when origin agent)".into()),
            Some(crate::TurnOrigin::Agent)
        ))
    );
    core.answer_permission("r1", PermissionAnswer::allow(), "alice").unwrap();
    core.on_line(line(result));
    assert_eq!(core.state(), SessionState::Idle);
    core.send_user_from(UserMessage::prompt("person's"), person);
    let effects = core.on_line(can_use_tool("r2", "make deploy"));
    assert_eq!(
        decided(&effects),
        Some((Behavior::Allow, Some("Bash".into()), Some(crate::TurnOrigin::Person)))
    );
}

#[test]
fn ask_waits_for_a_person_and_the_first_answer_wins() {
    let mut core = core("");
    started(&mut core);
    let effects = core.on_line(can_use_tool("r1", "touch x && ls"));
    assert!(sent(&effects).is_empty(), "nothing is sent while a person decides");
    assert!(effects.iter().any(
        |effect| matches!(effect, Effect::StartTimer(Timer::Permission(id), _) if id == "r1")
    ));
    assert_eq!(core.state(), SessionState::AwaitingPermission);
    assert_eq!(core.snapshot().pending_permissions.len(), 1);

    let mut answer = PermissionAnswer::allow();
    answer.updated_input = Some(json!({"command": "touch y && ls"}));
    let effects = core.answer_permission("r1", answer, "alice").unwrap();
    assert_eq!(
        sent(&effects)[0]["response"]["response"]["updatedInput"]["command"],
        "touch y && ls"
    );
    assert!(events(&effects).iter().any(|event| matches!(event,
        SessionEvent::PermissionDecided { by: DecidedBy::Person { who }, input_changed: true, .. } if who == "alice")));
    assert_eq!(core.state(), SessionState::Working);
    assert_eq!(
        core.answer_permission("r1", PermissionAnswer::deny("no"), "bob").unwrap_err(),
        AnswerError::AlreadyAnswered("r1".into())
    );
    assert_eq!(
        core.answer_permission("nope", PermissionAnswer::allow(), "bob").unwrap_err(),
        AnswerError::Unknown("nope".into())
    );
    assert!(
        core.on_timer(Timer::Permission("r1".into())).is_empty(),
        "the timer finds it answered"
    );
}

#[test]
fn a_changed_input_the_policy_denies_is_refused_and_the_request_still_waits() {
    let mut core = core("[permissions]\nask = [\"Bash\"]\ndeny = [\"Bash(cat:*)\"]");
    started(&mut core);
    core.on_line(can_use_tool("r1", "touch x"));
    let mut answer = PermissionAnswer::allow();
    answer.updated_input = Some(json!({"command": "cat ~/.local/share/switchboard/token"}));
    let refused = core.answer_permission("r1", answer, "mallory").unwrap_err();
    assert!(matches!(refused, AnswerError::DeniedInput(_)), "{refused:?}");
    assert_eq!(core.snapshot().pending_permissions.len(), 1, "it still waits");
    // An input the policy does not deny is taken.
    let mut answer = PermissionAnswer::allow();
    answer.updated_input = Some(json!({"command": "touch y"}));
    assert!(core.answer_permission("r1", answer, "alice").is_ok());
}

#[test]
fn an_unanswered_ask_times_out_to_deny() {
    let mut core = core("[permissions]\nask_timeout_secs = 5");
    started(&mut core);
    core.on_line(can_use_tool("r1", "touch x"));
    let effects = core.on_timer(Timer::Permission("r1".into()));
    let answer = &sent(&effects)[0]["response"]["response"];
    assert_eq!(answer["behavior"], "deny");
    assert!(answer["message"].as_str().unwrap().contains("within 5 s"));
    assert!(events(&effects).iter().any(|event| matches!(
        event,
        SessionEvent::PermissionDecided { by: DecidedBy::Timeout, .. }
    )));
    assert!(matches!(
        core.answer_permission("r1", PermissionAnswer::allow(), "late"),
        Err(AnswerError::AlreadyAnswered(_))
    ));
}

#[test]
fn remember_sends_session_scoped_grants_and_adds_a_local_rule() {
    let mut core = core("");
    started(&mut core);
    core.on_line(can_use_tool("r1", "touch x && ls"));
    let mut answer = PermissionAnswer::allow();
    answer.remember = true;
    let effects = core.answer_permission("r1", answer, "alice").unwrap();
    let updates = &sent(&effects)[0]["response"]["response"]["updatedPermissions"];
    // The CLI's localSettings rule is rewritten to session; its setMode is dropped.
    assert_eq!(
        updates,
        &json!([{"type":"addRules","rules":[{"toolName":"Bash","ruleContent":"touch x && ls"}],"behavior":"allow","destination":"session"}])
    );
    // The CLI asks again for compound commands; our own rule answers it.
    let effects = core.on_line(can_use_tool("r2", "touch x && ls"));
    assert_eq!(sent(&effects)[0]["response"]["response"]["behavior"], "allow");
}

/// A `can_use_tool` with Claude Code's hints (the fields as 2.1.330 writes them).
fn hinted(request_id: &str, hints: serde_json::Value) -> Received {
    let mut request = json!({"subtype":"can_use_tool","tool_name":"mcp__tracker__close",
        "input":{"issue":7},"tool_use_id":"toolu_9"});
    request.as_object_mut().unwrap().extend(hints.as_object().unwrap().clone());
    line(&json!({"type":"control_request","request_id":request_id,"request":request}).to_string())
}

#[test]
fn what_claude_code_says_only_a_person_may_approve_no_policy_allow_or_grant_answers() {
    // The policy allows every call of the tool; a grant made earlier would be a rule like it.
    let mut core = core("[permissions]\nallow=[\"mcp__tracker__close\"]");
    started(&mut core);
    let effects = core.on_line(hinted("plain", json!({})));
    assert_eq!(
        sent(&effects)[0]["response"]["response"]["behavior"],
        "allow",
        "no hint: the policy"
    );
    for (id, hints) in [
        ("interaction", json!({"requires_user_interaction": true})),
        ("safety", json!({"classifier_approvable": false, "suppress_always_allow_rule": true})),
        (
            "rule",
            json!({"matched_ask_rule": {"source": "userSettings", "tool_name": "mcp__tracker__close"}}),
        ),
    ] {
        let effects = core.on_line(hinted(id, hints.clone()));
        assert!(sent(&effects).is_empty(), "{id}: nothing answers it but a person");
        let pending = core.snapshot().pending_permissions.last().unwrap().clone();
        assert_eq!(pending.request_id, id);
        assert!(pending.hints.person_only && pending.hints.no_standing_rule, "{id}: {hints}");
        assert!(pending.reason.contains("a person must approve"), "{}", pending.reason);
        // "Always" is refused and the request still waits; once is taken.
        let always = PermissionAnswer { remember: true, ..PermissionAnswer::allow() };
        let refused = core.answer_permission(id, always, "alice").unwrap_err();
        assert!(matches!(refused, AnswerError::NoStandingRule(_)), "{refused}");
        let effects = core.answer_permission(id, PermissionAnswer::allow(), "alice").unwrap();
        assert_eq!(sent(&effects)[0]["response"]["response"]["behavior"], "allow");
    }
    // A sensitive file's check that automatic approval may pass is the policy's to answer.
    let effects = core.on_line(hinted("approvable", json!({"classifier_approvable": true})));
    assert_eq!(sent(&effects)[0]["response"]["response"]["behavior"], "allow");
}

#[test]
fn a_hint_that_does_not_fit_is_never_read_away() {
    // Read without the hint, the request would look like one the policy may allow.
    let mut core = core("[permissions]\nallow=[\"mcp__tracker__close\"]");
    started(&mut core);
    for hint in [
        json!({"requires_user_interaction": "yes"}),
        json!({"classifier_approvable": null}),
        json!({"matched_ask_rule": {"source": "userSettings"}}),
    ] {
        let effects = core.on_line(hinted("odd", hint.clone()));
        let answer = &sent(&effects)[0]["response"];
        assert_ne!(answer["response"]["behavior"], "allow", "{hint}: {answer}");
    }
}

#[test]
fn hints_are_kept_bounded_and_no_always_where_claude_code_withholds_it() {
    let mut core = core("");
    started(&mut core);
    let long = "t".repeat(5000);
    core.on_line(hinted(
        "r1",
        json!({"suppress_always_allow_rule": true, "default_to_no": true,
        "title": long, "mcp_server": {"name": "tracker", "source": "project"}}),
    ));
    let pending = core.snapshot().pending_permissions[0].clone();
    let hints = &pending.hints;
    assert!(hints.default_to_no && hints.no_standing_rule && !hints.person_only, "{hints:?}");
    assert_eq!(hints.title.as_ref().unwrap().chars().count(), 300, "the CLI's words, cut");
    assert_eq!(
        hints.mcp_server,
        Some(McpServer { name: "tracker".into(), source: "project".into() })
    );
    let updates =
        PermissionAnswer { updated_permissions: Some(Vec::new()), ..PermissionAnswer::allow() };
    assert!(matches!(
        core.answer_permission("r1", updates, "bob"),
        Err(AnswerError::NoStandingRule(_))
    ));
    // Read back from the log as written.
    let json = serde_json::to_value(&pending).unwrap();
    assert_eq!(json["hints"]["mcp_server"]["name"], "tracker");
    let back: PendingPermission = serde_json::from_value(json).unwrap();
    assert_eq!(back, pending);
    // An older CLI's request: no hints, nothing written.
    core.on_line(can_use_tool("r2", "ls"));
    let plain = serde_json::to_value(&core.snapshot().pending_permissions[1]).unwrap();
    assert!(plain.get("hints").is_none(), "{plain}");
}

#[test]
fn ask_user_question_answers_go_into_the_input() {
    let mut core = core("[permissions]\ndefault = \"allow\"");
    started(&mut core);
    let request = json!({"type":"control_request","request_id":"q1","request":{"subtype":"can_use_tool","tool_name":"AskUserQuestion",
        "input":{"questions":[{"question":"Color?","options":[{"label":"Red"},{"label":"Blue"}]}]},"tool_use_id":"t"}});
    let effects = core.on_line(line(&request.to_string()));
    assert!(sent(&effects).is_empty(), "questions always go to a person, even with default allow");
    let mut answer = PermissionAnswer::allow();
    answer.answers = Some([("Color?".to_owned(), "Blue".to_owned())].into());
    let effects = core.answer_permission("q1", answer, "alice").unwrap();
    assert_eq!(
        sent(&effects)[0]["response"]["response"]["updatedInput"]["answers"],
        json!({"Color?":"Blue"})
    );
}

#[test]
fn cancel_and_exit_end_pending_permissions() {
    let mut core = core("");
    started(&mut core);
    core.on_line(can_use_tool("r1", "touch a"));
    core.on_line(can_use_tool("r2", "touch b"));
    let effects = core.on_line(line(r#"{"type":"control_cancel_request","request_id":"r1"}"#));
    assert!(events(&effects).iter().any(|event| matches!(
        event,
        SessionEvent::PermissionDecided { by: DecidedBy::Cancelled, .. }
    )));
    assert!(sent(&effects).is_empty(), "nothing is sent for a withdrawn request");
    let effects = core.on_exit(None, Some(9), "killed".into());
    assert!(events(&effects).iter().any(|event| matches!(event, SessionEvent::PermissionDecided { by: DecidedBy::LinkClosed, request_id, .. } if request_id == "r2")));
    assert_eq!(core.state(), SessionState::Crashed);
}

#[test]
fn unknown_control_requests_from_the_cli_get_an_error_never_silence() {
    let mut core = core("");
    started(&mut core);
    let effects = core.on_line(line(
        r#"{"type":"control_request","request_id":"x1","request":{"subtype":"brand_new","a":1}}"#,
    ));
    let response = &sent(&effects)[0]["response"];
    assert_eq!(response["subtype"], "error");
    assert_eq!(response["request_id"], "x1");
    assert!(response["error"].as_str().unwrap().contains("brand_new"));
}

#[test]
fn hooks_wait_for_an_answer_or_time_out_to_no_opinion() {
    let mut core = core("");
    started(&mut core);
    let hook = r#"{"type":"control_request","request_id":"h1","request":{"subtype":"hook_callback","callback_id":"pre","input":{"hook_event_name":"PreToolUse","tool_name":"Bash"}}}"#;
    let effects = core.on_line(line(hook));
    assert!(sent(&effects).is_empty());
    assert_eq!(core.snapshot().pending_hooks[0].hook_event_name.as_deref(), Some("PreToolUse"));
    let effects = core.on_timer(Timer::Hook("h1".into()));
    assert_eq!(sent(&effects)[0]["response"]["response"], json!({}));
    assert!(matches!(
        core.answer_hook("h1", json!({}), "late"),
        Err(AnswerError::AlreadyAnswered(_))
    ));
}

#[test]
fn results_track_turns_cost_models_and_go_idle() {
    let mut core = core("");
    started(&mut core);
    core.send_user(UserMessage::prompt("a"));
    core.send_user(UserMessage::prompt("b"));
    assert_eq!(core.state(), SessionState::Working);
    let result = r#"{"type":"result","subtype":"success","is_error":false,"result":"ok","session_id":"s1","total_cost_usd":0.25,"modelUsage":{"opus":{"inputTokens":10,"outputTokens":5,"costUSD":0.25}}}"#;
    core.on_line(line(result));
    assert_eq!(core.state(), SessionState::Working, "the queued message's turn is still to come");
    let effects = core.on_line(line(result));
    assert!(events(&effects)
        .iter()
        .any(|event| matches!(event, SessionEvent::State { to: SessionState::Idle, .. })));
    let snapshot = core.snapshot();
    assert_eq!(snapshot.turns, 2);
    assert_eq!(snapshot.cost_usd, 0.25);
    assert_eq!(snapshot.claude_session_id.as_deref(), Some("s1"));
}

#[test]
fn a_line_that_never_reached_the_cli_is_recorded_not_sent_again() {
    let mut core = core("");
    started(&mut core);
    let effects = core.on_undelivered(
        b"{\"type\":\"user\",\"uuid\":\"u-1\",\"message\":{\"role\":\"user\",\"content\":\"hi\"}}\n",
    );
    assert!(sent(&effects).is_empty(), "nothing is sent again");
    match events(&effects).as_slice() {
        [SessionEvent::Undelivered { line_type, uuid, preview, prompt }] => {
            assert!(prompt);
            assert_eq!(line_type, "user");
            assert_eq!(uuid.as_deref(), Some("u-1"));
            assert!(preview.starts_with("{\"type\":\"user\"") && !preview.ends_with('\n'));
        }
        other => panic!("{other:?}"),
    }
    let event = SessionEvent::Undelivered {
        line_type: "user".into(),
        uuid: None,
        preview: "x".into(),
        prompt: true,
    };
    assert_eq!(event.to_json()["event"], "undelivered");
    assert_eq!(event.to_json_text(), event.to_json().to_string());
}

#[test]
fn every_prompt_carries_a_uuid() {
    let mut core = core("");
    started(&mut core);
    let effects = core.send_user(UserMessage::prompt("one"));
    let uuid = sent(&effects)[0]["uuid"].as_str().unwrap().to_owned();
    assert!(uuid::Uuid::try_parse(&uuid).is_ok(), "{uuid}");
    let mut own = UserMessage::prompt("two");
    own.uuid = Some("mine".into());
    assert_eq!(sent(&core.send_user(own))[0]["uuid"], "mine", "a caller's uuid is kept");
    let again = sent(&core.send_user(UserMessage::prompt("three")))[0]["uuid"].clone();
    assert_ne!(again, json!(uuid));
}

#[test]
fn a_permission_answer_lost_with_the_socket_goes_again_and_nobody_is_asked_twice() {
    let mut core = core("");
    started(&mut core);
    core.on_line(can_use_tool("r1", "touch x && ls"));
    let answered = core.answer_permission("r1", PermissionAnswer::allow(), "alice").unwrap();
    let answer = sent(&answered)[0].clone();
    core.on_disconnected();
    let effects = core.on_connected(true);
    let initialize = sent(&effects)[0]["request_id"].as_str().unwrap().to_owned();
    // The CLI still waits for r1: our answer never reached it.
    let pending = json!({"type":"control_response","response":{"subtype":"error","error":"Already initialized",
        "request_id": initialize,
        "pending_permission_requests":[serde_json::from_str::<serde_json::Value>(&can_use_tool("r1", "touch x && ls").raw).unwrap()]}});
    let effects = core.on_line(line(&pending.to_string()));
    assert_eq!(sent(&effects), std::slice::from_ref(&answer), "the same answer goes again");
    assert!(events(&effects).iter().any(|event| matches!(event,
        SessionEvent::Resent { request_id: Some(id), .. } if id == "r1")));
    assert!(!events(&effects)
        .iter()
        .any(|event| matches!(event, SessionEvent::PermissionRequested(_))));
    assert!(core.snapshot().pending_permissions.is_empty());
    assert_ne!(core.state(), SessionState::AwaitingPermission);
    // A CLI that asks again itself gets it too.
    let effects = core.on_line(can_use_tool("r1", "touch x && ls"));
    assert_eq!(sent(&effects), [answer]);
    assert!(core.snapshot().pending_permissions.is_empty());
    // The same id for another tool call is a new question.
    let other = can_use_tool("r1", "rm -rf x").raw.replace("toolu_1", "toolu_2");
    let effects = core.on_line(line(&other));
    assert!(sent(&effects).is_empty(), "{effects:?}");
    assert_eq!(core.snapshot().pending_permissions.len(), 1);
}

#[test]
fn a_prompt_lost_with_its_socket_is_no_turn() {
    let mut core = core("");
    started(&mut core);
    let effects = core.send_user(UserMessage::prompt("lost"));
    let lost = format!("{}\n", sent(&effects)[0]);
    assert_eq!(core.state(), SessionState::Working);
    // A tool result lost the same way starts no turn, and ends none.
    let results = r#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"x"}]},"parent_tool_use_id":null}"#;
    core.on_undelivered(results.as_bytes());
    assert_eq!(core.state(), SessionState::Working);
    let effects = core.on_undelivered(lost.as_bytes());
    assert!(events(&effects)
        .iter()
        .any(|event| matches!(event, SessionEvent::State { to: SessionState::Idle, .. })));
    assert_eq!(core.snapshot().queued_turns, 0);
    // The next prompt's turn ends the session's work as usual.
    core.send_user(UserMessage::prompt("again"));
    core.on_line(line(
        r#"{"type":"result","subtype":"success","is_error":false,"session_id":"s1"}"#,
    ));
    assert_eq!(core.state(), SessionState::Idle);
}

#[test]
fn a_cli_that_never_reconnects_ends_crashed_saying_why() {
    let mut core = core("");
    started(&mut core);
    core.on_disconnected();
    assert!(core.snapshot().disconnected_since_ms.is_some());
    core.on_connected(true);
    assert_eq!(core.snapshot().disconnected_since_ms, None, "back: no longer disconnected");
    core.on_disconnected();
    let effects = core.on_exit(Some(0), None, "exited with status 0".into());
    match events(&effects).as_slice() {
        [SessionEvent::Exited { description, requested: false, .. }, SessionEvent::State { to, .. }] =>
        {
            assert!(description.contains("connection to the daemon was lost"), "{description}");
            assert_eq!(*to, SessionState::Crashed);
        }
        other => panic!("{other:?}"),
    }
}

/// Decodes `bytes` the way the transports do and hands the failure to the core.
fn bad_line(core: &mut SessionCore, bytes: &[u8]) -> Vec<Effect> {
    let mut decoder = switchboard_protocol::Decoder::default();
    decoder.push(bytes);
    decoder.push(b"\n");
    let error = decoder.next_item().unwrap().unwrap_err();
    core.on_bad_line(error)
}

/// Hands the core a line of a known type that does not fit its model.
fn drifted(core: &mut SessionCore, text: &str) -> Vec<Effect> {
    let received = line(text);
    assert!(matches!(received.message, Message::Drift(_)), "{:?}", received.message);
    core.on_line(received)
}

#[test]
fn an_unreadable_permission_request_is_denied_not_left_pending() {
    let mut core = core("[permissions]\ndefault = \"allow\"");
    started(&mut core);
    // `tool_name` missing: the line does not fit, but its routing fields say what it was.
    let effects = drifted(
        &mut core,
        r#"{"type":"control_request","request_id":"r-bad","request":{"subtype":"can_use_tool","input":{}}}"#,
    );
    let written = sent(&effects);
    assert_eq!(written.len(), 1, "{effects:?}");
    assert_eq!(written[0]["response"]["request_id"], "r-bad");
    assert_eq!(written[0]["response"]["response"]["behavior"], "deny");
    let message = written[0]["response"]["response"]["message"].as_str().unwrap();
    assert!(message.contains("could not read") && message.contains("tool_name"), "{message}");
    assert!(events(&effects).iter().any(|event| matches!(
        event,
        SessionEvent::PermissionDecided { behavior: Behavior::Deny, .. }
    )));
    // Any other unreadable control request gets an error response.
    let effects = drifted(
        &mut core,
        r#"{"type":"control_request","request_id":"r-hook","request":{"subtype":"hook_callback","callback_id":7}}"#,
    );
    let written = sent(&effects);
    assert_eq!(
        written[0]["response"]["response"]["hookSpecificOutput"]["permissionDecision"], "deny",
        "an unreadable hook callback may be the policy's: it fails closed: {written:?}"
    );
    assert_eq!(written[0]["response"]["request_id"], "r-hook");
    // A PreToolUse call whose tool the policy cannot name is refused too.
    let effects = core.on_line(line(
        r#"{"type":"control_request","request_id":"r-anon","request":{"subtype":"hook_callback","callback_id":"switchboard-policy","input":{"hook_event_name":"PreToolUse","tool_input":{}}}}"#,
    ));
    let written = sent(&effects);
    assert_eq!(
        written[0]["response"]["response"]["hookSpecificOutput"]["permissionDecision"],
        "deny"
    );
    // Another unreadable control request gets an error response.
    let effects = drifted(
        &mut core,
        r#"{"type":"control_request","request_id":"r-other","request":{"subtype":"mcp_message","server_name":7}}"#,
    );
    let written = sent(&effects);
    assert_eq!(written[0]["response"]["subtype"], "error", "{written:?}");
    // A permission request that is not UTF-8 is a bad line, and is still denied.
    let mut bytes = br#"{"type":"control_request","request_id":"r-bytes","request":{"subtype":"can_use_tool","tool_name":"Bash","input":{"command":"echo "#.to_vec();
    bytes.extend_from_slice(b"\xff\"}}}");
    let effects = bad_line(&mut core, &bytes);
    assert!(events(&effects).iter().any(|event| matches!(event, SessionEvent::BadLine(_))));
    let written = sent(&effects);
    assert_eq!(written[0]["response"]["request_id"], "r-bytes", "{effects:?}");
    assert_eq!(written[0]["response"]["response"]["behavior"], "deny");
    // A line that is not a control request is only reported.
    let effects = bad_line(&mut core, b"not json");
    assert!(sent(&effects).is_empty());
}

#[test]
fn a_result_of_another_shape_still_ends_the_turn() {
    let mut core = core("");
    started(&mut core);
    core.send_user(UserMessage::prompt("go"));
    assert_eq!(core.state(), SessionState::Working);
    // Nothing but the routing fields fits: the turn ends all the same.
    let effects = drifted(
        &mut core,
        r#"{"type":"result","subtype":"success","is_error":0,"result":"ok","duration_ms":"1s","num_turns":{},"session_id":"s-1"}"#,
    );
    assert_eq!(core.state(), SessionState::Idle, "{effects:?}");
    assert_eq!(core.snapshot().turns, 1);
    assert!(events(&effects).iter().any(|event| matches!(event, SessionEvent::Line(_))));
    assert!(!events(&effects).iter().any(|event| matches!(event, SessionEvent::BadLine(_))));
}

#[test]
fn an_unreadable_answer_fails_the_request_it_answers() {
    let mut core = core("");
    started(&mut core);
    let (request_id, _) =
        core.control(ControlRequestPayload::Interrupt(InterruptRequest::default()));
    let effects = drifted(
        &mut core,
        &format!(
            r#"{{"type":"control_response","response":{{"subtype":"error","request_id":"{request_id}","error":{{"code":1}}}}}}"#
        ),
    );
    match done(&effects).as_slice() {
        [(id, Err(ControlFailure::Refused { error, .. }))] => {
            assert_eq!(**id, request_id);
            assert!(error.contains("could not read the answer"), "{error}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_unreadable_answer_to_a_resync_ends_no_pending_request() {
    let mut core = core("");
    started(&mut core);
    core.on_line(can_use_tool("r1", "touch x && ls"));
    assert_eq!(core.snapshot().pending_permissions.len(), 1);
    core.on_disconnected();
    let effects = core.on_connected(true);
    let initialize = sent(&effects)[0]["request_id"].as_str().unwrap().to_owned();
    // The answer does not fit (`error` is not a string): it says nothing about what the CLI
    // still waits for, so the person is still asked.
    let effects = drifted(
        &mut core,
        &json!({"type":"control_response","response":{"subtype":"error","request_id":initialize,"error":{"code":1}}}).to_string(),
    );
    assert!(
        !events(&effects)
            .iter()
            .any(|event| matches!(event, SessionEvent::PermissionDecided { .. })),
        "{effects:?}"
    );
    assert_eq!(core.snapshot().pending_permissions.len(), 1);
}

#[test]
fn a_transcript_session_works_from_a_typed_prompt_to_its_turns_end_and_takes_only_interrupts() {
    let mut core = core("");
    core.set_transcript();
    started(&mut core);
    // A prompt the person typed in the terminal: the session works.
    core.on_line(line(
        r#"{"type":"user","message":{"role":"user","content":"LIST"},"uuid":"u1","sessionId":"s"}"#,
    ));
    assert_eq!(core.state(), SessionState::Working);
    core.on_line(line(
        r#"{"type":"system","subtype":"turn_duration","durationMs":449,"uuid":"x"}"#,
    ));
    assert_eq!(core.state(), SessionState::Idle);
    assert_eq!(core.snapshot().turns, 1);
    // Ours, then an interruption ends it.
    let effects = core.send_user(UserMessage::prompt("SLOW"));
    assert_eq!(sent(&effects).len(), 1);
    assert_eq!(core.state(), SessionState::Idle, "working once the CLI takes it");
    assert_eq!(core.snapshot().queued_turns, 1);
    core.on_line(line(r#"{"type":"user","message":{"role":"user","content":"SLOW"},"uuid":"u9","sessionId":"s2"}"#));
    assert_eq!(core.state(), SessionState::Working);
    assert_eq!(core.snapshot().queued_turns, 0);
    assert_eq!(core.snapshot().claude_session_id.as_deref(), Some("s2"), "from sessionId");
    let (_, effects) = core.control(ControlRequestPayload::Interrupt(InterruptRequest::default()));
    assert_eq!(sent(&effects)[0]["request"]["subtype"], "interrupt");
    assert!(matches!(done(&effects)[..], [(_, Ok(_))]), "an interrupt is done once typed");
    core.on_line(line(r#"{"type":"user","message":{"role":"user","content":[{"type":"text","text":"[Request interrupted by user]"}]},"uuid":"u2"}"#));
    assert_eq!(core.state(), SessionState::Idle);
    // Anything else is refused, and nothing is written.
    let request = SetPermissionModeRequest {
        mode: PermissionMode::Plan,
        ..SetPermissionModeRequest::default()
    };
    let (_, effects) = core.control(ControlRequestPayload::SetPermissionMode(request));
    assert!(sent(&effects).is_empty());
    assert!(
        matches!(done(&effects)[..], [(_, Err(ControlFailure::Refused { error, .. }))] if error.contains("terminal")),
        "{effects:?}"
    );
}

#[test]
fn a_result_lost_with_a_socket_does_not_leave_the_session_working_for_good() {
    let mut core = core("");
    started(&mut core);
    let prompt = |uuid: &str| {
        let mut message = UserMessage::prompt(uuid.to_uppercase());
        message.uuid = Some(uuid.to_owned());
        message
    };
    let echo = |uuid: &str| {
        line(&json!({"type":"user","message":{"role":"user","content":uuid.to_uppercase()},"session_id":"s","parent_tool_use_id":null,"uuid":uuid,"isReplay":true}).to_string())
    };
    let result = |text: &str| {
        line(&json!({"type":"result","subtype":"success","is_error":false,"result":text,"session_id":"s"}).to_string())
    };
    // Without a reconnect, results count turns: one still queued keeps the session working.
    core.send_user(prompt("a"));
    core.send_user(prompt("b"));
    core.on_line(echo("a"));
    core.on_line(echo("b"));
    core.on_line(result("a"));
    assert_eq!(core.state(), SessionState::Working);
    core.on_line(result("b"));
    assert_eq!(core.state(), SessionState::Idle);
    // The socket drops mid-turn and the CLI (2.1.37) never sends that turn's result: once it
    // has every prompt and ends a turn, nothing else is to run.
    core.send_user(prompt("one"));
    core.send_user(prompt("two"));
    core.on_disconnected();
    core.on_connected(true);
    core.on_line(echo("one"));
    core.on_line(echo("two"));
    core.on_line(result("second"));
    assert_eq!(core.state(), SessionState::Idle, "{:?}", core.snapshot());
}

/// A queued prompt dropped (2.1.330's `command_lifecycle` `cancelled`) has no turn: the
/// session is idle once the running turn ends, and a `cancelled` for a prompt that is not
/// ours, or already ran, changes nothing.
#[test]
fn a_cancelled_prompt_is_no_turn_to_wait_for() {
    let mut core = core("");
    started(&mut core);
    core.send_user(UserMessage::prompt("first").with_uuid("u-1"));
    core.send_user(UserMessage::prompt("second").with_uuid("u-2"));
    assert_eq!(core.snapshot().queued_turns, 2);
    let cancelled = |uuid: &str| {
        line(&json!({"type":"command_lifecycle","command_uuid":uuid,"state":"cancelled","uuid":"x","session_id":"s"}).to_string())
    };
    core.on_line(cancelled("not-ours"));
    assert_eq!(core.snapshot().queued_turns, 2);
    core.on_line(cancelled("u-2"));
    core.on_line(cancelled("u-2"));
    assert_eq!(core.snapshot().queued_turns, 1, "once");
    assert_eq!(core.state(), SessionState::Working, "the first turn still runs");
    core.on_line(line(
        r#"{"type":"result","subtype":"success","is_error":false,"duration_ms":1,"result":"done","session_id":"s","total_cost_usd":0.01}"#,
    ));
    assert_eq!(core.state(), SessionState::Idle);
}

#[test]
fn a_cancelled_prompt_that_had_started_is_not_one_turn_less() {
    let mut core = core("");
    started(&mut core);
    core.send_user(UserMessage::prompt("first").with_uuid("u-1"));
    core.send_user(UserMessage::prompt("steer").with_uuid("u-2"));
    let lifecycle = |uuid: &str, state: &str| {
        line(&json!({"type":"command_lifecycle","command_uuid":uuid,"state":state,"uuid":"x","session_id":"s"}).to_string())
    };
    core.on_line(lifecycle("u-1", "started"));
    core.on_line(line(
        r#"{"type":"result","subtype":"success","is_error":false,"duration_ms":1,"result":"","session_id":"s","total_cost_usd":0.01}"#,
    ));
    core.on_line(lifecycle("u-1", "cancelled"));
    assert_eq!(core.snapshot().queued_turns, 1, "the steering prompt's turn is still to come");
    assert_eq!(core.state(), SessionState::Working);
}

#[test]
fn a_prompt_folded_into_the_running_turn_leaves_no_turn_to_wait_for() {
    // Found with 2.1.100 to 2.1.332: a prompt sent while a turn calls tools is taken into that
    // turn; one result ends both, and the CLI says it is idle.
    let mut core = core("");
    started(&mut core);
    core.send_user(UserMessage::prompt("first").with_uuid("u-1"));
    core.send_user(UserMessage::prompt("also this").with_uuid("u-2"));
    assert_eq!(core.snapshot().queued_turns, 2);
    core.on_line(line(
        r#"{"type":"result","subtype":"success","is_error":false,"duration_ms":1,"result":"done","session_id":"s","total_cost_usd":0.01}"#,
    ));
    assert_eq!(core.state(), SessionState::Working, "the CLI has not said it is done");
    core.on_line(line(
        r#"{"type":"system","subtype":"session_state_changed","state":"idle","uuid":"x","session_id":"s"}"#,
    ));
    assert_eq!(core.snapshot().queued_turns, 0);
    assert_eq!(core.state(), SessionState::Idle);
    // A prompt it was never given is still to come.
    let mut waiting = self::core("");
    waiting.on_started(Some(ControlRequestPayload::Initialize(Default::default())));
    waiting.send_user(UserMessage::prompt("before initialize").with_uuid("u-3"));
    waiting.on_line(line(
        r#"{"type":"system","subtype":"session_state_changed","state":"idle","uuid":"x","session_id":"s"}"#,
    ));
    assert_eq!(waiting.snapshot().queued_turns, 1);
}

/// An MCP server's question (2.1.100 on) waits for a person, whatever the policy allows, and
/// is never one tap or "always": an answer that does not fit its form is refused and it still
/// waits; a fitting one is sent as `accept` with the content; one nobody answers is declined.
#[test]
fn an_mcp_servers_question_waits_for_a_person_and_is_answered_or_declined() {
    let mut core = core("[permissions]\ndefault = \"allow\"\nallow = [\"*\"]");
    started(&mut core);
    let ask = |id: &str| {
        line(&json!({"type":"control_request","request_id":id,"request":{"subtype":"elicitation",
            "mcp_server_name":"asker","message":"Which colour?","mode":"form",
            "requested_schema":{"type":"object","properties":{"colour":{"type":"string","enum":["red","blue"]},"count":{"type":"integer"}},"required":["colour"]},
            "property_order":["colour","count"]}}).to_string())
    };
    let effects = core.on_line(ask("e1"));
    assert!(sent(&effects).is_empty(), "the policy's allow answers nothing: {effects:?}");
    let pending = &core.snapshot().pending_permissions[0];
    assert_eq!(pending.tool_name, crate::ELICITATION_TOOL);
    assert_eq!(pending.input["server"], "asker");
    assert_eq!(pending.input["message"], "Which colour?");
    assert!(
        pending.hints.person_only && pending.hints.no_standing_rule && pending.hints.default_to_no
    );
    assert_eq!(core.state(), SessionState::AwaitingPermission);
    for (content, why) in [
        (json!({"colour": "green"}), "colour must be one of"),
        (json!({"count": 2}), "colour is required"),
        (json!({"colour": "red", "count": "two"}), "count must be a integer"),
        (json!({"colour": "red", "secret": 1}), "no field \"secret\""),
    ] {
        let answer = PermissionAnswer { updated_input: Some(content), ..PermissionAnswer::allow() };
        let error = core.answer_permission("e1", answer, "alice").unwrap_err();
        assert!(error.to_string().contains(why), "{error}");
    }
    assert_eq!(core.snapshot().pending_permissions.len(), 1, "still waits");
    let answer = PermissionAnswer {
        updated_input: Some(json!({"colour": "blue", "count": 3})),
        ..PermissionAnswer::allow()
    };
    let effects = core.answer_permission("e1", answer, "alice").unwrap();
    assert_eq!(
        sent(&effects),
        [json!({"type":"control_response","response":{"subtype":"success","request_id":"e1",
            "response":{"action":"accept","content":{"colour":"blue","count":3}}}})]
    );
    assert!(core.snapshot().pending_permissions.is_empty());
    assert_eq!(core.state(), SessionState::Working);

    // Nobody answers: declined, never left pending.
    core.on_line(ask("e2"));
    let effects = core.on_timer(Timer::Permission("e2".into()));
    assert_eq!(
        sent(&effects),
        [json!({"type":"control_response","response":{"subtype":"success","request_id":"e2",
            "response":{"action":"decline"}}})]
    );
    // A person declines.
    core.on_line(ask("e3"));
    let effects = core.answer_permission("e3", PermissionAnswer::deny("no"), "bob").unwrap();
    assert_eq!(sent(&effects)[0]["response"]["response"], json!({"action":"decline"}));
    // A question too large to hand a person is declined at once.
    let huge = "x".repeat(crate::core::elicitation::MAX_QUESTION_BYTES);
    let effects = core.on_line(line(
        &json!({"type":"control_request","request_id":"e4","request":{"subtype":"elicitation",
            "mcp_server_name":"asker","message":huge,"mode":"form"}})
        .to_string(),
    ));
    assert_eq!(sent(&effects)[0]["response"]["response"], json!({"action":"decline"}));
    assert!(core.snapshot().pending_permissions.is_empty(), "nothing waits");
}

/// A core whose policy parks after `park_after_secs = 5` (for a day at most), started, spoken to by 2.1.330.
fn parking(version: &str, parkable: bool) -> SessionCore {
    let mut core = core(
        "[permissions]\nask = [\"Bash\"]\nask_timeout_secs = 60\npark_after_secs = 5\npark_expires_secs = 86400\n",
    );
    if parkable {
        core.set_parkable();
    }
    started(&mut core);
    let init =
        json!({"type":"system","subtype":"init","session_id":"s","claude_code_version":version});
    core.on_line(line(&init.to_string()));
    core
}

fn policy_hook(request_id: &str, command: &str) -> Received {
    line(&json!({"type":"control_request","request_id":request_id,"request":{"subtype":"hook_callback",
        "callback_id":POLICY_HOOK_ID,"tool_use_id":"toolu_9",
        "input":{"hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":command},"tool_use_id":"toolu_9"}}}).to_string())
}

fn decision_of(effects: &[Effect]) -> Option<String> {
    sent(effects).iter().find_map(|line| {
        line["response"]["response"]["hookSpecificOutput"]["permissionDecision"]
            .as_str()
            .map(str::to_owned)
    })
}

#[test]
fn an_unanswered_ask_is_parked_at_the_hook_and_its_answer_applies_to_the_resumed_call() {
    // Held at the hook: nothing is answered yet, a person is asked, a park timer runs.
    let mut core = parking("2.1.330", true);
    let effects = core.on_line(policy_hook("h1", "make deploy"));
    assert_eq!(decision_of(&effects), None, "held: {effects:?}");
    assert!(effects.iter().any(
        |e| matches!(e, Effect::StartTimer(Timer::Park(id), d) if id == "h1" && d.as_secs() == 5)
    ));
    let asked = events(&effects).into_iter().find_map(|event| match event {
        SessionEvent::PermissionRequested(pending) => Some(pending.clone()),
        _ => None,
    });
    let asked = asked.expect("asked");
    assert!(asked.hints.no_standing_rule, "no \"always\" through a hook");
    // Parked: the CLI is told to defer; the request is told again, parked; an answer now is
    // the daemon's to route (it resumes the session).
    let effects = core.on_timer(Timer::Park("h1".into()));
    assert_eq!(decision_of(&effects).as_deref(), Some("defer"));
    let parked = events(&effects).into_iter().find_map(|event| match event {
        SessionEvent::PermissionRequested(pending) if pending.parked_at_ms.is_some() => {
            Some(pending.clone())
        }
        _ => None,
    });
    let parked = parked.expect("told again, parked");
    let parked_at = parked.parked_at_ms.unwrap();
    assert_eq!(parked.park_expires_at_ms, Some(parked_at + 86_400_000), "the policy's bound");
    assert_eq!(parked.expires_ms(), parked_at + 86_400_000, "and its links'");
    assert!(core.on_timer(Timer::Permission("h1".into())).is_empty(), "no timeout once parked");
    let refused = core.answer_permission("h1", PermissionAnswer::allow(), "alice").unwrap_err();
    assert!(matches!(refused, AnswerError::Parked(_)), "{refused:?}");

    // The resumed run: the same call is asked about again, and the person's answer is its.
    let answered = ParkedAnswer {
        pending: parked.clone(),
        answer: PermissionAnswer::allow(),
        who: "alice".into(),
    };
    let mut resumed = parking("2.1.330", true);
    resumed.set_parked_answers(vec![answered.clone()]);
    let effects = resumed.on_line(policy_hook("h2", "make deploy"));
    assert_eq!(decision_of(&effects).as_deref(), Some("allow"));
    let decided = events(&effects).into_iter().any(|event| matches!(event,
        SessionEvent::PermissionDecided { request_id, by: DecidedBy::Person { who }, behavior: Behavior::Allow, .. }
            if request_id == "h1" && who == "alice"));
    assert!(decided, "{effects:?}");
    assert_eq!(resumed.state(), SessionState::Working, "the deferred turn goes on");
    let again = resumed.answer_permission("h1", PermissionAnswer::allow(), "bob").unwrap_err();
    assert!(matches!(again, AnswerError::AlreadyAnswered(_)), "{again:?}");

    // Another input than the one approved: not covered by the answer, asked again.
    let mut changed = parking("2.1.330", true);
    changed.set_parked_answers(vec![answered.clone()]);
    let effects = changed.on_line(policy_hook("h3", "make deploy --force"));
    assert_eq!(decision_of(&effects), None, "held again, not allowed: {effects:?}");

    // A CLI that ends before it asks: the request waits on, parked.
    let mut died = parking("2.1.330", true);
    died.set_parked_answers(vec![answered]);
    let effects = died.on_exit(Some(1), None, "the CLI crashed".into());
    assert!(events(&effects).iter().any(|event| matches!(event,
        SessionEvent::PermissionRequested(pending) if pending.request_id == "h1" && pending.parked_at_ms.is_some())));
}

#[test]
fn nothing_parks_where_no_one_could_resume_it() {
    // `switchboard run` (not parkable), and a CLI older than defer: the hook says ask at once.
    for (version, parkable) in [("2.1.330", false), ("2.1.37", true)] {
        let mut core = parking(version, parkable);
        let effects = core.on_line(policy_hook("h1", "make deploy"));
        assert_eq!(decision_of(&effects).as_deref(), Some("ask"), "{version} {parkable}");
    }
}

/// A terminal's session whose policy asks about `touch`.
fn terminal_core() -> SessionCore {
    let mut core = core("[permissions]\nask = [\"Bash(touch:*)\"]\n");
    core.set_transcript();
    started(&mut core);
    core
}

/// The CLI's `tool_use`, its `PreToolUse` hook (the policy's), and its `PermissionRequest`
/// hook (the dialog it shows), as a terminal's session takes them: the request it asks.
fn dialog_shown(core: &mut SessionCore, tool_use_id: &str, command: &str) -> PendingPermission {
    core.on_line(line(&json!({"type":"assistant","message":{"id":"m","role":"assistant","content":[
        {"type":"tool_use","id":tool_use_id,"name":"Bash","input":{"command":command}}]},"uuid":"a"}).to_string()));
    let effects = core.on_line(line(&json!({"type":"control_request","request_id":format!("pre-{tool_use_id}"),
        "request":{"subtype":"hook_callback","callback_id":POLICY_HOOK_ID,"tool_use_id":tool_use_id,
        "input":{"hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":command},"tool_use_id":tool_use_id}}}).to_string()));
    let verdict = &sent(&effects)[0]["response"]["response"]["hookSpecificOutput"];
    assert_eq!(verdict["permissionDecision"], "ask", "the CLI shows its dialog: {effects:?}");
    // The dialog's hook has no tool_use_id: the call is found by its tool and input.
    let effects = core.on_line(line(&json!({"type":"control_request","request_id":format!("dialog-{tool_use_id}"),
        "request":{"subtype":"hook_callback","callback_id":PERMISSION_HOOK_ID,
        "input":{"hook_event_name":"PermissionRequest","tool_name":"Bash","tool_input":{"command":command},
                 "permission_suggestions":[]}}}).to_string()));
    events(&effects)
        .into_iter()
        .find_map(|event| match event {
            SessionEvent::PermissionRequested(pending) => Some(pending.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("asked: {effects:?}"))
}

fn tool_result(tool_use_id: &str, content: &str, is_error: bool) -> Received {
    line(
        &json!({"type":"user","message":{"role":"user","content":[{"type":"tool_result",
        "tool_use_id":tool_use_id,"content":content,"is_error":is_error}]},"uuid":"r"})
        .to_string(),
    )
}

fn refused_in_the_terminal(tool_use_id: &str) -> Received {
    tool_result(
        tool_use_id,
        "The user doesn't want to proceed with this tool use. The tool use was rejected.",
        true,
    )
}

fn hook_decision(tool_use_id: &str, decision: &str) -> Received {
    line(&json!({"type":"attachment","attachment":{"type":"hook_permission_decision","decision":decision,
        "toolUseID":tool_use_id,"hookEvent":"PermissionRequest"},"uuid":"d"}).to_string())
}

fn decisions(effects: &[Effect]) -> Vec<(Behavior, DecidedBy, Option<String>)> {
    events(effects)
        .into_iter()
        .filter_map(|event| match event {
            SessionEvent::PermissionDecided { behavior, by, tool_use_id, .. } => {
                Some((*behavior, by.clone(), tool_use_id.clone()))
            }
            _ => None,
        })
        .collect()
}

#[test]
fn a_terminals_dialog_answered_from_afar_is_logged_once_the_cli_took_that_answer() {
    let mut core = terminal_core();
    let asked = dialog_shown(&mut core, "toolu_1", "touch a");
    assert_eq!(asked.tool_use_id.as_deref(), Some("toolu_1"));
    let effects =
        core.answer_permission(&asked.request_id, PermissionAnswer::allow(), "ana").unwrap();
    let answer = &sent(&effects)[0]["response"]["response"]["hookSpecificOutput"];
    assert_eq!(answer["hookEventName"], "PermissionRequest");
    assert_eq!(answer["decision"]["behavior"], "allow");
    assert!(decisions(&effects).is_empty(), "not before the CLI says it took it: {effects:?}");
    assert!(core.snapshot().pending_permissions.is_empty());
    assert!(matches!(
        core.answer_permission(&asked.request_id, PermissionAnswer::allow(), "bo"),
        Err(AnswerError::AlreadyAnswered(_))
    ));
    let effects = core.on_line(hook_decision("toolu_1", "allow"));
    let who = DecidedBy::Person { who: "ana".into() };
    assert_eq!(decisions(&effects), [(Behavior::Allow, who, Some("toolu_1".into()))]);
    let effects = core.on_line(tool_result("toolu_1", "(Bash completed with no output)", false));
    assert!(decisions(&effects).is_empty(), "decided once: {effects:?}");
}

#[test]
fn a_terminals_dialog_answered_there_first_is_the_terminals_decision() {
    // Refused there with Esc: the CLI drops its hook, then writes the refusal.
    let mut core = terminal_core();
    let asked = dialog_shown(&mut core, "toolu_1", "touch a");
    let cancel = json!({"type":"control_cancel_request","request_id":asked.request_id}).to_string();
    let effects = core.on_line(line(&cancel));
    assert!(decisions(&effects).is_empty(), "the result says how: {effects:?}");
    assert!(core.snapshot().pending_permissions.is_empty());
    let effects = core.on_line(refused_in_the_terminal("toolu_1"));
    assert_eq!(
        decisions(&effects),
        [(Behavior::Deny, DecidedBy::Terminal, Some("toolu_1".into()))]
    );

    // Approved there, its hook still waiting: the result ends the wait (the hook's answer is
    // moot), and a later answer from afar is told it was answered.
    let asked = dialog_shown(&mut core, "toolu_2", "touch b");
    let effects = core.on_line(tool_result("toolu_2", "(Bash completed with no output)", false));
    assert_eq!(
        decisions(&effects),
        [(Behavior::Allow, DecidedBy::Terminal, Some("toolu_2".into()))]
    );
    assert_eq!(sent(&effects)[0]["response"]["request_id"], asked.request_id.as_str());
    assert_eq!(core.state(), SessionState::Working);
    assert!(matches!(
        core.answer_permission(&asked.request_id, PermissionAnswer::deny("no"), "ana"),
        Err(AnswerError::AlreadyAnswered(_))
    ));

    // Answered afar after the terminal approved (the tool ran while it waited): the CLI never
    // took the answer from afar, so the terminal's is the decision.
    let asked = dialog_shown(&mut core, "toolu_3", "touch c");
    core.answer_permission(&asked.request_id, PermissionAnswer::deny("no"), "ana").unwrap();
    let effects = core.on_line(tool_result("toolu_3", "(Bash completed with no output)", false));
    assert_eq!(
        decisions(&effects),
        [(Behavior::Allow, DecidedBy::Terminal, Some("toolu_3".into()))]
    );
}

#[test]
fn a_terminals_dialog_whose_fate_was_never_told_is_logged_when_the_cli_ends() {
    let mut core = terminal_core();
    let asked = dialog_shown(&mut core, "toolu_1", "touch a");
    core.answer_permission(&asked.request_id, PermissionAnswer::deny("no"), "ana").unwrap();
    let other = dialog_shown(&mut core, "toolu_2", "touch b");
    let cancel = json!({"type":"control_cancel_request","request_id":other.request_id}).to_string();
    core.on_line(line(&cancel));
    let effects = core.on_exit(Some(0), None, "exited".into());
    let who = DecidedBy::Person { who: "ana".into() };
    assert_eq!(
        decisions(&effects),
        [
            (Behavior::Deny, who, Some("toolu_1".into())),
            (Behavior::Deny, DecidedBy::Cancelled, Some("toolu_2".into())),
        ]
    );
}

#[test]
fn a_terminals_dialog_the_policy_decides_is_answered_at_once() {
    // No rule of the policy's asked; the CLI's own rules did: the policy's default answers.
    let mut core = core("[permissions]\ndefault = \"deny\"\n");
    core.set_transcript();
    started(&mut core);
    let effects = core.on_line(line(&json!({"type":"control_request","request_id":"d1",
        "request":{"subtype":"hook_callback","callback_id":PERMISSION_HOOK_ID,
        "input":{"hook_event_name":"PermissionRequest","tool_name":"Write","tool_input":{"file_path":"/x"}}}}).to_string()));
    let answer = &sent(&effects)[0]["response"]["response"]["hookSpecificOutput"]["decision"];
    assert_eq!(answer["behavior"], "deny", "{effects:?}");
    assert!(matches!(decisions(&effects)[..], [(Behavior::Deny, DecidedBy::Policy { .. }, None)]));
}

/// The `PermissionRequest` hook's callback for a dialog about `command`.
fn dialog_hook(request_id: &str, command: &str) -> Received {
    line(&json!({"type":"control_request","request_id":request_id,
        "request":{"subtype":"hook_callback","callback_id":PERMISSION_HOOK_ID,
        "input":{"hook_event_name":"PermissionRequest","tool_name":"Bash","tool_input":{"command":command}}}}).to_string())
}

#[test]
fn a_terminals_dialog_is_never_closed_by_a_policys_allow_and_ends_as_on_timeout_says() {
    // The person's own rules made the CLI ask: the policy's allow does not answer for them.
    let mut core = core("[permissions]\ndefault = \"allow\"\n");
    core.set_transcript();
    started(&mut core);
    let effects = core.on_line(dialog_hook("d1", "touch a"));
    assert!(sent(&effects).is_empty(), "it waits for a person: {effects:?}");
    assert_eq!(core.snapshot().pending_permissions.len(), 1);

    // Nobody answers: denied as the policy's on_timeout says, once the CLI took it.
    let mut core = terminal_core();
    let asked = dialog_shown(&mut core, "toolu_1", "touch a");
    let effects = core.on_timer(Timer::Permission(asked.request_id.clone()));
    let answer = &sent(&effects)[0]["response"]["response"]["hookSpecificOutput"]["decision"];
    assert_eq!(answer["behavior"], "deny", "{effects:?}");
    assert!(decisions(&effects).is_empty());
    let effects = core.on_line(hook_decision("toolu_1", "deny"));
    assert_eq!(decisions(&effects), [(Behavior::Deny, DecidedBy::Timeout, Some("toolu_1".into()))]);

    // ... unless the terminal had approved it first (its tool still ran when the time came).
    let asked = dialog_shown(&mut core, "toolu_2", "touch b");
    core.on_timer(Timer::Permission(asked.request_id.clone()));
    let effects = core.on_line(tool_result("toolu_2", "(Bash completed with no output)", false));
    assert_eq!(
        decisions(&effects),
        [(Behavior::Allow, DecidedBy::Terminal, Some("toolu_2".into()))]
    );
}

#[test]
fn a_terminals_dialog_another_hook_answers_or_an_esc_interrupts_is_logged_as_it_went() {
    // Another of the person's PermissionRequest hooks answered first.
    let mut core = terminal_core();
    let asked = dialog_shown(&mut core, "toolu_1", "touch a");
    let effects = core.on_line(hook_decision("toolu_1", "allow"));
    assert_eq!(decisions(&effects), [(Behavior::Allow, DecidedBy::Cli, Some("toolu_1".into()))]);
    assert_eq!(sent(&effects)[0]["response"]["request_id"], asked.request_id.as_str());
    assert!(core.snapshot().pending_permissions.is_empty());
    // An answer afar that another hook's overtook: the CLI's is logged.
    let asked = dialog_shown(&mut core, "toolu_2", "touch b");
    core.answer_permission(&asked.request_id, PermissionAnswer::deny("no"), "ana").unwrap();
    let effects = core.on_line(hook_decision("toolu_2", "allow"));
    assert_eq!(decisions(&effects), [(Behavior::Allow, DecidedBy::Cli, Some("toolu_2".into()))]);
    // Esc drops the hook, and the turn's interruption is the call's result: refused there.
    let asked = dialog_shown(&mut core, "toolu_3", "touch c");
    let cancel = json!({"type":"control_cancel_request","request_id":asked.request_id}).to_string();
    core.on_line(line(&cancel));
    let effects =
        core.on_line(tool_result("toolu_3", "[Request interrupted by user for tool use]", true));
    assert_eq!(
        decisions(&effects),
        [(Behavior::Deny, DecidedBy::Terminal, Some("toolu_3".into()))]
    );
}

#[test]
fn a_terminals_dialog_is_about_the_newest_identical_call_and_never_a_subagents() {
    let mut core = terminal_core();
    // An identical call the CLI allowed without a dialog runs already; the dialog is the new
    // one's.
    core.on_line(line(&json!({"type":"assistant","message":{"id":"m0","role":"assistant","content":[
        {"type":"tool_use","id":"toolu_0","name":"Bash","input":{"command":"touch a"}}]},"uuid":"a0"}).to_string()));
    let asked = dialog_shown(&mut core, "toolu_1", "touch a");
    assert_eq!(asked.tool_use_id.as_deref(), Some("toolu_1"));
    let again = dialog_shown(&mut core, "toolu_2", "touch a");
    assert_eq!(again.tool_use_id.as_deref(), Some("toolu_2"));

    // A subagent's call (its hook names the agent): the dialog is the terminal's alone.
    let effects = core.on_line(line(
        &json!({"type":"control_request","request_id":"pre-sub",
        "request":{"subtype":"hook_callback","callback_id":POLICY_HOOK_ID,"tool_use_id":"toolu_9",
        "input":{"hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":"ls"},
                 "tool_use_id":"toolu_9","agent_id":"agent-1"}}})
        .to_string(),
    ));
    assert_eq!(sent(&effects)[0]["response"]["response"], json!({}), "no rule: the CLI's");
    let effects = core.on_line(dialog_hook("d-sub", "ls"));
    assert_eq!(sent(&effects)[0]["response"]["response"], json!({}), "{effects:?}");
    assert_eq!(core.snapshot().pending_permissions.len(), 2, "the two before, no third");
}

#[test]
fn a_parked_answer_asked_about_by_can_use_tool_with_another_input_is_ended_and_asked_afresh() {
    let mut core = parking("2.1.330", true);
    let pending = PendingPermission {
        request_id: "h1".into(),
        tool_name: "Bash".into(),
        input: json!({"command": "make deploy"}),
        tool_use_id: Some("toolu_1".into()),
        suggestions: Vec::new(),
        reason: String::new(),
        agent_id: None,
        timeout_secs: 60,
        asked_at_ms: 1,
        always_allows: String::new(),
        started_by: None,
        origin: None,
        rule: None,
        cli_reason: None,
        hints: Default::default(),
        parked_at_ms: Some(2),
        park_expires_at_ms: None,
    };
    let answer = PermissionAnswer::allow();
    core.set_parked_answers(vec![ParkedAnswer { pending, answer, who: "ana".into() }]);
    // The resumed CLI asks through can_use_tool, about another command for the same call.
    let effects = core.on_line(can_use_tool("c1", "make deploy --force"));
    let ended = events(&effects).into_iter().find_map(|event| match event {
        SessionEvent::PermissionDecided { request_id, by, .. } if request_id == "h1" => Some(by),
        _ => None,
    });
    assert_eq!(ended, Some(&DecidedBy::Cancelled), "the parked request ends, logged: {effects:?}");
    assert!(sent(&effects).is_empty(), "not answered with the parked approval");
    assert_eq!(core.snapshot().pending_permissions.len(), 1, "asked afresh");
}
