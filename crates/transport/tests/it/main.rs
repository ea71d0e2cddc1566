//! The stdio transport against `fake-claude` (failure paths) and the real CLI.

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use serde_json::json;
use switchboard_protocol::{encode_line, Message, UserMessage};
use switchboard_testkit::fake_cli;
use switchboard_transport::stdio::{CliOptions, ShutdownStep, TransportError, TransportEvent};
use switchboard_transport::{spawn, CliLink};
use tempfile::TempDir;

/// Starts fake-claude with `script` (JSON steps) in a scratch directory.
fn start_fake(script: serde_json::Value) -> (CliLink, TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let script_path = dir.path().join("script.json");
    std::fs::write(&script_path, script.to_string()).unwrap();
    let mut options = CliOptions::new(dir.path());
    options.program = Some(fake_cli());
    if script != json!(null) {
        options.env.insert("FAKE_CLAUDE_SCRIPT".into(), script_path.display().to_string());
    }
    (spawn(&options).unwrap(), dir)
}

async fn next(link: &mut CliLink) -> TransportEvent {
    tokio::time::timeout(Duration::from_secs(30), link.events.recv())
        .await
        .expect("no event within 30 s")
        .expect("event stream ended")
}

/// Collects events until `Exited`.
async fn until_exit(link: &mut CliLink) -> Vec<TransportEvent> {
    let mut events = Vec::new();
    loop {
        let event = next(link).await;
        let done = matches!(event, TransportEvent::Exited(_));
        events.push(event);
        if done {
            return events;
        }
    }
}

fn line(message: impl Into<Message>) -> Bytes {
    Bytes::from(encode_line(&message.into()))
}

