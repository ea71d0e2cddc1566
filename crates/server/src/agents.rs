//! Claude Code's own record of the sessions its processes run now: each CLI (2.1.330 on, every
//! kind: interactive, `-p`, background) keeps `<claude dir>/sessions/<pid>.json` while it
//! runs, the list `claude agents --json` prints. The daemon reads it (never runs the CLI for
//! it) to list them (`GET /api/claude/agents`) and to keep to one writer per transcript: a
//! Claude session a live process writes is not resumed or forked by the daemon
//! ([`holder`]).
//!
//! A file is taken only when it is a regular file of this user's, at most
//! [`MAX_AGENT_FILE_BYTES`], and its process is alive, this user's, and (where the file says
//! when it started) the same process, not another that took its pid. At most
//! [`MAX_AGENT_FILES`] are read.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::transcripts::Transcripts;

/// The most files read from `sessions/`.
pub const MAX_AGENT_FILES: usize = 1024;

/// The largest file read.
pub const MAX_AGENT_FILE_BYTES: u64 = 64 * 1024;

/// A Claude Code process and the session it runs, as its `sessions/<pid>.json` says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaudeAgent {
    /// The process.
    pub pid: u32,
    /// The Claude session it writes.
    #[serde(alias = "sessionId")]
    pub session_id: String,
    /// Its working directory.
    #[serde(default)]
    pub cwd: Option<String>,
    /// `interactive` (a terminal's, and `-p`) or `background` (`claude --bg`), as `claude
    /// agents --json` says (its file says `bg`).
    #[serde(default, deserialize_with = "kind_named")]
    pub kind: Option<String>,
    /// `busy`, `idle`, … as the CLI says.
    #[serde(default)]
    pub status: Option<String>,
    /// The name the CLI gives it.
    #[serde(default)]
    pub name: Option<String>,
    /// The CLI's version.
    #[serde(default)]
    pub version: Option<String>,
    /// When it started (ms since the epoch).
    #[serde(default, alias = "startedAt")]
    pub started_at_ms: Option<u64>,
    /// The process's start time (clock ticks after boot), to tell it from a later process with
    /// the same pid.
    #[serde(default, alias = "procStart", skip_serializing)]
    proc_start: Option<String>,
}

/// A file's `kind` as `claude agents --json` names it: `bg` is `background`.
fn kind_named<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<String>, D::Error> {
    let kind: Option<String> = Option::deserialize(deserializer)?;
    Ok(kind.map(|kind| if kind == "bg" { "background".to_owned() } else { kind }))
}

impl ClaudeAgent {
    /// The process, said for a person: `process 4242 (claude 2.1.330, interactive, busy)`.
    pub fn describe(&self) -> String {
        let facts: Vec<String> = [
            self.version.as_ref().map(|version| format!("claude {version}")),
            self.kind.clone(),
            self.status.clone(),
        ]
        .into_iter()
        .flatten()
        .collect();
        if facts.is_empty() {
            format!("process {}", self.pid)
        } else {
            format!("process {} ({})", self.pid, facts.join(", "))
        }
    }
}

/// Every live Claude Code process of this user's under `transcripts`' Claude directory,
/// oldest first.
pub fn live(transcripts: &Transcripts) -> Vec<ClaudeAgent> {
    let dir = transcripts.claude_home().join("sessions");
    let Ok(entries) = std::fs::read_dir(&dir) else { return Vec::new() };
    let mut found: Vec<ClaudeAgent> = entries
        .flatten()
        .take(MAX_AGENT_FILES)
        .filter(|entry| entry.path().extension().is_some_and(|ext| ext == "json"))
        .filter_map(|entry| read(&entry.path()))
        .filter(alive)
        .collect();
    found.sort_by(|a, b| a.started_at_ms.cmp(&b.started_at_ms).then(a.pid.cmp(&b.pid)));
    found
}

/// The live process that writes Claude session `id`'s transcript, if any.
pub fn holder(transcripts: &Transcripts, id: &str) -> Option<ClaudeAgent> {
    live(transcripts).into_iter().find(|agent| agent.session_id == id)
}

