//! `switchboard claude [ARGS…]`: the interactive Claude Code CLI in a PTY, in the person's own
//! terminal, registered with the daemon as a session.
//!
//! - The terminal behaves as without Switchboard: it is put in raw mode (every key goes to the
//!   CLI, Ctrl-C included), a resize reaches the CLI, and the CLI's exit status is this
//!   command's (128 + N when a signal N ended it).
//! - The session's history is the CLI's own transcript (`~/.claude/projects/…/<id>.jsonl`),
//!   read here as it grows and handed to the daemon (`GET /api/terminals`).
//! - A message sent from the browser or the API is typed into the CLI one character at a time
//!   (a prompt pasted at once would be taken as a paste), then Enter; an interrupt is Esc.
//!
//! Under the session's policy: the daemon hands this command a key for the session's hooks
//! when it registers, and the CLI gets a `PreToolUse` and a `PermissionRequest` hook (HTTP
//! hooks to the daemon's `/hooks/pre-tool-use` and `/hooks/permission-request`, carrying the
//! key) through `--settings` ([`HookSettings`]): never on a command line or in an environment
//! a tool inherits. So every tool call goes to the session's policy; one an ask rule names
//! shows the CLI's own dialog in the terminal and waits for a person in any face at once, and
//! the first answer, there or afar, is the one the CLI takes. A `PreToolUse` hook that cannot
//! reach the daemon blocks the call (2.1.330 on). A CLI without HTTP hooks (before 2.1.100, the oldest
//! pinned version that has them) runs as before, and this says so.
//!
//! Which transcript: the CLI is started with `--session-id` (a new id) unless the person's
//! arguments name a session (`--session-id`, `--resume ID`). With `--continue`, a bare
//! `--resume` (the picker) or `--fork-session`, the id is learnt once the CLI writes it: from
//! `~/.claude/sessions/<pid>.json` (2.1.330 writes one), else from the newest transcript of
//! the working directory changed since the start.

#![allow(clippy::print_stderr)]

use std::ffi::OsString;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;
use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use switchboard_server::terminal::ToTerminal;
use switchboard_server::transcripts::{watch_file, TranscriptTail, Transcripts};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};
use tokio_tungstenite::tungstenite::Message as WsMessage;

use crate::client::{Connection, Socket};

/// How long the daemon has to answer the terminal's `hello`.
const REGISTER_TIMEOUT: Duration = Duration::from_secs(10);

/// The pause after each typed character, so that the CLI reads them one by one (characters
/// that arrive together are taken as a paste, and an Enter in a paste is a new line).
const CHAR_PAUSE: Duration = Duration::from_millis(2);

/// The pause before the Enter that sends a typed prompt.
const ENTER_PAUSE: Duration = Duration::from_millis(50);

/// How often the CLI's announcement is read again, for a move to another session (`/clear`).
const SWITCH_CHECK: Duration = Duration::from_secs(1);

/// The largest announcement file read (`sessions/<pid>.json`).
const ANNOUNCEMENT_MAX_BYTES: u64 = 64 * 1024;

/// How long the CLI lets its hooks wait for an answer: a person may take a while, and the
/// session's policy ends the wait first (`ask_timeout`, `on_timeout`).
const HOOK_TIMEOUT_SECS: u64 = 7 * 24 * 3600;

/// Ctrl-Z, as a terminal in raw mode reads it.
const CTRL_Z: u8 = 0x1a;

/// What puts a terminal back after a CLI that did not end on its own terms: the cursor shown,
/// the main screen, no bracketed paste, no mouse reports, the keyboard protocol popped.
const TERMINAL_RESET: &[u8] =
    b"\x1b[?25h\x1b[?1049l\x1b[?2004l\x1b[?1000l\x1b[?1002l\x1b[?1003l\x1b[?1006l\x1b[<u";

/// Transcript lines read at once (then sent, then read again).
const LINES_PER_READ: usize = 512;

/// How often the transcript's file is looked for until it exists.
const FIND_INTERVAL: Duration = Duration::from_millis(100);

/// How long the CLI's last output may take to drain after it exits (a process it left behind
/// may hold the terminal open).
const DRAIN_LIMIT: Duration = Duration::from_secs(2);

/// The pause after Esc: a key right behind it would make the two one (Alt + that key).
const ESCAPE_PAUSE: Duration = Duration::from_millis(100);

/// How long the CLI has to announce its session (`sessions/<pid>.json`) before the newest
/// transcript of the working directory is taken instead (a CLI that announces none).
const ANNOUNCE_LIMIT: Duration = Duration::from_secs(5);

/// How long the transcript's last lines, and then the exit, may take to reach the daemon once
/// the CLI has exited.
const FAREWELL_LIMIT: Duration = Duration::from_secs(5);

/// `switchboard claude`
#[derive(Debug, Args)]
pub(crate) struct ClaudeArgs {
    #[command(flatten)]
    connection: Connection,
    /// The Claude Code CLI to run (default: `claude` on PATH).
    #[arg(long, value_name = "PATH", env = "SWITCHBOARD_CLAUDE")]
    claude: Option<PathBuf>,
    /// The CLI's own arguments, as you would give them to `claude` (put `--` before them when
    /// one of them is also a switchboard option).
    #[arg(value_name = "ARGS", trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<OsString>,
}

