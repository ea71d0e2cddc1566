//! `switchboard schedule …` and `switchboard trigger …` against a real daemon (the real CLI,
//! the fake API): what each command prints, the refusals, and a book of schedules that outlives
//! the daemon (`schedules.json`, private to its user).

use std::os::unix::fs::PermissionsExt as _;
use std::time::Duration;

use serde_json::Value;
use switchboard_testkit::{CliSandbox, FakeApi, Reply, Scenario};

use crate::serve::{client, start_daemon, Daemon};

/// The schedule `name` as `schedule show --json` prints it, once `check` holds (within 90 s).
async fn schedule_when(
    data: &std::path::Path,
    name: &str,
    check: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        let (code, shown, stderr) = client(data, &["schedule", "show", name, "--json"]).await;
        assert_eq!(code, Some(0), "{stderr}");
        let view: Value = serde_json::from_str(&shown).unwrap();
        if check(&view) {
            return view;
        }
        assert!(std::time::Instant::now() < deadline, "the schedule never got there: {view}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn started(view: &Value) -> usize {
    view["state"]["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|run| run["outcome"] == "started")
        .count()
}

pub(crate) async fn sigterm(mut daemon: Daemon) {
    let pid = nix::unistd::Pid::from_raw(daemon.child.id().unwrap() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status =
        tokio::time::timeout(Duration::from_secs(60), daemon.child.wait()).await.unwrap().unwrap();
    assert_eq!(status.code(), Some(0), "{}", daemon.stderr.await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedule_and_trigger_commands_keep_a_book_that_outlives_the_daemon() {
    let api = FakeApi::start(Scenario::new().reply(Reply::text("tidied").when_prompt("TIDY")))
        .await
        .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let data = tempfile::tempdir().unwrap();
    let daemon = start_daemon(data.path(), &api, &sandbox, &[]).await;
    let work = sandbox.workdir().display().to_string();
    let data = data.path();

    let (code, out, stderr) = client(data, &["schedule", "list"]).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(out.contains("no schedules"), "{out}");
    let (code, _, stderr) =
        client(data, &["schedule", "add", "bad", "--cron", "61 * * * *", "--prompt", "x"]).await;
    assert_eq!(code, Some(1));
    assert!(stderr.contains("\"61 * * * *\" is not one"), "{stderr}");
    let (code, _, stderr) = client(data, &["schedule", "add", "bad", "--cron", "* * * * *"]).await;
    assert_eq!(code, Some(1));
    assert!(stderr.contains("needs --prompt"), "{stderr}");
    let (code, _, stderr) = client(data, &["schedule", "add", "bad", "--prompt", "x"]).await;
    assert_eq!(code, Some(2), "clap: --cron or --at: {stderr}");

    // A yearly schedule: it is not due during the test; run-now runs it.
    let (code, out, stderr) = client(
        data,
        &[
            "schedule",
            "add",
            "tidy",
            "--cron",
            "0 0 1 1 *",
            "--time-zone",
            "Europe/Paris",
            "--cwd",
            &work,
            "--prompt",
            "TIDY",
            "--overlap",
            "queue",
        ],
    )
    .await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(out.contains("schedule tidy added") && out.contains("next run: "), "{out}");
    let (code, out, _) = client(data, &["schedule", "list"]).await;
    assert_eq!(code, Some(0));
    assert!(out.contains("tidy") && out.contains("0 0 1 1 * (Europe/Paris)"), "{out}");
    let (code, id, stderr) = client(data, &["schedule", "run-now", "tidy"]).await;
    assert_eq!(code, Some(0), "{stderr}");
    let id = id.trim().to_owned();
    assert!(stderr.contains("schedule tidy runs now"), "{stderr}");
    // The run ends with its turn: its session exited, and it shows in the list.
    let view = schedule_when(data, "tidy", |view| view["sessions"][0]["state"] == "exited").await;
    assert_eq!(view["sessions"][0]["id"], id.as_str(), "{view}");
    assert_eq!(started(&view), 1);
    let (_, out, _) = client(data, &["schedule", "list"]).await;
    assert!(out.contains(&format!("{} exited", &id[..8])), "{out}");
    let (code, out, _) = client(data, &["schedule", "pause", "tidy"]).await;
    assert_eq!((code, out.trim()), (Some(0), "schedule tidy paused"));

    let (code, secret, stderr) = client(data, &["trigger", "add", "ci", "--feedback"]).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(secret.trim().len() >= 32, "the secret alone on stdout: {secret}");
    assert!(stderr.contains("POST /hooks/ci") && stderr.contains("shown this once"), "{stderr}");
    let (code, _, stderr) = client(data, &["trigger", "add", "nothing"]).await;
    assert_eq!(code, Some(1));
    assert!(stderr.contains("--prompt"), "{stderr}");

    // A restart keeps the book (private to the user), runs and all.
    sigterm(daemon).await;
    let book = data.join("schedules.json");
    assert_eq!(std::fs::metadata(&book).unwrap().permissions().mode() & 0o777, 0o600);
    let daemon = start_daemon(data, &api, &sandbox, &[]).await;
    let (code, out, _) = client(data, &["schedule", "list"]).await;
    assert_eq!(code, Some(0));
    assert!(out.contains("tidy") && out.contains("paused"), "{out}");
    let view = schedule_when(data, "tidy", |_| true).await;
    assert_eq!(started(&view), 1, "{view}");
    let (code, out, _) = client(data, &["trigger", "list"]).await;
    assert_eq!(code, Some(0));
    assert!(out.contains("/hooks/ci") && out.contains("yes"), "{out}");
    let (code, out, _) = client(data, &["trigger", "rm", "ci"]).await;
    assert_eq!((code, out.trim()), (Some(0), "removed trigger ci"));
    let (code, out, _) = client(data, &["schedule", "rm", "tidy"]).await;
    assert_eq!((code, out.trim()), (Some(0), "removed schedule tidy"));
    let (code, _, stderr) = client(data, &["schedule", "show", "tidy"]).await;
    assert_eq!(code, Some(1));
    assert!(stderr.contains("no schedule tidy"), "{stderr}");
    sigterm(daemon).await;
}
