//! The warm pool: CLIs started ahead of their sessions, so that a new session skips the CLI's
//! cold start (0.4 s on 2.1.330, 1.2 s or more on 2.1.37, before it reads its first line).
//!
//! A warm CLI is spawned with a session's launch options and sent the session's `initialize`;
//! once that is answered it waits, idle, for a session that fits it. It has made no API call
//! (a CLI asks the API nothing before its first prompt). When a session takes it, the session's
//! actor logs the `initialize` line and its answer as if it had sent them itself, so a warm
//! session's log is a cold one's.
//!
//! **What fits.** Everything fixed at spawn must be equal: the program, the working directory,
//! the whole environment, every flag, and the `initialize` line. Two things may differ, because
//! the CLI changes them at run time without a word to the API:
//!
//! - the permission mode: a warm CLI launched without one, or with another (the daemon pins
//!   `default`), is set to the session's with `set_permission_mode` before its first prompt,
//!   which waits for the answer. Not `bypassPermissions`: 2.1.330 refuses to switch to it
//!   unless it was launched for it, so a session that asks for it fits only a CLI launched with
//!   it, and a CLI launched with it fits no other session;
//! - nothing else. The model is part of the key: `set_model` on 2.1.330 makes a one-token API
//!   call to validate the model (billed) and adds a replayed user message to the conversation,
//!   so a warm CLI is launched with the model its sessions use.
//!
//! A pool keeps each configuration's count of CLIs: it starts one at a time per configuration
//! (a cold start takes a core for most of a second), replaces one taken or lost, and backs off
//! (1 s, doubling to 5 min) while starts fail or idle CLIs die. [`WarmPool::close`] ends them.
//!
//! [`WarmPool::take`] hands out a [`WarmCli`] only if its `WarmKey` (the program, the working
//! directory, the whole environment, every argument but `--permission-mode`, the `initialize`
//! line) is the session's, and the files the CLI read at its start are unchanged (a
//! fingerprint of size and mtime: the program, the settings, `CLAUDE.md` and `.mcp.json`
//! files of the directory and the home). An idle CLI is replaced after [`MAX_IDLE`].
//! [`WarmCli::into_session`] starts the actor with the CLI's start: the actor holds prompts,
//! logs the `initialize` line without writing it again, feeds the events the CLI wrote
//! meanwhile (its answer first), then sends `set_permission_mode` through
//! `SessionCore::control_before_prompts`, so a session never runs in another mode than it
//! asked for. The daemon records warm CLIs in its runs file ([`WarmPool::with_runs`]), and
//! `close` (or dropping the daemon) ends them.

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use switchboard_protocol::control::ControlResponseBody;
use switchboard_protocol::{ControlRequestPayload, Message, PermissionMode};
use switchboard_transport::stdio::{self, CliLink, TransportEvent};
use tokio::sync::{oneshot, watch, Notify};
use tokio_util::task::TaskTracker;

use crate::actor::{start_actor, SessionConfig, SessionEvents, SessionHandle, WarmStart};
use crate::core::{Effect, SessionCore};
use crate::policy::MatchContext;

/// How long a warm CLI may take to answer `initialize` before it counts as failed.
pub const WARM_UP_LIMIT: Duration = Duration::from_secs(60);

/// The most events an idle warm CLI may write (stderr lines, say) before it is ended as
/// misbehaving: it holds them for its session, so they are bounded.
pub const MAX_IDLE_EVENTS: usize = 64;

/// The first wait after a failed start; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(1);

/// The longest wait between failed starts.
const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// How long a warm CLI gets to exit after its input closes, when the pool ends it.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// How long a warm CLI waits before the pool replaces it with a fresh one: it read its settings,
/// memory files and MCP servers when it started, and a session should not get a CLI much
/// staler than a cold start's (those files are also checked at every take).
pub const MAX_IDLE: Duration = Duration::from_secs(600);

/// A warm CLI that waited this long before it died counts as healthy: its death does not add
/// to the back-off.
const HEALTHY_AFTER: Duration = Duration::from_secs(60);

/// Everything of a CLI fixed at spawn, which a session must match to take it. (No `Debug`:
/// the environment's values may be secrets.)
#[derive(Clone, PartialEq, Eq)]
struct WarmKey {
    program: PathBuf,
    cwd: PathBuf,
    clear_env: bool,
    env: BTreeMap<String, String>,
    /// Every argument but `--permission-mode`.
    args: Vec<OsString>,
    /// The `initialize` line, as the session would write it.
    initialize: Arc<str>,
}

