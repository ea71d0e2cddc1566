//! Every pinned CLI version (`scripts/cli-versions`) through `switchboard run`: a prompt, a
//! tool call allowed and one denied by the policy, an API error retried, a resume, and Ctrl-C,
//! with every line read cleanly.

use serde_json::Value;
use switchboard_testkit::{pinned_versions, real_cli_of, CliSandbox, FakeApi, Reply, Scenario};

use crate::run::{interrupt_run, switchboard_run, touch_and_ls};

macro_rules! pinned {
    ($($name:ident => $version:literal),* $(,)?) => {
        /// The versions these tests cover, oldest first.
        const COVERED: &[&str] = &[$($version),*];
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                smoke($version).await;
            }
        )*
    };
}

pinned! {
    run_1_0_112 => "1.0.112",
    run_2_1_37 => "2.1.37",
    run_2_1_100 => "2.1.100",
    run_2_1_120 => "2.1.120",
    run_2_1_250 => "2.1.250",
    run_2_1_330 => "2.1.330",
    run_2_1_332 => "2.1.332",
}

#[test]
fn every_pinned_version_has_a_run_test() {
    assert_eq!(COVERED, pinned_versions(), "scripts/cli-versions and the tests above differ");
}

async fn smoke(version: &str) {
    let api = FakeApi::start(
        Scenario::new()
            .reply(Reply::tool_use("Bash", touch_and_ls("allowed.txt")).when_prompt("ALLOW"))
            .reply(Reply::text("Allowed done.").when_tool_result_contains("allowed.txt"))
            .reply(
                Reply::tool_use("Bash", serde_json::json!({"command": "rm -f precious.txt"}))
                    .when_prompt("DENY"),
            )
            .reply(Reply::text("Denied done.").when_tool_result())
            .reply(Reply::http_error(529, "overloaded_error", "Overloaded", 1).when_prompt("RETRY"))
            .reply(Reply::text("Recovered.").when_prompt("RETRY"))
            .reply(Reply::text("Remembered.").when_prompt("REMEMBER"))
            .reply(Reply::text("Recalled.").when_prompt("RECALL"))
            .reply(Reply::text("a story that never ends").when_prompt("STORY").hold_after(1)),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let claude = real_cli_of(version);
    let policy = sandbox.file("policy.toml");
    std::fs::write(
        &policy,
        "[permissions]\nallow = [\"Bash(touch:*)\", \"Bash(ls:*)\"]\ndeny = [\"Bash(rm:*)\"]\n",
    )
    .unwrap();
    std::fs::write(sandbox.file("precious.txt"), "keep me\n").unwrap();
    let policy = policy.to_str().unwrap();
    let clean = |stderr: &str| {
        assert!(!stderr.contains("unreadable line"), "{version}: {stderr}");
        assert!(!stderr.contains("does not fit"), "{version}: {stderr}");
    };

    let out =
        switchboard_run(&api, &sandbox, Some(&claude), &["--policy", policy, "ALLOW it"]).await;
    assert_eq!(out.code, Some(0), "{version}: {}", out.stderr);
    assert_eq!(out.stdout, "Allowed done.\n", "{version}: {}", out.stderr);
    assert!(sandbox.file("allowed.txt").exists(), "{version}");
    clean(&out.stderr);

    let out =
        switchboard_run(&api, &sandbox, Some(&claude), &["--policy", policy, "DENY it"]).await;
    assert_eq!(out.code, Some(0), "{version}: {}", out.stderr);
    assert_eq!(out.stdout, "Denied done.\n", "{version}: {}", out.stderr);
    assert!(out.stderr.contains("✗ Bash denied by rule Bash(rm:*)"), "{version}: {}", out.stderr);
    assert!(sandbox.file("precious.txt").exists(), "{version}: the denied call did not run");
    clean(&out.stderr);

    let out = switchboard_run(&api, &sandbox, Some(&claude), &["RETRY please"]).await;
    assert_eq!(out.code, Some(0), "{version}: {}", out.stderr);
    assert_eq!(out.stdout, "Recovered.\n", "{version}: {}", out.stderr);
    clean(&out.stderr);

    // Two runs of one conversation: the second resumes the first.
    let out = switchboard_run(&api, &sandbox, Some(&claude), &["--json", "REMEMBER heron"]).await;
    assert_eq!(out.code, Some(0), "{version}: {}", out.stderr);
    let session = out
        .stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .find_map(|event| event["claude_session_id"].as_str().map(str::to_owned))
        .unwrap_or_else(|| panic!("{version}: no session id in {}", out.stdout));
    let out =
        switchboard_run(&api, &sandbox, Some(&claude), &["--resume", &session, "RECALL it"]).await;
    assert_eq!(out.code, Some(0), "{version}: {}", out.stderr);
    assert_eq!(out.stdout, "Recalled.\n", "{version}: {}", out.stderr);
    let request = api.wait_for(|request| request.last_user_text().contains("RECALL")).await;
    assert!(request.body.to_string().contains("REMEMBER heron"), "{version}: resumed");

    // Ctrl-C interrupts the turn: exit 130.
    let (code, stderr) = interrupt_run(&api, &sandbox, &claude, "STORY please").await;
    assert_eq!(code, Some(130), "{version}: {stderr}");
    api.release();
}