/// Which Claude session the CLI will write, from the person's arguments.
#[derive(Debug, PartialEq, Eq)]
enum SessionChoice {
    /// Start it with `--session-id` and this new id.
    New(String),
    /// The arguments name it.
    Named(String),
    /// Learnt once the CLI writes it.
    Unknown,
}

fn session_choice(args: &[OsString]) -> Result<SessionChoice, String> {
    let args: Vec<String> = args.iter().map(|arg| arg.to_string_lossy().into_owned()).collect();
    let value_of = |names: &[&str]| -> Option<Option<String>> {
        args.iter().enumerate().find_map(|(index, arg)| {
            names.iter().find_map(|name| {
                if arg == name {
                    let next = args.get(index + 1).filter(|next| !next.starts_with('-'));
                    Some(next.cloned())
                } else {
                    arg.strip_prefix(&format!("{name}=")).map(|value| Some(value.to_owned()))
                }
            })
        })
    };
    if args.iter().any(|arg| arg == "-p" || arg == "--print" || arg.starts_with("--print=")) {
        return Err("switchboard claude runs the interactive CLI; for --print use `switchboard run` or `switchboard new`".into());
    }
    let fork = args.iter().any(|arg| arg == "--fork-session");
    if let Some(id) = value_of(&["--session-id"]) {
        return id.map(SessionChoice::Named).ok_or_else(|| "--session-id needs a value".to_owned());
    }
    if args.iter().any(|arg| arg == "-c" || arg == "--continue") || fork {
        return Ok(SessionChoice::Unknown);
    }
    match value_of(&["--resume", "-r"]) {
        // A session id; anything else is a search term for the CLI's picker.
        Some(Some(id)) if uuid::Uuid::parse_str(&id).is_ok() => Ok(SessionChoice::Named(id)),
        Some(_) => Ok(SessionChoice::Unknown),
        None => Ok(SessionChoice::New(uuid::Uuid::new_v4().to_string())),
    }
}

/// The person's terminal, put back as it was when this ends.
struct RawMode {
    saved: rustix::termios::Termios,
}

impl RawMode {
    fn enter() -> std::io::Result<RawMode> {
        let stdin = std::io::stdin();
        let saved = rustix::termios::tcgetattr(&stdin)?;
        let mut raw = saved.clone();
        raw.make_raw();
        rustix::termios::tcsetattr(&stdin, rustix::termios::OptionalActions::Now, &raw)?;
        Ok(RawMode { saved })
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let _ = rustix::termios::tcsetattr(
            std::io::stdin(),
            rustix::termios::OptionalActions::Now,
            &self.saved,
        );
    }
}

fn terminal_size() -> Option<pty_process::Size> {
    let size = rustix::termios::tcgetwinsize(std::io::stdout()).ok()?;
    (size.ws_row > 0 && size.ws_col > 0).then(|| pty_process::Size::new(size.ws_row, size.ws_col))
}

/// What goes into the CLI's terminal.
enum Input {
    /// The person's keys, as read.
    Keys(Vec<u8>),
    /// A prompt to type.
    Prompt(String),
    /// The Esc key.
    Escape,
    /// The person's terminal took this size.
    Resize(pty_process::Size),
}

pub(crate) async fn claude(args: ClaudeArgs) -> ExitCode {
    match run(args).await {
        Ok(code) => code,
        Err(message) => {
            eprintln!("switchboard claude: {message}");
            ExitCode::from(2)
        }
    }
}