/// The key of `config`'s CLI, and the permission mode it launches with.
fn key_of(config: &SessionConfig) -> (WarmKey, Option<PermissionMode>) {
    let mut options = config.launch_options();
    let mode = options.permission_mode.take();
    let key = WarmKey {
        program: options.program(),
        cwd: options.cwd.clone(),
        clear_env: options.clear_env,
        env: options.env.clone(),
        args: options.args(),
        initialize: initialize_line(config),
    };
    (key, mode)
}

/// The files a CLI reads when it starts, which a session's CLI must see as they are now: its
/// program, the settings and memory files of its directory and its home, and the project's
/// MCP servers. Each with its size and modification time (`None`: absent).
type Fingerprint = Vec<(PathBuf, Option<(u64, std::time::SystemTime)>)>;

fn fingerprint(config: &SessionConfig) -> Fingerprint {
    let cli = &config.cli;
    let home = cli.env.get("HOME").map(PathBuf::from).or_else(|| {
        (!cli.clear_env).then(|| std::env::var_os("HOME").map(PathBuf::from)).flatten()
    });
    let mut files = vec![
        cli.program(),
        cli.cwd.join(".claude/settings.json"),
        cli.cwd.join(".claude/settings.local.json"),
        cli.cwd.join(".mcp.json"),
        cli.cwd.join("CLAUDE.md"),
        cli.cwd.join(".claude/CLAUDE.md"),
    ];
    if let Some(home) = home {
        files.push(home.join(".claude/settings.json"));
        files.push(home.join(".claude/CLAUDE.md"));
    }
    files
        .into_iter()
        .map(|path| {
            let stamp = std::fs::metadata(&path)
                .ok()
                .and_then(|meta| Some((meta.len(), meta.modified().ok()?)));
            (path, stamp)
        })
        .collect()
}

/// The `initialize` line a session on `config` writes first: computed by the session core
/// itself, so the pool writes exactly what the session would.
fn initialize_line(config: &SessionConfig) -> Arc<str> {
    let mut core = SessionCore::new(
        config.policy.clone(),
        MatchContext { cwd: config.cli.cwd.clone(), home: None },
    );
    let payload = ControlRequestPayload::Initialize(config.initialize.clone().unwrap_or_default());
    core.on_started(Some(payload))
        .into_iter()
        .find_map(|effect| match effect {
            Effect::Send(line) => Some(line),
            _ => None,
        })
        .unwrap_or_else(|| Arc::from(""))
}

/// Whether a session asking for `wanted` may take a CLI launched with `launched`, and which
/// mode it must then set before its first prompt.
fn mode_change(
    launched: &Option<PermissionMode>,
    wanted: &Option<PermissionMode>,
) -> Result<Option<PermissionMode>, ()> {
    let bypass = |mode: &Option<PermissionMode>| {
        mode.as_ref().is_some_and(|mode| matches!(mode, PermissionMode::BypassPermissions))
    };
    match (launched, wanted) {
        (launched, wanted) if launched == wanted => Ok(None),
        // A CLI launched with a mode cannot be sent back to "whatever the settings say"; one
        // launched without, or with another mode (`default`, as the daemon pins it), is set to
        // the one wanted, unless either is `bypassPermissions`.
        (launched, Some(wanted)) if !bypass(launched) && !bypass(&Some(wanted.clone())) => {
            Ok(Some(wanted.clone()))
        }
        _ => Err(()),
    }
}

/// A CLI that answered `initialize` and waits for a session.
pub struct WarmCli {
    link: CliLink,
    key: WarmKey,
    received: Vec<TransportEvent>,
    launched: Option<PermissionMode>,
    /// What its start read, as it was then.
    fingerprint: Fingerprint,
    /// When it answered `initialize`.
    ready_at: std::time::Instant,
}

impl std::fmt::Debug for WarmCli {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WarmCli").field("pid", &self.link.process.pid()).finish()
    }
}

