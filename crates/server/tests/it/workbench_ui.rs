//! The workbench on a session long enough to scroll, in a browser (`e2e/workbench.test.mjs`):
//! the tabs that take the transcript's place, the read-only diff of a session without a
//! worktree and an edit's counts that open it, paths that open Files at a line, tables on a
//! phone, the phone's header, its settings sheet and its cost panel, approvals in a person's
//! words with Allow and Deny on the waiting bar, worktree sessions listed under their
//! repository, and the notification bell. Real CLI, fake API, real git.

use std::sync::Arc;

use serde_json::json;
use switchboard_store::{MemoryStore, Store};
use switchboard_testkit::{git, CliSandbox, FakeApi, Reply, Scenario};

use crate::ui::run_script;
use crate::Server;

/// An answer long enough to scroll at any size: sections of prose, a table wider than a phone,
/// and paths with lines in inline code.
fn long_answer() -> String {
    let mut text = String::from("# Where the value comes from\n\nThe value is set in `src/app.py:250`; see also `src/app.py`. It is served on `127.0.0.1:7777` and `api.example.com:443`.\n\n");
    text.push_str(
        "| component | configuration_manager_settings | responsibility | owner | status |\n",
    );
    text.push_str("|---|---|---|---|---|\n");
    for row in 1..=4 {
        text.push_str(&format!(
            "| loader_{row} | environment_overrides_enabled | reads the configuration files | platform_team | production_ready |\n"
        ));
    }
    for part in 1..=30 {
        text.push_str(&format!(
            "\n## Part {part}\n\nStep {part} reads the settings, checks them against the schema, and hands \
             them to the next stage; nothing here changes the value itself, which stays where it \
             was set until the fix below.\n"
        ));
    }
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_workbench_on_a_session_long_enough_to_scroll() {
    let sandbox = CliSandbox::new().unwrap();
    let repo = sandbox.workdir().join("shop");
    std::fs::create_dir_all(repo.join("src")).unwrap();
    let app = repo.join("src/app.py");
    // Long enough that the line an answer names is out of sight until Files scrolls to it.
    let lines: Vec<String> = (1..=300)
        .map(|n| match n {
            250 => "value = 1".to_owned(),
            300 => "END = True".to_owned(),
            n => format!("x_{n} = {n}"),
        })
        .collect();
    std::fs::write(&app, lines.join("\n") + "\n").unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    git(&repo, &["config", "user.name", "Test Person"]);
    git(&repo, &["config", "user.email", "person@example.com"]);
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-q", "-m", "first"]);
    // Notes the session does not touch, changed before it starts: Review lists them before
    // src/app.py, so an edit's counts must bring its file into sight.
    std::fs::create_dir_all(repo.join("docs")).unwrap();
    for note in 1..=4 {
        let text: String = (1..=60).map(|n| format!("note {note}, line {n}\n")).collect();
        std::fs::write(repo.join(format!("docs/notes-{note}.md")), text).unwrap();
    }
    let api = FakeApi::start(
        Scenario::new()
            // With the usage windows a claude.ai login's CLI reports (the CLI runs as one).
            .reply(windows(Reply::text(long_answer()).when_prompt("LONG")))
            // A partial read (lines 10 to 14), a whole one, then the edit.
            .reply(
                Reply::text("Reading the value first.")
                    .then_tool("Read", json!({"file_path": app, "offset": 248, "limit": 5}))
                    .when_prompt("FIX"),
            )
            .reply(
                Reply::tool_use(
                    "Edit",
                    json!({"file_path": app, "old_string": "value = 1", "new_string": "value = 2"}),
                )
                .when_tool_result_contains("END = True"),
            )
            .reply(
                Reply::tool_use("Read", json!({"file_path": app}))
                    .when_tool_result_contains("x_249"),
            )
            .reply(
                Reply::text("## Fixed\n\nThe value in `src/app.py:250` is 2 now.")
                    .when_tool_result_contains("has been updated"),
            )
            // A rule of the session's policy asks about this one.
            .reply(
                Reply::tool_use(
                    "Bash",
                    json!({"command": "touch asked.txt", "description": "make a file"}),
                )
                .when_prompt("ASKBASH"),
            )
            .reply(
                Reply::tool_use(
                    "Bash",
                    json!({"command": "touch phone-asked.txt && echo PHONE_BAR_MARK", "description": "from the bar"}),
                )
                .when_prompt("ASKPHONE"),
            )
            .reply(Reply::text("Made it from the bar.").when_tool_result_contains("PHONE_BAR_MARK"))
            .reply(Reply::text("Not made, as you said.").when_tool_result())
            // Claude Code says only a person may approve this one, and never "always" (`rm`
            // refuses a path ending in `..`: nothing would go were it run).
            .reply(
                Reply::tool_use(
                    "Bash",
                    json!({"command": "rm -rf /nonexistent-switchboard/..", "description": "clean up"}),
                )
                .when_prompt("ASKRM"),
            )
            .reply(Reply::text("Left it alone.").when_tool_result())
            // Held after three words, once at each size, until the test releases it.
            .reply(
                Reply::text("## Held\n\nThis answer is held back until the test lets it finish.")
                    .when_prompt("HOLD")
                    .hold_after(3)
                    .times(2),
            )
            .fallback("OK."),
    )
    .await
    .unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let server = Server::start_with(store, &api, &sandbox, |config| {
        config.env = sandbox.subscriber_env(&api.base_url()).into_iter().collect();
    })
    .await;
    let (ok, log) = run_script(
        "e2e/workbench.test.mjs",
        &server.base,
        &[("REPO", repo.display().to_string()), ("FAKE_API_URL", api.base_url())],
    )
    .await;
    server.stop().await;
    assert!(ok, "the workbench's browser test failed:\n{log}");
    let after = std::fs::read_to_string(&app).unwrap();
    assert!(after.contains("value = 2\n"), "the edit was made: {after}");
    assert!(!repo.join("asked.txt").exists(), "the denied command never ran");
    assert!(repo.join("phone-asked.txt").exists(), "the command allowed from the bar ran");
}

/// `reply` with the API's usage-window headers: the five-hour window past its warning (82 %),
/// the seven-day one at 40 %.
fn windows(reply: Reply) -> Reply {
    let resets = (switchboard_store::now_ms() / 1000 + 3 * 3600).to_string();
    reply
        .header("anthropic-ratelimit-unified-status", "allowed")
        .header("anthropic-ratelimit-unified-representative-claim", "five_hour")
        .header("anthropic-ratelimit-unified-reset", resets.as_str())
        .header("anthropic-ratelimit-unified-5h-utilization", "0.82")
        .header("anthropic-ratelimit-unified-5h-reset", resets.as_str())
        .header("anthropic-ratelimit-unified-5h-status", "allowed_warning")
        .header("anthropic-ratelimit-unified-7d-utilization", "0.4")
        .header("anthropic-ratelimit-unified-7d-reset", resets.as_str())
        .header("anthropic-ratelimit-unified-7d-status", "allowed")
}
