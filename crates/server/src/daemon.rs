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

/// How a daemon runs sessions.
#[derive(Debug, Clone, Default)]
pub struct DaemonConfig {
    /// The CLI binary when a request names none (`claude` on PATH when `None`).
    pub claude: Option<PathBuf>,
    /// The policy when a request gives none.
    pub default_policy: Option<Policy>,
    /// Environment for every CLI (tests point it at a fake API).
    pub env: Vec<(String, String)>,
    /// Start CLIs with only `PATH` and `env` (no inherited environment).
    pub clear_env: bool,
    /// Claude Code's own transcripts (`None`: `$CLAUDE_CONFIG_DIR` or `~/.claude`).
    pub transcripts: Option<crate::transcripts::Transcripts>,
    /// Where `--sdk-url` CLIs connect: `ws://HOST:PORT/v1/sessions/ws/` (the daemon's own
    /// address, known once it listens). Without it `transport: "sdk-url"` is refused.
    pub ingress_base: Option<String>,
    /// The token an externally launched CLI must present at the relay endpoint `/` (`None`:
    /// no token, only with `--no-auth` on loopback).
    pub ingress_token: Option<String>,
    /// How often the daemon pings a CLI's socket (`None`: [`PING_INTERVAL`]); a socket silent
    /// for two intervals is dropped.
    pub ping_interval: Option<Duration>,
    /// How long a follower's socket may take nothing before it is dropped (`None`:
    /// [`STALL_LIMIT`]).
    pub stall_limit: Option<Duration>,
    /// How long events the store refuses are retried (`None`: [`STORE_RETRY_LIMIT`]).
    pub store_retry_limit: Option<Duration>,
    /// Loader variables ([`LOADER_VARIABLES`]) a request's `env` may set all the same
    /// (`switchboard serve --allow-env NAME`).
    pub allowed_env: Vec<String>,
    /// Where the daemon records the CLIs it runs (pid, start time, run id), so that after a
    /// `kill -9` the next start ends what was left (`None`: not recorded).
    pub runs_file: Option<PathBuf>,
    /// The daemon's data directory (its token, keys, database): never shown by the Files view,
    /// whatever a session's directory is.
    pub data_dir: Option<PathBuf>,
    /// CLIs to keep started ahead of their sessions (`switchboard serve --warm`); at most
    /// [`MAX_WARM_CLIS`] in all.
    pub warm: Vec<WarmSpec>,
    /// One-tap approval links: their key and the daemon's public address.
    pub links: crate::links::LinkConfig,
    /// Where notifications go (`switchboard serve --notify FILE`).
    pub notify: crate::notify::NotifyConfig,
    /// Daily budgets ([`crate::budget`]).
    pub budget: crate::budget::BudgetConfig,
    /// This daemon's name among several sharing one database (`serve --node`): its sessions'
    /// records carry it, and at start it ends only the sessions it ran itself. `None` on a
    /// daemon of its own.
    pub node: Option<String>,
    /// The bus between daemons sharing the database (`serve --nats-url`): the live tail of
    /// sessions that run on other nodes, and commands forwarded to them ([`crate::bus`]).
    pub bus: Option<Arc<crate::bus::Bus>>,
    /// What this node can run, for placing new sessions among the nodes (`serve --root`,
    /// `--capacity`).
    pub placement: Placement,
}

/// What a node can run, as it tells the others in its heartbeat.
#[derive(Debug, Clone, Default)]
pub struct Placement {
    /// The directories whose sessions it runs (a session's `cwd` within one); none: any
    /// directory it has, but then the others place no session here unless asked by name.
    pub roots: Vec<PathBuf>,
    /// The most sessions it runs at once ([`DEFAULT_CAPACITY`] when `None`); a node at it
    /// takes no session placed by load.
    pub capacity: Option<usize>,
    /// The most sessions it runs at once, for good ([`DEFAULT_MAX_RUNNING`] when `None`,
    /// `serve --max-running`): past it a new session, a resume or a relay CLI is refused
    /// (`503 max_running`, with why), and the others place nothing here.
    pub max_running: Option<usize>,
    /// The most sessions relay CLIs make in a minute ([`crate::relay_limits::RELAY_NEW_SESSIONS_PER_MINUTE`] when
    /// `None`).
    pub relay_sessions_per_minute: Option<usize>,
}

impl Placement {
    /// [`Placement::max_running`], or its default.
    pub fn max_running(&self) -> usize {
        self.max_running.unwrap_or(DEFAULT_MAX_RUNNING)
    }

    /// The most sessions placed here by load: the capacity, never past the limit.
    pub fn capacity(&self) -> usize {
        self.capacity.unwrap_or(DEFAULT_CAPACITY).min(self.max_running())
    }
}

/// A node's capacity when it gives none: what a host of ordinary size runs (each CLI takes
/// about 200 MiB).
pub const DEFAULT_CAPACITY: usize = 100;

/// The most `mcp_config` entries a session is started with (each inline one is a descriptor of
/// the CLI's: `switchboard_transport::stdio::MCP_CONFIG_FD` and on).
pub const MAX_MCP_CONFIGS: usize = 16;

/// The most sessions a daemon runs at once when it is not told (each CLI takes about 200 MiB,
/// and its tools more): 100 started at once took one host to 20 GB.
pub const DEFAULT_MAX_RUNNING: usize = 32;

/// Whether `text` is a version as a CLI says it and a request names it: digits and dots
/// (`2.1.330`), starting with a digit, at most 64 bytes.
fn is_version(text: &str) -> bool {
    text.len() <= 64
        && text.starts_with(|c: char| c.is_ascii_digit())
        && text.chars().all(|c| c.is_ascii_digit() || c == '.')
}

/// The version `cli` says it is, asked within `limit`; `None` (logged) when it says none.
async fn ask_cli_version(
    cli: &switchboard_transport::stdio::CliOptions,
    limit: Duration,
) -> Option<String> {
    match tokio::time::timeout(limit, switchboard_transport::stdio::cli_version(cli)).await {
        // A version is digits and dots (`2.1.330`), not the first word of an error.
        Ok(Ok(version)) if is_version(&version) => Some(version),
        Ok(Err(error)) => {
            tracing::warn!(%error, "cannot tell this node's CLI version");
            None
        }
        _ => {
            tracing::warn!("this node's CLI did not say its version");
            None
        }
    }
}

/// Whether `cwd` is within one of `roots` (by whole path components).
fn within(cwd: &std::path::Path, roots: &[PathBuf]) -> bool {
    roots.iter().any(|root| cwd.starts_with(root))
}

/// The most CLIs a daemon keeps warm, over all its [`WarmSpec`]s: an idle CLI holds about
/// 200 MiB.
pub const MAX_WARM_CLIS: usize = 16;

/// CLIs kept warm for new sessions in one directory: a session there with the daemon's
/// default policy, CLI and environment, this model, no request-specific flags and any
/// permission mode but `bypassPermissions` takes one and skips the CLI's cold start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WarmSpec {
    /// The sessions' working directory (absolute).
    pub cwd: PathBuf,
    /// Their model (`None`: the CLI's default). It is fixed at launch: switching a CLI's model
    /// costs an API call on 2.1.330.
    pub model: Option<String>,
    /// How many to keep.
    pub count: usize,
}

/// Environment variables that make a program load or run code of the caller's choosing
/// before its own (a `*` ends a prefix). A request's `env` may not set them unless the daemon
/// allows it by name ([`DaemonConfig::allowed_env`]). This narrows, but does not close, what a
/// token holder can run: `claude` and `env` together still start any program as the daemon's
/// user (docs/api.md says so).
pub const LOADER_VARIABLES: &[&str] = &[
    "LD_*",
    "DYLD_*",
    "NODE_OPTIONS",
    "NODE_PATH",
    "BASH_ENV",
    "ENV",
    "PROMPT_COMMAND",
    "SHELLOPTS",
    "PYTHONSTARTUP",
    "PYTHONPATH",
    "PERL5OPT",
    "PERL5LIB",
    "RUBYOPT",
    "RUBYLIB",
];

/// The largest policy file a request may name.
pub const MAX_POLICY_FILE_BYTES: u64 = 1024 * 1024;

/// The longest title a person may give a session, in characters.
pub const MAX_TITLE_CHARS: usize = 200;

/// How long reading a policy file may take.
pub const POLICY_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Which transport a session's CLI speaks; the daemon spawns it.
#[derive(Debug)]
enum Transport {
    /// stdin and stdout.
    Stdio,
    /// `--sdk-url`: the CLI connects to the daemon at `base` + a slot id.
    SdkUrl {
        /// `ws://HOST:PORT/v1/sessions/ws/`.
        base: String,
    },
}

