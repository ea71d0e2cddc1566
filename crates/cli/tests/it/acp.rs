//! `switchboard acp` with a real ACP client: the Agent Client Protocol's reference SDK (npm
//! `@agentclientprotocol/sdk`, in `e2e/acp.test.mjs`) drives it as an editor does, against a
//! daemon running the real Claude Code CLI on the fake API.

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};
use switchboard_testkit::{CliSandbox, FakeApi, Reply, Scenario};

use crate::serve::start_daemon;

/// Runs `e2e/acp.test.mjs` with `env`; whether it passed, and what it printed.
#[allow(clippy::disallowed_methods)] // runs node (the ACP client), not the Claude CLI
async fn run_client(env: &[(&str, String)]) -> (bool, String) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    assert!(
        root.join("e2e/node_modules/@agentclientprotocol/sdk").exists(),
        "the ACP test needs the reference client in e2e/node_modules: run scripts/install-browser.sh"
    );
    let run = tokio::process::Command::new("node")
        .arg(root.join("e2e/acp.test.mjs"))
        .current_dir(root.join("e2e"))
        .envs(env.iter().map(|(name, value)| (*name, value.as_str())))
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(600), run)
        .await
        .expect("the ACP client finished within 10 minutes")
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), said)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_editor_drives_sessions_over_acp_and_shares_their_approvals() {
    let sandbox = CliSandbox::new().unwrap();
    let notes = sandbox.workdir().join("notes.txt");
    std::fs::write(&notes, "color = 1\n").unwrap();
    let notes = notes.display().to_string();
    let api = FakeApi::start(
        Scenario::new()
            .reply(Reply::text("Streaming from Switchboard over ACP.").when_prompt("STREAM"))
            .reply(
                Reply::tool_use(
                    "Edit",
                    json!({"file_path": notes, "old_string": "color = 1", "new_string": "color = 2"}),
                )
                .when_prompt("EDIT"),
            )
            .reply(Reply::text("Edited.").when_tool_result_contains("notes.txt"))
            .reply(Reply::tool_use("Bash", json!({"command": "touch elsewhere.txt"})).when_prompt("TOUCH"))
            .reply(Reply::text("Touched.").when_tool_result())
            .reply(Reply::text("Slowly, word by word, never finishing").when_prompt("SLOW").hold_after(2)),
    )
    .await
    .unwrap();
    let data = tempfile::tempdir().unwrap();
    let mut daemon = start_daemon(data.path(), &api, &sandbox, &[]).await;
    let token = std::fs::read_to_string(data.path().join("token")).unwrap().trim().to_owned();

    let (passed, said) = run_client(&[
        ("SWITCHBOARD_BIN", env!("CARGO_BIN_EXE_switchboard").to_owned()),
        ("DATA_DIR", data.path().display().to_string()),
        ("DAEMON_URL", daemon.url.clone()),
        ("DAEMON_TOKEN", token.clone()),
        ("WORKDIR", sandbox.workdir().display().to_string()),
    ])
    .await;
    api.release();
    assert!(passed, "the ACP client failed:\n{said}");
    assert!(sandbox.file("elsewhere.txt").exists(), "the call answered elsewhere ran");

    // The session is the daemon's, started through ACP.
    let id = said.lines().find_map(|line| line.strip_prefix("SESSION ")).expect("its id").trim();
    let session: Value = crate::http_client()
        .get(format!("{}/api/sessions/{id}", daemon.url))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(session["config"]["origin"], json!({"face": "acp", "token": "admin"}), "{session}");
    let _ = daemon.child.kill().await;
}

/// What an editor sends that is not the protocol is answered with the protocol's errors, and
/// the agent goes on: a line that is not JSON, a request before `initialize`, a method it does
/// not have, a prompt for a session it does not have open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_from_an_editor_gets_json_rpc_errors() {
    let sandbox = CliSandbox::new().unwrap();
    let api = FakeApi::start(Scenario::new()).await.unwrap();
    let data = tempfile::tempdir().unwrap();
    let mut daemon = start_daemon(data.path(), &api, &sandbox, &[]).await;
    let mut agent = StdioAgent::spawn(data.path(), &[]);
    let mut exchange = async |line: &str| agent.exchange(line).await;
    let garbage = exchange("{this is not json").await;
    assert_eq!(garbage["error"]["code"], -32700, "{garbage}");
    let early = exchange(
        r#"{"jsonrpc":"2.0","id":0,"method":"session/new","params":{"cwd":"/","mcpServers":[]}}"#,
    )
    .await;
    assert_eq!(early["error"]["code"], -32600, "{early}");
    let init = exchange(
        r#"{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{}}}"#,
    )
    .await;
    assert_eq!(init["result"]["protocolVersion"], 1, "{init}");
    let unknown =
        exchange(r#"{"jsonrpc":"2.0","id":1,"method":"session/teleport","params":{}}"#).await;
    assert_eq!(unknown["error"]["code"], -32601, "{unknown}");
    let stray = exchange(
        r#"{"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":"nope","prompt":[{"type":"text","text":"hi"}]}}"#,
    )
    .await;
    assert!(
        stray["error"]["data"].as_str().unwrap_or("").contains("no session nope is open here"),
        "{stray}"
    );
    let _ = agent.child.kill().await;
    let _ = daemon.child.kill().await;
}

