//! `switchboard hooks install`: a Claude Code session Switchboard did not start (a plain
//! `claude -p`) shows in it, and its tool calls wait for a person there; uninstalling leaves
//! the settings as they were; a hook that cannot reach the daemon fails as installed.

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};
use switchboard_testkit::{real_cli, CliSandbox, CliVersion, FakeApi, Reply, Scenario};

use crate::serve::{http, session_with_transport, start_daemon, wait_session};

/// `switchboard hooks ARGS --data-dir DATA` with the sandbox's HOME: its exit status and
/// output.
#[allow(clippy::disallowed_methods)] // tests run our own binary
async fn hooks(sandbox: &CliSandbox, data: &Path, args: &[&str]) -> (Option<i32>, String) {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .arg("hooks")
        .args(args)
        .arg("--data-dir")
        .arg(data)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", sandbox.home())
        .output()
        .await
        .unwrap();
    status_and_text(&output)
}

/// A plain `claude -p PROMPT` in the sandbox, as a person's script would run it (not through
/// Switchboard).
/// What a process ended with, and all it printed.
fn status_and_text(output: &std::process::Output) -> (Option<i32>, String) {
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.code(), text)
}

#[allow(clippy::disallowed_methods)] // the test runs the CLI by hand, on purpose
fn claude_p(sandbox: &CliSandbox, api: &FakeApi, prompt: &str) -> tokio::process::Child {
    tokio::process::Command::new(real_cli(CliVersion::V2_1_330))
        .args(["-p", prompt])
        .current_dir(sandbox.workdir())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(sandbox.env(&api.base_url()))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

/// Waits (bounded) for the CLI to end: its status and what it printed.
async fn ended(child: tokio::process::Child) -> (Option<i32>, String) {
    let output = tokio::time::timeout(Duration::from_secs(90), child.wait_with_output())
        .await
        .expect("the CLI ends")
        .unwrap();
    status_and_text(&output)
}

/// The one session the daemon follows through hooks, once it shows.
async fn external_session(url: &str, token: &str) -> Value {
    session_with_transport(url, token, "external").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claude_switchboard_did_not_start_waits_for_a_person_through_its_installed_hooks() {
    let api = FakeApi::start(
        Scenario::new()
            .reply(
                Reply::tool_use(
                    "Bash",
                    json!({"command": "touch approved.txt", "description": "Make a file"}),
                )
                .when_prompt("ASK"),
            )
            .reply(Reply::text("Made it.").when_tool_result())
            .reply(
                Reply::tool_use(
                    "Bash",
                    json!({"command": "touch closed.txt", "description": "Make a file"}),
                )
                .when_prompt("CLOSED"),
            )
            .reply(
                Reply::tool_use(
                    "Bash",
                    json!({"command": "touch open.txt", "description": "Make a file"}),
                )
                .when_prompt("OPEN"),
            )
            .fallback("Nothing to say."),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let policy = sandbox.file("policy.toml");
    std::fs::write(&policy, "[permissions]\ndefault = \"ask\"\nask = [\"Bash(touch:*)\"]\n")
        .unwrap();
    let data = tempfile::tempdir().unwrap();
    let policy_arg = policy.display().to_string();
    let daemon =
        start_daemon(data.path(), &api, &sandbox, &["--external-policy", &policy_arg]).await;
    let token = std::fs::read_to_string(data.path().join("token")).unwrap().trim().to_owned();

    // The person's own settings, formatted their way: put back byte for byte at the end.
    let settings = sandbox.home().join(".claude/settings.json");
    std::fs::create_dir_all(settings.parent().unwrap()).unwrap();
    let theirs = "{\n    \"permissions\": { \"allow\": [\"Bash(touch open.txt)\", \"Bash(touch closed.txt)\"] },\n    \"hooks\": {\"PreToolUse\": [{\"matcher\": \"Read\", \"hooks\": [{\"type\": \"command\", \"command\": \"true\"}]}]}\n}";
    std::fs::write(&settings, theirs).unwrap();

    // Without --yes and no terminal to ask at: nothing is written.
    let (code, said) = hooks(&sandbox, data.path(), &["install"]).await;
    assert_eq!(code, Some(2), "{said}");
    assert!(said.contains("--yes"), "{said}");
    assert!(said.contains("+") && said.contains("PreToolUse"), "the diff is shown: {said}");
    assert_eq!(std::fs::read_to_string(&settings).unwrap(), theirs);
    let (code, said) = hooks(&sandbox, data.path(), &["install", "--yes"]).await;
    assert_eq!(code, Some(0), "{said}");
    let installed = std::fs::read_to_string(&settings).unwrap();
    let parsed: Value = serde_json::from_str(&installed).unwrap();
    assert_eq!(parsed["hooks"]["PreToolUse"][0]["matcher"], "Read", "theirs kept: {installed}");
    assert_eq!(parsed["hooks"]["PreToolUse"].as_array().unwrap().len(), 2, "{installed}");
    let (code, said) = hooks(&sandbox, data.path(), &["install", "--yes"]).await;
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("nothing changed"), "{said}");
    assert_eq!(
        std::fs::read_to_string(&settings).unwrap(),
        installed,
        "installing again changes nothing"
    );
    let (_, said) = hooks(&sandbox, data.path(), &["status", "--json"]).await;
    let status: Value = serde_json::from_str(said.trim()).unwrap();
    assert_eq!(status["installed"], true, "{status}");
    assert_eq!(status["fail_open"], false, "{status}");

    // A plain `claude -p`: it shows as it starts, and its Bash call waits for a person.
    let cli = claude_p(&sandbox, &api, "ASK for a file");
    let session = external_session(&daemon.url, &token).await;
    let id = session["id"].as_str().unwrap().to_owned();
    let waiting = wait_session(&daemon.url, &token, &id, |s| {
        !s["pending_permissions"].as_array().unwrap().is_empty()
    })
    .await;
    let asked = &waiting["pending_permissions"][0];
    assert_eq!(asked["tool_name"], "Bash", "{asked}");
    assert_eq!(asked["input"]["command"], "touch approved.txt");
    assert!(!sandbox.file("approved.txt").exists(), "nothing ran before the answer");
    // Another process writes its transcript: nothing is typed into it.
    let refused = crate::http_client()
        .post(format!("{}/api/sessions/{id}/messages", daemon.url))
        .bearer_auth(&token)
        .json(&json!({"content": "hello"}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status().as_u16(), 409);
    let refused: Value = refused.json().await.unwrap();
    assert!(refused.to_string().contains("writes its transcript"), "{refused}");
    // Claude Code lists its process, which the session follows; nor is it resumed or forked.
    let claude_id = session["claude_session_id"].as_str().unwrap().to_owned();
    let agents = http(&daemon.url, &token, reqwest::Method::GET, "/api/claude/agents", None).await;
    let agent = agents
        .as_array()
        .unwrap()
        .iter()
        .find(|agent| agent["session_id"] == claude_id.as_str())
        .unwrap_or_else(|| panic!("listed: {agents}"));
    assert_eq!(agent["switchboard_session"], id.as_str(), "{agent}");
    assert_eq!(agent["kind"], "interactive", "{agent}");
    let pid = agent["pid"].as_u64().unwrap();
    for fork in [false, true] {
        let taken = crate::http_client()
            .post(format!("{}/api/sessions", daemon.url))
            .bearer_auth(&token)
            .json(&json!({"cwd": sandbox.workdir(), "resume": claude_id, "fork": fork}))
            .send()
            .await
            .unwrap();
        assert_eq!(taken.status().as_u16(), 409, "fork: {fork}");
        let taken: Value = taken.json().await.unwrap();
        assert_eq!(taken["error"]["code"], "held_elsewhere", "{taken}");
        assert!(taken.to_string().contains(&format!("process {pid} (claude 2.1.330")), "{taken}");
    }
    let request_id = asked["request_id"].as_str().unwrap();
    let answered = http(
        &daemon.url,
        &token,
        reqwest::Method::POST,
        &format!("/api/sessions/{id}/permissions/{request_id}"),
        Some(json!({"behavior": "allow"})),
    )
    .await;
    assert!(answered.get("error").is_none(), "{answered}");
    let (code, said) = ended(cli).await;
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("Made it."), "{said}");
    assert!(sandbox.file("approved.txt").exists(), "the approved call ran");
    // Its log has the call, the person's answer and the result, as any session's.
    let ended_session = wait_session(&daemon.url, &token, &id, |s| s["state"] == "exited").await;
    assert!(ended_session["cost_usd"].as_f64().is_some(), "{ended_session}");
    let events = crate::serve::session_events(&daemon.url, &token, &id).await;
    let log = events.to_string();
    assert!(log.contains("touch approved.txt"), "the call is in the log");
    assert!(log.contains("can_use_tool") && log.contains("allow"), "the answer is in the log");
    assert!(log.contains("Made it."), "the transcript is in the log");

    // A session the daemon runs itself fires the same hooks: they leave it to its own policy.
    let started = http(
        &daemon.url,
        &token,
        reqwest::Method::POST,
        "/api/sessions",
        Some(json!({"cwd": sandbox.workdir(), "prompt": "HELLO there"})),
    )
    .await;
    let own = started["id"].as_str().unwrap_or_else(|| panic!("{started}")).to_owned();
    wait_session(&daemon.url, &token, &own, |s| s["state"] == "idle").await;
    let sessions = http(&daemon.url, &token, reqwest::Method::GET, "/api/sessions", None).await;
    let externals = sessions
        .as_array()
        .unwrap()
        .iter()
        .filter(|session| session["config"]["transport"] == "external")
        .count();
    assert_eq!(externals, 1, "not followed a second time: {sessions}");

    // The hook's address needs the daemon's token.
    for key in [None, Some("forged")] {
        let mut request = crate::http_client()
            .post(format!("{}/hooks/claude", daemon.url))
            .json(&json!({"hook_event_name": "PreToolUse", "session_id": "s"}));
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        assert_eq!(request.send().await.unwrap().status().as_u16(), 401, "{key:?}");
    }

    // The daemon gone: installed to fail closed, the call is blocked, though the person's own
    // settings allow it; installed to fail open, the CLI decides as it would alone.
    let mut daemon = daemon;
    daemon.child.kill().await.unwrap();
    daemon.child.wait().await.unwrap();
    let (code, said) = ended(claude_p(&sandbox, &api, "CLOSED make it")).await;
    assert_eq!(code, Some(0), "{said}");
    assert!(!sandbox.file("closed.txt").exists(), "blocked: {said}");
    let requests = api.conversation_requests();
    assert!(
        requests.iter().any(|request| request.body.to_string().contains("could not decide")),
        "the model read why"
    );
    let (code, said) = hooks(&sandbox, data.path(), &["install", "--yes", "--fail-open"]).await;
    assert_eq!(code, Some(0), "{said}");
    let (code, said) = ended(claude_p(&sandbox, &api, "OPEN make it")).await;
    assert_eq!(code, Some(0), "{said}");
    assert!(sandbox.file("open.txt").exists(), "the CLI's own allow rule ran it: {said}");

    // Uninstalled: the file exactly as the person had it.
    let (code, said) = hooks(&sandbox, data.path(), &["uninstall", "--yes"]).await;
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("as it was"), "{said}");
    assert_eq!(std::fs::read_to_string(&settings).unwrap(), theirs, "byte for byte");
    let (code, said) = hooks(&sandbox, data.path(), &["uninstall", "--yes"]).await;
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("not in"), "{said}");
}

