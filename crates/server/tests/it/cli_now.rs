//! Claude Code as it is now: what the daemon pins so that the current CLI, and the person's own
//! settings for it, cannot loosen what the policy holds.

use std::sync::Arc;

use serde_json::json;
use switchboard_store::{MemoryStore, Store};
use switchboard_testkit::{CliSandbox, FakeApi, Reply, Scenario};

use crate::Server;

/// A session that names no permission mode runs in `default`, whatever the person's settings
/// say: with `permissions.defaultMode = "acceptEdits"` in their `~/.claude/settings.json`, an
/// edit the policy leaves to a person still reaches one (left to choose, the CLI would make the
/// edit unasked).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_that_names_no_mode_runs_in_default_whatever_the_settings_say() {
    let sandbox = CliSandbox::new().unwrap();
    let notes = sandbox.file("notes.txt");
    std::fs::write(&notes, "colour = 1\n").unwrap();
    let settings = sandbox.home().join(".claude");
    std::fs::create_dir_all(&settings).unwrap();
    std::fs::write(
        settings.join("settings.json"),
        json!({"permissions": {"defaultMode": "acceptEdits"}}).to_string(),
    )
    .unwrap();
    let api = FakeApi::start(
        Scenario::new()
            .reply(Reply::tool_use("Read", json!({"file_path": notes})).when_prompt("EDIT"))
            .reply(
                Reply::tool_use(
                    "Edit",
                    json!({"file_path": notes, "old_string": "colour = 1", "new_string": "color = 2"}),
                )
                .when_tool_result_contains("colour"),
            )
            .reply(Reply::text("Done.").when_tool_result()),
    )
    .await
    .unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let server = Server::start(store, &api, &sandbox).await;
    let (status, session) =
        server.post("/api/sessions", json!({"cwd": sandbox.workdir(), "prompt": "EDIT it"})).await;
    assert_eq!(status, 201, "{session}");
    let id = session["id"].as_str().unwrap().to_owned();
    let mut ws = server.ws(&format!("/api/sessions/{id}/subscribe?after=0")).await;
    let frames = ws
        .until(|frame| {
            frame["event"]["event"] == "permission_requested"
                || crate::is_result(frame)
                || frame["event"]["line"]["subtype"] == "init"
                    && frame["event"]["line"]["permissionMode"] != "default"
        })
        .await;
    let last = frames.last().unwrap();
    assert_eq!(last["event"]["event"], "permission_requested", "a person is asked: {last}");
    assert_eq!(last["event"]["tool_name"], "Edit", "{last}");
    let init = frames
        .iter()
        .find(|frame| frame["event"]["line"]["subtype"] == "init")
        .expect("the CLI said how it started");
    assert_eq!(init["event"]["line"]["permissionMode"], "default", "{init}");
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "colour = 1\n", "nothing edited unasked");
    server.stop().await;
}