/// An editor that starts `switchboard acp` with no daemon running gets one: started on the
/// data directory, it answers the editor's session, and outlives the agent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_daemon_running_one_is_started_on_demand() {
    let sandbox = CliSandbox::new().unwrap();
    let api = FakeApi::start(Scenario::new().reply(Reply::text("On demand.").when_prompt("HELLO")))
        .await
        .unwrap();
    let data = tempfile::tempdir().unwrap();
    let _daemon = StartedHere(data.path().to_owned());
    let claude = switchboard_testkit::real_cli(switchboard_testkit::CliVersion::V2_1_330);
    let mut env: Vec<(String, String)> = sandbox.env(&api.base_url()).into_iter().collect();
    env.push(("SWITCHBOARD_LISTEN".into(), "127.0.0.1:0".into()));
    env.push(("SWITCHBOARD_CLAUDE".into(), claude.display().to_string()));
    let mut agent = StdioAgent::spawn(data.path(), &env);
    let mut exchange = async |line: String| agent.exchange(&line).await;
    let init = exchange(
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{}}}"#.to_owned(),
    )
    .await;
    assert_eq!(init["result"]["protocolVersion"], 1, "{init}");
    let cwd = sandbox.workdir().display().to_string();
    let new = exchange(
        json!({"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": cwd, "mcpServers": []}})
            .to_string(),
    )
    .await;
    let id = new["result"]["sessionId"].as_str().unwrap_or_else(|| panic!("{new}")).to_owned();
    let prompt = json!({"jsonrpc": "2.0", "id": 3, "method": "session/prompt",
        "params": {"sessionId": id, "prompt": [{"type": "text", "text": "HELLO there"}]}});
    let ended = exchange(prompt.to_string()).await;
    assert_eq!(ended["result"]["stopReason"], "end_turn", "{ended}");

    // The daemon it started is on the data directory, and outlives the agent.
    let info: Value =
        serde_json::from_str(&std::fs::read_to_string(data.path().join("daemon.json")).unwrap())
            .unwrap();
    let _ = agent.child.kill().await;
    let url = info["url"].as_str().unwrap();
    let token = std::fs::read_to_string(data.path().join("token")).unwrap();
    let session: Value = crate::http_client()
        .get(format!("{url}/api/sessions/{id}"))
        .bearer_auth(token.trim())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(session["config"]["origin"]["face"], "acp", "{session}");
}

/// `switchboard acp` on the data directory, spoken to line by line as an editor would.
struct StdioAgent {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
}

impl StdioAgent {
    /// Started with `env` besides this process's (never its token or daemon address).
    #[allow(clippy::disallowed_methods)] // tests run our own binary
    fn spawn(data: &Path, env: &[(String, String)]) -> StdioAgent {
        use tokio::io::AsyncBufReadExt;
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchboard"))
            .args(["acp", "--data-dir"])
            .arg(data)
            .env_remove("SWITCHBOARD_TOKEN")
            .env_remove("SWITCHBOARD_URL")
            .envs(env.iter().cloned())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        StdioAgent { child, stdin, lines }
    }

    /// Sends `line` and reads the answer, within 90 s (the notifications before it, which
    /// carry no `id`, are not the answer).
    async fn exchange(&mut self, line: &str) -> Value {
        use tokio::io::AsyncWriteExt;
        self.stdin.write_all(format!("{line}\n").as_bytes()).await.unwrap();
        loop {
            let answer = tokio::time::timeout(Duration::from_secs(90), self.lines.next_line())
                .await
                .expect("answered in time")
                .unwrap()
                .expect("a line");
            let answer: Value = serde_json::from_str(&answer).unwrap();
            if answer.get("id").is_some() {
                return answer;
            }
        }
    }
}

/// The daemon `switchboard acp` started in a data directory: stopped (SIGTERM) when the test
/// ends, however it ends, and waited for (within seconds) before the directory goes.
struct StartedHere(std::path::PathBuf);

impl Drop for StartedHere {
    fn drop(&mut self) {
        let Ok(info) = std::fs::read_to_string(self.0.join("daemon.json")) else { return };
        let Some(pid) =
            serde_json::from_str::<Value>(&info).ok().and_then(|info| info["pid"].as_u64())
        else {
            return;
        };
        let pid = nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap_or(i32::MAX));
        if nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).is_err() {
            return;
        }
        let gone = || {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |stat| {
                stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z'))
            })
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !gone() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}
