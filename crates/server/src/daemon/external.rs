//! Claude Code sessions Switchboard did not start (a plain `claude`, an editor's, one a script
//! started), which reach it through the hooks `switchboard hooks install` wrote into the
//! person's settings ([`crate::hooks`]). The first hook of such a session makes it a session
//! here, as a terminal's is ([`Daemon::attach_terminal`]): its transcript, which the daemon
//! reads itself, is its history, and its tool calls are put to it through a
//! [`HookGate`](switchboard_transport::terminal::HookGate), decided by the external policy and
//! by people. Nothing is typed into it: another process writes its transcript (one writer per
//! transcript), so a message or a resume is refused while that process runs, with its pid.
//!
//! The following ends when the CLI says its session ended (its `SessionEnd` hook, or another
//! conversation begun in the same process), when its process exits (watched through a pidfd),
//! or when the session is stopped in Switchboard: then the CLI runs on alone, and the same
//! process's later hooks are left to it.

use super::*;

use std::os::fd::OwnedFd;

use std::path::Path;

use switchboard_transport::terminal::{Bytes, Keys, KeysOut, TranscriptIn};

use crate::externals::External;
use crate::transcripts::{watch_file, TranscriptTail};

/// How often the transcript's file is looked for until the CLI writes it.
const FIND_INTERVAL: Duration = Duration::from_millis(200);

/// How long a session whose process is unknown may go without a transcript before it is
/// followed no more (one with a known process is followed until that process exits).
const TRANSCRIPT_WAIT: Duration = Duration::from_secs(600);

/// Transcript lines read at a time.
const LINES_PER_READ: usize = 512;

/// What a session's hook says of it: the session, where it runs and writes, and its CLI's
/// process (found by the hook command, past the shell the CLI runs hooks in).
#[derive(Debug, Clone)]
pub struct ExternalHello {
    /// The Claude session.
    pub claude_session_id: String,
    /// Its working directory.
    pub cwd: PathBuf,
    /// Its transcript.
    pub transcript_path: PathBuf,
    /// The CLI's process, if the hook could tell.
    pub pid: Option<u32>,
}

/// Whether `id` reads as a Claude session id (letters, digits, `-` and `_`, at most 128).
pub(super) fn check_claude_session_id(id: &str) -> Result<(), DaemonError> {
    if id.is_empty()
        || id.len() > 128
        || !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(DaemonError::Invalid(
            "a Claude session id is 1 to 128 letters, digits, - and _".into(),
        ));
    }
    Ok(())
}

/// Whether `pid` is a live process of this user (a pid a hook named is taken only then).
fn own_process(pid: u32) -> bool {
    use std::os::unix::fs::MetadataExt;
    pid > 1
        && std::fs::metadata(format!("/proc/{pid}"))
            .is_ok_and(|proc| proc.uid() == nix::unistd::geteuid().as_raw())
}

/// A descriptor that turns readable when process `pid` exits (`None`: it cannot be watched, or
/// is gone already).
fn pidfd(pid: u32) -> Option<OwnedFd> {
    let pid = rustix::process::Pid::from_raw(i32::try_from(pid).ok()?)?;
    rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::NONBLOCK).ok()
}

/// Resolves when the process behind `fd` exits; never without one.
#[allow(unsafe_code)] // registering the descriptor; see the SAFETY note
async fn exit_of(fd: Option<OwnedFd>) {
    let Some(fd) = fd else { return std::future::pending().await };
    // SAFETY: the `AsyncFd` owns the `OwnedFd`, which stays open, the same descriptor, until
    // the `AsyncFd` is dropped.
    let registered = unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE)
    };
    match registered {
        Ok(watched) => {
            let _ = watched.readable().await;
        }
        Err(error) => {
            tracing::debug!(%error, "cannot watch a CLI's process");
            std::future::pending::<()>().await;
        }
    }
}

impl Daemon {
    /// The sessions Switchboard follows through their hooks.
    pub fn externals(&self) -> &crate::externals::Externals {
        &self.externals
    }

    /// Whether a hook's session is one this daemon already governs, so that its installed
    /// hooks leave it alone: a CLI the daemon runs (`run`, the run id in the CLI's
    /// environment, is one of the daemon's and `pid` is that run's process), a terminal's
    /// (`terminal`, the session `switchboard claude` registered), or any session here that
    /// continues Claude session `claude` and is not followed through hooks.
    pub fn governs(
        &self,
        claude: &str,
        run: Option<&str>,
        pid: Option<u32>,
        terminal: Option<&str>,
    ) -> bool {
        if let (Some(run), Some(pid)) = (run, pid) {
            if self.runs.lock().get(run).is_some_and(|known| known.pid == pid) {
                return true;
            }
        }
        if terminal
            .and_then(|id| self.live(id))
            .is_some_and(|live| is_terminal(&live.record.lock()))
        {
            return true;
        }
        let live: Vec<Arc<LiveSession>> = self.sessions.lock().values().cloned().collect();
        live.iter().any(|live| {
            let record = live.record.lock();
            record.claude_session_id.as_deref() == Some(claude)
                && !is_external(&record)
                && !record.state.is_final()
        })
    }

