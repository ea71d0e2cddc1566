//! `switchboard audit export|verify` against a daemon with the real CLI and the fake API: the
//! trail holds a session's start and its decision and a token made; an export in JSON lines
//! verifies, and the same export with a record altered or removed does not, naming the
//! record; CSV has its header.

use serde_json::{json, Value};
use switchboard_testkit::{CliSandbox, FakeApi, Reply, Scenario};

use crate::serve::{client, create_session, start_daemon, wait_session};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_export_verifies_and_an_altered_or_removed_record_shows() {
    let api = FakeApi::start(
        Scenario::new()
            .reply(Reply::tool_use("Bash", json!({"command": "echo audited"})).when_prompt("GO"))
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
    let (code, _, err) =
        client(data.path(), &["token", "create", "viewer", "--scope", "read"]).await;
    assert_eq!(code, Some(0), "{err}");

    let export = sandbox.file("audit.jsonl");
    let file = export.display().to_string();
    let (code, _, err) = client(data.path(), &["audit", "export", "--out", &file]).await;
    assert_eq!(code, Some(0), "{err}");
    let text = std::fs::read_to_string(&export).unwrap();
    let records: Vec<Value> =
        text.lines().map(|line| serde_json::from_str(line).unwrap()).collect();
    let kinds: Vec<&str> = records.iter().map(|r| r["entry"]["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["session_started", "decision", "token_created"], "{text}");
    let decision = &records[1]["entry"];
    assert_eq!(
        (&decision["session"], &decision["tool"], &decision["decision"], &decision["by"]["kind"]),
        // auto-approve raises no objection in the hook, and the CLI runs the call.
        (&json!(id), &json!("Bash"), &json!("allow"), &json!("cli")),
        "{decision}"
    );
    assert_eq!(records[2]["entry"]["name"], "viewer");
    let started = &records[0]["entry"];
    assert_eq!(started["cwd"].as_str(), sandbox.workdir().to_str(), "{started}");
    assert_eq!(
        (&started["started_by"], &started["resumed"]),
        (&json!("token admin (api)"), &json!(false))
    );

    let (code, out, err) = client(data.path(), &["audit", "verify", &file]).await;
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.starts_with("3 records, 1 to 3, each in its place"), "{out}");
    let (code, out, err) = client(data.path(), &["audit", "verify", "--json"]).await;
    assert_eq!(code, Some(0), "{out}{err}");
    let verified: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!((verified["ok"].as_bool(), verified["head_seq"].as_u64()), (Some(true), Some(3)));
    assert_eq!(verified["head_hash"], records[2]["hash"]);

    // The decision made to read "deny": its hash no longer fits.
    let altered = text.replacen("\"decision\":\"allow\"", "\"decision\":\"deny\"", 1);
    assert_ne!(altered, text);
    std::fs::write(&export, &altered).unwrap();
    let (code, out, _) = client(data.path(), &["audit", "verify", &file]).await;
    assert_eq!(code, Some(1));
    assert!(out.contains("does not hold at record 2") && out.contains("altered"), "{out}");
    // The decision removed: a record is missing.
    let removed: String =
        text.lines().enumerate().filter(|(n, _)| *n != 1).map(|(_, l)| format!("{l}\n")).collect();
    std::fs::write(&export, removed).unwrap();
    let (code, out, _) = client(data.path(), &["audit", "verify", &file]).await;
    assert_eq!(code, Some(1));
    assert!(out.contains("does not hold at record 2: records 2 to 2 are missing"), "{out}");
    // Not an export at all.
    std::fs::write(&export, "{\"seq\": \"one\"}\n").unwrap();
    let (code, _, err) = client(data.path(), &["audit", "verify", &file]).await;
    assert_eq!(code, Some(1));
    assert!(err.contains("line 1 is not an audit record"), "{err}");

    let csv = sandbox.file("audit.csv").display().to_string();
    let (code, _, err) =
        client(data.path(), &["audit", "export", "--format", "csv", "--out", &csv]).await;
    assert_eq!(code, Some(0), "{err}");
    let rows = std::fs::read_to_string(&csv).unwrap();
    assert!(rows.starts_with("seq,at_ms,node,kind,session,detail,prev,hash\n1,"), "{rows}");
    assert_eq!(rows.lines().count(), 4, "{rows}");
}