async fn run(args: ClaudeArgs) -> Result<ExitCode, String> {
    let choice = session_choice(&args.args)?;
    if !rustix::termios::isatty(std::io::stdin()) || !rustix::termios::isatty(std::io::stdout()) {
        return Err("needs a terminal on stdin and stdout; for scripts use `switchboard run` or `switchboard new`".into());
    }
    let cwd = std::env::current_dir().map_err(|error| format!("no working directory: {error}"))?;
    let client = args.connection.client()?;
    let mut socket = client.websocket("/api/terminals").await?;
    let known = match &choice {
        SessionChoice::New(id) | SessionChoice::Named(id) => Some(id.clone()),
        SessionChoice::Unknown => None,
    };
    let hello = json!({"type": "hello", "cwd": cwd, "claude_session_id": known});
    let (session, hook_key) = register(&mut socket, hello).await?;

    let mut cli_args = args.args.clone();
    if let SessionChoice::New(id) = &choice {
        cli_args.push("--session-id".into());
        cli_args.push(id.into());
    }
    let mut options = switchboard_transport::CliOptions::new(&cwd);
    options.program = args.claude.clone();
    // Its installed hooks (`switchboard hooks install`) leave it to this session's.
    options
        .env
        .insert(switchboard_server::externals::TERMINAL_VARIABLE.to_owned(), session.clone());
    let version = switchboard_transport::stdio::cli_version(&options).await.ok();
    let at_least = |since| {
        version.as_deref().and_then(|version| switchboard_session::version_at_least(version, since))
    };
    // Kept until the CLI exits (it may read its settings again).
    let settings = match (&hook_key, at_least(HTTP_HOOKS_SINCE)) {
        (Some(key), Some(true) | None) => {
            // The CLI takes the last `--settings` only: the person's own go into ours.
            let theirs = take_settings(&mut cli_args)?;
            let content = hook_settings(&client.base, key, theirs)?;
            let settings = HookSettings::new(&content, at_least(FD_SETTINGS_SINCE) == Some(true))?;
            cli_args.push("--settings".into());
            cli_args.push(settings.path().into());
            Some(settings)
        }
        (Some(_), Some(false)) => {
            eprintln!(
                "switchboard: Claude Code {} has no HTTP hooks ({HTTP_HOOKS_SINCE} and newer do): its tool calls ask in this terminal, outside Switchboard's policy",
                version.as_deref().unwrap_or("?")
            );
            None
        }
        (None, _) => {
            eprintln!(
                "switchboard: this daemon gives terminal sessions no hook key: the CLI's tool calls ask in this terminal, outside Switchboard's policy"
            );
            None
        }
    };
    let (pty, pts) = pty_process::open().map_err(|error| format!("cannot open a PTY: {error}"))?;
    if let Some(size) = terminal_size() {
        let _ = pty.resize(size);
    }
    let command: pty_process::Command =
        switchboard_transport::stdio::interactive_command(&options, &cli_args).into();
    // Watched before the CLI starts, so that no resize is missed.
    let watch = |kind| {
        tokio::signal::unix::signal(kind).map_err(|error| format!("cannot watch signals: {error}"))
    };
    use tokio::signal::unix::SignalKind;
    let mut resized = watch(SignalKind::window_change())?;
    let mut terminated = watch(SignalKind::terminate())?;
    let mut hung_up = watch(SignalKind::hangup())?;
    let started = (Instant::now(), switchboard_store::now_ms());
    let mut child = command
        .spawn(pts)
        .map_err(|error| format!("cannot start {}: {error}", options.program().display()))?;
    let pid = child.id();
    let settings = settings.map(HookSettings::started);
    let mut raw = Some(
        RawMode::enter()
            .map_err(|error| format!("cannot put the terminal in raw mode: {error}"))?,
    );

    let (pty_out, pty_in) = pty.into_split();
    let (input_tx, input_rx) = mpsc::channel::<Input>(64);
    let (suspend_tx, mut suspended) = mpsc::channel::<()>(1);
    spawn_stdin_reader(input_tx.clone(), suspend_tx);
    let writer = tokio::spawn(write_input(pty_in, input_rx));
    let output = tokio::spawn(copy_output(pty_out));
    let (stop_following, following) = oneshot::channel();
    let (lines_tx, lines_rx) = mpsc::channel::<Vec<String>>(16);
    let config_dir = claude_config_dir();
    let follower =
        tokio::spawn(follow(config_dir, known, pid, cwd.clone(), started, lines_tx, following));
    let (exit_tx, exit_rx) = oneshot::channel::<Value>();
    let (ready_tx, ready_rx) = oneshot::channel();
    let ready_watch = tokio::spawn(watch_ready(claude_config_dir(), pid, ready_tx));
    let daemon = tokio::spawn(talk(socket, lines_rx, input_tx.clone(), ready_rx, exit_rx));

    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            // Passed on: the CLI ends as it would without Switchboard, and this with it.
            _ = terminated.recv() => forward(pid, rustix::process::Signal::TERM),
            _ = hung_up.recv() => forward(pid, rustix::process::Signal::HUP),
            _ = resized.recv() => {
                // The writer's task holds the PTY's writing half, which resizes it.
                if let Some(size) = terminal_size() {
                    let _ = input_tx.send(Input::Resize(size)).await;
                }
            }
            // Ctrl-Z: the CLI would stop itself, but in a session of its own its SIGTSTP is
            // discarded and no shell would continue it. So this command stops it (SIGSTOP),
            // then itself, the shell's job as it would be; `fg` continues both, and the CLI
            // draws its screen again. (`None`: the person's terminal is gone; nothing to do.)
            Some(()) = suspended.recv() => {
                use rustix::process::Signal;
                drop(raw.take());
                forward(pid, Signal::STOP);
                let _ = rustix::process::kill_process(rustix::process::getpid(), Signal::TSTP);
                raw = RawMode::enter().ok();
                forward(pid, Signal::CONT);
                forward(pid, Signal::WINCH);
            }
        }
    };
    // Nothing more is typed into a terminal whose CLI is gone.
    writer.abort();
    ready_watch.abort();
    let _ = tokio::time::timeout(DRAIN_LIMIT, output).await;
    if status.as_ref().map_or(true, |status| !status.success()) {
        // A CLI that did not end on its own terms may have left its screen modes on.
        let mut stdout = std::io::stdout();
        let _ = std::io::Write::write_all(&mut stdout, TERMINAL_RESET);
        let _ = std::io::Write::flush(&mut stdout);
    }
    drop(raw);
    // The CLI wrote its transcript's last lines before it exited: they go first, then the exit.
    let _ = stop_following.send(());
    let follower_abort = follower.abort_handle();
    if tokio::time::timeout(FAREWELL_LIMIT, follower).await.is_err() {
        // Its lines' channel closes with it, and the exit can be told.
        follower_abort.abort();
    }
    let (code, signal) = match &status {
        Ok(status) => {
            use std::os::unix::process::ExitStatusExt;
            (status.code(), status.signal())
        }
        Err(_) => (None, None),
    };
    let _ = exit_tx.send(json!({"type": "exit", "code": code, "signal": signal}));
    let ended = tokio::time::timeout(FAREWELL_LIMIT, daemon)
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or(Ended::Lost);
    match ended {
        Ended::Told => {}
        Ended::Detached => eprintln!(
            "switchboard: session {session} was stopped in Switchboard; the CLI ran on without it"
        ),
        Ended::Lost => eprintln!(
            "switchboard: lost the daemon while the CLI ran; session {session} holds the transcript only up to then"
        ),
    }
    drop(settings);
    tracing::debug!(elapsed = ?started.0.elapsed(), "the interactive CLI ended");
    Ok(match (code, signal) {
        (Some(code), _) => ExitCode::from(u8::try_from(code & 0xff).unwrap_or(1)),
        (None, Some(signal)) => ExitCode::from(u8::try_from((128 + signal) & 0xff).unwrap_or(1)),
        (None, None) => ExitCode::from(1),
    })
}