impl WarmCli {
    /// Starts `config`'s CLI and sends it `initialize`; returns once the CLI answered (within
    /// [`WARM_UP_LIMIT`]). A CLI that did not is ended.
    pub async fn start(config: &SessionConfig) -> Result<WarmCli, String> {
        let (key, launched) = key_of(config);
        let fingerprint = fingerprint(config);
        let mut link = stdio::spawn(&config.launch_options()).map_err(|error| error.to_string())?;
        let request_id = request_id_of(&key.initialize);
        link.process
            .enqueue(bytes::Bytes::from(key.initialize.as_bytes().to_vec()))
            .await
            .map_err(|error| format!("the CLI took no input: {error}"))?;
        let mut received = Vec::new();
        let answered = tokio::time::timeout(WARM_UP_LIMIT, async {
            loop {
                let Some(event) = link.events.recv().await else {
                    return Err("its output ended before it answered initialize".to_owned());
                };
                let answer = match &event {
                    TransportEvent::Line(line) => match &line.message {
                        Message::ControlResponse(response)
                            if response.request_id() == request_id.as_deref() =>
                        {
                            Some(matches!(response.response, ControlResponseBody::Success(_)))
                        }
                        _ => None,
                    },
                    TransportEvent::Exited(exit) => {
                        let stderr = received.iter().rev().find_map(|event| match event {
                            TransportEvent::Stderr(line) => Some(format!(": {line}")),
                            _ => None,
                        });
                        return Err(format!(
                            "it {} before it answered initialize{}",
                            exit.describe(),
                            stderr.unwrap_or_default()
                        ));
                    }
                    _ => None,
                };
                received.push(event);
                match answer {
                    Some(true) => return Ok(()),
                    Some(false) => return Err("it refused initialize".to_owned()),
                    None if received.len() > MAX_IDLE_EVENTS => {
                        return Err(format!(
                            "it wrote more than {MAX_IDLE_EVENTS} lines before it answered initialize"
                        ));
                    }
                    None => {}
                }
            }
        })
        .await;
        match answered {
            Ok(Ok(())) => Ok(WarmCli {
                link,
                key,
                received,
                launched,
                fingerprint,
                ready_at: std::time::Instant::now(),
            }),
            Ok(Err(error)) => Err(error),
            Err(_) => {
                Err(format!("it did not answer initialize within {} s", WARM_UP_LIMIT.as_secs()))
            }
        }
    }

    /// The CLI's process id.
    pub fn pid(&self) -> Option<u32> {
        self.link.process.pid()
    }

    /// The CLI's run (process id, start time, run id), for a record of the CLIs running.
    pub fn run(&self) -> Option<&switchboard_transport::CliRun> {
        self.link.process.run()
    }

    /// Whether a session on `config` may take this CLI: it was launched as the session's
    /// would be, and the files it read at its start have not changed since.
    pub fn fits(&self, config: &SessionConfig) -> bool {
        let (key, wanted) = key_of(config);
        key == self.key
            && mode_change(&self.launched, &wanted).is_ok()
            && fingerprint(config) == self.fingerprint
    }

    /// Starts a session on this CLI, as [`crate::spawn_session`] would on a new one, if it
    /// fits `config` ([`WarmCli::fits`]); gives the CLI back if it does not.
    #[allow(clippy::result_large_err)] // the CLI itself comes back
    pub fn into_session(
        self,
        config: SessionConfig,
    ) -> Result<(SessionHandle, SessionEvents), WarmCli> {
        let (key, wanted) = key_of(&config);
        let Ok(mode) = mode_change(&self.launched, &wanted) else { return Err(self) };
        if key != self.key || fingerprint(&config) != self.fingerprint {
            return Err(self);
        }
        let warm = WarmStart { sent: self.key.initialize, received: self.received, mode };
        Ok(start_actor(config, self.link, Some(warm)))
    }

    /// Ends the CLI: closes its input, then signals it if it stays.
    pub async fn end(mut self) {
        self.link.process.shutdown(CLOSE_GRACE).await;
    }
}

/// The request id in an `initialize` line the core wrote.
fn request_id_of(line: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(line.trim_end()).ok()?;
    value.get("request_id")?.as_str().map(str::to_owned)
}