fn read(path: &Path) -> Option<ClaudeAgent> {
    use std::io::Read as _;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    // Opened without following a link or waiting on a FIFO, then checked as it is open.
    let file = std::fs::OpenOptions::new().read(true).custom_flags(libc_flags()).open(path).ok()?;
    let metadata = file.metadata().ok()?;
    let own = metadata.uid() == nix::unistd::geteuid().as_raw();
    if !metadata.is_file() || !own || metadata.len() > MAX_AGENT_FILE_BYTES {
        return None;
    }
    let mut text = Vec::new();
    file.take(MAX_AGENT_FILE_BYTES).read_to_end(&mut text).ok()?;
    serde_json::from_slice(&text).ok()
}

/// `O_NOFOLLOW | O_NONBLOCK`.
fn libc_flags() -> i32 {
    (nix::fcntl::OFlag::O_NOFOLLOW | nix::fcntl::OFlag::O_NONBLOCK).bits()
}

/// Whether the file's process runs: alive, this user's, and the one that wrote it.
fn alive(agent: &ClaudeAgent) -> bool {
    use std::os::unix::fs::MetadataExt;
    let proc = Path::new("/proc").join(agent.pid.to_string());
    let own = std::fs::metadata(&proc)
        .is_ok_and(|metadata| metadata.uid() == nix::unistd::geteuid().as_raw());
    if agent.pid <= 1 || !own {
        return false;
    }
    let Ok(stat) = std::fs::read_to_string(proc.join("stat")) else { return false };
    // A process that died and was not yet reaped (a zombie) writes nothing.
    if matches!(process_state(&stat), Some('Z' | 'X') | None) {
        return false;
    }
    match &agent.proc_start {
        Some(written) => start_time(&stat).is_some_and(|started| started == *written),
        None => true,
    }
}

/// A `/proc/PID/stat` line's state (its third field: `R`, `S`, `Z`, …).
fn process_state(stat: &str) -> Option<char> {
    stat[stat.rfind(')')? + 1..].split_whitespace().next()?.chars().next()
}

/// A `/proc/PID/stat` line's start time (its 22nd field, after the command in parentheses).
fn start_time(stat: &str) -> Option<String> {
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(19).map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, pid: u32, session: &str, proc_start: Option<&str>) {
        let mut file = serde_json::json!({
            "pid": pid, "sessionId": session, "cwd": "/w", "kind": "interactive",
            "status": "busy", "version": "2.1.330", "startedAt": 1, "name": "w-1",
        });
        if let Some(start) = proc_start {
            file["procStart"] = start.into();
        }
        std::fs::write(dir.join(format!("{pid}.json")), file.to_string()).unwrap();
    }

    #[test]
    fn only_live_processes_that_wrote_their_file_hold_a_session() {
        let home = tempfile::tempdir().unwrap();
        let sessions = home.path().join("sessions");
        std::fs::create_dir(&sessions).unwrap();
        let transcripts = Transcripts::new(home.path());
        let me = std::process::id();
        let stat = std::fs::read_to_string(format!("/proc/{me}/stat")).unwrap();
        let started = start_time(&stat).unwrap();
        write(&sessions, me, "mine", Some(&started));
        let agent = holder(&transcripts, "mine").expect("this process holds it");
        assert_eq!(agent.kind.as_deref(), Some("interactive"));
        assert_eq!(agent.describe(), format!("process {me} (claude 2.1.330, interactive, busy)"));
        // Another process that took the pid later is not the writer.
        write(&sessions, me, "mine", Some("1"));
        assert!(holder(&transcripts, "mine").is_none());
        // Gone, and unreadable, files hold nothing.
        write(&sessions, 4_000_000, "gone", None);
        std::fs::write(sessions.join("7.json"), "{not json").unwrap();
        assert!(holder(&transcripts, "gone").is_none());
        assert!(live(&transcripts).is_empty());
        let background: ClaudeAgent =
            serde_json::from_value(serde_json::json!({"pid": 1, "sessionId": "b", "kind": "bg"}))
                .unwrap();
        assert_eq!(background.kind.as_deref(), Some("background"), "as claude agents says");
        let out = serde_json::to_value(&agent).unwrap();
        assert_eq!(out["session_id"], "mine", "the API's names: {out}");
        assert!(out.get("proc_start").is_none());
    }

    #[test]
    fn the_start_time_is_read_past_the_command() {
        let stat = "42 (a) b) S 1 42 42 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 98765 1000 10";
        assert_eq!(start_time(stat).as_deref(), Some("98765"));
        assert_eq!(process_state(stat), Some('S'));
        assert_eq!(process_state("42 (zombie) Z 1"), Some('Z'));
        assert_eq!(start_time("nonsense"), None);
    }
}
