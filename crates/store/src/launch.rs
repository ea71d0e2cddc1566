//! How a session's CLI is launched, as its record keeps it for a resume: the typed `config`
//! of a [`crate::SessionRecord`].
//!
//! It is text (JSON) in the database, as it always was, and the same JSON on the wire: every key
//! is written, so a client that reads `config.max_budget_usd` reads `null` rather than nothing.
//! Reading is lenient: a key this release does not know is dropped (a record of a newer node,
//! or one written before `Launch` that held the whole create request), and a key that is missing
//! takes its default.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// How a session's CLI is launched: what its record keeps for a resume. It is the create
/// request without what applies once (the first prompt, the Claude session to resume or fork,
/// the message to fork at, the node to run on). Its secrets (`env` values, inline MCP servers'
/// `env` and `headers`) stay in the store; faces show [`Launch::public`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
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
    /// The notify file's channels that hear of this session (default: its policy's, else
    /// every channel; `web-push`: every browser subscribed).
    pub notify: Option<Vec<String>>,
    /// Its git worktree, made at create; `cwd` is in it. (Records written before `Launch` hold
    /// the create request's `true` or `false` here: read as none.)
    #[serde(deserialize_with = "worktree_or_flag")]
    pub worktree: Option<Worktree>,
    /// What the session may spend (US dollars, as its CLI reports it): reached, the session
    /// pauses until a person raises it.
    pub max_budget_usd: Option<f64>,
    /// MCP servers (`--mcp-config`): each a JSON config (`{"mcpServers": {...}}`) or a path
    /// to one.
    pub mcp_config: Vec<String>,
    /// The CLI binary.
    pub claude: Option<PathBuf>,
    /// How the CLI is reached.
    pub transport: Option<TransportKind>,
    /// Extra environment for the CLI.
    pub env: BTreeMap<String, String>,
    /// Shown to relay frontends as a relay CLI (`switchboard loop`'s tasks are).
    pub relay: bool,
    /// The CLI's version, as a person's terminal said it when it registered its CLI (the
    /// daemon launches none there).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cli_version: Option<String>,
    /// Which face started it and with which token (set by the daemon, never by a request);
    /// `None` for a session of a release before it was kept, a relay's, a terminal's.
    pub origin: Option<Origin>,
    /// The schedule or trigger run that started it (set by the daemon, never by a request).
    pub run: Option<RunOf>,
    /// It pauses when one of the account's usage windows reaches this share (0 to 1): the most
    /// of a window it spends unattended.
    pub max_window_utilization: Option<f64>,
}

/// The schedule or trigger run a session is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunOf {
    /// `schedule` or `trigger`.
    pub kind: RunKind,
    /// The schedule's or trigger's name.
    pub name: String,
    /// A schedule's run: when it fell due (Unix milliseconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub due_ms: Option<u64>,
    /// A trigger's run: the delivery's id, when it sent one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery: Option<String>,
}

/// What ran a session unattended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunKind {
    /// A schedule.
    Schedule,
    /// A trigger's webhook.
    Trigger,
}

/// Who started a session, through which face: what every face shows of it, and the ceiling
/// that bounds it for good when the token had one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Origin {
    /// The face.
    pub face: Face,
    /// The token's name (`admin` for the daemon's own, the name of an unnamed caller such as
    /// `local` under `--no-auth`).
    pub token: String,
    /// The token's ceiling, a policy's TOML, as it was when the session started: the session
    /// is bounded by it on every run, and shown as started under it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ceiling: Option<String>,
}

/// The face a session was started through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Face {
    /// The REST API (a script, `switchboard run`, the web UI).
    Api,
    /// The gRPC API.
    Grpc,
    /// An agent, through the MCP server (`/mcp`).
    Mcp,
    /// An editor, through the Agent Client Protocol agent (`switchboard acp`).
    Acp,
    /// A schedule's run (the token is the one that made the schedule).
    Schedule,
    /// A trigger's run (the token is the one that made the trigger).
    Trigger,
}

impl Face {
    /// Its name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Face::Api => "api",
            Face::Grpc => "grpc",
            Face::Mcp => "mcp",
            Face::Acp => "acp",
            Face::Schedule => "schedule",
            Face::Trigger => "trigger",
        }
    }
}

/// How a session's CLI is reached: the names are the API's (`"transport": "sdk-url"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TransportKind {
    /// The daemon runs it and speaks on its stdin and stdout (the default).
    Stdio,
    /// The daemon runs it and it connects back over WebSocket (`--sdk-url`, CLIs up to 2.1.120).
    SdkUrl,
    /// It connected on its own, as a relay CLI (the agents-ui relay protocol).
    Relay,
    /// An interactive CLI in a person's terminal, registered by `switchboard claude`.
    Terminal,
    /// A Claude Code session Switchboard did not start (a plain `claude`, an editor's, one
    /// started by a script), reached through the hooks `switchboard hooks install` wrote: its
    /// transcript followed, its tool calls put to the policy, nothing typed into it.
    External,
}

impl TransportKind {
    /// Every kind.
    pub const ALL: [TransportKind; 5] = [
        TransportKind::Stdio,
        TransportKind::SdkUrl,
        TransportKind::Relay,
        TransportKind::Terminal,
        TransportKind::External,
    ];

