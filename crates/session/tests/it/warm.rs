//! The warm pool: CLIs started ahead of their sessions, with the real CLI.

use std::time::Duration;

use serde_json::json;
use switchboard_protocol::PermissionMode;
use switchboard_session::{
    LineDirection, Policy, SessionConfig, SessionEvent, WarmPool, WarmStatus,
};
use switchboard_testkit::{real_cli, CliSandbox, CliVersion, FakeApi, Reply, Scenario};

use crate::both;
use crate::harness::{Harness, WAIT};

/// Waits until the pool's first configuration satisfies `predicate`; returns its status.
async fn until_status(pool: &WarmPool, predicate: impl Fn(&WarmStatus) -> bool) -> WarmStatus {
    let mut watch = pool.watch();
    let found =
        tokio::time::timeout(WAIT, watch.wait_for(|list| list.first().is_some_and(&predicate)))
            .await
            .unwrap_or_else(|_| panic!("the pool never got there: {:?}", pool.status()))
            .unwrap();
    found[0].clone()
}

/// Whether process `pid` still exists.
fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

both!(
    a_warm_cli_serves_a_session_that_fits_and_never_one_that_does_not,
    |version: CliVersion| async move {
        let sandbox = CliSandbox::new().unwrap();
        let target = sandbox.file("warm.txt");
        let api = FakeApi::start(
            Scenario::new()
                .reply(
                    Reply::tool_use(
                        "Write",
                        json!({"file_path": target.display().to_string(), "content": "warm\n"}),
                    )
                    .when_prompt("WRITE"),
                )
                .reply(Reply::text("written").when_tool_result()),
        )
        .await
        .unwrap();
        let mut config = SessionConfig::new(sandbox.workdir(), Policy::default());
        config.cli.program = Some(real_cli(version));
        config.cli.clear_env = true;
        config.cli.env = sandbox.env(&api.base_url());
        config.control_timeout = Duration::from_secs(30);

        let pool = WarmPool::new();
        pool.keep(config.clone(), 1);
        let warm = until_status(&pool, |status| status.ready == 1).await;
        let first_pid = warm.pids[0];
        assert!(api.requests().is_empty(), "a warm CLI calls no API: {:?}", api.requests());

        // Nothing fixed at launch may differ.
        let unfit: Vec<(&str, SessionConfig)> = vec![
            ("another model", {
                let mut other = config.clone();
                other.cli.model = Some("claude-haiku-4-5-20251001".into());
                other
            }),
            ("another directory", {
                let mut other = config.clone();
                other.cli.cwd = sandbox.home();
                other
            }),
            ("a flag of its own", {
                let mut other = config.clone();
                other.cli.allowed_tools = vec!["Bash(ls:*)".into()];
                other
            }),
            ("another environment", {
                let mut other = config.clone();
                other.cli.env.insert("EXTRA".into(), "1".into());
                other
            }),
            ("a policy that denies (its rules become --disallowedTools)", {
                let mut other = config.clone();
                other.policy = Policy::from_toml("[permissions]\ndeny = [\"WebFetch\"]").unwrap();
                other
            }),
            ("bypassPermissions, which 2.1.330 takes only at launch", {
                let mut other = config.clone();
                other.cli.permission_mode = Some(PermissionMode::BypassPermissions);
                other
            }),
        ];
        for (why, other) in &unfit {
            assert!(pool.take(other).await.is_none(), "a warm CLI went to a session with {why}");
        }
        assert_eq!(pool.status()[0].ready, 1, "the unfit requests took nothing");

        // The permission mode may differ: it is set before the first prompt runs.
        let mut accept = config.clone();
        accept.cli.permission_mode = Some(PermissionMode::AcceptEdits);
        let cli = pool.take(&accept).await.expect("a warm CLI fits");
        assert_eq!(cli.pid(), Some(first_pid));
        let (handle, events) = cli.into_session(accept).unwrap();
        let mut h = Harness::around(api, sandbox, handle, events);
        h.handle.send_text("WRITE it").await.unwrap();
        let result = h.until_result().await;
        assert!(!result.is_error, "{}", h.describe());
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "warm\n", "{}", h.describe());
        assert_eq!(
            h.count(|event| matches!(event, SessionEvent::PermissionRequested(_))),
            0,
            "acceptEdits was set before the prompt ran: {}",
            h.describe()
        );
        let snapshot = h.handle.snapshot();
        assert_eq!(snapshot.permission_mode.as_deref(), Some("acceptEdits"));
        assert!(
            !snapshot.slash_commands.is_empty(),
            "the pool's initialize answer reached the session"
        );
        // The log reads as a cold session's: `initialize` out, its answer in, once each.
        let lines: Vec<(LineDirection, String)> = h
            .log
            .iter()
            .filter_map(|event| match event {
                SessionEvent::Line(line) => Some((line.direction, line.raw.to_string())),
                _ => None,
            })
            .collect();
        assert_eq!(lines[0].0, LineDirection::ToCli);
        assert!(lines[0].1.contains(r#""subtype":"initialize""#), "{}", lines[0].1);
        assert!(lines[1].1.contains(r#""control_response""#), "{}", lines[1].1);
        let initializes = lines.iter().filter(|(_, raw)| raw.contains(r#""subtype":"initialize""#));
        assert_eq!(initializes.count(), 1, "{}", h.describe());
        let conversation = h.api.conversation_requests();
        assert_eq!(conversation.len(), 2, "the prompt and the tool result, nothing before");

        // The pool starts another in its place.
        let refilled = until_status(&pool, |status| status.ready == 1 && status.served == 1).await;
        assert_ne!(refilled.pids[0], first_pid);
        h.finish().await;

        // A settings file it read at its start changes: it no longer fits, and is ended.
        let settings = h.sandbox.workdir().join(".claude");
        std::fs::create_dir_all(&settings).unwrap();
        std::fs::write(settings.join("settings.json"), r#"{"permissions":{"deny":["WebFetch"]}}"#)
            .unwrap();
        assert!(
            pool.take(&config).await.is_none(),
            "a CLI that read older settings is not handed out"
        );
        let status = pool.status()[0].clone();
        assert!(
            status.last_error.as_deref().is_some_and(|error| error.contains("changed")),
            "{status:?}"
        );
        assert!(!alive(refilled.pids[0]), "the stale CLI was ended");
        let fresh = until_status(&pool, |status| status.ready == 1).await;
        let cli = pool.take(&config).await.expect("a CLI started after the change fits");
        assert_eq!(cli.pid(), Some(fresh.pids[0]));
        cli.end().await;

        let last = until_status(&pool, |status| status.ready == 1).await;
        pool.close().await;
        assert!(!alive(last.pids[0]), "close ends the warm CLIs");
        assert!(pool.take(&config).await.is_none());
    }
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_cli_that_dies_idle_is_replaced() {
    let sandbox = CliSandbox::new().unwrap();
    let api = FakeApi::start(Scenario::new()).await.unwrap();
    let mut config = SessionConfig::new(sandbox.workdir(), Policy::default());
    config.cli.program = Some(real_cli(CliVersion::V2_1_330));
    config.cli.clear_env = true;
    config.cli.env = sandbox.env(&api.base_url());
    let pool = WarmPool::new();
    pool.keep(config.clone(), 1);
    let first = until_status(&pool, |status| status.ready == 1).await.pids[0];
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(first as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let gone = until_status(&pool, |status| status.failures == 1).await;
    assert!(
        gone.last_error.as_deref().is_some_and(|error| error.contains("while it was idle")),
        "{gone:?}"
    );
    let again = until_status(&pool, |status| status.ready == 1).await;
    assert_ne!(again.pids[0], first);
    let cli = pool.take(&config).await.expect("the replacement serves");
    assert_eq!(cli.pid(), Some(again.pids[0]));
    cli.end().await;
    pool.close().await;
    assert!(api.requests().is_empty());
}

#[tokio::test]
async fn a_warm_cli_that_cannot_start_is_reported_and_retried_later() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = SessionConfig::new(dir.path(), Policy::default());
    config.cli.program = Some(dir.path().join("no-such-claude"));
    let pool = WarmPool::new();
    pool.keep(config.clone(), 2);
    let failed = until_status(&pool, |status| status.failures >= 1).await;
    let first = std::time::Instant::now();
    assert_eq!(failed.ready, 0);
    assert!(
        failed.last_error.as_deref().is_some_and(|error| error.contains("no-such-claude")),
        "the error names the program: {failed:?}"
    );
    assert!(pool.take(&config).await.is_none());
    // It tries again after a back-off of a second (then two, then four, ...), not at once.
    until_status(&pool, |status| status.failures >= 2).await;
    assert!(first.elapsed() >= Duration::from_millis(900), "retried after {:?}", first.elapsed());
    pool.close().await;
}
