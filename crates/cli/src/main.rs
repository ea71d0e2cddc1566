//! `switchboard`: a control plane for Claude Code.
//!
//! A thin binary over the library crates: argument parsing, output formatting and exit codes
//! live here; everything else lives in the crates it calls.

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

mod acp;
mod audit;
mod claude;
mod client;
mod config;
mod decode;
mod demo;
mod doctor;
mod fake_api;
mod hook;
mod hooks;
mod install;
mod pair;
mod policy;
mod run;
mod schedule;
mod search;
mod serve;
mod tasks;

/// Run, watch, steer and audit Claude Code sessions.
#[derive(Debug, Parser)]
#[command(name = "switchboard", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Check NDJSON protocol lines against Switchboard's model of the protocol.
    ///
    /// Prints one line per input line: `LINE<TAB>direction<TAB>type<TAB>subtype-or-dash`
    /// (direction is a guess from the content: from_cli, to_cli, either), then a summary line
    /// `N lines, N decoded, N unknown, N malformed, N roundtrip-mismatch`. Details of
    /// malformed lines and mismatches go to stderr. Run it on a new CLI's output to see what
    /// changed.
    ///
    /// A line of a known type whose fields do not fit the model (a newer or older CLI changed
    /// a field's shape) counts as unknown, with the reason on stderr.
    ///
    /// Exit status: 0 when the checks asked for pass; 1 when --strict finds an unknown,
    /// drifted or malformed line, or --roundtrip finds a mismatch; 2 when an input cannot be
    /// read.
    Decode(decode::DecodeArgs),
    /// Run one Claude Code session from a prompt to its result.
    ///
    /// Text streams to stdout as it arrives; tool calls and permission decisions go to stderr.
    /// A tool call the policy leaves to a person is asked at the terminal (allow / deny /
    /// always); without a terminal it is denied, with the reason, because permissions fail
    /// closed. With --json, every event is one JSON object per line on stdout.
    ///
    /// Exit status: 0 the session ended with a success result (even if some tool calls were
    /// denied); 1 it ended with an error result (API error, max turns); 2 bad arguments or
    /// policy file; 3 the CLI crashed or exited before the result; 4 the CLI could not be
    /// started (not found: install it or use --claude / SWITCHBOARD_CLAUDE); 130 interrupted.
    Run(run::RunArgs),
    /// Run the daemon: sessions over a REST + WebSocket API, every event kept in SQLite.
    ///
    /// Listens on 127.0.0.1:7777 by default. Every endpoint needs the token, which is
    /// generated on first start, kept (mode 0600) in the data directory and printed with the
    /// URL; --token or SWITCHBOARD_TOKEN set it. Stops on Ctrl-C or SIGTERM, ending every
    /// session's CLI first.
    Serve(serve::ServeArgs),
    /// List, show, follow or stop the daemon's sessions.
    Sessions(client::SessionsArgs),
    /// Be an Agent Client Protocol agent on stdin and stdout, for editors (Zed, Neovim,
    /// JetBrains): each session the editor opens is a session of the daemon, under its
    /// policy, its permission requests put to the editor and to every other face at once
    /// (docs/acp.md).
    Acp(acp::AcpArgs),
    /// Allow a pending permission request.
    Approve(client::AnswerArgs),
    /// Make, list or revoke named API tokens, each with a scope: read, approve, operate or
    /// admin (the daemon's own token is admin).
    ///
    /// A phone that only approves gets an approve token: `switchboard token create phone
    /// --scope approve`. Decisions made with a token are recorded under its name. Needs the
    /// daemon running, and an admin token (the data directory's, by default).
    Token(client::TokenArgs),
    /// Run a task on a timetable: a cron expression in a time zone, or once; each run a fresh
    /// session, never two at once, claimed once in a fleet, held while a usage window is
    /// spent (docs/schedules.md).
    Schedule(schedule::ScheduleArgs),
    /// Run a task when a signed webhook arrives (POST /hooks/NAME), or send GitHub's failed
    /// checks, reviews and conflicts to the session that made the branch (docs/schedules.md).
    Trigger(schedule::TriggerArgs),
    /// Deny a pending permission request.
    Deny(client::AnswerArgs),
    /// Try a policy on what already happened: replay the stored sessions' tool calls through a
    /// policy file and see, per rule, what it would have allowed, denied and asked.
    Policy(policy::PolicyArgs),
    /// The audit trail: every decision, every session's start and end, every token made or
    /// revoked, every budget changed, each record chained by its hash to the one before.
    /// `export` writes it (JSON lines or CSV); `verify` checks the daemon's, or an export's,
    /// and names the first record altered or removed. Needs an admin token.
    Audit(audit::AuditArgs),
    /// Search every session: its tool calls (by tool, by a file touched or written, by a
    /// shell command's word), permission decisions (allowed, denied, who answered), prompts,
    /// answers and turns' costs, by origin, schedule, model, project, node and time.
    /// `group:project` (or model, day, ...) adds the entries and their cost up. Each hit names
    /// its session and event: `switchboard open ID` shows it.
    Search(search::SearchArgs),
    /// Which session, turn and tool call last wrote a line of a file: through Edit, Write,
    /// MultiEdit and shell redirects, in the session's own folder or its worktree (a merged
    /// branch's file is found by its path in the repository).
    ///
    /// Exit status: 0 a session wrote it; 1 none did (or the daemon could not be asked).
    Blame(search::BlameArgs),
    /// Check this machine: the `claude` it finds (path, version, whether the version is in
    /// the tested range and can use --sdk-url), whether the CLI looks logged in, whether the
    /// data directory is writable and the port free. Each problem comes with its fix.
    ///
    /// Needs no network. Exit status: 0 when nothing failed (warnings allowed), 1 otherwise.
    Doctor(doctor::DoctorArgs),
    /// Install Claude Code (the version Switchboard is tested with, or --version) into
    /// Switchboard's cache, from npm, with progress; nothing when it is there already.
    ///
    /// Switchboard runs it when there is no `claude` on PATH; `run` and `demo` offer this
    /// themselves at a terminal. Needs Node.js 20+ and npm.
    InstallClaude(install::InstallArgs),
    /// See Switchboard without a Claude login or a network: the daemon drives your `claude`
    /// against a built-in scripted model, in a scratch project.
    ///
    /// Prints a URL to open. The tour shows text streaming, a Bash call waiting for your
    /// approval, an Edit as a diff, a subagent, a question, and the cost of each turn. Nothing
    /// is kept: Ctrl-C ends it and removes the scratch folder.
    Demo(demo::DemoArgs),
    /// Serve the scripted fake Anthropic API that Switchboard's tests use, for your own
    /// integration tests.
    ///
    /// Prints `ANTHROPIC_BASE_URL=…` (or `{"url": …}` with --json) and serves until Ctrl-C.
    /// The script format is in docs/fake-api.md.
    FakeApi(fake_api::FakeApiArgs),
    /// Start a session on the daemon and print its id (--follow: then follow it).
    New(client::NewArgs),
    /// Run a list of tasks on the daemon, each in a fresh session, and sum them up.
    ///
    /// The tasks come from a file or stdin: one prompt per line, or JSON lines with `prompt`,
    /// `cwd`, `model` and `policy`. Each gets its own CLI process and Claude session, stopped
    /// once its turn ends; they run one after another, or --parallel N at once, and show live
    /// in the web UI meanwhile. Each finished task prints its result, cost, duration and
    /// session id (--json: one object per task, then a summary).
    ///
    /// Exit status: 0 every task succeeded; 1 one failed (or the daemon could not be reached);
    /// 2 the task list is unreadable; 130 interrupted (Ctrl-C stops the running sessions).
    Loop(tasks::LoopArgs),
    /// Send a message to a session (while a turn runs, Claude Code takes it in between tool calls; --steer stops the turn for it).
    Send(client::SendArgs),
    /// Start an exited session's CLI again, where it stopped.
    Resume(client::SessionArg),
    /// Interrupt a session's turn (with --all, also drop the messages queued behind it).
    Interrupt(client::InterruptArgs),
    /// Ask a session's Claude Code what is in force: its context window, the plan's usage, the
    /// permission rules of its own settings, the hooks configured.
    Ask(client::AskArgs),
    /// Stop one task a session runs in the background (a Bash command, a subagent); the turn
    /// goes on. Without a task, lists them.
    StopTask(client::StopTaskArgs),
    /// Open the web UI in a browser, signed in (at a session, when one is named).
    Open(client::OpenArgs),
    /// Run the interactive Claude Code CLI in this terminal, as a session the daemon shows.
    ///
    /// The terminal behaves as if Switchboard were not there: raw mode, resizes and the CLI's
    /// exit status pass through, and Ctrl-Z hands the terminal back to the shell until `fg`. The session's history is the CLI's own transcript, followed
    /// live; a message sent from the web UI or the API is typed into the CLI, and an interrupt
    /// presses Esc. Permission prompts stay in the terminal, where the CLI asks them.
    ///
    /// Give the CLI's own arguments after `claude` (`switchboard claude --model opus`; put `--`
    /// first when one is also a switchboard option). Exit status: the CLI's (128 + N when
    /// signal N ended it); 2 when it could not start (no terminal, no daemon, --print).
    Claude(claude::ClaudeArgs),
    /// Put every Claude Code session on this machine under Switchboard: install its hooks in
    /// your Claude Code settings (or one project's), take them out, or see whether they are in.
    ///
    /// Installed, each new session (a terminal's, an editor's, `claude -p` in a script) shows
    /// in Switchboard, its transcript followed live, and each tool call goes to the daemon's
    /// policy: denied, allowed, or held for a person in the web UI, the API or a notification.
    /// The change is shown as a diff before it is written; uninstall puts the file back as it
    /// was.
    Hooks(hooks::HooksArgs),
    /// What Claude Code runs for the hooks `switchboard hooks install` wrote: passes the
    /// hook's input (stdin) to the daemon and prints its answer. Not for typing by hand.
    Hook(hook::HookArgs),
    /// Sign a phone in by a glance: prints a QR code whose link signs the phone in to the web
    /// UI with a new approve token (--name, default "phone"), once, within minutes.
    ///
    /// The phone then turns on notifications there and answers requests; the token is listed
    /// and revoked like any other (`switchboard token list|revoke`). Needs an admin token (the
    /// data directory's, by default), and a daemon the phone can reach (`serve --public-url`).
    Pair(pair::PairArgs),
    /// Print a shell completion script: `switchboard completions bash > ~/.local/share/bash-completion/completions/switchboard`.
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
}

