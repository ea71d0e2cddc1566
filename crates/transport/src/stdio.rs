//! The stdio transport: spawn `claude` and speak NDJSON over its stdin and stdout.
//!
//! [`cli_command`] is the only place in Switchboard that builds a command for `claude`
//! (`clippy.toml` forbids `Command::new` elsewhere). [`spawn`] starts it in its own process
//! group and returns a [`CliLink`]: a bounded stream of [`TransportEvent`]s (decoded lines,
//! bad lines, stderr, exit) and a [`CliProcess`] to write lines and shut it down.
//!
//! - [`CliOptions`] holds every flag users need and renders each value as one `--flag=value`
//!   argument, so no value can become a flag.
//! - The command has its own process group, piped stdio, the inherited environment minus
//!   [`NESTED_SESSION_VARIABLES`] and the daemon's own `SWITCHBOARD_*` variables, and file
//!   checkpointing on (for `rewind_files`).
//! - The events: decoded lines, bad lines, ANSI-stripped stderr lines cut at
//!   [`MAX_STDERR_LINE_BYTES`], and `Exited` last, after every stdout line, with the stderr
//!   tail and a readable [`ExitInfo::describe`]. [`CliProcess`] queues lines to stdin in
//!   order, closes input, and shuts down in stages: close stdin, SIGTERM the group, SIGKILL
//!   the group.
//! - A secret the CLI needs (an `--sdk-url` session's token) reaches it on descriptor 3
//!   (`start_with_secret`): a sealed memfd, duplicated there in `pre_exec`, never an
//!   environment variable, which every tool would inherit; a memfd, not a pipe, because the
//!   CLI reads it again at each reconnect.
//! - [`interactive_command`] builds what `switchboard claude` runs in its PTY: the same
//!   environment rules and parent-death signal, the person's arguments as given, and no
//!   process group (the PTY makes the CLI a session leader, which a group leader cannot
//!   become).

use std::collections::{BTreeMap, VecDeque};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use bytes::Bytes;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use switchboard_protocol::codec::{Decoder, LineError};
use switchboard_protocol::{PermissionMode, Received};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};
use tokio::sync::{mpsc, oneshot, watch};

/// Events queued from the CLI before the reader waits for the consumer (the pipe then fills and
/// the CLI blocks: backpressure, not unbounded memory).
pub const EVENT_QUEUE: usize = 256;

/// Lines queued for the CLI's stdin before `send` waits.
pub const WRITE_QUEUE: usize = 256;

/// How much of stderr is kept for error messages (the tail), in bytes.
pub const STDERR_TAIL_BYTES: usize = 16 * 1024;

/// How much one stdout read takes. Small, because every idle session holds one (4 KiB of the
/// 50 kB an idle session may cost); large lines just take more reads.
const READ_CHUNK_BYTES: usize = 4 * 1024;

/// The stderr reader's buffer (stderr is rare and short).
const STDERR_BUFFER_BYTES: usize = 1024;

/// The longest stderr line kept; the rest of a longer line is dropped (and counted), so a CLI
/// that writes without newlines cannot grow the daemon's memory.
pub const MAX_STDERR_LINE_BYTES: usize = 8 * 1024;

/// Variables of the daemon's own that no CLI (and so no tool) inherits: every variable whose
/// name starts with this. `SWITCHBOARD_TOKEN` is the API token: a Bash tool that ran `env`
/// would hand it to the model.
pub const DAEMON_VARIABLE_PREFIX: &str = "SWITCHBOARD_";

/// Turns the CLI's file checkpointing on in SDK mode (an interactive CLI has it on by itself):
/// before each prompt the CLI keeps a copy of the files its tools are about to change, and the
/// `rewind_files` control request puts them back.
pub const FILE_CHECKPOINTING_VARIABLE: &str = "CLAUDE_CODE_ENABLE_SDK_FILE_CHECKPOINTING";

/// Asks the CLI (2.1.100 on) for `system/session_state_changed` lines: its own word that a
/// turn runs, waits for a person, or is over (`idle` comes once held-back results and
/// background agents are done), which the session core follows.
pub const SESSION_STATE_EVENTS_VARIABLE: &str = "CLAUDE_CODE_EMIT_SESSION_STATE_EVENTS";

/// Environment variables the CLI sets for its own children. A `claude` started from inside a
/// Claude Code session (a daemon launched from a Bash tool, say) must not inherit them: the
/// child would believe it is nested.
pub const NESTED_SESSION_VARIABLES: &[&str] = &[
    "CLAUDECODE",
    "CLAUDE_CODE_ENTRYPOINT",
    "CLAUDE_CODE_SSE_PORT",
    "CLAUDE_CODE_SESSION_ACCESS_TOKEN",
    "CLAUDE_CODE_WEBSOCKET_AUTH_FILE_DESCRIPTOR",
    "CLAUDE_AGENT_SDK_VERSION",
];

