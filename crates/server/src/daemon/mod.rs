//! The daemon's sessions: starting and resuming them, pumping their events into the store and
//! out to subscribers, and the session records as projections of those events.
//!
//! For each live session a pump, called in the session actor's own task (an [`EventSink`]),
//! takes the session's events in order, gives each the next sequence number, appends them to
//! the store in batches, and only then publishes them.
//! [`Daemon::subscribe`] reads history from the store and then follows the live tail, so a
//! subscriber sees every event exactly once, in order, however it joins or falls behind.
//!
//! This file is the registry: [`Daemon`], opening it, and a session's life (create, resume,
//! start, run, stop, delete, subscribe; resuming is `resume`). What every part uses sits beside it (`launch`,
//! `error`, `live`, `subscription`, `pump`, `notices`, `record`), and each feature is a part of
//! its own with its own `impl Daemon` block (`budget`, `channels`, `fleet`, `relay`, `runs`,
//! `terminal`, `waiting`, `workspace`). The parts see each other through this file; a new
//! feature adds a part, not methods here.
//!
//! `create` and `resume` append a `started` event first: a log that cannot be written refuses
//! the session before any CLI runs. On open the daemon ends what a killed predecessor left
//! (`runs`), and sessions the store shows as running on this node get an `exited` event
//! (the record first, so a session another node took over meanwhile is left alone).

use parking_lot::Mutex;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use switchboard_protocol::PermissionMode;
use switchboard_session::{
    EventSink, LineDirection, PendingPermission, Policy, SessionConfig, SessionEvent,
    SessionEvents, SessionHandle, SessionState, SinkFuture, WarmCli, WarmPool, WarmStatus,
};
use switchboard_store::{
    now_ms, Claim, EventRecord, RecordState, SessionRecord, Store, StoreError,
};
use tokio::sync::{broadcast, mpsc, watch, Notify};

use crate::changes::Change;
use crate::text::invisible;

mod audit;
mod budget;
mod channels;
mod controls;
mod error;
mod external;
mod fleet;
mod launch;
mod live;
mod measures;
mod notices;
mod observers;
mod parked;
mod pump;
mod record;
mod relay;
mod resume;
mod runs;
mod schedules;
mod search;
mod subscription;
mod terminal;
mod traces;
mod trial;
mod triggers;
mod turn_usage;
mod unsettled;
mod usage;
mod view_checkpoints;
mod waiting;
mod workspace;

