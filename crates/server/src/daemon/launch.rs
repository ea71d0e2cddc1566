//! What a session is started with: the daemon's configuration ([`DaemonConfig`], its
//! [`Placement`] and warm CLIs), a create request ([`CreateSession`]) and the [`Launch`] kept
//! in its record, and the policy a session loads (a file read with bounds, never blocking).

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

/// What `POST /api/sessions` takes: how to launch the CLI ([`Launch`], which its record keeps)
/// and what applies to the create alone. On the wire it is one flat object; a key neither
/// knows is refused, naming it.
#[derive(Debug, Clone, Default)]
pub struct CreateSession {
    /// How its CLI is launched (`cwd` required).
    pub launch: Launch,
    /// A first prompt.
    pub prompt: Option<String>,
    /// Resume this Claude session id.
    pub resume: Option<String>,
    /// With `resume`: fork into a new session id.
    pub fork: bool,
    /// With `resume`: start from this message (its `uuid`) instead of the end
    /// (`--resume-session-at`); with `fork`, forks the conversation at that message.
    pub resume_at: Option<String>,
    /// Run in a git worktree of its own, on a new branch from the repository's HEAD
    /// ([`crate::worktree`]); the record keeps the worktree made ([`Launch::worktree`]).
    pub worktree: bool,
    /// The node to run it on, where several daemons share a database and a bus (`None`: the
    /// least loaded node that can, see [`Daemon::create`]).
    pub node: Option<String>,
    /// Who asks (set by the daemon from the request's token, never from its body): the first
    /// prompt's permission requests record it as who started the turn.
    pub started_by: Option<String>,
    /// Which face and token start it, with the token's ceiling (set by the daemon from the
    /// request's token, never from its body); its record keeps it ([`Launch::origin`]).
    pub origin: Option<switchboard_store::Origin>,
}

impl CreateSession {
    /// A request for a session in `cwd`, launched as the daemon launches by default.
    pub fn new(cwd: impl Into<PathBuf>) -> CreateSession {
        CreateSession {
            launch: Launch { cwd: cwd.into(), ..Launch::default() },
            ..CreateSession::default()
        }
    }
}

/// The create request's own keys, beside the launch's.
#[derive(Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct CreateOnly {
    prompt: Option<String>,
    resume: Option<String>,
    fork: bool,
    resume_at: Option<String>,
    worktree: bool,
    node: Option<String>,
}

/// The keys a [`Launch`] reads: every one it writes, and `cli_version`, written when set.
fn launch_keys() -> &'static std::collections::BTreeSet<String> {
    static KEYS: std::sync::OnceLock<std::collections::BTreeSet<String>> =
        std::sync::OnceLock::new();
    KEYS.get_or_init(|| {
        let written = serde_json::to_value(Launch::default()).unwrap_or_default();
        let mut keys: std::collections::BTreeSet<String> =
            written.as_object().map(|map| map.keys().cloned().collect()).unwrap_or_default();
        keys.insert("cli_version".into());
        keys
    })
}

impl Serialize for CreateSession {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::Error as _;
        let mut map = match serde_json::to_value(&self.launch).map_err(S::Error::custom)? {
            Value::Object(map) => map,
            _ => return Err(S::Error::custom("a launch is an object")),
        };
        // The worktree asked for, not one made: a create names no worktree of its own.
        map.remove("worktree");
        // The daemon's to set, from the token and the schedule or trigger.
        map.remove("origin");
        map.remove("run");
        // What is unset is left out (a create reads it as its default): a daemon of an older
        // release, which refuses a key it does not know, still takes what a newer one sends
        // when the newer key is not used.
        map.retain(|_, value| !is_unset(value));
        let own = CreateOnly {
            prompt: self.prompt.clone(),
            resume: self.resume.clone(),
            fork: self.fork,
            resume_at: self.resume_at.clone(),
            worktree: self.worktree,
            node: self.node.clone(),
        };
        if let Value::Object(own) = serde_json::to_value(own).map_err(S::Error::custom)? {
            map.extend(own.into_iter().filter(|(_, value)| !is_unset(value)));
        }
        map.serialize(serializer)
    }
}

/// A value a create request reads as its default: null, false, an empty list or object.
fn is_unset(value: &Value) -> bool {
    match value {
        Value::Null | Value::Bool(false) => true,
        Value::Array(items) => items.is_empty(),
        Value::Object(map) => map.is_empty(),
        _ => false,
    }
}

/// A JSON object read whole, refusing a key given twice (which of two values wins is not a
/// question a request should leave open).
struct Object(serde_json::Map<String, Value>);

impl<'de> Deserialize<'de> for Object {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Keys;
        impl<'de> serde::de::Visitor<'de> for Keys {
            type Value = Object;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Object, A::Error> {
                use serde::de::Error as _;
                let mut object = serde_json::Map::new();
                while let Some((key, value)) = map.next_entry::<String, Value>()? {
                    if object.contains_key(&key) {
                        return Err(A::Error::custom(format!("duplicate field `{key}`")));
                    }
                    object.insert(key, value);
                }
                Ok(Object(object))
            }
        }
        deserializer.deserialize_map(Keys)
    }
}

impl<'de> Deserialize<'de> for CreateSession {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        let Object(mut map) = Object::deserialize(deserializer)?;
        // The two a create may ask for; `relay` and `terminal` are how other sessions came.
        match map.get("transport") {
            None | Some(Value::Null) => {}
            Some(Value::String(kind)) if kind == "stdio" || kind == "sdk-url" => {}
            Some(other) => {
                return Err(D::Error::custom(format!(
                    "unknown transport {other} (stdio or sdk-url)"
                )));
            }
        }
        let mut own = serde_json::Map::new();
        for key in ["prompt", "resume", "fork", "resume_at", "worktree", "node"] {
            if let Some(value) = map.remove(key) {
                own.insert(key.to_owned(), value);
            }
        }
        if map.contains_key("origin") {
            return Err(D::Error::custom(
                "`origin` is set by the daemon from the request's token, never by a request",
            ));
        }
        if map.contains_key("run") {
            return Err(D::Error::custom(
                "`run` is set by the daemon for a schedule's or trigger's run, never by a request",
            ));
        }
        if let Some(unknown) = map.keys().find(|key| !launch_keys().contains(*key)) {
            return Err(D::Error::custom(format!("unknown field `{unknown}`")));
        }
        if !map.contains_key("cwd") {
            return Err(D::Error::missing_field("cwd"));
        }
        let launch: Launch =
            serde_json::from_value(Value::Object(map)).map_err(D::Error::custom)?;
        let own: CreateOnly =
            serde_json::from_value(Value::Object(own)).map_err(D::Error::custom)?;
        Ok(CreateSession {
            launch,
            prompt: own.prompt,
            resume: own.resume,
            fork: own.fork,
            resume_at: own.resume_at,
            worktree: own.worktree,
            node: own.node,
            started_by: None,
            origin: None,
        })
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
