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

both!(interrupt_while_streaming, |version: CliVersion| async move {
    let scenario = Scenario::new()
        .reply(Reply::text("one two three four five six seven").when_prompt("LONG").hold_after(2))
        .reply(Reply::text("after the interrupt").when_prompt("NEXT"));
    let mut h = Harness::start(version, scenario, "").await;
    h.handle.send_text("LONG story please").await.unwrap();
    for _ in 0..2 {
        h.until("a text delta", |event| {
            matches!(from_cli(event), Some(Message::StreamEvent(e)) if matches!(&e.event, StreamEvent::ContentBlockDelta(d) if matches!(d.delta, Delta::Text(_))))
        })
        .await;
    }
    h.handle.interrupt().await.unwrap();
    let result = h.until_result().await;
    assert_eq!(result.subtype, "error_during_execution", "{}", h.describe());
    h.handle.send_text("NEXT").await.unwrap();
    let result = h.until_result().await;
    assert_eq!(result.result.as_deref(), Some("after the interrupt"));
    h.finish().await;
});

both!(interrupt_while_a_permission_is_pending, |version: CliVersion| async move {
    let scenario = Scenario::new()
        .reply(Reply::tool_use("Bash", touch_and_ls("never.txt")).when_prompt("RUN"));
    let mut h = Harness::start(version, scenario, "").await;
    h.handle.send_text("RUN it").await.unwrap();
    let pending = h.until_permission().await;
    h.handle.interrupt().await.unwrap();
    h.until("the request withdrawn", |event| {
        matches!(event, SessionEvent::PermissionDecided { by: DecidedBy::Cancelled, .. })
    })
    .await;
    h.until_result().await;
    assert!(!h.sandbox.file("never.txt").exists());
    let late =
        h.handle.respond_permission(&pending.request_id, PermissionAnswer::allow(), "late").await;
    assert!(late.is_err(), "a withdrawn request cannot be answered");
    assert!(h.handle.snapshot().pending_permissions.is_empty());
    h.finish().await;
});

both!(pre_tool_use_hook_allows_without_asking, |version: CliVersion| async move {
    use switchboard_protocol::control::{HookMatcher, HookOutput};
    use switchboard_protocol::InitializeRequest;
    let scenario = Scenario::new()
        .reply(Reply::tool_use("Bash", touch_and_ls("hooked.txt")).when_prompt("RUN"))
        .reply(Reply::text("Hooked.").when_tool_result());
    let options = crate::harness::Options {
        configure: Box::new(|config, _| {
            let matcher = HookMatcher {
                matcher: Some(Some("Bash".into())),
                hook_callback_ids: vec!["pre_bash".into()],
                ..Default::default()
            };
            config.initialize =
                Some(InitializeRequest::default().with_hook("PreToolUse", vec![matcher]));
        }),
        ..Default::default()
    };
    let mut h = Harness::start_with(version, scenario, options).await;
    h.handle.send_text("RUN it").await.unwrap();
    let hook = match h
        .until("a hook callback", |event| matches!(event, SessionEvent::HookRequested(_)))
        .await
    {
        SessionEvent::HookRequested(hook) => hook,
        _ => unreachable!(),
    };
    assert_eq!(hook.callback_id, "pre_bash");
    assert_eq!(hook.hook_event_name.as_deref(), Some("PreToolUse"));
    h.handle
        .respond_hook(&hook.request_id, &HookOutput::pre_tool_use("allow", "hook says yes"), "test")
        .await
        .unwrap();
    h.until_result().await;
    assert!(h.sandbox.file("hooked.txt").exists());
    assert_eq!(
        h.count(|event| matches!(event, SessionEvent::PermissionRequested(_))),
        0,
        "the hook's allow skips can_use_tool"
    );
    h.finish().await;
});

