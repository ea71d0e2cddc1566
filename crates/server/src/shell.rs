//! `GET /api/sessions/{id}/shell`: a shell in a running session's directory, in a PTY on the
//! daemon, spoken to over a WebSocket by xterm.js in the web UI.
//!
//! A shell runs any program as the daemon's user, past every policy: only an `admin` token may
//! open one (the route's guard). It ends with the session: when the session's CLI is stopped
//! or exits, the shell's whole session gets SIGHUP, then SIGKILL, and every process it
//! started that still carries its run id is ended too ([`switchboard_transport::procs`]). At
//! most [`MAX_SHELLS`] run at once. The PTY is `pty-process`'s (as `switchboard claude` uses),
//! and the command is `transport::stdio::shell_command`'s: the CLI's environment rules and the
//! environment the session's CLI gets (the daemon's `env` and `clear_env`, then the session's
//! own `env`), and a run id of its own.
//!
//! Frames: binary both ways are the terminal's bytes (keys in, output out); text frames are
//! JSON: from the page `{"type":"resize","cols":C,"rows":R}`; from the daemon
//! `{"type":"started","shell":…,"pid":…,"cwd":…}` first and `{"type":"exit","code":…,"reason":…}`
//! last.
//!
//! Keys typed while the shell starts wait until it has written something, gone quiet for
//! [`QUIET`], and its terminal is out of canonical mode (a line editor, bash's readline or
//! zsh's, reads it key by key), or has been quiet for [`SETTLE`] (a shell without one, such as
//! dash); at most [`FIRST_OUTPUT_WAIT`] for its first output and [`SETTLED_WAIT`] after it (a
//! shell that never writes, or never stops, still gets them; a machine busy enough to stretch
//! a start past that can still lose keys typed into it). A starting shell can lose what
//! reaches its terminal. Seen three times with bash in the web UI's test on a loaded machine, the first
//! half of a typed command gone, or all of it: with keys sent at once, with keys sent at the
//! shell's first output (its prompt was on the screen, and it was still setting its terminal
//! up), and with keys sent after its output paused for 150 ms (a shell descheduled midway
//! through its start).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{Message as WsMessage, WebSocket};
use axum::extract::{Path as UrlPath, State};
use axum::response::Response;
use futures::SinkExt as _;
use serde::Deserialize;
use serde_json::json;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::daemon::Daemon;
use crate::error::ApiError;

/// The most shells open at once, across the daemon's sessions.
pub(crate) const MAX_SHELLS: usize = 16;

/// The largest frame the page may send (keys pasted at once).
pub(crate) const MAX_INPUT_FRAME_BYTES: usize = 64 * 1024;

/// How long a hung-up shell has to end before it is killed.
const HANGUP_GRACE: Duration = Duration::from_secs(2);

/// How long keys wait, at most, for the shell's first output (a shell with no prompt still
/// gets them).
const FIRST_OUTPUT_WAIT: Duration = Duration::from_secs(3);

/// How long keys wait, at most, after the shell's first output for it to settle (see
/// [`started`]; a shell that keeps writing still gets them).
const SETTLED_WAIT: Duration = Duration::from_secs(3);

/// How long a starting shell's output must pause, after its first, before keys go to it (with
/// its line editor reading the terminal).
const QUIET: Duration = Duration::from_millis(150);

/// How long a starting shell's output must pause before keys go to it when its terminal stays
/// in canonical mode (no line editor).
const SETTLE: Duration = Duration::from_secs(1);

/// The shells open now.
static OPEN: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(MAX_SHELLS);

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
enum Control {
    Resize { cols: u16, rows: u16 },
}

/// The shell to run: the daemon's `$SHELL` when it names a program, else bash, else sh.
fn shell() -> PathBuf {
    let usable = |path: &Path| path.is_absolute() && path.is_file();
    std::env::var_os("SHELL")
        .map(PathBuf::from)
        .filter(|path| usable(path))
        .or_else(|| ["/bin/bash", "/bin/sh"].map(PathBuf::from).into_iter().find(|p| usable(p)))
        .unwrap_or_else(|| PathBuf::from("/bin/sh"))
}