/// How to launch the CLI: the flags users need, cwd and environment.
///
/// Every value is passed as a single `--flag=value` argument, so no value can be read as a
/// flag of its own, whatever it starts with.
#[derive(Debug, Clone, Default)]
pub struct CliOptions {
    /// The CLI binary; `claude` on `PATH` when `None`.
    pub program: Option<PathBuf>,
    /// Working directory of the session (required).
    pub cwd: PathBuf,
    /// Extra environment, applied after the inherited one.
    pub env: BTreeMap<String, String>,
    /// Start from an empty environment (plus `PATH`) instead of inheriting this process's.
    pub clear_env: bool,
    /// `--resume ID`.
    pub resume: Option<String>,
    /// `--continue`.
    pub continue_last: bool,
    /// `--fork-session` (with `resume`).
    pub fork_session: bool,
    /// `--resume-session-at UUID`.
    pub resume_session_at: Option<String>,
    /// `--model`.
    pub model: Option<String>,
    /// `--fallback-model`.
    pub fallback_model: Option<String>,
    /// `--permission-mode`.
    pub permission_mode: Option<PermissionMode>,
    /// `--allowedTools`, one rule each.
    pub allowed_tools: Vec<String>,
    /// `--disallowedTools`, one rule each.
    pub disallowed_tools: Vec<String>,
    /// `--max-turns`.
    pub max_turns: Option<u32>,
    /// `--system-prompt`.
    pub system_prompt: Option<String>,
    /// `--append-system-prompt`.
    pub append_system_prompt: Option<String>,
    /// `--mcp-config`, one file or JSON string each.
    pub mcp_config: Vec<String>,
    /// `--add-dir`, one directory each.
    pub add_dirs: Vec<PathBuf>,
    /// `--settings` (a file or JSON string).
    pub settings: Option<String>,
    /// `--include-partial-messages` (token streaming); on by default in [`CliOptions::new`].
    pub include_partial_messages: bool,
    /// `--replay-user-messages`.
    pub replay_user_messages: bool,
    /// `--allow-dangerously-skip-permissions` (needed by 2.1.330 to switch to
    /// `bypassPermissions` later).
    pub allow_dangerously_skip_permissions: bool,
    /// Arguments appended as they are, after everything else. The caller vouches for them.
    pub extra_args: Vec<String>,
    /// Leave out `--permission-prompt-tool stdio` (the `--sdk-url` transport: permission
    /// requests come over the socket anyway, and the captures ran without it).
    pub no_permission_prompt_tool: bool,
}

impl CliOptions {
    /// Options for a session in `cwd`, streaming partial messages.
    pub fn new(cwd: impl Into<PathBuf>) -> Self {
        CliOptions { cwd: cwd.into(), include_partial_messages: true, ..CliOptions::default() }
    }

    /// The argument list (without the program).
    pub fn args(&self) -> Vec<OsString> {
        let mut args: Vec<OsString> =
            ["-p", "--output-format", "stream-json", "--input-format", "stream-json", "--verbose"]
                .iter()
                .map(OsString::from)
                .collect();
        if !self.no_permission_prompt_tool {
            args.extend(["--permission-prompt-tool", "stdio"].iter().map(OsString::from));
        }
        let mut flag =
            |name: &str, value: &str| args.push(OsString::from(format!("--{name}={value}")));
        if let Some(id) = &self.resume {
            flag("resume", id);
        }
        if let Some(uuid) = &self.resume_session_at {
            flag("resume-session-at", uuid);
        }
        if let Some(model) = &self.model {
            flag("model", model);
        }
        if let Some(model) = &self.fallback_model {
            flag("fallback-model", model);
        }
        if let Some(mode) = &self.permission_mode {
            flag("permission-mode", mode.as_str());
        }
        for rule in &self.allowed_tools {
            flag("allowedTools", rule);
        }
        for rule in &self.disallowed_tools {
            flag("disallowedTools", rule);
        }
        if let Some(turns) = self.max_turns {
            flag("max-turns", &turns.to_string());
        }
        if let Some(prompt) = &self.system_prompt {
            flag("system-prompt", prompt);
        }
        if let Some(prompt) = &self.append_system_prompt {
            flag("append-system-prompt", prompt);
        }
        for (at, config) in self.mcp_config.iter().enumerate() {
            match inline_mcp_config_fd(at, config) {
                // JSON (with its servers' secrets): handed over on a descriptor, never in argv.
                Some(fd) => flag("mcp-config", &format!("/proc/self/fd/{fd}")),
                None => flag("mcp-config", config),
            }
        }
        for dir in &self.add_dirs {
            flag("add-dir", &dir.display().to_string());
        }
        if let Some(settings) = &self.settings {
            flag("settings", settings);
        }
        let mut switches = Vec::new();
        if self.continue_last {
            switches.push("--continue");
        }
        if self.fork_session {
            switches.push("--fork-session");
        }
        if self.include_partial_messages {
            switches.push("--include-partial-messages");
        }
        if self.replay_user_messages {
            switches.push("--replay-user-messages");
        }
        if self.allow_dangerously_skip_permissions {
            switches.push("--allow-dangerously-skip-permissions");
        }
        args.extend(switches.into_iter().map(OsString::from));
        args.extend(self.extra_args.iter().map(OsString::from));
        args
    }

    /// The program to run.
    pub fn program(&self) -> PathBuf {
        self.program.clone().unwrap_or_else(|| PathBuf::from("claude"))
    }
}

