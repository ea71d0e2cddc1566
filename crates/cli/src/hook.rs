//! `switchboard hook`: the command `switchboard hooks install` puts in Claude Code's settings.
//! Claude Code runs it for each hook (`SessionStart`, `PreToolUse`, `SessionEnd`) of every
//! session, with the hook's input on stdin; it passes the input on to the daemon
//! (`POST /hooks/claude`), with the CLI's process and the marks of a session Switchboard runs
//! itself, and prints the daemon's answer for the CLI.
//!
//! When the daemon cannot be reached or cannot decide, the hook gets out of the way as it was
//! installed: fail open (exit 0, no answer: the CLI goes on as it would without Switchboard,
//! asking in its own terminal), or fail closed (a tool call is blocked with exit status 2, and
//! the reason, on stderr, is what the model reads). Only `PreToolUse` can be blocked; the other
//! hooks always let the CLI go on.

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::io::Read as _;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use serde_json::Value;
use switchboard_server::error::ErrorAnswer;

use crate::serve::DataDirArg;

/// The largest hook input passed on (the daemon takes no more).
const MAX_INPUT_BYTES: u64 = switchboard_server::hooks::MAX_HOOK_BODY_BYTES as u64;

/// How long the daemon may take to accept the connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The shells Claude Code runs a hook command in (`sh -c`), looked past to find the CLI.
const SHELLS: [&str; 5] = ["sh", "bash", "dash", "zsh", "fish"];

/// `switchboard hook`
#[derive(Debug, Args)]
pub(crate) struct HookArgs {
    #[command(flatten)]
    data: DataDirArg,
    /// When the daemon cannot be reached or cannot decide, let the CLI go on as it would
    /// without Switchboard (it asks in its own terminal). Without it, the tool call is blocked,
    /// with the reason.
    #[arg(long)]
    fail_open: bool,
}

/// The hook's event, read from its input (for how to fail).
#[derive(Debug, Default, serde::Deserialize)]
struct Event {
    #[serde(default)]
    hook_event_name: String,
}

pub(crate) async fn hook(args: HookArgs) -> ExitCode {
    let mut input = Vec::new();
    let read = std::io::stdin().take(MAX_INPUT_BYTES + 1).read_to_end(&mut input);
    let event: Event = serde_json::from_slice(&input).unwrap_or_default();
    let answer = match read {
        Err(error) => Err(format!("cannot read the hook's input: {error}")),
        Ok(_) if input.len() as u64 > MAX_INPUT_BYTES => {
            Err(format!("the hook's input is over {MAX_INPUT_BYTES} bytes"))
        }
        Ok(_) => pass_on(&args, input).await,
    };
    match answer {
        Ok(answer) => {
            println!("{answer}");
            ExitCode::SUCCESS
        }
        Err(why) if args.fail_open || event.hook_event_name != "PreToolUse" => {
            // Shown in the CLI's verbose output only.
            eprintln!("switchboard: {why}; the CLI goes on without Switchboard");
            ExitCode::SUCCESS
        }
        Err(why) => {
            eprintln!(
                "Switchboard blocked this tool call: it could not decide on it ({why}), and its hook is installed to fail closed. Start the daemon (switchboard serve), or install the hooks with --fail-open."
            );
            ExitCode::from(2)
        }
    }
}

/// The daemon's answer to the hook's `input`, or why there is none.
async fn pass_on(args: &HookArgs, input: Vec<u8>) -> Result<Value, String> {
    let data_dir = switchboard_server::DataDir::new(args.data.resolve());
    let info = data_dir.read_info().map_err(|error| format!("no daemon: {error}"))?;
    let base = info.url.trim_end_matches('/');
    // Each value a word of letters, digits, - and _ (nothing to escape); others are left out.
    let mut query: Vec<(&str, String)> = Vec::new();
    if let Some(pid) = cli_pid() {
        query.push(("pid", pid.to_string()));
    }
    for (name, variable) in [
        ("run", switchboard_transport::procs::RUN_VARIABLE),
        ("terminal", switchboard_server::externals::TERMINAL_VARIABLE),
    ] {
        let word = |value: &String| {
            value.len() <= 128
                && value.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        };
        if let Some(value) = std::env::var(variable).ok().filter(word) {
            query.push((name, value));
        }
    }
    let query: Vec<String> = query.iter().map(|(name, value)| format!("{name}={value}")).collect();
    let query = query.join("&");
    let http = reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .build()
        .map_err(|error| format!("cannot make an HTTP client: {error}"))?;
    let mut request = http
        .post(format!("{base}/hooks/claude?{query}"))
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(input);
    if let Some(token) = data_dir.stored_api_token() {
        request = request.bearer_auth(token);
    }
    let response = request
        .send()
        .await
        .map_err(|error| format!("cannot reach the daemon at {base}: {error}"))?;
    let status = response.status();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    if status.is_success() && body.is_object() {
        Ok(body)
    } else {
        Err(serde_json::from_value::<ErrorAnswer>(body).map_or_else(
            |_| format!("the daemon answered {status}"),
            |answer| format!("the daemon answered: {}", answer.error.message),
        ))
    }
}

/// The CLI's process: this command's parent, past the shell the CLI ran it in.
fn cli_pid() -> Option<u32> {
    let mut pid = u32::try_from(rustix::process::getppid()?.as_raw_nonzero().get()).ok()?;
    for _ in 0..3 {
        let proc = Path::new("/proc").join(pid.to_string());
        let command = std::fs::read_to_string(proc.join("comm")).ok()?;
        if !SHELLS.contains(&command.trim()) {
            return Some(pid);
        }
        pid = parent_of(&std::fs::read_to_string(proc.join("stat")).ok()?)?;
    }
    None
}

/// The parent in a `/proc/PID/stat` line (its fourth field, after the command in parentheses,
/// which may hold anything).
fn parent_of(stat: &str) -> Option<u32> {
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(1)?.parse().ok().filter(|pid| *pid > 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parent_is_read_past_the_command() {
        assert_eq!(parent_of("4242 (sh) S 4200 4242 1 0 -1"), Some(4200));
        assert_eq!(parent_of("4242 (a b) c) S 17 4242"), Some(17), "a command with ) in it");
        assert_eq!(parent_of("4242 (init) S 1 1"), None, "not past init");
        assert_eq!(parent_of("garbage"), None);
    }

    #[test]
    fn this_process_has_a_cli() {
        // The test runner is no shell: it is taken as the "CLI".
        assert!(cli_pid().is_some());
    }
}