pub(crate) async fn open(
    State(daemon): State<Arc<Daemon>>,
    UrlPath(id): UrlPath<String>,
    crate::extract::Upgrade(upgrade): crate::extract::Upgrade,
) -> Result<Response, ApiError> {
    // Checked before the upgrade, so that a refusal is a plain HTTP error.
    let handle = daemon.running(&id).await?;
    let record =
        daemon.record(&id).await?.ok_or_else(|| ApiError::not_found(format!("no session {id}")))?;
    let cwd = PathBuf::from(&record.cwd);
    // The environment the session's CLI has (the daemon's rules, then the session's own).
    let (env, clear_env) = daemon.cli_environment(&record);
    if !cwd.is_dir() {
        return Err(ApiError::invalid(format!(
            "session {id}'s directory {} is gone",
            cwd.display()
        )));
    }
    let permit = OPEN.try_acquire().map_err(|_| ApiError {
        status: axum::http::StatusCode::SERVICE_UNAVAILABLE,
        code: "unavailable",
        message: format!("{MAX_SHELLS} shells are open already: close one first"),
    })?;
    Ok(upgrade.max_message_size(MAX_INPUT_FRAME_BYTES).on_upgrade(move |socket| async move {
        let _permit = permit;
        serve(socket, &daemon, handle, cwd, env, clear_env).await;
    }))
}

fn text(value: serde_json::Value) -> WsMessage {
    WsMessage::Text(value.to_string().into())
}