    /// The session that follows the hook's Claude session, made now if there is none: `None`
    /// when the session was let go in Switchboard (its CLI runs on alone).
    pub async fn external(
        self: &Arc<Self>,
        hello: ExternalHello,
    ) -> Result<Option<External>, DaemonError> {
        check_claude_session_id(&hello.claude_session_id)?;
        let claude = hello.claude_session_id.clone();
        let pid = hello.pid.filter(|pid| own_process(*pid));
        if let Some(found) = self.externals.find(&claude) {
            return Ok(Some(found));
        }
        let _adopting = self.externals.adopting().await;
        if let Some(found) = self.externals.find(&claude) {
            return Ok(Some(found));
        }
        if self.externals.was_let_go(&claude, pid) {
            return Ok(None);
        }
        self.check_serving()?;
        if hello.cwd.as_os_str().len() > 4096 || !hello.cwd.is_absolute() {
            return Err(DaemonError::Invalid(format!(
                "cwd must be an absolute path of at most 4096 bytes, not {:?}",
                hello.cwd
            )));
        }
        if !self.transcripts.names(&hello.transcript_path, &claude) {
            return Err(DaemonError::Invalid(format!(
                "transcript_path {:?} is not session {claude}'s transcript in this daemon's Claude directory (projects/<folder>/{claude}.jsonl)",
                hello.transcript_path
            )));
        }
        if let Some(pid) = pid {
            self.externals.end_others_of(pid, &claude);
        }
        let id = uuid::Uuid::new_v4().to_string();
        let record = SessionRecord {
            claude_session_id: Some(claude.clone()),
            cwd: hello.cwd.display().to_string(),
            ..self.new_record(
                &id,
                Launch {
                    cwd: hello.cwd.clone(),
                    transport: Some(TransportKind::External),
                    ..Launch::default()
                },
            )
        };
        let policy = self
            .config
            .external_policy
            .clone()
            .or_else(|| self.config.default_policy.clone())
            .unwrap_or_default();
        let mut config = SessionConfig::new(hello.cwd.clone(), policy);
        config.transcript = true;
        let (link, lines, keys, gate) = switchboard_transport::terminal::attached();
        let external = External { session: id.clone(), gate, pid, end: Arc::new(Notify::new()) };
        if let Err(full) = self.externals.insert(&claude, external.clone()) {
            // Refused, it would block every tool call of every new session on the machine
            // (a hook installed to fail closed): this one runs without Switchboard.
            tracing::warn!(%claude, "{full}: a new Claude Code session runs without Switchboard");
            return Ok(None);
        }
        let made = async {
            let (handle, events) = switchboard_session::spawn_session_on(config, link);
            self.store.create_session(&record).await?;
            self.tell_created(&record);
            self.note_started(&id, 0, false, false, true).await?;
            self.run(record.clone(), handle, events, 1, None, Default::default()).await
        };
        if let Err(error) = made.await {
            self.externals.remove(&claude, false);
            return Err(error);
        }
        tracing::info!(session = %id, %claude, pid, "following a Claude Code session through its hooks");
        let follow = Following {
            daemon: self.clone(),
            claude,
            path: hello.transcript_path,
            end: external.end.clone(),
            exited: pid.and_then(pidfd),
        };
        tokio::spawn(follow.run(lines, keys));
        Ok(Some(external))
    }

    /// The CLI said Claude session `claude` ended (its `SessionEnd` hook).
    pub fn external_ended(&self, claude: &str) {
        self.externals.end(claude);
    }

    /// Refused when another live process writes Claude session `claude`'s transcript (one
    /// writer per transcript): a session followed through its hooks, or any process Claude
    /// Code lists as running it ([`crate::agents`]). `what` says what was asked.
    pub(super) async fn one_writer(&self, claude: &str, what: &str) -> Result<(), DaemonError> {
        let followed = self.externals.find(claude).map(|external| external.pid);
        let transcripts = self.transcripts.clone();
        let id = claude.to_owned();
        let listed = tokio::task::spawn_blocking(move || crate::agents::holder(&transcripts, &id))
            .await
            .ok()
            .flatten()
            // A CLI this daemon runs is its own writer (forking a conversation it runs).
            .filter(|agent| !self.runs.lock().values().any(|run| run.pid == agent.pid));
        let holder = match (listed, followed) {
            (Some(agent), _) => agent.describe(),
            (None, Some(Some(pid))) => format!("process {pid}"),
            (None, Some(None)) => "another process".to_owned(),
            (None, None) => return Ok(()),
        };
        Err(DaemonError::HeldElsewhere(format!(
            "{holder} writes Claude session {claude}'s transcript now: Switchboard does not {what} (two writers would interleave the conversation); follow it instead (GET /api/claude/sessions/{claude}/subscribe), or {what} once it has ended"
        )))
    }