fn main() -> ExitCode {
    // Before any thread exists: the config file's values become the variables' defaults.
    if let Err(message) = config::apply() {
        #[allow(clippy::print_stderr)]
        {
            eprintln!("switchboard: {message}");
        }
        return ExitCode::from(2);
    }
    let cli = Cli::parse();
    match cli.command {
        Command::Decode(args) => decode::run(&args),
        Command::Run(args) => block_on(run::run(args)),
        Command::Serve(args) => block_on(serve::serve(args)),
        Command::Sessions(args) => block_on(client::sessions(args)),
        Command::Acp(args) => block_on(acp::acp(args)),
        Command::Approve(args) => block_on(client::answer(args, true)),
        Command::Deny(args) => block_on(client::answer(args, false)),
        Command::Policy(args) => block_on(policy::policy(args)),
        Command::Audit(args) => block_on(audit::audit(args)),
        Command::Search(args) => block_on(search::search(args)),
        Command::Blame(args) => block_on(search::blame(args)),
        Command::Token(args) => block_on(client::token(args)),
        Command::Schedule(args) => block_on(schedule::schedule(args)),
        Command::Trigger(args) => block_on(schedule::trigger(args)),
        Command::Doctor(args) => block_on(doctor::doctor(args)),
        Command::InstallClaude(args) => block_on(install::install_claude(args)),
        Command::Demo(args) => block_on(demo::demo(args)),
        Command::FakeApi(args) => block_on(fake_api::fake_api(args)),
        Command::New(args) => block_on(client::new(args)),
        Command::Loop(args) => block_on(tasks::run(args)),
        Command::Send(args) => block_on(client::send(args)),
        Command::Resume(args) => block_on(client::act(args, "resume")),
        Command::Interrupt(args) => block_on(client::interrupt(args)),
        Command::Ask(args) => block_on(client::ask(args)),
        Command::StopTask(args) => block_on(client::stop_task(args)),
        Command::Open(args) => block_on(client::open(args)),
        Command::Claude(args) => block_on(claude::claude(args)),
        Command::Hooks(args) => block_on(hooks::hooks(args)),
        Command::Hook(args) => block_on(hook::hook(args)),
        Command::Pair(args) => block_on(pair::pair(args)),
        Command::Completions { shell } => {
            clap_complete::generate(
                shell,
                &mut Cli::command(),
                "switchboard",
                &mut std::io::stdout(),
            );
            ExitCode::SUCCESS
        }
    }
}

/// Runs an async command on a new runtime, with logging set up.
fn block_on(command: impl std::future::Future<Output = ExitCode>) -> ExitCode {
    init_logging();
    match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime.block_on(command),
        Err(error) => {
            #[allow(clippy::print_stderr)]
            {
                eprintln!("switchboard: cannot start the async runtime: {error}");
            }
            ExitCode::from(1)
        }
    }
}

/// Logs go to stderr, filtered by `RUST_LOG` (default: warnings only).
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ =
        tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
}