/// What `POST /api/sessions` takes.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateSession {
    /// A first prompt.
    #[serde(default)]
    pub prompt: Option<String>,
    /// Working directory (required).
    pub cwd: PathBuf,
    /// Model.
    #[serde(default)]
    pub model: Option<String>,
    /// Permission mode.
    #[serde(default)]
    pub permission_mode: Option<String>,
    /// Policy: inline TOML, or a path to a policy file.
    #[serde(default)]
    pub policy: Option<String>,
    /// Resume this Claude session id.
    #[serde(default)]
    pub resume: Option<String>,
    /// With `resume`: fork into a new session id.
    #[serde(default)]
    pub fork: bool,
    /// With `resume`: start from this message (its `uuid`) instead of the end
    /// (`--resume-session-at`); with `fork`, forks the conversation at that message.
    #[serde(default)]
    pub resume_at: Option<String>,
    /// `--allowedTools` rules.
    #[serde(default)]
    pub allowed_tools: Vec<String>,
    /// `--disallowedTools` rules.
    #[serde(default)]
    pub disallowed_tools: Vec<String>,
    /// Replace the system prompt.
    #[serde(default)]
    pub system_prompt: Option<String>,
    /// Append to the system prompt.
    #[serde(default)]
    pub append_system_prompt: Option<String>,
    /// `--max-turns`.
    #[serde(default)]
    pub max_turns: Option<u32>,
    /// The notify file's channels that hear of this session (default: its policy's, else
    /// every channel; `web-push`: every browser subscribed).
    #[serde(default)]
    pub notify: Option<Vec<String>>,
    /// Run in a git worktree of its own, on a new branch from the repository's HEAD
    /// ([`crate::worktree`]).
    #[serde(default)]
    pub worktree: bool,
    /// What the session may spend (US dollars, as its CLI reports it): reached, the session
    /// pauses until a person raises it.
    #[serde(default)]
    pub max_budget_usd: Option<f64>,
    /// MCP servers (`--mcp-config`): each a JSON config (`{"mcpServers": {...}}`) or a path
    /// to one.
    #[serde(default)]
    pub mcp_config: Vec<String>,
    /// The CLI binary for this session.
    #[serde(default)]
    pub claude: Option<PathBuf>,
    /// `stdio` (the default) or `sdk-url` (the CLI connects to the daemon over WebSocket;
    /// CLIs up to 2.1.120).
    #[serde(default)]
    pub transport: Option<String>,
    /// Extra environment for the CLI.
    #[serde(default)]
    pub env: HashMap<String, String>,
    /// Show the session to relay frontends (`/ws`) as a relay CLI: its CLI's lines, with the
    /// connected and disconnected status lines (`switchboard loop`'s tasks are).
    #[serde(default)]
    pub relay: bool,
    /// The node to run it on, where several daemons share a database and a bus (`None`: the
    /// least loaded node that can, see [`Daemon::create`]).
    #[serde(default)]
    pub node: Option<String>,
    /// Run it with this version of Claude Code (`2.1.330`): on the node named, or the least
    /// loaded node whose CLI says it is this version (each node's is in `GET /api/nodes`).
    /// Not with `claude`, which names the program itself. Left out when unset, so a create
    /// forwarded over the bus still reads on a node of a release without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cli_version: Option<String>,
    /// Who asks (set by the daemon from the request's token, never from its body): the first
    /// prompt's permission requests record it as who started the turn.
    #[serde(skip)]
    pub started_by: Option<String>,
}

/// How a session's CLI is launched: what its record keeps for a resume. It is the create
/// request without what applies once (the first prompt, the Claude session to resume or fork,
/// the message to fork at). Its secrets (`env` values, inline MCP servers' `env` and
/// `headers`) stay in the store; clients see [`public_record`].
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Launch {
    /// Working directory.
    pub cwd: PathBuf,
    /// Model.
    pub model: Option<String>,
    /// Permission mode.
    pub permission_mode: Option<String>,
    /// Policy: inline TOML, or a path to a policy file (read again on a resume).
    pub policy: Option<String>,
    /// `--allowedTools` rules.
    pub allowed_tools: Vec<String>,
    /// `--disallowedTools` rules.
    pub disallowed_tools: Vec<String>,
    /// Replace the system prompt.
    pub system_prompt: Option<String>,
    /// Append to the system prompt.
    pub append_system_prompt: Option<String>,
    /// `--max-turns`.
    pub max_turns: Option<u32>,
    /// The channels that hear of it ([`CreateSession::notify`]).
    pub notify: Option<Vec<String>>,
    /// Its git worktree ([`CreateSession::worktree`]); `cwd` is in it.
    pub worktree: Option<crate::worktree::Worktree>,
    /// What the session may spend ([`CreateSession::max_budget_usd`]).
    pub max_budget_usd: Option<f64>,
    /// MCP servers (`--mcp-config`).
    pub mcp_config: Vec<String>,
    /// The CLI binary.
    pub claude: Option<PathBuf>,
    /// `stdio`, `sdk-url` (or `relay`, for a CLI that connected on its own).
    pub transport: Option<String>,
    /// Extra environment for the CLI.
    pub env: HashMap<String, String>,
    /// Shown to relay frontends ([`CreateSession::relay`]).
    pub relay: bool,
}

impl From<&CreateSession> for Launch {
    fn from(request: &CreateSession) -> Launch {
        Launch {
            cwd: request.cwd.clone(),
            model: request.model.clone(),
            permission_mode: request.permission_mode.clone(),
            policy: request.policy.clone(),
            allowed_tools: request.allowed_tools.clone(),
            disallowed_tools: request.disallowed_tools.clone(),
            system_prompt: request.system_prompt.clone(),
            append_system_prompt: request.append_system_prompt.clone(),
            max_turns: request.max_turns,
            max_budget_usd: request.max_budget_usd,
            notify: request.notify.clone(),
            worktree: None,
            mcp_config: request.mcp_config.clone(),
            claude: request.claude.clone(),
            transport: request.transport.clone(),
            env: request.env.clone(),
            relay: request.relay,
        }
    }
}

/// A first prompt and who sent it.
type Prompt = (String, Option<String>);

/// Why a daemon operation failed.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// Bad input.
    #[error("{0}")]
    Invalid(String),
    /// No such session.
    #[error("no session {0}")]
    NotFound(String),
    /// The session is not running (exited, crashed, or the daemon restarted).
    #[error("session {0} is not running; resume it first")]
    NotRunning(String),
    /// The session is running (and cannot be resumed again).
    #[error("session {0} is already running")]
    AlreadyRunning(String),
    /// The session refused.
    #[error(transparent)]
    Session(#[from] switchboard_session::SessionError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The daemon is shutting down and starts nothing new.
    #[error("the daemon is shutting down")]
    ShuttingDown,
    /// Something inside the daemon failed (a poisoned lock, a task that died).
    #[error("internal error: {0}")]
    Internal(String),
    /// A budget is spent: the sentence says which, and how to go on.
    #[error("{0}")]
    Budget(String),
    /// The session's worktree is not as the request needs it (changes in it, or none).
    #[error("{0}")]
    Worktree(String),
    /// Something the daemon waited on did not finish in time (a slow disk): try again.
    #[error("{0}")]
    Busy(String),
    /// The daemon runs as many sessions as it may ([`Placement::max_running`]).
    #[error("{running} sessions run on this daemon, the most it runs at once (serve --max-running {max}); stop one, or raise the limit")]
    MaxRunning {
        /// Sessions running or starting.
        running: usize,
        /// The limit.
        max: usize,
    },
    /// The CLI cannot put the files back (no checkpoint for that message, checkpointing off,
    /// the session working).
    #[error("{0}")]
    Rewind(String),
    /// The session runs on another daemon that shares this one's database.
    #[error("{0}")]
    OtherNode(String),
    /// The node that runs the session refused a command forwarded to it, as its API said.
    #[error("{message}")]
    Forwarded {
        /// The HTTP status it answered.
        status: u16,
        /// Its error code.
        code: String,
        /// Its sentence.
        message: String,
    },
}

/// What a person asks of a running session ([`Daemon::command`]): carried out on the node
/// that runs it, forwarded there over the bus as JSON when that is another node.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum SessionCommand {
    /// A message from `by`.
    Message {
        /// The message.
        message: switchboard_protocol::UserMessage,
        /// Who sent it.
        by: String,
    },
    /// An answer to a permission request.
    Answer {
        /// The request.
        request_id: String,
        /// The answer.
        answer: switchboard_session::PermissionAnswer,
        /// Who answered.
        by: String,
    },
    /// Interrupt the turn.
    Interrupt,
    /// Switch the model.
    SetModel {
        /// The model.
        model: String,
    },
    /// Switch the permission mode.
    SetMode {
        /// The mode.
        mode: PermissionMode,
    },
    /// Stop the session's CLI.
    Stop,
    /// Start a session here (placed on this node by another).
    Create {
        /// The request, as the node that placed it took it.
        request: CreateSession,
        /// Who asked (the request's own `started_by` is never sent).
        by: Option<String>,
    },
}

impl SessionCommand {
    /// Says in who asked that it came through node `node`, within the channel's parentheses
    /// (`token phone (api via beta)`), so that the token is still read from it (its budget).
    fn via(mut self, node: &str) -> SessionCommand {
        if let SessionCommand::Message { by, .. } | SessionCommand::Answer { by, .. } = &mut self {
            *by = via(by, node);
        }
        self
    }
}

