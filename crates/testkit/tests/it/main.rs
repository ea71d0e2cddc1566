//! The test kit's own tests: the real CLIs accept the fake API.

use std::process::Stdio;

use serde_json::json;
use switchboard_testkit::{real_cli, CliSandbox, CliVersion, FakeApi, Reply, Scenario};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// Runs one prompt through the real CLI directly (without Switchboard) and returns its stdout
/// lines.
async fn run_cli(
    version: CliVersion,
    api: &FakeApi,
    sandbox: &CliSandbox,
    prompt: &str,
) -> Vec<serde_json::Value> {
    let mut child = sandbox
        .cli_command(&real_cli(version), &api.base_url())
        .args(["--permission-prompt-tool", "stdio", "--include-partial-messages"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let line = json!({"type":"user","message":{"role":"user","content":prompt},"parent_tool_use_id":null,"session_id":""});
    stdin.write_all(format!("{line}\n").as_bytes()).await.unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut out = Vec::new();
    while let Some(line) = lines.next_line().await.unwrap() {
        let value: serde_json::Value = serde_json::from_str(&line).unwrap();
        let done = value["type"] == "result";
        out.push(value);
        if done {
            break;
        }
    }
    drop(stdin);
    let status = child.wait().await.unwrap();
    assert!(status.success(), "claude exited with {status}");
    out
}

#[tokio::test]
async fn both_real_clis_stream_a_scripted_answer() {
    for version in CliVersion::ALL {
        let api = FakeApi::start(Scenario::new().reply(Reply::text("Hello from the fake API.")))
            .await
            .unwrap();
        let sandbox = CliSandbox::new().unwrap();
        let lines = run_cli(version, &api, &sandbox, "Say hello").await;
        let result = lines.last().unwrap();
        assert_eq!(result["result"], "Hello from the fake API.", "{version:?}");
        assert!(
            lines.iter().any(|line| line["type"] == "stream_event"),
            "{version:?}: no stream events"
        );
        let requests = api.conversation_requests();
        assert_eq!(requests.len(), 1, "{version:?}");
        assert!(requests[0].last_user_text().contains("Say hello"));
        assert_eq!(api.unused_replies(), 0);
    }
}
