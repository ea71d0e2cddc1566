//! A tool call cut off by a daemon killed with `kill -9` while it ran: the next daemon shows the
//! session stopped with the call unsettled, refuses to resume it until a person settles the
//! call, and the resumed run's first prompt tells the model; nothing of the old run is left
//! running, and the call never completes or runs again.

use std::time::Duration;

use serde_json::json;
use switchboard_testkit::{real_cli, CliSandbox, CliVersion, FakeApi, Reply, Scenario};

use crate::serve::{http, start_daemon_running, wait_session};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_cut_off_by_a_killed_daemon_is_settled_before_the_session_runs_again() {
    let deploy = "echo $PPID > cli.pid; sleep 57; echo deployed >> deployed.txt";
    let api = FakeApi::start(
        Scenario::new()
            .reply(
                Reply::tool_use("Bash", json!({"command": deploy, "description": "deploy"}))
                    .when_prompt("DEPLOY"),
            )
            .fallback("I will check the release before anything else."),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let data = tempfile::tempdir().unwrap();
    let policy = sandbox.file("policy.toml");
    std::fs::write(&policy, "[permissions]\nallow = [\"Bash\"]\n").unwrap();
    let policy = policy.display().to_string();
    let args = ["--policy", policy.as_str()];
    let claude = real_cli(CliVersion::V2_1_330);
    let mut daemon = start_daemon_running(data.path(), &api, &sandbox, &claude, &args, &[]).await;
    let token = std::fs::read_to_string(data.path().join("token")).unwrap();
    let id = crate::serve::create_session(&daemon.url, &token, &sandbox, "DEPLOY it").await;
    let pidfile = sandbox.workdir().join("cli.pid");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !pidfile.exists() {
        assert!(std::time::Instant::now() < deadline, "the call never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Killed once the CLI's transcript holds the call (there is a conversation to resume).
    while !sandbox.transcripts_contain("\"tool_use\"") {
        assert!(std::time::Instant::now() < deadline, "the transcript never held the call");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let pid = nix::unistd::Pid::from_raw(daemon.child.id().unwrap() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).unwrap();
    daemon.child.wait().await.unwrap();

    // The next daemon: the session stopped, its call unsettled, no resume until it is settled.
    let next = start_daemon_running(data.path(), &api, &sandbox, &claude, &args, &[]).await;
    let token = std::fs::read_to_string(data.path().join("token")).unwrap();
    wait_session(&next.url, &token, &id, |s| s["state"] == "exited" || s["state"] == "crashed")
        .await;
    let open = http(
        &next.url,
        &token,
        reqwest::Method::GET,
        &format!("/api/sessions/{id}/unsettled"),
        None,
    )
    .await;
    assert_eq!(open.as_array().map(Vec::len), Some(1), "{open}");
    assert_eq!(open[0]["input"]["command"], deploy);
    let call = open[0]["tool_use_id"].as_str().unwrap().to_owned();
    let resume = format!("/api/sessions/{id}/resume");
    let refused = http(&next.url, &token, reqwest::Method::POST, &resume, None).await;
    assert_eq!(refused["error"]["code"], "unsettled", "{refused}");
    let settled = http(
        &next.url,
        &token,
        reqwest::Method::POST,
        &format!("/api/sessions/{id}/unsettled/{call}"),
        Some(json!({"settle": "interrupted"})),
    )
    .await;
    assert_eq!(settled, json!([]));
    let resumed = http(&next.url, &token, reqwest::Method::POST, &resume, None).await;
    assert!(resumed.get("error").is_none(), "{resumed}");
    wait_session(&next.url, &token, &id, |s| s["state"] == "idle").await;
    let requests = api.conversation_requests();
    let told = requests.last().unwrap().body["messages"].to_string();
    assert!(told.contains(&format!("(call {call}): its outcome is unknown")), "{told}");

    // Nothing of the killed run goes on: its call never finishes, nor runs again.
    let running: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| std::fs::read(entry.ok()?.path().join("cmdline")).ok())
        .map(|command| String::from_utf8_lossy(&command).replace('\0', " "))
        .filter(|command| command.contains("sleep 57"))
        .collect();
    assert!(running.is_empty(), "left running: {running:?}");
    assert!(!sandbox.workdir().join("deployed.txt").exists());
}