/// `who` through node `node`: `token phone (api)` → `token phone (api via beta)`.
fn via(who: &str, node: &str) -> String {
    match who.strip_suffix(')') {
        Some(open) => format!("{open} via {node})"),
        None => format!("{who} via {node}"),
    }
}

#[cfg(test)]
mod via_tests {
    #[test]
    fn the_token_is_still_read_from_who_came_through_another_node() {
        let who = super::via("token phone (api)", "beta");
        assert_eq!(who, "token phone (api via beta)");
        assert_eq!(crate::budget::token_of(&who), Some("phone"));
        assert_eq!(super::via("alice", "beta"), "alice via beta");
    }
}

/// A session admitted to start ([`Daemon::admit_run`]), until it has.
struct Admitted(Arc<std::sync::atomic::AtomicUsize>);

impl Drop for Admitted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// One item of a subscription.
#[derive(Debug, Clone)]
pub enum Subscribed {
    /// The next event.
    Event(Arc<EventRecord>),
    /// The subscriber fell behind the live buffer; it continues from the store (the next
    /// events follow without a gap).
    Lagged,
    /// The session's events cannot be stored now (the reason); the daemon retries and holds
    /// the CLI back. No event is lost or skipped meanwhile.
    StoreFailing(String),
    /// The store takes the session's events again.
    StoreRecovered,
}

/// A live session: its current run, its projection, and its live tail.
struct LiveSession {
    /// The session's one lifecycle value: which run of its CLI is current, and its handle
    /// while it runs. Begun by the daemon, ended only by that run's own pump.
    run: Mutex<Run>,
    record: Mutex<SessionRecord>,
    /// The session's one projection, fed by the pump: the record reads its view.
    projector: Mutex<switchboard_session::Projector>,
    /// The live tail, created by the first subscriber while a run goes on (an unwatched
    /// session pays nothing) and dropped when the run ends: a finished session keeps no
    /// buffer of its last events (its subscribers read them from the store).
    tail: Mutex<Option<broadcast::Sender<Arc<EventRecord>>>>,
    /// Set by the pump when the session's CLI is gone and its last events are stored.
    finished: watch::Sender<bool>,
    /// Why the session's events cannot be stored right now (`None` while they can): the
    /// pump retries, holding the CLI back, and subscribers are told.
    store_error: watch::Sender<Option<String>>,
    /// Whether `store_error` may hold an error: the pump's look on every append (an atomic
    /// load, where the watch's look takes its lock). Written by the pump only, with the watch.
    store_failing: std::sync::atomic::AtomicBool,
    /// Events the store refused for good and the log does not mention yet (noted as soon as
    /// the store takes an event of this session again, a resume's included).
    lost: std::sync::atomic::AtomicU64,
    /// The record changed and waits for the daemon's record writer (queued once until then).
    record_dirty: std::sync::atomic::AtomicBool,
    /// Who sent the CLI its last message (`token NAME (CHANNEL)`, `relay frontend (relay)`):
    /// a permission request records it as who started the turn.
    sender: Mutex<Option<String>>,
    /// Who started the turn of each waiting request (the session's own table of them does
    /// not know): filled by the pump, emptied as they are decided.
    started_by: Mutex<HashMap<String, String>>,
    /// Why the session is paused (a budget it reached), while it is.
    paused: Mutex<Option<String>>,
    /// Who hears of it: its policy's `[notify]`, with its own `notify` channels.
    route: Mutex<switchboard_session::NotifyRoute>,
    /// Held while its budget is checked and its pause changed (by its pump, a person's raise).
    budget_check: Mutex<()>,
}

/// A session's current run (see [`LiveSession::run`]).
#[derive(Default)]
struct Run {
    /// Counts the runs: the first is 1, each resume the next.
    number: u64,
    /// The session's handle while this run's CLI runs.
    handle: Option<SessionHandle>,
}

impl LiveSession {
    fn new(record: SessionRecord) -> LiveSession {
        // Its updates feed only the record: no tool input is parsed as it streams.
        let mut projector = switchboard_session::Projector::without_partial_inputs();
        if is_terminal(&record) {
            projector.set_transcript();
        }
        projector.continue_from_cost(record.cost_usd);
        LiveSession {
            run: Mutex::new(Run::default()),
            record: Mutex::new(record),
            projector: Mutex::new(projector),
            tail: Mutex::new(None),
            finished: watch::channel(false).0,
            store_error: watch::channel(None).0,
            store_failing: std::sync::atomic::AtomicBool::new(false),
            lost: std::sync::atomic::AtomicU64::new(0),
            record_dirty: std::sync::atomic::AtomicBool::new(false),
            sender: Mutex::new(None),
            started_by: Mutex::new(HashMap::new()),
            paused: Mutex::new(None),
            route: Mutex::new(switchboard_session::NotifyRoute::default()),
            budget_check: Mutex::new(()),
        }
    }

    /// Who hears of the session.
    fn route(&self) -> switchboard_session::NotifyRoute {
        self.route.lock().map(|route| route.clone()).unwrap_or_default()
    }

    /// Why the session is paused, if it is.
    fn paused(&self) -> Option<String> {
        self.paused.lock().ok().and_then(|paused| paused.clone())
    }

    /// Pauses the session for `why`, or (`None`) lets it go on; whether it was paused.
    fn set_paused(&self, why: Option<String>) -> bool {
        self.paused
            .lock()
            .map(|mut paused| std::mem::replace(&mut *paused, why).is_some())
            .unwrap_or(false)
    }

    /// Notes who sent the CLI its latest message.
    fn set_sender(&self, by: Option<String>) {
        if let Ok(mut sender) = self.sender.lock() {
            *sender = by;
        }
    }

    /// Who sent the CLI its latest message.
    fn sender(&self) -> Option<String> {
        self.sender.lock().ok().and_then(|sender| sender.clone())
    }

    /// Begins the next run, with `handle`; its number. A run whose CLI still runs is not
    /// replaced (two resumes at once: the second is refused).
    fn begin(&self, handle: Option<SessionHandle>) -> Result<u64, DaemonError> {
        let mut run = self.lock_run()?;
        if run.handle.is_some() && handle.is_some() {
            return Err(DaemonError::AlreadyRunning(self.id()));
        }
        run.number += 1;
        run.handle = handle;
        self.finished.send_replace(false);
        // A new run is not paused (a resume is refused while a budget holds it).
        self.set_paused(None);
        Ok(run.number)
    }

    /// Ends run `number`, if it is still the current one (a resume may have begun the next
    /// while this one's pump finished: that run must not be marked finished). Whether it was.
    fn end(&self, number: u64) -> bool {
        let Ok(mut run) = self.lock_run() else { return false };
        if run.number != number {
            return false;
        }
        run.handle = None;
        // A session that ended is not paused (a resume checks its budget again).
        self.set_paused(None);
        self.finish();
        true
    }

    /// Says the run is over, and lets go of what only a run needs: the live tail (its
    /// subscribers take what it still holds, then read the store and wait for a resume) and
    /// the projection's state for open messages and calls.
    fn finish(&self) {
        if let Ok(mut tail) = self.tail.lock() {
            // Under the tail's lock, which `Daemon::attach` checks `finished` under: no tail
            // is made for a run that is over.
            self.finished.send_replace(true);
            *tail = None;
        }
        if let Ok(mut projector) = self.projector.lock() {
            projector.end_run();
        }
    }

    /// The live tail, if anyone follows the session.
    fn tail(&self) -> Option<broadcast::Sender<Arc<EventRecord>>> {
        self.tail.lock().ok()?.clone()
    }

    /// Ends the current run and hands its handle over (a relay CLI rotating to another
    /// session).
    fn hand_over(&self) -> Result<Option<SessionHandle>, DaemonError> {
        let mut run = self.lock_run()?;
        let handle = run.handle.take();
        self.finish();
        Ok(handle)
    }

    fn id(&self) -> String {
        self.record.lock().map(|record| record.id.clone()).unwrap_or_default()
    }

    /// The current run's number.
    fn run_number(&self) -> u64 {
        self.lock_run().map(|run| run.number).unwrap_or(0)
    }

    /// The handle while a run's CLI runs.
    fn handle(&self) -> Option<SessionHandle> {
        self.lock_run().ok()?.handle.clone()
    }

    fn lock_run(&self) -> Result<std::sync::MutexGuard<'_, Run>, DaemonError> {
        self.run.lock().map_err(|_| DaemonError::Internal("a session's state is poisoned".into()))
    }
}

/// Where the daemon is in its life. Client sockets follow it: when it drains they are told,
/// and when it has closed they are closed (WebSocket close code 1001, "going away").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Serving.
    Serving,
    /// Stopping every session; sockets stay open to carry their last events.
    Draining,
    /// Every session is stopped and stored.
    Closed,
}

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