/// The settings that put the CLI's tool calls to the daemon's hooks at `base` with `key`,
/// beside the person's own (`theirs`, from their `--settings`), as JSON text: `PreToolUse`
/// (the policy's verdict on every call) and `PermissionRequest` (a dialog the CLI shows, put to
/// a person afar as well; the first answer wins).
fn hook_settings(base: &str, key: &str, theirs: Option<Value>) -> Result<String, String> {
    let base = base.trim_end_matches('/');
    let pre_tool_use = json!({"matcher": "*", "hooks": [{
        "type": "http",
        "url": format!("{base}/hooks/pre-tool-use"),
        "headers": {"Authorization": format!("Bearer {key}")},
        "timeout": HOOK_TIMEOUT_SECS,
        // Unreachable, the daemon blocks the call rather than letting it run unasked.
        "onFailure": "block",
    }]});
    // Unreachable, the dialog waits for the terminal alone.
    let permission_request = json!({"matcher": "*", "hooks": [{
        "type": "http",
        "url": format!("{base}/hooks/permission-request"),
        "headers": {"Authorization": format!("Bearer {key}")},
        "timeout": HOOK_TIMEOUT_SECS,
    }]});
    let mut settings = theirs.unwrap_or_else(|| json!({}));
    let hooks = settings
        .as_object_mut()
        .ok_or("--settings must be a JSON object")?
        .entry("hooks")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .ok_or("--settings' hooks must be a JSON object")?;
    for (event, hook) in [("PreToolUse", pre_tool_use), ("PermissionRequest", permission_request)] {
        hooks
            .entry(event)
            .or_insert_with(|| json!([]))
            .as_array_mut()
            .ok_or_else(|| format!("--settings' {event} hooks must be a list"))?
            .push(hook);
    }
    // A project's own settings may turn every hook off; these are read after them.
    settings["disableAllHooks"] = Value::Bool(false);
    Ok(settings.to_string())
}

/// Claude Code's first version with HTTP hooks among the pinned ones.
const HTTP_HOOKS_SINCE: &str = "2.1.100";

/// The first pinned version that reads `--settings /dev/fd/N` (2.1.120 to 2.1.250 resolve the
/// descriptor to a name, `/memfd:… (deleted)`, find no file there, and refuse to start).
const FD_SETTINGS_SINCE: &str = "2.1.330";

/// Where the CLI reads its hook settings (the key in them).
enum HookSettings {
    /// An anonymous file (`memfd`, sealed: no one changes it) that the CLI inherits and reads
    /// as `/dev/fd/N`: no name to find it by. Open here without close-on-exec until the CLI has
    /// started (nothing else is started meanwhile), then closed.
    Inherited {
        /// Held open until the CLI has inherited it.
        _open: Option<std::os::fd::OwnedFd>,
        path: String,
    },
    /// A file of this user's alone (mode 0600 in a directory of mode 0700), removed when the
    /// CLI has exited: for a CLI that cannot read `/dev/fd/N`.
    Private {
        /// Removed, with the file, when dropped.
        _dir: tempfile::TempDir,
        path: PathBuf,
    },
}