/// How one configuration of a pool stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WarmStatus {
    /// Its working directory.
    pub cwd: PathBuf,
    /// Its model (`None`: the CLI's default).
    pub model: Option<String>,
    /// How many CLIs it keeps warm.
    pub count: usize,
    /// How many are warm now.
    pub ready: usize,
    /// Whether one is starting.
    pub starting: bool,
    /// How many sessions took one.
    pub served: u64,
    /// Failed starts and idle deaths since one last served (the back-off grows with them).
    pub failures: u32,
    /// Why the last start failed or the last idle CLI died.
    pub last_error: Option<String>,
    /// The warm CLIs' process ids.
    pub pids: Vec<u32>,
}

/// CLIs kept warm for sessions to take; see the module's documentation. Cheap to clone.
#[derive(Clone)]
pub struct WarmPool {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for WarmPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WarmPool").field("status", &*self.shared.status.borrow()).finish()
    }
}

struct Shared {
    state: Mutex<State>,
    status: watch::Sender<Vec<WarmStatus>>,
    closed: watch::Sender<bool>,
    tasks: TaskTracker,
    runs: Option<RunObserver>,
}

/// Told of each warm CLI that starts (`true`) and each that ends unused (`false`).
pub type RunObserver = Arc<dyn Fn(&switchboard_transport::CliRun, bool) + Send + Sync>;

struct State {
    entries: Vec<Entry>,
    closed: bool,
    next_ticket: u64,
}

/// One configuration.
struct Entry {
    config: SessionConfig,
    key: WarmKey,
    launched: Option<PermissionMode>,
    /// The idle CLIs, oldest first: each a way to ask its watcher for it.
    ready: Vec<Ticket>,
    status: WarmStatus,
    wake: Arc<Notify>,
}

struct Ticket {
    id: u64,
    pid: u32,
    ask: oneshot::Sender<oneshot::Sender<WarmCli>>,
}

impl Default for WarmPool {
    fn default() -> Self {
        WarmPool::new()
    }
}

impl WarmPool {
    /// An empty pool.
    pub fn new() -> WarmPool {
        WarmPool::build(None)
    }

    /// An empty pool that tells `runs` of each CLI it starts and each it ends unused (so that
    /// a daemon killed with its warm CLIs can end what they left, as it does for sessions').
    pub fn with_runs(runs: RunObserver) -> WarmPool {
        WarmPool::build(Some(runs))
    }

    fn build(runs: Option<RunObserver>) -> WarmPool {
        let shared = Shared {
            state: Mutex::new(State { entries: Vec::new(), closed: false, next_ticket: 0 }),
            status: watch::channel(Vec::new()).0,
            closed: watch::channel(false).0,
            tasks: TaskTracker::new(),
            runs,
        };
        WarmPool { shared: Arc::new(shared) }
    }

    /// Keeps `count` CLIs warm for sessions on `config` (its permission mode included: leave it
    /// out to serve every mode but `bypassPermissions`).
    pub fn keep(&self, config: SessionConfig, count: usize) {
        let (key, launched) = key_of(&config);
        let status = WarmStatus {
            cwd: config.cli.cwd.clone(),
            model: config.cli.model.clone(),
            count,
            ready: 0,
            starting: false,
            served: 0,
            failures: 0,
            last_error: None,
            pids: Vec::new(),
        };
        let wake = Arc::new(Notify::new());
        let index = {
            let mut state = self.shared.state.lock();
            if state.closed {
                return;
            }
            state.entries.push(Entry { config, key, launched, ready: Vec::new(), status, wake });
            state.entries.len() - 1
        };
        self.shared.publish();
        self.shared.tasks.spawn(keep(self.shared.clone(), index));
    }

    /// A warm CLI that fits `config` ([`WarmCli::fits`]), if one is ready; the pool starts
    /// another in its place. One whose start files changed since is ended instead.
    pub async fn take(&self, config: &SessionConfig) -> Option<WarmCli> {
        let (key, wanted) = key_of(config);
        loop {
            let (index, ticket) = {
                let mut state = self.shared.state.lock();
                let (index, entry) = state.entries.iter_mut().enumerate().find(|(_, entry)| {
                    entry.key == key
                        && mode_change(&entry.launched, &wanted).is_ok()
                        && !entry.ready.is_empty()
                })?;
                let ticket = entry.ready.remove(0);
                entry.wake.notify_one();
                (index, ticket)
            };
            self.shared.publish();
            let (reply, cli) = oneshot::channel();
            if ticket.ask.send(reply).is_err() {
                continue;
            }
            let Ok(cli) = cli.await else { continue };
            if !cli.fits(config) {
                tracing::info!(
                    pid = cli.pid(),
                    "a warm CLI's settings changed since it started; ending it"
                );
                self.shared.note(index, |status| {
                    status.last_error = Some(
                        "a warm CLI was ended: files it read at its start (settings, CLAUDE.md, .mcp.json, the program) changed".into(),
                    );
                });
                self.shared.ended(cli).await;
                continue;
            }
            self.shared.note(index, |status| {
                status.served += 1;
                status.failures = 0;
            });
            return Some(cli);
        }
    }

