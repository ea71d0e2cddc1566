//! Messages we build serialize exactly as the CLI expects: compared with the `out` lines the
//! capture client sent and the CLI accepted.

use serde_json::json;
use switchboard_protocol::control::{
    session_grants, ControlRequest, HookMatcher, HookOutput, InterruptRequest, McpStatusRequest,
    SetMaxThinkingTokensRequest, SetModelRequest, SetPermissionModeRequest,
};
use switchboard_protocol::permission::ask_user_question_input;
use switchboard_protocol::{
    encode_line, ControlRequestPayload, ControlResponse, InitializeRequest, Message,
    PermissionMode, PermissionResult, PermissionUpdate, UserMessage,
};

use crate::fixtures::{fixture_files, messages};

/// Every `out` line the captures sent, as text.
fn sent_lines() -> Vec<String> {
    fixture_files()
        .iter()
        .flat_map(|path| messages(path))
        .filter(|(dir, _)| dir == "out")
        .map(|(_, raw)| raw)
        .collect()
}

fn assert_sent(built: Message) {
    let line = built.encode();
    assert!(sent_lines().contains(&line), "no capture sent exactly:\n{line}");
    assert_eq!(encode_line(&built), format!("{line}\n").into_bytes());
}

#[test]
fn prompts_match_the_captures() {
    assert_sent(UserMessage::prompt("Say hello").into());
}

#[test]
fn host_control_requests_match_the_captures() {
    assert_sent(ControlRequest::new("init-1", InitializeRequest::default()).into());
    assert_sent(ControlRequest::new("interrupt-1", InterruptRequest::new()).into());
    assert_sent(ControlRequest::new("mcp-status-1", McpStatusRequest::new()).into());
    assert_sent(
        ControlRequest::new(
            "mode-bypass",
            SetPermissionModeRequest {
                mode: PermissionMode::BypassPermissions,
                ..Default::default()
            },
        )
        .into(),
    );
    assert_sent(
        ControlRequest::new(
            "set-model-1",
            SetModelRequest {
                model: Some("claude-haiku-4-5-20251001".into()),
                ..Default::default()
            },
        )
        .into(),
    );
    assert_sent(
        ControlRequest::new(
            "think-1",
            SetMaxThinkingTokensRequest { max_thinking_tokens: Some(2048), ..Default::default() },
        )
        .into(),
    );
}

#[test]
fn initialize_with_hooks_matches_the_captures() {
    let matcher = |id: &str| HookMatcher {
        matcher: Some(Some("Bash".into())),
        hook_callback_ids: vec![id.into()],
        ..HookMatcher::default()
    };
    let initialize = InitializeRequest::default()
        .with_hook("PreToolUse", vec![matcher("pre_bash")])
        .with_hook("PostToolUse", vec![matcher("post_bash")]);
    assert_sent(ControlRequest::new("init-1", initialize).into());
}

#[test]
fn permission_answers_match_the_captures() {
    let input =
        json!({"command": "touch made-by-tool.txt && ls", "description": "create a file and list"});
    assert_sent(
        ControlResponse::permission(
            "c515eda3-d300-4924-9473-92686519913f",
            &PermissionResult::allow(input),
        )
        .into(),
    );
    assert_sent(
        ControlResponse::permission(
            "ee3d0e6d-7133-409f-a133-d5c42d6fab08",
            &PermissionResult::deny("Denied by the capture client: not allowed here."),
        )
        .into(),
    );
    assert_sent(
        ControlResponse::permission(
            "01e4d157-14c0-46db-8c97-44b9cd1ec96e",
            &PermissionResult::deny_and_interrupt("Denied and interrupted by the capture client."),
        )
        .into(),
    );
}

#[test]
fn hook_answers_match_the_captures() {
    assert_sent(
        ControlResponse::success(
            "df05c95c-4de6-4abc-88ba-090a337b8a5e",
            &HookOutput::pre_tool_use("allow", "capture hook: allow"),
        )
        .into(),
    );
}

#[test]
fn every_sent_line_re_encodes_to_the_same_value_through_the_typed_view() {
    for line in sent_lines() {
        let message = Message::decode(line.as_bytes()).unwrap();
        let original: serde_json::Value = serde_json::from_str(&line).unwrap();
        let typed: serde_json::Value = serde_json::from_str(&message.encode()).unwrap();
        assert_eq!(original, typed, "{line}");
    }
}

#[test]
fn session_grants_keep_rules_session_scoped_and_drop_mode_switches() {
    // The 2.1.330 suggestions of f2_echo_permission_suggestions: echoing them unchanged wrote
    // .claude/settings.local.json and flipped the session to acceptEdits.
    let line = r#"{"type":"control_request","request_id":"x","request":{"subtype":"can_use_tool","tool_name":"Bash","input":{"command":"touch repeated.txt && ls"},"permission_suggestions":[{"type":"addRules","rules":[{"toolName":"Bash","ruleContent":"touch repeated.txt && ls"}],"behavior":"allow","destination":"localSettings"},{"type":"addDirectories","directories":["/workspace/demo"],"destination":"session"},{"type":"setMode","mode":"acceptEdits","destination":"session"}],"tool_use_id":"t"}}"#;
    let Message::ControlRequest(request) = Message::decode(line.as_bytes()).unwrap() else {
        panic!()
    };
    let ControlRequestPayload::CanUseTool(can_use_tool) = request.request else { panic!() };
    let grants = session_grants(can_use_tool.permission_suggestions.as_deref().unwrap());
    assert_eq!(
        serde_json::to_value(&grants).unwrap(),
        json!([
            {"type":"addRules","rules":[{"toolName":"Bash","ruleContent":"touch repeated.txt && ls"}],"behavior":"allow","destination":"session"},
            {"type":"addDirectories","directories":["/workspace/demo"],"destination":"session"}
        ])
    );
    assert!(grants.iter().all(|grant| !matches!(grant, PermissionUpdate::SetMode(_))));
}

#[test]
fn ask_user_question_answer_adds_answers_to_the_input() {
    let input = json!({"questions": [{"question": "Which color?", "options": [{"label": "Red"}, {"label": "Blue"}]}]});
    let updated = ask_user_question_input(&input, [("Which color?", "Blue")]);
    assert_eq!(updated["answers"], json!({"Which color?": "Blue"}));
    assert_eq!(updated["questions"], input["questions"]);
}

#[test]
fn reinitialize_pending_requests_are_read_from_either_body() {
    // 2.1.37: in the "Already initialized" error; 2.1.330: in the success body.
    let pending = r#"{"type":"control_request","request_id":"p-1","request":{"subtype":"can_use_tool","tool_name":"Bash","input":{},"tool_use_id":"t"}}"#;
    for body in [
        format!(
            r#"{{"subtype":"error","request_id":"i-2","error":"Already initialized","pending_permission_requests":[{pending}]}}"#
        ),
        format!(
            r#"{{"subtype":"success","request_id":"i-2","response":{{}},"pending_permission_requests":[{pending}],"pending_user_dialog_requests":[]}}"#
        ),
    ] {
        let line = format!(r#"{{"type":"control_response","response":{body}}}"#);
        let Message::ControlResponse(response) = Message::decode(line.as_bytes()).unwrap() else {
            panic!()
        };
        let ids: Vec<&str> =
            response.pending_permission_requests().iter().map(|r| r.request_id.as_str()).collect();
        assert_eq!(ids, ["p-1"]);
    }
}
