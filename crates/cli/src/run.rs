//! `switchboard run`: one session, from a prompt to its result, in the terminal.
//!
//! Text streams to stdout as it arrives; tool calls and permission decisions go to stderr. A
//! request the policy leaves to a person becomes a prompt when stdin is a terminal, and a
//! denial (with the reason) when it is not: permissions fail closed.

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use serde_json::Value;
use switchboard_protocol::content::ContentBlock;
use switchboard_protocol::stream::{Delta, StreamEvent};
use switchboard_protocol::{Message, Num, PermissionMode};
use switchboard_session::{
    spawn_session, Behavior, DecidedBy, LineDirection, PendingPermission, PermissionAnswer, Policy,
    SessionConfig, SessionError, SessionEvent, SessionHandle,
};

/// Exit status: the session ended with a success result.
pub(crate) const EXIT_OK: u8 = 0;
/// Exit status: the session ended with an error result (API error, max turns, ...).
pub(crate) const EXIT_ERROR_RESULT: u8 = 1;
/// Exit status: bad arguments or policy file.
pub(crate) const EXIT_USAGE: u8 = 2;
/// Exit status: the CLI crashed or exited before the result.
pub(crate) const EXIT_CRASHED: u8 = 3;
/// Exit status: the CLI could not be started (not found, bad working directory).
pub(crate) const EXIT_NOT_STARTED: u8 = 4;
/// Exit status: interrupted (Ctrl-C), as shells report SIGINT.
pub(crate) const EXIT_INTERRUPTED: u8 = 130;

/// How long each step of ending the CLI may take.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Arguments of `switchboard run`.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// Working directory of the session.
    #[arg(long, value_name = "DIR")]
    cwd: Option<PathBuf>,
    /// Model to use (an alias such as `sonnet`, or a full model id).
    #[arg(long, value_name = "M")]
    model: Option<String>,
    /// Claude Code permission mode: default, acceptEdits, plan, bypassPermissions, dontAsk, auto
    /// (the policy's rules hold; what no rule decides, Claude Code's classifier judges).
    #[arg(long, value_name = "MODE")]
    permission_mode: Option<String>,
    /// Permission policy (TOML, Claude Code rule syntax). Without one, every request the CLI
    /// sends is put to you (or denied when there is no terminal).
    #[arg(long, value_name = "FILE", env = "SWITCHBOARD_POLICY")]
    policy: Option<PathBuf>,
    /// The Claude Code CLI to run (default: `claude` on PATH).
    #[arg(long, value_name = "PATH", env = "SWITCHBOARD_CLAUDE")]
    claude: Option<PathBuf>,
    /// Resume the Claude session with this id.
    #[arg(long, value_name = "ID")]
    resume: Option<String>,
    /// With --resume: continue in a new session (a fork) instead of the old one.
    #[arg(long, requires = "resume")]
    fork: bool,
    /// Print every event as one JSON object per line on stdout, instead of text.
    #[arg(long)]
    json: bool,
    /// Run in a git worktree of its own: a new branch `switchboard/<8 characters>` from the
    /// directory's HEAD, in `<repo>.worktrees/` beside the repository. The worktree stays for
    /// you to review and merge (its path and branch are printed at the end); one where
    /// nothing changed is removed.
    #[arg(long, conflicts_with = "resume")]
    worktree: bool,
    /// The prompt.
    #[arg(required = true)]
    prompt: String,
}

pub(crate) async fn run(args: RunArgs) -> ExitCode {
    match run_session(args).await {
        Ok(code) => ExitCode::from(code),
        Err((code, message)) => {
            eprintln!("switchboard run: {message}");
            ExitCode::from(code)
        }
    }
}

