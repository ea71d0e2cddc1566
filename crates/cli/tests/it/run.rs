//! `switchboard run` with the real CLI against the fake API.

use std::path::Path;
use std::process::Stdio;

use serde_json::{json, Value};
use switchboard_testkit::{
    git, git_repository, real_cli, CliSandbox, CliVersion, FakeApi, Reply, Scenario,
};

pub(crate) struct Outcome {
    pub(crate) code: Option<i32>,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

/// Runs `switchboard run ARGS` with stdin not a terminal.
pub(crate) async fn switchboard_run(
    api: &FakeApi,
    sandbox: &CliSandbox,
    claude: Option<&Path>,
    args: &[&str],
) -> Outcome {
    switchboard_run_env(api, sandbox, claude, args, &[]).await
}

/// Same, with extra environment for the child.
#[allow(clippy::disallowed_methods)] // tests run our own binary
async fn switchboard_run_env(
    api: &FakeApi,
    sandbox: &CliSandbox,
    claude: Option<&Path>,
    args: &[&str],
    env: &[(&str, &Path)],
) -> Outcome {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchboard"));
    command
        .arg("run")
        .arg("--cwd")
        .arg(sandbox.workdir())
        .args(args)
        .envs(sandbox.env(&api.base_url()))
        .env_remove("SWITCHBOARD_CLAUDE")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .kill_on_drop(true);
    if let Some(claude) = claude {
        command.env("SWITCHBOARD_CLAUDE", claude);
    }
    let output = tokio::time::timeout(std::time::Duration::from_secs(120), command.output())
        .await
        .unwrap()
        .unwrap();
    Outcome {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

pub(crate) fn touch_and_ls(file: &str) -> Value {
    json!({"command": format!("touch {file} && ls"), "description": "create a file"})
}

#[tokio::test]
async fn text_streams_to_stdout_and_success_exits_0() {
    for version in CliVersion::ALL {
        let api = FakeApi::start(Scenario::new().reply(Reply::text("Hello from the model.")))
            .await
            .unwrap();
        let sandbox = CliSandbox::new().unwrap();
        let out = switchboard_run(&api, &sandbox, Some(&real_cli(version)), &["Say hello"]).await;
        assert_eq!(out.code, Some(0), "{version:?}: {}", out.stderr);
        assert_eq!(out.stdout, "Hello from the model.\n");
    }
}

#[tokio::test]
async fn a_policy_allows_a_tool_and_decisions_go_to_stderr() {
    let api = FakeApi::start(
        Scenario::new()
            .reply(Reply::tool_use("Bash", touch_and_ls("from-run.txt")).when_prompt("RUN"))
            .reply(Reply::text("Created.").when_tool_result()),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let policy = sandbox.file("policy.toml");
    std::fs::write(&policy, "[permissions]\nallow = [\"Bash(touch:*)\", \"Bash(ls:*)\"]\n")
        .unwrap();
    let claude = real_cli(CliVersion::V2_1_330);
    let out = switchboard_run(
        &api,
        &sandbox,
        Some(&claude),
        &["--policy", policy.to_str().unwrap(), "RUN it"],
    )
    .await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(sandbox.file("from-run.txt").exists());
    assert!(out.stderr.contains("→ Bash touch from-run.txt && ls"), "{}", out.stderr);
    assert!(
        out.stderr.contains("✓ Bash allowed by rule Bash(touch:*), Bash(ls:*)"),
        "{}",
        out.stderr
    );
    assert_eq!(out.stdout, "Created.\n");
}

#[tokio::test]
async fn without_a_terminal_an_ask_is_denied_with_the_reason() {
    let api = FakeApi::start(
        Scenario::new()
            .reply(Reply::tool_use("Bash", touch_and_ls("asked.txt")).when_prompt("RUN"))
            .reply(Reply::text("Denied, fine.").when_tool_result()),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let out =
        switchboard_run(&api, &sandbox, Some(&real_cli(CliVersion::V2_1_37)), &["RUN it"]).await;
    assert_eq!(out.code, Some(0), "a denied tool does not fail the run: {}", out.stderr);
    assert!(!sandbox.file("asked.txt").exists());
    assert!(out.stderr.contains("✗ Bash denied by no-terminal"), "{}", out.stderr);
    let request = api.wait_for(|request| !request.tool_results().is_empty()).await;
    assert!(
        request.tool_results()[0].1.contains("no one is at a terminal"),
        "the model is told why"
    );
}

#[tokio::test]
async fn json_prints_every_event_as_a_line() {
    let api = FakeApi::start(Scenario::new().reply(Reply::text("json please"))).await.unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let claude = real_cli(CliVersion::V2_1_330);
    let out = switchboard_run(&api, &sandbox, Some(&claude), &["--json", "hi"]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let events: Vec<Value> =
        out.stdout.lines().map(|line| serde_json::from_str(line).unwrap()).collect();
    assert!(events.iter().all(|event| event["event"].is_string()));
    assert!(events
        .iter()
        .any(|event| event["event"] == "line" && event["line"]["type"] == "result"));
    assert!(events.iter().any(|event| event["event"] == "line" && event["direction"] == "to_cli"));
    assert_eq!(
        events.last().unwrap()["event"],
        "state",
        "the session's end is reported last: {:?}",
        events.last()
    );
}

#[tokio::test]
async fn an_api_error_result_exits_1() {
    let api = FakeApi::start(Scenario::new().reply(Reply::http_error(
        400,
        "invalid_request_error",
        "bad request",
        10,
    )))
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let out = switchboard_run(&api, &sandbox, Some(&real_cli(CliVersion::V2_1_37)), &["hi"]).await;
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(out.stderr.contains("✗ the API call failed"), "{}", out.stderr);
    assert!(!out.stderr.contains("(success)"), "an API failure is no success: {}", out.stderr);
}

#[tokio::test]
async fn a_missing_cli_exits_4_with_a_hint() {
    let api = FakeApi::start(Scenario::new()).await.unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let out = switchboard_run(&api, &sandbox, Some(Path::new("/no/such/claude")), &["hi"]).await;
    assert_eq!(out.code, Some(4));
    assert!(
        out.stderr.contains("/no/such/claude") && out.stderr.contains("SWITCHBOARD_CLAUDE"),
        "{}",
        out.stderr
    );
}

#[tokio::test]
async fn a_bad_policy_exits_2_naming_the_rule() {
    let api = FakeApi::start(Scenario::new()).await.unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let policy = sandbox.file("policy.toml");
    std::fs::write(&policy, "[permissions]\nallow = [\"Bash(ls\"]\n").unwrap();
    let claude = real_cli(CliVersion::V2_1_330);
    let out = switchboard_run(
        &api,
        &sandbox,
        Some(&claude),
        &["--policy", policy.to_str().unwrap(), "hi"],
    )
    .await;
    assert_eq!(out.code, Some(2));
    assert!(out.stderr.contains("rule \"Bash(ls\" is not valid"), "{}", out.stderr);
}

#[tokio::test]
async fn a_crashing_cli_exits_3() {
    let api = FakeApi::start(Scenario::new()).await.unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let script = sandbox.file("script.json");
    let steps = r#"[{"expect":"control_request","subtype":"initialize"},{"reply":{}},{"expect":"user"},{"stderr":"kaboom\n"},{"exit":7}]"#;
    std::fs::write(&script, steps).unwrap();
    let fake = switchboard_testkit::fake_cli();
    let out = switchboard_run_env(
        &api,
        &sandbox,
        Some(&fake),
        &["hi"],
        &[("FAKE_CLAUDE_SCRIPT", &script)],
    )
    .await;
    assert_eq!(out.code, Some(3), "{}", out.stderr);
    assert!(out.stderr.contains("exited with status 7: kaboom"), "{}", out.stderr);
}

/// On a terminal, an ask becomes a prompt; `y` allows. (`script` gives the child a pty.)
#[tokio::test]
#[allow(clippy::disallowed_methods)] // tests run our own binary, under `script`
async fn on_a_terminal_the_person_is_asked() {
    use tokio::io::AsyncWriteExt;
    let api = FakeApi::start(
        Scenario::new()
            .reply(Reply::tool_use("Bash", touch_and_ls("tty.txt")).when_prompt("RUN"))
            .reply(Reply::text("Made it.").when_tool_result()),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let inner = format!(
        "{} run --cwd {} --claude {} 'RUN it'",
        env!("CARGO_BIN_EXE_switchboard"),
        sandbox.workdir().display(),
        real_cli(CliVersion::V2_1_330).display()
    );
    let mut child = tokio::process::Command::new("script")
        .args(["-qec", &inner, "/dev/null"])
        .envs(sandbox.env(&api.base_url()))
        .env_remove("SWITCHBOARD_CLAUDE")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    // Answer once the request is pending (the prompt reads a line; typing early is fine too,
    // the terminal buffers it).
    api.wait_for(|request| request.last_user_text().contains("RUN")).await;
    stdin.write_all(b"y\n").await.unwrap();
    let output =
        tokio::time::timeout(std::time::Duration::from_secs(120), child.wait_with_output())
            .await
            .unwrap()
            .unwrap();
    let screen = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{screen}");
    assert!(screen.contains("? allow Bash touch tty.txt && ls"), "{screen}");
    assert!(screen.contains("✓ Bash allowed by terminal"), "{screen}");
    assert!(sandbox.file("tty.txt").exists());
}

/// Ctrl-C interrupts the turn and the run exits 130.
#[tokio::test]
async fn ctrl_c_interrupts_and_exits_130() {
    let api = FakeApi::start(
        Scenario::new().reply(Reply::text("a long story that never ends").hold_after(1)),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let (code, stderr) =
        interrupt_run(&api, &sandbox, &real_cli(CliVersion::V2_1_330), "tell me a story").await;
    assert_eq!(code, Some(130), "{stderr}");
    assert!(stderr.contains("interrupting"), "{stderr}");
    // The interrupt reached the CLI, which ended its turn with a result: not a CLI that died
    // first (which exits 130 too, after an interrupt).
    assert!(!stderr.contains("before the result"), "the CLI ended before its result: {stderr}");
}

/// Runs `switchboard run PROMPT`, sends it SIGINT once the fake API has the prompt (the model is
/// streaming, and holding), and gives back its exit code and stderr.
#[allow(clippy::disallowed_methods)] // tests run our own binary
pub(crate) async fn interrupt_run(
    api: &FakeApi,
    sandbox: &CliSandbox,
    claude: &Path,
    prompt: &str,
) -> (Option<i32>, String) {
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .arg("run")
        .arg("--cwd")
        .arg(sandbox.workdir())
        .arg("--claude")
        .arg(claude)
        .arg(prompt)
        .envs(sandbox.env(&api.base_url()))
        .env_remove("SWITCHBOARD_CLAUDE")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    api.wait_for(|request| request.last_user_text().contains(prompt)).await;
    let pid = nix::unistd::Pid::from_raw(child.id().unwrap() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let output = tokio::time::timeout(std::time::Duration::from_secs(60), child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    (output.status.code(), String::from_utf8_lossy(&output.stderr).into_owned())
}

#[tokio::test]
async fn a_run_in_a_worktree_leaves_its_change_on_a_branch_and_says_where() {
    let api = FakeApi::start(
        Scenario::new()
            .reply(
                Reply::tool_use(
                    "Bash",
                    json!({"command": "echo more >> notes.txt && echo WT_MARK", "description": "add a line"}),
                )
                .when_prompt("CHANGE"),
            )
            .reply(Reply::text("Added.").when_tool_result_contains("WT_MARK"))
            .reply(Reply::text("Nothing to do.").when_prompt("LOOK")),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let repo = sandbox.workdir();
    git_repository(&repo, &[("notes.txt", "base\n")]);
    let claude = real_cli(CliVersion::V2_1_330);

    let out = switchboard_run(
        &api,
        &sandbox,
        Some(&claude),
        &["--worktree", "--policy", "auto-approve", "CHANGE the notes"],
    )
    .await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(std::fs::read_to_string(repo.join("notes.txt")).unwrap(), "base\n");
    let branches = git(&repo, &["branch", "--list", "switchboard/*", "--format=%(refname:short)"]);
    let branch = branches.trim();
    assert!(branch.starts_with("switchboard/") && branch.len() == 20, "{branches}");
    let short = &branch["switchboard/".len()..];
    let name = repo.file_name().unwrap().to_str().unwrap();
    let tree = repo.parent().unwrap().join(format!("{name}.worktrees")).join(short);
    assert_eq!(std::fs::read_to_string(tree.join("notes.txt")).unwrap(), "base\nmore\n");
    assert!(out.stderr.contains(&format!("on branch {branch}")), "{}", out.stderr);
    assert!(out.stderr.contains("modified   notes.txt (+1 -0)"), "{}", out.stderr);
    assert!(out.stderr.contains("from main"), "{}", out.stderr);

    // Nothing changed: the worktree and its branch are gone again; --json says so.
    let out = switchboard_run(
        &api,
        &sandbox,
        Some(&claude),
        &["--worktree", "--json", "--policy", "auto-approve", "LOOK around"],
    )
    .await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let last: Value = serde_json::from_str(out.stdout.lines().last().unwrap()).unwrap();
    assert_eq!(last["worktree"]["removed"], true, "{last}");
    assert_eq!(last["worktree"]["files"], json!([]), "{last}");
    assert!(!Path::new(last["worktree"]["path"].as_str().unwrap()).exists());
    let branches = git(&repo, &["branch", "--list", "switchboard/*", "--format=%(refname:short)"]);
    assert_eq!(branches.trim(), branch, "only the first run's branch is left");

    // A CLI that cannot start: exit 4, and no worktree or branch is left behind.
    let missing = sandbox.home().join("no-such-claude");
    let out = switchboard_run(&api, &sandbox, Some(&missing), &["--worktree", "CHANGE"]).await;
    assert_eq!(out.code, Some(4), "{}", out.stderr);
    let branches = git(&repo, &["branch", "--list", "switchboard/*", "--format=%(refname:short)"]);
    assert_eq!(branches.trim(), branch, "no branch of the run that never started");
    let worktrees = git(&repo, &["worktree", "list", "--porcelain"]);
    assert_eq!(worktrees.matches("worktree ").count(), 2, "{worktrees}");

    // Not a repository: refused before any CLI starts.
    let plain = CliSandbox::new().unwrap();
    let out = switchboard_run(&api, &plain, Some(&claude), &["--worktree", "CHANGE"]).await;
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("is not in a git repository"), "{}", out.stderr);
}
