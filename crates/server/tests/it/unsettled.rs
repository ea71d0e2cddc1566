//! Tool calls a crash cannot re-run, with the real CLI killed in the middle of a Bash call
//! (`SIGKILL`): the call is unsettled; a resume is refused, naming it, until a person settles
//! it (or the policy's `on_unsettled` does); the resumed CLI is told how it was settled, in its
//! system prompt, on a CLI that drops the cut-off call from the conversation (2.1.120) and on
//! one that keeps it (2.1.330).

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use switchboard_store::{MemoryStore, Store};
use switchboard_testkit::{CliSandbox, FakeApi, Reply, Scenario};

use crate::Server;

const DEPLOY: &str = "echo $PPID > cli.pid; sleep 60; echo deployed >> deployed.txt";

/// Starts a session whose one call deploys, and kills its CLI while the call runs; its id.
async fn killed_mid_call(server: &Server, sandbox: &CliSandbox, policy: &str) -> String {
    let (status, made) = server
        .post(
            "/api/sessions",
            json!({"cwd": sandbox.workdir(), "prompt": "DEPLOY it", "policy": policy}),
        )
        .await;
    assert_eq!(status, 201, "{made}");
    let id = made["id"].as_str().unwrap().to_owned();
    let mut ws = server.ws(&format!("/api/sessions/{id}/subscribe?after=0")).await;
    // The command's first act names its parent: the CLI's process (or a shell under it).
    let pidfile = sandbox.workdir().join("cli.pid");
    let deadline = Instant::now() + crate::WAIT;
    while !pidfile.exists() || std::fs::read_to_string(&pidfile).unwrap().trim().is_empty() {
        assert!(Instant::now() < deadline, "the call never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Killed once its transcript holds the call (a CLI killed before it wrote its transcript
    // has no conversation to resume: 2.1.120 writes it a moment after the call starts).
    while !sandbox.transcripts_contain("\"tool_use\"") {
        assert!(Instant::now() < deadline, "the transcript never held the call");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut pid: i32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
    for _ in 0..8 {
        let command = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if command.contains("claude") {
            break;
        }
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        pid = stat.rsplit(')').next().unwrap().split_whitespace().nth(1).unwrap().parse().unwrap();
    }
    let command = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    assert!(command.contains("claude"), "the CLI's process: {command:?}");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL)
        .unwrap();
    let frames = ws.until(|frame| frame["event"]["event"] == "exited").await;
    assert_eq!(frames.last().unwrap()["event"]["signal"], 9);
    id
}

/// The last user message the model got (the fake API's last conversation request's).
fn last_prompt(api: &FakeApi) -> String {
    let requests = api.conversation_requests();
    let request = requests.last().expect("a conversation request");
    let messages = request.body["messages"].as_array().unwrap();
    messages
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .map(|m| m["content"].to_string())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_cut_off_by_a_crash_is_settled_by_a_person_before_the_session_runs_again() {
    let api = FakeApi::start(
        Scenario::new()
            .reply(
                Reply::tool_use("Bash", json!({"command": DEPLOY, "description": "deploy"}))
                    .when_prompt("DEPLOY"),
            )
            .fallback("Understood."),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let server = Server::start_with(store, &api, &sandbox, |config| {
        config.claude = Some(switchboard_testkit::sandbox::real_cli_of("2.1.120"));
    })
    .await;
    let id = killed_mid_call(&server, &sandbox, "[permissions]\nallow = [\"Bash\"]").await;

    let (status, open) = server.get(&format!("/api/sessions/{id}/unsettled")).await;
    assert_eq!(status, 200, "{open}");
    let open = open.as_array().unwrap().clone();
    assert_eq!(open.len(), 1, "{open:?}");
    assert_eq!(
        (open[0]["tool_name"].as_str(), open[0]["input"]["command"].as_str()),
        (Some("Bash"), Some(DEPLOY))
    );
    let call = open[0]["tool_use_id"].as_str().unwrap().to_owned();

    // No resume until it is settled: the refusal names the call.
    let (status, refused) = server.post(&format!("/api/sessions/{id}/resume"), json!({})).await;
    assert_eq!((status, refused["error"]["code"].as_str()), (409, Some("unsettled")), "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.contains(&call) && message.contains("sleep 60"), "{message}");
    // A settle that does not fit is refused; the call stays unsettled.
    for (path, body, expected) in [
        (format!("/api/sessions/{id}/unsettled/{call}"), json!({"settle": "maybe"}), 400),
        (format!("/api/sessions/{id}/unsettled/toolu_other"), json!({"settle": "done"}), 404),
    ] {
        let (status, answer) = server.post(&path, body).await;
        assert_eq!(status, expected, "{answer}");
    }
    let (status, left) = server
        .post(
            &format!("/api/sessions/{id}/unsettled/{call}"),
            json!({"settle": "done", "note": "the deploy finished; checked the release page"}),
        )
        .await;
    assert_eq!((status, left), (200, json!([])));
    let (_, open) = server.get(&format!("/api/sessions/{id}/unsettled")).await;
    assert_eq!(open, json!([]));

    // Resumed: the model (whose CLI dropped the cut-off call from its conversation) is told
    // first, in the run's first prompt, before anything else runs.
    let (status, resumed) = server.post(&format!("/api/sessions/{id}/resume"), json!({})).await;
    assert_eq!(status, 200, "{resumed}");
    let mut ws = server.ws(&format!("/api/sessions/{id}/subscribe?after=0")).await;
    ws.until(|frame| crate::is_result(frame) && frame["event"]["line"]["result"] == "Understood.")
        .await;
    let told = last_prompt(&api);
    assert!(told.contains(&format!("(call {call}): it took effect (a person confirmed: the deploy finished; checked the release page); do not run it again")), "{told}");
    // Settled once: the next run is not told again, and nothing is unsettled.
    let (_, open) = server.get(&format!("/api/sessions/{id}/unsettled")).await;
    assert_eq!(open, json!([]));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_policy_may_settle_cut_off_calls_itself() {
    let api = FakeApi::start(
        Scenario::new()
            .reply(
                Reply::tool_use("Bash", json!({"command": DEPLOY, "description": "deploy"}))
                    .when_prompt("DEPLOY"),
            )
            .fallback("Checking first."),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let server = Server::start(store, &api, &sandbox).await;
    let policy = "[permissions]\nallow = [\"Bash\"]\non_unsettled = \"interrupted\"";
    let id = killed_mid_call(&server, &sandbox, policy).await;
    let (_, open) = server.get(&format!("/api/sessions/{id}/unsettled")).await;
    let call = open[0]["tool_use_id"].as_str().unwrap().to_owned();
    let (status, resumed) = server.post(&format!("/api/sessions/{id}/resume"), json!({})).await;
    assert_eq!(status, 200, "{resumed}");
    let mut ws = server.ws(&format!("/api/sessions/{id}/subscribe?after=0")).await;
    ws.until(|frame| {
        crate::is_result(frame) && frame["event"]["line"]["result"] == "Checking first."
    })
    .await;
    let told = last_prompt(&api);
    assert!(told.contains(&format!("(call {call}): its outcome is unknown")), "{told}");
    // The log says who settled it.
    let (_, events) = server.get(&format!("/api/sessions/{id}/events?after=0")).await;
    let settled: Vec<&Value> = events
        .as_array()
        .unwrap()
        .iter()
        .filter(|event| {
            event["kind"] == "call_settled" || event["event"]["event"] == "call_settled"
        })
        .collect();
    assert_eq!(settled.len(), 1, "{events}");
    server.stop().await;
}
