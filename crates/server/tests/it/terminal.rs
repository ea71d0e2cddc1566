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