async fn serve(
    mut socket: WebSocket,
    daemon: &Daemon,
    handle: switchboard_session::SessionHandle,
    cwd: PathBuf,
    env: std::collections::BTreeMap<String, String>,
    clear_env: bool,
) {
    let program = shell();
    let run_id = switchboard_transport::procs::new_run_id();
    let started = pty_process::open().and_then(|(pty, pts)| {
        let _ = pty.resize(pty_process::Size::new(24, 80));
        let command: pty_process::Command =
            switchboard_transport::stdio::shell_command(&program, &cwd, &run_id, env, clear_env)
                .into();
        command.spawn(pts).map(|child| (pty, child))
    });
    let (pty, mut child) = match started {
        Ok(started) => started,
        Err(error) => {
            let reason = format!("cannot start {}: {error}", program.display());
            let _ =
                socket.send(text(json!({"type": "exit", "code": null, "reason": reason}))).await;
            return;
        }
    };
    let pid = child.id();
    // Recorded as a CLI's run is: a daemon killed with -9 takes the shell along (its
    // parent-death signal), and its successor ends what the shell left (the run id).
    let run = pid.map(|pid| switchboard_transport::CliRun {
        pid,
        start_time: switchboard_transport::procs::start_time(pid).unwrap_or(0),
        run_id: run_id.clone(),
    });
    if let Some(run) = &run {
        daemon.record_run(run, true).await;
    }
    let hello = json!({"type": "started", "shell": program, "pid": pid, "cwd": cwd});
    // The terminal's modes are read through a copy of the PTY's descriptor (see `started`).
    let modes = std::os::fd::AsFd::as_fd(&pty).try_clone_to_owned().ok();
    let (mut output, input) = pty.into_split();
    // Keys are written by a task of their own: a shell that does not read its terminal must
    // not stop this loop from seeing the session end or the page go.
    let (keys, keys_rx) = tokio::sync::mpsc::channel::<ToShell>(KEY_QUEUE);
    // Counts the shell's writes until its keys have been let through (see `started`).
    let (written, writes) = tokio::sync::watch::channel(0u64);
    let writer = tokio::spawn(write_keys(input, keys_rx, writes, modes));
    let mut snapshot = handle.watch();
    let mut buffer = vec![0u8; 16 * 1024];
    let mut reason = if socket.send(text(hello)).await.is_err() {
        Some("the page went away".to_owned())
    } else {
        None
    };
    let mut code = None;
    let mut reaped = false;
    while reason.is_none() {
        tokio::select! {
            read = output.read(&mut buffer) => match read {
                // The PTY ends (EIO) when the shell and everything on its terminal are gone.
                Ok(0) | Err(_) => {
                    // Its terminal is closed, which it may outlive (`exec >/dev/null`).
                    reason = Some(match tokio::time::timeout(HANGUP_GRACE, child.wait()).await {
                        Ok(Ok(status)) => {
                            reaped = true;
                            code = status.code();
                            "the shell ended".to_owned()
                        }
                        _ => "the shell closed its terminal".to_owned(),
                    });
                }
                Ok(read) => {
                    if !written.is_closed() {
                        written.send_modify(|count| *count += 1);
                    }
                    let bytes = axum::body::Bytes::copy_from_slice(&buffer[..read]);
                    if socket.send(WsMessage::Binary(bytes)).await.is_err() {
                        reason = Some("the page went away".to_owned());
                    }
                }
            },
            frame = socket.recv() => match frame {
                Some(Ok(WsMessage::Binary(bytes))) => match keys.try_send(ToShell::Keys(bytes)) {
                    Ok(()) => {}
                    Err(tokio::sync::mpsc::error::TrySendError::Full(_)) => {
                        let error = "the shell is not reading its terminal: keys were dropped";
                        let _ = socket.send(text(json!({"type": "error", "error": error}))).await;
                    }
                    Err(tokio::sync::mpsc::error::TrySendError::Closed(_)) => {
                        reason = Some("the shell's terminal closed".to_owned());
                    }
                },
                Some(Ok(WsMessage::Text(frame))) => match serde_json::from_str::<Control>(&frame) {
                    Ok(Control::Resize { cols, rows }) if (1..=1000).contains(&cols) && (1..=1000).contains(&rows) => {
                        let _ = keys.try_send(ToShell::Resize(pty_process::Size::new(rows, cols)));
                    }
                    Ok(Control::Resize { .. }) => {
                        let _ = socket.send(text(json!({"type": "error", "error": "cols and rows are 1 to 1000"}))).await;
                    }
                    Err(error) => {
                        let _ = socket.send(text(json!({"type": "error", "error": format!("not a control frame: {error}")}))).await;
                    }
                },
                Some(Ok(WsMessage::Close(_))) | None | Some(Err(_)) => {
                    reason = Some("the page went away".to_owned());
                }
                Some(Ok(_)) => {}
            },
            () = session_ended(&mut snapshot) => {
                reason = Some("the session ended".to_owned());
            }
        }
    }
    writer.abort();
    end(&mut child, if reaped { None } else { pid }, &run_id).await;
    if let Some(run) = &run {
        daemon.record_run(run, false).await;
    }
    let reason = reason.unwrap_or_default();
    let _ = socket.send(text(json!({"type": "exit", "code": code, "reason": reason}))).await;
    let _ = socket.close().await;
}

/// How many frames of keys wait for the shell to read them.
const KEY_QUEUE: usize = 64;

/// What the page sends on to the shell's terminal.
enum ToShell {
    Keys(axum::body::Bytes),
    Resize(pty_process::Size),
}