/// What a subscription follows of a running session.
struct Attached {
    tail: broadcast::Receiver<Arc<EventRecord>>,
    finished: watch::Receiver<bool>,
    store_error: watch::Receiver<Option<String>>,
    /// A session followed on the bus: kept while the subscription follows it.
    _remote: Option<Arc<crate::bus::RemoteTail>>,
}

/// A subscription to one session's events: history from the store, then the live tail.
///
/// It attaches to the tail before reading history, so nothing published from then on is
/// missed, and skips on the tail what history already gave. A gap on the tail (an event
/// published between attaching and reading) or a lag sends it back to the store. When the
/// session ends it reads the last events from the store and waits for a resume.
/// [`Subscription::next`] is cancel-safe: all progress lives in the struct.
pub struct Subscription {
    daemon: Arc<Daemon>,
    id: String,
    /// The last seq handed out.
    sent: u64,
    /// The live tail, the session's end signal and its store state, while it runs.
    tail: Option<Attached>,
    /// A page of history being handed out.
    backlog: std::collections::VecDeque<Arc<EventRecord>>,
    /// Read the store before taking from the tail again.
    need_history: bool,
    /// The session was purged; nothing more will come.
    done: bool,
}

impl Subscription {
    /// The seq of the last event handed out (or the `after` it started from).
    pub fn position(&self) -> u64 {
        self.sent
    }

    /// The next item; `None` when the session no longer exists.
    pub async fn next(&mut self) -> Option<Result<Subscribed, DaemonError>> {
        loop {
            if self.done {
                return None;
            }
            if let Some(event) = self.backlog.pop_front() {
                self.sent = event.seq;
                return Some(Ok(Subscribed::Event(event)));
            }
            if self.need_history {
                if self.tail.is_none() {
                    self.tail = self.daemon.attach(&self.id);
                }
                // Fell a whole buffer behind the live tail while reading (or not reading):
                // say so, and jump the tail to now; the store has everything in between.
                if let Some(attached) = self.tail.as_mut() {
                    if attached.tail.len() >= LIVE_BUFFER {
                        attached.tail = attached.tail.resubscribe();
                        return Some(Ok(Subscribed::Lagged));
                    }
                }
                let page =
                    match self.daemon.store.events_after(&self.id, self.sent, HISTORY_PAGE).await {
                        Ok(page) => page,
                        Err(error) => return Some(Err(error.into())),
                    };
                if !page.is_empty() {
                    // A large event read by many subscribers at once is held once.
                    let watchers = &self.daemon.watchers;
                    self.backlog.extend(page.into_iter().map(|event| watchers.share(event)));
                    continue;
                }
                self.need_history = false;
            }
            let Some(Attached { tail, finished, store_error, .. }) = self.tail.as_mut() else {
                // Not running: wait for a resume (armed before looking, so none is missed).
                let started = self.daemon.started.notified();
                tokio::pin!(started);
                started.as_mut().enable();
                if let Some(attached) = self.daemon.attach(&self.id) {
                    self.tail = Some(attached);
                    self.need_history = true;
                    continue;
                }
                match self.daemon.store.get_session(&self.id).await {
                    Ok(Some(_)) => {}
                    Ok(None) => {
                        self.done = true;
                        return Some(Err(DaemonError::NotFound(self.id.clone())));
                    }
                    Err(error) => return Some(Err(error.into())),
                }
                // With a bus, whatever node runs the session (this one included) publishes
                // what it stores: follow that, then read the store once more for the seam.
                if let Some(bus) = &self.daemon.config.bus {
                    match bus.tail(self.daemon.store.clone(), &self.id).await {
                        Ok((tail, remote)) => {
                            self.tail = Some(Attached {
                                tail,
                                finished: remote.finished.subscribe(),
                                store_error: remote.store_error.subscribe(),
                                _remote: Some(remote),
                            });
                            self.need_history = true;
                            continue;
                        }
                        Err(error) => {
                            tracing::warn!(session = %self.id, %error, "cannot follow the session on the bus; trying again");
                            // Again soon (the bus comes back), or at a start here.
                            tokio::select! {
                                () = started => {}
                                () = tokio::time::sleep(crate::bus::QUIET_CHECK) => {}
                            }
                            self.need_history = true;
                            continue;
                        }
                    }
                }
                started.await;
                self.need_history = true;
                continue;
            };
            tokio::select! {
                // The store's state first: a recovery is reported before the events stored
                // after it (a burst of them would otherwise keep it waiting). Then the tail:
                // what it holds (or its lag) is reported before the end.
                biased;
                changed = store_error.changed() => {
                    if changed.is_ok() {
                        let now = store_error.borrow_and_update().clone();
                        return Some(Ok(match now {
                            Some(reason) => Subscribed::StoreFailing(reason),
                            None => Subscribed::StoreRecovered,
                        }));
                    }
                    // The session was let go of (its run ended): what the tail still held
                    // is in the store; read it there, then wait for a resume.
                    self.tail = None;
                    self.need_history = true;
                }
                received = tail.recv() => match received {
                    Ok(event) if event.seq <= self.sent => {}
                    Ok(event) if Some(event.seq) != self.sent.checked_add(1) => {
                        self.need_history = true
                    }
                    Ok(event) => {
                        self.sent = event.seq;
                        return Some(Ok(Subscribed::Event(event)));
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        self.need_history = true;
                        return Some(Ok(Subscribed::Lagged));
                    }
                    Err(broadcast::error::RecvError::Closed) => {
                        self.tail = None;
                        self.need_history = true;
                    }
                },
                // The session ended: its last events are stored; read them, then wait.
                () = ended(finished) => {
                    self.tail = None;
                    self.need_history = true;
                }
            }
        }
    }
}