/// Builds the command that starts the CLI. **The only place that creates a command for
/// `claude`** (its `--version` included, see [`cli_version`]).
///
/// The child gets its own process group (so shutdown reaches the tools it starts), piped
/// stdio, the session's cwd, a parent-death signal (SIGKILL when the thread that started it
/// ends: a daemon killed with `kill -9` takes its CLIs along), and the environment: inherited
/// (or only `PATH` with `clear_env`), minus [`NESTED_SESSION_VARIABLES`] and the daemon's own
/// `SWITCHBOARD_*` variables ([`DAEMON_VARIABLE_PREFIX`]), plus `options.env`.
///
/// File checkpointing is on ([`FILE_CHECKPOINTING_VARIABLE`]) unless `options.env` says
/// otherwise, so that `rewind_files` can put a session's files back; a
/// `CLAUDE_CODE_DISABLE_FILE_CHECKPOINTING` the CLI inherits still turns it off. So are the
/// session-state lines ([`SESSION_STATE_EVENTS_VARIABLE`]).
pub fn cli_command(options: &CliOptions) -> Command {
    let mut command = base_command(options, true);
    for (variable, value) in
        [(FILE_CHECKPOINTING_VARIABLE, "true"), (SESSION_STATE_EVENTS_VARIABLE, "1")]
    {
        if !options.env.contains_key(variable) {
            command.env(variable, value);
        }
    }
    command
        .args(options.args())
        .current_dir(&options.cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// Builds the command for an interactive CLI in a person's terminal (`switchboard claude`):
/// `options`' program, cwd and environment rules and the parent-death signal, as
/// [`cli_command`]; the person's `args` as they are; and no pipes or process group of its
/// own, since whoever runs it makes it a new session whose controlling terminal is a PTY (a
/// process group leader could not).
pub fn interactive_command(options: &CliOptions, args: &[OsString]) -> Command {
    let mut command = base_command(options, false);
    command.args(args).current_dir(&options.cwd);
    command
}

/// Builds the command for a person's shell in `cwd` (the web UI's terminal, in a PTY): the
/// environment rules and parent-death signal of [`cli_command`] (no daemon secret reaches it,
/// nor the variables that would make a `claude` typed there think it is nested), `TERM` for
/// xterm.js, and `run_id` in [`crate::procs::RUN_VARIABLE`] so that what it leaves running can
/// be ended with it ([`crate::procs::end_run`]); `env` and `clear_env` as the session's CLI
/// has them, so the shell sees what the session's tools see. The PTY makes it a session of its
/// own.
pub fn shell_command(
    shell: &Path,
    cwd: &Path,
    run_id: &str,
    env: BTreeMap<String, String>,
    clear_env: bool,
) -> Command {
    let options = CliOptions {
        program: Some(shell.to_path_buf()),
        cwd: cwd.to_path_buf(),
        env,
        clear_env,
        ..CliOptions::default()
    };
    let mut command = base_command(&options, false);
    command
        .current_dir(cwd)
        .env("TERM", "xterm-256color")
        .env("COLORTERM", "truecolor")
        .env(crate::procs::RUN_VARIABLE, run_id);
    command
}

/// The program with the environment rules and the parent-death signal, and with `own_group`
/// a process group of its own.
#[allow(clippy::disallowed_methods)] // this is the one spawn function
#[allow(unsafe_code)] // `pre_exec`; see the SAFETY note
fn base_command(options: &CliOptions, own_group: bool) -> Command {
    let mut command = Command::new(options.program());
    if options.clear_env {
        command.env_clear();
        if let Some(path) = std::env::var_os("PATH") {
            command.env("PATH", path);
        }
    }
    for variable in NESTED_SESSION_VARIABLES {
        command.env_remove(variable);
    }
    for (name, _) in std::env::vars_os() {
        if name.as_encoded_bytes().starts_with(DAEMON_VARIABLE_PREFIX.as_bytes()) {
            command.env_remove(name);
        }
    }
    command.envs(&options.env);
    let parent = std::process::id();
    // SAFETY: runs in the child between fork and exec; it calls only `prctl` and `getppid`
    // (async-signal-safe system calls) and allocates nothing (an error from a raw OS code is
    // no allocation).
    unsafe {
        command.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)?;
            // The parent may have died before the signal was armed.
            if nix::unistd::getppid().as_raw() as u32 != parent {
                return Err(std::io::Error::from_raw_os_error(nix::libc::ESRCH));
            }
            Ok(())
        });
    }
    if own_group {
        command.process_group(0);
    }
    command.kill_on_drop(true);
    command
}

/// Why the CLI could not be started or used.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// The program does not exist.
    #[error("the Claude Code CLI was not found at {program:?}; install it (npm install -g @anthropic-ai/claude-code) or point --claude / SWITCHBOARD_CLAUDE at it")]
    NotFound {
        /// What we tried to run.
        program: PathBuf,
    },
    /// The working directory does not exist.
    #[error("working directory {0:?} does not exist")]
    NoSuchCwd(PathBuf),
    /// Spawning failed for another reason.
    #[error("cannot start {program:?}: {source}")]
    Spawn {
        /// What we tried to run.
        program: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The CLI's stdin is closed (it exited, or we closed it).
    #[error("the CLI's input is closed")]
    Closed,
}

