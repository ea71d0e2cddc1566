//! A parked request's answer outlives a daemon killed with `kill -9` after it was given and
//! before the resumed CLI heard it: the next daemon resumes the session with it, and the call
//! runs once.

use std::time::Duration;

use serde_json::json;
use switchboard_testkit::{real_cli, CliSandbox, CliVersion, FakeApi, Reply, Scenario};

use crate::serve::{http, start_daemon_running, wait_session};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_given_just_before_the_daemon_is_killed_resumes_the_session_from_the_next() {
    let api = FakeApi::start(
        Scenario::new()
            .reply(
                Reply::tool_use(
                    "Bash",
                    json!({"command": "echo ran >> ran.txt", "description": "Note it"}),
                )
                .when_prompt("PARK"),
            )
            .reply(Reply::text("Noted.").when_tool_result())
            .fallback("Nothing to say."),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let data = tempfile::tempdir().unwrap();
    let policy = sandbox.file("policy.toml");
    std::fs::write(&policy, "[permissions]\nask = [\"Bash\"]\npark_after_secs = 1\n").unwrap();
    // The CLI, except that its first resume waits a while first (the window to kill in).
    let waited = sandbox.file("resume-waited");
    let claude = sandbox.file("claude-slow-resume");
    std::fs::write(
        &claude,
        format!(
            "#!/bin/sh\ncase \"$*\" in *--resume=*) [ -e '{waited}' ] || {{ : > '{waited}'; sleep 30; }} ;; esac\nexec '{real}' \"$@\"\n",
            waited = waited.display(),
            real = real_cli(CliVersion::V2_1_330).display(),
        ),
    )
    .unwrap();
    let mode = std::os::unix::fs::PermissionsExt::from_mode(0o755);
    std::fs::set_permissions(&claude, mode).unwrap();
    let policy = policy.display().to_string();
    let args = ["--policy", policy.as_str()];
    let mut daemon = start_daemon_running(data.path(), &api, &sandbox, &claude, &args, &[]).await;
    let token = std::fs::read_to_string(data.path().join("token")).unwrap();
    let id = crate::serve::create_session(&daemon.url, &token, &sandbox, "PARK it").await;
    let parked = wait_session(&daemon.url, &token, &id, |s| s["state"] == "parked").await;
    let request_id = parked["pending_permissions"][0]["request_id"].as_str().unwrap().to_owned();

    // Approved: the session resumes, and the daemon is killed before its CLI has asked again.
    let path = format!("/api/sessions/{id}/permissions/{request_id}");
    let answered =
        http(&daemon.url, &token, reqwest::Method::POST, &path, Some(json!({"behavior": "allow"})))
            .await;
    assert!(answered.get("error").is_none(), "{answered}");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !waited.exists() {
        assert!(std::time::Instant::now() < deadline, "the resumed CLI never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let pid = nix::unistd::Pid::from_raw(daemon.child.id().unwrap() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).unwrap();
    daemon.child.wait().await.unwrap();
    assert!(!sandbox.file("ran.txt").exists(), "nothing ran yet");

    // The next daemon resumes it with the answer: the call runs, once.
    let next = start_daemon_running(data.path(), &api, &sandbox, &claude, &args, &[]).await;
    let token = std::fs::read_to_string(data.path().join("token")).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let events = loop {
        let events = crate::serve::session_events(&next.url, &token, &id).await;
        if events.to_string().contains("Noted.") {
            break events;
        }
        assert!(std::time::Instant::now() < deadline, "the turn never went on: {events}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(std::fs::read_to_string(sandbox.file("ran.txt")).unwrap(), "ran\n");
    let decided: Vec<_> = events
        .as_array()
        .unwrap()
        .iter()
        .filter(|event| event["event"]["event"] == "permission_decided")
        .collect();
    assert_eq!(decided.len(), 1, "decided once: {decided:?}");
    assert_eq!(decided[0]["event"]["by"]["kind"], "person", "{decided:?}");
}