/// Shares the dashboards' changes with the other nodes on the bus: this node's go out, theirs
/// come in (marked `from_node`, and never sent out again). Each node says for itself which
/// nodes it finds lost (`nodes_changed` stays here).
async fn share_changes(
    daemon: &Arc<Daemon>,
    bus: &Arc<crate::bus::Bus>,
) -> Result<(), DaemonError> {
    use futures::StreamExt as _;
    let mut theirs = bus.changes().await.map_err(DaemonError::Busy)?;
    let mut ours = daemon.dashboard.subscribe();
    let out = bus.clone();
    tokio::spawn(async move {
        loop {
            match ours.recv().await {
                Ok(change) => {
                    if change.get("from_node").is_none() && change["event"] != "nodes_changed" {
                        out.publish_change(&change);
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => return,
            }
        }
    });
    let (me, node) = (Arc::downgrade(daemon), bus.node().to_owned());
    tokio::spawn(async move {
        while let Some(message) = theirs.next().await {
            let Some(daemon) = me.upgrade() else { return };
            let Ok(mut told) = serde_json::from_slice::<Value>(&message.payload) else { continue };
            let from = told["node"].as_str().unwrap_or_default().to_owned();
            let mut change = told["change"].take();
            if from == node || !change.is_object() {
                continue;
            }
            change["from_node"] = json!(from);
            let _ = daemon.dashboard.send(change);
        }
    });
    Ok(())
}

/// The daemon's record writer: stores each changed session record, one at a time, as the store
/// takes them. A session queued several times before its turn is written once, as it is then
/// (records are whole values: the last one written is the newest). Ends with the daemon.
async fn write_records(
    daemon: std::sync::Weak<Daemon>,
    mut queue: mpsc::UnboundedReceiver<Arc<LiveSession>>,
) {
    while let Some(live) = queue.recv().await {
        let Some(daemon) = daemon.upgrade() else { return };
        // Under the lock a rename, a resume and a rotation write under: each write is of the
        // record as it is when written.
        let _writing = daemon.record_writes.lock().await;
        // Cleared before the record is read: a change after this queues the session again.
        // Already clear: its run's last write had it (a rename since then must not be undone).
        if !live.record_dirty.swap(false, std::sync::atomic::Ordering::SeqCst) {
            continue;
        }
        let Some(record) = current_record(&live) else { continue };
        match daemon.store.update_session(&record).await {
            Ok(()) => {}
            // Another node took the session over (this one was lost to it): its run here
            // ends, so that one CLI runs it.
            Err(StoreError::Moved { id, node }) => {
                tracing::warn!(session = %id, ?node, "taken over by another node; its run here stops");
                if let Some(handle) = live.handle() {
                    tokio::spawn(async move {
                        let _ = handle.shutdown(STOP_GRACE).await;
                    });
                }
            }
            Err(error) => {
                tracing::error!(session = %record.id, %error, "cannot update the session record")
            }
        }
    }
}

/// Drains the events of a session that was refused before it went live (nothing of it is
/// stored), so that its actor is never held up while its CLI is stopped.
async fn pump_discarding(mut events: SessionEvents) {
    while events.recv().await.is_some() {}
}

/// Moves a session's events into the store and out to subscribers, and keeps its record: the
/// session's [`EventSink`], called in its actor's task (one task fewer on every event's path
/// than a pump of its own, which also cost every idle session its task and queue).
///
/// A relay session (an external CLI at `/`) follows seed 003's rotation rule: each distinct
/// Claude session id on the connection is its own Switchboard session. When the CLI moves to
/// another Claude session, the current one ends with a `rotated` event and the pump goes on
/// with the session of the new id (a new one, or the one this connection had for it before).
struct Pump {
    daemon: Arc<Daemon>,
    id: String,
    live: Arc<LiveSession>,
    /// The run's number: only this run's end ends the session's run.
    run: u64,
    /// The last sequence number used.
    seq: u64,
    /// A relay CLI's session (rotations apply), and whether relay frontends see its lines.
    relay: bool,
    relayed: bool,
    /// This connection's Claude session ids and their Switchboard sessions.
    seen: HashMap<String, String>,
    /// When this connection's last rotations were (at most [`crate::relay_limits::RELAY_ROTATIONS_PER_SECOND`]).
    rotations: crate::relay_limits::Window,
    /// Events the store refused for good (the session was stopped for it), not yet noted in
    /// the log (an earlier run's too).
    lost: u64,
    /// The CLI process, marked ended in the runs file when the session ends.
    cli_run: Option<switchboard_transport::CliRun>,
    /// Whether [`Pump::end`] began: a pump dropped without it by a panic (of its actor, or of
    /// its own code) ends the run from a task of its own, or the session would never be
    /// finished and a stop would wait for it forever. (Dropped otherwise, its runtime is
    /// shutting down, and there is nothing to end.)
    ended: bool,
}

impl Drop for Pump {
    fn drop(&mut self) {
        if self.ended || !std::thread::panicking() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        tracing::error!(session = %self.id, "a session's actor ended without ending its pump; ending it");
        let orphan = Pump {
            daemon: self.daemon.clone(),
            id: std::mem::take(&mut self.id),
            live: self.live.clone(),
            run: self.run,
            seq: self.seq,
            relay: self.relay,
            relayed: self.relayed,
            seen: HashMap::new(),
            rotations: crate::relay_limits::Window::new(Duration::from_secs(1)),
            lost: self.lost,
            cli_run: self.cli_run.take(),
            ended: false,
        };
        runtime.spawn(orphan.end());
    }
}

impl Pump {
    fn new(
        daemon: Arc<Daemon>,
        id: String,
        live: Arc<LiveSession>,
        run: u64,
        seq: u64,
        cli_run: Option<switchboard_transport::CliRun>,
    ) -> Pump {
        let (relay, relayed) = live
            .record
            .lock()
            .map(|record| {
                let relay = record.config["transport"] == "relay";
                (relay, relay || record.config["relay"] == true)
            })
            .unwrap_or((false, false));
        let lost = live.lost.swap(0, std::sync::atomic::Ordering::SeqCst);
        let seen = HashMap::new();
        let rotations = crate::relay_limits::Window::new(Duration::from_secs(1));
        Pump {
            daemon,
            id,
            live,
            run,
            seq,
            relay,
            relayed,
            seen,
            rotations,
            lost,
            cli_run,
            ended: false,
        }
    }

    async fn take(&mut self, mut batch: Vec<SessionEvent>) {
        let daemon = self.daemon.clone();
        // A permission request records who started the turn: whoever sent the CLI its latest
        // message.
        let asks = |event: &SessionEvent| {
            matches!(
                event,
                SessionEvent::PermissionRequested(_) | SessionEvent::PermissionDecided { .. }
            )
        };
        if batch.iter().any(asks) {
            let sender = self.live.sender();
            let mut started = self.live.started_by.lock().ok();
            for event in &mut batch {
                match event {
                    SessionEvent::PermissionRequested(pending) => {
                        pending.started_by = pending.started_by.take().or_else(|| sender.clone());
                        if let (Some(started), Some(by)) = (&mut started, &pending.started_by) {
                            started.insert(pending.request_id.clone(), by.clone());
                        }
                    }
                    SessionEvent::PermissionDecided { request_id, .. } => {
                        if let Some(started) = &mut started {
                            started.remove(request_id);
                        }
                    }
                    _ => {}
                }
            }
        }
        let mut rest: &[SessionEvent] = &batch;
        while !rest.is_empty() {
            let rotation = if self.relay { rotation_point(&self.live, rest) } else { None };
            let (now, later) = match &rotation {
                Some((at, _)) => rest.split_at(*at),
                None => (rest, &[][..]),
            };
            let Pump { id, live, seq, lost, relayed, .. } = self;
            let stored = (*lost == 0 || note_lost(&daemon, id, live, seq, lost).await)
                && publish(&daemon, id, live, now, seq, *relayed).await;
            if !stored {
                *lost += now.len() as u64;
            }
            // Decisions, kept by request id for links' pages, under the session they are in.
            for event in now {
                if let SessionEvent::PermissionDecided { request_id, behavior, by, .. } = event {
                    let decision =
                        crate::decisions::Decision { behavior: *behavior, by: by.clone() };
                    daemon.decisions.note(id, request_id, decision);
                }
            }
            if let Some((_, claude_session_id)) = rotation {
                if let Err(why) = self.may_rotate(&claude_session_id) {
                    // Its lines go on in the same session: nothing is lost, nothing more made.
                    tracing::warn!(session = %self.id, "a relay CLI's rotation refused: {why}");
                    if let Ok(mut record) = self.live.record.lock() {
                        record.claude_session_id = Some(claude_session_id);
                    }
                    rest = later;
                    continue;
                }
                let (daemon, id, live, seq) = (&self.daemon, &self.id, &self.live, &self.seq);
                let rotated =
                    daemon.rotate(id, live, *seq, &claude_session_id, &mut self.seen).await;
                match rotated {
                    Ok((next_id, next_live, next_run, next_seq)) => {
                        (self.id, self.live, self.run, self.seq) =
                            (next_id, next_live, next_run, next_seq);
                    }
                    Err(error) => {
                        tracing::error!(session = %self.id, %error, "cannot rotate the relay session");
                        // Go on in the same session rather than lose lines.
                        if let Ok(mut record) = self.live.record.lock() {
                            record.claude_session_id = Some(claude_session_id);
                        }
                    }
                }
            }
            rest = later;
        }
    }

    async fn end(mut self) {
        self.ended = true;
        let (daemon, live, run, relayed) =
            (self.daemon.clone(), self.live.clone(), self.run, self.relayed);
        let (daemon, live, run) = (&daemon, &live, &run);
        let id = std::mem::take(&mut self.id);
        let id = &id;
        let (mut seq, mut lost) = (self.seq, self.lost);
        if lost > 0 && !note_lost(daemon, id, live, &mut seq, &mut lost).await {
            // Noted when this session stores an event again (a resume).
            live.lost.fetch_add(lost, std::sync::atomic::Ordering::SeqCst);
        }
        // This run is over: its record is stored (exited or crashed) and the run ends, unless
        // a resume began the next run meanwhile (then the record and the end are that run's).
        let mut record_stored = true;
        if live.run_number() == *run {
            let _writing = daemon.record_writes.lock().await;
            // This write has the record as it ends: one still queued is not needed.
            live.record_dirty.store(false, std::sync::atomic::Ordering::SeqCst);
            if let Some(record) = current_record(live) {
                match daemon.store.update_session(&record).await {
                    // Another node's now: nothing of it is kept here.
                    Ok(()) | Err(StoreError::Moved { .. }) => {}
                    Err(error) => {
                        tracing::error!(session = %id, %error, "cannot store the session's last record");
                        record_stored = false;
                    }
                }
            }
        }
        // A record the store refused lives on in memory, where `Daemon::record` finds it.
        if live.end(*run) && record_stored {
            daemon.forget_if_finished(id, live);
        }
        if relayed {
            daemon.relay_publish(&relay_status("claude code disconnected")).await;
        }
        if let Some(cli_run) = &self.cli_run {
            daemon.record_run(cli_run, false).await;
        }
    }
}

impl EventSink for Pump {
    fn take(&mut self, events: Vec<SessionEvent>) -> SinkFuture<'_> {
        Box::pin(Pump::take(self, events))
    }

    fn end(self: Box<Self>) -> SinkFuture<'static> {
        Box::pin(Pump::end(*self))
    }
}

impl Pump {
    /// Whether this connection may move to `claude_session_id`'s session now, or why not
    /// ([`crate::relay_limits`]).
    fn may_rotate(&mut self, claude_session_id: &str) -> Result<(), String> {
        use crate::relay_limits::{MAX_RELAY_SESSIONS, RELAY_ROTATIONS_PER_SECOND};
        let known = self.seen.contains_key(claude_session_id);
        // The current session and those seen before it.
        if !known && self.seen.len() + 1 >= MAX_RELAY_SESSIONS {
            return Err(format!(
                "the connection has {MAX_RELAY_SESSIONS} sessions already (MAX_RELAY_SESSIONS)"
            ));
        }
        if !self.rotations.has_room(RELAY_ROTATIONS_PER_SECOND) {
            return Err(format!(
                "more than {RELAY_ROTATIONS_PER_SECOND} rotations in a second (RELAY_ROTATIONS_PER_SECOND)"
            ));
        }
        if !known {
            self.daemon.relay_may_make_session()?;
        }
        self.rotations.take(RELAY_ROTATIONS_PER_SECOND);
        Ok(())
    }
}