async fn run_session(args: RunArgs) -> Result<u8, (u8, String)> {
    let policy = match &args.policy {
        Some(path) if path.as_os_str() == "auto-approve" => Policy::allow_all(),
        Some(path) => Policy::from_file(path).map_err(|error| (EXIT_USAGE, error.to_string()))?,
        None => Policy::default(),
    };
    let cwd = match &args.cwd {
        Some(cwd) => cwd.clone(),
        None => std::env::current_dir()
            .map_err(|error| (EXIT_USAGE, format!("no working directory: {error}")))?,
    };
    if let Some(mode) = &args.permission_mode {
        if let PermissionMode::Other(other) = mode.parse().unwrap_or(PermissionMode::Default) {
            let known = PermissionMode::KNOWN.join(", ");
            return Err((
                EXIT_USAGE,
                format!("unknown permission mode {other:?} (one of: {known})"),
            ));
        }
    }
    let tree = if args.worktree {
        let short = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
        let (tree, inside) = switchboard_server::worktree::create(&cwd, &short)
            .await
            .map_err(|error| (EXIT_USAGE, error))?;
        if !args.json {
            eprintln!(
                "switchboard run: in a worktree of its own: {} (branch {})",
                tree.path.display(),
                tree.branch
            );
        }
        Some((tree, inside))
    } else {
        None
    };
    let cwd = tree.as_ref().map_or(cwd, |(_, inside)| inside.clone());
    let mut config = SessionConfig::new(cwd, policy);
    // Named, on PATH, or the tested version in the cache; with none, offered (at a terminal).
    let program = crate::install::resolve(args.claude.as_deref(), false)
        .await
        .map_err(|error| (EXIT_USAGE, error))?;
    config.cli.program = Some(program);
    config.cli.model = args.model.clone();
    config.cli.resume = args.resume.clone();
    config.cli.fork_session = args.fork;
    // Checked above, before any worktree was made. None asked: `default`, pinned, as the
    // daemon does (the person's settings' `permissions.defaultMode` could be looser).
    config.cli.permission_mode =
        Some(args.permission_mode.as_deref().map_or(PermissionMode::Default, |mode| {
            mode.parse().unwrap_or(PermissionMode::Default)
        }));
    let started = match spawn_session(config) {
        Ok(started) => Ok(started),
        Err(SessionError::Transport(error)) => Err((EXIT_NOT_STARTED, error.to_string())),
        Err(other) => Err((EXIT_CRASHED, other.to_string())),
    };
    let started = match started {
        Ok((handle, events)) => match handle.send_text(args.prompt.clone()).await {
            Ok(()) => Ok((handle, events)),
            Err(error) => Err((EXIT_CRASHED, error.to_string())),
        },
        Err(error) => Err(error),
    };
    let (handle, mut events) = match started {
        Ok(started) => started,
        Err(error) => {
            // Nothing ran in it: the worktree and its branch go again.
            if let Some((tree, _)) = &tree {
                let _ = switchboard_server::worktree::remove(tree, true, true).await;
            }
            return Err(error);
        }
    };

    let interactive = std::io::stdin().is_terminal();
    let mut printer = Printer::new(args.json);
    let mut outcome: Option<u8> = None;
    let mut interrupted = false;
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        let event = tokio::select! {
            event = events.recv() => event,
            _ = &mut ctrl_c, if !interrupted => {
                interrupted = true;
                eprintln!("\nswitchboard run: interrupting (Ctrl-C again to kill)");
                let handle = handle.clone();
                tokio::spawn(async move {
                    let _ = handle.interrupt().await;
                    let _ = tokio::signal::ctrl_c().await;
                    let _ = handle.shutdown(Duration::from_millis(100)).await;
                });
                continue;
            }
        };
        let Some(event) = event else { break };
        printer.print(&event);
        match &event {
            SessionEvent::PermissionRequested(pending) => {
                let handle = handle.clone();
                let pending = pending.clone();
                tokio::spawn(async move { decide_in_terminal(handle, pending, interactive).await });
            }
            SessionEvent::Line(line) if line.direction == LineDirection::FromCli => {
                if let Message::Result(result) = line.message.readable() {
                    if outcome.is_none() {
                        outcome = Some(if interrupted {
                            EXIT_INTERRUPTED
                        } else if result.is_error {
                            EXIT_ERROR_RESULT
                        } else {
                            EXIT_OK
                        });
                        let handle = handle.clone();
                        tokio::spawn(async move { handle.shutdown(SHUTDOWN_GRACE).await });
                    }
                }
            }
            SessionEvent::Exited { description, .. } if outcome.is_none() => {
                printer.finish_text();
                eprintln!("switchboard run: {description} before the result");
                outcome = Some(if interrupted { EXIT_INTERRUPTED } else { EXIT_CRASHED });
            }
            _ => {}
        }
    }
    printer.finish_text();
    if let Some((tree, _)) = tree {
        report_worktree(&tree, args.json).await;
    }
    Ok(outcome.unwrap_or(EXIT_CRASHED))
}

