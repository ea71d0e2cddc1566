//! What a session is started with: the daemon's configuration ([`DaemonConfig`], its
//! [`Placement`] and warm CLIs), a create request ([`CreateSession`]) and the [`Launch`] kept
//! in its record, and the policy a session loads (a file read with bounds, never blocking).

use super::*;

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
pub(super) fn is_version(text: &str) -> bool {
    text.len() <= 64
        && text.starts_with(|c: char| c.is_ascii_digit())
        && text.chars().all(|c| c.is_ascii_digit() || c == '.')
}

/// The version `cli` says it is, asked within `limit`; `None` (logged) when it says none.
pub(super) async fn ask_cli_version(
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
pub(super) fn within(cwd: &std::path::Path, roots: &[PathBuf]) -> bool {
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
pub(super) enum Transport {
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
pub(super) type Prompt = (String, Option<String>);

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
pub(super) fn read_policy_file(path: &std::path::Path) -> Result<String, DaemonError> {
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
