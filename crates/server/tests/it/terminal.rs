//! `GET /api/terminals`, spoken to as a hostile or careless terminal would: what it refuses,
//! and a session that ends as the terminal says.

use std::sync::Arc;

use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use switchboard_store::Store;
use switchboard_testkit::{CliSandbox, FakeApi, Scenario};
use tokio_tungstenite::tungstenite::Message as WsMessage;

use crate::{Server, Ws, WAIT};

/// The next text frame, read as JSON; `None` once the daemon closed the socket.
async fn answer(ws: &mut Ws) -> Option<Value> {
    loop {
        let frame = tokio::time::timeout(WAIT, ws.socket.next()).await.expect("an answer in time");
        match frame {
            Some(Ok(WsMessage::Text(text))) => return Some(serde_json::from_str(&text).unwrap()),
            Some(Ok(WsMessage::Close(_))) | None | Some(Err(_)) => return None,
            Some(Ok(_)) => {}
        }
    }
}

async fn refused(server: &Server, hello: WsMessage) -> String {
    let mut ws = server.ws("/api/terminals").await;
    ws.socket.send(hello).await.unwrap();
    let error = answer(&mut ws).await.expect("an error frame");
    assert_eq!(error["type"], "error", "{error}");
    assert!(answer(&mut ws).await.is_none(), "closed after the error");
    error["error"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_is_refused_what_it_may_not_say_and_ends_its_session_as_it_says() {
    let api = FakeApi::start(Scenario::new()).await.unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let store: Arc<dyn Store> = Arc::new(switchboard_store::MemoryStore::new());
    let server = Server::start(store, &api, &sandbox).await;
    let text = |value: Value| WsMessage::Text(value.to_string().into());

    // A hello that is not one, a relative directory, a session id that is no id, a field
    // nobody asked for, an oversized hello: each refused by name, with nothing registered.
    assert!(refused(&server, text(json!({"type": "exit"}))).await.contains("hello"));
    let relative = refused(&server, text(json!({"type": "hello", "cwd": "work"}))).await;
    assert!(relative.contains("absolute"), "{relative}");
    let bad_id = json!({"type": "hello", "cwd": "/tmp", "claude_session_id": "../../etc/passwd"});
    assert!(refused(&server, text(bad_id)).await.contains("claude_session_id"));
    let extra = json!({"type": "hello", "cwd": "/tmp", "shell": "rm -rf /"});
    assert!(refused(&server, text(extra)).await.contains("shell"));
    let huge = json!({"type": "hello", "cwd": format!("/{}", "x".repeat(100_000))});
    assert!(refused(&server, text(huge)).await.contains("at most"));
    let long_cwd = json!({"type": "hello", "cwd": format!("/{}", "x".repeat(5_000))});
    assert!(refused(&server, text(long_cwd)).await.contains("4096"));
    let (_, sessions) = server.get("/api/sessions").await;
    assert_eq!(sessions.as_array().unwrap().len(), 0, "{sessions}");

    // A good one: registered. An unreadable frame and a line that is not JSON are told or
    // kept, and the socket stays open; the exit it reports is the session's end.
    let mut ws = server.ws("/api/terminals").await;
    ws.socket.send(text(json!({"type": "hello", "cwd": sandbox.workdir()}))).await.unwrap();
    let registered = answer(&mut ws).await.unwrap();
    assert_eq!(registered["type"], "registered", "{registered}");
    let id = registered["session"].as_str().unwrap().to_owned();
    ws.socket.send(text(json!({"type": "lines", "lines": ["x"]}))).await.unwrap();
    let error = answer(&mut ws).await.unwrap();
    assert!(error["error"].as_str().unwrap().contains("unreadable frame"), "{error}");
    let typed = json!({"type": "user", "message": {"role": "user", "content": "hi"}, "uuid": "t1", "sessionId": "c1"});
    ws.socket.send(WsMessage::Binary(b"not json at all".to_vec().into())).await.unwrap();
    ws.socket.send(WsMessage::Binary(typed.to_string().into_bytes().into())).await.unwrap();
    ws.socket.send(text(json!({"type": "exit", "code": 3, "signal": null}))).await.unwrap();
    let deadline = std::time::Instant::now() + WAIT;
    let session = loop {
        let (_, session) = server.get(&format!("/api/sessions/{id}")).await;
        if session["state"] == "crashed" {
            break session;
        }
        assert!(std::time::Instant::now() < deadline, "never ended: {session}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(session["claude_session_id"], "c1", "learnt from the transcript: {session}");
    assert_eq!(session["title"], "hi");
    let (_, events) = server.get(&format!("/api/sessions/{id}/events")).await;
    let kinds: Vec<&str> =
        events.as_array().unwrap().iter().filter_map(|e| e["event"]["event"].as_str()).collect();
    assert!(kinds.contains(&"bad_line"), "{kinds:?}");
    let exited = events.as_array().unwrap().iter().find(|e| e["event"]["event"] == "exited");
    assert_eq!(exited.unwrap()["event"]["code"], 3);
    server.stop().await;
}

/// Waits (bounded) until session `id` has `count` requests waiting for a person: them.
async fn until_pending(server: &Server, id: &str, count: usize) -> Vec<Value> {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let (_, session) = server.get(&format!("/api/sessions/{id}")).await;
        let now = session["pending_permissions"].as_array().cloned().unwrap_or_default();
        if now.len() == count {
            return now;
        }
        assert!(std::time::Instant::now() < deadline, "never {count} waiting: {now:?}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// A terminal session's hooks, spoken to as Claude Code speaks to them: `PreToolUse` refuses
/// a deny rule's call at once with the rule, leaves one no rule decides to the CLI (`{}`), and
/// answers an ask rule's `ask` at once (the CLI shows its dialog); the dialog's
/// `PermissionRequest` hook then waits for a person. A hook that goes away (an Esc in the
/// terminal) leaves the decision to the call's result, which says the terminal denied it; a
/// person's answer is the hook's decision, logged once the CLI says it took it; one still
/// waiting when the terminal ends is left to the terminal, whose CLI's calls are then its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminals_hooks_are_answered_by_the_policy_a_person_or_the_terminal() {
    let api = FakeApi::start(Scenario::new()).await.unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let store: Arc<dyn Store> = Arc::new(switchboard_store::MemoryStore::new());
    let policy = switchboard_session::Policy::from_toml(
        "[permissions]\nask = [\"Bash(touch:*)\"]\ndeny = [\"Bash(rm:*)\"]",
    )
    .unwrap();
    let server =
        Server::start_with(store, &api, &sandbox, |config| config.default_policy = Some(policy))
            .await;
    let text = |value: Value| WsMessage::Text(value.to_string().into());
    let line = |value: Value| WsMessage::Binary(value.to_string().into_bytes().into());
    let mut ws = server.ws("/api/terminals").await;
    ws.socket.send(text(json!({"type": "hello", "cwd": sandbox.workdir()}))).await.unwrap();
    let registered = answer(&mut ws).await.unwrap();
    let id = registered["session"].as_str().unwrap().to_owned();
    let key = registered["hook_key"].as_str().expect("a hook key").to_owned();
    let post = |path: &str, body: Value| {
        let request = server
            .client()
            .post(format!("{}/hooks/{path}", server.base))
            .bearer_auth(&key)
            .json(&body);
        async move {
            let response = request.send().await.unwrap();
            assert_eq!(response.status(), 200);
            response.json::<Value>().await.unwrap()
        }
    };
    let pre_tool_use = |command: &str| {
        post(
            "pre-tool-use",
            json!({"hook_event_name": "PreToolUse", "tool_name": "Bash",
            "tool_input": {"command": command}, "tool_use_id": format!("t-{command}"),
            "cwd": sandbox.workdir()}),
        )
    };
    let dialog = |command: &str| {
        post(
            "permission-request",
            json!({"hook_event_name": "PermissionRequest",
            "tool_name": "Bash", "tool_input": {"command": command}, "permission_suggestions": []}),
        )
    };
    let verdict = |answer: &Value| answer["hookSpecificOutput"]["permissionDecision"].clone();
    let denied = pre_tool_use("rm -rf build").await;
    assert_eq!(verdict(&denied), "deny", "{denied}");
    assert!(denied.to_string().contains("Bash(rm:*)"), "{denied}");
    assert_eq!(pre_tool_use("ls").await, json!({}), "no rule: the CLI decides");

    // Asked about: the CLI shows its dialog, whose hook waits; Esc in the terminal drops the
    // hook, and the call's result says the person refused it there.
    assert_eq!(verdict(&pre_tool_use("touch one").await), "ask");
    let gone = tokio::spawn(dialog("touch one"));
    let now = until_pending(&server, &id, 1).await;
    assert_eq!(now[0]["tool_use_id"], "t-touch one", "{now:?}");
    gone.abort();
    let refused = json!({"type": "user", "uuid": "r1", "message": {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t-touch one", "is_error": true,
         "content": "The user doesn't want to proceed with this tool use. The tool use was rejected."}]}});
    ws.socket.send(line(refused)).await.unwrap();
    until_pending(&server, &id, 0).await;

    // Answered by a person afar: the hook's decision is theirs, logged once the CLI took it.
    assert_eq!(verdict(&pre_tool_use("touch two").await), "ask");
    let waiting = tokio::spawn(dialog("touch two"));
    let now = until_pending(&server, &id, 1).await;
    let request_id = now[0]["request_id"].as_str().unwrap();
    let (status, _) = server
        .post(
            &format!("/api/sessions/{id}/permissions/{request_id}"),
            json!({"behavior": "deny", "message": "not now"}),
        )
        .await;
    assert_eq!(status, 200);
    let decided = waiting.await.unwrap();
    let decision = &decided["hookSpecificOutput"];
    assert_eq!(decision["hookEventName"], "PermissionRequest", "{decided}");
    assert_eq!(decision["decision"], json!({"behavior": "deny", "message": "not now"}));
    let took = json!({"type": "attachment", "uuid": "a1", "attachment": {
        "type": "hook_permission_decision", "decision": "deny", "toolUseID": "t-touch two",
        "hookEvent": "PermissionRequest"}});
    ws.socket.send(line(took)).await.unwrap();
    let by = |events: &Value, call: &str| {
        events.as_array().unwrap().iter().find_map(|e| {
            (e["event"]["event"] == "permission_decided" && e["event"]["tool_use_id"] == call)
                .then(|| e["event"]["by"].clone())
        })
    };
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let (_, events) = server.get(&format!("/api/sessions/{id}/events")).await;
        if let Some(person) = by(&events, "t-touch two") {
            assert_eq!(person["kind"], "person", "{person}");
            assert_eq!(by(&events, "t-touch one"), Some(json!({"kind": "terminal"})));
            break;
        }
        assert!(std::time::Instant::now() < deadline, "never logged: {events}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }

    // Waiting when the terminal ends: left to the terminal; later calls are the CLI's.
    assert_eq!(verdict(&pre_tool_use("touch three").await), "ask");
    let waiting = tokio::spawn(dialog("touch three"));
    until_pending(&server, &id, 1).await;
    ws.socket.send(text(json!({"type": "exit", "code": 0, "signal": null}))).await.unwrap();
    let ended = tokio::time::timeout(WAIT, waiting).await.expect("answered in time").unwrap();
    assert_eq!(ended, json!({}), "the dialog is the terminal's");
    assert_eq!(pre_tool_use("touch four").await, json!({}), "the CLI runs on without Switchboard");
    assert_eq!(dialog("touch four").await, json!({}));
    server.stop().await;
}