/// Says where a `--worktree` run's change is and how to take it (or removes the worktree when
/// nothing changed): on stderr, or as a last JSON line with `--json`.
async fn report_worktree(tree: &switchboard_server::worktree::Worktree, json: bool) {
    use switchboard_server::worktree;
    let files = match switchboard_server::diff::worktree(tree).await {
        Ok(diff) => diff.files,
        Err(error) => {
            eprintln!("switchboard run: cannot read the worktree's change: {error}");
            return;
        }
    };
    // Nothing against the base (committed or not): removed; `remove` keeps a worktree with
    // changes or a branch with commits of its own.
    let removed = files.is_empty() && worktree::remove(tree, false, true).await.is_ok();
    if json {
        let files: Vec<Value> = files
            .iter()
            .map(|file| {
                serde_json::json!({"path": file.path, "status": file.status,
                    "added": file.added, "removed": file.removed, "binary": file.binary})
            })
            .collect();
        let line = serde_json::json!({"worktree": {
            "repo": tree.repo, "path": tree.path, "branch": tree.branch, "base": tree.base,
            "base_branch": tree.base_branch, "removed": removed, "files": files,
        }});
        println!("{line}");
        return;
    }
    if removed {
        eprintln!("switchboard run: nothing changed; the worktree and its branch are removed");
        return;
    }
    let (added, deleted) =
        files.iter().fold((0, 0), |(a, r), file| (a + file.added, r + file.removed));
    let files_changed = files.len();
    let files_word = if files_changed == 1 { "file" } else { "files" };
    let base = tree.base_branch.as_deref().unwrap_or(&tree.base[..tree.base.len().min(12)]);
    eprintln!(
        "switchboard run: the change is in {} on branch {} ({files_changed} {files_word} changed, +{added} -{deleted}; from {base}).",
        tree.path.display(),
        tree.branch,
    );
    for file in files.iter().take(20) {
        eprintln!("  {:<10} {} (+{} -{})", file.status, file.path, file.added, file.removed);
    }
    if files.len() > 20 {
        eprintln!("  and {} more", files.len() - 20);
    }
    let quote = |path: &std::path::Path| {
        let text = path.display().to_string();
        if text.chars().all(|c| c.is_ascii_alphanumeric() || "/._-+,=:@".contains(c)) {
            text
        } else {
            format!("'{}'", text.replace('\'', r"'\''"))
        }
    };
    let (path, branch, repo) = (quote(&tree.path), &tree.branch, quote(&tree.repo));
    eprintln!(
        "  review: git -C {path} status && git -C {path} diff\n  take it: git -C {path} add -A && git -C {path} commit -m '…' && git -C {repo} merge {branch}\n  drop it: git -C {repo} worktree remove --force {path} && git -C {repo} branch -D {branch}"
    );
}

/// Puts a permission request to the person at the terminal, or denies it when there is none.
async fn decide_in_terminal(handle: SessionHandle, pending: PendingPermission, interactive: bool) {
    let answer = if interactive {
        let prompt = pending.clone();
        tokio::task::spawn_blocking(move || ask_on_terminal(&prompt)).await.unwrap_or_else(|_| {
            PermissionAnswer::deny("the terminal prompt failed; denied (permissions fail closed)")
        })
    } else {
        PermissionAnswer::deny(format!(
            "{} needs approval and no one is at a terminal to give it; denied (give switchboard run a --policy that allows it, or run it from a terminal)",
            pending.tool_name
        ))
    };
    let who = if interactive { "terminal" } else { "no-terminal" };
    if let Err(error) = handle.respond_permission(&pending.request_id, answer, who).await {
        eprintln!("switchboard run: {error}");
    }
}

