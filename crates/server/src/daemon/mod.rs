//! The daemon's sessions: starting and resuming them, pumping their events into the store and
//! out to subscribers, and the session records as projections of those events.
//!
//! For each live session a pump, called in the session actor's own task (an [`EventSink`]),
//! takes the session's events in order, gives each the next sequence number, appends them to
//! the store in batches, and only then publishes them.
//! [`Daemon::subscribe`] reads history from the store and then follows the live tail, so a
//! subscriber sees every event exactly once, in order, however it joins or falls behind.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use switchboard_protocol::PermissionMode;
use switchboard_session::{
    EventSink, LineDirection, PendingPermission, Policy, SessionConfig, SessionEvent,
    SessionEvents, SessionHandle, SessionState, SinkFuture, WarmCli, WarmPool, WarmStatus,
};
use switchboard_store::{now_ms, Claim, EventRecord, SessionRecord, Store, StoreError};
use tokio::sync::{broadcast, mpsc, watch, Notify};

use crate::text::invisible;

mod error;
mod launch;
mod live;
mod notices;
mod pump;
mod record;
mod subscription;

pub use error::*;
pub use launch::*;
pub use live::*;
use notices::*;
use pump::*;
pub use record::*;
pub use subscription::*;

/// Live events kept per session for subscribers that fall behind; past that they are told they
/// lagged and catch up from the store. Allocated when the first subscriber arrives.
pub const LIVE_BUFFER: usize = 2048;

/// Events a subscriber reads from the store per query while catching up.
pub const HISTORY_PAGE: usize = 1000;

/// Session-level changes kept for `/api/events` dashboards that fall behind.
pub const DASHBOARD_BUFFER: usize = 1024;

/// Relay lines a `/ws` frontend may have yet to take; past that the relay's CLIs wait for it
/// (a frontend never skips a line).
pub const RELAY_BUFFER: usize = 1024;

/// The most paths a rewind's dry run lists (its count is whole).
const MAX_REWIND_PATHS: usize = 1000;

/// What a rewind did, or would do ([`Daemon::rewind`]).
#[derive(Debug, Clone, Serialize)]
pub struct Rewind {
    /// The CLI can put the files back (a rewind: it did).
    pub can_rewind: bool,
    /// Only asked what would change.
    pub dry_run: bool,
    /// A dry run: how many files would change.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub files_changed: Option<u64>,
    /// A dry run: which (absolute paths, at most [`MAX_REWIND_PATHS`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub files: Option<Vec<String>>,
    /// A dry run: lines that would come back.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub insertions: Option<u64>,
    /// A dry run: lines that would go.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deletions: Option<u64>,
    /// Why not, in the CLI's words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// How long reading a session's directory for the Files view may take.
pub const BROWSE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a follower's socket (a relay frontend, a session's subscriber, a dashboard, a gRPC
/// stream) may refuse what it is sent before it is dropped: the relay's CLIs wait for their
/// slowest frontend (none loses a line), and a subscriber that stopped reading must not hold
/// the daemon's memory or its CLIs for good (a dropped subscriber resumes where it was with
/// `after`).
pub const STALL_LIMIT: Duration = Duration::from_secs(10);

/// How often a CLI's WebSocket is pinged (the CLI pings every 10 s itself).
pub const PING_INTERVAL: Duration = Duration::from_secs(15);

/// How long a graceful stop waits per step.
pub const STOP_GRACE: Duration = Duration::from_secs(5);

/// How long the pump retries events the store refuses (a full disk, say) before it stops the
/// session; meanwhile the CLI is held back (nothing more is read from it), so memory stays
/// bounded. Retries come after 50 ms, doubling to at most 2 s.
pub const STORE_RETRY_LIMIT: Duration = Duration::from_secs(60);

/// The daemon: the store, the sessions, and the dashboard feed.
pub struct Daemon {
    store: Arc<dyn Store>,
    config: DaemonConfig,
    sessions: Mutex<HashMap<String, Arc<LiveSession>>>,
    dashboard: broadcast::Sender<Value>,
    /// Woken whenever a session (re)starts, for subscribers waiting on a stopped one.
    started: Notify,
    /// The version of the CLI this node runs by default, once known (told to the other
    /// nodes in its heartbeat).
    cli_version: std::sync::OnceLock<String>,
    /// Claude Code's own transcripts.
    transcripts: crate::transcripts::Transcripts,
    /// Where `--sdk-url` CLIs connect, by slot id.
    ingress: Arc<Mutex<HashMap<String, Arc<switchboard_transport::sdk_url::IngressSlot>>>>,
    /// Seed 003's relay: raw lines of relay-connected CLIs and status lines, for `/ws`.
    /// Relay lines as WebSocket text, shared by every frontend (a clone is a reference count).
    relay: async_broadcast::Sender<axum::extract::ws::Utf8Bytes>,
    /// Keeps the relay feed open while no frontend listens (lines then go nowhere).
    relay_frontends: async_broadcast::InactiveReceiver<axum::extract::ws::Utf8Bytes>,
    /// The relay session frontends' messages go to (the most recently connected CLI).
    relay_current: Mutex<Option<String>>,
    /// The CLIs running now, by run id (kept in [`DaemonConfig::runs_file`]).
    runs: Mutex<HashMap<String, switchboard_transport::CliRun>>,
    /// Serving, draining, closed.
    phase: watch::Sender<Phase>,
    /// One writer of the runs file at a time (each write is a snapshot, then a rename).
    runs_file_lock: tokio::sync::Mutex<()>,
    /// Held by whoever reads a record, awaits, and writes it back whole (a resume, a rotation)
    /// and by a person's rename or archive, so that neither undoes the other.
    record_writes: tokio::sync::Mutex<()>,
    /// Sessions whose changed record waits to be written (see [`write_records`]).
    record_queue: mpsc::UnboundedSender<Arc<LiveSession>>,
    /// CLIs started ahead of their sessions ([`DaemonConfig::warm`]).
    warm: WarmPool,
    /// What signs approval links ([`DaemonConfig::links`], or a key for this run).
    link_key: crate::links::LinkKey,
    /// Queues notifications ([`DaemonConfig::notify`]), keeps push subscriptions.
    notifier: crate::notify::Notifier,
    /// Dropped with the daemon: the notification senders end.
    _notifying: watch::Sender<bool>,
    /// Daily budgets and today's spend ([`DaemonConfig::budget`]).
    budgets: crate::budget::Budgets,
    /// One commit, merge, discard or worktree removal at a time (two merges into one branch
    /// would each pass the other's conflict check).
    worktree_ops: tokio::sync::Mutex<()>,
    /// The places and the byte budget of the clients that follow sessions and dashboards.
    watchers: Arc<crate::watchers::Watchers>,
    /// Sessions between their admission ([`Daemon::admit_run`]) and their start, when
    /// [`Daemon::running_count`] counts them.
    starting: Arc<std::sync::atomic::AtomicUsize>,
    /// Recent permission decisions by request id (for one-tap links' pages).
    decisions: crate::decisions::Decisions,
    /// Who holds the daemon's connections, on every port it serves ([`crate::peers`]).
    peers: std::sync::OnceLock<Arc<crate::peers::Peers>>,
    /// When the relay's last new sessions were made ([`crate::relay_limits::RELAY_NEW_SESSIONS_PER_MINUTE`]).
    relay_births: Mutex<crate::relay_limits::Window>,
}

impl std::fmt::Debug for Daemon {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Daemon").field("store", &self.store).finish()
    }
}

impl Daemon {
    /// A daemon over `store`. Sessions the store shows as running were cut off when the
    /// daemon last stopped: they are marked exited (and can be resumed).
    pub async fn open(
        store: Arc<dyn Store>,
        config: DaemonConfig,
    ) -> Result<Arc<Daemon>, DaemonError> {
        let (dashboard, _) = broadcast::channel(DASHBOARD_BUFFER);
        let (mut relay, relay_frontends) = async_broadcast::broadcast(RELAY_BUFFER);
        relay.set_await_active(false);
        let transcripts =
            config.transcripts.clone().unwrap_or_else(crate::transcripts::Transcripts::from_env);
        let (record_queue, records) = mpsc::unbounded_channel();
        let warm_total: usize = config.warm.iter().map(|spec| spec.count).sum();
        let max_running = config.placement.max_running();
        if max_running == 0 {
            return Err(DaemonError::Invalid("max_running is at least 1".into()));
        }
        if warm_total > max_running {
            return Err(DaemonError::Invalid(format!(
                "{warm_total} warm CLIs asked for, more than the {max_running} sessions this daemon runs at once (serve --max-running)"
            )));
        }
        if warm_total > MAX_WARM_CLIS {
            return Err(DaemonError::Invalid(format!(
                "{warm_total} warm CLIs asked for; at most {MAX_WARM_CLIS} (each idle CLI holds about 200 MiB)"
            )));
        }
        let link_key = config.links.key.clone().unwrap_or_default();
        config.notify.check().map_err(DaemonError::Invalid)?;
        let (notifying, notifying_watch) = watch::channel(false);
        let notifier = crate::notify::Notifier::start(
            &config.notify,
            store.clone(),
            notifying_watch,
            config.links.public_url.as_deref(),
        )
        .map_err(DaemonError::Invalid)?;
        if let Some(daily) = config.budget.daily_usd {
            crate::budget::check_limit("the daily budget", daily).map_err(DaemonError::Invalid)?;
        }
        let budgets = match &config.budget.file {
            Some(file) => crate::budget::Budgets::load(file.clone(), config.budget.daily_usd)
                .map_err(DaemonError::Invalid)?,
            None => crate::budget::Budgets::in_memory(config.budget.daily_usd),
        };
        let daemon = Arc::new_cyclic(|me: &std::sync::Weak<Daemon>| Daemon {
            worktree_ops: tokio::sync::Mutex::new(()),
            watchers: Arc::default(),
            starting: Arc::default(),
            decisions: crate::decisions::Decisions::default(),
            peers: std::sync::OnceLock::new(),
            relay_births: Mutex::new(crate::relay_limits::Window::new(Duration::from_secs(60))),
            budgets,
            link_key,
            notifier,
            _notifying: notifying,
            store,
            config,
            sessions: Mutex::new(HashMap::new()),
            dashboard,
            started: Notify::new(),
            cli_version: std::sync::OnceLock::new(),
            transcripts,
            ingress: Arc::new(Mutex::new(HashMap::new())),
            relay,
            relay_frontends: relay_frontends.deactivate(),
            relay_current: Mutex::new(None),
            runs: Mutex::new(HashMap::new()),
            phase: watch::channel(Phase::Serving).0,
            runs_file_lock: tokio::sync::Mutex::new(()),
            record_writes: tokio::sync::Mutex::new(()),
            record_queue,
            warm: WarmPool::with_runs({
                let me = me.clone();
                Arc::new(move |run: &switchboard_transport::CliRun, running: bool| {
                    let (me, run) = (me.clone(), run.clone());
                    tokio::spawn(async move {
                        if let Some(daemon) = me.upgrade() {
                            daemon.record_run(&run, running).await;
                        }
                    });
                })
            }),
        });
        if let Some(policy) = &daemon.config.default_policy {
            daemon
                .check_route(&policy.notify)
                .map_err(|error| DaemonError::Invalid(format!("the daemon's policy: {error}")))?;
        }
        tokio::spawn(write_records(Arc::downgrade(&daemon), records));
        if let (Some(bus), Some(node)) = (&daemon.config.bus, &daemon.config.node) {
            share_changes(&daemon, bus).await?;
            // Its CLI's version, as a session here would run it.
            let me = Arc::downgrade(&daemon);
            tokio::spawn(async move {
                let Some(options) = me.upgrade().map(|daemon| daemon.node_cli()) else { return };
                let asked = ask_cli_version(&options, Duration::from_secs(30)).await;
                if let (Some(version), Some(daemon)) = (asked, me.upgrade()) {
                    let _ = daemon.cli_version.set(version);
                }
            });
            let (me, node) = (Arc::downgrade(&daemon), node.clone());
            let started_ms = now_ms();
            // The dashboards hear when a node is lost or back (its sessions' `node_lost`).
            let lost = Mutex::new(Vec::new());
            bus.beat(move || {
                let daemon = me.upgrade()?;
                let now_lost: Vec<String> = daemon
                    .config
                    .bus
                    .as_ref()?
                    .nodes()
                    .into_iter()
                    .filter(|status| status.lost)
                    .map(|status| status.info.node)
                    .collect();
                let changed = lost.lock().map(|mut lost| {
                    let changed = *lost != now_lost;
                    *lost = now_lost.clone();
                    changed
                });
                if changed.unwrap_or(false) {
                    let _ =
                        daemon.dashboard.send(json!({"event": "nodes_changed", "lost": now_lost}));
                }
                Some(crate::bus::NodeInfo {
                    node: node.clone(),
                    url: daemon.config.links.public_url.clone(),
                    running: daemon.running_count(),
                    version: env!("CARGO_PKG_VERSION").to_owned(),
                    started_ms,
                    roots: daemon
                        .config
                        .placement
                        .roots
                        .iter()
                        .map(|root| root.display().to_string())
                        .collect(),
                    capacity: daemon.config.placement.capacity(),
                    cli_version: daemon.cli_version.get().cloned(),
                })
            });
        }
        daemon.end_leftovers().await;
        for mut record in daemon.store.list_sessions().await? {
            // Another node's sessions are that node's to end (several daemons on one
            // database).
            if matches!(record.state.as_str(), "exited" | "crashed")
                || record.node != daemon.config.node
            {
                continue;
            }
            // The record first: if another node took the session over meanwhile (this one
            // was lost), it is that node's now, and nothing of it is written here.
            // The log's end before the record: a note that races a takeover is then refused.
            let last = daemon.store.last_seq(&record.id).await?;
            record.state = "exited".into();
            record.updated_ms = now_ms();
            match daemon.store.update_session(&record).await {
                Ok(()) => {}
                Err(StoreError::Moved { id, node }) => {
                    tracing::info!(session = %id, ?node, "taken over by another node while this one was away");
                    continue;
                }
                Err(error) => return Err(error.into()),
            }
            let payload = json!({
                "event": "exited", "code": null, "signal": null, "requested": false,
                "description": "the daemon stopped while this session ran; resume it to continue",
            });
            let note =
                event_record(&record.id, last + 1, "switchboard", "exited", payload.to_string());
            match daemon.store.append(&[note]).await {
                // Another node appended first (it took the session over just now): its log.
                Ok(()) | Err(StoreError::OutOfSequence { .. }) => {}
                Err(error) => return Err(error.into()),
            }
        }
        // Last: a daemon that failed to open starts no CLI.
        let mut configs = Vec::new();
        for spec in &daemon.config.warm {
            let launch =
                Launch { cwd: spec.cwd.clone(), model: spec.model.clone(), ..Launch::default() };
            let (config, _) =
                daemon.session_config(&launch, None, false, None).await.map_err(|error| {
                    DaemonError::Invalid(format!("warm CLIs for {}: {error}", spec.cwd.display()))
                })?;
            configs.push((config, spec.count));
        }
        for (config, count) in configs {
            daemon.warm.keep(config, count);
        }
        Ok(daemon)
    }