    /// The kind `text` names (the API's name), if any.
    pub fn parse(text: &str) -> Option<TransportKind> {
        TransportKind::ALL.into_iter().find(|kind| kind.as_str() == text)
    }

    /// The name the API uses.
    pub fn as_str(self) -> &'static str {
        match self {
            TransportKind::Stdio => "stdio",
            TransportKind::SdkUrl => "sdk-url",
            TransportKind::Relay => "relay",
            TransportKind::Terminal => "terminal",
            TransportKind::External => "external",
        }
    }
}

/// A session's own git worktree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Worktree {
    /// The repository it was made from (its top level).
    pub repo: PathBuf,
    /// The worktree's folder.
    pub path: PathBuf,
    /// Its branch.
    pub branch: String,
    /// The commit it started from.
    pub base: String,
    /// The branch the repository had checked out then (what a merge goes into), if any.
    pub base_branch: Option<String>,
    /// Its git folder, in the repository's (`.git/worktrees/<name>`). Records written before it
    /// was kept read as git names it: `<repo>/.git/worktrees/<the folder's name>`.
    #[serde(default)]
    pub git_dir: PathBuf,
}

/// What replaces a secret's value where a face shows a launch.
pub const HIDDEN: &str = "(hidden)";

impl Launch {
    /// A launch as the database holds it (JSON text), or what is wrong with it.
    pub fn from_stored(text: &str) -> Result<Launch, String> {
        serde_json::from_str(text)
            .map_err(|error| format!("its launch config is not readable: {error}"))
    }

    /// The launch as the database holds it.
    pub fn to_stored(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| "{}".into())
    }

    /// Whether its CLI reaches the daemon as a relay CLI, or is shown to relay frontends as one.
    pub fn relayed(&self) -> bool {
        self.relay || self.transport == Some(TransportKind::Relay)
    }

    /// The launch as faces show it: the values of `env` replaced (the names stay), and so are
    /// those of each inline MCP server's `env` and `headers` (which carry API keys). A path to
    /// an MCP config stays as it is.
    pub fn public(mut self) -> Launch {
        for value in self.env.values_mut() {
            *value = HIDDEN.into();
        }
        for config in &mut self.mcp_config {
            let Ok(mut parsed) = serde_json::from_str::<serde_json::Value>(config) else {
                continue;
            };
            if let Some(serde_json::Value::Object(servers)) = parsed.get_mut("mcpServers") {
                for server in servers.values_mut() {
                    for key in ["env", "headers"] {
                        if let Some(serde_json::Value::Object(values)) = server.get_mut(key) {
                            for value in values.values_mut() {
                                *value = serde_json::Value::from(HIDDEN);
                            }
                        }
                    }
                }
            }
            *config = parsed.to_string();
        }
        self
    }
}

/// A worktree, or the flag an old record's create request held instead (none).
fn worktree_or_flag<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Worktree>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Stored {
        Tree(Worktree),
        Flag(#[allow(dead_code)] bool),
    }
    Ok(match Option::<Stored>::deserialize(deserializer)? {
        Some(Stored::Tree(mut tree)) => {
            if tree.git_dir.as_os_str().is_empty() {
                let name = tree.path.file_name().unwrap_or_default();
                tree.git_dir = tree.repo.join(".git/worktrees").join(name);
            }
            Some(tree)
        }
        Some(Stored::Flag(_)) | None => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_old_record_reads_its_create_request_as_a_launch() {
        let old = r#"{"cwd":"/work","prompt":"hi","worktree":true,"fork":false,"env":{"K":"v"},"transport":"sdk-url"}"#;
        let launch = Launch::from_stored(old).unwrap();
        assert_eq!(launch.cwd, PathBuf::from("/work"));
        assert_eq!(launch.worktree, None);
        assert_eq!(launch.transport, Some(TransportKind::SdkUrl));
        assert_eq!(launch.env["K"], "v");
        assert_eq!(Launch::from_stored(&launch.to_stored()).unwrap(), launch);
    }

    #[test]
    fn an_unreadable_launch_says_so() {
        let error = Launch::from_stored(r#"{"max_turns":"many"}"#).unwrap_err();
        assert!(error.starts_with("its launch config is not readable"), "{error}");
        assert!(Launch::from_stored(r#"{"transport":"pigeon"}"#).is_err());
    }

    #[test]
    fn every_key_is_written_and_secrets_are_hidden_in_public() {
        let launch = Launch {
            env: [("TOKEN".to_owned(), "s3cret".to_owned())].into(),
            mcp_config: vec![
                r#"{"mcpServers":{"a":{"command":"x","env":{"KEY":"s3cret"},"headers":{"H":"s3cret"}}}}"#.into(),
                "/etc/mcp.json".into(),
            ],
            ..Launch::default()
        };
        let written = serde_json::to_value(&launch).unwrap();
        assert!(written["max_budget_usd"].is_null() && written["worktree"].is_null());
        assert!(written.get("cli_version").is_none());
        let shown = serde_json::to_string(&launch.public()).unwrap();
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("TOKEN") && shown.contains("/etc/mcp.json"), "{shown}");
    }
}