/// The Claude Code CLI run by hand in the sandbox with `args` (no hooks of Switchboard's):
/// its status and output.
#[allow(clippy::disallowed_methods)] // the test runs the CLI by hand, on purpose
async fn claude_by_hand(
    sandbox: &CliSandbox,
    api: &FakeApi,
    args: &[&str],
) -> (Option<i32>, String) {
    let output = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::process::Command::new(real_cli(CliVersion::V2_1_330))
            .args(args)
            .current_dir(sandbox.workdir())
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .envs(sandbox.env(&api.base_url()))
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the CLI answers within a minute")
    .unwrap();
    status_and_text(&output)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_codes_own_background_agents_are_listed_and_followed_live() {
    let api = FakeApi::start(
        Scenario::new().reply(Reply::text("Working on it in the background.").when_prompt("BG")),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    sandbox.prepare_interactive().unwrap();
    let data = tempfile::tempdir().unwrap();
    let daemon = start_daemon(data.path(), &api, &sandbox, &[]).await;
    let token = std::fs::read_to_string(data.path().join("token")).unwrap().trim().to_owned();

    let (code, said) = claude_by_hand(&sandbox, &api, &["--bg", "BG: tidy up"]).await;
    // Whatever happens next, Claude Code's own background service is stopped at the end.
    struct Stop<'a>(&'a CliSandbox, &'a FakeApi);
    impl Drop for Stop<'_> {
        fn drop(&mut self) {
            #[allow(clippy::disallowed_methods)] // the CLI's own service, stopped by hand
            let _ = std::process::Command::new(real_cli(CliVersion::V2_1_330))
                .args(["daemon", "stop", "--any"])
                .current_dir(self.0.workdir())
                .env_clear()
                .env("PATH", std::env::var("PATH").unwrap_or_default())
                .envs(self.0.env(&self.1.base_url()))
                .output();
            // Its processes end by themselves a moment later; none is left running (any still
            // there after ten seconds is killed).
            let home = format!("HOME={}\0", self.0.home().display());
            let left = || -> Vec<i32> {
                let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
                entries
                    .flatten()
                    .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
                    // (Claude Code's processes: not the daemon, which shares the HOME.)
                    .filter(|pid| {
                        std::fs::read_to_string(format!("/proc/{pid}/comm"))
                            .is_ok_and(|comm| comm.starts_with("claude"))
                    })
                    .filter(|pid| {
                        std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|environ| {
                            environ.windows(home.len()).any(|w| w == home.as_bytes())
                        })
                    })
                    .collect()
            };
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while !left().is_empty() && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(100));
            }
            for pid in left() {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
    }
    let _stop = Stop(&sandbox, &api);
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("backgrounded"), "{said}");

    // Listed with its state, as `claude agents --json` lists it.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let agent = loop {
        let agents =
            http(&daemon.url, &token, reqwest::Method::GET, "/api/claude/agents", None).await;
        // (Its file is written before it says its status.)
        if let Some(agent) = agents
            .as_array()
            .into_iter()
            .flatten()
            .find(|agent| agent["kind"] == "background" && agent["status"].is_string())
        {
            break agent.clone();
        }
        assert!(std::time::Instant::now() < deadline, "never listed: {agents}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(agent["cwd"], sandbox.workdir().display().to_string(), "{agent}");
    assert_eq!(agent["switchboard_session"], Value::Null, "{agent}");
    let id = agent["session_id"].as_str().unwrap().to_owned();

    // Followed live through its transcript: its answer arrives on the transcript socket.
    use futures::StreamExt as _;
    use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
    let address =
        format!("{}/api/claude/sessions/{id}/subscribe", daemon.url.replace("http://", "ws://"));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut socket = loop {
        // (The transcript's file appears with the session's first message.)
        let mut request = address.as_str().into_client_request().unwrap();
        request.headers_mut().insert("authorization", format!("Bearer {token}").parse().unwrap());
        if let Ok((socket, _)) = tokio_tungstenite::connect_async(request).await {
            break socket;
        }
        assert!(tokio::time::Instant::now() < deadline, "no transcript to follow");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    loop {
        let frame = tokio::time::timeout_at(deadline, socket.next())
            .await
            .expect("the answer arrives live")
            .expect("the socket stays open")
            .unwrap();
        if frame.to_text().is_ok_and(|text| text.contains("Working on it in the background.")) {
            break;
        }
    }
}