/// Where a relay CLI moves to another Claude session in `events`: the index of the line that
/// says so (it belongs to the new session) and the new id.
fn rotation_point(live: &LiveSession, events: &[SessionEvent]) -> Option<(usize, String)> {
    // Most batches carry no session id at all: no lock, no copy.
    if !events.iter().any(|event| matches!(event, SessionEvent::ClaudeSessionId(_))) {
        return None;
    }
    // The first id a connection announces is its session's own, even within this batch.
    let mut current = live.record.lock().ok()?.claude_session_id.clone();
    let (index, new) = events.iter().enumerate().find_map(|(index, event)| match event {
        SessionEvent::ClaudeSessionId(new) => match &current {
            Some(current) if current != new => Some((index, new.clone())),
            Some(_) => None,
            None => {
                current = Some(new.clone());
                None
            }
        },
        _ => None,
    })?;
    // The core emits the id right after the line that carried it.
    let at = events[..index]
        .iter()
        .rposition(|event| matches!(event, SessionEvent::Line(_)))
        .unwrap_or(index);
    Some((at, new))
}

/// Stores events, then publishes them (for a relay session, the CLI's raw lines to the relay's
/// frontends too) and updates the session's record.
///
/// Nothing is published that is not stored, and a sequence number is used only by a stored
/// event. When the store refuses a batch, subscribers and dashboards are told and the batch is
/// tried again (the pump reads nothing more meanwhile, so the CLI is held back and memory stays
/// bounded); if it is still refused after [`STORE_RETRY_LIMIT`], the session is stopped and
/// marked crashed with the reason. Returns false then: the session's events are being lost.
async fn publish(
    daemon: &Arc<Daemon>,
    id: &str,
    live: &Arc<LiveSession>,
    batch: &[SessionEvent],
    seq: &mut u64,
    relay: bool,
) -> bool {
    if batch.is_empty() {
        return true;
    }
    let records: Vec<Arc<EventRecord>> = batch
        .iter()
        .zip(*seq + 1..)
        .map(|(event, seq)| {
            let dir = match event {
                SessionEvent::Line(line) if line.direction == LineDirection::FromCli => "from_cli",
                SessionEvent::Line(_) => "to_cli",
                _ => "switchboard",
            };
            Arc::new(event_record(id, seq, dir, event.kind(), event.to_json_text()))
        })
        .collect();
    if !store_with_retries(daemon, id, live, &records).await {
        return false;
    }
    let mut turn_ends = Vec::new();
    let mut spent = 0.0;
    let changed = project(live, batch, &mut turn_ends, &mut spent);
    if !daemon.notifier.is_idle() {
        notify(daemon, &daemon.notifier, id, live, batch, &turn_ends, *seq);
    }
    if spent > 0.0 {
        daemon.spend(id, live, spent);
    } else if batch
        .iter()
        .any(|event| matches!(event, SessionEvent::State { to: SessionState::Working, .. }))
        && live.paused().is_some()
    {
        // (The batch first: it is at hand, where the pause is behind a lock of its own.)
        // A turn began while paused (one the CLI had queued): it stops.
        daemon.check_budget(id, live);
    }
    *seq += records.len() as u64;
    if relay {
        for event in batch {
            if let SessionEvent::Line(line) = event {
                if line.direction == LineDirection::FromCli {
                    daemon.relay_publish(&line.raw).await;
                }
            }
        }
    }
    if let Some(tail) = live.tail() {
        for record in records {
            let _ = tail.send(record);
        }
    }
    if changed {
        daemon.record_changed(live);
    }
    true
}

/// A turn of the main conversation that ended, as the projection read it, at `index` in its
/// batch.
struct TurnEnd {
    index: usize,
    subtype: String,
    interrupted: bool,
    failed: bool,
    result: Option<String>,
}

/// Queues a notice for each event of `batch` (stored after `before`) a person may want to
/// hear of: a permission request or a question (with its link), a turn's end (`turn_ends`,
/// the projection's reading of the batch; an interrupted turn is the person's own doing and
/// is not told), a CLI that ended unasked.
fn notify(
    daemon: &Arc<Daemon>,
    notifier: &crate::notify::Notifier,
    id: &str,
    live: &LiveSession,
    batch: &[SessionEvent],
    turn_ends: &[TurnEnd],
    before: u64,
) {
    use crate::notify::Topic;
    let (title, cwd) = live
        .record
        .lock()
        .map(|record| (record.title.clone().unwrap_or_default(), record.cwd.clone()))
        .unwrap_or_default();
    let session = json!({"id": id, "title": title, "cwd": cwd});
    let name = if title.is_empty() { id.to_owned() } else { title.clone() };
    // What to tell, by its place in the batch: turns' ends as the projection read them, then
    // requests and unasked exits from the events themselves.
    let mut notices: Vec<(usize, Told)> = turn_ends
        .iter()
        .filter(|turn| !turn.interrupted)
        .map(|turn| {
            let text = turn.result.clone().filter(|text| !text.is_empty());
            let text = text.unwrap_or_else(|| turn.subtype.clone()).chars().take(500).collect();
            let (topic, title) = if turn.failed {
                (Topic::SessionFailed, format!("Failed: {name}"))
            } else {
                (Topic::SessionFinished, format!("Done: {name}"))
            };
            let extra = json!({"result": {"subtype": turn.subtype, "is_error": turn.failed}});
            let key = format!("{id}:{}", before + 1 + turn.index as u64);
            (turn.index, Told { topic, key, title, text, request: None, extra })
        })
        .collect();
    for (index, (event, seq)) in batch.iter().zip(before + 1..).enumerate() {
        match event {
            SessionEvent::PermissionRequested(pending) => {
                let question = pending.tool_name == "AskUserQuestion";
                let topic = if question { Topic::Question } else { Topic::PermissionRequested };
                let title = if question {
                    format!("Claude asks, in {name}")
                } else {
                    format!("{} wants approval, in {name}", pending.tool_name)
                };
                let (input, cut) = crate::notify::bounded_input(&pending.input);
                let expires_ms =
                    pending.asked_at_ms.saturating_add(pending.timeout_secs.saturating_mul(1000));
                let extra = json!({
                    "request": {
                        "request_id": pending.request_id, "tool_name": pending.tool_name,
                        "input": input, "input_truncated": cut, "reason": pending.reason,
                        "started_by": pending.started_by, "asked_at_ms": pending.asked_at_ms,
                        "expires_ms": expires_ms,
                    },
                    // One tap approves only what the notice shows whole.
                    "one_tap": crate::notify::one_tap(&pending.tool_name, &pending.input),
                });
                // The timers keep the request's ids, not its input (up to a line's size).
                let mut request = pending.clone();
                request.input = Value::Null;
                let told = Told {
                    topic,
                    key: format!("{id}:{}", pending.request_id),
                    title,
                    text: crate::notify::summary(&pending.tool_name, &pending.input),
                    request: Some(request),
                    extra,
                };
                notices.push((index, told));
            }
            SessionEvent::Exited { requested: false, code, description, .. }
                if *code != Some(0) =>
            {
                let told = Told {
                    topic: Topic::SessionFailed,
                    key: format!("{id}:{seq}"),
                    title: format!("Ended: {name}"),
                    text: description.clone(),
                    request: None,
                    extra: json!({"exit": {"code": code, "description": description}}),
                };
                notices.push((index, told));
            }
            _ => {}
        }
    }
    notices.sort_by_key(|(index, _)| *index);
    let route = live.route();
    for (_, told) in notices {
        tell(daemon, notifier, id, &session, &route, told);
    }
}

/// A notice before its body is made.
struct Told {
    topic: crate::notify::Topic,
    key: String,
    title: String,
    text: String,
    request: Option<PendingPermission>,
    extra: Value,
}