/// What comes out of the CLI, in order. `Exited` is always last, after every stdout line.
#[derive(Debug)]
pub enum TransportEvent {
    /// A decoded line (boxed: a typed message is large, and every idle session's event queue
    /// holds a block of these).
    Line(Box<Received>),
    /// A line that could not be decoded (oversize, malformed); the stream goes on. (Boxed,
    /// as `Exited` is, to keep the queue's slots small.)
    BadLine(Box<LineError>),
    /// A line the CLI wrote to stderr, ANSI codes stripped. (Boxed, as the lines from the CLI
    /// above and for it below are: with every variant a pointer at most, a slot is 16 bytes,
    /// and an idle session's queue block of 32 slots about 0.6 KB, not 1.3.)
    Stderr(Box<String>),
    /// `--sdk-url`: the CLI's WebSocket is up (`reconnect`: not for the first time).
    Connected {
        /// Whether an earlier connection of this CLI came before.
        reconnect: bool,
    },
    /// `--sdk-url`: the CLI's WebSocket went down (it reconnects by itself; how long it keeps
    /// trying depends on its version).
    Disconnected,
    /// `--sdk-url`: a line was written to the CLI's socket (queued earlier, maybe while the CLI
    /// was away).
    Sent(Box<bytes::Bytes>),
    /// `--sdk-url`: a line the CLI may not have received was written again after a reconnect
    /// (a prompt not echoed yet, with its `uuid`; a control response whose send failed).
    Resent(Box<bytes::Bytes>),
    /// `--sdk-url`: a line for the CLI that may not have arrived and is not sent again: a
    /// control request whose send failed, or, before the exit, whatever never reached the CLI.
    Undelivered(Box<bytes::Bytes>),
    /// The CLI exited.
    Exited(Box<ExitInfo>),
}

/// How the CLI ended.
#[derive(Debug, Clone)]
pub struct ExitInfo {
    /// Exit code, when it exited normally.
    pub code: Option<i32>,
    /// The signal that killed it.
    pub signal: Option<i32>,
    /// The last [`STDERR_TAIL_BYTES`] of stderr.
    pub stderr_tail: String,
    /// Whether it wrote anything to stdout before ending.
    pub wrote_output: bool,
}

impl ExitInfo {
    pub(crate) fn from_status(
        status: Option<ExitStatus>,
        stderr_tail: String,
        wrote_output: bool,
    ) -> Self {
        use std::os::unix::process::ExitStatusExt;
        ExitInfo {
            code: status.and_then(|status| status.code()),
            signal: status.and_then(|status| status.signal()),
            stderr_tail,
            wrote_output,
        }
    }

    /// Whether it exited with code 0.
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }

    /// A one-line description with the stderr tail's last line, and a hint for known causes.
    pub fn describe(&self) -> String {
        let how = match (self.code, self.signal) {
            (Some(code), _) => format!("exited with status {code}"),
            (None, Some(signal)) => format!("was killed by signal {signal}"),
            (None, None) => "ended".to_owned(),
        };
        let last = self
            .stderr_tail
            .lines()
            .rev()
            .find(|line| !line.trim().is_empty())
            .unwrap_or("")
            .trim();
        let hint = hint_for(&self.stderr_tail);
        match (last.is_empty(), hint) {
            (true, None) => format!("the CLI {how}"),
            (true, Some(hint)) => format!("the CLI {how} ({hint})"),
            (false, None) => format!("the CLI {how}: {last}"),
            (false, Some(hint)) => format!("the CLI {how}: {last} ({hint})"),
        }
    }
}

fn hint_for(stderr: &str) -> Option<&'static str> {
    let lower = stderr.to_lowercase();
    if lower.contains("invalid api key")
        || lower.contains("/login")
        || lower.contains("not logged in")
    {
        Some("not logged in: run `claude` once to log in, or set ANTHROPIC_API_KEY")
    } else if lower.contains("unknown option") || lower.contains("error: option") {
        Some(
            "this CLI version does not support a flag Switchboard passed; check `claude --version`",
        )
    } else if lower.contains("requires --verbose") {
        Some("this CLI needs --verbose with stream-json")
    } else {
        None
    }
}

/// The running CLI: write lines, close its input, shut it down. Dropping it kills the whole
/// process group.
#[derive(Debug)]
pub struct CliProcess {
    pid: Option<u32>,
    writer: Option<mpsc::Sender<WriterCommand>>,
    exited: watch::Receiver<bool>,
    /// The started process, for the record (`None` for a CLI that connected on its own).
    run: Option<CliRun>,
}

#[derive(Debug)]
pub(crate) enum WriterCommand {
    /// A line, and who waits to hear it was written. Boxed: an idle session's writer queue
    /// holds a block of 32 slots from the start, 8 bytes each this way.
    Line(Box<(Bytes, oneshot::Sender<Result<(), TransportError>>)>),
}

/// A started CLI: its events and its handle.
#[derive(Debug)]
pub struct CliLink {
    /// Events from the CLI; ends after `Exited`.
    pub events: crate::events::Events,
    /// The process.
    pub process: CliProcess,
}