both!(set_model_and_permission_mode_mid_session, |version: CliVersion| async move {
    use switchboard_protocol::PermissionMode;
    let sandbox = switchboard_testkit::CliSandbox::new().unwrap();
    let target = sandbox.file("accept-edits.txt");
    let scenario = Scenario::new()
        .reply(Reply::text("first").when_prompt("ONE"))
        .reply(Reply::text("second").when_prompt("TWO"))
        .reply(
            Reply::tool_use("Write", json!({"file_path": target.display().to_string(), "content": "written in acceptEdits\n"}))
                .when_prompt("WRITE"),
        )
        .reply(Reply::text("written").when_tool_result());
    let options = crate::harness::Options { sandbox: Some(sandbox), ..Default::default() };
    let mut h = Harness::start_with(version, scenario, options).await;
    h.handle.send_text("ONE").await.unwrap();
    h.until_result().await;
    h.handle.set_model("claude-haiku-4-5-20251001").await.unwrap();
    h.handle.send_text("TWO").await.unwrap();
    h.until_result().await;
    let request = h.api.wait_for(|request| request.last_user_text().contains("TWO")).await;
    assert_eq!(request.model(), "claude-haiku-4-5-20251001");
    h.handle.set_permission_mode(PermissionMode::AcceptEdits).await.unwrap();
    assert_eq!(h.handle.snapshot().permission_mode.as_deref(), Some("acceptEdits"));
    h.handle.send_text("WRITE").await.unwrap();
    h.until_result().await;
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "written in acceptEdits\n",
        "{}",
        h.describe()
    );
    assert_eq!(
        h.count(|event| matches!(event, SessionEvent::PermissionRequested(_))),
        0,
        "acceptEdits writes without asking"
    );
    h.finish().await;
});

both!(multi_turn_with_a_message_queued_while_busy, |version: CliVersion| async move {
    let scenario = Scenario::new()
        .reply(Reply::text("first answer").when_prompt("FIRST").hold_after(1))
        .reply(Reply::text("second answer").when_prompt("SECOND"));
    let mut h = Harness::start(version, scenario, "").await;
    h.handle.send_text("FIRST").await.unwrap();
    h.until("a text delta", |event| matches!(from_cli(event), Some(Message::StreamEvent(_)))).await;
    h.handle.send_text("SECOND").await.unwrap();
    let mut watch = h.handle.watch();
    let queued = tokio::time::timeout(
        crate::harness::WAIT,
        watch.wait_for(|snapshot| snapshot.queued_turns == 2),
    )
    .await
    .map(|snapshot| snapshot.is_ok());
    assert_eq!(queued, Ok(true), "both turns are queued");
    h.api.release();
    let first = h.until_result().await;
    let second = h.until_result().await;
    assert_eq!(first.result.as_deref(), Some("first answer"));
    assert_eq!(second.result.as_deref(), Some("second answer"));
    assert_eq!(h.handle.snapshot().state, SessionState::Idle);
    assert_eq!(h.handle.snapshot().turns, 2);
    h.finish().await;
});

both!(rate_limits_are_retried, |version: CliVersion| async move {
    let scenario = Scenario::new()
        .reply(Reply::http_error(429, "rate_limit_error", "slow down", 2))
        .reply(Reply::text("made it"));
    let mut h = Harness::start(version, scenario, "").await;
    h.handle.send_text("hello").await.unwrap();
    let result = h.until_result().await;
    assert_eq!(result.result.as_deref(), Some("made it"));
    // Both versions retried: two refusals, then the answer.
    assert_eq!(h.api.conversation_requests().len(), 3, "{version:?}: the model was asked 3 times");
    if version == CliVersion::V2_1_330 {
        let retries = h.count(|event| {
            matches!(
                from_cli(event),
                Some(Message::System(system))
                    if matches!(**system, switchboard_protocol::SystemMessage::ApiRetry(_))
            )
        });
        assert_eq!(retries, 2, "2.1.330 announces each retry");
    }
    h.finish().await;
});

both!(server_errors_end_the_turn_with_an_error_result, |version: CliVersion| async move {
    let scenario =
        Scenario::new().reply(Reply::http_error(500, "api_error", "Internal server error", 10));
    let mut h = Harness::start(version, scenario, "").await;
    h.handle.send_text("hello").await.unwrap();
    let result = h.until_result().await;
    assert!(result.is_error, "API failures are is_error results");
    assert_eq!(h.api.conversation_requests().len(), 3, "CLAUDE_CODE_MAX_RETRIES=2: three tries");
    let snapshot = h.handle.snapshot();
    assert!(snapshot.last_result_is_error);
    assert_eq!(snapshot.state, SessionState::Idle, "an API error is not a crash");
    h.finish().await;
});