impl HookSettings {
    fn new(content: &str, inherited: bool) -> Result<Self, String> {
        let cannot =
            |error: std::io::Error| format!("cannot hand the CLI its hook settings: {error}");
        if inherited {
            use rustix::fs::{MemfdFlags, SealFlags};
            use std::os::fd::AsRawFd as _;
            let file = rustix::fs::memfd_create("switchboard-settings", MemfdFlags::ALLOW_SEALING)
                .map_err(|error| cannot(error.into()))?;
            let mut writer = std::fs::File::from(file);
            std::io::Write::write_all(&mut writer, content.as_bytes()).map_err(cannot)?;
            let seals = SealFlags::WRITE | SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL;
            rustix::fs::fcntl_add_seals(&writer, seals).map_err(|error| cannot(error.into()))?;
            let file = std::os::fd::OwnedFd::from(writer);
            let path = format!("/dev/fd/{}", file.as_raw_fd());
            Ok(HookSettings::Inherited { _open: Some(file), path })
        } else {
            let dir =
                tempfile::Builder::new().prefix("switchboard-claude-").tempdir().map_err(cannot)?;
            let path = dir.path().join("settings.json");
            use std::os::unix::fs::OpenOptionsExt as _;
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
                .map_err(cannot)?;
            std::io::Write::write_all(&mut file, content.as_bytes()).map_err(cannot)?;
            Ok(HookSettings::Private { _dir: dir, path })
        }
    }

    /// What `--settings` names.
    fn path(&self) -> String {
        match self {
            HookSettings::Inherited { path, .. } => path.clone(),
            HookSettings::Private { path, .. } => path.display().to_string(),
        }
    }

    /// The CLI has started: the inherited descriptor is closed here (the CLI holds its own).
    fn started(self) -> Self {
        match self {
            HookSettings::Inherited { path, .. } => HookSettings::Inherited { _open: None, path },
            private => private,
        }
    }
}

/// The largest settings file of the person's read (`--settings FILE`).
const MAX_SETTINGS_BYTES: u64 = 1024 * 1024;

/// Takes the person's own `--settings` (JSON, or a file of it) out of `args`: the last one, as
/// the CLI would read it, every one removed.
fn take_settings(args: &mut Vec<OsString>) -> Result<Option<Value>, String> {
    let mut value = None;
    let mut kept = Vec::with_capacity(args.len());
    let mut given = std::mem::take(args).into_iter();
    while let Some(arg) = given.next() {
        let text = arg.to_string_lossy();
        if text == "--settings" {
            value = Some(given.next().ok_or("--settings needs a value")?);
        } else if let Some(inline) = text.strip_prefix("--settings=") {
            value = Some(inline.into());
        } else {
            kept.push(arg);
        }
    }
    *args = kept;
    let Some(value) = value else { return Ok(None) };
    let text = value.to_string_lossy();
    let json = if text.trim_start().starts_with('{') {
        text.into_owned()
    } else {
        let path = PathBuf::from(&value);
        let cannot =
            |error: std::io::Error| format!("cannot read --settings {}: {error}", path.display());
        let file = std::fs::File::open(&path).map_err(cannot)?;
        let mut text = String::new();
        std::io::Read::read_to_string(&mut file.take(MAX_SETTINGS_BYTES + 1), &mut text)
            .map_err(cannot)?;
        if text.len() as u64 > MAX_SETTINGS_BYTES {
            return Err(format!(
                "--settings {} is over {MAX_SETTINGS_BYTES} bytes",
                path.display()
            ));
        }
        text
    };
    serde_json::from_str(&json)
        .map(Some)
        .map_err(|error| format!("--settings is not JSON: {error}"))
}

async fn register(socket: &mut Socket, hello: Value) -> Result<(String, Option<String>), String> {
    socket
        .send(WsMessage::Text(hello.to_string().into()))
        .await
        .map_err(|error| format!("cannot register with the daemon: {error}"))?;
    let answer = tokio::time::timeout(REGISTER_TIMEOUT, socket.next())
        .await
        .map_err(|_| "the daemon did not answer the registration".to_owned())?;
    let Some(Ok(WsMessage::Text(text))) = answer else {
        return Err("the daemon closed the connection".into());
    };
    match serde_json::from_str::<ToTerminal>(&text) {
        Ok(ToTerminal::Registered { session, hook_key }) => Ok((session, hook_key)),
        Ok(ToTerminal::Error { error }) => Err(format!("the daemon refused the session: {error}")),
        _ => Err(format!("the daemon refused the session: {}", text.as_str())),
    }
}

/// The person's keys, read on a thread of its own (a read of the terminal blocks, and must not
/// hold up the runtime's end). Ctrl-Z on its own is not passed on: it suspends this command.
fn spawn_stdin_reader(input: mpsc::Sender<Input>, suspend: mpsc::Sender<()>) {
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin();
        let mut buffer = [0u8; 4096];
        loop {
            match stdin.read(&mut buffer) {
                Ok(0) | Err(_) => return,
                Ok(1) if buffer[0] == CTRL_Z => {
                    let _ = suspend.try_send(());
                }
                Ok(read) => {
                    if input.blocking_send(Input::Keys(buffer[..read].to_vec())).is_err() {
                        return;
                    }
                }
            }
        }
    });
}