/// Starts the CLI.
pub fn spawn(options: &CliOptions) -> Result<CliLink, TransportError> {
    let (mut child, run) = start(options)?;
    let pid = child.id();
    let stdin = child.stdin.take().expect("stdin is piped");
    let stdout = child.stdout.take().expect("stdout is piped");
    let stderr = child.stderr.take().expect("stderr is piped");
    let (events_tx, events) = mpsc::channel(EVENT_QUEUE);
    let (writer_tx, writer_rx) = mpsc::channel(WRITE_QUEUE);
    let (exited_tx, exited) = watch::channel(false);
    tokio::spawn(write_loop(stdin, writer_rx));
    tokio::spawn(supervise(
        child,
        run.run_id.clone(),
        stdout,
        stderr,
        events_tx,
        exited_tx,
        std::future::ready(Vec::new()),
    ));
    Ok(CliLink {
        events: crate::events::Events::new(events),
        process: CliProcess { pid, writer: Some(writer_tx), exited, run: Some(run) },
    })
}

/// What identifies a started CLI for good: recorded so that a daemon killed before it could
/// end the CLI ends it (and its tools) at its next start
/// ([`crate::procs::end_leftover`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CliRun {
    /// The process id.
    pub pid: u32,
    /// When it started ([`crate::procs::start_time`]).
    pub start_time: u64,
    /// The run id in its (and its tools') environment ([`crate::procs::RUN_VARIABLE`]).
    pub run_id: String,
}

/// Checks the cwd and starts the CLI process, marked with a new run id.
pub(crate) fn start(options: &CliOptions) -> Result<(Child, CliRun), TransportError> {
    start_with_secret(options, None)
}

/// The file descriptor a secret reaches the CLI on ([`start_with_secret`]).
pub const SECRET_FD: i32 = 3;

/// Where the CLI reads its first inline `--mcp-config` (JSON, not a file's path): its
/// configs' servers' `env` and `headers` are often secrets, and a command line is readable by
/// every local user (`/proc/PID/cmdline`). The `n`th config (from 0) is on descriptor
/// `MCP_CONFIG_FD + n`, named as `/proc/self/fd/N`, an anonymous memory file like
/// [`SECRET_FD`]'s.
pub const MCP_CONFIG_FD: i32 = 10;

/// The descriptor the `at`th `--mcp-config` is handed over on, when it is JSON.
fn inline_mcp_config_fd(at: usize, config: &str) -> Option<i32> {
    let at = i32::try_from(at).ok()?;
    config.trim_start().starts_with('{').then_some(MCP_CONFIG_FD + at)
}

/// Starts the CLI; with `secret`, hands it over on file descriptor [`SECRET_FD`], named by
/// `secret.0`, the variable the CLI reads the descriptor's number from: the secret is never in
/// the CLI's environment (`/proc/PID/environ`), nor in its tools', which inherit that. Each
/// inline `--mcp-config` goes the same way, on [`MCP_CONFIG_FD`] and on, never in argv.
///
/// The descriptor is an anonymous memory file (`memfd`), not a pipe: the CLI reads it again
/// through `/proc/self/fd/3` each time it reconnects (2.1.37 does), and a pipe is empty after
/// the first read. The CLI does not close it, so its children inherit it: a tool that reads
/// its descriptor 3 can find the secret, as it could in the environment before, but nothing
/// shows it by accident.
#[allow(unsafe_code)] // `pre_exec`; see the SAFETY note
pub(crate) fn start_with_secret(
    options: &CliOptions,
    secret: Option<(&str, &str)>,
) -> Result<(Child, CliRun), TransportError> {
    if !options.cwd.is_dir() {
        return Err(TransportError::NoSuchCwd(options.cwd.clone()));
    }
    let program = options.program();
    let run_id = crate::procs::new_run_id();
    let mut command = cli_command(options);
    command.env(crate::procs::RUN_VARIABLE, &run_id);
    let spawn_error =
        |source: std::io::Error| TransportError::Spawn { program: program.clone(), source };
    // What the child gets on descriptors of its own: the secret, and each inline MCP config.
    let mut handed: Vec<(std::os::fd::OwnedFd, i32)> = Vec::new();
    if let Some((variable, secret)) = secret {
        handed.push((secret_file(secret).map_err(spawn_error)?, SECRET_FD));
        command.env(variable, SECRET_FD.to_string());
    }
    for (at, config) in options.mcp_config.iter().enumerate() {
        if let Some(fd) = inline_mcp_config_fd(at, config) {
            if fd >= HANDED_ABOVE {
                let too_many = std::io::Error::other(format!(
                    "at most {} --mcp-config entries",
                    HANDED_ABOVE - MCP_CONFIG_FD
                ));
                return Err(spawn_error(too_many));
            }
            handed.push((secret_file(config).map_err(spawn_error)?, fd));
        }
    }
    if !handed.is_empty() {
        let moves: Vec<(i32, i32)> =
            handed.iter().map(|(file, to)| (std::os::fd::AsRawFd::as_raw_fd(file), *to)).collect();
        // SAFETY: runs in the child between fork and exec; `dup2` and `fcntl` are
        // async-signal-safe system calls, and nothing is allocated (the moves were made
        // before the fork). Every source descriptor is at or above `HANDED_ABOVE`
        // ([`secret_file`] makes them so) and every target below it (checked below), so no
        // move overwrites another's source.
        unsafe {
            command.pre_exec(move || {
                for &(raw, to) in &moves {
                    let done = if raw == to {
                        // Already there: only its close-on-exec flag goes.
                        nix::libc::fcntl(raw, nix::libc::F_SETFD, 0)
                    } else {
                        // The copy is not closed on exec.
                        nix::libc::dup2(raw, to)
                    };
                    if done < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
    }
    let spawned = command.spawn();
    drop(handed);
    let child = spawned.map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            TransportError::NotFound { program: program.clone() }
        } else {
            TransportError::Spawn { program: program.clone(), source }
        }
    })?;
    let pid = child.id().unwrap_or(0);
    tracing::debug!(pid, program = %program.display(), "spawned claude");
    let start_time = crate::procs::start_time(pid).unwrap_or(0);
    Ok((child, CliRun { pid, start_time, run_id }))
}

/// The lowest descriptor [`secret_file`] returns: above every one a child is handed.
const HANDED_ABOVE: i32 = 64;

/// An anonymous memory file (close-on-exec, sealed) holding `secret`.
#[allow(unsafe_code)] // `memfd_create`, whose descriptor is owned at once
fn secret_file(secret: &str) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::io::Write;
    // SAFETY: a valid NUL-terminated name and flags; the result is checked before it is
    // owned, and nothing else owns it.
    let flags = nix::libc::MFD_CLOEXEC | nix::libc::MFD_ALLOW_SEALING;
    let fd = unsafe { nix::libc::memfd_create(c"switchboard-secret".as_ptr(), flags) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just created and is owned by nothing else.
    let owned = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    // Above every descriptor a child is handed ([`SECRET_FD`], [`MCP_CONFIG_FD`] and on), so
    // that moving one there never overwrites another.
    let high = nix::fcntl::fcntl(&owned, nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(HANDED_ABOVE))
        .map_err(std::io::Error::from)?;
    // SAFETY: `high` was just made by `fcntl` and is owned by nothing else.
    let owned = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(high) };
    let mut file = std::fs::File::from(owned);
    file.write_all(secret.as_bytes())?;
    // Sealed: neither the CLI nor a tool that inherits it can change or empty it (which would
    // break the CLI's next reconnect).
    let seals = nix::libc::F_SEAL_WRITE
        | nix::libc::F_SEAL_SHRINK
        | nix::libc::F_SEAL_GROW
        | nix::libc::F_SEAL_SEAL;
    // SAFETY: `fcntl` on a descriptor `file` owns, with an integer argument.
    let sealed = unsafe {
        nix::libc::fcntl(std::os::fd::AsRawFd::as_raw_fd(&file), nix::libc::F_ADD_SEALS, seals)
    };
    if sealed < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(file.into())
}