both!(subagent_messages_nest_under_their_task, |version: CliVersion| async move {
    let sandbox = switchboard_testkit::CliSandbox::new().unwrap();
    std::fs::write(sandbox.file("hello.txt"), "hello world\n").unwrap();
    let hello = sandbox.file("hello.txt").display().to_string();
    let (tool, input) = match version {
        CliVersion::V2_1_37 => (
            "Task",
            json!({"description": "Read the fixture", "prompt": "SUBAGENT_PROMPT: read hello.txt", "subagent_type": "general-purpose"}),
        ),
        CliVersion::V2_1_330 | CliVersion::V2_1_120 => (
            "Agent",
            json!({"description": "Read the fixture", "prompt": "SUBAGENT_PROMPT: read hello.txt", "subagent_type": "general-purpose", "run_in_background": false}),
        ),
    };
    let scenario = Scenario::new()
        .reply(Reply::tool_use(tool, input).when_prompt("DELEGATE"))
        .reply(Reply::tool_use("Read", json!({"file_path": hello})).when_prompt("SUBAGENT_PROMPT"))
        .reply(
            Reply::text("SUBAGENT_DONE: the file says hello world.")
                .when_tool_result_contains("hello world"),
        )
        .reply(Reply::text("Parent done.").when_tool_result_contains("SUBAGENT_DONE"));
    let options = crate::harness::Options { sandbox: Some(sandbox), ..Default::default() };
    let mut h = Harness::start_with(version, scenario, options).await;
    h.handle.send_text("DELEGATE the reading").await.unwrap();
    let result = h.until_result().await;
    assert_eq!(result.result.as_deref(), Some("Parent done."), "{}", h.describe());
    // The projection over the session's events: the subagent tree.
    let mut projector = switchboard_session::Projector::new();
    for event in &h.log {
        projector.updates(event);
    }
    let subagents = projector.view().subagents.clone();
    assert_eq!(subagents.len(), 1, "{subagents:?}");
    assert_eq!(subagents[0].description.as_deref(), Some("Read the fixture"));
    assert!(subagents[0].messages >= 2, "the subagent's prompt and its Read: {subagents:?}");
    assert!(subagents[0].finished);
    let nested = h.count(|event| match from_cli(event) {
        Some(Message::Assistant(m)) => {
            m.parent_tool_use_id.as_deref() == Some(subagents[0].tool_use_id.as_str())
        }
        _ => false,
    });
    assert!(nested >= 1, "the subagent's Read call arrives nested");
    h.finish().await;
});

both!(ask_user_question_is_answered_by_a_person, |version: CliVersion| async move {
    let questions = json!({"questions": [{"question": "Which color?", "header": "Color", "multiSelect": false,
        "options": [{"label": "Red", "description": "warm"}, {"label": "Blue", "description": "cool"}]}]});
    let scenario = Scenario::new()
        .reply(Reply::tool_use("AskUserQuestion", questions).when_prompt("ASK"))
        .reply(Reply::text("Blue it is.").when_tool_result());
    let mut h = Harness::start(version, scenario, "[permissions]\ndefault = \"allow\"").await;
    h.handle.send_text("ASK me").await.unwrap();
    let pending = h.until_permission().await;
    assert_eq!(pending.tool_name, "AskUserQuestion");
    let mut answer = PermissionAnswer::allow();
    answer.answers = Some([("Which color?".to_owned(), "Blue".to_owned())].into());
    h.handle.respond_permission(&pending.request_id, answer, "tester").await.unwrap();
    h.until_result().await;
    let request = h.api.wait_for(|request| !request.tool_results().is_empty()).await;
    let (_, content, _) = &request.tool_results()[0];
    assert!(content.contains("Blue"), "the model sees the answer: {content}");
    h.finish().await;
});