/// Writes the person's keys and the daemon's prompts into the CLI's terminal, in order.
async fn write_input(mut pty: pty_process::OwnedWritePty, mut input: mpsc::Receiver<Input>) {
    while let Some(next) = input.recv().await {
        let written = match next {
            Input::Keys(bytes) => pty.write_all(&bytes).await,
            Input::Escape => {
                let written = pty.write_all(b"\x1b").await;
                let _ = pty.flush().await;
                tokio::time::sleep(ESCAPE_PAUSE).await;
                written
            }
            Input::Prompt(text) => type_prompt(&mut pty, &text).await,
            Input::Resize(size) => {
                let _ = pty.resize(size);
                Ok(())
            }
        };
        if written.is_err() || pty.flush().await.is_err() {
            return;
        }
    }
}

/// Types `text` one character at a time (a newline as Ctrl-J: a new line of the prompt),
/// then Enter.
async fn type_prompt(pty: &mut pty_process::OwnedWritePty, text: &str) -> std::io::Result<()> {
    let mut buffer = [0u8; 4];
    for c in text.chars() {
        pty.write_all(c.encode_utf8(&mut buffer).as_bytes()).await?;
        pty.flush().await?;
        tokio::time::sleep(CHAR_PAUSE).await;
    }
    tokio::time::sleep(ENTER_PAUSE).await;
    pty.write_all(b"\r").await
}

/// Copies the CLI's output to the person's terminal until the CLI's side closes.
async fn copy_output(mut pty: pty_process::OwnedReadPty) {
    let mut stdout = tokio::io::stdout();
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        match pty.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(read) => {
                if stdout.write_all(&buffer[..read]).await.is_err() || stdout.flush().await.is_err()
                {
                    break;
                }
            }
        }
    }
}

/// Passes a signal on to the CLI.
fn forward(pid: Option<u32>, signal: rustix::process::Signal) {
    let pid = pid.and_then(|pid| i32::try_from(pid).ok()).and_then(rustix::process::Pid::from_raw);
    if let Some(pid) = pid {
        let _ = rustix::process::kill_process(pid, signal);
    }
}

/// `$CLAUDE_CONFIG_DIR`, else `~/.claude`: where the CLI, which inherits this environment,
/// writes its transcripts.
fn claude_config_dir() -> PathBuf {
    std::env::var_os("CLAUDE_CONFIG_DIR").map(PathBuf::from).unwrap_or_else(|| {
        std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("."))
            .join(".claude")
    })
}

/// What the CLI `pid` announces of itself (2.1.330's `sessions/<pid>.json`): its session and
/// its status (`idle`, `busy`).
fn announcement(config_dir: &Path, pid: Option<u32>) -> Option<Value> {
    let path = config_dir.join("sessions").join(format!("{}.json", pid?));
    let file = std::fs::File::open(path).ok()?;
    // A small file; a bigger one is not the CLI's.
    let mut text = String::new();
    file.take(ANNOUNCEMENT_MAX_BYTES).read_to_string(&mut text).ok()?;
    serde_json::from_str(&text).ok()
}

/// The Claude session the CLI `pid` says it writes.
fn announced_session(config_dir: &Path, pid: Option<u32>) -> Option<String> {
    announcement(config_dir, pid)?["sessionId"].as_str().map(str::to_owned)
}

/// Finds the transcript's file: the named session's, else the one the CLI announces, else
/// (once the CLI had [`ANNOUNCE_LIMIT`] to announce one) the newest of this working directory
/// changed since the start.
fn find_transcript(
    config_dir: &Path,
    known: Option<&str>,
    pid: Option<u32>,
    cwd: &Path,
    started: (Instant, u64),
) -> Option<PathBuf> {
    let transcripts = Transcripts::new(config_dir);
    if let Some(id) = known.map(str::to_owned).or_else(|| announced_session(config_dir, pid)) {
        return transcripts.find(&id).map(|info| info.path);
    }
    let (started, started_ms) = started;
    if started.elapsed() < ANNOUNCE_LIMIT {
        return None;
    }
    let cwd = cwd.to_string_lossy();
    transcripts
        .list()
        .ok()?
        .into_iter()
        .find(|info| info.modified_ms >= started_ms && info.cwd.as_deref() == Some(&cwd))
        .map(|info| info.path)
}