/// Queues `told` for the channels that hear of it at once; for a request, starts the timers of
/// the channels that hear of it later, and of the warning before it times out.
fn tell(
    daemon: &Arc<Daemon>,
    notifier: &crate::notify::Notifier,
    id: &str,
    session: &Value,
    route: &switchboard_session::NotifyRoute,
    told: Told,
) {
    use crate::notify::{Notice, Topic};
    let Told { topic, key, title, text, request, extra } = told;
    let mut body = json!({
        "id": key, "event": topic.as_str(), "ts_ms": switchboard_store::now_ms(),
        "session": session, "title": title, "text": text,
    });
    if let (Some(body), Value::Object(extra)) = (body.as_object_mut(), extra) {
        body.extend(extra);
    }
    let notice = Notice { topic, key, body, request: request.clone() };
    let link =
        |channel: &str| request.as_ref().map(|pending| daemon.approval_link(id, pending, channel));
    notifier.queue(&notice, |channel| channel.hears(topic, route) == Some(None), link);
    let Some(pending) = &request else { return };
    // Escalation: channels that hear of a request only if it still waits after a while (a
    // link of the chain after the request times out is never reached: no timer).
    let timeout = Duration::from_secs(pending.timeout_secs);
    let warn = pending.timeout_secs - (pending.timeout_secs / 2).min(60);
    let mut told = Vec::new();
    for channel in notifier.channels().iter() {
        match channel.hears(topic, route) {
            Some(None) => told.push(channel.name.clone()),
            Some(Some(after)) if pending.timeout_secs == 0 || after < timeout => {
                if after.as_secs() <= warn {
                    told.push(channel.name.clone());
                }
                let name = channel.name.clone();
                let pick = move |channel: &crate::notify::ChannelConfig| channel.name == name;
                later(daemon, id, pending, after, notice.clone(), pick);
            }
            _ => {}
        }
    }
    // Shortly before it times out, the channels told of it by then (not a later link of the
    // chain, nor a channel that came after it was asked).
    if pending.timeout_secs > 0 {
        let mut expiring = notice.clone();
        expiring.topic = Topic::RequestExpiring;
        expiring.key = format!("{}:expiring", notice.key);
        expiring.body["id"] = json!(expiring.key);
        expiring.body["event"] = json!(Topic::RequestExpiring.as_str());
        expiring.body["title"] =
            json!(format!("Expires soon: {}", notice.body["title"].as_str().unwrap_or("")));
        let told = move |channel: &crate::notify::ChannelConfig| told.contains(&channel.name);
        later(daemon, id, pending, Duration::from_secs(warn), expiring, told);
    }
}

/// Queues `notice` for the channels `pick` chooses `after` the request `pending` was asked,
/// if it still waits then.
fn later(
    daemon: &Arc<Daemon>,
    id: &str,
    pending: &PendingPermission,
    after: Duration,
    notice: crate::notify::Notice,
    pick: impl Fn(&crate::notify::ChannelConfig) -> bool + Send + 'static,
) {
    let (daemon, id, pending) = (Arc::downgrade(daemon), id.to_owned(), pending.clone());
    let due =
        pending.asked_at_ms.saturating_add(u64::try_from(after.as_millis()).unwrap_or(u64::MAX));
    let wait = Duration::from_millis(due.saturating_sub(switchboard_store::now_ms()));
    tokio::spawn(async move {
        tokio::time::sleep(wait).await;
        let Some(daemon) = daemon.upgrade() else { return };
        let waiting = daemon
            .pending_permissions(&id)
            .iter()
            .any(|still| still.request_id == pending.request_id);
        if waiting {
            let mut notice = notice;
            notice.body["ts_ms"] = json!(switchboard_store::now_ms());
            let link = |channel: &str| Some(daemon.approval_link(&id, &pending, channel));
            daemon.notifier.queue(&notice, pick, link);
        }
    });
}

/// Whether `records` (one session's, in order) are all in the store, exactly as they are.
async fn stored_already(store: &dyn Store, records: &[Arc<EventRecord>]) -> bool {
    let Some(first) = records.first() else { return true };
    match store.events_after(&first.session_id, first.seq - 1, records.len()).await {
        Ok(stored) => {
            stored.len() == records.len()
                && stored.iter().zip(records).all(|(stored, record)| *stored == **record)
        }
        Err(_) => false,
    }
}

/// Appends `records`, retrying while the store refuses them (see [`publish`]). Whether they
/// are stored.
async fn store_with_retries(
    daemon: &Arc<Daemon>,
    id: &str,
    live: &Arc<LiveSession>,
    records: &[Arc<EventRecord>],
) -> bool {
    let limit = daemon.config.store_retry_limit.unwrap_or(STORE_RETRY_LIMIT);
    let started = tokio::time::Instant::now();
    let mut pause = Duration::from_millis(50);
    let mut retried = false;
    loop {
        let appended = match daemon.store.append_shared(records).await {
            // A try that failed may have committed all the same (a database connection that
            // dropped as it committed): then the events are there, exactly, and stored.
            Err(StoreError::OutOfSequence { .. })
                if retried && stored_already(&*daemon.store, records).await =>
            {
                Ok(())
            }
            other => other,
        };
        match appended {
            Ok(()) => {
                // Subscribers hear of a change only (every append passes here: the flag
                // first, the watch's write lock only when there is an error to clear).
                let failing = live.store_failing.load(std::sync::atomic::Ordering::Acquire);
                if failing {
                    live.store_failing.store(false, std::sync::atomic::Ordering::Relaxed);
                }
                if failing && live.store_error.send_if_modified(|error| error.take().is_some()) {
                    tracing::info!(session = %id, "the store takes this session's events again");
                    let _ = daemon
                        .dashboard
                        .send(json!({"event": "store_recovered", "session_id": id}));
                }
                return true;
            }
            Err(error) => {
                let reason = format!("the event log cannot be written: {error}");
                let first = live.store_error.send_if_modified(|error| {
                    let first = error.is_none();
                    *error = Some(reason.clone());
                    first
                });
                // After the watch: whoever finds the flag set finds the error to clear.
                live.store_failing.store(true, std::sync::atomic::Ordering::Release);
                if first {
                    tracing::error!(session = %id, %error, "cannot store events; retrying, the CLI waits");
                    let _ = daemon.dashboard.send(json!({
                        "event": "store_failing", "session_id": id, "error": reason,
                    }));
                }
                if started.elapsed() >= limit {
                    fail_session(daemon, id, live, &reason).await;
                    return false;
                }
                retried = true;
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(2));
            }
        }
    }
}

/// Notes in the log that `lost` events could not be stored (one try: the session is
/// failing). Whether it was stored; the log then goes on from the next seq.
async fn note_lost(
    daemon: &Arc<Daemon>,
    id: &str,
    live: &Arc<LiveSession>,
    seq: &mut u64,
    lost: &mut u64,
) -> bool {
    let reason = live.store_error.borrow().clone().unwrap_or_default();
    let payload = json!({"event": "lost", "count": *lost, "reason": reason});
    let record = Arc::new(event_record(id, *seq + 1, "switchboard", "lost", payload.to_string()));
    if daemon.store.append_shared(std::slice::from_ref(&record)).await.is_err() {
        return false;
    }
    *seq += 1;
    *lost = 0;
    live.store_failing.store(false, std::sync::atomic::Ordering::Relaxed);
    live.store_error.send_if_modified(|error| error.take().is_some());
    if let Some(tail) = live.tail() {
        let _ = tail.send(record);
    }
    true
}

/// The store refused a session's events for too long: its CLI is stopped (in the background:
/// the pump goes on draining its events, which cannot be stored) and its record, kept in
/// memory when the store cannot take it, says why.
async fn fail_session(daemon: &Arc<Daemon>, id: &str, live: &Arc<LiveSession>, reason: &str) {
    tracing::error!(session = %id, %reason, "giving up on storing this session's events; stopping it");
    if let Some(handle) = live.handle() {
        tokio::spawn(async move {
            let _ = handle.shutdown(STOP_GRACE).await;
        });
    }
    if let Ok(mut record) = live.record.lock() {
        record.state = "crashed".into();
        record.updated_ms = now_ms();
    }
    let _ = daemon
        .dashboard
        .send(json!({"event": "session_failed", "session_id": id, "error": reason}));
    daemon.record_changed(live);
}

/// Waits until a session's pump has finished (or its sender is gone).
async fn ended(finished: &mut watch::Receiver<bool>) {
    // The guard `wait_for` returns is dropped at once: it must not live across an await.
    let _ = finished.wait_for(|finished| *finished).await.map(|_| ());
}

/// Who hears of a session: its policy's `[notify]`, its own channels (`notify` at create)
/// replacing the policy's.
fn route_of(policy: &Policy, record: &SessionRecord) -> switchboard_session::NotifyRoute {
    let mut route = policy.notify.clone();
    if let Some(channels) = record.config.get("notify").and_then(|value| {
        serde_json::from_value::<Option<Vec<String>>>(value.clone()).ok().flatten()
    }) {
        route.channels = Some(channels);
    }
    // A chain reaches only channels the session hears on; with none of them left, requests
    // go to those channels at once.
    if let Some(channels) = &route.channels {
        route.escalate.retain(|step| channels.contains(&step.channel));
    }
    route
}

/// A session's worktree, if it has one.
fn worktree_of(record: &SessionRecord) -> Option<crate::worktree::Worktree> {
    serde_json::from_value(record.config.get("worktree")?.clone()).ok()
}

/// What a session has spent in all: the sum of its turns' costs (`config.spent_usd`), or, for
/// a record from before that was kept, what its CLI last reported.
fn spent(record: &SessionRecord) -> f64 {
    record.config.get("spent_usd").and_then(Value::as_f64).unwrap_or(record.cost_usd)
}

fn current_record(live: &LiveSession) -> Option<SessionRecord> {
    live.record.lock().ok().map(|record| record.clone())
}