both!(resume_keeps_the_session_and_fork_makes_a_new_one, |version: CliVersion| async move {
    let scenario = || Scenario::new().reply(Reply::text("remembered").times(5));
    let mut first = Harness::start(version, scenario(), "").await;
    first.handle.send_text("remember the number 7").await.unwrap();
    first.until_result().await;
    let session_id = first.handle.snapshot().claude_session_id.unwrap();
    first.finish().await;
    let sandbox =
        std::mem::replace(&mut first.sandbox, switchboard_testkit::CliSandbox::new().unwrap());

    let resume_id = session_id.clone();
    let options = crate::harness::Options {
        sandbox: Some(sandbox),
        configure: Box::new(move |config, _| config.cli.resume = Some(resume_id)),
        ..Default::default()
    };
    let mut resumed = Harness::start_with(version, scenario(), options).await;
    resumed.handle.send_text("what was the number?").await.unwrap();
    resumed.until_result().await;
    assert_eq!(resumed.handle.snapshot().claude_session_id.as_deref(), Some(session_id.as_str()));
    let request = resumed
        .api
        .wait_for(|request| request.last_user_text().contains("what was the number"))
        .await;
    let history = request.body["messages"].as_array().unwrap().len();
    assert!(history >= 3, "the earlier turn went to the API with the new one ({history} messages)");
    resumed.finish().await;
    let sandbox =
        std::mem::replace(&mut resumed.sandbox, switchboard_testkit::CliSandbox::new().unwrap());

    let fork_id = session_id.clone();
    let options = crate::harness::Options {
        sandbox: Some(sandbox),
        configure: Box::new(move |config, _| {
            config.cli.resume = Some(fork_id);
            config.cli.fork_session = true;
        }),
        ..Default::default()
    };
    let mut forked = Harness::start_with(version, scenario(), options).await;
    forked.handle.send_text("fork it").await.unwrap();
    forked.until_result().await;
    let forked_id = forked.handle.snapshot().claude_session_id.unwrap();
    assert_ne!(forked_id, session_id, "a fork gets a new session id");
    forked.finish().await;
});

both!(large_tool_inputs_and_results_pass_through, |version: CliVersion| async move {
    let sandbox = switchboard_testkit::CliSandbox::new().unwrap();
    let target = sandbox.file("big.txt");
    let content = "0123456789abcdef".repeat(128 * 1024); // 2 MiB
    let scenario = Scenario::new()
        .reply(
            Reply::tool_use(
                "Write",
                json!({"file_path": target.display().to_string(), "content": content}),
            )
            .when_prompt("BIG"),
        )
        .reply(Reply::text("Wrote it.").when_tool_result());
    let options = crate::harness::Options {
        sandbox: Some(sandbox),
        policy: "[permissions]\nallow = [\"Write\"]".to_owned(),
        ..Default::default()
    };
    let mut h = Harness::start_with(version, scenario, options).await;
    h.handle.send_text("BIG file please").await.unwrap();
    let result = h.until_result().await;
    assert_eq!(result.result.as_deref(), Some("Wrote it."), "{}", h.describe());
    assert_eq!(std::fs::metadata(&target).unwrap().len(), 2 * 1024 * 1024);
    let big_lines = h.count(
        |event| matches!(event, SessionEvent::Line(line) if line.raw.len() > 2 * 1024 * 1024),
    );
    assert!(big_lines >= 2, "the tool input reached us whole in several lines ({big_lines})");
    h.finish().await;
});

both!(read_only_tools_are_auto_allowed_by_the_cli, |version: CliVersion| async move {
    let sandbox = switchboard_testkit::CliSandbox::new().unwrap();
    std::fs::write(sandbox.file("notes.txt"), "the secret word is marmalade\n").unwrap();
    let path = sandbox.file("notes.txt").display().to_string();
    let scenario = Scenario::new()
        .reply(Reply::tool_use("Read", json!({"file_path": path})).when_prompt("READ"))
        .reply(Reply::text("It says marmalade.").when_tool_result_contains("marmalade"));
    let options = crate::harness::Options { sandbox: Some(sandbox), ..Default::default() };
    let mut h = Harness::start_with(version, scenario, options).await;
    h.handle.send_text("READ the notes").await.unwrap();
    let result = h.until_result().await;
    assert_eq!(result.result.as_deref(), Some("It says marmalade."), "{}", h.describe());
    assert_eq!(
        h.count(|event| matches!(event, SessionEvent::PermissionRequested(_))),
        0,
        "Read needs no permission"
    );
    // Recorded all the same: the CLI allowed it on its own, the policy raising no objection.
    let by_cli = h.count(|event| {
        matches!(
            event,
            SessionEvent::PermissionDecided {
                behavior: Behavior::Allow,
                by: DecidedBy::Cli,
                tool_use_id: Some(_),
                ..
            }
        )
    });
    assert_eq!(by_cli, 1, "{}", h.describe());
    h.finish().await;
});