    /// Ends the CLIs (and their tools) that a previous daemon on this data directory recorded
    /// as running: it was killed before it could end them.
    async fn end_leftovers(&self) {
        let Some(path) = self.config.runs_file.clone() else { return };
        // Only a record this user wrote, that nobody else could have changed: it names
        // processes to kill.
        let trusted = tokio::fs::symlink_metadata(&path).await.is_ok_and(|metadata| {
            use std::os::unix::fs::MetadataExt;
            metadata.is_file()
                && metadata.uid() == nix::unistd::geteuid().as_raw()
                && metadata.mode() & 0o022 == 0
        });
        if !trusted {
            if tokio::fs::symlink_metadata(&path).await.is_ok() {
                tracing::warn!(path = %path.display(), "ignoring a record of running CLIs that is not this user's own private file");
            }
            self.save_runs().await;
            return;
        }
        let Ok(text) = tokio::fs::read_to_string(&path).await else { return };
        let runs: Vec<switchboard_transport::CliRun> = match serde_json::from_str(&text) {
            Ok(runs) => runs,
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "cannot read the record of running CLIs");
                Vec::new()
            }
        };
        if !runs.is_empty() {
            let ended = tokio::task::spawn_blocking(move || {
                runs.iter()
                    .map(|run| {
                        switchboard_transport::procs::end_leftover(
                            run.pid,
                            run.start_time,
                            &run.run_id,
                        )
                    })
                    .sum::<usize>()
            })
            .await
            .unwrap_or(0);
            if ended > 0 {
                tracing::warn!(ended, "ended processes a previous daemon left running");
            }
        }
        self.save_runs().await;
    }

    /// Notes a CLI (or a shell: [`crate::shell`]) that runs now (or, with `running` false,
    /// that it ended) in the runs file, so that a successor ends what it leaves.
    pub(crate) async fn record_run(&self, run: &switchboard_transport::CliRun, running: bool) {
        if let Ok(mut runs) = self.runs.lock() {
            if running {
                runs.insert(run.run_id.clone(), run.clone());
            } else {
                runs.remove(&run.run_id);
            }
        }
        self.save_runs().await;
    }

    async fn save_runs(&self) {
        let Some(path) = &self.config.runs_file else { return };
        // The snapshot and its write in one turn: an older snapshot never lands after a newer.
        let _turn = self.runs_file_lock.lock().await;
        let runs: Vec<switchboard_transport::CliRun> =
            self.runs.lock().map(|runs| runs.values().cloned().collect()).unwrap_or_default();
        let text = serde_json::to_string(&runs).unwrap_or_else(|_| "[]".into());
        // Written whole, then renamed over the old one: a crash leaves one or the other.
        let temporary = path.with_extension("tmp");
        let written = async {
            let mut file = tokio::fs::OpenOptions::new()
                .create(true)
                .write(true)
                .truncate(true)
                .mode(0o600)
                .open(&temporary)
                .await?;
            tokio::io::AsyncWriteExt::write_all(&mut file, text.as_bytes()).await?;
            drop(file);
            tokio::fs::rename(&temporary, path).await
        };
        if let Err(error) = written.await {
            tracing::warn!(path = %path.display(), %error, "cannot record the running CLIs");
        }
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// A session for a CLI that connected on its own (seed 003's relay endpoint): no process is
    /// started; the session ends when its socket closes. Returns its record and the slot the
    /// connection must use.
    pub async fn attach_external(
        self: &Arc<Self>,
    ) -> Result<(SessionRecord, Arc<switchboard_transport::sdk_url::IngressSlot>), DaemonError>
    {
        self.check_serving()?;
        let _admitted = self.admit_run()?;
        self.relay_may_make_session().map_err(DaemonError::Busy)?;
        let id = uuid::Uuid::new_v4().to_string();
        let now = now_ms();
        let record = SessionRecord {
            archived: false,
            node: self.config.node.clone(),
            id: id.clone(),
            claude_session_id: None,
            cwd: String::new(),
            model: None,
            permission_mode: None,
            state: "starting".into(),
            title: Some("external CLI (relay)".into()),
            cost_usd: 0.0,
            created_ms: now,
            updated_ms: now,
            config: json!({"transport": "relay"}),
        };
        let policy = self.config.default_policy.clone().unwrap_or_default();
        let config_policy = policy.clone();
        // Where the CLI runs is not known yet: the session learns it from the CLI's lines
        // (its rules are resolved against that, not against the daemon's own cwd).
        let config = SessionConfig::new(PathBuf::new(), policy);
        let (link, slot) = switchboard_transport::sdk_url::external(&id);
        let (handle, events) = switchboard_session::spawn_session_on(config, link);
        self.store.create_session(&record).await?;
        let route = self.known_route(route_of(&config_policy, &record));
        self.run(record.clone(), handle, events, 0, None, route).await?;
        let _ = self
            .dashboard
            .send(json!({"event": "session_created", "session": public_record(record.clone())}));
        Ok((record, slot))
    }

    /// A session for an interactive CLI in a person's terminal (`switchboard claude`): its
    /// history is the CLI's transcript, which the terminal hands in line by line through the
    /// returned [`TranscriptIn`](switchboard_transport::terminal::TranscriptIn), and what the session sends goes back to the terminal as keys. The
    /// session ends when the terminal says the CLI exited, or goes away.
    pub async fn attach_terminal(
        self: &Arc<Self>,
        hello: TerminalHello,
    ) -> Result<
        (
            SessionRecord,
            switchboard_transport::terminal::TranscriptIn,
            switchboard_transport::terminal::KeysOut,
            watch::Receiver<switchboard_session::SessionSnapshot>,
        ),
        DaemonError,
    > {
        self.check_serving()?;
        if hello.cwd.as_os_str().len() > 4096
            || hello.cli_version.as_ref().is_some_and(|version| version.len() > 64)
        {
            return Err(DaemonError::Invalid(
                "cwd is at most 4096 bytes and cli_version at most 64".into(),
            ));
        }
        if !hello.cwd.is_absolute() {
            return Err(DaemonError::Invalid(format!(
                "cwd must be an absolute path, not {:?}",
                hello.cwd
            )));
        }
        if let Some(claude) = &hello.claude_session_id {
            if claude.is_empty()
                || claude.len() > 128
                || !claude.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            {
                return Err(DaemonError::Invalid(
                    "claude_session_id must be a Claude session id (letters, digits, - and _)"
                        .into(),
                ));
            }
        }
        let id = uuid::Uuid::new_v4().to_string();
        let now = now_ms();
        let record = SessionRecord {
            archived: false,
            node: self.config.node.clone(),
            id: id.clone(),
            claude_session_id: hello.claude_session_id.clone(),
            cwd: hello.cwd.display().to_string(),
            model: None,
            permission_mode: None,
            state: "starting".into(),
            title: None,
            cost_usd: 0.0,
            created_ms: now,
            updated_ms: now,
            config: json!({"transport": "terminal", "cli_version": hello.cli_version}),
        };
        let mut config = SessionConfig::new(hello.cwd.clone(), Policy::default());
        config.transcript = true;
        let (link, lines, keys) = switchboard_transport::terminal::attached();
        let (handle, events) = switchboard_session::spawn_session_on(config, link);
        let snapshot = handle.watch();
        self.store.create_session(&record).await?;
        self.note_started(&id, 0, false, false, true).await?;
        self.run(record.clone(), handle, events, 1, None, Default::default()).await?;
        let _ = self
            .dashboard
            .send(json!({"event": "session_created", "session": public_record(record.clone())}));
        Ok((record, lines, keys, snapshot))
    }

    /// Sends a person's message to a running session, on whichever node runs it. One typed
    /// into a terminal ([`Daemon::attach_terminal`]) must be text a terminal can take, and is
    /// refused here, with the reason, if not.
    pub async fn send_message(
        &self,
        id: &str,
        message: switchboard_protocol::UserMessage,
        by: &str,
    ) -> Result<(), DaemonError> {
        self.command(id, SessionCommand::Message { message, by: by.to_owned() }).await
    }

    /// Answers a permission request of a running session, on whichever node runs it.
    pub async fn respond_permission(
        &self,
        id: &str,
        request_id: &str,
        answer: switchboard_session::PermissionAnswer,
        by: &str,
    ) -> Result<(), DaemonError> {
        let command =
            SessionCommand::Answer { request_id: request_id.to_owned(), answer, by: by.to_owned() };
        self.command(id, command).await
    }

    /// Interrupts a running session's turn, on whichever node runs it.
    pub async fn interrupt(&self, id: &str) -> Result<(), DaemonError> {
        self.command(id, SessionCommand::Interrupt).await
    }

    /// Switches a running session's model, on whichever node runs it.
    pub async fn set_model(&self, id: &str, model: &str) -> Result<(), DaemonError> {
        self.command(id, SessionCommand::SetModel { model: model.to_owned() }).await
    }

    /// Switches a running session's permission mode, on whichever node runs it.
    pub async fn set_permission_mode(
        &self,
        id: &str,
        mode: PermissionMode,
    ) -> Result<(), DaemonError> {
        self.command(id, SessionCommand::SetMode { mode }).await
    }

    /// Whether a relay CLI may make one more session now (a connection, or a rotation to a
    /// Claude session its connection has not had): at most
    /// [`crate::relay_limits::RELAY_NEW_SESSIONS_PER_MINUTE`], daemon-wide.
    fn relay_may_make_session(&self) -> Result<(), String> {
        let most = self
            .config
            .placement
            .relay_sessions_per_minute
            .unwrap_or(crate::relay_limits::RELAY_NEW_SESSIONS_PER_MINUTE);
        let mut births =
            self.relay_births.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if births.take(most) {
            Ok(())
        } else {
            Err(format!(
                "relay CLIs made {most} sessions in the last minute (RELAY_NEW_SESSIONS_PER_MINUTE); try again later"
            ))
        }
    }

    /// Admits one more running session under [`Placement::max_running`]: held until the
    /// session has started (it is then counted as running) or failed to.
    fn admit_run(&self) -> Result<Admitted, DaemonError> {
        use std::sync::atomic::Ordering;
        let max = self.config.placement.max_running();
        let starting = self.starting.fetch_add(1, Ordering::SeqCst);
        let admitted = Admitted(self.starting.clone());
        let running = self.running_count() + starting;
        if running >= max {
            return Err(DaemonError::MaxRunning { running, max });
        }
        Ok(admitted)
    }

    /// How many sessions' CLIs run here now.
    pub fn running_count(&self) -> usize {
        self.sessions
            .lock()
            .map(|sessions| sessions.values().filter(|live| live.handle().is_some()).count())
            .unwrap_or(0)
    }

    /// Whether the node that runs the session is lost (no heartbeat for a while, see
    /// [`crate::bus`]): the session no longer runs anywhere, and any node may resume it.
    pub fn node_lost(&self, record: &SessionRecord) -> bool {
        self.runs_elsewhere(record)
            && !matches!(record.state.as_str(), "exited" | "crashed")
            && record
                .node
                .as_deref()
                .is_some_and(|node| self.config.bus.as_ref().is_some_and(|bus| bus.is_lost(node)))
    }

    /// The bus between daemons, if this one has one.
    pub fn bus(&self) -> Option<&Arc<crate::bus::Bus>> {
        self.config.bus.as_ref()
    }

    /// Whether the session runs (or ran last) on another node this one reaches over the bus.
    pub fn runs_elsewhere(&self, record: &SessionRecord) -> bool {
        self.config.bus.is_some() && record.node.is_some() && record.node != self.config.node
    }

    /// Where a new session runs, when that is another node (`None`: here). The node the
    /// request names; else the least loaded node (sessions running against its capacity)
    /// that is not lost, has room, whose roots hold the session's directory, and whose CLI
    /// is the version the request asks for, this one counted when it has the directory
    /// (within its roots, if it has any), room and the version (or has not told it yet, and
    /// no other node is known to run it); on a tie, here. When none has room (capacity only
    /// steers): here if it can run it, else the least loaded node that can. A version no node
    /// runs is refused; this node's own is checked when it runs the session.
    fn place(&self, request: &CreateSession) -> Result<Option<String>, DaemonError> {
        let here = self.config.node.as_deref();
        let wanted = request.cli_version.as_deref();
        let runs =
            |version: Option<&String>| wanted.is_none_or(|w| version.is_some_and(|v| v == w));
        let Some(bus) = &self.config.bus else {
            return match &request.node {
                Some(node) if Some(node.as_str()) != here => Err(DaemonError::Invalid(format!(
                    "node {node}: this daemon shares no bus with other nodes (serve --nats-url)"
                ))),
                _ => Ok(None),
            };
        };
        let nodes = bus.nodes();
        if let Some(node) = &request.node {
            if Some(node.as_str()) == here {
                return Ok(None);
            }
            return match nodes.iter().find(|status| status.info.node == *node) {
                Some(status) if status.lost => {
                    Err(DaemonError::Busy(format!("node {node} is lost")))
                }
                Some(status) => match (&status.info.cli_version, wanted) {
                    (_, None) => Ok(Some(node.clone())),
                    (Some(version), Some(wanted)) if version == wanted => Ok(Some(node.clone())),
                    (Some(version), Some(wanted)) => Err(DaemonError::Invalid(format!(
                        "node {node} runs Claude Code {version}, not {wanted}"
                    ))),
                    (None, Some(_)) => Err(DaemonError::Busy(format!(
                        "node {node} has not said which Claude Code it runs yet; try again"
                    ))),
                },
                None => Err(DaemonError::Invalid(format!(
                    "no node {node} on the bus (GET /api/nodes lists them)"
                ))),
            };
        }
        let load = |running: usize, capacity: usize| running as f64 / capacity.max(1) as f64;
        let placement = &self.config.placement;
        let capacity = placement.capacity();
        let running = self.running_count();
        // Other nodes that could run it: (load, name, has room).
        let others: Vec<(f64, &str, bool)> = nodes
            .iter()
            .filter(|status| !status.this && !status.lost)
            .map(|status| &status.info)
            .filter(|info| {
                let roots: Vec<PathBuf> = info.roots.iter().map(PathBuf::from).collect();
                within(&request.cwd, &roots) && runs(info.cli_version.as_ref())
            })
            .map(|info| {
                (
                    load(info.running, info.capacity),
                    info.node.as_str(),
                    info.running < info.capacity,
                )
            })
            .collect();
        // This node's CLI, while it has not told its version yet, is a candidate only when no
        // other node is known to run the version asked (its check then tells).
        let runs_here = match self.cli_version.get() {
            Some(version) => runs(Some(version)),
            None => wanted.is_none() || others.is_empty(),
        };
        let can_here = request.cwd.is_dir()
            && (placement.roots.is_empty() || within(&request.cwd, &placement.roots))
            && runs_here;
        let room_here = running < capacity;
        let least = |with_room: bool| {
            others
                .iter()
                .filter(|(_, _, room)| *room || !with_room)
                .min_by(|a, b| a.0.total_cmp(&b.0))
                .map(|(load, node, _)| (*load, node.to_string()))
        };
        match least(true) {
            Some((theirs, node))
                if !(can_here && room_here) || theirs < load(running, capacity) =>
            {
                Ok(Some(node))
            }
            Some(_) => Ok(None),
            // Nobody has room: capacity steers, it does not refuse.
            None if can_here => Ok(None),
            None => {
                match (least(false), wanted) {
                    (Some((_, node)), _) => Ok(Some(node)),
                    // Here, whose create says what is wrong with the directory.
                    (None, None) => Ok(None),
                    (None, Some(wanted)) => {
                        let anywhere = self.cli_version.get().is_some_and(|v| v == wanted)
                            || nodes.iter().any(|status| {
                                !status.this
                                    && !status.lost
                                    && runs(status.info.cli_version.as_ref())
                            });
                        Err(DaemonError::Invalid(if anywhere {
                            format!(
                            "no node that runs Claude Code {wanted} has {} within its roots (GET /api/nodes says each node's CLI and roots)",
                            request.cwd.display()
                        )
                        } else {
                            format!("no node runs Claude Code {wanted} (GET /api/nodes says each node's)")
                        }))
                    }
                }
            }
        }
    }

    /// Creates the session on node `node`, over the bus.
    async fn create_on(
        &self,
        node: &str,
        mut request: CreateSession,
    ) -> Result<SessionRecord, DaemonError> {
        // Named, so that the node it reaches runs it and places nothing further.
        request.node = Some(node.to_owned());
        let by = request.started_by.take().map(|by| match &self.config.node {
            Some(here) => via(&by, here),
            None => by,
        });
        let answer = self.forward(node, "", &SessionCommand::Create { request, by }).await?;
        serde_json::from_value(answer).map_err(|error| {
            DaemonError::Internal(format!("node {node} answered a create unreadably: {error}"))
        })
    }

    /// Sends `command` to `node` over the bus; its answer, or its refusal as this node's.
    async fn forward(
        &self,
        node: &str,
        id: &str,
        command: &SessionCommand,
    ) -> Result<Value, DaemonError> {
        let Some(bus) = &self.config.bus else {
            return Err(DaemonError::Internal("no bus to forward on".into()));
        };
        let command = serde_json::to_value(command)
            .map_err(|error| DaemonError::Internal(format!("a command to forward: {error}")))?;
        match bus.forward(node, id, command).await {
            Ok(answer) => Ok(answer),
            Err(crate::bus::ForwardError::Refused { status, code, message }) => {
                Err(DaemonError::Forwarded { status, code, message })
            }
            Err(crate::bus::ForwardError::Unreachable(message)) => Err(DaemonError::Busy(message)),
        }
    }

    /// The bus and the node that runs session `id`, when that is another node.
    async fn remote_owner(&self, id: &str) -> Result<Option<String>, DaemonError> {
        if self.config.bus.is_none() {
            return Ok(None);
        }
        if self.handle(id).is_ok() {
            return Ok(None);
        }
        // A session that ended is nobody's to act on: `not_running` here, as anywhere.
        let record = self
            .store
            .get_session(id)
            .await?
            .filter(|record| !matches!(record.state.as_str(), "exited" | "crashed"));
        Ok(record
            .and_then(|record| record.node)
            .filter(|node| Some(node) != self.config.node.as_ref()))
    }

    /// Carries out `command` on session `id`: here if it runs here, else on the node that
    /// runs it (over the bus), whose answer or refusal is this one's.
    pub async fn command(&self, id: &str, command: SessionCommand) -> Result<(), DaemonError> {
        let Some(node) = self.remote_owner(id).await? else {
            return self.command_session_here(id, command).await;
        };
        let here = self.config.node.as_deref().unwrap_or("another node");
        self.forward(&node, id, &command.via(here)).await.map(drop)
    }

    /// Carries out `command` on session `id` if it runs on this node (`NotRunning`
    /// otherwise): what a command forwarded from another node gets. Its answer: the new
    /// session's record for a create, `null` otherwise.
    pub async fn command_here(
        self: &Arc<Self>,
        id: &str,
        command: SessionCommand,
    ) -> Result<Value, DaemonError> {
        if let SessionCommand::Create { mut request, by } = command {
            // Here, whatever it names: a forwarded create is never placed or forwarded again.
            request.node = self.config.node.clone();
            request.started_by = by;
            let record = self.create(request).await?;
            return serde_json::to_value(public_record(record))
                .map_err(|error| DaemonError::Internal(error.to_string()));
        }
        self.command_session_here(id, command).await.map(|()| Value::Null)
    }

    async fn command_session_here(
        &self,
        id: &str,
        command: SessionCommand,
    ) -> Result<(), DaemonError> {
        match command {
            SessionCommand::Create { .. } => {
                Err(DaemonError::Invalid("a create names no session".into()))
            }
            SessionCommand::Message { message, by } => self.message_here(id, message, &by).await,
            SessionCommand::Answer { request_id, answer, by } => {
                Ok(self.running(id).await?.respond_permission(&request_id, answer, &by).await?)
            }
            SessionCommand::Interrupt => Ok(self.running(id).await?.interrupt().await?),
            SessionCommand::SetModel { model } => {
                Ok(self.running(id).await?.set_model(model).await?)
            }
            SessionCommand::SetMode { mode } => {
                Ok(self.running(id).await?.set_permission_mode(mode).await?)
            }
            SessionCommand::Stop => self.stop_here(id, false).await,
        }
    }

    async fn message_here(
        &self,
        id: &str,
        message: switchboard_protocol::UserMessage,
        by: &str,
    ) -> Result<(), DaemonError> {
        let handle = self.running(id).await?;
        self.may_send(id, by)?;
        let terminal = self
            .live(id)
            .and_then(|live| live.record.lock().ok().map(|record| is_terminal(&record)))
            .unwrap_or(false);
        if terminal {
            switchboard_transport::terminal::prompt_text(&message).map_err(DaemonError::Invalid)?;
        }
        handle.send_message(message).await?;
        self.note_sender(id, by);
        Ok(())
    }

    /// Notes who sent session `id`'s CLI its latest message (a relay frontend's goes to the
    /// handle directly): its next permission requests record them as who started the turn.
    pub fn note_sender(&self, id: &str, by: &str) {
        if let Some(live) = self.live(id) {
            live.set_sender(Some(by.to_owned()));
        }
    }

    /// Why the session `id` is paused, if it is.
    pub fn paused(&self, id: &str) -> Option<String> {
        self.live(id).and_then(|live| live.paused())
    }

    /// Today's spend and the daily limits.
    pub fn budget(&self) -> crate::budget::Spend {
        self.budgets.today()
    }

    /// Changes the daily limits; sessions they paused go on if no limit holds them any more
    /// (and sessions now over one pause).
    pub fn change_budget(
        self: &Arc<Self>,
        change: &crate::budget::LimitChange,
    ) -> Result<crate::budget::Spend, DaemonError> {
        let spend = self.budgets.change(change).map_err(DaemonError::Invalid)?;
        let live: Vec<(String, Arc<LiveSession>)> = self
            .sessions
            .lock()
            .map(|sessions| sessions.iter().map(|(id, live)| (id.clone(), live.clone())).collect())
            .unwrap_or_default();
        for (id, live) in live {
            if live.handle().is_some() {
                self.check_budget(&id, &live);
            }
        }
        Ok(spend)
    }

    /// Whether `name` is a channel a route may name: the notify file's, or `web-push`.
    fn known_channel(&self, name: &str) -> bool {
        name == crate::notify::WEB_PUSH
            || self.notifier.channels().iter().any(|channel| {
                channel.name == name && channel.kind != crate::notify::ChannelKind::WebPush
            })
    }

    /// `route` without the names that are not channels (each said in the log).
    fn known_route(
        &self,
        mut route: switchboard_session::NotifyRoute,
    ) -> switchboard_session::NotifyRoute {
        let known = |name: &String| {
            let known = self.known_channel(name);
            if !known {
                tracing::warn!(channel = %name, "a route names a channel that is no more: left out");
            }
            known
        };
        if let Some(channels) = &mut route.channels {
            channels.retain(known);
        }
        route.escalate.retain(|step| known(&step.channel));
        route
    }

    /// A route names only channels there are: the notify file's, or `web-push`.
    fn check_route(&self, route: &switchboard_session::NotifyRoute) -> Result<(), DaemonError> {
        route.check().map_err(DaemonError::Invalid)?;
        let known = |name: &str| self.known_channel(name);
        let named =
            route.channels.iter().flatten().chain(route.escalate.iter().map(|step| &step.channel));
        for name in named {
            if !known(name) {
                return Err(DaemonError::Invalid(format!(
                    "notify: there is no channel {name:?} (the notify file's channels, or {:?} for the browsers subscribed to Web Push)",
                    crate::notify::WEB_PUSH
                )));
            }
        }
        Ok(())
    }

    /// Whether `by` may send session `id` a message now: not while it is paused (checked
    /// again first: a daily limit ends with its day), nor past a daily limit of `by`'s.
    pub fn may_send(&self, id: &str, by: &str) -> Result<(), DaemonError> {
        if let Some(live) = self.live(id) {
            if live.paused().is_some() {
                self.lift_pause(id, &live);
            } else if let Some(why) = self.over_budget(&live) {
                // Over a limit it had not met yet (a resume's first message): it pauses now.
                let _checking = live.budget_check.lock();
                if !live.set_paused(Some(why)) {
                    if let Ok(mut record) = live.record.lock() {
                        record.state = "paused".into();
                    }
                    self.record_changed(&live);
                }
            }
            if let Some(why) = live.paused() {
                return Err(DaemonError::Budget(format!(
                    "session {id} is paused: {why}; raise its budget (PATCH /api/sessions/{id} with max_budget_usd) or the daily one (PATCH /api/budget), or stop it"
                )));
            }
        }
        self.daily_limit(Some(by))
    }

    /// A daily limit that refuses new work started by `by` (who asks), if one does.
    fn daily_limit(&self, by: Option<&str>) -> Result<(), DaemonError> {
        match self.budgets.over(by.and_then(crate::budget::token_of)) {
            Some(why) => Err(DaemonError::Budget(format!(
                "{why}; an admin raises it (PATCH /api/budget), or it starts again tomorrow (UTC)"
            ))),
            None => Ok(()),
        }
    }

    /// What the session's turns cost (`usd`): today's spend, the daemon's and the token's
    /// that sent the CLI its latest message; then the session pauses if a limit is reached.
    fn spend(self: &Arc<Self>, id: &str, live: &Arc<LiveSession>, usd: f64) {
        let sender = live.sender();
        self.budgets.charge(sender.as_deref().and_then(crate::budget::token_of), usd);
        // What the session spent in all, over every run and CLI (a CLI's own total may start
        // again from zero on a resume): kept in its record.
        if let Ok(mut record) = live.record.lock() {
            let spent = spent(&record);
            if let Some(config) = record.config.as_object_mut() {
                config.insert("spent_usd".into(), json!(spent + usd));
            }
        }
        self.record_changed(live);
        self.check_budget(id, live);
    }

    /// The limit the session is over, if any: its own `max_budget_usd`, the daemon's daily
    /// one, or that of the token that sent its latest message.
    fn over_budget(&self, live: &LiveSession) -> Option<String> {
        let (cost, max) = live
            .record
            .lock()
            .map(|record| {
                (spent(&record), record.config.get("max_budget_usd").and_then(Value::as_f64))
            })
            .ok()?;
        if let Some(max) = max.filter(|max| cost >= *max) {
            return Some(format!(
                "its budget of {} is spent ({})",
                crate::budget::dollars(max),
                crate::budget::dollars(cost)
            ));
        }
        let sender = live.sender();
        self.budgets.over(sender.as_deref().and_then(crate::budget::token_of))
    }

    /// Lets a paused session go on if no limit holds it any more.
    fn lift_pause(&self, id: &str, live: &Arc<LiveSession>) {
        let _checking = live.budget_check.lock();
        self.lift_checked(id, live);
    }

    /// [`Daemon::lift_pause`], its session's budget lock held.
    fn lift_checked(&self, id: &str, live: &Arc<LiveSession>) {
        if live.paused().is_none() || self.over_budget(live).is_some() {
            return;
        }
        live.set_paused(None);
        tracing::info!(session = %id, "goes on: its budget allows it");
        let state = live.handle().map(|handle| handle.snapshot().state);
        if let (Ok(mut record), Some(state)) = (live.record.lock(), state) {
            record.state = state.as_str().to_owned();
        }
        self.record_changed(live);
    }

    /// Pauses the session if a limit is reached (interrupting a turn that runs, telling the
    /// channels), or lets a paused one go on once none is.
    fn check_budget(self: &Arc<Self>, id: &str, live: &Arc<LiveSession>) {
        let _checking = live.budget_check.lock();
        let Some(why) = self.over_budget(live) else {
            return self.lift_checked(id, live);
        };
        let was_paused = live.set_paused(Some(why.clone()));
        // A turn running while paused (a subagent's result crossed the limit, or a message
        // the CLI had queued began) stops here.
        let state = live.handle().map(|handle| handle.snapshot().state);
        if matches!(state, Some(SessionState::Working | SessionState::AwaitingPermission)) {
            if let Some(handle) = live.handle() {
                tokio::spawn(async move {
                    let _ = handle.interrupt().await;
                });
            }
        }
        if !was_paused {
            tracing::info!(session = %id, "paused: {why}");
            if let Ok(mut record) = live.record.lock() {
                if !is_final_state(&record.state) {
                    record.state = "paused".into();
                }
            }
            self.record_changed(live);
            self.tell_budget(id, live, &why);
        }
    }

    /// Tells the channels a session paused at a budget.
    fn tell_budget(self: &Arc<Self>, id: &str, live: &LiveSession, why: &str) {
        if self.notifier.is_idle() {
            return;
        }
        let (title, cwd) = live
            .record
            .lock()
            .map(|record| (record.title.clone().unwrap_or_default(), record.cwd.clone()))
            .unwrap_or_default();
        let name = if title.is_empty() { id.to_owned() } else { title.clone() };
        let told = Told {
            topic: crate::notify::Topic::BudgetReached,
            key: format!("{id}:budget:{}", now_ms()),
            title: format!("Paused (budget): {name}"),
            text: format!("Paused: {why}. Raise the budget to go on, or stop the session."),
            request: None,
            extra: json!({"budget": {"reason": why}}),
        };
        let session = json!({"id": id, "title": title, "cwd": cwd});
        tell(self, &self.notifier, id, &session, &live.route(), told);
    }

    /// How often CLI sockets are pinged.
    pub fn ping_interval(&self) -> Duration {
        self.config.ping_interval.unwrap_or(PING_INTERVAL)
    }

    /// How long a follower's socket may take nothing before it is dropped ([`STALL_LIMIT`]).
    pub fn stall_limit(&self) -> Duration {
        self.config.stall_limit.unwrap_or(STALL_LIMIT)
    }

    /// The connections of every port this daemon serves, under one set of limits (the first
    /// port served sets them): the main port and the relay's ports share the file descriptors.
    pub fn peers(&self, limits: crate::peers::Limits) -> Arc<crate::peers::Peers> {
        self.peers.get_or_init(|| crate::peers::Peers::new(limits)).clone()
    }

    /// Recent permission decisions by request id ([`crate::decisions`]).
    pub fn decisions(&self) -> &crate::decisions::Decisions {
        &self.decisions
    }

    /// The followers' places and byte budget ([`crate::watchers`]).
    pub fn watchers(&self) -> &Arc<crate::watchers::Watchers> {
        &self.watchers
    }

    /// Notifications and push subscriptions.
    pub fn notifier(&self) -> &crate::notify::Notifier {
        &self.notifier
    }

    /// Sends a test notice to the push subscription `id`; whether there is one.
    pub fn push_test(&self, id: &str) -> bool {
        let Some(subscription) =
            self.notifier.push_subscriptions().into_iter().find(|found| found.id == id)
        else {
            return false;
        };
        let key = format!("test:{}", switchboard_transport::random::random_hex(8));
        let notice = crate::notify::Notice {
            topic: crate::notify::Topic::Test,
            key: key.clone(),
            body: json!({
                "id": key, "event": "test", "ts_ms": switchboard_store::now_ms(),
                "session": {"id": null}, "title": "Switchboard",
                "text": format!("Notifications reach {}.", if subscription.name.is_empty() { "this device" } else { subscription.name.as_str() }),
            }),
            request: None,
        };
        let channel = subscription.channel();
        self.notifier.queue(&notice, |candidate| candidate.name == channel, |_| None);
        true
    }

    /// What signs approval links.
    pub fn link_key(&self) -> &crate::links::LinkKey {
        &self.link_key
    }

    /// The one-tap link to `pending` (a request of session `id`) for `channel`: a full URL
    /// with the daemon's public address, else its path. It expires when the request would
    /// time out.
    pub fn approval_link(&self, id: &str, pending: &PendingPermission, channel: &str) -> String {
        let claim = crate::links::LinkClaim {
            session: id.to_owned(),
            request: pending.request_id.clone(),
            expires_ms: pending
                .asked_at_ms
                .saturating_add(pending.timeout_secs.saturating_mul(1000)),
            channel: channel.to_owned(),
        };
        let base = self.config.links.public_url.as_deref().unwrap_or("");
        format!("{base}/a/{}", self.link_key.sign(&claim))
    }

    /// The relay's token for externally launched CLIs (`None`: no auth).
    pub fn ingress_token(&self) -> Option<&str> {
        self.config.ingress_token.as_deref()
    }

    /// Sends a line to every relay frontend, waiting while the slowest of them has
    /// [`RELAY_BUFFER`] lines it has not taken yet (no frontend loses a line; a frontend that
    /// stays stuck is dropped after [`STALL_LIMIT`]).
    pub async fn relay_publish(&self, line: &str) {
        // With no frontend listening the line goes nowhere: not even copied.
        if self.relay.receiver_count() == 0 {
            return;
        }
        let _ = self.relay.broadcast_direct(axum::extract::ws::Utf8Bytes::from(line)).await;
    }

    /// The relay feed for one frontend: every line published from now on.
    pub fn relay_subscribe(&self) -> async_broadcast::Receiver<axum::extract::ws::Utf8Bytes> {
        self.relay_frontends.activate_cloned()
    }

    /// Makes `id` the relay session frontends talk to (or none).
    pub fn set_relay_current(&self, id: Option<String>) {
        if let Ok(mut current) = self.relay_current.lock() {
            *current = id;
        }
    }

    /// The handle of the relay session frontends talk to.
    pub fn relay_handle(&self) -> Option<(String, SessionHandle)> {
        let current = self.relay_current.lock().ok()?.clone();
        if let Some((id, handle)) =
            current.and_then(|id| self.handle(&id).ok().map(|handle| (id, handle)))
        {
            return Some((id, handle));
        }
        // The current one has ended: the newest one still running takes its place.
        self.relay_live()
            .into_iter()
            .max_by_key(|(created, ..)| *created)
            .map(|(_, id, _, handle)| (id, handle))
    }

    /// The running sessions relay frontends see (CLIs that connected at `/`, and sessions
    /// created with `relay`): their ids, Claude session ids and handles.
    pub fn relay_handles(&self) -> Vec<(String, Option<String>, SessionHandle)> {
        self.relay_live().into_iter().map(|(_, id, claude, handle)| (id, claude, handle)).collect()
    }

    /// [`Daemon::relay_handles`], with when each was created.
    fn relay_live(&self) -> Vec<(u64, String, Option<String>, SessionHandle)> {
        let live: Vec<Arc<LiveSession>> = self
            .sessions
            .lock()
            .map(|sessions| sessions.values().cloned().collect())
            .unwrap_or_default();
        live.into_iter()
            .filter_map(|live| {
                let (relayed, created, id, claude_session_id) = {
                    let record = live.record.lock().ok()?;
                    let relayed =
                        record.config["transport"] == "relay" || record.config["relay"] == true;
                    (
                        relayed,
                        record.created_ms,
                        record.id.clone(),
                        record.claude_session_id.clone(),
                    )
                };
                let handle = live.handle()?;
                relayed.then_some((created, id, claude_session_id, handle))
            })
            .collect()
    }

    /// The `--sdk-url` slot with this id, while its session accepts connections.
    pub fn ingress_slot(
        &self,
        slot_id: &str,
    ) -> Option<Arc<switchboard_transport::sdk_url::IngressSlot>> {
        let mut slots = self.ingress.lock().ok()?;
        slots.retain(|_, slot| !slot.is_closed());
        slots.get(slot_id).cloned()
    }

    /// Every open `--sdk-url` slot (operators and tests).
    pub fn ingress_slots(&self) -> Vec<Arc<switchboard_transport::sdk_url::IngressSlot>> {
        self.ingress
            .lock()
            .map(|slots| slots.values().filter(|slot| !slot.is_closed()).cloned().collect())
            .unwrap_or_default()
    }

    /// Claude Code's own transcripts.
    pub fn transcripts(&self) -> &crate::transcripts::Transcripts {
        &self.transcripts
    }

    /// The id of a running session of this daemon that continues the Claude session
    /// `claude_session_id`.
    pub async fn running_for_claude_session(&self, claude_session_id: &str) -> Option<String> {
        let live: Vec<Arc<LiveSession>> = self
            .sessions
            .lock()
            .map(|sessions| sessions.values().cloned().collect())
            .unwrap_or_default();
        live.into_iter().find_map(|live| {
            let record = live.record.lock().ok()?;
            let same = record.claude_session_id.as_deref() == Some(claude_session_id);
            live.handle()?;
            same.then(|| record.id.clone())
        })
    }

    /// Session-level changes across all sessions (created, state, cost, permission pending).
    pub fn dashboard(&self) -> broadcast::Receiver<Value> {
        self.dashboard.subscribe()
    }

    /// Starts a new session.
    pub async fn create(
        self: &Arc<Self>,
        request: CreateSession,
    ) -> Result<SessionRecord, DaemonError> {
        self.check_serving()?;
        if let Some(version) = &request.cli_version {
            if !is_version(version) {
                return Err(DaemonError::Invalid(format!(
                    "cli_version {:?} is not a version (digits and dots, like 2.1.330)",
                    version.chars().take(70).collect::<String>()
                )));
            }
            if request.claude.is_some() {
                return Err(DaemonError::Invalid(
                    "give claude (the program) or cli_version (a node whose CLI is that version), not both".into(),
                ));
            }
        }
        if let Some(node) = self.place(&request)? {
            return self.create_on(&node, request).await;
        }
        if let Some(wanted) = &request.cli_version {
            self.check_cli_version(wanted).await?;
        }
        if request.prompt.as_deref().is_some_and(|prompt| prompt.trim().is_empty()) {
            return Err(DaemonError::Invalid(
                "prompt is empty; leave it out to start a session without one".into(),
            ));
        }
        if request.resume_at.is_some() && request.resume.is_none() {
            return Err(DaemonError::Invalid(
                "resume_at needs resume (the Claude session id)".into(),
            ));
        }
        if let Some(max) = request.max_budget_usd {
            crate::budget::check_limit("max_budget_usd", max).map_err(DaemonError::Invalid)?;
        }
        if request.mcp_config.len() > MAX_MCP_CONFIGS {
            return Err(DaemonError::Invalid(format!(
                "mcp_config has {} entries; at most {MAX_MCP_CONFIGS}",
                request.mcp_config.len()
            )));
        }
        if request.notify.as_ref().is_some_and(Vec::is_empty) {
            return Err(DaemonError::Invalid(
                "notify names no channel; name at least one, or leave it out".into(),
            ));
        }
        self.daily_limit(request.started_by.as_deref())?;
        let id = uuid::Uuid::new_v4().to_string();
        let mut launch = Launch::from(&request);
        if request.worktree {
            if !request.cwd.is_absolute() || !request.cwd.is_dir() {
                return Err(DaemonError::Invalid(format!(
                    "cwd {} is not an absolute path of a directory",
                    request.cwd.display()
                )));
            }
            let (tree, cwd) = crate::worktree::create(&request.cwd, &id[..8])
                .await
                .map_err(DaemonError::Invalid)?;
            launch.cwd = cwd;
            launch.worktree = Some(tree);
        }
        let made = self.create_in(id, request, launch.clone()).await;
        if let (Err(_), Some(tree)) = (&made, &launch.worktree) {
            // Nothing half-made: the worktree and its branch go with the session that failed.
            if let Err(error) = crate::worktree::remove(tree, true, true).await {
                tracing::warn!("the failed session's worktree stays: {error}");
            }
        }
        made
    }

    /// [`Daemon::create`], once its worktree (if any) is made.
    async fn create_in(
        self: &Arc<Self>,
        id: String,
        request: CreateSession,
        launch: Launch,
    ) -> Result<SessionRecord, DaemonError> {
        let _admitted = self.admit_run()?;
        let (config, transport) = self
            .session_config(
                &launch,
                request.resume.clone(),
                request.fork,
                request.resume_at.clone(),
            )
            .await?;
        let now = now_ms();
        let record = SessionRecord {
            archived: false,
            node: self.config.node.clone(),
            id: id.clone(),
            claude_session_id: request.resume.clone().filter(|_| !request.fork),
            cwd: launch.cwd.display().to_string(),
            model: request.model.clone(),
            permission_mode: request.permission_mode.clone(),
            state: "starting".into(),
            title: request.prompt.as_deref().map(switchboard_session::projection::title_of),
            cost_usd: 0.0,
            created_ms: now,
            updated_ms: now,
            config: serde_json::to_value(&launch).unwrap_or(Value::Null),
        };
        self.check_transport(&config, &transport).await?;
        self.check_route(&route_of(&config.policy, &record))?;
        let warm = match transport {
            // A resumed or forked conversation is chosen at launch: never a warm CLI's.
            Transport::Stdio if request.resume.is_none() => self.warm.take(&config).await,
            _ => None,
        };
        let warmed = warm.is_some();
        self.store.create_session(&record).await?;
        // The log's first event, before any CLI runs: a log that cannot be written refuses the
        // session here, not after it started.
        let started = async {
            self.note_started(&id, 0, false, warmed, false).await?;
            let prompt = request.prompt.clone().map(|text| (text, request.started_by.clone()));
            self.start(record.clone(), config, transport, warm, 1, prompt).await
        };
        if let Err(error) = started.await {
            let _ = self.store.delete_session(&id).await;
            return Err(error);
        }
        let _ = self
            .dashboard
            .send(json!({"event": "session_created", "session": public_record(record.clone())}));
        Ok(self.record(&id).await?.unwrap_or(record))
    }

    /// Refuses to start anything once the daemon drains.
    fn check_serving(&self) -> Result<(), DaemonError> {
        match *self.phase.borrow() {
            Phase::Serving => Ok(()),
            _ => Err(DaemonError::ShuttingDown),
        }
    }

    /// Restarts an exited session's CLI with `--resume` and its Claude session id; the event
    /// log continues where it stopped.
    pub async fn resume(self: &Arc<Self>, id: &str) -> Result<SessionRecord, DaemonError> {
        self.check_serving()?;
        if self.live(id).is_some_and(|live| live.handle().is_some()) {
            return Err(DaemonError::AlreadyRunning(id.to_owned()));
        }
        let writing = self.record_writes.lock().await;
        // Again under the lock: two resumes asked of this node at once start one run.
        if self.live(id).is_some_and(|live| live.handle().is_some()) {
            return Err(DaemonError::AlreadyRunning(id.to_owned()));
        }
        let _admitted = self.admit_run()?;
        let mut record = self
            .store
            .get_session(id)
            .await?
            .ok_or_else(|| DaemonError::NotFound(id.to_owned()))?;
        let lost = self.node_lost(&record);
        if record.node != self.config.node
            && !matches!(record.state.as_str(), "exited" | "crashed")
            && !lost
        {
            let node = record.node.as_deref().unwrap_or("a daemon of its own");
            return Err(DaemonError::OtherNode(format!(
                "session {id} runs on {node}; resume it there, or once it has stopped"
            )));
        }
        if is_terminal(&record) {
            let claude = record.claude_session_id.as_deref().unwrap_or("ID");
            return Err(DaemonError::Invalid(format!(
                "session {id} ran in a person's terminal; continue it in one: switchboard claude --resume {claude}"
            )));
        }
        let claude_session_id = record.claude_session_id.clone().ok_or_else(|| {
            DaemonError::Invalid(format!(
                "session {id} never reached the CLI's first turn, so there is nothing to resume"
            ))
        })?;
        // Records written before `Launch` hold the whole create request: its one-time fields
        // are ignored here.
        let launch: Launch = serde_json::from_value(record.config.clone()).map_err(|error| {
            DaemonError::Invalid(format!("session {id}'s stored config is unreadable: {error}"))
        })?;
        if let Some(max) = launch.max_budget_usd.filter(|max| spent(&record) >= *max) {
            return Err(DaemonError::Budget(format!(
                "session {id}'s budget of {} is spent ({}); raise it first (PATCH /api/sessions/{id} with max_budget_usd)",
                crate::budget::dollars(max),
                crate::budget::dollars(spent(&record))
            )));
        }
        self.daily_limit(None)?;
        let (config, transport) =
            self.session_config(&launch, Some(claude_session_id), false, None).await?;
        self.check_transport(&config, &transport).await?;
        // Taken from its node: of two nodes taking it at once, one wins, and the node it was
        // taken from can no longer write its record.
        let taken_from = record.node.clone();
        self.claim(&mut record, self.config.node.clone()).await?;
        let began = self.begin_resumed(&mut record, lost, taken_from.as_deref(), config, transport);
        if let Err(error) = began.await {
            // Claimed but not started (the log moved under it: the node it was taken from
            // still wrote): it is this node's now, and stopped, so that it can be resumed again.
            record.state = "exited".into();
            record.updated_ms = now_ms();
            if let Err(stored) = self.store.update_session(&record).await {
                tracing::error!(session = %id, error = %stored, "cannot mark a failed resume stopped");
            }
            return Err(error);
        }
        drop(writing);
        self.record(id).await?.ok_or_else(|| DaemonError::NotFound(id.to_owned()))
    }

    /// A resume's start, once its record is this node's: the note that the lost node's run
    /// ended (`lost`), the `started` event, the record, the CLI.
    async fn begin_resumed(
        self: &Arc<Self>,
        record: &mut SessionRecord,
        lost: bool,
        taken_from: Option<&str>,
        config: SessionConfig,
        transport: Transport,
    ) -> Result<(), DaemonError> {
        let id = record.id.clone();
        let id = id.as_str();
        let mut last = self.store.last_seq(id).await?;
        if lost {
            // Its run ended with its node: said in the log, as a daemon's restart says it.
            let node = taken_from.unwrap_or_default();
            let here = self.config.node.as_deref().unwrap_or_default();
            let payload = json!({
                "event": "exited", "code": null, "signal": null, "requested": false,
                "description": format!("node {node} was lost while this session ran; resumed on {here}"),
            });
            let note = event_record(id, last + 1, "switchboard", "exited", payload.to_string());
            self.store.append(std::slice::from_ref(&note)).await?;
            last += 1;
        }
        self.note_started(id, last, true, false, false).await?;
        record.state = "starting".into();
        record.updated_ms = now_ms();
        self.store.update_session(record).await?;
        self.start(record.clone(), config, transport, None, last + 1, None).await
    }

    async fn session_config(
        &self,
        request: &Launch,
        resume: Option<String>,
        fork: bool,
        resume_at: Option<String>,
    ) -> Result<(SessionConfig, Transport), DaemonError> {
        if !request.cwd.is_absolute() {
            return Err(DaemonError::Invalid(format!(
                "cwd must be an absolute path, not {:?}",
                request.cwd
            )));
        }
        if !request.cwd.is_dir() {
            return Err(DaemonError::Invalid(format!("cwd {:?} is not a directory", request.cwd)));
        }
        self.check_env(&request.env)?;
        let policy = match &request.policy {
            Some(text) => load_policy(text).await?,
            None => self.config.default_policy.clone().unwrap_or_default(),
        };
        let mut config = SessionConfig::new(&request.cwd, policy);
        config.cli.program = request.claude.clone().or_else(|| self.config.claude.clone());
        config.cli.clear_env = self.config.clear_env;
        config.cli.env.extend(self.config.env.iter().cloned());
        config.cli.env.extend(request.env.iter().map(|(k, v)| (k.clone(), v.clone())));
        config.cli.model = request.model.clone();
        if let Some(mode) = &request.permission_mode {
            let mode: PermissionMode = mode.parse().unwrap_or_default();
            if let PermissionMode::Other(other) = &mode {
                return Err(DaemonError::Invalid(format!(
                    "unknown permission_mode {other:?} (one of: {})",
                    PermissionMode::KNOWN.join(", ")
                )));
            }
            config.cli.permission_mode = Some(mode);
        }
        config.cli.resume = resume;
        config.cli.fork_session = fork;
        config.cli.resume_session_at = resume_at;
        config.cli.allowed_tools = request.allowed_tools.clone();
        config.cli.disallowed_tools = request.disallowed_tools.clone();
        config.cli.system_prompt = request.system_prompt.clone();
        config.cli.append_system_prompt = request.append_system_prompt.clone();
        config.cli.max_turns = request.max_turns;
        config.cli.mcp_config = request.mcp_config.clone();
        let transport = match request.transport.as_deref() {
            None | Some("stdio") => Transport::Stdio,
            Some("sdk-url") => {
                let base = self.config.ingress_base.clone().ok_or_else(|| {
                    DaemonError::Invalid(
                        "this daemon has no address for --sdk-url CLIs to connect to".into(),
                    )
                })?;
                Transport::SdkUrl { base }
            }
            Some(other) => {
                return Err(DaemonError::Invalid(format!(
                    "unknown transport {other:?} (stdio or sdk-url)"
                )));
            }
        };
        Ok((config, transport))
    }

    /// A request's `env`: names that are names, values without NUL, and no loader variable
    /// the daemon does not allow.
    fn check_env(&self, env: &HashMap<String, String>) -> Result<(), DaemonError> {
        for (name, value) in env {
            if name.is_empty() || name.contains(['=', '\0']) {
                return Err(DaemonError::Invalid(format!(
                    "env name {name:?} is not valid (it must be non-empty, without '=' or NUL)"
                )));
            }
            if value.contains('\0') {
                return Err(DaemonError::Invalid(format!("env {name}'s value contains NUL")));
            }
            let loader = LOADER_VARIABLES.iter().any(|pattern| match pattern.strip_suffix('*') {
                Some(prefix) => name.starts_with(prefix),
                None => name == pattern,
            });
            if loader && !self.config.allowed_env.iter().any(|allowed| allowed == name) {
                return Err(DaemonError::Invalid(format!(
                    "env {name} makes programs load code of the caller's choosing; the daemon refuses it unless started with --allow-env {name}"
                )));
            }
        }
        Ok(())
    }

    /// Claims `record`, as it was read, for node `to` ([`Store::claim_session`]): then its
    /// node and stamp are the claim's. Of two claims from one reading one wins; the other is
    /// `OtherNode`.
    async fn claim(
        &self,
        record: &mut SessionRecord,
        to: Option<String>,
    ) -> Result<(), DaemonError> {
        let claim = Claim::of(record, to.as_deref());
        let stamp = claim.stamp_ms;
        if !self.store.claim_session(claim).await? {
            return Err(DaemonError::OtherNode(format!(
                "session {} was just taken over by another node, or resumed or stopped by its own",
                record.id
            )));
        }
        record.updated_ms = stamp;
        record.node = to;
        Ok(())
    }

    /// This node's own CLI, as its sessions run it (without what a request adds): the one
    /// whose version the node tells.
    fn node_cli(&self) -> switchboard_transport::stdio::CliOptions {
        let mut options = switchboard_transport::stdio::CliOptions {
            program: self.config.claude.clone(),
            clear_env: self.config.clear_env,
            ..Default::default()
        };
        options.env.extend(self.config.env.iter().cloned());
        options
    }

    /// Refuses a session that asks for CLI version `wanted` when this node's CLI is another
    /// (asked once, then kept, as the heartbeat tells it).
    async fn check_cli_version(&self, wanted: &str) -> Result<(), DaemonError> {
        let version = match self.cli_version.get() {
            Some(version) => version.clone(),
            None => {
                let version =
                    ask_cli_version(&self.node_cli(), Duration::from_secs(10)).await.ok_or_else(
                        || DaemonError::Busy("this node's CLI did not say its version".into()),
                    )?;
                let _ = self.cli_version.set(version.clone());
                version
            }
        };
        if version != wanted {
            return Err(DaemonError::Invalid(format!(
                "this node runs Claude Code {version}, not {wanted}"
            )));
        }
        Ok(())
    }

    /// `--sdk-url` works with CLIs up to 2.1.120 only: refuse others with a clear message.
    async fn check_transport(
        &self,
        config: &SessionConfig,
        transport: &Transport,
    ) -> Result<(), DaemonError> {
        if matches!(transport, Transport::Stdio) {
            return Ok(());
        }
        let version = switchboard_transport::stdio::cli_version(&config.cli)
            .await
            .map_err(|error| DaemonError::Invalid(error.to_string()))?;
        if !switchboard_transport::sdk_url::supports_sdk_url(&version) {
            return Err(DaemonError::Invalid(format!(
                "claude {version} refuses --sdk-url to non-Anthropic hosts (CLIs from 2.1.121 on do); use transport \"stdio\", or a CLI up to 2.1.120"
            )));
        }
        Ok(())
    }

    /// Appends the `started` event that opens each run of a session's CLI (`resumed`: not its
    /// first run; `warm`: its CLI came from the warm pool; `transcript`: its lines are an
    /// interactive CLI's transcript), right after `last`.
    async fn note_started(
        &self,
        id: &str,
        last: u64,
        resumed: bool,
        warm: bool,
        transcript: bool,
    ) -> Result<(), DaemonError> {
        let mut payload = json!({"event": "started", "resumed": resumed, "warm": warm});
        if transcript {
            payload["transcript"] = json!(true);
        }
        let record = event_record(id, last + 1, "switchboard", "started", payload.to_string());
        self.store.append(std::slice::from_ref(&record)).await?;
        Ok(())
    }

    /// Spawns the session's CLI over the transport the request chose (or takes `warm`'s), and
    /// the session on it.
    async fn start(
        self: &Arc<Self>,
        record: SessionRecord,
        config: SessionConfig,
        transport: Transport,
        warm: Option<WarmCli>,
        last_seq: u64,
        prompt: Option<Prompt>,
    ) -> Result<(), DaemonError> {
        // Names no longer in the notify file are dropped (a resume still works).
        let route = self.known_route(route_of(&config.policy, &record));
        if let Some(warm) = warm {
            match warm.into_session(config.clone()) {
                Ok((handle, events)) => {
                    return self.run(record, handle, events, last_seq, prompt, route).await;
                }
                // The pool hands out only CLIs that fit: this one is ended, and a new one started.
                Err(unfit) => {
                    tracing::warn!(pid = unfit.pid(), "a warm CLI did not fit its session");
                    tokio::spawn(unfit.end());
                }
            }
        }
        let options = config.launch_options();
        let spawned = match transport {
            Transport::Stdio => switchboard_transport::stdio::spawn(&options),
            Transport::SdkUrl { base } => {
                switchboard_transport::sdk_url::spawn(&options, &base).map(|(link, slot)| {
                    // The daemon's WebSocket route finds the slot here when the CLI connects.
                    if let Ok(mut slots) = self.ingress.lock() {
                        slots.insert(slot.id.clone(), slot);
                    }
                    link
                })
            }
        };
        let link = spawned.map_err(|error| DaemonError::Session(error.into()))?;
        let (handle, events) = switchboard_session::spawn_session_on(config, link);
        self.run(record, handle, events, last_seq, prompt, route).await
    }

    /// Registers a started session and its pump.
    async fn run(
        self: &Arc<Self>,
        record: SessionRecord,
        handle: SessionHandle,
        events: SessionEvents,
        last_seq: u64,
        prompt: Option<Prompt>,
        route: switchboard_session::NotifyRoute,
    ) -> Result<(), DaemonError> {
        let id = record.id.clone();
        let (live, number) = match self.go_live(record, Some(handle.clone())) {
            Ok(live) => live,
            Err(error) => {
                // Refused (a drain began, or another run took the session): this CLI ends.
                let handle = handle.clone();
                tokio::spawn(async move {
                    let _ = handle.shutdown(STOP_GRACE).await;
                });
                tokio::spawn(pump_discarding(events));
                return Err(error);
            }
        };
        let run = handle.cli_run().cloned();
        if let Some(run) = &run {
            self.record_run(run, true).await;
        }
        // Shown to relay frontends: as a relay CLI that connects, it is announced and becomes
        // the one their plain messages go to.
        if live.record.lock().is_ok_and(|record| record.config["relay"] == true) {
            self.set_relay_current(Some(id.clone()));
            self.relay_publish(&relay_status("claude code connected")).await;
        }
        // A new run starts with no sender but its first prompt's (a resumed CLI's turns are
        // not the last run's sender's).
        live.set_sender(prompt.as_ref().and_then(|(_, by)| by.clone()));
        if let Ok(mut slot) = live.route.lock() {
            *slot = route;
        }
        events.hand_to(Box::new(Pump::new(self.clone(), id, live, number, last_seq, run)));
        self.started.notify_waiters();
        if let Some((prompt, _)) = prompt {
            handle.send_text(prompt).await?;
        }
        Ok(())
    }

    /// Makes `record`'s session live with `handle`, in its next run (an entry still there is
    /// reused; a finished session's is usually forgotten, and made again). Returns it and the
    /// run's number.
    fn go_live(
        &self,
        record: SessionRecord,
        handle: Option<SessionHandle>,
    ) -> Result<(Arc<LiveSession>, u64), DaemonError> {
        let live = {
            let mut sessions = self
                .sessions
                .lock()
                .map_err(|_| DaemonError::Internal("daemon state poisoned".into()))?;
            // Checked under the lock `stop_all` lists sessions under: a session either goes
            // live before a drain lists it (and is stopped), or is refused here.
            if handle.is_some() && *self.phase.borrow() != Phase::Serving {
                return Err(DaemonError::ShuttingDown);
            }
            let live = sessions
                .entry(record.id.clone())
                .or_insert_with(|| Arc::new(LiveSession::new(record.clone())))
                .clone();
            if let Ok(mut slot) = live.record.lock() {
                *slot = record;
            }
            // Begun under the map's lock: a finished session is forgotten under it too
            // ([`Daemon::forget_if_finished`]), so a run never begins on a forgotten entry.
            let run = live.begin(handle)?;
            (live, run)
        };
        Ok(live)
    }

    /// Lets go of a session whose run has ended: a finished session costs what its stored
    /// record costs, not its live machinery. Kept while it owes the log a `lost` note or its
    /// store is failing (its record then lives only here). A resume makes it live again, as
    /// after a restart of the daemon; its subscribers wait for that and read the store.
    fn forget_if_finished(&self, id: &str, live: &Arc<LiveSession>) {
        let Ok(mut sessions) = self.sessions.lock() else { return };
        // Copied first: the watch's guard must not be held while the run's lock is taken.
        let ended = *live.finished.borrow();
        let finished = ended
            && live.handle().is_none()
            && live.lost.load(std::sync::atomic::Ordering::SeqCst) == 0
            && live.store_error.borrow().is_none();
        if finished && sessions.get(id).is_some_and(|entry| Arc::ptr_eq(entry, live)) {
            sessions.remove(id);
        }
    }

    /// Tells the dashboards a session's record changed, and has it stored by the record
    /// writer: nothing waits for that write (a pump that did held every later event of its
    /// session back while the store's writer thread was busy folding).
    fn record_changed(&self, live: &Arc<LiveSession>) {
        let Some(record) = current_record(live) else { return };
        if !live.record_dirty.swap(true, std::sync::atomic::Ordering::SeqCst) {
            let _ = self.record_queue.send(live.clone());
        }
        self.announce(&record);
    }

    /// Tells the dashboards a session's record changed.
    fn announce(&self, record: &SessionRecord) {
        let snapshot = self.handle(&record.id).ok().map(|handle| handle.snapshot());
        let pending = snapshot.as_ref().map_or(0, |snapshot| snapshot.pending_permissions.len());
        let disconnected_since_ms = snapshot.and_then(|snapshot| snapshot.disconnected_since_ms);
        let _ = self.dashboard.send(json!({
            "event": "session_changed", "session_id": record.id, "state": record.state,
            "cost_usd": record.cost_usd, "pending_permissions": pending, "model": record.model,
            "claude_session_id": record.claude_session_id,
            "permission_mode": record.permission_mode, "title": record.title,
            "archived": record.archived, "disconnected_since_ms": disconnected_since_ms,
            "node": record.node,
            "paused": self.paused(&record.id),
        }));
    }

    /// A person renames a session, puts it away, or changes its budget (`None`: unchanged;
    /// a budget of `Some(None)` is removed). A title is trimmed, must not be empty, and is
    /// kept to [`MAX_TITLE_CHARS`] characters. A session paused at its budget goes on once
    /// the new one allows it (and one over the new budget pauses).
    pub async fn amend(
        self: &Arc<Self>,
        id: &str,
        title: Option<&str>,
        archived: Option<bool>,
        max_budget_usd: Option<Option<f64>>,
    ) -> Result<SessionRecord, DaemonError> {
        if let Some(Some(max)) = max_budget_usd {
            crate::budget::check_limit("max_budget_usd", max).map_err(DaemonError::Invalid)?;
        }
        let title = match title.map(str::trim) {
            Some("") => return Err(DaemonError::Invalid("the title is empty".into())),
            Some(title) if title.chars().count() > MAX_TITLE_CHARS => {
                return Err(DaemonError::Invalid(format!(
                    "the title is longer than {MAX_TITLE_CHARS} characters"
                )));
            }
            Some(title) if title.chars().any(invisible) => {
                return Err(DaemonError::Invalid(
                    "the title has a control, bidirectional or invisible character".into(),
                ));
            }
            other => other.map(str::to_owned),
        };
        let change = |record: &mut SessionRecord| {
            if let Some(title) = &title {
                record.title = Some(title.clone());
            }
            if let Some(archived) = archived {
                record.archived = archived;
            }
            if let (Some(max), Some(config)) = (max_budget_usd, record.config.as_object_mut()) {
                config.insert("max_budget_usd".into(), json!(max));
            }
        };
        let _writing = self.record_writes.lock().await;
        if let Some(live) = self.live(id) {
            let record = {
                let mut record = live
                    .record
                    .lock()
                    .map_err(|_| DaemonError::Internal("daemon state poisoned".into()))?;
                change(&mut record);
                record.clone()
            };
            self.store.update_session(&record).await?;
            self.announce(&record);
            if max_budget_usd.is_some() && live.handle().is_some() {
                self.check_budget(id, &live);
                return Ok(current_record(&live).unwrap_or(record));
            }
            return Ok(record);
        }
        let mut record = self
            .store
            .get_session(id)
            .await?
            .ok_or_else(|| DaemonError::NotFound(id.to_owned()))?;
        change(&mut record);
        self.store.update_session(&record).await?;
        self.announce(&record);
        Ok(record)
    }

    /// Seed 003's rotation: the relay session `id` (whose last seq is `seq`) ends with a
    /// `rotated` event, and its CLI's handle moves to the session for `claude_session_id` —
    /// the one this connection had for it (`seen`) or a new one. Returns that session and its
    /// last seq.
    async fn rotate(
        self: &Arc<Self>,
        id: &str,
        live: &Arc<LiveSession>,
        seq: u64,
        claude_session_id: &str,
        seen: &mut HashMap<String, String>,
    ) -> Result<(String, Arc<LiveSession>, u64, u64), DaemonError> {
        let poisoned = || DaemonError::Internal("daemon state poisoned".into());
        let writing = self.record_writes.lock().await;
        let mut old = current_record(live).ok_or_else(poisoned)?;
        if let Some(previous) = &old.claude_session_id {
            seen.insert(previous.clone(), id.to_owned());
        }
        let (next_id, existing) = match seen.get(claude_session_id) {
            Some(next_id) => (next_id.clone(), true),
            None => (uuid::Uuid::new_v4().to_string(), false),
        };
        // The old session ends, saying where its CLI went.
        let payload = json!({
            "event": "rotated", "claude_session_id": claude_session_id, "to": next_id,
        });
        let rotated = event_record(id, seq + 1, "switchboard", "rotated", payload.to_string());
        self.store.append(std::slice::from_ref(&rotated)).await?;
        if let Some(tail) = live.tail() {
            let _ = tail.send(Arc::new(rotated));
        }
        let state = std::mem::replace(&mut old.state, "exited".into());
        old.updated_ms = now_ms();
        if let Ok(mut record) = live.record.lock() {
            *record = old.clone();
        }
        let handle = live.hand_over()?;
        // Written now, under the lock already held (not queued): the connection may come
        // back to this session at once, and then reads its record from the store.
        live.record_dirty.store(false, std::sync::atomic::Ordering::SeqCst);
        let old_stored = match self.store.update_session(&old).await {
            Ok(()) => true,
            Err(error) => {
                tracing::error!(session = %id, %error, "cannot store the rotated session's record");
                false
            }
        };
        self.announce(&old);

        // The new one carries on.
        let now = now_ms();
        let (record, last) = if existing {
            let mut record = self
                .store
                .get_session(&next_id)
                .await?
                .ok_or_else(|| DaemonError::NotFound(next_id.clone()))?;
            record.state = state;
            record.updated_ms = now;
            self.store.update_session(&record).await?;
            let last = self.store.last_seq(&next_id).await?;
            (record, last)
        } else {
            let mut record = SessionRecord {
                archived: false,
                node: self.config.node.clone(),
                id: next_id.clone(),
                claude_session_id: Some(claude_session_id.to_owned()),
                state,
                cost_usd: 0.0,
                created_ms: now,
                updated_ms: now,
                ..old
            };
            // A new session has spent nothing yet.
            if let Some(config) = record.config.as_object_mut() {
                config.insert("spent_usd".into(), json!(0.0));
            }
            self.store.create_session(&record).await?;
            (record, 0)
        };
        let (next, number) = self.go_live(record.clone(), handle)?;
        // The same CLI goes on: its next result's cost is a step from its last total.
        let total = live.projector.lock().map(|projector| projector.view().cost_usd).unwrap_or(0.0);
        if let Ok(mut projector) = next.projector.lock() {
            projector.continue_from_cost(total);
        }
        drop(writing);
        if let Ok(mut current) = self.relay_current.lock() {
            if current.as_deref() == Some(id) {
                *current = Some(next_id.clone());
            }
        }
        if existing {
            self.record_changed(&next);
        } else {
            let _ = self.dashboard.send(
                json!({"event": "session_created", "session": public_record(record.clone())}),
            );
        }
        self.started.notify_waiters();
        if old_stored {
            self.forget_if_finished(id, live);
        }
        Ok((next_id, next, number, last))
    }

    /// The live tail, end signal and store state of a running session (subscribed before the
    /// caller reads history, so nothing published afterwards is missed).
    fn attach(&self, id: &str) -> Option<Attached> {
        let live = self.live(id)?;
        let finished = live.finished.subscribe();
        let tail = {
            let mut tail = live.tail.lock().ok()?;
            if *finished.borrow() {
                return None;
            }
            tail.get_or_insert_with(|| broadcast::channel(LIVE_BUFFER).0).subscribe()
        };
        Some(Attached { tail, finished, store_error: live.store_error.subscribe(), _remote: None })
    }

    fn live(&self, id: &str) -> Option<Arc<LiveSession>> {
        self.sessions.lock().ok().and_then(|sessions| sessions.get(id).cloned())
    }

    /// The handle of a running session: `NotRunning` for a session that exists but is not
    /// running, `NotFound` for one that does not exist.
    pub async fn running(&self, id: &str) -> Result<SessionHandle, DaemonError> {
        match self.handle(id) {
            Ok(handle) => {
                self.check_still_ours(id).await?;
                Ok(handle)
            }
            Err(not_running) => match self.store.get_session(id).await? {
                Some(record)
                    if self.runs_elsewhere(&record)
                        && !matches!(record.state.as_str(), "exited" | "crashed") =>
                {
                    Err(self.elsewhere(&record))
                }
                Some(_) => Err(not_running),
                None => Err(DaemonError::NotFound(id.to_owned())),
            },
        }
    }

    /// On a node of a fleet, that its run of session `id` is still the session's run before
    /// anything is carried out by it: a node cut off from the bus (which the others may soon
    /// call lost, and take its sessions over) carries out nothing, and a run whose session
    /// another node took over (this node was called lost) ends. So an answer is never applied
    /// here once another node may have resumed the session and may ask it again. The bus is
    /// checked after the store's answer, so a slow database does not use up the margin.
    pub(crate) async fn check_still_ours(&self, id: &str) -> Result<(), DaemonError> {
        let Some(here) = &self.config.node else { return Ok(()) };
        let record = self.store.get_session(id).await?;
        if self.config.bus.as_ref().is_some_and(|bus| bus.cut_off()) {
            return Err(DaemonError::Busy(
                "this node is cut off from the bus, and the other nodes may take its sessions over: it carries out nothing for them until it is back".into(),
            ));
        }
        let Some(record) = record else { return Ok(()) };
        if record.node.as_ref() == Some(here) {
            return Ok(());
        }
        tracing::warn!(session = %id, node = ?record.node, "taken over by another node; its run here stops");
        if let Ok(handle) = self.handle(id) {
            tokio::spawn(async move {
                let _ = handle.shutdown(STOP_GRACE).await;
            });
        }
        Err(DaemonError::OtherNode(format!(
            "session {id} was taken over by node {}; its run on this node ends",
            record.node.as_deref().unwrap_or("(none)")
        )))
    }

    /// The refusal of what only the node that runs a session can do (its process, its files).
    fn elsewhere(&self, record: &SessionRecord) -> DaemonError {
        let node = record.node.as_deref().unwrap_or_default();
        DaemonError::OtherNode(format!(
            "session {} runs on node {node}, whose machine has its files and its CLI: do this there",
            record.id
        ))
    }

    /// The handle of a running session (`NotRunning` otherwise, whether it exists or not; see
    /// [`Daemon::running`]).
    pub fn handle(&self, id: &str) -> Result<SessionHandle, DaemonError> {
        self.live(id)
            .and_then(|live| live.handle())
            .ok_or_else(|| DaemonError::NotRunning(id.to_owned()))
    }

    /// A session's record (the live projection when running).
    pub async fn record(&self, id: &str) -> Result<Option<SessionRecord>, DaemonError> {
        match self.live_record(id) {
            Some(record) => Ok(Some(record)),
            None => Ok(self.store.get_session(id).await?),
        }
    }

    /// A session's record as the daemon holds it, while it does (a session that runs, or
    /// whose run ended but is not forgotten yet); the store has the others.
    pub fn live_record(&self, id: &str) -> Option<SessionRecord> {
        self.live(id).and_then(|live| current_record(&live))
    }

    /// Pending permission requests of a session (none when it is not running).
    pub fn pending_permissions(&self, id: &str) -> Vec<PendingPermission> {
        let pending =
            self.handle(id).map(|handle| handle.snapshot().pending_permissions).unwrap_or_default();
        self.with_started_by(id, pending)
    }

    /// `pending` (session `id`'s waiting requests, from its snapshot) with who started the
    /// turn of each.
    pub fn with_started_by(
        &self,
        id: &str,
        mut pending: Vec<PendingPermission>,
    ) -> Vec<PendingPermission> {
        if let Some(started) = self
            .live(id)
            .as_ref()
            .and_then(|live| live.started_by.lock().ok().map(|started| started.clone()))
        {
            for request in &mut pending {
                request.started_by = started.get(&request.request_id).cloned();
            }
        }
        pending
    }

    /// Stops a session gracefully (the record stays); with `purge`, deletes it and its log.
    pub async fn stop(&self, id: &str, purge: bool) -> Result<(), DaemonError> {
        // A session another node runs is stopped there first; one whose node is lost is
        // ended here (its CLI died with its node); without a bus, it is that node's to stop.
        if self.handle(id).is_err() {
            if let Some(mut record) = self.store.get_session(id).await? {
                let running = !matches!(record.state.as_str(), "exited" | "crashed");
                if running && self.owned_elsewhere(&record) {
                    if self.node_lost(&record) {
                        let here = self.config.node.as_deref().unwrap_or_default();
                        self.end_lost_run(&mut record, &format!("stopped on {here}")).await?;
                    } else if let (Some(node), Some(_)) = (record.node.clone(), &self.config.bus) {
                        self.forward(&node, id, &SessionCommand::Stop).await?;
                    } else {
                        return Err(self.elsewhere(&record));
                    }
                }
            }
        }
        self.stop_here(id, purge).await
    }

    /// Whether the session is (or was last) another node's, bus or not.
    fn owned_elsewhere(&self, record: &SessionRecord) -> bool {
        record.node.is_some() && record.node != self.config.node
    }

    /// Notes in a lost node's session that its run ended with the node (`then`: what happens
    /// next, said after it), and marks it exited. The record stays that node's (its worktree
    /// is on that node's machine), claimed for it first, so that of two nodes stopping or
    /// resuming it at once one does, and the other is told.
    async fn end_lost_run(
        &self,
        record: &mut SessionRecord,
        then: &str,
    ) -> Result<(), DaemonError> {
        self.claim(record, record.node.clone()).await?;
        let node = record.node.clone().unwrap_or_default();
        let last = self.store.last_seq(&record.id).await?;
        let payload = json!({
            "event": "exited", "code": null, "signal": null, "requested": false,
            "description": format!("node {node} was lost while this session ran; {then}"),
        });
        let note = event_record(&record.id, last + 1, "switchboard", "exited", payload.to_string());
        self.store.append(std::slice::from_ref(&note)).await?;
        record.state = "exited".into();
        record.updated_ms = now_ms();
        self.store.update_session(record).await?;
        self.announce(record);
        Ok(())
    }

    async fn stop_here(&self, id: &str, purge: bool) -> Result<(), DaemonError> {
        if self.store.get_session(id).await?.is_none() && self.live(id).is_none() {
            return Err(DaemonError::NotFound(id.to_owned()));
        }
        if let Ok(handle) = self.handle(id) {
            handle.shutdown(STOP_GRACE).await?;
            // Wait until the pump has stored the session's last events.
            if let Some(live) = self.live(id) {
                ended(&mut live.finished.subscribe()).await;
            }
        }
        if purge {
            if let Ok(mut sessions) = self.sessions.lock() {
                sessions.remove(id);
            }
            self.store.delete_session(id).await?;
            let _ = self.dashboard.send(json!({"event": "session_deleted", "session_id": id}));
        }
        Ok(())
    }

    /// Deletes a session with its record and log (stopping it first) and its worktree, if it
    /// has one: refused while the worktree has changes unless `force` (nothing is deleted
    /// then); its branch is deleted too when `delete_branch`.
    pub async fn delete(
        &self,
        id: &str,
        force: bool,
        delete_branch: bool,
    ) -> Result<(), DaemonError> {
        let record = self.record(id).await?.ok_or_else(|| DaemonError::NotFound(id.to_owned()))?;
        let tree = worktree_of(&record);
        // A worktree is on the machine of the node that ran the session: that node deletes
        // it; here, only a session that no longer runs there (stopped, or its node lost) is
        // deleted, its worktree left where it is.
        let tree = if tree.is_some() && self.owned_elsewhere(&record) {
            if !matches!(record.state.as_str(), "exited" | "crashed") && !self.node_lost(&record) {
                return Err(self.elsewhere(&record));
            }
            tracing::warn!(session = %id, "deleted on another node than its own: its worktree stays on that node's machine");
            None
        } else {
            tree
        };
        let _one_at_a_time = self.worktree_ops.lock().await;
        // Stopped first: nothing writes in the worktree while it is looked at.
        self.stop(id, false).await?;
        if let (Some(tree), false) = (&tree, force) {
            if tree.path.exists()
                && !crate::worktree::is_clean(tree).await.map_err(DaemonError::Worktree)?
            {
                return Err(DaemonError::Worktree(format!(
                    "session {id}'s worktree {} has changes; commit or discard them, or delete with force=true (the session is stopped; nothing was deleted)",
                    tree.path.display()
                )));
            }
        }
        if let Some(tree) = &tree {
            crate::worktree::remove(tree, force, delete_branch)
                .await
                .map_err(DaemonError::Worktree)?;
        }
        self.stop(id, true).await
    }

    /// The session's worktree, if it has one that is still there.
    async fn worktree(
        &self,
        id: &str,
    ) -> Result<(SessionRecord, crate::worktree::Worktree), DaemonError> {
        let record = self.record(id).await?.ok_or_else(|| DaemonError::NotFound(id.to_owned()))?;
        if self.runs_elsewhere(&record) {
            return Err(self.elsewhere(&record));
        }
        let tree = worktree_of(&record).ok_or_else(|| {
            DaemonError::Worktree(format!(
                "session {id} has no worktree (start one with \"worktree\": true)"
            ))
        })?;
        if !tree.path.exists() {
            return Err(DaemonError::Worktree(format!("session {id}'s worktree is gone")));
        }
        Ok((record, tree))
    }

    /// Commits the session's changes on its branch, with `message` (default: its title).
    pub async fn commit(&self, id: &str, message: Option<&str>) -> Result<Value, DaemonError> {
        let (record, tree) = self.worktree(id).await?;
        let message = match message.map(str::trim).filter(|message| !message.is_empty()) {
            Some(message) => message.to_owned(),
            None => record
                .title
                .clone()
                .unwrap_or_else(|| format!("Session {}", &id[..8.min(id.len())])),
        };
        if message.len() > 64 * 1024 || message.contains('\0') {
            return Err(DaemonError::Invalid("message is at most 64 KiB, without NUL".into()));
        }
        let _one_at_a_time = self.worktree_ops.lock().await;
        let commit =
            crate::worktree::commit(&tree, &message).await.map_err(DaemonError::Worktree)?;
        Ok(json!({"commit": commit, "branch": tree.branch, "message": message}))
    }

    /// Merges the session's branch into the branch it started from.
    pub async fn merge(
        &self,
        id: &str,
        mode: crate::worktree::MergeMode,
    ) -> Result<Result<Value, crate::worktree::MergeRefused>, DaemonError> {
        let (_, tree) = self.worktree(id).await?;
        let _one_at_a_time = self.worktree_ops.lock().await;
        Ok(crate::worktree::merge(&tree, mode).await.map(
            |commit| json!({"commit": commit, "into": tree.base_branch, "branch": tree.branch}),
        ))
    }

    /// Pushes the session's branch to the repository's remote `remote`.
    pub async fn push(&self, id: &str, remote: &str) -> Result<Value, DaemonError> {
        // A remote that is not a name is a bad request, whatever the session's worktree.
        if !crate::text::is_name(remote) {
            return Err(DaemonError::Invalid(format!(
                "remote is a remote's name (1-64 letters, digits, '.', '_', '-'), not {:?}",
                remote.chars().take(65).collect::<String>()
            )));
        }
        let (_, tree) = self.worktree(id).await?;
        let _one_at_a_time = self.worktree_ops.lock().await;
        let pull_request_url =
            crate::worktree::push(&tree, remote).await.map_err(DaemonError::Worktree)?;
        Ok(json!({"remote": remote, "branch": tree.branch, "pull_request_url": pull_request_url}))
    }

    /// The files the session's tools changed, as its live view has them (empty for a
    /// session whose CLI is not running).
    pub fn touched_files(&self, id: &str) -> Vec<String> {
        self.live(id)
            .and_then(|live| {
                live.projector.lock().ok().map(|projector| projector.view().touched_files.clone())
            })
            .unwrap_or_default()
    }

    /// Reads the session's directory for the Files view ([`crate::browse`]): off the async
    /// threads, within [`BROWSE_TIMEOUT`].
    pub async fn browse<T: Send + 'static>(
        &self,
        id: &str,
        read: impl FnOnce(
                &std::path::Path,
                &[String],
                crate::browse::Refuse<'_>,
            ) -> Result<T, crate::browse::BrowseError>
            + Send
            + 'static,
    ) -> Result<Result<T, crate::browse::BrowseError>, DaemonError> {
        let record = self.record(id).await?.ok_or_else(|| DaemonError::NotFound(id.to_owned()))?;
        if self.runs_elsewhere(&record) {
            return Err(self.elsewhere(&record));
        }
        let root = std::path::PathBuf::from(&record.cwd);
        let touched = self.touched_files(id);
        // What the session's own policy denies to Read is not shown either, nor the daemon's
        // data directory, nor the kernel's own trees.
        let policy = match record.config.get("policy").and_then(Value::as_str) {
            Some(text) => load_policy(text).await?,
            None => self.config.default_policy.clone().unwrap_or_default(),
        };
        let private = self.config.data_dir.clone();
        let Ok(permit) = crate::browse::READERS.try_acquire() else {
            return Err(DaemonError::Busy(format!(
                "{} reads of session directories are under way: try again",
                crate::browse::MAX_READERS
            )));
        };
        let reading = tokio::task::spawn_blocking(move || {
            // Held until the read is done, even past the time limit below.
            let _permit = permit;
            let refuse = crate::refusals::Refusals::new(&root, private.as_deref(), policy);
            read(&root, &touched, &|path, id| refuse.refuses(path, id))
        });
        match tokio::time::timeout(BROWSE_TIMEOUT, reading).await {
            Ok(Ok(found)) => Ok(found),
            Ok(Err(_)) | Err(_) => Err(DaemonError::Busy(format!(
                "session {id}'s directory took more than {} s to read",
                BROWSE_TIMEOUT.as_secs()
            ))),
        }
    }

    /// Whether the session's CLI is in a turn (its tools may be changing files).
    fn is_working(&self, id: &str) -> bool {
        self.handle(id).ok().map(|handle| handle.snapshot().state).is_some_and(|state| {
            matches!(
                state,
                SessionState::Working | SessionState::AwaitingPermission | SessionState::Compacting
            )
        })
    }

    /// Puts the files the session's tools changed back as they were before the prompt
    /// `message` (its `uuid`), through the CLI's file checkpoints (`rewind_files`); with
    /// `dry_run`, only says what would change. The conversation is not changed: fork it at
    /// the same message for that (`resume_at`).
    pub async fn rewind(
        &self,
        id: &str,
        message: &str,
        dry_run: bool,
    ) -> Result<Rewind, DaemonError> {
        let valid = !message.is_empty()
            && message.len() <= 100
            && message.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
        if !valid {
            return Err(DaemonError::Invalid(
                "message must be a prompt's uuid (letters, digits and -)".to_owned(),
            ));
        }
        let handle = self.running(id).await?;
        if !dry_run && self.is_working(id) {
            return Err(DaemonError::Rewind(format!(
                "session {id} is working: interrupt it first, then rewind"
            )));
        }
        let success = match handle.rewind_files(message, dry_run).await {
            Ok(success) => success,
            Err(switchboard_session::SessionError::Control(failure)) => {
                return Err(DaemonError::Rewind(format!("the CLI cannot rewind: {failure}")))
            }
            Err(error) => return Err(error.into()),
        };
        let answer: switchboard_protocol::control::RewindFilesResponse =
            success.payload().and_then(Result::ok).unwrap_or_default();
        let mut rewind = Rewind {
            can_rewind: answer.can(),
            dry_run,
            files_changed: None,
            files: None,
            insertions: None,
            deletions: None,
            reason: answer.error.as_ref().map(|error| error.chars().take(500).collect()),
        };
        if dry_run {
            rewind.files_changed = answer.count();
            rewind.files = answer
                .files()
                .map(|paths| paths.into_iter().take(MAX_REWIND_PATHS).map(str::to_owned).collect());
            rewind.insertions = answer.insertions;
            rewind.deletions = answer.deletions;
        }
        if !dry_run && !rewind.can_rewind {
            let reason = rewind.reason.as_deref().unwrap_or("it says it cannot");
            return Err(DaemonError::Rewind(format!("the CLI cannot rewind: {reason}")));
        }
        Ok(rewind)
    }

    /// Puts the session's worktree back at its base commit.
    pub async fn discard(&self, id: &str) -> Result<(), DaemonError> {
        let (_, tree) = self.worktree(id).await?;
        // Not under Claude's feet.
        if self.is_working(id) {
            return Err(DaemonError::Worktree(format!(
                "session {id} is working: interrupt it first, then discard"
            )));
        }
        let _one_at_a_time = self.worktree_ops.lock().await;
        crate::worktree::discard(&tree).await.map_err(DaemonError::Worktree)
    }

    /// The session's whole change in its worktree ([`crate::worktree::diff`]).
    pub async fn diff(&self, id: &str) -> Result<Value, DaemonError> {
        let (_, tree) = self.worktree(id).await?;
        let files = crate::worktree::diff(&tree).await.map_err(DaemonError::Worktree)?;
        Ok(json!({
            "base": tree.base, "branch": tree.branch, "base_branch": tree.base_branch,
            "path": tree.path, "files": files,
        }))
    }

    /// Every event of a session after `after`, then the live tail, with no gap and no
    /// duplicate. The subscription runs in the caller's task (no task or queue of its own).
    pub fn subscribe(self: &Arc<Self>, id: &str, after: u64) -> Subscription {
        Subscription {
            daemon: self.clone(),
            id: id.to_owned(),
            sent: after,
            tail: None,
            backlog: std::collections::VecDeque::new(),
            need_history: true,
            done: false,
        }
    }

    /// The daemon's phase, for client sockets to follow.
    pub fn phase(&self) -> watch::Receiver<Phase> {
        self.phase.subscribe()
    }

    /// Shuts the daemon's sessions down: tells every client socket ([`Phase::Draining`]),
    /// stops every session and waits until its last events are stored, then closes the
    /// sockets ([`Phase::Closed`]). New sessions are refused from the start.
    pub async fn drain(&self) {
        self.phase.send_replace(Phase::Draining);
        self.stop_all().await;
        self.phase.send_replace(Phase::Closed);
    }

    /// How the warm CLIs stand, per [`WarmSpec`].
    pub fn warm_status(&self) -> Vec<WarmStatus> {
        self.warm.status()
    }

    /// Follows [`Daemon::warm_status`].
    pub fn watch_warm(&self) -> watch::Receiver<Vec<WarmStatus>> {
        self.warm.watch()
    }

    /// Stops every running session and waits until each one's last events are stored, and
    /// ends the warm CLIs (for shutting the daemon down).
    pub async fn stop_all(&self) {
        let ids: Vec<String> = self
            .sessions
            .lock()
            .map(|sessions| sessions.keys().cloned().collect())
            .unwrap_or_default();
        // Only what runs here: a session this node holds a stale copy of is another node's.
        let stops = ids.iter().map(|id| async move {
            if let Err(error) = self.stop_here(id, false).await {
                tracing::warn!(session = %id, %error, "stopping the session failed");
            }
        });
        futures::future::join(self.warm.close(), futures::future::join_all(stops)).await;
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // A daemon dropped without `stop_all` (one that failed to open, a test's) ends its warm
        // CLIs all the same.
        self.warm.close_now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> SessionRecord {
        SessionRecord {
            archived: false,
            node: None,
            id: "s".into(),
            claude_session_id: None,
            cwd: "/".into(),
            model: None,
            permission_mode: None,
            state: "starting".into(),
            title: None,
            cost_usd: 0.0,
            created_ms: 0,
            updated_ms: 0,
            config: Value::Null,
        }
    }

    #[test]
    fn a_finishing_run_never_ends_the_run_after_it() {
        let live = LiveSession::new(record());
        let first = live.begin(None).unwrap();
        assert!(!*live.finished.borrow());
        // A resume begins the next run while the first run's pump is still finishing.
        let second = live.begin(None).unwrap();
        assert_eq!((first, second), (1, 2));
        // The first pump's end changes nothing: the second run goes on.
        assert!(!live.end(first));
        assert!(!*live.finished.borrow(), "the resumed run was marked finished");
        assert_eq!(live.run_number(), second);
        // Its own end does end it, once.
        assert!(live.end(second));
        assert!(*live.finished.borrow());
        assert!(!live.end(first));
    }

    #[test]
    fn daemon_failures_are_server_errors_not_the_callers() {
        let internal = crate::ApiError::from(DaemonError::Internal("poisoned".into()));
        assert_eq!(internal.status, axum::http::StatusCode::INTERNAL_SERVER_ERROR);
        let store = crate::ApiError::from(DaemonError::Store(StoreError::Closed));
        assert_eq!(store.status, axum::http::StatusCode::INTERNAL_SERVER_ERROR);
        let draining = crate::ApiError::from(DaemonError::ShuttingDown);
        assert_eq!(draining.status, axum::http::StatusCode::SERVICE_UNAVAILABLE);
    }
}