/// The CLI's version: the first word `claude --version` prints (`2.1.37`), run with the same
/// program and environment rules as a session (`options.program`, `options.env`).
pub async fn cli_version(options: &CliOptions) -> Result<String, TransportError> {
    let program = options.program();
    let output = base_command(options, true)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .output()
        .await
        .map_err(|source| {
            if source.kind() == std::io::ErrorKind::NotFound {
                TransportError::NotFound { program: program.clone() }
            } else {
                TransportError::Spawn { program: program.clone(), source }
            }
        })?;
    Ok(String::from_utf8_lossy(&output.stdout).split_whitespace().next().unwrap_or("").to_owned())
}

pub(crate) async fn write_loop(mut stdin: ChildStdin, mut commands: mpsc::Receiver<WriterCommand>) {
    while let Some(WriterCommand::Line(line)) = commands.recv().await {
        let (bytes, done) = *line;
        let result = async {
            stdin.write_all(&bytes).await?;
            stdin.flush().await
        }
        .await
        .map_err(|_| TransportError::Closed);
        let failed = result.is_err();
        let _ = done.send(result);
        if failed {
            break;
        }
    }
    // Every sender dropped (or the pipe broke): closing stdin tells the CLI input has ended.
    let _ = stdin.shutdown().await;
}

pub(crate) async fn supervise(
    mut child: Child,
    run_id: String,
    stdout: ChildStdout,
    stderr: ChildStderr,
    events: mpsc::Sender<TransportEvent>,
    exited: watch::Sender<bool>,
    last_words: impl std::future::Future<Output = Vec<TransportEvent>>,
) {
    let pid = child.id();
    let stderr_task = tokio::spawn(read_stderr(stderr, events.clone()));
    let stdout_events = events.clone();
    let stdout_task = tokio::spawn(async move { read_stdout(stdout, &stdout_events).await });
    let status = child.wait().await.ok();
    // The CLI is gone; tools it started may not be (and may hold our pipes open). Take the
    // group down with it, then drain what the CLI wrote before it exited.
    if let Some(pid) = pid {
        kill_group(pid, Signal::SIGKILL);
    }
    // Tools in sessions of their own are in no group of ours: everything still carrying the
    // CLI's run id goes too.
    let _ = tokio::task::spawn_blocking(move || crate::procs::end_run(&run_id)).await;
    let wrote_output = stdout_task.await.unwrap_or(false);
    let stderr_tail = stderr_task.await.unwrap_or_default();
    let _ = exited.send(true);
    for event in last_words.await {
        let _ = events.send(event).await;
    }
    let _ = events
        .send(TransportEvent::Exited(Box::new(ExitInfo::from_status(
            status,
            stderr_tail,
            wrote_output,
        ))))
        .await;
}