both!(thinking_streams_and_a_mid_stream_error_is_retried, |version: CliVersion| async move {
    let scenario = Scenario::new()
        .reply(
            Reply::default()
                .then_thinking("Let me think about this carefully.")
                .then_text("Thought it through.")
                .when_prompt("THINK"),
        )
        .reply(Reply::text("partial answer that breaks").when_prompt("BREAK").stream_error_after(2))
        .reply(Reply::text("recovered without streaming").when_prompt("BREAK"));
    let mut h = Harness::start(version, scenario, "").await;
    h.handle.send_text("THINK").await.unwrap();
    let result = h.until_result().await;
    assert_eq!(result.result.as_deref(), Some("Thought it through."));
    let thinking = h.count(|event| matches!(from_cli(event), Some(Message::Assistant(m)) if matches!(m.message.content.first(), Some(switchboard_protocol::ContentBlock::Thinking(_)))));
    assert_eq!(thinking, 1, "the thinking block arrives as its own assistant line");
    h.handle.send_text("BREAK").await.unwrap();
    let result = h.until_result().await;
    assert_eq!(result.result.as_deref(), Some("recovered without streaming"), "{}", h.describe());
    let retry = h
        .api
        .requests()
        .into_iter()
        .filter(|r| r.last_user_text().contains("BREAK"))
        .collect::<Vec<_>>();
    // 2.1.330 sends `stream: false`, 2.1.37 leaves the field out.
    assert_ne!(
        retry.last().unwrap().body["stream"],
        true,
        "the retry after an SSE error does not stream"
    );
    h.finish().await;
});

both!(a_large_tool_result_arrives, |version: CliVersion| async move {
    let scenario = Scenario::new()
        .reply(
            Reply::tool_use("Bash", json!({"command": "seq 1 300000", "description": "count"}))
                .when_prompt("COUNT"),
        )
        .reply(Reply::text("Counted.").when_tool_result());
    let mut h = Harness::start(version, scenario, "[permissions]\nallow = [\"Bash(seq:*)\"]").await;
    h.handle.send_text("COUNT").await.unwrap();
    let result = h.until_result().await;
    assert_eq!(result.result.as_deref(), Some("Counted."), "{}", h.describe());
    let biggest = h
        .log
        .iter()
        .filter_map(|event| match from_cli(event) {
            Some(Message::User(user)) if user.tool_results().next().is_some() => match event {
                SessionEvent::Line(line) => Some(line.raw.len()),
                _ => None,
            },
            _ => None,
        })
        .max()
        .unwrap();
    // 2.1.37 carries all ~2 MB of output in the line; 2.1.330 truncates to 30 000 characters
    // and persists the rest.
    assert!(biggest > 30_000, "tool result line of {biggest} bytes");
    h.finish().await;
});

both!(thinking_budget_and_mcp_status, |version: CliVersion| async move {
    let scenario = Scenario::new().reply(Reply::text("ok").times(2));
    let mut h = Harness::start(version, scenario, "").await;
    h.handle.set_max_thinking_tokens(Some(2048)).await.unwrap();
    let status = h.handle.mcp_status().await.unwrap();
    assert_eq!(status["mcpServers"], json!([]), "no MCP servers configured");
    h.handle.send_text("hello").await.unwrap();
    h.until_result().await;
    if version == CliVersion::V2_1_37 {
        // 2.1.37 applies the budget to the next request (2.1.330's default model thinks
        // adaptively and shows no change).
        let request = h.api.wait_for(|request| request.last_user_text().contains("hello")).await;
        assert_eq!(request.body["thinking"]["budget_tokens"], 2048, "{}", request.body["thinking"]);
    }
    h.finish().await;
});

/// The policy over calls the CLI allows on its own: each `(tool, input)` reads the secret in
/// `.env` or `secrets/` in a way neither CLI asks about; the policy's deny rules must hold.
async fn denied_although_the_cli_would_allow(
    version: CliVersion,
    policy: &str,
    rule: Option<&str>,
    tool: &str,
    input: impl Fn(&std::path::Path) -> serde_json::Value,
) {
    let sandbox = switchboard_testkit::CliSandbox::new().unwrap();
    std::fs::write(sandbox.file(".env"), "API_KEY=hunter2-in-dotenv\n").unwrap();
    std::fs::create_dir(sandbox.file("secrets")).unwrap();
    std::fs::write(sandbox.file("secrets/key.txt"), "hunter2-in-secrets\n").unwrap();
    let scenario = Scenario::new()
        .reply(Reply::tool_use(tool, input(&sandbox.workdir())).when_prompt("LOOK"))
        .reply(Reply::text("Understood.").when_tool_result());
    let mut h = Harness::start_with(
        version,
        scenario,
        crate::harness::Options {
            policy: policy.to_owned(),
            sandbox: Some(sandbox),
            ..Default::default()
        },
    )
    .await;
    h.handle.send_text("LOOK around").await.unwrap();
    h.until_result().await;
    let request = h.api.wait_for(|request| !request.tool_results().is_empty()).await;
    let (_, content, is_error) = &request.tool_results()[0];
    assert!(is_error, "{tool} was refused: {content}");
    assert!(!content.contains("hunter2"), "the secret reached the model: {content}");
    // Recorded once: the policy denied it, by which rule, for which tool call.
    let expected = DecidedBy::Policy { rule: rule.map(str::to_owned) };
    let denied = h.count(|event| {
        matches!(
            event,
            SessionEvent::PermissionDecided {
                behavior: Behavior::Deny,
                by,
                tool_use_id: Some(_),
                ..
            } if *by == expected
        )
    });
    assert_eq!(denied, 1, "{}", h.describe());
    h.finish().await;
}

