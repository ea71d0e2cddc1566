//! `switchboard demo`: the product without a Claude login or a network. The daemon runs as
//! `serve` would, with the user's own `claude`, but every session talks to a built-in scripted
//! model (`switchboard_fake_api`) in a scratch project: the browser shows text streaming, a
//! Bash call waiting for approval, an Edit as a diff, a subagent, a question, and the cost
//! chart. Nothing is kept: the data lives in memory and the scratch folder is removed at exit.

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;
use serde_json::json;
use switchboard_fake_api::{FakeApi, Reply, Scenario};
use switchboard_server::{AuthConfig, CreateSession, Daemon, DaemonConfig};
use switchboard_store::{MemoryStore, Store};
use switchboard_transport::stdio::{cli_version, CliOptions};

/// Arguments of `switchboard demo`.
#[derive(Debug, Args)]
pub(crate) struct DemoArgs {
    /// Address to listen on (default: a free port on loopback).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// The Claude Code CLI to drive (default: `claude` on PATH).
    #[arg(long, value_name = "PATH", env = "SWITCHBOARD_CLAUDE")]
    claude: Option<PathBuf>,
}

/// Token counts the scripted replies report, so the cost chart has something to show.
const INPUT_TOKENS: u64 = 18_000;
const OUTPUT_TOKENS: u64 = 700;

pub(crate) async fn demo(args: DemoArgs) -> ExitCode {
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err((code, message)) => {
            eprintln!("switchboard demo: {message}");
            ExitCode::from(code)
        }
    }
}

async fn run(mut args: DemoArgs) -> Result<(), (u8, String)> {
    // Named, on PATH, or the tested version in the cache; with none, offered (at a terminal).
    let program =
        crate::install::resolve(args.claude.as_deref(), false).await.map_err(|error| (4, error))?;
    args.claude = Some(program);
    let mut probe = CliOptions::new(".");
    probe.program = args.claude.clone();
    let version = cli_version(&probe).await.map_err(|error| {
        (
            4,
            format!(
                "{error}; the demo drives your own Claude Code CLI: install it with \
                 `npm install -g @anthropic-ai/claude-code` (no login needed for the demo), \
                 or point at it with --claude PATH"
            ),
        )
    })?;
    let scratch = tempfile::Builder::new()
        .prefix("switchboard-demo-")
        .tempdir()
        .map_err(|error| (1, format!("cannot make a scratch folder: {error}")))?;
    let project = scratch.path().join("project");
    let home = scratch.path().join("home");
    write_project(&project, &home)
        .map_err(|error| (1, format!("cannot set up the demo: {error}")))?;

    let api = FakeApi::start(script(&project))
        .await
        .map_err(|error| (1, format!("cannot start the scripted model: {error}")))?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|error| (1, format!("cannot listen on {}: {error}", args.listen)))?;
    let address = listener.local_addr().map_err(|error| (1, error.to_string()))?;
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let config = DaemonConfig {
        claude: args.claude.clone(),
        default_policy: None,
        external_policy: None,
        // Only PATH of the user's environment: the CLI talks to the scripted model, with a
        // scratch HOME, so neither a login nor a network is needed, and nothing of the user's
        // own Claude Code settings or history is touched.
        env: vec![
            ("ANTHROPIC_BASE_URL".to_owned(), api.base_url()),
            ("ANTHROPIC_API_KEY".to_owned(), "switchboard-demo".to_owned()),
            ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC".to_owned(), "1".to_owned()),
            ("DISABLE_AUTOUPDATER".to_owned(), "1".to_owned()),
            ("HOME".to_owned(), home.display().to_string()),
        ],
        clear_env: true,
        transcripts: None,
        ingress_base: None,
        ingress_token: None,
        ping_interval: None,
        allowed_env: Vec::new(),
        runs_file: None,
        data_dir: None,
        store_retry_limit: None,
        stall_limit: None,
        warm: Vec::new(),
        links: Default::default(),
        notify: Default::default(),
        budget: Default::default(),
        node: None,
        traces: None,
        bus: None,
        placement: Default::default(),
        clock: Default::default(),
    };
    let daemon = Daemon::open(store, config).await.map_err(|error| (1, error.to_string()))?;
    let token = switchboard_server::generate_token();
    let auth = AuthConfig::with_token(&token);

    // The tour: a first turn that answers in markdown, and the tour itself queued behind it.
    let request: CreateSession = serde_json::from_value(json!({
        "cwd": project,
        "prompt": "Warm up: what is in this project?",
    }))
    .map_err(|error| (1, error.to_string()))?;
    let record = daemon.create(request).await.map_err(|error| (1, error.to_string()))?;
    let handle = daemon.running(&record.id).await.map_err(|error| (1, error.to_string()))?;
    handle.send_text("Take the tour".to_owned()).await.map_err(|error| (1, error.to_string()))?;

    let url = format!("http://{address}");
    println!(
        "Switchboard demo (claude {version}, a scripted model, no login, no network)\n  \
         open:  {url}/?token={token}\n  token: {token}\n\
         The tour waits for you in the browser: approve the command and the edit, answer the \
         question. Ctrl-C ends the demo and removes its scratch folder."
    );
    let _ = std::io::stdout().flush();
    let served =
        switchboard_server::serve(listener, daemon, auth, crate::serve::shutdown_signal()).await;
    drop(api);
    drop(scratch);
    served.map_err(|error| (1, format!("the server failed: {error}")))
}