async fn read_stdout(mut stdout: ChildStdout, events: &mpsc::Sender<TransportEvent>) -> bool {
    let mut decoder = Decoder::default();
    let mut chunk = vec![0u8; READ_CHUNK_BYTES];
    let mut wrote_output = false;
    loop {
        let read = match stdout.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(read) => read,
        };
        wrote_output = true;
        decoder.push(&chunk[..read]);
        while let Some(item) = decoder.next_item() {
            if events.send(to_event(item)).await.is_err() {
                return wrote_output;
            }
        }
    }
    while let Some(item) = decoder.finish() {
        if events.send(to_event(item)).await.is_err() {
            break;
        }
    }
    wrote_output
}

fn to_event(item: Result<Received, LineError>) -> TransportEvent {
    match item {
        Ok(received) => TransportEvent::Line(Box::new(received)),
        Err(error) => TransportEvent::BadLine(Box::new(error)),
    }
}

async fn read_stderr(stderr: ChildStderr, events: mpsc::Sender<TransportEvent>) -> String {
    let mut tail: VecDeque<String> = VecDeque::new();
    let mut tail_bytes = 0;
    let mut lines = BoundedLines::new(BufReader::with_capacity(STDERR_BUFFER_BYTES, stderr));
    while let Some(clean) = lines.next_line().await {
        tail_bytes += clean.len() + 1;
        tail.push_back(clean.clone());
        while tail_bytes > STDERR_TAIL_BYTES {
            match tail.pop_front() {
                Some(old) => tail_bytes -= old.len() + 1,
                None => break,
            }
        }
        // Informational: never let a full queue stall the stderr pipe (and so the CLI).
        let _ = events.try_send(TransportEvent::Stderr(Box::new(clean)));
    }
    tail.into_iter().collect::<Vec<_>>().join("\n")
}

/// Lines of a byte stream, each cut at [`MAX_STDERR_LINE_BYTES`] (what follows up to the next
/// newline is dropped and counted), ANSI codes stripped. Memory stays bounded whatever the
/// stream holds.
pub(crate) struct BoundedLines<R> {
    reader: R,
    done: bool,
}

impl<R: tokio::io::AsyncBufRead + Unpin> BoundedLines<R> {
    pub(crate) fn new(reader: R) -> Self {
        BoundedLines { reader, done: false }
    }

    /// The next line (without its newline), or `None` at the end (or a read error).
    pub(crate) async fn next_line(&mut self) -> Option<String> {
        if self.done {
            return None;
        }
        let mut line = Vec::new();
        let mut dropped: usize = 0;
        let mut any = false;
        loop {
            let buffer = match self.reader.fill_buf().await {
                Ok(buffer) => buffer,
                Err(_) => {
                    self.done = true;
                    break;
                }
            };
            if buffer.is_empty() {
                self.done = true;
                break;
            }
            any = true;
            let (chunk, found) = match memchr::memchr(b'\n', buffer) {
                Some(at) => (&buffer[..at], Some(at)),
                None => (buffer, None),
            };
            let room = MAX_STDERR_LINE_BYTES.saturating_sub(line.len());
            line.extend_from_slice(&chunk[..chunk.len().min(room)]);
            dropped = dropped.saturating_add(chunk.len().saturating_sub(room));
            let used = found.map_or(chunk.len(), |at| at + 1);
            self.reader.consume(used);
            if found.is_some() {
                break;
            }
        }
        if !any {
            return None;
        }
        let mut clean =
            String::from_utf8_lossy(&strip_ansi_escapes::strip(&line)).trim_end().to_owned();
        if dropped > 0 {
            clean.push_str(&format!(" … ({dropped} more bytes of this line dropped)"));
        }
        Some(clean)
    }
}

/// Whether the process exits within `grace`.
async fn exits_within(exited: &mut watch::Receiver<bool>, grace: Duration) -> bool {
    tokio::time::timeout(grace, exited.wait_for(|exited| *exited)).await.is_ok()
}

fn kill_group(pid: u32, signal: Signal) {
    if let Ok(pid) = i32::try_from(pid) {
        let _ = killpg(Pid::from_raw(pid), signal);
    }
}

impl CliProcess {
    pub(crate) fn new(
        pid: Option<u32>,
        writer: mpsc::Sender<WriterCommand>,
        exited: watch::Receiver<bool>,
        run: Option<CliRun>,
    ) -> Self {
        CliProcess { pid, writer: Some(writer), exited, run }
    }

    /// What identifies the started process for good (`None` for a CLI that connected on its
    /// own).
    pub fn run(&self) -> Option<&CliRun> {
        self.run.as_ref()
    }

    /// The CLI's process id (also its process group id).
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// Writes one line (the bytes must end with `\n`) and waits until it is flushed.
    pub async fn send(&self, line: Bytes) -> Result<(), TransportError> {
        let writer = self.writer.as_ref().ok_or(TransportError::Closed)?;
        let (done, result) = oneshot::channel();
        writer
            .send(WriterCommand::Line(Box::new((line, done))))
            .await
            .map_err(|_| TransportError::Closed)?;
        result.await.map_err(|_| TransportError::Closed)?
    }

