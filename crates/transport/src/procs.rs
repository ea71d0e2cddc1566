//! What a CLI leaves behind: no process outlives its session.
//!
//! Killing the CLI's process group is not enough: Claude Code starts each Bash tool in a
//! session of its own (`setsid`), so a tool's background process (`setsid sleep 300 &`) is in
//! no group of ours. Every CLI therefore carries a run id in its environment
//! ([`RUN_VARIABLE`]), which its tools inherit; when the CLI is gone, every process that still
//! carries it is killed ([`end_run`]). (The daemon is not a child subreaper: it would have to
//! reap every orphan it adopted, and a reaper of unknown children races tokio's own `wait` of
//! the CLIs; orphans go to init, which reaps them, and `/proc` finds them there.) This is best
//! effort: a tool that clears its environment (`env -i`) escapes the sweep. A CLI also gets a
//! parent-death signal, and a daemon that was killed ends what its
//! predecessor left at its next start ([`end_leftover`], from the pid, start time and run id
//! it recorded).
//!
//! The parent-death signal is set in `pre_exec` in `base_command`, behind `cli_command`: one
//! of the workspace's few `unsafe` blocks. The record is a `CliRun` per CLI in the data
//! directory's `cli-runs.json`; since it names processes to kill, only a record that is the
//! user's own file, writable by no one else, is trusted.

use std::path::Path;

use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;

/// The environment variable that marks a CLI and everything it starts.
pub const RUN_VARIABLE: &str = "SB_CLI_RUN";

/// How many times [`end_run`] looks again for marked processes (a process may fork while
/// the others are being killed).
pub const SWEEP_ROUNDS: usize = 8;

/// A new run id: 128 random bits, hex.
pub fn new_run_id() -> String {
    crate::random::random_hex(16)
}

/// Kills every process of this user whose environment carries `RUN_VARIABLE=run_id`, looking
/// again until none is left (at most [`SWEEP_ROUNDS`] times), then waits (at most
/// [`SWEEP_WAIT`]) until each one killed has died: a killed process lives on until the kernel
/// delivers the signal, which on a loaded machine is not at once. Returns how many it killed.
/// Blocking: reads `/proc`.
pub fn end_run(run_id: &str) -> usize {
    let needle = format!("{RUN_VARIABLE}={run_id}");
    let me = std::process::id();
    let mut killed: Vec<(u32, Option<u64>)> = Vec::new();
    for _ in 0..SWEEP_ROUNDS {
        let marked: Vec<u32> =
            processes().filter(|&pid| pid != me && carries(pid, needle.as_bytes())).collect();
        if marked.is_empty() {
            break;
        }
        for &pid in &marked {
            if let Ok(raw) = i32::try_from(pid) {
                if kill(Pid::from_raw(raw), Signal::SIGKILL).is_ok()
                    && !killed.iter().any(|(seen, _)| *seen == pid)
                {
                    killed.push((pid, start_time(pid)));
                }
            }
        }
    }
    let deadline = std::time::Instant::now() + SWEEP_WAIT;
    while killed.iter().any(|&(pid, started)| living(pid, started))
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    killed.len()
}

/// How long [`end_run`] waits for what it killed to die.
pub const SWEEP_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Whether the process `pid` that started at `started` still runs (not a zombie, not gone,
/// not a new process that reuses the pid).
fn living(pid: u32, started: Option<u64>) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
    let Some((_, after)) = stat.rsplit_once(')') else { return false };
    let mut fields = after.split_whitespace();
    let state = fields.next().unwrap_or("Z");
    state != "Z" && state != "X" && start_time(pid) == started
}

/// Ends what a previous daemon's CLI left: the CLI's process group, if `pid` still names the
/// process that started at `start_time` (a reused pid is someone else's), and every process
/// marked with `run_id`. Returns how many processes it ended.
pub fn end_leftover(pid: u32, start_time: u64, run_id: &str) -> usize {
    let mut ended = 0;
    if self::start_time(pid) == Some(start_time) {
        if let Ok(raw) = i32::try_from(pid) {
            if killpg(Pid::from_raw(raw), Signal::SIGKILL).is_ok() {
                ended += 1;
            }
        }
    }
    ended + end_run(run_id)
}

/// When `pid` started (field 22 of `/proc/PID/stat`: clock ticks since boot), which with the
/// pid names one process for good.
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the `(comm)`, which may itself hold spaces and parentheses.
    let after = stat.rsplit_once(')')?.1;
    // `after` starts with field 3 (state); the start time is field 22.
    after.split_whitespace().nth(19)?.parse().ok()
}

/// Every process id in `/proc`.
fn processes() -> impl Iterator<Item = u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
}

/// Whether `pid`'s environment holds `needle` as one whole entry.
fn carries(pid: u32, needle: &[u8]) -> bool {
    let Ok(environ) = std::fs::read(Path::new("/proc").join(pid.to_string()).join("environ"))
    else {
        return false;
    };
    environ.split(|&byte| byte == 0).any(|entry| entry == needle)
}