#[tokio::test]
async fn a_turn_round_trips_and_closing_input_ends_the_cli() {
    let (mut link, _dir) = start_fake(json!(null));
    link.process.send(line(UserMessage::prompt("ping"))).await.unwrap();
    let mut kinds = Vec::new();
    loop {
        match next(&mut link).await {
            TransportEvent::Line(received) => {
                let done = matches!(received.message, Message::Result(_));
                kinds.push(received.message.type_name().unwrap().to_owned());
                if let Message::Result(result) = &received.message {
                    assert_eq!(result.result.as_deref(), Some("echo: ping"));
                }
                if done {
                    break;
                }
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(kinds, ["system", "assistant", "result"]);
    link.process.close_input();
    let events = until_exit(&mut link).await;
    let TransportEvent::Exited(exit) = events.last().unwrap() else { panic!() };
    assert!(exit.success(), "{exit:?}");
    assert!(matches!(
        link.process.send(line(UserMessage::prompt("late"))).await,
        Err(TransportError::Closed)
    ));
}

#[tokio::test]
async fn a_missing_cli_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = CliOptions::new(dir.path());
    options.program = Some("/nonexistent/claude".into());
    let error = spawn(&options).unwrap_err();
    assert!(matches!(error, TransportError::NotFound { .. }));
    assert!(error.to_string().contains("/nonexistent/claude"), "{error}");
    options.cwd = dir.path().join("missing");
    assert!(spawn(&options).unwrap_err().to_string().contains("does not exist"));
}

#[tokio::test]
async fn garbage_and_huge_lines_do_not_end_the_stream() {
    let (mut link, _dir) = start_fake(json!([
        {"emit_raw": "garbage that is not json\n"},
        {"emit_big": 12_000_000},
        {"turn": "still here"},
    ]));
    let events = until_exit(&mut link).await;
    assert!(
        matches!(&events[0], TransportEvent::BadLine(error) if error.preview.starts_with("garbage"))
    );
    let TransportEvent::Line(big) = &events[1] else { panic!("{:?}", events[1]) };
    assert!(big.raw.len() > 12_000_000);
    assert!(events.iter().any(
        |event| matches!(event, TransportEvent::Line(r) if matches!(r.message, Message::Result(_)))
    ));
}

#[tokio::test]
async fn a_crash_mid_turn_reports_the_signal_and_stderr() {
    let (mut link, _dir) = start_fake(json!([
        {"emit": {"type": "system", "subtype": "init", "session_id": "$SESSION"}},
        {"stderr": "\u{1b}[31mfatal: something broke\u{1b}[0m\n"},
        {"crash": true},
    ]));
    let events = until_exit(&mut link).await;
    let stderr: Vec<&String> = events
        .iter()
        .filter_map(|e| if let TransportEvent::Stderr(s) = e { Some(&**s) } else { None })
        .collect();
    assert_eq!(stderr, ["fatal: something broke"], "ANSI codes stripped");
    let TransportEvent::Exited(exit) = events.last().unwrap() else { panic!() };
    assert_eq!(exit.signal, Some(6), "{exit:?}");
    assert!(
        exit.describe().contains("killed by signal 6: fatal: something broke"),
        "{}",
        exit.describe()
    );
}

#[tokio::test]
async fn a_cli_that_ignores_sigterm_is_killed_with_its_whole_group() {
    let (mut link, _dir) = start_fake(json!([{"hang_ignoring_term": true}]));
    let pid = link.process.pid().unwrap();
    let step = link.process.shutdown(Duration::from_millis(300)).await;
    assert_eq!(step, ShutdownStep::Killed);
    // Nothing of the group is left alive (the shell's `sleep` children included). SIGKILL is
    // delivered asynchronously and orphans are reaped by init, so wait (bounded) for the
    // condition rather than sampling it once.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !live_group_members(pid).is_empty() {
        assert!(std::time::Instant::now() < deadline, "still alive: {:?}", live_group_members(pid));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn early_exit_with_usage_error_is_described_with_a_hint() {
    let (mut link, _dir) = start_fake(json!([
        {"stderr": "error: unknown option '--bogus'\n"},
        {"exit": 1},
    ]));
    let events = until_exit(&mut link).await;
    let TransportEvent::Exited(exit) = events.last().unwrap() else { panic!() };
    assert!(!exit.wrote_output);
    let description = exit.describe();
    assert!(
        description.contains("exited with status 1: error: unknown option '--bogus'"),
        "{description}"
    );
    assert!(description.contains("does not support a flag"), "{description}");
}

#[test]
fn values_cannot_become_flags_and_nested_session_variables_are_removed() {
    let mut options = CliOptions::new(Path::new("/tmp"));
    options.model = Some("--dangerously-skip-permissions".into());
    options.allowed_tools = vec!["Bash(git status:*)".into(), "Read".into()];
    options.resume = Some("abc".into());
    options.fork_session = true;
    let args: Vec<String> = options.args().into_iter().map(|a| a.into_string().unwrap()).collect();
    assert!(args.contains(&"--model=--dangerously-skip-permissions".to_owned()));
    assert!(!args.contains(&"--dangerously-skip-permissions".to_owned()));
    assert!(args.contains(&"--allowedTools=Bash(git status:*)".to_owned()));
    assert!(args.contains(&"--allowedTools=Read".to_owned()));
    assert!(args.contains(&"--resume=abc".to_owned()));
    assert!(args.contains(&"--fork-session".to_owned()));
    assert!(args.contains(&"--include-partial-messages".to_owned()));
    let command = switchboard_transport::cli_command(&options);
    let removed: Vec<String> = command
        .as_std()
        .get_envs()
        .filter(|(_, value)| value.is_none())
        .map(|(key, _)| key.to_string_lossy().into_owned())
        .collect();
    assert!(removed.contains(&"CLAUDECODE".to_owned()), "{removed:?}");
}

/// Processes in process group `group` that are not zombies, from /proc.
fn live_group_members(group: u32) -> Vec<u32> {
    let mut live = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        // Fields after the `(comm)`: state ppid pgrp ...
        let Some(after) = stat.rsplit_once(')').map(|(_, rest)| rest) else { continue };
        let fields: Vec<&str> = after.split_whitespace().collect();
        if fields.len() > 2
            && fields[2] == group.to_string()
            && fields[0] != "Z"
            && fields[0] != "X"
        {
            live.push(pid);
        }
    }
    live
}

/// The environment a CLI started by `spawn` sees, from a stand-in that writes it to a file.
async fn cli_environment(options: &mut CliOptions, dir: &Path) -> String {
    let out = dir.join("env.txt");
    let program = dir.join("print-env");
    std::fs::write(&program, format!("#!/bin/sh\nenv > '{}'\n", out.display())).unwrap();
    std::fs::set_permissions(&program, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .unwrap();
    options.program = Some(program);
    let mut link = spawn(options).unwrap();
    until_exit(&mut link).await;
    std::fs::read_to_string(out).unwrap()
}

#[tokio::test]
async fn the_daemons_own_variables_never_reach_the_cli() {
    // Each test runs in a process of its own under nextest; under `cargo test` no other test
    // reads these names.
    std::env::set_var("SWITCHBOARD_TOKEN", "api-token-that-must-not-leak");
    std::env::set_var("SWITCHBOARD_INGRESS_TOKEN", "another-secret");
    let dir = tempfile::tempdir().unwrap();
    let mut options = CliOptions::new(dir.path());
    options.env.insert("CHOSEN_BY_REQUEST".into(), "kept".into());
    let env = cli_environment(&mut options, dir.path()).await;
    assert!(!env.contains("api-token-that-must-not-leak"), "{env}");
    assert!(!env.contains("SWITCHBOARD_"), "{env}");
    assert!(env.contains("CHOSEN_BY_REQUEST=kept"), "{env}");
    assert!(env.contains("PATH="), "the rest is inherited: {env}");
}

#[tokio::test]
async fn a_full_queue_cannot_lose_the_end_of_a_connection() {
    let (mut link, slot) = switchboard_transport::sdk_url::external("full-queue");
    let (mut reader, writer) = slot.connect().await.unwrap();
    let lines = switchboard_transport::stdio::EVENT_QUEUE + 20;
    let feeding = tokio::spawn(async move {
        for n in 0..lines {
            let line = format!("{{\"type\":\"keep_alive\",\"n\":{n}}}\n");
            reader.incoming(line.as_bytes()).await;
        }
    });
    // Wait until the queue is full and the feeder waits for room.
    tokio::time::timeout(Duration::from_secs(30), async {
        while link.events.len() < switchboard_transport::stdio::EVENT_QUEUE - 2 {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the queue fills");
    // The socket goes while the queue is full.
    feeding.abort();
    let _ = feeding.await;
    drop(writer);
    let mut seen = Vec::new();
    while let Some(event) = tokio::time::timeout(Duration::from_secs(30), link.events.recv())
        .await
        .expect("the stream ends")
    {
        seen.push(match event {
            TransportEvent::Connected { .. } => "connected",
            TransportEvent::Line(_) => "line",
            TransportEvent::Disconnected => "disconnected",
            TransportEvent::Exited(_) => "exited",
            other => panic!("unexpected {other:?}"),
        });
        if seen.last() == Some(&"exited") {
            break;
        }
    }
    let tail: Vec<&str> = seen.iter().rev().take(2).rev().copied().collect();
    assert_eq!(tail, ["disconnected", "exited"], "{seen:?}");
    assert_eq!(seen.first(), Some(&"connected"));
}

#[tokio::test]
async fn an_sdk_url_cli_reads_its_token_from_a_descriptor_not_its_environment() {
    let dir = tempfile::tempdir().unwrap();
    let program = dir.path().join("print-secrets");
    // The CLI's environment, and what its descriptor holds, read twice (as a CLI that
    // reconnects reads it).
    std::fs::write(
        &program,
        format!(
            "#!/bin/sh\nenv > '{dir}/env.txt'\ncat /proc/self/fd/3 > '{dir}/token.txt'\necho spoiled > /proc/self/fd/3 2>/dev/null\ncat /proc/self/fd/3 > '{dir}/again.txt'\n",
            dir = dir.path().display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&program, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .unwrap();
    let mut options = CliOptions::new(dir.path());
    options.program = Some(program);
    let (mut link, slot) =
        switchboard_transport::sdk_url::spawn(&options, "ws://127.0.0.1:9/v1/sessions/ws/")
            .unwrap();
    until_exit(&mut link).await;
    let env = std::fs::read_to_string(dir.path().join("env.txt")).unwrap();
    assert!(!env.contains(slot.token()), "the token is not in the environment: {env}");
    assert!(!env.contains("CLAUDE_CODE_SESSION_ACCESS_TOKEN"), "{env}");
    assert!(env.contains("CLAUDE_CODE_WEBSOCKET_AUTH_FILE_DESCRIPTOR=3"), "{env}");
    let token = std::fs::read_to_string(dir.path().join("token.txt")).unwrap();
    assert_eq!(token, slot.token(), "the descriptor holds the token");
    let again = std::fs::read_to_string(dir.path().join("again.txt")).unwrap();
    assert_eq!(again, slot.token(), "and again, for a reconnect: nothing can change it");
}
