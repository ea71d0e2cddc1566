//! Rules on who started a turn and where an MCP tool comes from, against the real CLI and the
//! fake API: the same Bash call runs unasked in a person's turn and waits for a person in a
//! trigger's; an MCP server the session configured is trusted and one the repository
//! configured is denied, by the source the CLI reports; a CLI that reports no source is never
//! allowed what a source rule would decide; a `Read(.env)` deny holds for the shell command
//! that reads it.

use std::sync::Arc;

use serde_json::{json, Value};
use switchboard_server::schedules::signature;
use switchboard_store::{MemoryStore, Store};
use switchboard_testkit::{CliSandbox, FakeApi, Reply, Scenario};

use crate::{Server, TOKEN};

const ORIGIN_POLICY: &str = r#"
[permissions]
allow = ["Bash(echo:*)"]

[[permissions.when]]
origin = ["trigger", "agent"]
ask = ["Bash"]
"#;

/// The session's events, from its log, of kind `kind`.
async fn events_of(server: &Server, id: &str, kind: &str) -> Vec<Value> {
    let (status, page) = server.get(&format!("/api/sessions/{id}/events?after=0")).await;
    assert_eq!(status, 200, "{page}");
    page.as_array()
        .or_else(|| page["events"].as_array())
        .unwrap_or_else(|| panic!("{page}"))
        .iter()
        .filter(|event| event["event"]["event"] == kind)
        .map(|event| event["event"].clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_on_origin_asks_for_a_triggers_bash_and_lets_a_persons_run() {
    let api = FakeApi::start(
        Scenario::new()
            .reply(
                Reply::tool_use("Bash", json!({"command": "echo by-hand"})).when_prompt("PERSON"),
            )
            .reply(
                Reply::tool_use("Bash", json!({"command": "echo by-hook"})).when_prompt("HOOKED"),
            )
            .reply(Reply::text("done").when_tool_result_contains("by-").times(2)),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let server = Server::start(store, &api, &sandbox).await;

    // A person: the web UI's cookie, from the daemon's own page.
    let response = server
        .client()
        .post(format!("{}/api/sessions", server.base))
        .header("cookie", format!("switchboard_token={TOKEN}"))
        .header("origin", &server.base)
        .json(&json!({"cwd": sandbox.workdir(), "prompt": "PERSON at the page", "policy": ORIGIN_POLICY}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 201);
    let made: Value = response.json().await.unwrap();
    let id = made["id"].as_str().unwrap().to_owned();
    let mut ws = server.ws(&format!("/api/sessions/{id}/subscribe?after=0")).await;
    let frames = ws.until(crate::is_result).await;
    assert_eq!(frames.last().unwrap()["event"]["line"]["result"], "done");
    assert!(
        !frames.iter().any(|frame| frame["event"]["event"] == "permission_requested"),
        "a person's turn runs what the policy allows"
    );
    let decided = events_of(&server, &id, "permission_decided").await;
    assert!(
        decided.iter().all(|event| event["origin"] == "person"),
        "each decision says whose turn it was: {decided:?}"
    );

    // A trigger: the same call waits for a person, saying which rule and which origin.
    let (status, made) = server
        .post(
            "/api/triggers",
            json!({"name": "hooked", "events": ["issues"], "task": {
                "cwd": sandbox.workdir(), "prompt": "HOOKED {{issue.title}}", "policy": ORIGIN_POLICY,
            }}),
        )
        .await;
    assert_eq!(status, 201, "{made}");
    let secret = made["secret"].as_str().unwrap().to_owned();
    let body = json!({"action": "opened", "issue": {"number": 1, "title": "go"}}).to_string();
    let delivered: Value = server
        .client()
        .post(format!("{}/hooks/hooked", server.base))
        .header("content-type", "application/json")
        .header("x-github-delivery", "d1")
        .header("x-github-event", "issues")
        .header("x-hub-signature-256", signature::sign(&secret, body.as_bytes()))
        .body(body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(delivered["outcome"], "started", "{delivered}");
    let run = delivered["session"].as_str().unwrap().to_owned();
    let mut ws = server.ws(&format!("/api/sessions/{run}/subscribe?after=0")).await;
    let frames = ws.until(|frame| frame["event"]["event"] == "permission_requested").await;
    let asked = &frames.last().unwrap()["event"];
    assert_eq!(asked["input"]["command"], "echo by-hook");
    assert_eq!(asked["origin"], "trigger", "{asked}");
    assert_eq!(asked["rule"], "Bash (when origin trigger or agent)", "{asked}");
    let request_id = asked["request_id"].as_str().unwrap();
    let (status, answered) = server
        .post(
            &format!("/api/sessions/{run}/permissions/{request_id}"),
            json!({"behavior": "allow"}),
        )
        .await;
    assert_eq!(status, 200, "{answered}");
    let frames = ws.until(crate::is_result).await;
    assert_eq!(frames.last().unwrap()["event"]["line"]["result"], "done");
    let decided = events_of(&server, &run, "permission_decided").await;
    assert_eq!(decided.len(), 1, "{decided:?}");
    assert_eq!(
        (&decided[0]["origin"], &decided[0]["behavior"]),
        (&json!("trigger"), &json!("allow"))
    );
    server.stop().await;
}

const SOURCE_POLICY: &str = r#"
[permissions]
default = "ask"

[[permissions.when]]
mcp_source = ["project"]
deny = ["mcp__*"]

[[permissions.when]]
mcp_source = ["dynamic"]
allow = ["mcp__*"]
"#;

/// The tests' MCP server (`e2e/mcp-echo.mjs`) twice: as the session's own (`--mcp-config`,
/// which Claude Code calls `dynamic`) and as the repository's (`.mcp.json`, `project`).
fn mcp_servers(sandbox: &CliSandbox) -> String {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../e2e/mcp-echo.mjs");
    let server = json!({"command": "node", "args": [script]});
    std::fs::write(
        sandbox.workdir().join(".mcp.json"),
        json!({"mcpServers": {"proj": server}}).to_string(),
    )
    .unwrap();
    let settings = sandbox.workdir().join(".claude");
    std::fs::create_dir_all(&settings).unwrap();
    std::fs::write(
        settings.join("settings.local.json"),
        json!({"enableAllProjectMcpServers": true}).to_string(),
    )
    .unwrap();
    json!({"mcpServers": {"probe": server}}).to_string()
}

/// 2.1.330 says where each MCP server was configured (its `init`, and each request): the
/// session's own server's tool runs unasked, the repository's is denied, each decision naming
/// its rule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_tool_is_trusted_or_denied_by_where_its_server_was_configured() {
    let api = FakeApi::start(
        Scenario::new()
            .reply(
                Reply::tool_use("mcp__probe__echo", json!({"text": "from-own"}))
                    .when_prompt("ECHO"),
            )
            .reply(
                Reply::tool_use("mcp__proj__echo", json!({"text": "from-repo"}))
                    .when_tool_result_contains("from-own"),
            )
            .reply(Reply::text("done").when_tool_result_contains("mcp_source project")),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let own = mcp_servers(&sandbox);
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let server = Server::start(store, &api, &sandbox).await;
    let (status, made) = server
        .post(
            "/api/sessions",
            json!({"cwd": sandbox.workdir(), "prompt": "ECHO both", "mcp_config": [own],
                   "policy": SOURCE_POLICY}),
        )
        .await;
    assert_eq!(status, 201, "{made}");
    let id = made["id"].as_str().unwrap().to_owned();
    let mut ws = server.ws(&format!("/api/sessions/{id}/subscribe?after=0")).await;
    let frames = ws.until(crate::is_result).await;
    assert_eq!(frames.last().unwrap()["event"]["line"]["result"], "done");
    assert!(!frames.iter().any(|frame| frame["event"]["event"] == "permission_requested"));
    let decided = events_of(&server, &id, "permission_decided").await;
    let by_tool = |tool: &str| {
        decided
            .iter()
            .find(|event| event["tool_name"] == tool)
            .unwrap_or_else(|| panic!("{tool} decided: {decided:?}"))
            .clone()
    };
    let own = by_tool("mcp__probe__echo");
    assert_eq!(own["behavior"], "allow", "{own}");
    assert_eq!(own["by"]["rule"], "mcp__* (when mcp_source dynamic)", "{own}");
    let repo = by_tool("mcp__proj__echo");
    assert_eq!(repo["behavior"], "deny", "{repo}");
    assert_eq!(repo["by"]["rule"], "mcp__* (when mcp_source project)", "{repo}");
    server.stop().await;
}

/// 2.1.250 reports no source: what a source rule would decide is put to a person, never
/// allowed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cli_that_reports_no_source_gets_no_source_rules_allow() {
    let api = FakeApi::start(
        Scenario::new()
            .reply(Reply::tool_use("mcp__probe__echo", json!({"text": "x"})).when_prompt("ECHO")),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let own = mcp_servers(&sandbox);
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let server = Server::start_with(store, &api, &sandbox, |config| {
        config.claude = Some(switchboard_testkit::sandbox::real_cli_of("2.1.250"));
    })
    .await;
    let (status, made) = server
        .post(
            "/api/sessions",
            json!({"cwd": sandbox.workdir(), "prompt": "ECHO", "mcp_config": [own],
                   "policy": SOURCE_POLICY}),
        )
        .await;
    assert_eq!(status, 201, "{made}");
    let id = made["id"].as_str().unwrap().to_owned();
    let mut ws = server.ws(&format!("/api/sessions/{id}/subscribe?after=0")).await;
    let frames = ws.until(|frame| frame["event"]["event"] == "permission_requested").await;
    let asked = &frames.last().unwrap()["event"];
    assert_eq!(asked["tool_name"], "mcp__probe__echo");
    assert_eq!(asked["rule"], "mcp__* (when mcp_source project)", "{asked}");
    assert!(asked["origin"].is_string(), "whose turn is still said: {asked}");
    server.stop().await;
}

/// A `Read(.env)` deny holds for a shell command that reads the file, with Bash allowed: the
/// real CLI's call is refused at the policy's hook, the model told the rule, the file unread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_deny_holds_for_the_shell_command_that_reads_the_file() {
    let api = FakeApi::start(
        Scenario::new()
            .reply(
                Reply::tool_use("Bash", json!({"command": "grep -rn TOKEN ."})).when_prompt("FIND"),
            )
            .reply(Reply::text("refused").when_tool_result_contains("Read(.env)")),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    std::fs::write(sandbox.workdir().join(".env"), "TOKEN=s3cr3t-from-env\n").unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let server = Server::start(store, &api, &sandbox).await;
    let policy = "[permissions]\nallow = [\"Bash\"]\ndeny = [\"Read(.env)\"]";
    let (status, made) = server
        .post(
            "/api/sessions",
            json!({"cwd": sandbox.workdir(), "prompt": "FIND it", "policy": policy}),
        )
        .await;
    assert_eq!(status, 201, "{made}");
    let id = made["id"].as_str().unwrap().to_owned();
    let mut ws = server.ws(&format!("/api/sessions/{id}/subscribe?after=0")).await;
    let frames = ws.until(crate::is_result).await;
    assert_eq!(frames.last().unwrap()["event"]["line"]["result"], "refused");
    let decided = events_of(&server, &id, "permission_decided").await;
    assert_eq!(decided.len(), 1, "{decided:?}");
    assert_eq!(decided[0]["behavior"], "deny");
    assert_eq!(decided[0]["by"]["rule"], "Read(.env)");
    let everything = serde_json::to_string(&frames).unwrap();
    assert!(!everything.contains("s3cr3t-from-env"), "the file was never read");
    server.stop().await;
}
