//! The MCP face at `/mcp`, with real MCP clients: the Claude Code CLI itself (an agent that
//! starts a second session, waits for it and reads its answer, and is refused a start beyond
//! its token's ceiling), and `rmcp`'s client for the protocol's edges (initialization, scopes,
//! errors, bad input, progress, cancellation).

use std::sync::{Arc, Mutex};

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, ClientRequest,
    ProgressNotificationParam,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::{json, Value};
use switchboard_server::Scope;
use switchboard_store::{MemoryStore, Store};
use switchboard_testkit::{CliSandbox, FakeApi, Reply, Scenario};

use crate::{is_result, Server, TOKEN, WAIT};

/// A policy that asks a person for every Bash command, and allows only reading.
const CEILING: &str = "[permissions]\nallow = [\"Read\", \"Grep\", \"Glob\"]\ndeny = [\"WebFetch\"]\ndefault = \"ask\"\n";

/// A client that keeps the progress it is told.
#[derive(Clone, Default)]
struct Client {
    progress: Arc<Mutex<Vec<ProgressNotificationParam>>>,
    told: Arc<tokio::sync::Notify>,
}

impl Client {
    /// The first progress it is told, within [`WAIT`].
    async fn first_progress(&self) -> ProgressNotificationParam {
        let first = async {
            loop {
                let told = self.told.notified();
                if let Some(first) = self.progress.lock().unwrap().first() {
                    return first.clone();
                }
                told.await;
            }
        };
        tokio::time::timeout(WAIT, first).await.expect("progress while the turn runs")
    }
}

impl ClientHandler for Client {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress.lock().unwrap().push(params);
        self.told.notify_waiters();
    }
}

async fn connect(server: &Server, token: &str) -> (RunningService<RoleClient, Client>, Client) {
    let config = StreamableHttpClientTransportConfig::with_uri(format!("{}/mcp", server.base))
        .auth_header(token.to_owned());
    let transport = StreamableHttpClientTransport::from_config(config);
    let client = Client::default();
    let running = tokio::time::timeout(WAIT, client.clone().serve(transport))
        .await
        .expect("initialized in time")
        .expect("initialized");
    (running, client)
}

async fn call(
    client: &RunningService<RoleClient, Client>,
    tool: &'static str,
    arguments: Value,
) -> CallToolResult {
    let params = CallToolRequestParams::new(tool)
        .with_arguments(arguments.as_object().cloned().unwrap_or_default());
    tokio::time::timeout(WAIT, client.call_tool(params))
        .await
        .expect("answered in time")
        .unwrap_or_else(|error| panic!("{tool}: {error}"))
}

/// The text of a tool's result.
fn text(result: &CallToolResult) -> String {
    result.content.iter().filter_map(|block| block.as_text()).map(|t| t.text.clone()).collect()
}

fn ok(result: &CallToolResult) -> Value {
    assert_eq!(result.is_error, Some(false), "{}", text(result));
    result.structured_content.clone().expect("structured")
}

/// A POST with `token` that the daemon refuses (`403`), and the refusal's body.
async fn refused_as(server: &Server, token: &str, path: &str, body: Value) -> Value {
    let body = (!body.is_null()).then_some(body);
    let (status, answer) = server.request_as(token, reqwest::Method::POST, path, body).await;
    assert_eq!(status, 403, "POST {path}: {answer}");
    answer
}

async fn make_token(server: &Server, name: &str, scope: Scope, ceiling: Option<&str>) -> String {
    let mut body = json!({"name": name, "scope": scope.as_str()});
    if let Some(ceiling) = ceiling {
        body["ceiling"] = json!(ceiling);
    }
    let (status, made) = server.post("/api/tokens", body).await;
    assert_eq!(status, 201, "{made}");
    made["token"].as_str().unwrap().to_owned()
}

