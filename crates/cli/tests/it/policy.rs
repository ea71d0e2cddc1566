//! `switchboard policy test FILE`: a dry run of a policy file over the daemon's sessions, with
//! the real CLI and the fake API: the report as text and as JSON, and a bad file or filter
//! refused with the reason and exit status 1.

use serde_json::{json, Value};
use switchboard_testkit::{CliSandbox, FakeApi, Reply, Scenario};

use crate::serve::{client, create_session, start_daemon, wait_session};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_test_reports_what_a_policy_would_have_done() {
    let api = FakeApi::start(
        Scenario::new()
            .reply(
                Reply::tool_use("Bash", json!({"command": "echo hello", "description": "greet"}))
                    .when_prompt("GO"),
            )
            .fallback("done"),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let data = tempfile::tempdir().unwrap();
    let daemon = start_daemon(data.path(), &api, &sandbox, &["--policy", "auto-approve"]).await;
    let token = std::fs::read_to_string(data.path().join("token")).unwrap();
    let id = create_session(&daemon.url, &token, &sandbox, "GO").await;
    wait_session(&daemon.url, &token, &id, |s| s["state"] == "idle").await;
    let candidate = sandbox.file("candidate.toml");
    std::fs::write(&candidate, "[permissions]\ndeny = [\"Bash(echo:*)\"]\n").unwrap();
    let file = candidate.display().to_string();

    let (code, out, err) = client(data.path(), &["policy", "test", &file, "--json"]).await;
    assert_eq!(code, Some(0), "{err}");
    let report: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(report["headline"]["calls"], 1, "{report}");
    assert_eq!(report["headline"]["would_deny_ran"], 1, "{report}");
    assert_eq!(report["rules"][0]["rule"], "Bash(echo:*)");
    assert_eq!(report["rules"][0]["outcomes"]["ran_unasked"]["calls"][0]["session"], id.as_str());

    let (code, out, err) = client(data.path(), &["policy", "test", &file, "--sessions", &id]).await;
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.starts_with("1 calls in 1 sessions: it would have allowed 0 unasked that were not, denied 1 that ran, and asked 0 that ran unasked (0 as they were)."),
        "{out}"
    );
    assert!(
        out.contains("deny  Bash(echo:*)  (1 calls)") && out.contains("Bash echo hello"),
        "{out}"
    );

    std::fs::write(&candidate, "[permissions]\nallow = [\"Bash(\"]\n").unwrap();
    let (code, _, err) = client(data.path(), &["policy", "test", &file]).await;
    assert_eq!(code, Some(1));
    assert!(err.contains("switchboard policy test: policy:") && err.contains("Bash("), "{err}");
    std::fs::write(&candidate, "[permissions]\ndefault = \"ask\"\n").unwrap();
    let (code, _, err) =
        client(data.path(), &["policy", "test", &file, "--sessions", "owner=me"]).await;
    assert_eq!(code, Some(1));
    assert!(err.contains("\"owner\" is no filter"), "{err}");
}