/// Returns once the shell has written something and then nothing for [`QUIET`] with a line
/// editor reading its terminal (`terminal`: the PTY, for its modes), or nothing for [`SETTLE`]
/// (`writes` counts its writes); or once its output is no longer watched; or when it has not
/// written for [`FIRST_OUTPUT_WAIT`], or not settled [`SETTLED_WAIT`] after it first wrote.
async fn started(
    mut writes: tokio::sync::watch::Receiver<u64>,
    terminal: Option<std::os::fd::OwnedFd>,
) {
    if !matches!(tokio::time::timeout(FIRST_OUTPUT_WAIT, writes.changed()).await, Ok(Ok(()))) {
        return;
    }
    let first = tokio::time::Instant::now();
    let mut quiet_since = first;
    loop {
        let left = SETTLED_WAIT.saturating_sub(first.elapsed());
        if left.is_zero() {
            return;
        }
        match tokio::time::timeout(QUIET.min(left), writes.changed()).await {
            Ok(Ok(())) => quiet_since = tokio::time::Instant::now(),
            Ok(Err(_)) => return,
            Err(_) => {
                let editing = terminal.as_ref().is_some_and(line_editor_reads);
                if editing || quiet_since.elapsed() >= SETTLE {
                    return;
                }
            }
        }
    }
}

/// Whether the terminal is out of canonical mode: a line editor (readline, zle) has set it up
/// to read key by key, which it does only while it waits for a line.
fn line_editor_reads(terminal: &std::os::fd::OwnedFd) -> bool {
    use nix::sys::termios::{tcgetattr, LocalFlags};
    tcgetattr(terminal).is_ok_and(|modes| !modes.local_flags.contains(LocalFlags::ICANON))
}

/// Writes keys and sizes to the terminal, in order, until the page is gone or the terminal is;
/// nothing until the shell has [`started`].
async fn write_keys(
    mut input: pty_process::OwnedWritePty,
    mut keys: tokio::sync::mpsc::Receiver<ToShell>,
    writes: tokio::sync::watch::Receiver<u64>,
    terminal: Option<std::os::fd::OwnedFd>,
) {
    // Dropped after: the reading loop stops counting.
    started(writes, terminal).await;
    while let Some(next) = keys.recv().await {
        match next {
            ToShell::Keys(bytes) => {
                if input.write_all(&bytes).await.is_err() || input.flush().await.is_err() {
                    return;
                }
            }
            ToShell::Resize(size) => {
                let _ = input.resize(size);
            }
        }
    }
}

/// Resolves when the session's CLI is gone (stopped, exited, crashed).
async fn session_ended(
    snapshot: &mut tokio::sync::watch::Receiver<switchboard_session::SessionSnapshot>,
) {
    loop {
        if snapshot.borrow_and_update().state.is_final() {
            return;
        }
        if snapshot.changed().await.is_err() {
            return;
        }
    }
}