    /// Queues one line (ending with `\n`) without waiting for it to be flushed; lines keep
    /// their order. Waits only while [`WRITE_QUEUE`] lines are already queued.
    pub async fn enqueue(&self, line: Bytes) -> Result<(), TransportError> {
        let writer = self.writer.as_ref().ok_or(TransportError::Closed)?;
        let (done, _ignored) = oneshot::channel();
        writer
            .send(WriterCommand::Line(Box::new((line, done))))
            .await
            .map_err(|_| TransportError::Closed)
    }

    /// Closes the CLI's stdin: the normal way to end a session (the CLI finishes its turn, then
    /// exits). Writers obtained with [`CliProcess::writer`] keep it open until they drop.
    pub fn close_input(&mut self) {
        self.writer = None;
    }

    /// Whether the process has exited.
    pub fn has_exited(&self) -> bool {
        *self.exited.borrow()
    }

    /// Waits until the process has exited.
    pub async fn wait_exit(&mut self) {
        let _ = self.exited.wait_for(|exited| *exited).await;
    }

    /// Ends the CLI: close stdin and wait `grace`; then SIGTERM the group and wait `grace`;
    /// then SIGKILL the group. Returns which step ended it.
    pub async fn shutdown(&mut self, grace: Duration) -> ShutdownStep {
        let escalation = self.begin_shutdown(grace);
        self.wait_exit().await;
        escalation.await.unwrap_or(ShutdownStep::Killed)
    }

    /// Starts ending the CLI without waiting for it: closes stdin now and, in a task of its
    /// own, SIGTERMs the group if the CLI is still there after `grace`, then SIGKILLs it after
    /// `grace` more. The task tells which step ended it. The one escalation there is: the
    /// session's actor, which must keep reading the CLI's last lines meanwhile, uses this
    /// too.
    pub fn begin_shutdown(&mut self, grace: Duration) -> tokio::task::JoinHandle<ShutdownStep> {
        self.close_input();
        let pid = self.pid;
        let mut exited = self.exited.clone();
        tokio::spawn(async move {
            if exits_within(&mut exited, grace).await {
                return ShutdownStep::InputClosed;
            }
            let Some(pid) = pid else {
                // Nothing of ours to signal (a CLI that connected on its own).
                return ShutdownStep::InputClosed;
            };
            tracing::debug!(pid, "claude did not exit after stdin closed; SIGTERM");
            kill_group(pid, Signal::SIGTERM);
            if exits_within(&mut exited, grace).await {
                return ShutdownStep::Terminated;
            }
            tracing::warn!(pid, "claude ignored SIGTERM; SIGKILL");
            kill_group(pid, Signal::SIGKILL);
            ShutdownStep::Killed
        })
    }

    /// Kills the whole process group now.
    pub fn kill(&self) {
        if let Some(pid) = self.pid {
            kill_group(pid, Signal::SIGKILL);
        }
    }
}

impl Drop for CliProcess {
    fn drop(&mut self) {
        if !self.has_exited() {
            self.kill();
        }
    }
}

/// Which step of [`CliProcess::shutdown`] ended the CLI.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShutdownStep {
    /// It exited after its input closed.
    InputClosed,
    /// It exited on SIGTERM.
    Terminated,
    /// It had to be killed.
    Killed,
}

#[cfg(test)]
mod tests {
    use super::{BoundedLines, TransportEvent, WriterCommand, MAX_STDERR_LINE_BYTES};

    #[test]
    #[cfg(target_pointer_width = "64")]
    fn a_sessions_queues_hold_small_slots() {
        // Each session's two queues hold a block of 32 slots from the start (1,000 relay CLIs
        // hold 2,000 blocks): a variant with its payload inline would make every slot its size.
        assert_eq!(std::mem::size_of::<TransportEvent>(), 16);
        assert_eq!(std::mem::size_of::<WriterCommand>(), 8);
    }

    #[tokio::test]
    async fn stderr_lines_are_cut_at_the_limit_and_the_rest_is_counted() {
        // A line far past the limit, read through a small buffer, then an ordinary one.
        let mut input = vec![b'x'; 4 * 1024 * 1024];
        input.extend_from_slice(b"\n\x1b[31mred\x1b[0m\nlast without newline");
        let reader = tokio::io::BufReader::with_capacity(1024, &input[..]);
        let mut lines = BoundedLines::new(reader);
        let long = lines.next_line().await.unwrap();
        let dropped = 4 * 1024 * 1024 - MAX_STDERR_LINE_BYTES;
        assert!(long.starts_with(&"x".repeat(MAX_STDERR_LINE_BYTES)), "kept up to the limit");
        assert!(
            long.ends_with(&format!("({dropped} more bytes of this line dropped)")),
            "{}",
            &long[long.len() - 60..]
        );
        assert!(long.len() < MAX_STDERR_LINE_BYTES + 100);
        assert_eq!(lines.next_line().await.as_deref(), Some("red"), "ANSI codes stripped");
        assert_eq!(lines.next_line().await.as_deref(), Some("last without newline"));
        assert_eq!(lines.next_line().await, None);
    }
}