/// The Claude Code CLI as the MCP client: an agent session, given `/mcp` with an operate
/// token that has a ceiling, is refused a `bypassPermissions` start, then starts a second
/// session, waits for it and reads its answer; the second session says it was started
/// through MCP by that token, under its ceiling.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_claude_cli_drives_a_second_session_through_mcp() {
    let sandbox = CliSandbox::new().unwrap();
    let cwd = sandbox.workdir().display().to_string();
    let api = FakeApi::start(
        Scenario::new()
            // The helper session's own turn.
            .reply(Reply::text("hello from the second session").when_prompt("second session"))
            // The agent: first a start its ceiling refuses.
            .reply(
                Reply::tool_use(
                    "mcp__switchboard__start_session",
                    json!({"cwd": cwd, "prompt": "anything", "permission_mode": "bypassPermissions"}),
                )
                .when_prompt("start a helper"),
            )
            .reply(
                Reply::tool_use(
                    "mcp__switchboard__start_session",
                    json!({"cwd": cwd, "prompt": "second session: say hello"}),
                )
                .when_tool_result_contains("beyond the ceiling"),
            )
            .reply(
                Reply::tool_use(
                    "mcp__switchboard__wait_for_session",
                    json!({"session": "{{result.session}}", "timeout_secs": 120}),
                )
                .when_tool_result_contains("\"cwd\""),
            )
            .reply(
                Reply::text("The helper answered.")
                    .when_tool_result_contains("hello from the second session"),
            ),
    )
    .await
    .unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let server = Server::start(store, &api, &sandbox).await;
    let agent_token = make_token(&server, "agent", Scope::Operate, Some(CEILING)).await;

    let mcp = json!({"mcpServers": {"switchboard": {
        "type": "http",
        "url": format!("{}/mcp", server.base),
        "headers": {"Authorization": format!("Bearer {agent_token}")},
    }}});
    let (id, mut ws) = server
        .open_session(json!({
            "cwd": cwd,
            "prompt": "start a helper and tell me what it says",
            "mcp_config": [mcp.to_string()],
            "policy": "[permissions]\nallow = [\"mcp__switchboard\"]\n",
        }))
        .await;
    let frames = ws.until(is_result).await;
    let result = frames.last().unwrap()["event"]["line"].clone();
    assert_eq!(result["result"], "The helper answered.", "{result}");
    let said: Vec<String> = frames
        .iter()
        .filter(|f| f["event"]["line"]["type"] == "user")
        .map(|f| f["event"]["line"]["message"]["content"].to_string())
        .collect();
    let refused = said.iter().find(|text| text.contains("bypassPermissions")).expect("refused");
    assert!(
        refused.contains("forbidden") && refused.contains("ceiling of token agent"),
        "{refused}"
    );

    // The second session: started through MCP by token agent, under its ceiling.
    let (_, sessions) = server.get("/api/sessions").await;
    let helper = sessions
        .as_array()
        .unwrap()
        .iter()
        .find(|session| session["id"] != id.as_str())
        .expect("the helper session")
        .clone();
    assert_eq!(helper["config"]["origin"]["face"], "mcp", "{helper}");
    assert_eq!(helper["config"]["origin"]["token"], "agent");
    assert_eq!(helper["config"]["origin"]["ceiling"], CEILING);
    assert_eq!(helper["title"], "second session: say hello");
    let (_, agent) = server.get(&format!("/api/sessions/{id}")).await;
    assert_eq!(agent["config"]["origin"]["face"], "api", "{agent}");
    assert_eq!(agent["config"]["origin"]["token"], "admin");
    assert_eq!(sessions.as_array().unwrap().len(), 2, "the refused start made nothing");
    server.stop().await;
}