const README: &str = "# Demo project (DEMO-README)\n\nA tiny project the Switchboard demo's \
scripted model works on: `hello.py` greets, and this file says so.\n";

const HELLO: &str = "def greet(name):\n    print(\"hello\", name)\n\n\ngreet(\"world\")\n";

fn write_project(project: &Path, home: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(project)?;
    std::fs::create_dir_all(home)?;
    std::fs::write(project.join("README.md"), README)?;
    std::fs::write(project.join("hello.py"), HELLO)?;
    Ok(())
}

fn costly(reply: Reply) -> Reply {
    let mut reply = reply.times(1000);
    reply.input_tokens = Some(INPUT_TOKENS);
    reply.output_tokens = Some(OUTPUT_TOKENS);
    reply
}

/// The scripted model's replies. Each step answers the result of the one before, recognised
/// by a marker in it, so the tour can be taken again in a new session ("Take the tour").
pub(crate) fn script(project: &Path) -> Scenario {
    let hello = project.join("hello.py").display().to_string();
    let readme = project.join("README.md").display().to_string();
    let warm_up = "## What is here\n\nA small Python project:\n\n\
        | file | what it does |\n|---|---|\n| `README.md` | says what the project is |\n\
        | `hello.py` | greets the world |\n\n\
        ```python\ndef greet(name):\n    print(\"hello\", name)\n```\n\n\
        Next I will take you on a tour of what Switchboard shows.";
    let wrap_up = "## That was the tour\n\nYou saw:\n\n\
        - **streaming** text, rendered as markdown;\n\
        - a **Bash** call held until you approved it;\n\
        - an **Edit**, shown as a diff before it ran;\n\
        - a **subagent**, nested under its task;\n\
        - a **question** you answered from the page;\n\
        - the **cost** of each turn, in the session's stats.\n\n\
        Everything here came from a scripted model: start a new session with the prompt \
        *Take the tour* to see it again.";
    Scenario::new()
        .reply(costly(Reply::text(warm_up).when_prompt("Warm up")))
        // The subagent's steps first: its Read result mentions hello.py too.
        .reply(costly(
            Reply::tool_use("Read", json!({"file_path": readme})).when_prompt("SUBAGENT_TASK"),
        ))
        .reply(costly(
            Reply::text("SUBAGENT_REPORT: the README describes a tiny project that greets.")
                .when_tool_result_contains("DEMO-README"),
        ))
        .reply(costly(
            Reply::text("Let's take the tour. First a shell command: Switchboard holds it until you approve.")
                .then_tool(
                    "Bash",
                    json!({"command": "touch notes.txt && ls", "description": "Create a notes file and list the project"}),
                )
                .when_prompt("tour"),
        ))
        .reply(costly(
            Reply::text("The command ran. Now an edit; you see it as a diff before it happens.")
                .then_tool(
                    "Edit",
                    json!({"file_path": hello, "old_string": "print(\"hello\", name)", "new_string": "print(f\"hello, {name}, from Switchboard\")"}),
                )
                .when_tool_result_contains("notes.txt"),
        ))
        .reply(costly(
            Reply::text("Next, a subagent reads the README for me.")
                .then_tool(
                    // The subagent tool is `Agent` from 2.1.5x, `Task` before: whichever the
                    // CLI offers.
                    "Agent|Task",
                    // In the foreground: newer CLIs may otherwise run it in the background.
                    json!({"description": "Read the README", "prompt": "SUBAGENT_TASK: summarise README.md in one line", "subagent_type": "general-purpose", "run_in_background": false}),
                )
                .when_tool_result_contains("hello.py"),
        ))
        .reply(costly(
            Reply::text("The subagent is done. One question for you:")
                .then_tool(
                    "AskUserQuestion",
                    json!({"questions": [{"question": "How was the tour so far?", "header": "Tour",
                        "options": [{"label": "Clear", "description": "I saw what I wanted to see"},
                                    {"label": "Show me more", "description": "I want to try my own prompts"}],
                        "multiSelect": false}]}),
                )
                .when_tool_result_contains("SUBAGENT_REPORT"),
        ))
        .reply(costly(Reply::text(wrap_up).when_tool_result_contains("How was the tour")))
        .fallback(
            "This is the demo's scripted model: it only knows the tour. Start a new session \
             with the prompt *Take the tour* to see it again, or run `switchboard serve` for \
             real sessions.",
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_step_of_the_tour_is_scripted() {
        let scenario = script(Path::new("/demo"));
        assert_eq!(scenario.replies.len(), 8);
        assert!(scenario.fallback_text.is_some());
    }
}