fn ask_on_terminal(pending: &PendingPermission) -> PermissionAnswer {
    let mut stderr = std::io::stderr();
    let read_line = || {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map(|_| line.trim().to_owned()).unwrap_or_default()
    };
    if pending.tool_name == "AskUserQuestion" {
        let mut answers = std::collections::BTreeMap::new();
        for question in pending.input["questions"].as_array().into_iter().flatten() {
            let text = question["question"].as_str().unwrap_or("?");
            let _ = writeln!(stderr, "\n? {}", plain(text));
            let options: Vec<&str> = question["options"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|o| o["label"].as_str())
                .collect();
            for (index, label) in options.iter().enumerate() {
                let _ = writeln!(stderr, "  {}. {}", index + 1, plain(label));
            }
            let _ = write!(stderr, "answer (number or text): ");
            let _ = stderr.flush();
            let reply = read_line();
            let chosen = reply
                .parse::<usize>()
                .ok()
                .and_then(|n| options.get(n.wrapping_sub(1)).map(|label| (*label).to_owned()))
                .unwrap_or(reply);
            answers.insert(text.to_owned(), chosen);
        }
        return PermissionAnswer { answers: Some(answers), ..PermissionAnswer::allow() };
    }
    // Claude Code's own heading and reason, and an MCP tool's server, before the question; no
    // "always" where it offers no standing rule. Anything but a yes denies (its default_to_no
    // is this prompt's default already).
    // One write: what the person types early is echoed before or after it, never inside.
    let hints = &pending.hints;
    let mut prompt = String::new();
    if let Some(title) = &hints.title {
        prompt.push_str(&format!("\n{}", plain(title)));
    }
    let server = hints.mcp_server.as_ref().map_or(String::new(), |server| {
        format!(" (MCP server {}, from {})", server.name, server.source)
    });
    prompt.push_str(&format!(
        "\n? allow {}{} {}\n",
        pending.tool_name,
        plain(&server),
        summarize(&pending.tool_name, &pending.input)
    ));
    if let Some(reason) = &pending.cli_reason {
        prompt.push_str(&format!("  Claude Code: {}\n", plain(reason)));
    }
    let always = !hints.no_standing_rule;
    let choices =
        if always { "[y]es / [n]o / [a]lways for this session" } else { "[y]es (once) / [n]o" };
    prompt.push_str(&format!("  {choices}: "));
    let _ = stderr.write_all(prompt.as_bytes());
    let _ = stderr.flush();
    match read_line().to_lowercase().as_str() {
        "y" | "yes" => PermissionAnswer::allow(),
        "a" | "always" if always => {
            PermissionAnswer { remember: true, ..PermissionAnswer::allow() }
        }
        _ => PermissionAnswer::deny("the user denied this at the terminal"),
    }
}

/// One line describing a tool call's input.
/// What a person reads when a turn ends with an error result. An API failure arrives as
/// `subtype: "success"` with `is_error: true`: the subtype alone would say "success".
pub(crate) fn failure(subtype: &str, text: &str) -> String {
    let what = match subtype {
        "success" => "✗ the API call failed".to_owned(),
        "error_max_turns" => "✗ the turn stopped at the turn limit (--max-turns)".to_owned(),
        "error_max_budget_usd" => "✗ the turn stopped at the budget".to_owned(),
        "error_during_execution" => "✗ the turn failed while running".to_owned(),
        other => format!("✗ the turn failed ({other})"),
    };
    if text.is_empty() {
        what
    } else {
        format!("{what}: {text}")
    }
}

/// `✓ Bash allowed by rule Bash(ls:*)`, `✗ Bash denied by alice: not now`.
pub(crate) fn decision(tool: &str, allowed: bool, by: &DecidedBy, message: &str) -> String {
    let who = match by {
        DecidedBy::Policy { rule: Some(rule) } => format!("rule {rule}"),
        DecidedBy::Policy { rule: None } => "policy default".to_owned(),
        DecidedBy::Person { who } => who.clone(),
        DecidedBy::Timeout => "timeout".to_owned(),
        DecidedBy::Cancelled => "the CLI (withdrawn)".to_owned(),
        DecidedBy::LinkClosed => "the CLI exiting".to_owned(),
        DecidedBy::Cli => "the CLI on its own".to_owned(),
        DecidedBy::Terminal => "the person at the terminal".to_owned(),
    };
    if allowed {
        return format!("✓ {tool} allowed by {who}");
    }
    // The reason, unless it only repeats who decided ("denied by policy rule X").
    let reason = match message {
        "" => String::new(),
        text if text.contains(who.as_str()) => String::new(),
        text => format!(": {text}"),
    };
    format!("✗ {tool} denied by {who}{reason}")
}

pub(crate) fn summarize(tool: &str, input: &Value) -> String {
    let field = |key: &str| input.get(key).and_then(Value::as_str).map(str::to_owned);
    let text = match tool {
        "Bash" => field("command"),
        "Read" | "Write" | "Edit" | "MultiEdit" | "NotebookEdit" => {
            field("file_path").or_else(|| field("notebook_path"))
        }
        "WebFetch" => field("url"),
        "Grep" | "Glob" => field("pattern"),
        "Task" | "Agent" => field("description"),
        _ => None,
    }
    .unwrap_or_else(|| input.to_string());
    shorten(&text, SUMMARY_CHARS)
}

/// How many characters of a tool call's input the terminal prompt shows.
const SUMMARY_CHARS: usize = 200;

/// `text` with control characters (an escape sequence could redraw the terminal, a newline
/// push the rest out of view) shown as `�`, at most 300 characters: words from the CLI or the
/// model, about to be printed on a person's terminal.
pub(crate) fn plain(text: &str) -> String {
    shorten(text, 300)
}