pub use crate::create::{check_window_cap, CreateSession};
pub use error::*;
pub use external::ExternalHello;
pub use launch::*;
pub use live::*;
use notices::*;
use observers::*;
use parked::is_parked;
use pump::*;
pub use record::Amend;
pub use record::*;
pub use schedules::{QueueEntry, RunSession, ScheduleList, ScheduleView, WaitingRun};
pub use subscription::*;
pub use trial::{TrialFilter, TrialProgress, TrialSlot};
pub use triggers::{Delivered, Delivery, DELIVERY_WITHIN, MAX_DELIVERY_BYTES};
pub use turn_usage::{SessionUsage, TurnUsage, MAX_USAGE_TURNS};
pub(crate) use view_checkpoints::Keeping;
pub use view_checkpoints::MAX_EVENTS_PAGE;
pub use workspace::Rewind;

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
    dashboard: broadcast::Sender<crate::changes::DashboardChange>,
    /// Woken whenever a session (re)starts, for subscribers waiting on a stopped one.
    started: Notify,
    /// The version of the CLI this node runs by default, once known (told to the other
    /// nodes in its heartbeat).
    cli_version: std::sync::OnceLock<String>,
    /// Claude Code's own transcripts.
    transcripts: crate::transcripts::Transcripts,
    /// Checkpoints of sessions' views, for pages of long sessions.
    view_checkpoints: crate::checkpoints::Checkpoints,
    /// Where `--sdk-url` CLIs connect, by slot id.
    ingress: Arc<Mutex<HashMap<String, Arc<switchboard_transport::sdk_url::IngressSlot>>>>,
    /// The agents-ui relay protocol's relay: raw lines of relay-connected CLIs and status lines, for `/ws`.
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
    /// The account's usage windows, as sessions last reported them (shared with the fleet's
    /// nodes where the budgets are).
    usage: crate::usage::Usage,
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
    /// Projections of sessions other nodes run, for what waits in them ([`Daemon::waiting`]).
    remote_views: waiting::RemoteViews,
    /// The keys terminal sessions' hooks ask with ([`crate::hooks`]).
    hook_keys: crate::hook_keys::HookKeys,
    /// The sessions Switchboard did not start but follows through their hooks.
    externals: crate::externals::Externals,
    /// The one-time codes that sign a device in (`switchboard pair`).
    pair_codes: crate::pair_codes::PairCodes,
    /// Told of each stored batch, in order ([`observers`]).
    observers: Vec<Box<dyn Observer>>,
    /// What `/metrics` shows ([`crate::metrics`], [`measures`]).
    metrics: Arc<crate::metrics::Metrics>,
    /// Records waiting for the audit trail's writer ([`audit::write_audit`]).
    audit_queue: mpsc::UnboundedSender<audit::AuditWaiting>,
    /// What waits for the search index's writer ([`search::write_index`]).
    indexer: search::Indexer,
    /// The checkpoints of sessions' views stored beside their logs: their writer's queue and
    /// the catch-ups ([`view_checkpoints`]).
    stored_checkpoints: view_checkpoints::StoredCheckpoints,
    /// The last few sessions' turns read for `GET …/usage` ([`turn_usage`]).
    usage_digests: turn_usage::Digests,
    /// Where the turns' spans go, when they are sent ([`crate::traces`]).
    traces: Option<crate::traces::Traces>,
    /// The schedules and triggers, with their state ([`crate::schedules::book`]).
    books: crate::schedules::book::Books,
    /// Held by the dry run going on ([`Daemon::trial`]): one at a time.
    trials: Arc<tokio::sync::Mutex<()>>,
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
        let (audit_queue, audit_waiting) = mpsc::unbounded_channel();
        let (stored_checkpoints, checkpoint_receivers) = view_checkpoints::StoredCheckpoints::new();
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
        let metrics = Arc::new(crate::metrics::Metrics::new());
        let notifier = crate::notify::Notifier::start(
            &config.notify,
            store.clone(),
            notifying_watch,
            config.links.public_url.as_deref(),
            metrics.clone(),
        )
        .await
        .map_err(DaemonError::Invalid)?;
        if let Some(daily) = config.budget.daily_usd {
            crate::budget::check_limit("the daily budget", daily).map_err(DaemonError::Invalid)?;
        }
        let budgets =
            crate::budget::Budgets::open(&config.budget).await.map_err(DaemonError::Invalid)?;
        let usage = crate::usage::Usage::open(config.budget.shared.clone())
            .await
            .map_err(DaemonError::Invalid)?;
        // The book of schedules: the fleet's shared document, or this daemon's file.
        let book_store: Arc<dyn switchboard_store::Documents> =
            match (&config.budget.shared, &config.data_dir) {
                (Some(shared), _) => shared.clone(),
                (None, Some(dir)) => Arc::new(crate::shared::FileDocuments::new(dir)),
                (None, None) => Arc::new(switchboard_store::MemoryStore::new()),
            };
        let books = crate::schedules::book::Books::open(book_store, config.budget.shared.is_some())
            .await
            .map_err(DaemonError::Invalid)?;
        let traces = match &config.traces {
            Some(options) => Some(
                crate::traces::Traces::start(options, config.node.as_deref())
                    .map_err(DaemonError::Invalid)?,
            ),
            None => None,
        };
        let daemon = Arc::new_cyclic(|me: &std::sync::Weak<Daemon>| Daemon {
            worktree_ops: tokio::sync::Mutex::new(()),
            watchers: Arc::default(),
            starting: Arc::default(),
            decisions: crate::decisions::Decisions::default(),
            peers: std::sync::OnceLock::new(),
            relay_births: Mutex::new(crate::relay_limits::Window::new(Duration::from_secs(60))),
            remote_views: waiting::RemoteViews::default(),
            hook_keys: crate::hook_keys::HookKeys::default(),
            externals: crate::externals::Externals::default(),
            pair_codes: crate::pair_codes::PairCodes::default(),
            // After-store observers, in the order they hear of a batch.
            observers: vec![
                Box::new(notices::Notices),
                Box::new(budget::Budgets),
                Box::new(usage::UsageWindows),
                Box::new(relay::RelayFrontends),
                Box::new(parked::Parking),
                Box::new(schedules::RunEnds),
                Box::new(measures::Measures),
                Box::new(audit::Audits),
                Box::new(search::Indexing),
                Box::new(traces::Tracing),
                Box::new(pump::Records),
            ],
            metrics,
            audit_queue,
            indexer: search::Indexer::default(),
            stored_checkpoints,
            usage_digests: turn_usage::Digests::default(),
            traces,
            budgets,
            usage,
            books,
            trials: Arc::new(tokio::sync::Mutex::new(())),
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
            view_checkpoints: Default::default(),
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
        tokio::spawn(audit::write_audit(Arc::downgrade(&daemon), audit_waiting));
        tokio::spawn(search::write_index(Arc::downgrade(&daemon)));
        tokio::spawn(search::rebuild_index(Arc::downgrade(&daemon)));
        view_checkpoints::StoredCheckpoints::start(&daemon, checkpoint_receivers);
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
                let changed = {
                    let mut lost = lost.lock();
                    std::mem::replace(&mut *lost, now_lost.clone()) != now_lost
                };
                if changed {
                    daemon.tell_dashboards(Change::NodesChanged { lost: now_lost });
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
                    instance: daemon.config.bus.as_ref()?.instance().to_owned(),
                    cli_version: daemon.cli_version.get().cloned(),
                })
            });
            // Another daemon already beating under this name would have its sessions taken
            // for this one's leftovers below: refused, before anything is touched.
            if let Some(other) = bus.namesake(bus.heartbeat() * 2).await {
                let since = httpdate::fmt_http_date(
                    std::time::UNIX_EPOCH + Duration::from_millis(other.started_ms),
                );
                let at = other.url.map(|url| format!(" at {url}")).unwrap_or_default();
                return Err(DaemonError::Invalid(format!(
                    "another daemon runs as node {:?} on this bus{at} (up since {since}, by its clock); give this one a name of its own with --node, or stop that one first",
                    bus.node()
                )));
            }
        }
        daemon.end_leftovers().await;
        daemon.watch_parked_sessions().await?;
        let mut ended = Vec::new();
        for mut record in daemon.store.list_sessions().await? {
            // Another node's sessions are that node's to end (several daemons on one
            // database).
            if record.state.is_final() || record.node != daemon.config.node {
                continue;
            }
            // The record first: if another node took the session over meanwhile (this one
            // was lost), it is that node's now, and nothing of it is written here.
            // The log's end before the record: a note that races a takeover is then refused.
            let last = daemon.store.last_seq(&record.id).await?;
            record.state = RecordState::Exited;
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
                Ok(()) => {
                    ended.push(record.id.clone());
                    daemon.audit_ended(&record.id, "the daemon stopped while it ran".into()).await;
                }
                // Another node appended first (it took the session over just now): its log.
                Err(StoreError::OutOfSequence { .. }) => {}
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
        daemon.resume_answered(ended).await;
        daemon.start_scheduler();
        Ok(daemon)
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Checkpoints of sessions' views ([`crate::checkpoints`]).
    pub fn view_checkpoints(&self) -> &crate::checkpoints::Checkpoints {
        &self.view_checkpoints
    }

    /// Sends a person's message to a running session, on whichever node runs it. One typed
    /// into a terminal ([`Daemon::attach_terminal`]) must be text a terminal can take, and is
    /// refused here, with the reason, if not.
    pub async fn send_message(
        &self,
        id: &str,
        message: switchboard_protocol::UserMessage,
        by: switchboard_session::Sender,
    ) -> Result<(), DaemonError> {
        self.command(id, SessionCommand::Message { message, by: by.who, origin: by.origin }).await
    }

    /// Answers a permission request of a running session, on whichever node runs it.
    pub async fn respond_permission(
        self: &Arc<Self>,
        id: &str,
        request_id: &str,
        answer: switchboard_session::PermissionAnswer,
        by: &str,
    ) -> Result<(), DaemonError> {
        // An answer in the moment a CLI that parked the request has gone (its run not yet
        // ended) finds the request parked once the run's last events are stored.
        self.run_ending(id).await;
        if let Some(pending) = self.parked(id, request_id).await? {
            return self.answer_parked(id, pending, answer, by).await;
        }
        let command = SessionCommand::Answer {
            request_id: request_id.to_owned(),
            answer: answer.clone(),
            by: by.to_owned(),
        };
        match self.command(id, command).await {
            // Parked just now, here: once its CLI has ended, it is answered as any parked
            // request, and the answer resumes it.
            Err(DaemonError::Session(switchboard_session::SessionError::Answer(
                switchboard_session::AnswerError::Parked(_),
            ))) if self.live(id).is_some() => {
                self.parked_cli_ended(id).await?;
                let pending = self.parked(id, request_id).await?.ok_or_else(|| {
                    DaemonError::Session(switchboard_session::SessionError::Answer(
                        switchboard_session::AnswerError::Unknown(request_id.to_owned()),
                    ))
                })?;
                self.answer_parked(id, pending, answer, by).await
            }
            other => other,
        }
    }

    /// Interrupts a running session's turn, on whichever node runs it; with `cancel_queued`,
    /// also drops every prompt still queued behind it.
    pub async fn interrupt(&self, id: &str, cancel_queued: bool) -> Result<(), DaemonError> {
        self.command(id, SessionCommand::Interrupt { cancel_queued }).await
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
        if let Some(record) = self.record(id).await? {
            crate::ceiling::check_mode(&record.launch, mode.as_str())
                .map_err(DaemonError::Forbidden)?;
        }
        self.command(id, SessionCommand::SetMode { mode }).await
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
        self.sessions.lock().values().filter(|live| live.handle().is_some()).count()
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

    /// The keys terminal sessions' hooks ask with ([`crate::hooks`]).
    pub fn hook_keys(&self) -> &crate::hook_keys::HookKeys {
        &self.hook_keys
    }

    /// The followers' places and byte budget ([`crate::watchers`]).
    pub fn watchers(&self) -> &Arc<crate::watchers::Watchers> {
        &self.watchers
    }

    /// Notifications and push subscriptions.
    pub fn notifier(&self) -> &crate::notify::Notifier {
        &self.notifier
    }

    /// The one-time codes that sign a device in.
    pub fn pair_codes(&self) -> &crate::pair_codes::PairCodes {
        &self.pair_codes
    }

    /// The address the daemon's links name (`serve --public-url`, else where it listens).
    pub fn public_url(&self) -> Option<&str> {
        self.config.links.public_url.as_deref()
    }

    /// Claude Code's own transcripts.
    pub fn transcripts(&self) -> &crate::transcripts::Transcripts {
        &self.transcripts
    }

    /// The id of a running session of this daemon that continues the Claude session
    /// `claude_session_id`.
    pub async fn running_for_claude_session(&self, claude_session_id: &str) -> Option<String> {
        let live: Vec<Arc<LiveSession>> = self.sessions.lock().values().cloned().collect();
        live.into_iter().find_map(|live| {
            // The record's lock is let go before the run's is taken: `LiveSession::begin` takes
            // them the other way round.
            let id = {
                let record = live.record.lock();
                (record.claude_session_id.as_deref() == Some(claude_session_id))
                    .then(|| record.id.clone())
            };
            live.handle()?;
            id
        })
    }

    /// Session-level changes across all sessions (created, state, cost, permission pending).
    pub fn dashboard(&self) -> broadcast::Receiver<crate::changes::DashboardChange> {
        self.dashboard.subscribe()
    }

    /// Starts a new session.
    pub async fn create(
        self: &Arc<Self>,
        request: CreateSession,
    ) -> Result<SessionRecord, DaemonError> {
        self.check_serving()?;
        if let Some(cap) = request.launch.max_window_utilization {
            check_window_cap(cap).map_err(DaemonError::Invalid)?;
        }
        if let Some(version) = &request.launch.cli_version {
            if !is_version(version) {
                return Err(DaemonError::Invalid(format!(
                    "cli_version {:?} is not a version (digits and dots, like 2.1.330)",
                    version.chars().take(70).collect::<String>()
                )));
            }
            if request.launch.claude.is_some() {
                return Err(DaemonError::Invalid(
                    "give claude (the program) or cli_version (a node whose CLI is that version), not both".into(),
                ));
            }
        }
        if let Some(node) = self.place(&request)? {
            return self.create_on(&node, request).await;
        }
        if let Some(wanted) = &request.launch.cli_version {
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
        if let Some(claude) = &request.resume {
            let what = if request.fork { "fork it" } else { "resume it" };
            self.one_writer(claude, what).await?;
            if !request.fork {
                self.parked_holder(claude, None).await?;
            }
        }
        if let Some(max) = request.launch.max_budget_usd {
            crate::budget::check_limit("max_budget_usd", max).map_err(DaemonError::Invalid)?;
        }
        if request.launch.mcp_config.len() > MAX_MCP_CONFIGS {
            return Err(DaemonError::Invalid(format!(
                "mcp_config has {} entries; at most {MAX_MCP_CONFIGS}",
                request.launch.mcp_config.len()
            )));
        }
        if request.launch.notify.as_ref().is_some_and(Vec::is_empty) {
            return Err(DaemonError::Invalid(
                "notify names no channel; name at least one, or leave it out".into(),
            ));
        }
        self.daily_limit(request.started_by.as_ref().map(|by| by.who.as_str()))?;
        let id = uuid::Uuid::new_v4().to_string();
        let mut launch = request.launch.clone();
        launch.origin = request.origin.clone();
        if request.worktree {
            if !request.launch.cwd.is_absolute() || !request.launch.cwd.is_dir() {
                return Err(DaemonError::Invalid(format!(
                    "cwd {} is not an absolute path of a directory",
                    request.launch.cwd.display()
                )));
            }
            let (tree, cwd) = crate::worktree::create(&request.launch.cwd, &id[..8])
                .await
                .map_err(DaemonError::Invalid)?;
            launch.cwd = cwd;
            launch.worktree = Some(tree);
        }
        // Boxed: a launch is large, and every face awaits a create.
        let made = Box::pin(self.create_in(id, request, launch.clone())).await;
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
        let record = SessionRecord {
            claude_session_id: request.resume.clone().filter(|_| !request.fork),
            cwd: launch.cwd.display().to_string(),
            model: request.launch.model.clone(),
            permission_mode: request.launch.permission_mode.clone(),
            title: request.prompt.as_deref().map(switchboard_session::projection::title_of),
            ..self.new_record(&id, launch.clone())
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
        self.tell_created(&record);
        // The log's first event, before any CLI runs: a log that cannot be written refuses the
        // session here, not after it started.
        let started = async {
            self.note_started(&id, 0, false, warmed, false).await?;
            let prompt = request.prompt.clone().map(|text| (text, request.started_by.clone()));
            self.start(record.clone(), config, transport, warm, 1, prompt).await
        };
        if let Err(error) = started.await {
            let _ = self.store.delete_session(&id).await;
            self.tell_dashboards(Change::SessionDeleted { session_id: id });
            return Err(error);
        }
        Ok(self.record(&id).await?.unwrap_or(record))
    }

    /// Refuses to start anything once the daemon drains.
    fn check_serving(&self) -> Result<(), DaemonError> {
        match *self.phase.borrow() {
            Phase::Serving => Ok(()),
            _ => Err(DaemonError::ShuttingDown),
        }
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
        let policy = crate::ceiling::bound(request, policy).map_err(DaemonError::Forbidden)?;
        let mut config = SessionConfig::new(&request.cwd, policy);
        // The daemon's CLI (its program, environment rules and env), then the request's.
        let node = self.node_cli();
        config.cli.program = request.claude.clone().or(node.program);
        config.cli.clear_env = node.clear_env;
        config.cli.env.extend(node.env);
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
        } else {
            // No mode asked: `default`, pinned. A CLI left to choose starts in the mode the
            // person's own settings name (`permissions.defaultMode`: `acceptEdits`, `auto`,
            // even `bypassPermissions`), where calls the policy would have sent to a person
            // run without one. Every CLI version takes `default`.
            config.cli.permission_mode = Some(PermissionMode::Default);
        }
        // Every face stops a background task alone (StopTask, the web UI's list of them), so an
        // interrupt stops the turn and leaves background work running.
        config.initialize = Some(switchboard_protocol::control::InitializeRequest {
            per_task_stop_affordance: Some(true),
            // What the person might type next, offered under the answer.
            prompt_suggestions: Some(true),
            ..Default::default()
        });
        // The daemon lets a parked session's CLI go and resumes it with the answer.
        config.parkable = true;
        config.cli.resume = resume;
        config.cli.fork_session = fork;
        config.cli.resume_session_at = resume_at;
        config.cli.allowed_tools = request.allowed_tools.clone();
        config.cli.disallowed_tools = request.disallowed_tools.clone();
        config.cli.system_prompt = request.system_prompt.clone();
        config.cli.append_system_prompt = request.append_system_prompt.clone();
        config.cli.max_turns = request.max_turns;
        config.cli.mcp_config = request.mcp_config.clone();
        let transport = match request.transport {
            None | Some(TransportKind::Stdio) => Transport::Stdio,
            Some(TransportKind::SdkUrl) => {
                let base = self.config.ingress_base.clone().ok_or_else(|| {
                    DaemonError::Invalid(
                        "this daemon has no address for --sdk-url CLIs to connect to".into(),
                    )
                })?;
                Transport::SdkUrl { base }
            }
            Some(other) => {
                return Err(DaemonError::Invalid(format!(
                    "transport {:?} is not one a daemon launches (stdio or sdk-url)",
                    other.as_str()
                )));
            }
        };
        Ok((config, transport))
    }

    /// A request's `env`: names that are names, values without NUL, and no loader variable
    /// the daemon does not allow.
    fn check_env(
        &self,
        env: &std::collections::BTreeMap<String, String>,
    ) -> Result<(), DaemonError> {
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
        self.audit_started(id, resumed).await;
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
                    self.ingress.lock().insert(slot.id.clone(), slot);
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
        if live.record.lock().launch.relay {
            self.set_relay_current(Some(id.clone()));
            self.relay_publish(&relay_status("claude code connected")).await;
        }
        *live.route.lock() = route;
        events.hand_to(Box::new(Pump::new(self.clone(), id, live, number, last_seq, run)));
        self.started.notify_waiters();
        // The first prompt carries its sender, as every message does (a new run's core starts
        // with none: a resumed CLI's turns are not the last run's sender's).
        if let Some((prompt, by)) = prompt {
            handle.send_message_from(switchboard_protocol::UserMessage::prompt(prompt), by).await?;
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
            let mut sessions = self.sessions.lock();
            // Checked under the lock `stop_all` lists sessions under: a session either goes
            // live before a drain lists it (and is stopped), or is refused here.
            if handle.is_some() && *self.phase.borrow() != Phase::Serving {
                return Err(DaemonError::ShuttingDown);
            }
            let live = sessions
                .entry(record.id.clone())
                .or_insert_with(|| Arc::new(LiveSession::new(record.clone())))
                .clone();
            *live.record.lock() = record;
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
        let mut sessions = self.sessions.lock();
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
        let record = current_record(live);
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
        self.tell_dashboards(Change::SessionChanged(crate::changes::SessionChanged {
            session_id: record.id.clone(),
            state: record.state,
            cost_usd: record.cost_usd,
            pending_permissions: pending,
            model: record.model.clone(),
            claude_session_id: record.claude_session_id.clone(),
            permission_mode: record.permission_mode.clone(),
            title: record.title.clone(),
            archived: record.archived,
            disconnected_since_ms,
            node: record.node.clone(),
            paused: self.paused(&record.id),
        }));
    }

    /// Tells the dashboards (and, in a fleet, the other nodes) of `change`.
    pub(super) fn tell_dashboards(&self, change: Change) {
        let _ = self.dashboard.send(change.into());
    }

    /// Tells the dashboards a session was made, once the store has its record and before its
    /// CLI runs: a dashboard hears `session_created` before any `session_changed` of it.
    pub(super) fn tell_created(&self, record: &SessionRecord) {
        // Its log starts here: its search index is whole from its first event.
        self.indexer.made(&record.id);
        self.tell_dashboards(Change::SessionCreated { session: public_record(record.clone()) });
    }

    /// A person renames a session, puts it away, or changes its budget (`None`: unchanged;
    /// a budget of `Some(None)` is removed). A title is trimmed, must not be empty, and is
    /// kept to [`MAX_TITLE_CHARS`] characters. A session paused at its budget goes on once
    /// the new one allows it (and one over the new budget pauses).
    pub async fn amend(
        self: &Arc<Self>,
        id: &str,
        amend: &Amend,
    ) -> Result<SessionRecord, DaemonError> {
        let Amend { archived, max_budget_usd, max_window_utilization, .. } = *amend;
        if amend.is_empty() {
            return Err(DaemonError::Invalid(
                "give `title`, `archived`, `max_budget_usd`, `max_window_utilization`, or several"
                    .into(),
            ));
        }
        if let Some(Some(max)) = max_budget_usd {
            crate::budget::check_limit("max_budget_usd", max).map_err(DaemonError::Invalid)?;
        }
        if let Some(Some(cap)) = max_window_utilization {
            check_window_cap(cap).map_err(DaemonError::Invalid)?;
        }
        let title = match amend.title.as_deref().map(str::trim) {
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
            if let Some(max) = max_budget_usd {
                record.launch.max_budget_usd = max;
            }
            if let Some(cap) = max_window_utilization {
                record.launch.max_window_utilization = cap;
            }
        };
        let _writing = self.record_writes.lock().await;
        if let Some(live) = self.live(id) {
            let record = {
                let mut record = live.record.lock();
                change(&mut record);
                record.clone()
            };
            self.store.update_session(&record).await?;
            self.announce(&record);
            let limits = max_budget_usd.is_some() || max_window_utilization.is_some();
            if limits && live.handle().is_some() {
                self.check_budget(id, &live);
                return Ok(current_record(&live));
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

    /// The live tail, end signal and store state of a running session (subscribed before the
    /// caller reads history, so nothing published afterwards is missed).
    fn attach(&self, id: &str) -> Option<Attached> {
        let live = self.live(id)?;
        let finished = live.finished.subscribe();
        let tail = {
            let mut tail = live.tail.lock();
            if *finished.borrow() {
                return None;
            }
            tail.get_or_insert_with(|| broadcast::channel(LIVE_BUFFER).0).subscribe()
        };
        Some(Attached { tail, finished, store_error: live.store_error.subscribe(), _remote: None })
    }

    fn live(&self, id: &str) -> Option<Arc<LiveSession>> {
        self.sessions.lock().get(id).cloned()
    }

    /// The handle of a running session: `NotRunning` for a session that exists but is not
    /// running, `NotFound` for one that does not exist. A session whose CLI has ended is not
    /// running, though its run may not have ended yet (its last events being stored): a prompt
    /// queued to its actor then would be taken and never read.
    pub async fn running(&self, id: &str) -> Result<SessionHandle, DaemonError> {
        match self.handle(id) {
            Ok(handle) if handle.cli_ended() => Err(DaemonError::NotRunning(id.to_owned())),
            Ok(handle) => {
                self.check_still_ours(id).await?;
                Ok(handle)
            }
            Err(not_running) => match self.store.get_session(id).await? {
                Some(record) if self.runs_elsewhere(&record) && !record.state.is_final() => {
                    Err(self.elsewhere(&record))
                }
                Some(_) => Err(not_running),
                None => Err(DaemonError::NotFound(id.to_owned())),
            },
        }
    }

    /// The handle of a running session (`NotRunning` otherwise, whether it exists or not; see
    /// [`Daemon::running`]).
    pub fn handle(&self, id: &str) -> Result<SessionHandle, DaemonError> {
        self.live(id)
            .and_then(|live| live.handle())
            .ok_or_else(|| DaemonError::NotRunning(id.to_owned()))
    }

    /// Waits, while session `id`'s CLI has ended but its run has not (its pump is still
    /// storing the run's last events), until the run has ended too, at most [`STOP_GRACE`]. A
    /// client that saw `exited` and at once asks what the run left open, settles it or resumes
    /// it gets the stopped session's answer, not "still running".
    pub(super) async fn run_ending(&self, id: &str) {
        let Some(live) = self.live(id) else { return };
        if !live.handle().is_some_and(|handle| handle.cli_ended()) {
            return;
        }
        let _ = tokio::time::timeout(STOP_GRACE, ended(&mut live.finished.subscribe())).await;
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
        self.live(id).map(|live| current_record(&live))
    }

    /// A new session's record: `starting` on this node, made now, with `config` and nothing
    /// spent yet. The caller fills in what it knows (cwd, title, model, ...).
    pub(super) fn new_record(&self, id: &str, launch: Launch) -> SessionRecord {
        let now = now_ms();
        SessionRecord {
            archived: false,
            node: self.config.node.clone(),
            id: id.to_owned(),
            claude_session_id: None,
            cwd: String::new(),
            model: None,
            permission_mode: None,
            state: RecordState::Starting,
            title: None,
            cost_usd: 0.0,
            spent_usd: 0.0,
            created_ms: now,
            updated_ms: now,
            launch,
        }
    }

    /// Stops a session gracefully (the record stays); with `purge`, deletes it and its log.
    pub async fn stop(&self, id: &str, purge: bool) -> Result<(), DaemonError> {
        // A session another node runs is stopped there first; one whose node is lost is
        // ended here (its CLI died with its node); without a bus, it is that node's to stop.
        if self.handle(id).is_err() {
            if let Some(mut record) = self.store.get_session(id).await? {
                let running = !record.state.is_final();
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
            self.sessions.lock().remove(id);
            search::forget(self, id);
            self.store.delete_session(id).await?;
            self.view_checkpoints.forget(id);
            self.usage_digests.forget(id);
            self.tell_dashboards(Change::SessionDeleted { session_id: id.to_owned() });
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
            if !record.state.is_final() && !self.node_lost(&record) {
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
        let ids: Vec<String> = self.sessions.lock().keys().cloned().collect();
        // Only what runs here: a session this node holds a stale copy of is another node's.
        let stops = ids.iter().map(|id| async move {
            if let Err(error) = self.stop_here(id, false).await {
                tracing::warn!(session = %id, %error, "stopping the session failed");
            }
        });
        futures::future::join(self.warm.close(), futures::future::join_all(stops)).await;
        // The turns the stops ended are sent before the daemon goes.
        if let Some(traces) = &self.traces {
            traces.close().await;
        }
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
mod tests;
