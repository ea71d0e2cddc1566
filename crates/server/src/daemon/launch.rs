//! What a session is started with: the daemon's configuration ([`DaemonConfig`], its
//! [`Placement`] and warm CLIs), the [`Launch`] kept in its record (a create request is
//! [`crate::create`]'s), and the policy a session loads (a file read with bounds, never
//! blocking).

use super::*;

pub use switchboard_store::{Launch, TransportKind};

/// How a daemon runs sessions.
#[derive(Debug, Clone, Default)]
pub struct DaemonConfig {
    /// The CLI binary when a request names none (`claude` on PATH when `None`).
    pub claude: Option<PathBuf>,
    /// The policy when a request gives none.
    pub default_policy: Option<Policy>,
    /// The policy of the sessions Switchboard did not start, which its installed hooks bring
    /// (`switchboard serve --external-policy`; `None`: `default_policy`'s).
    pub external_policy: Option<Policy>,
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
    /// Where the turns' spans go (`serve --otlp-endpoint`); `None`: no traces.
    pub traces: Option<crate::traces::TraceOptions>,
    /// The bus between daemons sharing the database (`serve --nats-url`): the live tail of
    /// sessions that run on other nodes, and commands forwarded to them ([`crate::bus`]).
    pub bus: Option<Arc<crate::bus::Bus>>,
    /// What this node can run, for placing new sessions among the nodes (`serve --root`,
    /// `--capacity`).
    pub placement: Placement,
    /// The scheduler's clock (tests give one that paused time moves).
    pub clock: crate::schedules::Clock,
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

/// A first prompt and who sent it.
pub(super) type Prompt = (String, Option<switchboard_session::Sender>);

/// A policy given inline (TOML text), as `auto-approve`, or as a path to a file.
///
/// A file is read off the async runtime, within [`POLICY_READ_TIMEOUT`], and only if it is a
/// regular file of at most [`MAX_POLICY_FILE_BYTES`] (a device or a named pipe is refused
/// without reading it). An error about a file never quotes its content: the path may name a
/// file the caller could not otherwise read (`/proc/self/cmdline` holds the daemon's token).
pub async fn load_policy(text: &str) -> Result<Policy, DaemonError> {
    if text.trim() == "auto-approve" {
        // The agents-ui relay protocol's relays approve everything; a deliberate choice, never a default.
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

#[cfg(test)]
mod create_tests {
    use super::*;

    #[test]
    fn a_create_request_is_one_flat_object_of_a_launch_and_its_own_keys() {
        let body = json!({
            "cwd": "/work", "prompt": "hi", "model": "m", "worktree": true, "resume": "c",
            "fork": true, "transport": "sdk-url", "env": {"K": "v"}, "node": "a",
            "cli_version": "2.1.330", "max_budget_usd": 0.5,
        });
        let request: CreateSession = serde_json::from_value(body).unwrap();
        assert_eq!(request.launch.cwd, PathBuf::from("/work"));
        assert_eq!(request.launch.model.as_deref(), Some("m"));
        assert_eq!(request.launch.transport, Some(TransportKind::SdkUrl));
        assert_eq!(request.launch.worktree, None, "a create asks for one; none is made yet");
        assert_eq!(request.launch.cli_version.as_deref(), Some("2.1.330"));
        assert!(request.worktree && request.fork);
        assert_eq!((request.prompt.as_deref(), request.node.as_deref()), (Some("hi"), Some("a")));
        // Written with only what is set (an older daemon refuses a key it does not know).
        let written = serde_json::to_value(CreateSession::new("/w")).unwrap();
        assert_eq!(written, json!({"cwd": "/w"}));
        // Forwarded to another node as it came: the same request reads back.
        let again: CreateSession =
            serde_json::from_value(serde_json::to_value(&request).unwrap()).unwrap();
        assert_eq!(again.launch, request.launch);
        assert_eq!((again.worktree, again.fork, again.prompt), (true, true, Some("hi".into())));
    }

    #[test]
    fn a_create_request_with_a_key_nobody_reads_is_refused_by_name() {
        let error = serde_json::from_value::<CreateSession>(json!({"cwd": "/w", "modle": "m"}))
            .unwrap_err()
            .to_string();
        assert!(error.contains("unknown field `modle`"), "{error}");
        let error = serde_json::from_value::<CreateSession>(json!({"prompt": "hi"}))
            .unwrap_err()
            .to_string();
        assert!(error.contains("missing field `cwd`"), "{error}");
        let error = serde_json::from_value::<CreateSession>(json!({"cwd": "/w", "fork": "yes"}))
            .unwrap_err()
            .to_string();
        assert!(error.contains("invalid type"), "{error}");
        let error =
            serde_json::from_value::<CreateSession>(json!({"cwd": "/w", "transport": "pigeon"}))
                .unwrap_err()
                .to_string();
        assert!(error.contains("unknown transport \"pigeon\" (stdio or sdk-url)"), "{error}");
        let error =
            serde_json::from_value::<CreateSession>(json!({"cwd": "/w", "transport": "relay"}))
                .unwrap_err()
                .to_string();
        assert!(error.contains("unknown transport \"relay\""), "{error}");
        let error =
            serde_json::from_str::<CreateSession>(r#"{"cwd": "/w", "model": "a", "model": "b"}"#)
                .unwrap_err()
                .to_string();
        assert!(error.contains("duplicate field `model`"), "{error}");
        // A worktree is asked for with a flag, never handed in made.
        let error = serde_json::from_value::<CreateSession>(
            json!({"cwd": "/w", "worktree": {"repo": "/", "path": "/", "branch": "b", "base": "c"}}),
        )
        .unwrap_err()
        .to_string();
        assert!(error.contains("invalid type"), "{error}");
    }
}
