//! The real CLI, both versions, against the fake API.

use serde_json::json;
use switchboard_protocol::stream::{Delta, StreamEvent};
use switchboard_protocol::Message;
use switchboard_session::{Behavior, DecidedBy, PermissionAnswer, SessionEvent, SessionState};
use switchboard_testkit::{CliVersion, Reply, Scenario};

use crate::both;
use crate::harness::{from_cli, Harness};

/// `touch FILE && ls`: a command both CLIs ask permission for.
fn touch_and_ls(file: &str) -> serde_json::Value {
    json!({"command": format!("touch {file} && ls"), "description": "create a file and list"})
}

both!(plain_answer_streams_text, |version: CliVersion| async move {
    let scenario = Scenario::new().reply(Reply::text("Hello there from the fake model."));
    let mut h = Harness::start(version, scenario, "").await;
    h.handle.send_text("Say hello").await.unwrap();
    let result = h.until_result().await;
    assert_eq!(result.result.as_deref(), Some("Hello there from the fake model."));
    assert!(!result.is_error);
    let deltas: String = h
        .log
        .iter()
        .filter_map(|event| match from_cli(event) {
            Some(Message::StreamEvent(event)) => match &event.event {
                StreamEvent::ContentBlockDelta(delta) => match &delta.delta {
                    Delta::Text(text) => Some(text.text.clone()),
                    _ => None,
                },
                _ => None,
            },
            _ => None,
        })
        .collect();
    assert_eq!(deltas, "Hello there from the fake model.", "text arrives as deltas");
    let snapshot = h.handle.snapshot();
    assert_eq!(snapshot.state, SessionState::Idle);
    assert!(snapshot.claude_session_id.is_some());
    assert_eq!(snapshot.turns, 1);
    assert!(!snapshot.slash_commands.is_empty(), "commands come from initialize");
    h.finish().await;
    assert_eq!(h.handle.snapshot().state, SessionState::Exited);
});

both!(tool_allowed_by_rule_runs, |version: CliVersion| async move {
    let scenario = Scenario::new()
        .reply(Reply::tool_use("Bash", touch_and_ls("made-by-rule.txt")).when_prompt("RUN"))
        .reply(Reply::text("Done.").when_tool_result());
    let mut h = Harness::start(
        version,
        scenario,
        "[permissions]\nallow = [\"Bash(touch:*)\", \"Bash(ls:*)\"]",
    )
    .await;
    h.handle.send_text("RUN it").await.unwrap();
    let result = h.until_result().await;
    assert!(!result.is_error, "{}", h.describe());
    assert!(h.sandbox.file("made-by-rule.txt").exists(), "the side effect happened");
    let decided = h.count(|event| {
        matches!(
            event,
            SessionEvent::PermissionDecided {
                behavior: Behavior::Allow,
                by: DecidedBy::Policy { rule: Some(_) },
                ..
            }
        )
    });
    assert_eq!(decided, 1, "{}", h.describe());
    assert_eq!(h.count(|event| matches!(event, SessionEvent::PermissionRequested(_))), 0);
    let tool_results =
        h.api.wait_for(|request| !request.tool_results().is_empty()).await.tool_results();
    assert!(tool_results[0].1.contains("made-by-rule.txt"), "{tool_results:?}");
    h.finish().await;
});

both!(tool_denied_by_rule_does_not_run, |version: CliVersion| async move {
    let scenario = Scenario::new()
        .reply(Reply::tool_use("Bash", touch_and_ls("must-not-exist.txt")).when_prompt("RUN"))
        .reply(Reply::text("Understood.").when_tool_result());
    let mut h = Harness::start(
        version,
        scenario,
        "[permissions]\ndeny = [\"Bash(touch:*)\"]\ndefault = \"allow\"",
    )
    .await;
    h.handle.send_text("RUN it").await.unwrap();
    let result = h.until_result().await;
    assert!(!result.is_error);
    assert!(!h.sandbox.file("must-not-exist.txt").exists());
    let request = h.api.wait_for(|request| !request.tool_results().is_empty()).await;
    let (_, content, is_error) = &request.tool_results()[0];
    assert!(is_error);
    assert!(content.contains("Bash(touch:*)"), "the model is told which rule: {content}");
    h.finish().await;
});

both!(person_rewrites_the_input, |version: CliVersion| async move {
    let scenario = Scenario::new()
        .reply(Reply::tool_use("Bash", touch_and_ls("original.txt")).when_prompt("RUN"))
        .reply(Reply::text("Done.").when_tool_result());
    let mut h = Harness::start(version, scenario, "").await;
    h.handle.send_text("RUN it").await.unwrap();
    let pending = h.until_permission().await;
    assert_eq!(pending.tool_name, "Bash");
    assert_eq!(h.handle.snapshot().state, SessionState::AwaitingPermission);
    let mut answer = PermissionAnswer::allow();
    answer.updated_input = Some(touch_and_ls("rewritten.txt"));
    h.handle.respond_permission(&pending.request_id, answer, "tester").await.unwrap();
    // A second answer is refused.
    let late = h
        .handle
        .respond_permission(&pending.request_id, PermissionAnswer::deny("no"), "other")
        .await;
    assert!(late.unwrap_err().to_string().contains("already answered"));
    h.until_result().await;
    assert!(h.sandbox.file("rewritten.txt").exists());
    assert!(!h.sandbox.file("original.txt").exists());
    h.finish().await;
});

both!(person_denies_and_the_turn_goes_on, |version: CliVersion| async move {
    let scenario = Scenario::new()
        .reply(Reply::tool_use("Bash", touch_and_ls("denied.txt")).when_prompt("RUN"))
        .reply(Reply::text("OK, I will not.").when_tool_result());
    let mut h = Harness::start(version, scenario, "").await;
    h.handle.send_text("RUN it").await.unwrap();
    let pending = h.until_permission().await;
    h.handle
        .respond_permission(&pending.request_id, PermissionAnswer::deny("not today"), "tester")
        .await
        .unwrap();
    let result = h.until_result().await;
    assert_eq!(result.result.as_deref(), Some("OK, I will not."));
    assert!(!h.sandbox.file("denied.txt").exists());
    let request = h.api.wait_for(|request| !request.tool_results().is_empty()).await;
    assert!(request.tool_results()[0].1.contains("not today"));
    h.finish().await;
});

both!(remember_for_session_asks_once, |version: CliVersion| async move {
    let scenario = Scenario::new()
        .reply(Reply::tool_use("Bash", touch_and_ls("repeated.txt")).when_prompt("FIRST"))
        .reply(Reply::text("First done.").when_tool_result())
        .reply(Reply::tool_use("Bash", touch_and_ls("repeated.txt")).when_prompt("SECOND"))
        .reply(Reply::text("Second done.").when_tool_result());
    let mut h = Harness::start(version, scenario, "").await;
    h.handle.send_text("FIRST").await.unwrap();
    let pending = h.until_permission().await;
    let mut answer = PermissionAnswer::allow();
    answer.remember = true;
    h.handle.respond_permission(&pending.request_id, answer, "tester").await.unwrap();
    h.until_result().await;
    h.handle.send_text("SECOND").await.unwrap();
    let result = h.until_result().await;
    assert_eq!(result.result.as_deref(), Some("Second done."), "{}", h.describe());
    assert_eq!(
        h.count(|event| matches!(event, SessionEvent::PermissionRequested(_))),
        1,
        "{}",
        h.describe()
    );
    // The grant stayed in the session: nothing was written to the project's settings.
    assert!(!h.sandbox.file(".claude/settings.local.json").exists());
    h.finish().await;
});