/// Reads the transcript as it grows and hands its lines on, until told to stop (then what is
/// left is read, and handed on too).
async fn follow(
    config_dir: PathBuf,
    known: Option<String>,
    pid: Option<u32>,
    cwd: PathBuf,
    started: (Instant, u64),
    lines: mpsc::Sender<Vec<String>>,
    mut stop: oneshot::Receiver<()>,
) {
    let mut stopping = false;
    let path = loop {
        let found = {
            let (config_dir, known, cwd) = (config_dir.clone(), known.clone(), cwd.clone());
            tokio::task::spawn_blocking(move || {
                find_transcript(&config_dir, known.as_deref(), pid, &cwd, started)
            })
            .await
            .ok()
            .flatten()
        };
        match found {
            Some(path) => break path,
            // The CLI ended without writing one (or it was looked for one last time).
            None if stopping => return,
            None => {}
        }
        tokio::select! {
            _ = &mut stop => stopping = true,
            _ = tokio::time::sleep(FIND_INTERVAL) => {}
        }
    };
    let mut path = path;
    let mut following = transcript_id(&path);
    // No warning on the terminal: the CLI's screen is there.
    let (mut _watcher, mut changed) = match watch_file(&path) {
        Ok(watch) => watch,
        Err(error) => {
            tracing::debug!(%error, path = %path.display(), "cannot watch the transcript");
            return;
        }
    };
    let mut tail = TranscriptTail::new(&path);
    let mut next: Option<PathBuf> = None;
    let mut last_look = false;
    loop {
        loop {
            let batch;
            let fresh = TranscriptTail::new(&path);
            (tail, batch) = tokio::task::spawn_blocking(move || {
                let batch = tail.read_available(LINES_PER_READ);
                (tail, batch)
            })
            .await
            .unwrap_or_else(|_| (fresh, Vec::new()));
            if batch.is_empty() {
                break;
            }
            if lines.send(batch).await.is_err() {
                return;
            }
        }
        // The CLI moved to another session (`/clear`, `/resume`): the old transcript is read
        // to its end, then the new one from its start.
        if let Some(new) = next.take() {
            match watch_file(&new) {
                Ok((watcher, notices)) => {
                    (_watcher, changed) = (watcher, notices);
                    following = transcript_id(&new);
                    tail = TranscriptTail::new(&new);
                    path = new;
                    continue;
                }
                Err(error) => tracing::debug!(%error, "cannot watch the new transcript"),
            }
        }
        let check_switch = || {
            let (config_dir, following) = (config_dir.clone(), following.clone());
            async move {
                tokio::task::spawn_blocking(move || {
                    let id = announced_session(&config_dir, pid)?;
                    (Some(&id) != following.as_ref()).then_some(())?;
                    Transcripts::new(&config_dir).find(&id).map(|info| info.path)
                })
                .await
                .ok()
                .flatten()
            }
        };
        if stopping {
            // One last look: a conversation begun just before the CLI exited.
            if !last_look {
                last_look = true;
                next = check_switch().await;
                if next.is_some() {
                    continue;
                }
            }
            return;
        }
        tokio::select! {
            change = changed.recv() => if change.is_none() { return },
            _ = &mut stop => stopping = true,
            _ = tokio::time::sleep(SWITCH_CHECK) => next = check_switch().await,
        }
    }
}

/// Tells `ready` once the CLI `pid` announces itself idle (2.1.330's `sessions/<pid>.json`):
/// its screen is up and past any dialog of its start, so keys typed now make a prompt.
async fn watch_ready(config_dir: PathBuf, pid: Option<u32>, ready: oneshot::Sender<()>) {
    loop {
        let config_dir = config_dir.clone();
        let idle = tokio::task::spawn_blocking(move || {
            announcement(&config_dir, pid).is_some_and(|value| value["status"] == "idle")
        })
        .await
        .unwrap_or(false);
        if ready.is_closed() {
            return;
        }
        if idle {
            let _ = ready.send(());
            return;
        }
        tokio::time::sleep(FIND_INTERVAL).await;
    }
}

/// The Claude session a transcript's file holds (its name).
fn transcript_id(path: &Path) -> Option<String> {
    path.file_stem().map(|stem| stem.to_string_lossy().into_owned())
}

/// How the daemon's side ended.
enum Ended {
    /// The exit was told.
    Told,
    /// The session was stopped in Switchboard.
    Detached,
    /// The connection broke.
    Lost,
}

