//! `switchboard demo` and `switchboard fake-api`, as a newcomer runs them: the real CLI, no
//! login, no network.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use switchboard_testkit::{real_cli, CliVersion};
use tokio::io::{AsyncBufReadExt, BufReader};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Reads `child`'s stdout until a line starts with `prefix`; the rest of that line.
async fn printed(stdout: &mut BufReader<tokio::process::ChildStdout>, prefix: &str) -> String {
    let mut line = String::new();
    loop {
        line.clear();
        let read = tokio::time::timeout(Duration::from_secs(60), stdout.read_line(&mut line))
            .await
            .expect("the command printed in time")
            .unwrap();
        assert!(read > 0, "the command ended before printing {prefix:?}");
        if let Some(rest) = line.trim().strip_prefix(prefix) {
            return rest.trim().to_owned();
        }
    }
}

/// The demo's tour, clicked through in Chromium (`e2e/demo.test.mjs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::disallowed_methods, clippy::print_stdout)] // runs our binary and node
async fn the_demo_tour_runs_in_a_browser_without_a_login() {
    let root = repo_root();
    let chromium =
        std::env::var("SWITCHBOARD_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    let home = tempfile::tempdir().unwrap();
    // Only what a newcomer's shell has: PATH, and a HOME with no Claude login in it.
    let mut demo = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .arg("demo")
        .arg("--claude")
        .arg(real_cli(CliVersion::V2_1_330))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(demo.stdout.take().unwrap());
    let url = printed(&mut stdout, "open:").await;
    assert!(url.starts_with("http://127.0.0.1:") && url.contains("?token="), "{url}");

    let screenshots = std::env::var("SWITCHBOARD_SCREENSHOTS")
        .map(PathBuf::from)
        .unwrap_or_else(|_| root.join("target/screenshots"));
    std::fs::create_dir_all(&screenshots).unwrap();
    let output = tokio::process::Command::new("node")
        .arg(root.join("e2e/demo.test.mjs"))
        .env("DEMO_URL", &url)
        .env("CHROMIUM", &chromium)
        .env("SCREENSHOTS", &screenshots)
        .kill_on_drop(true)
        .output()
        .await
        .expect("node runs");
    let log = format!(
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    println!("{log}");

    // Ctrl-C ends the demo cleanly, and takes its scratch folder along.
    let pid = nix::unistd::Pid::from_raw(demo.id().unwrap() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let status = tokio::time::timeout(Duration::from_secs(60), demo.wait()).await.unwrap().unwrap();
    let mut stderr = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut demo.stderr.take().unwrap(), &mut stderr)
        .await
        .unwrap();
    assert!(output.status.success(), "the demo's browser test failed:\n{log}\n{stderr}");
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(
        !home.path().join(".claude").exists(),
        "the demo never touched the user's own Claude Code settings"
    );
}

/// `fake-api --script FILE` prints its URL and answers as scripted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::disallowed_methods)] // runs our binary
async fn the_fake_api_serves_a_script_file() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("script.json");
    std::fs::write(
        &script,
        r#"{"replies": [{"when": {"prompt_contains": "PING"}, "blocks": [{"text": "PONG from the script"}]}]}"#,
    )
    .unwrap();
    let mut api = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .args(["fake-api", "--json", "--script"])
        .arg(&script)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(api.stdout.take().unwrap());
    let line = printed(&mut stdout, "{").await;
    let printed: serde_json::Value = serde_json::from_str(&format!("{{{line}")).unwrap();
    let url = printed["url"].as_str().unwrap().to_owned();
    assert_eq!(printed["replies"], 1);

    let sandbox = switchboard_testkit::CliSandbox::new().unwrap();
    let output = sandbox
        .cli_command(&real_cli(CliVersion::V2_1_330), &url)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut cli = output;
    {
        use tokio::io::AsyncWriteExt;
        let mut stdin = cli.stdin.take().unwrap();
        stdin
            .write_all(
                br#"{"type":"user","message":{"role":"user","content":"PING"},"parent_tool_use_id":null,"session_id":""}
"#,
            )
            .await
            .unwrap();
        drop(stdin);
    }
    let out = tokio::time::timeout(Duration::from_secs(60), cli.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("PONG from the script"), "{text}");
    let recorded: serde_json::Value =
        reqwest::get(format!("{url}/_fake/requests")).await.unwrap().json().await.unwrap();
    assert!(
        recorded.as_array().unwrap().iter().any(|request| request["kind"] == "conversation"),
        "{recorded}"
    );
    let pid = nix::unistd::Pid::from_raw(api.id().unwrap() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = tokio::time::timeout(Duration::from_secs(30), api.wait()).await.unwrap().unwrap();
    assert_eq!(status.code(), Some(0));

    // Only on loopback: it shows anyone what it recorded.
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .args(["fake-api", "--listen", "0.0.0.0:0", "--script"])
        .arg(&script)
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a loopback address"));

    // A script with a typo is refused, naming the field.
    std::fs::write(&script, r#"{"replies": [{"blocks": [], "tims": 2}]}"#).unwrap();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .args(["fake-api", "--script"])
        .arg(&script)
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("tims"));
}

/// `doctor --json` finds the CLI it is given and says what it can do.
#[tokio::test]
#[allow(clippy::disallowed_methods)] // runs our binary
async fn doctor_reports_the_cli_and_the_machine() {
    let dir = tempfile::tempdir().unwrap();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .args(["doctor", "--json", "--listen", "127.0.0.1:0", "--claude"])
        .arg(real_cli(CliVersion::V2_1_120))
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .env("HOME", dir.path())
        .env("ANTHROPIC_API_KEY", "sk-test")
        .output()
        .await
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "{report:#}");
    let check = |name: &str| {
        report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|check| check["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no {name} in {report:#}"))
    };
    assert!(check("claude")["detail"].as_str().unwrap().contains("(2.1.120)"));
    assert_eq!(check("version")["status"], "ok");
    assert_eq!(check("sdk-url")["status"], "ok");
    assert_eq!(check("login")["status"], "ok");
    assert_eq!(check("data dir")["status"], "ok");
    assert_eq!(check("port")["status"], "ok");

    // No CLI: a failure, with the way to install one.
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .args(["doctor", "--listen", "127.0.0.1:0", "--claude"])
        .arg(dir.path().join("no-such-claude"))
        .env("HOME", dir.path())
        .env_remove("ANTHROPIC_API_KEY")
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("✗ claude") && text.contains("npm install -g @anthropic-ai/claude-code"),
        "{text}"
    );
    assert!(text.contains("! login"), "no login: {text}");
}
