//! `switchboard search` and `switchboard blame` against a daemon with the real CLI and the fake
//! API: a session writes a file with a shell redirect and another edits it; search finds each
//! by the file and the command, a person reads the hits and scripts read `--json`; blame names
//! the session of each line, and says so, with exit status 1, of a line no session wrote.

use serde_json::{json, Value};
use switchboard_testkit::{CliSandbox, FakeApi, Reply, Scenario};

use crate::serve::{client, create_session, start_daemon, wait_session};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_finds_what_sessions_did_and_blame_names_who_wrote_a_line() {
    let sandbox = CliSandbox::new().unwrap();
    let file = sandbox.workdir().join("notes.txt");
    let api = FakeApi::start(
        Scenario::new()
            .reply(
                Reply::tool_use(
                    "Bash",
                    json!({"command": "printf 'first line\\nsecond line\\n' > notes.txt"}),
                )
                .when_prompt("WRITE"),
            )
            .reply(Reply::tool_use("Read", json!({"file_path": file})).when_prompt("EDIT"))
            .reply(
                Reply::tool_use(
                    "Edit",
                    json!({"file_path": file, "old_string": "second line",
                           "new_string": "second line, edited"}),
                )
                .when_tool_result_contains("second line"),
            )
            .fallback("done"),
    )
    .await
    .unwrap();
    let data = tempfile::tempdir().unwrap();
    let daemon = start_daemon(data.path(), &api, &sandbox, &["--policy", "auto-approve"]).await;
    let token = std::fs::read_to_string(data.path().join("token")).unwrap();
    let writer = create_session(&daemon.url, &token, &sandbox, "WRITE the notes").await;
    wait_session(&daemon.url, &token, &writer, |s| s["state"] == "idle").await;
    let editor = create_session(&daemon.url, &token, &sandbox, "EDIT the notes").await;
    wait_session(&daemon.url, &token, &editor, |s| s["state"] == "idle").await;
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "first line\nsecond line, edited\n");

    // Scripts read JSON: the calls that wrote the file, newest first. (The index is written in
    // the background: asked until it has both.)
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    let hits = loop {
        let (code, out, err) =
            client(data.path(), &["search", "wrote:notes.txt", "kind:call", "--json"]).await;
        assert_eq!(code, Some(0), "{err}");
        let answer: Value = serde_json::from_str(out.trim()).unwrap();
        let hits = answer["hits"].as_array().unwrap().clone();
        if hits.len() == 2 {
            break hits;
        }
        assert!(tokio::time::Instant::now() < deadline, "{answer}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(
        (hits[0]["session_id"].as_str(), hits[0]["tool"].as_str()),
        (Some(editor.as_str()), Some("Edit"))
    );
    assert_eq!(
        (hits[1]["session_id"].as_str(), hits[1]["tool"].as_str()),
        (Some(writer.as_str()), Some("Bash"))
    );
    // A person reads a line a hit.
    let (code, out, err) = client(data.path(), &["search", "command:printf"]).await;
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains(&writer[..8]) && out.contains("Bash printf"), "{out}");
    let (code, out, _) = client(data.path(), &["search", "kind:turn", "group:session"]).await;
    assert_eq!(code, Some(0));
    assert!(out.starts_with("      COST   ENTRIES  KEY") && out.contains(&editor), "{out}");
    let (code, _, err) = client(data.path(), &["search", "colour:red"]).await;
    assert_eq!(code, Some(1));
    assert!(err.contains("colour: is not a key"), "{err}");

    // Blame: the edited line is the editor's, the other the redirect's.
    let at = |line: usize| format!("{}:{line}", file.display());
    let (code, out, err) = client(data.path(), &["blame", &at(2)]).await;
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains(&format!("written by session {editor}")) && out.contains("Edit"), "{out}");
    assert!(out.contains("EDIT the notes"), "the turn's prompt: {out}");
    let (code, out, err) = client(data.path(), &["blame", &at(1), "--json"]).await;
    assert_eq!(code, Some(0), "{err}");
    let blamed: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(blamed["found"]["call"]["session_id"], writer.as_str(), "{blamed}");
    // A line nobody wrote, a line past the end, and a bad place.
    std::fs::write(sandbox.workdir().join("mine.txt"), "typed by hand\n").unwrap();
    let mine = format!("{}:1", sandbox.workdir().join("mine.txt").display());
    let (code, out, _) = client(data.path(), &["blame", &mine]).await;
    assert_eq!(code, Some(1));
    assert!(out.contains("no session wrote"), "{out}");
    let (code, _, err) = client(data.path(), &["blame", &at(9)]).await;
    assert_eq!(code, Some(1));
    assert!(err.contains("has 2 lines, not 9"), "{err}");
    let (code, _, err) = client(data.path(), &["blame", "notes.txt"]).await;
    assert_eq!(code, Some(1));
    assert!(err.contains("say FILE:LINE"), "{err}");
}