    /// How each configuration stands.
    pub fn status(&self) -> Vec<WarmStatus> {
        self.shared.status.borrow().clone()
    }

    /// Follows [`WarmPool::status`].
    pub fn watch(&self) -> watch::Receiver<Vec<WarmStatus>> {
        self.shared.status.subscribe()
    }

    /// Ends every warm CLI and stops starting new ones; returns once they have exited (a start
    /// under way is killed).
    pub async fn close(&self) {
        self.close_now();
        self.shared.tasks.wait().await;
        self.shared.publish();
    }

    /// Begins [`WarmPool::close`] without waiting: for an owner going away without a word.
    pub fn close_now(&self) {
        {
            let mut state = self.shared.state.lock();
            state.closed = true;
            for entry in &mut state.entries {
                // Each watcher sees its ticket dropped and ends its CLI.
                entry.ready.clear();
            }
        }
        self.shared.closed.send_replace(true);
        self.shared.tasks.close();
    }
}

impl Shared {
    /// Ends a warm CLI that no session takes, and tells the run observer.
    async fn ended(&self, cli: WarmCli) {
        let run = cli.run().cloned();
        cli.end().await;
        if let (Some(runs), Some(run)) = (&self.runs, run) {
            runs(&run, false);
        }
    }

    fn publish(&self) {
        let mut state = self.state.lock();
        let list = state
            .entries
            .iter_mut()
            .map(|entry| {
                entry.status.ready = entry.ready.len();
                entry.status.pids = entry.ready.iter().map(|ticket| ticket.pid).collect();
                entry.status.clone()
            })
            .collect();
        drop(state);
        self.status.send_replace(list);
    }

    /// Changes entry `index`'s status.
    fn note(&self, index: usize, change: impl FnOnce(&mut WarmStatus)) {
        {
            let mut state = self.state.lock();
            if let Some(entry) = state.entries.get_mut(index) {
                change(&mut entry.status);
            }
        }
        self.publish();
    }
}

/// The wait before the next start after `failures` failures in a row.
fn backoff(failures: u32) -> Duration {
    if failures == 0 {
        return Duration::ZERO;
    }
    FIRST_BACKOFF.saturating_mul(1 << (failures - 1).min(16)).min(MAX_BACKOFF)
}

/// Keeps entry `index` at its count: one start at a time, backing off after failures.
async fn keep(shared: Arc<Shared>, index: usize) {
    let mut closed = shared.closed.subscribe();
    loop {
        let (config, wake, wait) = {
            let state = shared.state.lock();
            if state.closed {
                return;
            }
            let Some(entry) = state.entries.get(index) else { return };
            let need = entry.ready.len() < entry.status.count;
            let wait = need.then(|| backoff(entry.status.failures));
            (entry.config.clone(), entry.wake.clone(), wait)
        };
        let Some(wait) = wait else {
            tokio::select! {
                _ = wake.notified() => {}
                _ = closed.wait_for(|closed| *closed) => return,
            }
            continue;
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = closed.wait_for(|closed| *closed) => return,
        }
        shared.note(index, |status| status.starting = true);
        // Cancelled by a close, the start drops its CLI, which kills it.
        let started = tokio::select! {
            started = WarmCli::start(&config) => started,
            _ = closed.wait_for(|closed| *closed) => return,
        };
        match started {
            Ok(cli) => {
                if let (Some(runs), Some(run)) = (&shared.runs, cli.run()) {
                    runs(run, true);
                }
                let (ask, asked) = oneshot::channel();
                let pid = cli.pid().unwrap_or_default();
                let refused = {
                    let mut state = shared.state.lock();
                    if state.closed {
                        Some(cli)
                    } else {
                        state.next_ticket += 1;
                        let id = state.next_ticket;
                        if let Some(entry) = state.entries.get_mut(index) {
                            entry.status.starting = false;
                            entry.ready.push(Ticket { id, pid, ask });
                        }
                        shared.tasks.spawn(watch_idle(shared.clone(), index, id, cli, asked));
                        None
                    }
                };
                if let Some(cli) = refused {
                    shared.ended(cli).await;
                    return;
                }
                shared.publish();
            }
            Err(error) => {
                tracing::warn!(cwd = %config.cli.cwd.display(), %error, "a warm CLI failed to start");
                shared.note(index, |status| {
                    status.starting = false;
                    status.failures += 1;
                    status.last_error = Some(format!("a warm CLI failed to start: {error}"));
                });
            }
        }
    }
}