/// The first `max` characters of `text`, control characters shown as `�`, with `…` when there
/// were more.
fn shorten(text: &str, max: usize) -> String {
    let mut chars = text.chars().map(|c| if c.is_control() { '\u{fffd}' } else { c });
    let mut short: String = chars.by_ref().take(max).collect();
    if chars.next().is_some() {
        short.push('…');
    }
    short
}

/// Writes events to the terminal.
struct Printer {
    json: bool,
    /// Whether text was printed without a final newline.
    mid_line: bool,
    /// Whether the current message's text arrived as deltas (so its `assistant` line is not
    /// printed again).
    streamed: bool,
}

impl Printer {
    fn new(json: bool) -> Self {
        Printer { json, mid_line: false, streamed: false }
    }

    fn print(&mut self, event: &SessionEvent) {
        if self.json {
            let mut stdout = std::io::stdout().lock();
            let _ = writeln!(stdout, "{}", event.to_json());
            let _ = stdout.flush();
            return;
        }
        match event {
            SessionEvent::Line(line) if line.direction == LineDirection::FromCli => {
                self.print_message(&line.message)
            }
            SessionEvent::PermissionDecided { tool_name, behavior, by, message, .. } => {
                self.note(&decision(tool_name, *behavior == Behavior::Allow, by, message));
            }
            SessionEvent::BadLine(error) => {
                self.note(&format!("! unreadable line from the CLI: {error}"))
            }
            SessionEvent::Stderr(text) => self.note(&format!("claude: {text}")),
            _ => {}
        }
    }

    fn print_message(&mut self, message: &Message) {
        match message.readable() {
            Message::StreamEvent(event) if event.parent_tool_use_id.is_none() => match &event.event
            {
                StreamEvent::ContentBlockDelta(delta) => {
                    if let Delta::Text(text) = &delta.delta {
                        self.text(&text.text);
                        self.streamed = true;
                    }
                }
                StreamEvent::MessageStart(_) => self.streamed = false,
                _ => {}
            },
            Message::Assistant(assistant) if assistant.parent_tool_use_id.is_none() => {
                for block in &assistant.message.content {
                    match block {
                        ContentBlock::Text(text) if !self.streamed => self.text(&text.text),
                        ContentBlock::ToolUse(tool) => {
                            self.note(&format!(
                                "→ {} {}",
                                tool.name,
                                summarize(&tool.name, &tool.input)
                            ));
                        }
                        _ => {}
                    }
                }
            }
            Message::System(system) => {
                if let switchboard_protocol::SystemMessage::ApiRetry(retry) = &**system {
                    self.note(&format!(
                        "… API error {}, retry {} of {}",
                        retry.error.as_deref().unwrap_or("?"),
                        Num::or_zero(&retry.attempt),
                        Num::or_zero(&retry.max_retries)
                    ));
                }
            }
            Message::Result(result) if result.is_error => {
                let errors =
                    result.errors.as_ref().map(|errors| errors.join("; ")).unwrap_or_default();
                let text = result.result.clone().unwrap_or(errors);
                self.note(&failure(&result.subtype, &text));
            }
            _ => {}
        }
    }

    fn text(&mut self, text: &str) {
        let mut stdout = std::io::stdout().lock();
        let _ = stdout.write_all(text.as_bytes());
        let _ = stdout.flush();
        self.mid_line = !text.ends_with('\n');
    }

    fn note(&mut self, text: &str) {
        self.finish_text();
        eprintln!("{text}");
    }

    fn finish_text(&mut self) {
        if self.mid_line && !self.json {
            println!();
            self.mid_line = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{failure, shorten};

    #[test]
    fn a_failed_turn_says_what_failed_not_its_subtype() {
        assert_eq!(failure("success", "overloaded"), "✗ the API call failed: overloaded");
        assert_eq!(
            failure("error_max_turns", ""),
            "✗ the turn stopped at the turn limit (--max-turns)"
        );
        assert_eq!(failure("error_new", "x"), "✗ the turn failed (error_new): x");
    }

    #[test]
    fn shorten_counts_characters_not_bytes() {
        // 150 two-byte characters are 300 bytes but only 150 characters: nothing is cut.
        let text = "é".repeat(150);
        assert_eq!(shorten(&text, 200), text);
        // Exactly the limit: nothing cut, no ellipsis.
        assert_eq!(shorten(&"x".repeat(200), 200), "x".repeat(200));
        // One more: cut, with the ellipsis.
        assert_eq!(shorten(&"é".repeat(201), 200), format!("{}…", "é".repeat(200)));
    }
}