/// The daemon's socket: transcript lines out, keys in, then the exit.
async fn talk(
    mut socket: Socket,
    mut lines: mpsc::Receiver<Vec<String>>,
    input: mpsc::Sender<Input>,
    mut ready: oneshot::Receiver<()>,
    mut exit: oneshot::Receiver<Value>,
) -> Ended {
    let mut lines_open = true;
    let mut ready_told = false;
    loop {
        tokio::select! {
            told = &mut ready, if !ready_told => {
                ready_told = true;
                if told.is_ok() {
                    let frame = json!({"type": "ready"});
                    if socket.send(WsMessage::Text(frame.to_string().into())).await.is_err() {
                        return Ended::Lost;
                    }
                }
            }
            batch = lines.recv(), if lines_open => match batch {
                // One binary frame per line, as the CLI wrote it.
                Some(batch) => {
                    for line in batch {
                        if socket.feed(WsMessage::Binary(line.into_bytes().into())).await.is_err() {
                            return Ended::Lost;
                        }
                    }
                    if socket.flush().await.is_err() {
                        return Ended::Lost;
                    }
                }
                None => lines_open = false,
            },
            exit_frame = &mut exit, if !lines_open => {
                let Ok(frame) = exit_frame else { return Ended::Lost };
                if socket.send(WsMessage::Text(frame.to_string().into())).await.is_err() {
                    return Ended::Lost;
                }
                let _ = socket.close(None).await;
                return Ended::Told;
            }
            incoming = socket.next() => {
                let text = match incoming {
                    Some(Ok(WsMessage::Text(text))) => text,
                    Some(Ok(WsMessage::Close(_))) | None | Some(Err(_)) => return Ended::Lost,
                    Some(Ok(_)) => continue,
                };
                let next = match serde_json::from_str::<ToTerminal>(&text) {
                    Ok(ToTerminal::Prompt { text }) => Input::Prompt(text),
                    Ok(ToTerminal::Escape) => Input::Escape,
                    Ok(ToTerminal::Detached) => return Ended::Detached,
                    _ => {
                        tracing::debug!(frame = %text.as_str(), "an unexpected frame from the daemon");
                        continue;
                    }
                };
                // Once the CLI is gone nothing takes keys: the exit is still to be told.
                let _ = input.send(next).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

    #[test]
    fn the_persons_own_settings_are_taken_out_and_keep_their_hooks() {
        let mut given = args(&[
            "--model",
            "opus",
            "--settings",
            r#"{"hooks":{"PreToolUse":[{"matcher":"Bash","hooks":[]}]},"model":"x"}"#,
        ]);
        let theirs = take_settings(&mut given).unwrap();
        assert_eq!(given, args(&["--model", "opus"]));
        let content = hook_settings("http://127.0.0.1:1/", "k", theirs).unwrap();
        let read: Value = serde_json::from_str(&content).unwrap();
        assert_eq!(read["disableAllHooks"], false, "a project's settings cannot turn it off");
        // Either way the CLI gets it, the file holds what it should, and no one may change it.
        for inherited in [true, false] {
            let settings = HookSettings::new(&content, inherited).unwrap();
            assert_eq!(std::fs::read_to_string(settings.path()).unwrap(), content);
            if inherited {
                let rewrite = std::fs::OpenOptions::new().write(true).open(settings.path());
                let written =
                    rewrite.and_then(|mut file| std::io::Write::write_all(&mut file, b"{}"));
                assert!(written.is_err(), "sealed");
            } else {
                use std::os::unix::fs::PermissionsExt as _;
                let mode = std::fs::metadata(settings.path()).unwrap().permissions().mode();
                assert_eq!(mode & 0o777, 0o600, "private");
                let path = std::path::PathBuf::from(settings.path());
                drop(settings);
                assert!(!path.exists(), "removed with the CLI");
            }
        }
        assert_eq!(read["model"], "x", "theirs kept");
        let hooks = read["hooks"]["PreToolUse"].as_array().unwrap();
        assert_eq!(hooks.len(), 2, "theirs, then ours");
        assert_eq!(hooks[1]["hooks"][0]["url"], "http://127.0.0.1:1/hooks/pre-tool-use");
        assert_eq!(hooks[1]["hooks"][0]["headers"]["Authorization"], "Bearer k");
        let dialog = &read["hooks"]["PermissionRequest"][0]["hooks"][0];
        assert_eq!(dialog["url"], "http://127.0.0.1:1/hooks/permission-request");
        assert_eq!(dialog["headers"]["Authorization"], "Bearer k");
        assert!(dialog.get("onFailure").is_none(), "unreachable, the terminal answers");
        let mut none = args(&["--resume", "abc"]);
        assert_eq!(take_settings(&mut none).unwrap(), None);
        assert!(take_settings(&mut args(&["--settings"])).is_err());
        assert!(take_settings(&mut args(&["--settings=/nonexistent/settings.json"]))
            .unwrap_err()
            .contains("cannot read"));
        assert!(hook_settings("http://x", "k", Some(json!([1]))).is_err());
    }

    #[test]
    fn the_session_comes_from_the_arguments_or_is_made_or_is_learnt() {
        assert!(matches!(session_choice(&args(&["--model", "opus"])), Ok(SessionChoice::New(_))));
        assert_eq!(
            session_choice(&args(&["--session-id", "abc"])),
            Ok(SessionChoice::Named("abc".into()))
        );
        let id = "5f1c0a3e-9d7b-4c2a-8e61-0b9f4d2c7a10";
        assert_eq!(
            session_choice(&args(&[&format!("--resume={id}")])),
            Ok(SessionChoice::Named(id.into()))
        );
        assert_eq!(session_choice(&args(&["-r", id])), Ok(SessionChoice::Named(id.into())));
        // Not an id: a search term for the CLI's picker.
        assert_eq!(session_choice(&args(&["--resume", "login bug"])), Ok(SessionChoice::Unknown));
        assert_eq!(session_choice(&args(&["--resume"])), Ok(SessionChoice::Unknown));
        assert_eq!(session_choice(&args(&["--resume", "--verbose"])), Ok(SessionChoice::Unknown));
        assert_eq!(session_choice(&args(&["-c"])), Ok(SessionChoice::Unknown));
        assert_eq!(
            session_choice(&args(&["--resume", "abc", "--fork-session"])),
            Ok(SessionChoice::Unknown)
        );
        assert!(session_choice(&args(&["-p", "hi"])).unwrap_err().contains("switchboard run"));
    }
}