both!(a_deny_rule_holds_for_a_read_in_the_working_directory, |version: CliVersion| async move {
    denied_although_the_cli_would_allow(
        version,
        "[permissions]\ndeny = [\"Read(./.env)\"]\ndefault = \"allow\"",
        Some("Read(./.env)"),
        "Read",
        |cwd| json!({"file_path": cwd.join(".env")}),
    )
    .await;
});

both!(a_deny_rule_holds_for_a_grep_in_a_denied_directory, |version: CliVersion| async move {
    denied_although_the_cli_would_allow(
        version,
        "[permissions]\ndeny = [\"Read(./secrets/**)\"]\ndefault = \"allow\"",
        Some("Read(./secrets/**)"),
        "Grep",
        |cwd| json!({"pattern": "hunter2", "path": cwd.join("secrets"), "output_mode": "content"}),
    )
    .await;
});

both!(a_deny_rule_holds_for_a_glob_in_a_denied_directory, |version: CliVersion| async move {
    denied_although_the_cli_would_allow(
        version,
        "[permissions]\ndeny = [\"Read(./secrets/**)\"]\ndefault = \"allow\"",
        Some("Read(./secrets/**)"),
        "Glob",
        |cwd| json!({"pattern": "*", "path": cwd.join("secrets")}),
    )
    .await;
});

both!(a_deny_rule_holds_for_read_only_bash, |version: CliVersion| async move {
    denied_although_the_cli_would_allow(
        version,
        "[permissions]\ndeny = [\"Bash(cat:*)\"]\ndefault = \"allow\"",
        Some("Bash(cat:*)"),
        "Bash",
        |_| json!({"command": "cat .env", "description": "show the env file"}),
    )
    .await;
});

both!(a_default_deny_holds_for_a_read_in_the_working_directory, |version: CliVersion| async move {
    // No rule names the call, so the CLI has nothing of the policy's to hold: only the
    // policy's hook stands between the model and the file.
    denied_although_the_cli_would_allow(
        version,
        "[permissions]\nallow = [\"Bash(ls:*)\"]\ndefault = \"deny\"",
        None,
        "Read",
        |cwd| json!({"file_path": cwd.join(".env")}),
    )
    .await;
});

both!(no_tool_process_outlives_a_killed_cli, |version: CliVersion| async move {
    // A command line no other test's processes have (ended when the test ends, whatever
    // happens): the process is found by it.
    let guard = switchboard_testkit::Sleeper::new(match version {
        CliVersion::V2_1_330 => 3141,
        _ => 3142,
    });
    let sleeper = guard.command();
    let scenario = Scenario::new()
        .reply(
            Reply::tool_use(
                "Bash",
                json!({"command": format!("setsid {sleeper} >/dev/null 2>&1 < /dev/null & echo started"), "description": "start a background sleeper"}),
            )
            .when_prompt("SPAWN"),
        )
        .reply(Reply::text("Started.").when_tool_result());
    let mut h = Harness::start(version, scenario, "[permissions]\ndefault = \"allow\"").await;
    h.handle.send_text("SPAWN it").await.unwrap();
    h.until_result().await;
    assert_eq!(
        switchboard_testkit::processes_running(sleeper).len(),
        1,
        "the tool started it: {}",
        h.describe()
    );
    // The CLI dies without a word; its tool ran `setsid`, so it is in no group of the CLI's.
    let pid = h.handle.cli_run().expect("a started CLI is recorded").pid;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    h.until("the exit", |event| matches!(event, SessionEvent::Exited { .. })).await;
    assert_eq!(
        switchboard_testkit::processes_running(sleeper),
        Vec::<u32>::new(),
        "nothing outlives the session"
    );
});