    /// Why a message cannot go to `id`, followed through its hooks: another process writes its
    /// transcript.
    pub(super) fn external_refusal(&self, id: &str, what: &str) -> Option<DaemonError> {
        let (_, pid) = self.externals.of_session(id)?;
        let holder =
            pid.map_or_else(|| "another process".to_owned(), |pid| format!("process {pid}"));
        Some(DaemonError::HeldElsewhere(format!(
            "session {id} is a Claude Code session Switchboard did not start, and {holder} writes its transcript: Switchboard follows it and answers its tool calls, but does not {what} (two writers would interleave the conversation); use the terminal it runs in"
        )))
    }
}

/// The following of one session through its transcript.
struct Following {
    daemon: Arc<Daemon>,
    claude: String,
    path: PathBuf,
    end: Arc<Notify>,
    exited: Option<OwnedFd>,
}

impl Following {
    /// Reads the transcript into the session as it grows, and keeps the session's answers to
    /// its hooks flowing (through `keys`), until the CLI's session ends, its process exits, or
    /// the session is stopped here.
    async fn run(self, mut lines: TranscriptIn, mut keys: KeysOut) {
        let Following { daemon, claude, path, end, exited } = self;
        let unwatched = exited.is_none();
        let give_up = tokio::time::Instant::now() + TRANSCRIPT_WAIT;
        let exited = exit_of(exited);
        tokio::pin!(exited);
        let mut tail: Option<TranscriptTail> = None;
        let mut notices: Option<tokio::sync::mpsc::Receiver<()>> = None;
        let mut _watcher = None;
        let (note, let_go, code) = loop {
            if tail.is_none() && is_own_file(&path).await {
                match watch_file(&path) {
                    Ok((watcher, changed)) => {
                        _watcher = Some(watcher);
                        notices = Some(changed);
                        tail = Some(TranscriptTail::new(&path));
                    }
                    Err(error) => tracing::debug!(%error, "cannot watch a transcript"),
                }
            }
            if !read_all(&mut tail, &mut lines).await {
                return;
            }
            let looking = tail.is_none();
            tokio::select! {
                changed = next_notice(&mut notices) => if !changed { notices = None },
                () = tokio::time::sleep(FIND_INTERVAL), if looking => {
                    if unwatched && tokio::time::Instant::now() >= give_up {
                        break ("no transcript appeared, and its process is unknown".to_owned(), false, None);
                    }
                }
                next = keys.next_keys() => match next {
                    Some(Keys::Prompt { line, .. }) => lines.undelivered(line).await,
                    Some(Keys::Escape) => {}
                    None => break ("stopped in Switchboard: the CLI goes on without it".to_owned(), true, None),
                },
                // (It said so itself: an ordinary end.)
                () = end.notified() => break ("the CLI's session ended".to_owned(), false, Some(0)),
                // (Its status is its parent's to read: unknown here.)
                () = &mut exited => break ("its process exited without ending its session".to_owned(), false, None),
            }
        };
        if tail.is_none() && is_own_file(&path).await {
            tail = Some(TranscriptTail::new(&path));
        }
        read_all(&mut tail, &mut lines).await;
        daemon.externals.remove(&claude, let_go);
        lines.ended(code, None, &note, Vec::new()).await;
        drop(keys);
    }
}

/// Whether `path` is a regular file of this user's (not a link to somewhere else).
async fn is_own_file(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    tokio::fs::symlink_metadata(path).await.is_ok_and(|metadata| {
        metadata.is_file() && metadata.uid() == nix::unistd::geteuid().as_raw()
    })
}

/// Hands on every line the transcript has now; false once the session is gone.
async fn read_all(tail: &mut Option<TranscriptTail>, lines: &mut TranscriptIn) -> bool {
    let Some(reading) = tail.take() else { return true };
    let mut reading = reading;
    loop {
        let batch;
        (reading, batch) = match tokio::task::spawn_blocking(move || {
            let batch = reading.read_available(LINES_PER_READ);
            (reading, batch)
        })
        .await
        {
            Ok(read) => read,
            Err(_) => return true,
        };
        if batch.is_empty() {
            *tail = Some(reading);
            return true;
        }
        for line in batch {
            if !lines.line(Bytes::from(line)).await {
                return false;
            }
        }
    }
}

/// The next change notice; false when there will be none.
async fn next_notice(notices: &mut Option<tokio::sync::mpsc::Receiver<()>>) -> bool {
    match notices {
        Some(notices) => notices.recv().await.is_some(),
        None => std::future::pending().await,
    }
}