/// Holds an idle warm CLI until a session asks for it (through its ticket), the pool closes
/// (the ticket is dropped), it has waited [`MAX_IDLE`], or it dies or misbehaves (its ticket is
/// withdrawn).
async fn watch_idle(
    shared: Arc<Shared>,
    index: usize,
    ticket: u64,
    mut cli: WarmCli,
    mut asked: oneshot::Receiver<oneshot::Sender<WarmCli>>,
) {
    let stale = tokio::time::sleep_until((cli.ready_at + MAX_IDLE).into());
    tokio::pin!(stale);
    let why = loop {
        tokio::select! {
            biased;
            asked = &mut asked => {
                match asked {
                    Ok(reply) => {
                        if let Err(cli) = reply.send(cli) {
                            shared.ended(cli).await;
                        }
                    }
                    Err(_) => shared.ended(cli).await,
                }
                return;
            }
            event = cli.link.events.recv() => match event {
                None => break Some("its output ended while it was idle".to_owned()),
                Some(TransportEvent::Exited(exit)) => {
                    break Some(format!("a warm CLI {} while it was idle", exit.describe()));
                }
                Some(event) => {
                    cli.received.push(event);
                    if cli.received.len() > MAX_IDLE_EVENTS {
                        break Some(format!(
                            "a warm CLI wrote more than {MAX_IDLE_EVENTS} lines while idle, so it was ended"
                        ));
                    }
                }
            },
            () = &mut stale => break None,
        }
    };
    // Withdrawn first: a take that asks meanwhile gets no answer and tries the next one.
    drop(asked);
    let healthy = cli.ready_at.elapsed() >= HEALTHY_AFTER;
    if let Some(why) = &why {
        tracing::warn!(pid = cli.pid(), %why, "a warm CLI is gone");
    }
    let wake = {
        let mut state = shared.state.lock();
        state.entries.get_mut(index).map(|entry| {
            entry.ready.retain(|held| held.id != ticket);
            if let Some(why) = why {
                // A CLI that waited a good while was healthy: its death starts no back-off.
                entry.status.failures = if healthy { 0 } else { entry.status.failures + 1 };
                entry.status.last_error = Some(why);
            }
            entry.wake.clone()
        })
    };
    shared.publish();
    if let Some(wake) = wake {
        wake.notify_one();
    }
    shared.ended(cli).await;
}

#[cfg(test)]
mod tests {
    use super::{mode_change, PermissionMode};

    #[test]
    fn a_warm_cli_is_set_to_the_mode_wanted_but_never_into_or_out_of_bypass() {
        use PermissionMode::{AcceptEdits, BypassPermissions, Default, Plan};
        let change = |launched: Option<PermissionMode>, wanted: Option<PermissionMode>| {
            mode_change(&launched, &wanted)
        };
        assert_eq!(change(None, None), Ok(None));
        assert_eq!(change(Some(Default), Some(Default)), Ok(None));
        assert_eq!(change(None, Some(Plan)), Ok(Some(Plan)));
        // The daemon pins `default`: a CLI launched so serves a session in another mode.
        assert_eq!(change(Some(Default), Some(AcceptEdits)), Ok(Some(AcceptEdits)));
        assert_eq!(change(Some(BypassPermissions), Some(BypassPermissions)), Ok(None));
        assert_eq!(change(Some(Default), Some(BypassPermissions)), Err(()));
        assert_eq!(change(None, Some(BypassPermissions)), Err(()));
        assert_eq!(change(Some(BypassPermissions), Some(Default)), Err(()));
        // Never back to "whatever the settings say".
        assert_eq!(change(Some(Default), None), Err(()));
    }
}