/// The protocol's edges with `rmcp`'s own client: every tool listed with a schema; scopes
/// refused by name; bad arguments, unknown tools, malformed JSON-RPC and oversized bodies
/// refused clearly; a wait reports progress and ends when the client cancels it; a token's
/// ceiling keeps it from allowing what it sends to a person, while a deny is its to give.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rmcp_clients_meet_scopes_ceilings_progress_and_cancellation() {
    let sandbox = CliSandbox::new().unwrap();
    let cwd = sandbox.workdir().display().to_string();
    let api = FakeApi::start(
        Scenario::new()
            .reply(Reply::text("hello from the session").when_prompt("greet"))
            .reply(
                Reply::text("one two three four five six seven").when_prompt("count").hold_after(2),
            )
            .reply(
                Reply::tool_use("Bash", json!({"command": "touch ceiling.txt"}))
                    .when_prompt("list")
                    .times(2),
            )
            .reply(Reply::text("listed").when_tool_result().times(2)),
    )
    .await
    .unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let server = Server::start(store, &api, &sandbox).await;
    let reader = make_token(&server, "watcher", Scope::Read, None).await;
    let operator = make_token(&server, "planner", Scope::Operate, None).await;
    let bounded = make_token(&server, "bounded", Scope::Operate, Some(CEILING)).await;

    let (client, _) = connect(&server, &operator).await;
    let info = client.peer_info().expect("initialized");
    assert_eq!(info.server_info.as_ref().map(|i| i.name.as_str()), Some("switchboard"));
    let tools = client.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|tool| tool.name.as_ref()).collect();
    for expected in [
        "list_sessions",
        "get_session",
        "read_session",
        "session_diff",
        "list_files",
        "read_file",
        "start_session",
        "send_message",
        "interrupt",
        "stop_session",
        "wait_for_session",
        "list_permissions",
        "answer_permission",
        "usage",
    ] {
        assert!(names.contains(&expected), "{expected} missing from {names:?}");
    }
    let start = tools.iter().find(|tool| tool.name == "start_session").unwrap();
    assert!(start.description.as_deref().unwrap_or("").contains("wait_for_session"));
    assert_eq!(start.input_schema["required"], json!(["cwd"]), "{:?}", start.input_schema);

    // Start, wait (with progress), read.
    let started =
        ok(&call(&client, "start_session", json!({"cwd": cwd, "prompt": "greet me"})).await);
    let session = started["session"].as_str().unwrap().to_owned();
    let waited = ok(&call(&client, "wait_for_session", json!({"session": &session[..8]})).await);
    assert_eq!(waited["why"], "answered", "{waited}");
    assert_eq!(waited["answer"], "hello from the session");
    let read = ok(&call(&client, "read_session", json!({"session": session})).await);
    assert_eq!(read["turns"][0]["prompt"], "greet me");
    assert_eq!(read["turns"][0]["result"], "hello from the session");
    let listed = ok(&call(&client, "list_sessions", json!({"query": "greet"})).await);
    assert_eq!(listed["sessions"][0]["origin"]["face"], "mcp");
    assert_eq!(listed["sessions"][0]["origin"]["token"], "planner");
    let (_, record) = server.get(&format!("/api/sessions/{session}")).await;
    assert_eq!(record["config"]["origin"], json!({"face": "mcp", "token": "planner"}));

    // Progress on a long wait, then the client cancels it.
    let sent =
        ok(&call(&client, "send_message", json!({"session": session, "text": "count to seven"}))
            .await);
    let message = sent["uuid"].as_str().unwrap().to_owned();
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(
        CallToolRequestParams::new("wait_for_session").with_arguments(
            json!({"session": session, "message": message}).as_object().cloned().unwrap(),
        ),
    ));
    let (progress_client, progress) = connect(&server, &operator).await;
    let handle = progress_client
        .send_cancellable_request(request, PeerRequestOptions::no_options())
        .await
        .unwrap();
    let told = progress.first_progress().await;
    assert!(told.message.as_deref().unwrap_or("").contains("tool calls this turn"), "{told:?}");
    tokio::time::timeout(WAIT, handle.cancel(Some("enough".into()))).await.unwrap().unwrap();
    // Held once its request is in (a release lets go of the streams that had arrived).
    api.wait_for(|request| request.last_user_text().contains("count to seven")).await;
    api.release();
    // The session goes on, and so does the client's connection.
    // Waited for by the message's uuid: its own turn's answer, never the turn before.
    let waited = ok(&call(
        &progress_client,
        "wait_for_session",
        json!({"session": session, "message": message}),
    )
    .await);
    assert_eq!(waited["answer"], "one two three four five six seven", "{waited}");

    // Scopes: a read token sees, and is refused a start, naming the scope it lacks.
    let (watcher, _) = connect(&server, &reader).await;
    ok(&call(&watcher, "get_session", json!({"session": session})).await);
    let refused = call(&watcher, "start_session", json!({"cwd": cwd})).await;
    assert_eq!(refused.is_error, Some(true));
    assert!(
        text(&refused).contains("needs a token with the operate scope; token watcher has read"),
        "{}",
        text(&refused)
    );

    // Bad input: an unknown tool, arguments that do not fit, an unknown session.
    let unknown = client
        .call_tool(CallToolRequestParams::new("format_disk"))
        .await
        .expect_err("an unknown tool");
    assert!(unknown.to_string().contains("tool not found"), "{unknown}");
    let malformed = call(&client, "start_session", json!({"directory": "/"})).await;
    assert_eq!(malformed.is_error, Some(true));
    assert!(text(&malformed).contains("unknown field `directory`"), "{}", text(&malformed));
    let missing = call(&client, "get_session", json!({"session": "nosuchsession"})).await;
    assert!(
        text(&missing).starts_with("not_found: no session nosuchsession"),
        "{}",
        text(&missing)
    );

    // Malformed JSON-RPC and an oversized body, straight over HTTP.
    let raw = |body: Vec<u8>| {
        server
            .client()
            .post(format!("{}/mcp", server.base))
            .bearer_auth(&operator)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body)
            .send()
    };
    let response = raw(b"{\"jsonrpc\": \"2.0\", \"method\": ".to_vec()).await.unwrap();
    let status = response.status();
    let said = response.text().await.unwrap();
    // The SDK answers an unreadable body 415, naming what it could not read.
    assert_eq!(status, 415, "malformed JSON-RPC: {said}");
    assert!(said.contains("EOF while parsing"), "{said}");
    let huge = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{{\"x\":\"{}\"}}}}",
        "x".repeat(switchboard_server::api::MAX_BODY_BYTES + 1)
    );
    let response = raw(huge.into_bytes()).await.unwrap();
    let status = response.status();
    let said = response.text().await.unwrap();
    assert_eq!(status, 413, "an oversized body: {said}");
    let response = server
        .client()
        .post(format!("{}/mcp", server.base))
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401, "no token");

    // A ceiling: no start beyond it; no allow of what it sends to a person; a deny is fine.
    let (agent, _) = connect(&server, &bounded).await;
    let beyond =
        call(&agent, "start_session", json!({"cwd": cwd, "permission_mode": "bypassPermissions"}))
            .await;
    assert!(
        text(&beyond)
            .contains("permission mode bypassPermissions is beyond the ceiling of token bounded"),
        "{}",
        text(&beyond)
    );
    let rule = call(
        &agent,
        "start_session",
        json!({"cwd": cwd, "policy": "[permissions]\nallow = [\"Bash\"]\n"}),
    )
    .await;
    assert!(
        text(&rule).contains("allow rule Bash is beyond the ceiling of token bounded"),
        "{}",
        text(&rule)
    );
    let file = call(&agent, "start_session", json!({"cwd": cwd, "policy": "/etc/passwd"})).await;
    assert!(
        text(&file).contains("setting policy needs a token with the admin scope"),
        "{}",
        text(&file)
    );
    let started =
        ok(&call(&agent, "start_session", json!({"cwd": cwd, "prompt": "list files"})).await);
    let bounded_session = started["session"].as_str().unwrap().to_owned();
    let waited = ok(&call(&agent, "wait_for_session", json!({"session": bounded_session})).await);
    assert_eq!(waited["why"], "permission_requested", "{waited}");
    let request_id = waited["pending_permissions"][0]["request_id"].as_str().unwrap().to_owned();
    let allow = json!({"session": bounded_session, "request_id": request_id, "behavior": "allow"});
    let refused = call(&agent, "answer_permission", allow.clone()).await;
    assert!(
        text(&refused).contains("token bounded cannot allow this Bash call"),
        "{}",
        text(&refused)
    );
    // The same over REST: one check for every face.
    refused_as(
        &server,
        &bounded,
        &format!("/api/sessions/{bounded_session}/permissions/{request_id}"),
        json!({"behavior": "allow"}),
    )
    .await;
    // No "always", and no link that would let whoever opens it allow.
    refused_as(
        &server,
        &bounded,
        &format!("/api/sessions/{bounded_session}/permissions/{request_id}"),
        json!({"behavior": "allow", "remember": true}),
    )
    .await;
    refused_as(
        &server,
        &bounded,
        &format!("/api/sessions/{bounded_session}/permissions/{request_id}/link"),
        Value::Null,
    )
    .await;
    // No device for one-tap links, no resume in place of another's conversation.
    refused_as(
        &server,
        &bounded,
        "/api/push/subscriptions",
        json!({"endpoint": "https://push.example.invalid/x", "keys": {"p256dh": "x", "auth": "y"}}),
    )
    .await;
    let body = refused_as(
        &server,
        &bounded,
        "/api/sessions",
        json!({"cwd": cwd, "resume": "00000000-0000-4000-8000-000000000000"}),
    )
    .await;
    assert!(body["error"]["message"].as_str().unwrap().contains("never resumes one in place"));
    // Sessions not under its ceiling it watches, and never operates.
    ok(&call(&agent, "get_session", json!({"session": session})).await);
    let theirs = call(&agent, "send_message", json!({"session": session, "text": "hi"})).await;
    assert!(
        text(&theirs).contains("operates only the sessions started under it"),
        "{}",
        text(&theirs)
    );
    let body = refused_as(
        &server,
        &bounded,
        &format!("/api/sessions/{session}/permission-mode"),
        json!({"mode": "bypassPermissions"}),
    )
    .await;
    assert!(body["error"]["message"].as_str().unwrap().contains("operates only"), "{body}");
    let deny = json!({"session": bounded_session, "request_id": request_id, "behavior": "deny", "message": "not now"});
    ok(&call(&agent, "answer_permission", deny).await);
    // A session under the ceiling cannot be put in a mode beyond it, by anyone.
    let (status, body) = server
        .post(
            &format!("/api/sessions/{bounded_session}/permission-mode"),
            json!({"mode": "bypassPermissions"}),
        )
        .await;
    assert_eq!(status, 403, "{body}");

    // A token with a ceiling cannot be admin; a ceiling that is no policy is refused.
    let (status, body) = server
        .post("/api/tokens", json!({"name": "root2", "scope": "admin", "ceiling": CEILING}))
        .await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = server
        .post("/api/tokens", json!({"name": "bad", "scope": "operate", "ceiling": "allow = 3"}))
        .await;
    assert_eq!(status, 400, "{body}");
    let _ = TOKEN;
    server.stop().await;
}
