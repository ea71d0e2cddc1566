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

/// A terminal session's `PreToolUse` hook, spoken to as Claude Code speaks to it: a deny rule's
/// call is refused at once with the rule, one no rule decides is left to the CLI (`{}`), and
/// one an ask rule names waits for a person; a hook that goes away withdraws its request, an
/// answered one gets the person's decision, and one still waiting when the terminal ends is
/// denied, after which the key's calls are left to the CLI that runs on without Switchboard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminals_hook_is_answered_by_the_policy_a_person_or_the_cli() {
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
    let mut ws = server.ws("/api/terminals").await;
    ws.socket.send(text(json!({"type": "hello", "cwd": sandbox.workdir()}))).await.unwrap();
    let registered = answer(&mut ws).await.unwrap();
    let id = registered["session"].as_str().unwrap().to_owned();
    let key = registered["hook_key"].as_str().expect("a hook key").to_owned();
    let hook = |command: &str| {
        let request = server
            .client()
            .post(format!("{}/hooks/pre-tool-use", server.base))
            .bearer_auth(&key)
            .json(&json!({"hook_event_name": "PreToolUse", "tool_name": "Bash",
                          "tool_input": {"command": command}, "tool_use_id": format!("t-{command}"),
                          "cwd": sandbox.workdir()}));
        async move {
            let response = request.send().await.unwrap();
            assert_eq!(response.status(), 200);
            response.json::<Value>().await.unwrap()
        }
    };
    let denied = hook("rm -rf build").await;
    assert_eq!(denied["hookSpecificOutput"]["permissionDecision"], "deny", "{denied}");
    assert!(denied.to_string().contains("Bash(rm:*)"), "{denied}");
    assert_eq!(hook("ls").await, json!({}), "no rule: the CLI decides");

    // Asked about, then the hook goes away: the request is withdrawn.
    let gone = tokio::spawn(hook("touch one"));
    until_pending(&server, &id, 1).await;
    gone.abort();
    until_pending(&server, &id, 0).await;

    // Asked about and answered by a person: the hook's decision is theirs.
    let waiting = tokio::spawn(hook("touch two"));
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
    assert_eq!(decided["hookSpecificOutput"]["permissionDecision"], "deny", "{decided}");
    assert_eq!(decided["hookSpecificOutput"]["permissionDecisionReason"], "not now");

    // Waiting when the terminal ends: denied at once; later calls are the CLI's.
    let waiting = tokio::spawn(hook("touch three"));
    until_pending(&server, &id, 1).await;
    ws.socket.send(text(json!({"type": "exit", "code": 0, "signal": null}))).await.unwrap();
    let ended = tokio::time::timeout(WAIT, waiting).await.expect("answered in time").unwrap();
    assert_eq!(ended["hookSpecificOutput"]["permissionDecision"], "deny", "{ended}");
    assert_eq!(hook("touch four").await, json!({}), "the CLI runs on without Switchboard");
    server.stop().await;
}