/// Projects a batch of events and updates the record from the view; whether anything a
/// dashboard shows changed.
///
/// The record reads only the session's one projection (state, model, mode, cost, and, where
/// the record has none yet, a title from the first prompt and the cwd a CLI that connected on
/// its own reports).
fn project(
    live: &LiveSession,
    batch: &[SessionEvent],
    turn_ends: &mut Vec<TurnEnd>,
    spent: &mut f64,
) -> bool {
    let Ok(mut projector) = live.projector.lock() else { return false };
    let mut changed = false;
    for (index, event) in batch.iter().enumerate() {
        // The cost follows a result, and may land in the next batch; a dropped or restored
        // CLI socket shows in the session list.
        changed |= matches!(
            event,
            SessionEvent::CostChanged(_)
                | SessionEvent::Connected { .. }
                | SessionEvent::Disconnected
        );
        projector.apply(event, &mut |update| {
            changed |= update.changes_summary();
            // What the batch's turns (a subagent's too) cost, for the budgets.
            if let switchboard_session::Update::TurnEnded { cost_usd, .. } = &update {
                if cost_usd.is_finite() && *cost_usd > 0.0 {
                    *spent += cost_usd;
                }
            }
            // The main conversation's turns that ended, for notifications (a subagent's
            // result is not the session's).
            if let switchboard_session::Update::TurnEnded {
                parent_tool_use_id: None,
                subtype,
                interrupted,
                failed,
                result,
                ..
            } = update
            {
                turn_ends.push(TurnEnd { index, subtype, interrupted, failed, result });
            }
        });
    }
    if !changed {
        return false;
    }
    let Ok(mut record) = live.record.lock() else { return false };
    let view = projector.view();
    if let Some(state) = view.state {
        // A paused session reads so until it is let go on or ends.
        let paused = !state.is_final() && live.paused().is_some();
        record.state = if paused { "paused".to_owned() } else { state.as_str().to_owned() };
    }
    if view.claude_session_id.is_some() {
        record.claude_session_id.clone_from(&view.claude_session_id);
    }
    if view.model.is_some() {
        record.model.clone_from(&view.model);
    }
    if view.permission_mode.is_some() {
        record.permission_mode.clone_from(&view.permission_mode);
    }
    if view.cost_usd > 0.0 || view.turns > 0 {
        record.cost_usd = view.cost_usd;
    }
    if record.title.is_none() {
        record.title.clone_from(&view.title);
    }
    if record.cwd.is_empty() {
        if let Some(cwd) = &view.cwd {
            record.cwd.clone_from(cwd);
        }
    }
    record.updated_ms = now_ms();
    true
}

fn event_record(
    session_id: &str,
    seq: u64,
    dir: &'static str,
    kind: &'static str,
    payload: String,
) -> EventRecord {
    EventRecord {
        session_id: session_id.to_owned(),
        seq,
        ts_ms: now_ms(),
        dir: dir.into(),
        kind: kind.into(),
        payload,
    }
}

/// A policy given inline (TOML text), as `auto-approve`, or as a path to a file.
///
/// A file is read off the async runtime, within [`POLICY_READ_TIMEOUT`], and only if it is a
/// regular file of at most [`MAX_POLICY_FILE_BYTES`] (a device or a named pipe is refused
/// without reading it). An error about a file never quotes its content: the path may name a
/// file the caller could not otherwise read (`/proc/self/cmdline` holds the daemon's token).
pub async fn load_policy(text: &str) -> Result<Policy, DaemonError> {
    if text.trim() == "auto-approve" {
        // Seed 003's relays approve everything; a deliberate choice, never a default.
        return Ok(Policy::allow_all());
    }
    let looks_inline = text.contains('\n') || text.contains('=') || text.trim().is_empty();
    if looks_inline {
        return Policy::from_toml(text).map_err(|error| DaemonError::Invalid(error.to_string()));
    }
    let path = PathBuf::from(text);
    let shown = path.display().to_string();
    let read = tokio::task::spawn_blocking({
        let path = path.clone();
        move || read_policy_file(&path)
    });
    let contents = match tokio::time::timeout(POLICY_READ_TIMEOUT, read).await {
        Ok(Ok(result)) => result?,
        Ok(Err(_)) => return Err(DaemonError::Internal("the policy reader failed".into())),
        Err(_) => {
            return Err(DaemonError::Invalid(format!(
                "policy file {shown:?} could not be read within {} s",
                POLICY_READ_TIMEOUT.as_secs()
            )))
        }
    };
    Policy::from_toml(&contents).map_err(|error| {
        // Where, never what: the message of a TOML error quotes the line.
        let at = match &error {
            switchboard_session::PolicyError::Toml(toml) => toml.span().map(|span| {
                let before = &contents[..span.start.min(contents.len())];
                let line = before.matches('\n').count() + 1;
                let column = before.rsplit('\n').next().map_or(0, |text| text.chars().count()) + 1;
                format!(" (TOML error at line {line}, column {column})")
            }),
            switchboard_session::PolicyError::Rule { .. } => Some(" (a rule is not valid)".into()),
            other => Some(format!(" ({other})")),
        };
        DaemonError::Invalid(format!(
            "policy file {shown:?} is not a valid policy{}",
            at.unwrap_or_default()
        ))
    })
}

/// Reads a policy file: a regular file, at most [`MAX_POLICY_FILE_BYTES`], UTF-8. Opened
/// without blocking, so a named pipe with no writer cannot hold the reader.
fn read_policy_file(path: &std::path::Path) -> Result<String, DaemonError> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let shown = path.display().to_string();
    let cannot = |error: std::io::Error| {
        DaemonError::Invalid(format!("cannot read policy file {shown:?}: {}", error.kind()))
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK | nix::libc::O_NOCTTY)
        .open(path)
        .map_err(cannot)?;
    let metadata = file.metadata().map_err(cannot)?;
    if !metadata.is_file() {
        return Err(DaemonError::Invalid(format!("policy file {shown:?} is not a regular file")));
    }
    if metadata.len() > MAX_POLICY_FILE_BYTES {
        return Err(DaemonError::Invalid(format!(
            "policy file {shown:?} is larger than {} KiB",
            MAX_POLICY_FILE_BYTES / 1024
        )));
    }
    let mut bytes = Vec::new();
    file.take(MAX_POLICY_FILE_BYTES + 1).read_to_end(&mut bytes).map_err(cannot)?;
    if bytes.len() as u64 > MAX_POLICY_FILE_BYTES {
        return Err(DaemonError::Invalid(format!(
            "policy file {shown:?} is larger than {} KiB",
            MAX_POLICY_FILE_BYTES / 1024
        )));
    }
    String::from_utf8(bytes)
        .map_err(|_| DaemonError::Invalid(format!("policy file {shown:?} is not UTF-8 text")))
}

/// A relay status line for frontends (`{"type":"status","text":…}`, the agents-ui relay
/// protocol's own).
pub(crate) fn relay_status(text: &str) -> String {
    json!({"type": "status", "text": text}).to_string()
}

/// A session record as clients see it: how its CLI is launched ([`Launch`]), minus secrets. The
/// values of `env` are replaced (the names stay), and so are those of each inline MCP server's
/// `env` and `headers` (which carry API keys). The store keeps them, for a resume.
pub fn public_record(mut record: SessionRecord) -> SessionRecord {
    if let Some(Value::Object(env)) = record.config.get_mut("env") {
        hide_values(env);
    }
    if let Some(Value::Array(configs)) = record.config.get_mut("mcp_config") {
        for config in configs {
            let Some(text) = config.as_str() else { continue };
            // A path to a file stays as it is; inline JSON is shown without its secrets.
            let Ok(mut parsed) = serde_json::from_str::<Value>(text) else { continue };
            if let Some(Value::Object(servers)) = parsed.get_mut("mcpServers") {
                for server in servers.values_mut() {
                    for key in ["env", "headers"] {
                        if let Some(Value::Object(values)) = server.get_mut(key) {
                            hide_values(values);
                        }
                    }
                }
            }
            *config = Value::from(parsed.to_string());
        }
    }
    record
}

fn hide_values(map: &mut serde_json::Map<String, Value>) {
    for value in map.values_mut() {
        *value = Value::from("(hidden)");
    }
}

/// Whether the session is an interactive CLI in a person's terminal
/// ([`Daemon::attach_terminal`]).
pub fn is_terminal(record: &SessionRecord) -> bool {
    record.config["transport"] == "terminal"
}

/// What a terminal says of the interactive CLI it runs, as it registers it
/// ([`Daemon::attach_terminal`]).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TerminalHello {
    /// Where the CLI runs.
    pub cwd: PathBuf,
    /// The Claude session its transcript belongs to, when known.
    #[serde(default)]
    pub claude_session_id: Option<String>,
    /// The CLI's version, when known.
    #[serde(default)]
    pub cli_version: Option<String>,
}

/// Whether a session state string is final.
pub fn is_final_state(state: &str) -> bool {
    matches!(state, "exited" | "crashed")
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