/// Ends the shell's whole terminal session: SIGHUP (as a closed terminal would), then SIGKILL
/// after [`HANGUP_GRACE`], then whatever still carries its run id. `pid` is `None` once the
/// shell was reaped (its number may belong to someone else by then): only the run id's sweep.
async fn end(child: &mut tokio::process::Child, pid: Option<u32>, run_id: &str) {
    use nix::sys::signal::{killpg, Signal};
    let group = pid.and_then(|pid| i32::try_from(pid).ok()).map(nix::unistd::Pid::from_raw);
    if let Some(group) = group {
        let _ = killpg(group, Signal::SIGHUP);
        let _ = killpg(group, Signal::SIGCONT);
    }
    // Killed while the shell is not reaped yet (its number is then still its group's, never
    // someone else's); what left the group carries the run id.
    if group.is_some() && tokio::time::timeout(HANGUP_GRACE, child.wait()).await.is_err() {
        if let Some(group) = group {
            let _ = killpg(group, Signal::SIGKILL);
        }
        let _ = child.kill().await;
    }
    let run_id = run_id.to_owned();
    let _ =
        tokio::task::spawn_blocking(move || switchboard_transport::procs::end_run(&run_id)).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A new terminal is in canonical mode; once a line editor turns that off, it reads keys.
    #[tokio::test]
    async fn a_line_editor_is_seen_by_the_terminal_s_modes() {
        use nix::sys::termios::{tcgetattr, tcsetattr, LocalFlags, SetArg};
        let (pty, pts) = pty_process::open().unwrap();
        let terminal = std::os::fd::AsFd::as_fd(&pty).try_clone_to_owned().unwrap();
        assert!(!line_editor_reads(&terminal), "a new terminal reads lines");
        let mut modes = tcgetattr(&pts).unwrap();
        modes.local_flags.remove(LocalFlags::ICANON | LocalFlags::ECHO);
        tcsetattr(&pts, SetArg::TCSADRAIN, &modes).unwrap();
        assert!(line_editor_reads(&terminal), "raw, as readline sets it");
        modes.local_flags.insert(LocalFlags::ICANON);
        tcsetattr(&pts, SetArg::TCSADRAIN, &modes).unwrap();
        assert!(!line_editor_reads(&terminal), "back to lines, as while a command runs");
    }

    /// Keys wait for quiet output with a line editor reading, or for a longer quiet without
    /// one; a shell that never writes gets them after `FIRST_OUTPUT_WAIT`, one that never stops
    /// `SETTLED_WAIT` after its first output; with its output no longer watched, at once.
    #[tokio::test(start_paused = true)]
    async fn keys_wait_for_a_quiet_start() {
        let (pty, pts) = pty_process::open().unwrap();
        let terminal = || Some(std::os::fd::AsFd::as_fd(&pty).try_clone_to_owned().unwrap());
        // Canonical mode (no line editor): one write, then `SETTLE` of quiet.
        let (written, writes) = tokio::sync::watch::channel(0u64);
        let begun = tokio::time::Instant::now();
        let waiting = tokio::spawn(started(writes, terminal()));
        written.send_modify(|count| *count += 1);
        tokio::time::sleep(QUIET * 2).await;
        written.send_modify(|count| *count += 1);
        let after_second = tokio::time::Instant::now();
        waiting.await.unwrap();
        assert!(after_second.elapsed() >= SETTLE, "quiet for SETTLE after the last write");
        assert!(begun.elapsed() < SETTLE + QUIET * 4);
        // A line editor reading: `QUIET` after the last write is enough.
        use nix::sys::termios::{tcgetattr, tcsetattr, LocalFlags, SetArg};
        let mut modes = tcgetattr(&pts).unwrap();
        modes.local_flags.remove(LocalFlags::ICANON);
        tcsetattr(&pts, SetArg::TCSADRAIN, &modes).unwrap();
        let (written, writes) = tokio::sync::watch::channel(0u64);
        let waiting = tokio::spawn(started(writes, terminal()));
        written.send_modify(|count| *count += 1);
        let last = tokio::time::Instant::now();
        waiting.await.unwrap();
        let waited = last.elapsed();
        assert!(waited >= QUIET && waited < SETTLE, "{waited:?}");
        // Never a write: `FIRST_OUTPUT_WAIT`.
        let (_written, writes) = tokio::sync::watch::channel(0u64);
        let begun = tokio::time::Instant::now();
        started(writes, terminal()).await;
        assert_eq!(begun.elapsed(), FIRST_OUTPUT_WAIT);
        // Writing on and on (canonical mode, so only quiet would do): `SETTLED_WAIT` after the
        // first write.
        modes.local_flags.insert(LocalFlags::ICANON);
        tcsetattr(&pts, SetArg::TCSADRAIN, &modes).unwrap();
        let (written, writes) = tokio::sync::watch::channel(0u64);
        let chatter = tokio::spawn(async move {
            loop {
                written.send_modify(|count| *count += 1);
                tokio::time::sleep(QUIET / 3).await;
            }
        });
        tokio::task::yield_now().await;
        let first = tokio::time::Instant::now();
        started(writes, terminal()).await;
        assert_eq!(first.elapsed(), SETTLED_WAIT);
        chatter.abort();
        // Output no longer watched, after a first write: at once.
        let (written, writes) = tokio::sync::watch::channel(0u64);
        written.send_modify(|count| *count += 1);
        drop(written);
        let begun = tokio::time::Instant::now();
        started(writes, terminal()).await;
        assert_eq!(begun.elapsed(), Duration::ZERO);
    }
}
