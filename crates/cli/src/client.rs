//! The client commands: `switchboard sessions …`, `new`, `send`, `resume`, `interrupt`,
//! `open`, `approve`, `deny`. They talk to a running daemon, found through `--url`/`--token`,
//! `SWITCHBOARD_URL`/`SWITCHBOARD_TOKEN`, or the data directory the daemon wrote. A session is
//! named by its id or any unique prefix of it, as git names commits.

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use futures::StreamExt;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message as WsMessage;

use switchboard_server::error::ErrorAnswer;
use switchboard_server::faces::SessionView;
use switchboard_server::frames::ViewSubscriberFrame;
use switchboard_server::tokens::TokenInfo;
use switchboard_server::view::ViewUpdate;
use switchboard_session::policy::Behavior;
use switchboard_session::projection::{Block, Level};
use switchboard_session::{SessionState, Update};

use crate::serve::DataDirArg;

/// The largest policy file `new --policy` sends.
const MAX_POLICY_BYTES: u64 = 1024 * 1024;

/// How to reach the daemon.
#[derive(Debug, Args)]
pub(crate) struct Connection {
    /// The daemon's URL (default: from the data directory).
    #[arg(long, value_name = "URL", env = "SWITCHBOARD_URL", global = true)]
    url: Option<String>,
    /// The API token (default: from the data directory).
    #[arg(
        long,
        value_name = "TOKEN",
        env = "SWITCHBOARD_TOKEN",
        hide_env_values = true,
        global = true
    )]
    token: Option<String>,
    #[command(flatten)]
    data: DataDirArg,
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    pub(crate) json: bool,
}

/// `switchboard sessions …`
#[derive(Debug, Args)]
pub(crate) struct SessionsArgs {
    #[command(subcommand)]
    command: Option<SessionsCommand>,
    #[command(flatten)]
    connection: Connection,
}

#[derive(Debug, Subcommand)]
enum SessionsCommand {
    /// List sessions (the default).
    Ls,
    /// Show one session, with its pending permission requests.
    Show {
        /// The session: its id or a unique prefix.
        id: String,
    },
    /// Follow a session as it happens: text as it streams, tool calls summed up, approvals
    /// and their decisions, each turn's end (with --json: every event, as stored).
    Tail {
        /// The session: its id or a unique prefix.
        id: String,
        /// Start after this sequence number.
        #[arg(long, default_value_t = 0)]
        after: u64,
    },
    /// Stop a session (its record stays), or delete it with --purge. A worktree session's
    /// worktree goes with --purge when it has no uncommitted change (--force: even then); its
    /// branch stays unless --delete-branch.
    Rm {
        /// The session: its id or a unique prefix.
        id: String,
        /// Also delete its record and event log (and its worktree, when clean).
        #[arg(long)]
        purge: bool,
        /// With --purge: remove the worktree even with changes, and a branch with commits of
        /// its own.
        #[arg(long, requires = "purge")]
        force: bool,
        /// With --purge: delete the worktree's branch too.
        #[arg(long, requires = "purge")]
        delete_branch: bool,
    },
}

/// How a session is started, as `new`, `schedule add` and `trigger add` take it.
#[derive(Debug, Args)]
pub(crate) struct SessionArgs {
    /// The working directory (default: the current one).
    #[arg(long, value_name = "DIR")]
    cwd: Option<PathBuf>,
    /// The model.
    #[arg(long, value_name = "MODEL")]
    model: Option<String>,
    /// A policy file (TOML, Claude Code's rule syntax; sent as text); default: the daemon's.
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// The permission mode (default, acceptEdits, plan, bypassPermissions, dontAsk, auto: the
    /// policy's rules hold, and what no rule decides Claude Code's classifier judges).
    #[arg(long, value_name = "MODE")]
    permission_mode: Option<String>,
    /// Run in a git worktree of its own: a new branch (switchboard/<short id>) from the
    /// repository's HEAD, in a folder beside the repository.
    #[arg(long)]
    worktree: bool,
}

impl SessionArgs {
    /// The create request these flags make (the directory made absolute; the policy file read,
    /// so a daemon on another machine gets it too).
    pub(crate) fn request(&self) -> Result<switchboard_server::CreateSession, String> {
        let cwd = match &self.cwd {
            Some(cwd) => cwd.clone(),
            None => {
                std::env::current_dir().map_err(|error| format!("no working directory: {error}"))?
            }
        };
        let mut request =
            switchboard_server::CreateSession::new(std::path::absolute(&cwd).unwrap_or(cwd));
        request.worktree = self.worktree;
        request.launch.model = self.model.clone();
        request.launch.permission_mode = self.permission_mode.clone();
        request.launch.policy = self.policy.as_deref().map(read_policy).transpose()?;
        Ok(request)
    }
}

/// `switchboard new PROMPT`
#[derive(Debug, Args)]
pub(crate) struct NewArgs {
    /// The first prompt.
    prompt: String,
    #[command(flatten)]
    session: SessionArgs,
    /// Follow the session after starting it, as `sessions tail` does.
    #[arg(long)]
    follow: bool,
    #[command(flatten)]
    connection: Connection,
}

/// `switchboard send SESSION TEXT`
#[derive(Debug, Args)]
pub(crate) struct SendArgs {
    /// The session: its id or a unique prefix.
    session: String,
    /// The message.
    text: String,
    /// While a turn runs: `now` stops it and runs this message next (steering), `later` gives
    /// it a turn of its own after it, `next` (what Claude Code does with a message that names
    /// none) lets it take the message in between tool calls. `now` and `later` need Claude
    /// Code 2.1.120 or newer.
    #[arg(long, value_parser = ["now", "next", "later"])]
    priority: Option<String>,
    /// Steer the running turn: the same as `--priority now`.
    #[arg(long, conflicts_with = "priority")]
    steer: bool,
    #[command(flatten)]
    connection: Connection,
}

/// `switchboard interrupt SESSION`
#[derive(Debug, Args)]
pub(crate) struct InterruptArgs {
    /// The session: its id or a unique prefix.
    session: String,
    /// Also drop every message queued behind the turn, so that the session stops altogether
    /// (Claude Code 2.1.100 or newer).
    #[arg(long)]
    all: bool,
    #[command(flatten)]
    connection: Connection,
}

/// `switchboard resume|interrupt SESSION`
#[derive(Debug, Args)]
pub(crate) struct SessionArg {
    /// The session: its id or a unique prefix.
    session: String,
    #[command(flatten)]
    connection: Connection,
}

/// `switchboard open [SESSION]`
#[derive(Debug, Args)]
pub(crate) struct OpenArgs {
    /// A session to open (its id or a unique prefix); default: the session list.
    session: Option<String>,
    /// Print the address (with the token) instead of starting a browser.
    #[arg(long)]
    print: bool,
    #[command(flatten)]
    connection: Connection,
}

/// `switchboard approve|deny SESSION REQUEST`
#[derive(Debug, Args)]
pub(crate) struct AnswerArgs {
    /// The session: its id or a unique prefix.
    session: String,
    /// The permission request id.
    request: String,
    /// A message for the model (with deny: why).
    #[arg(long)]
    message: Option<String>,
    /// With approve: allow it again without asking for the rest of the session.
    #[arg(long)]
    remember: bool,
    #[command(flatten)]
    connection: Connection,
}

pub(crate) struct Client {
    pub(crate) base: String,
    token: Option<String>,
    http: reqwest::Client,
    /// What the client calls itself to the daemon (`x-switchboard-client`): the turns it
    /// starts are recorded as `token NAME (NAME-HERE)`.
    name: Option<&'static str>,
}

impl Connection {
    /// The data directory it reads, when it names no daemon by hand (`--url`, `--token`): the
    /// one a client may start a daemon for.
    pub(crate) fn own_data_dir(&self) -> Option<std::path::PathBuf> {
        (self.url.is_none() && self.token.is_none()).then(|| self.data.resolve())
    }

    /// Whether `--json` was asked for.
    pub(crate) fn json(&self) -> bool {
        self.json
    }

    pub(crate) fn client(&self) -> Result<Client, String> {
        let data_dir = switchboard_server::DataDir::new(self.data.resolve());
        let base = match &self.url {
            Some(url) => url.trim_end_matches('/').to_owned(),
            None => data_dir.read_info()?.url,
        };
        // The data directory's token goes only to the daemon that directory names: never to a
        // --url given by hand.
        let token = match (&self.token, &self.url) {
            (Some(token), _) => Some(token.clone()),
            (None, None) => data_dir.stored_api_token(),
            (None, Some(_)) => None,
        };
        Ok(Client { base, token, http: reqwest::Client::new(), name: None })
    }
}

impl Client {
    /// The same client, calling itself `name` to the daemon.
    pub(crate) fn named(mut self, name: &'static str) -> Client {
        self.name = Some(name);
        self
    }

    /// The full id of the session `name` names: itself, or the one session whose id starts
    /// with it.
    async fn resolve(&self, name: &str) -> Result<String, String> {
        if name.is_empty() {
            return Err("name a session (its id or a unique prefix)".to_owned());
        }
        let sessions: Vec<SessionId> =
            typed(self.request(reqwest::Method::GET, "/api/sessions", None).await?)?;
        let ids: Vec<&str> = sessions.iter().map(|session| session.id.as_str()).collect();
        pick(name, &ids)
    }

    pub(crate) async fn request(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, String> {
        let response = self.send(method, path, body).await?;
        let status = response.status();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        if status.is_success() {
            Ok(body)
        } else {
            // The API's one error shape; anything else (a proxy's page) says its status.
            Err(serde_json::from_value::<ErrorAnswer>(body)
                .map_or_else(|_| status.to_string(), |answer| answer.error.message))
        }
    }
}

impl Client {
    /// Sends a request; the response as it comes, whatever its status.
    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<reqwest::Response, String> {
        let mut request = self.http.request(method, format!("{}{path}", self.base));
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        if let Some(name) = self.name {
            request = request.header("x-switchboard-client", name);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        request
            .send()
            .await
            .map_err(|error| format!("cannot reach the daemon at {}: {error}", self.base))
    }

    /// A request whose answer is NDJSON: each line, read as it comes, handed to `line`; an
    /// error status is the API's error, as [`Client::request`] says it.
    pub(crate) async fn lines(
        &self,
        path: &str,
        body: Value,
        mut line: impl FnMut(Value) -> Result<(), String>,
    ) -> Result<(), String> {
        let mut response = self.send(reqwest::Method::POST, path, Some(body)).await?;
        let status = response.status();
        if !status.is_success() {
            let body: Value = response.json().await.unwrap_or(Value::Null);
            return Err(serde_json::from_value::<ErrorAnswer>(body)
                .map_or_else(|_| status.to_string(), |answer| answer.error.message));
        }
        let mut pending = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|error| format!("the daemon's answer broke off: {error}"))?
        {
            pending.extend_from_slice(&chunk);
            while let Some(end) = pending.iter().position(|byte| *byte == b'\n') {
                let text: Vec<u8> = pending.drain(..=end).collect();
                let value = serde_json::from_slice(&text)
                    .map_err(|error| format!("the daemon sent a line that is not JSON: {error}"))?;
                line(value)?;
            }
        }
        Ok(())
    }
}

/// A made token as `switchboard token create` reads it: the token, shown this once.
#[derive(Debug, serde::Deserialize)]
struct MadeToken {
    token: String,
}

/// What a command needs of a session the daemon answered with: its id, read alone, so that a
/// field this client does not know (a newer daemon's) does not stop the command.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct SessionId {
    /// The session's id.
    pub(crate) id: String,
}

/// What the daemon answered, read as the type its API sends (`--json` prints the answer as it
/// came instead, so that a newer daemon's fields are not lost).
pub(crate) fn typed<T: serde::de::DeserializeOwned>(answer: Value) -> Result<T, String> {
    serde_json::from_value(answer)
        .map_err(|error| format!("the daemon's answer is not what this client reads: {error}"))
}

pub(crate) async fn sessions(args: SessionsArgs) -> ExitCode {
    let json_output = args.connection.json;
    let result = async {
        let client = args.connection.client()?;
        match args.command.unwrap_or(SessionsCommand::Ls) {
            SessionsCommand::Ls => {
                let sessions = client.request(reqwest::Method::GET, "/api/sessions", None).await?;
                if json_output {
                    println!("{sessions}");
                } else {
                    print_table(&typed::<Vec<Value>>(sessions)?);
                }
            }
            SessionsCommand::Show { id } => {
                let id = client.resolve(&id).await?;
                let session = client
                    .request(reqwest::Method::GET, &format!("/api/sessions/{id}"), None)
                    .await?;
                if json_output {
                    println!("{session}");
                } else {
                    print_session(&typed(session)?);
                }
            }
            SessionsCommand::Tail { id, after } => {
                let id = client.resolve(&id).await?;
                tail(&client, &id, after, json_output).await?
            }
            SessionsCommand::Rm { id, purge, force, delete_branch } => {
                let id = client.resolve(&id).await?;
                let mut query = Vec::new();
                for (flag, name) in
                    [(purge, "purge"), (force, "force"), (delete_branch, "delete_branch")]
                {
                    if flag {
                        query.push(format!("{name}=true"));
                    }
                }
                let query =
                    if query.is_empty() { String::new() } else { format!("?{}", query.join("&")) };
                let path = format!("/api/sessions/{id}{query}");
                client.request(reqwest::Method::DELETE, &path, None).await?;
                if !json_output {
                    println!("{} {id}", if purge { "deleted" } else { "stopped" });
                }
            }
        }
        Ok::<(), String>(())
    }
    .await;
    finish(result)
}

/// Who answers from this terminal, as the daemon records it: `cli:USER`, keeping only the
/// characters the daemon takes in a `by` (letters, digits, `.`, `_`, `-`, `@`), at most 60.
fn answerer(user: Option<String>) -> String {
    let user: String = user
        .unwrap_or_default()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '@'))
        .take(60)
        .collect();
    format!("cli:{}", if user.is_empty() { "user" } else { &user })
}

pub(crate) async fn answer(args: AnswerArgs, allow: bool) -> ExitCode {
    let result = async {
        let client = args.connection.client()?;
        let body = json!({
            "behavior": if allow { "allow" } else { "deny" },
            "message": args.message,
            "remember": args.remember && allow,
            "by": answerer(std::env::var("USER").ok()),
        });
        let session = client.resolve(&args.session).await?;
        let path = format!("/api/sessions/{session}/permissions/{}", args.request);
        let reply = client.request(reqwest::Method::POST, &path, Some(body)).await?;
        if args.connection.json {
            println!("{reply}");
        } else {
            println!("{} {}", if allow { "approved" } else { "denied" }, args.request);
        }
        Ok::<(), String>(())
    }
    .await;
    finish(result)
}

/// The id `name` names among `ids`: itself, or the only one it starts.
fn pick(name: &str, ids: &[&str]) -> Result<String, String> {
    if ids.contains(&name) {
        return Ok(name.to_owned());
    }
    let matching: Vec<&str> = ids.iter().copied().filter(|id| id.starts_with(name)).collect();
    match matching.as_slice() {
        [one] => Ok((*one).to_owned()),
        [] => Err(format!("no session {name} (switchboard sessions lists them)")),
        many => Err(format!(
            "{name} names {} sessions ({}): give more of the id",
            many.len(),
            many.join(", ")
        )),
    }
}

/// `switchboard new`: starts a session and prints its id.
pub(crate) async fn new(args: NewArgs) -> ExitCode {
    let result = async {
        let client = args.connection.client()?;
        let mut request = args.session.request()?;
        request.prompt = Some(args.prompt.clone());
        let body = serde_json::to_value(&request).map_err(|error| error.to_string())?;
        let session = client.request(reqwest::Method::POST, "/api/sessions", Some(body)).await?;
        let id = typed::<SessionId>(session.clone())?.id;
        if args.connection.json {
            println!("{session}");
        } else {
            println!("{id}");
        }
        if args.follow {
            tail(&client, &id, 0, args.connection.json).await?;
        }
        Ok::<(), String>(())
    }
    .await;
    finish(result)
}

pub(crate) fn read_policy(path: &std::path::Path) -> Result<String, String> {
    use std::io::Read as _;
    let shown = path.display();
    let file =
        std::fs::File::open(path).map_err(|error| format!("cannot open {shown}: {error}"))?;
    let mut text = String::new();
    file.take(MAX_POLICY_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|error| format!("cannot read {shown}: {error}"))?;
    if text.len() as u64 > MAX_POLICY_BYTES {
        return Err(format!("{shown} is over 1 MiB; a policy is a short TOML file"));
    }
    Ok(text)
}

/// `switchboard send`: a message to a session (queued while a turn runs).
pub(crate) async fn send(args: SendArgs) -> ExitCode {
    let result = async {
        let client = args.connection.client()?;
        let id = client.resolve(&args.session).await?;
        let path = format!("/api/sessions/{id}/messages");
        let priority = if args.steer { Some("now".to_owned()) } else { args.priority };
        let mut body = json!({"content": args.text});
        if let Some(priority) = priority {
            body["priority"] = json!(priority);
        }
        let reply = client.request(reqwest::Method::POST, &path, Some(body)).await?;
        if args.connection.json {
            println!("{reply}");
        } else {
            println!("sent to {id}");
        }
        Ok::<(), String>(())
    }
    .await;
    finish(result)
}

/// `switchboard interrupt`.
pub(crate) async fn interrupt(args: InterruptArgs) -> ExitCode {
    let result = async {
        let client = args.connection.client()?;
        let id = client.resolve(&args.session).await?;
        let path = format!("/api/sessions/{id}/interrupt");
        let body = json!({"cancel_queued": args.all});
        let reply = client.request(reqwest::Method::POST, &path, Some(body)).await?;
        if args.connection.json {
            println!("{reply}");
        } else if args.all {
            println!("interrupted {id}, and dropped what was queued");
        } else {
            println!("interrupted {id}");
        }
        Ok::<(), String>(())
    }
    .await;
    finish(result)
}

/// `switchboard resume`.
pub(crate) async fn act(args: SessionArg, action: &'static str) -> ExitCode {
    let result = async {
        let client = args.connection.client()?;
        let id = client.resolve(&args.session).await?;
        let path = format!("/api/sessions/{id}/{action}");
        let reply = client.request(reqwest::Method::POST, &path, Some(json!({}))).await?;
        if args.connection.json {
            println!("{reply}");
        } else {
            println!("{action}d {id}");
        }
        Ok::<(), String>(())
    }
    .await;
    finish(result)
}

/// `switchboard ask SESSION WHAT`
#[derive(Debug, Args)]
pub(crate) struct AskArgs {
    /// The session: its id or a unique prefix.
    session: String,
    /// What to ask its Claude Code: its context window (`context`), the plan's usage
    /// (`usage`), the permission rules of its own settings (`permission-rules`), the hooks
    /// configured (`hooks`).
    #[arg(value_parser = ["context", "usage", "permission-rules", "hooks"])]
    what: String,
    #[command(flatten)]
    connection: Connection,
}

/// `switchboard ask`: what the session's CLI says, in lines (or its JSON with --json).
pub(crate) async fn ask(args: AskArgs) -> ExitCode {
    let result = async {
        let client = args.connection.client()?;
        let id = client.resolve(&args.session).await?;
        let path = format!("/api/sessions/{id}/cli/{}", args.what);
        let answer = client.request(reqwest::Method::GET, &path, None).await?;
        if args.connection.json {
            println!("{answer}");
        } else {
            for line in answer_lines(&args.what, &answer) {
                println!("{line}");
            }
        }
        Ok::<(), String>(())
    }
    .await;
    finish(result)
}

/// A CLI's answer in lines for a person; what they came from is printed with --json.
fn answer_lines(what: &str, answer: &Value) -> Vec<String> {
    let text = |value: &Value| crate::run::plain(value.as_str().unwrap_or(""));
    let count = |value: &Value| value.as_u64().unwrap_or(0);
    match what {
        "context" => {
            let mut lines = vec![format!(
                "{} of {} tokens used ({}%)",
                count(&answer["totalTokens"]),
                count(&answer["maxTokens"]),
                answer["percentage"].as_f64().unwrap_or(0.0)
            )];
            for row in answer["categories"].as_array().into_iter().flatten() {
                if row["kind"] != "free" {
                    lines.push(format!("  {:>9}  {}", count(&row["tokens"]), text(&row["name"])));
                }
            }
            lines
        }
        "permission-rules" => {
            let rules = answer["state"]["rules"].as_array().cloned().unwrap_or_default();
            if rules.is_empty() {
                return vec!["no permission rules in Claude Code's own settings".to_owned()];
            }
            rules
                .iter()
                .map(|rule| {
                    format!(
                        "{:<6} {}  ({})",
                        text(&rule["behavior"]),
                        text(&rule["rule"]),
                        text(&rule["source"])
                    )
                })
                .collect()
        }
        "hooks" => {
            let hooks = answer["hooks"].as_array().cloned().unwrap_or_default();
            if hooks.is_empty() {
                return vec!["no hooks configured".to_owned()];
            }
            hooks
                .iter()
                .map(|hook| {
                    let matcher = hook["matcher"]
                        .as_str()
                        .map(|m| format!(" ({})", crate::run::plain(m)))
                        .unwrap_or_default();
                    format!(
                        "{}{matcher}: {}  ({})",
                        text(&hook["event"]),
                        text(&hook["displayText"]),
                        text(&hook["sourceLabel"])
                    )
                })
                .collect()
        }
        _ => usage_lines(answer),
    }
}

/// `get_usage`'s answer: the session's totals, each model's tokens, and the plan's windows
/// where the login has any (an API key's has none).
fn usage_lines(answer: &Value) -> Vec<String> {
    let text = |value: &Value| crate::run::plain(value.as_str().unwrap_or(""));
    let session = &answer["session"];
    let mut lines = vec![format!(
        "this session: ${:.4}, {:.1} s with the API, +{} -{} lines",
        session["total_cost_usd"].as_f64().unwrap_or(0.0),
        session["total_api_duration_ms"].as_f64().unwrap_or(0.0) / 1000.0,
        session["total_lines_added"].as_u64().unwrap_or(0),
        session["total_lines_removed"].as_u64().unwrap_or(0),
    )];
    for (model, usage) in session["model_usage"].as_object().into_iter().flatten() {
        lines.push(format!(
            "  {}: {} tokens in, {} out, ${:.4}",
            crate::run::plain(model),
            usage["inputTokens"].as_u64().unwrap_or(0)
                + usage["cacheReadInputTokens"].as_u64().unwrap_or(0),
            usage["outputTokens"].as_u64().unwrap_or(0),
            usage["costUSD"].as_f64().unwrap_or(0.0),
        ));
    }
    match answer["rate_limits"].as_object() {
        Some(windows) if answer["rate_limits_available"] == true => {
            let plan = answer["subscription_type"].as_str().map(crate::run::plain);
            lines.push(format!(
                "plan{}:",
                plan.map(|plan| format!(" ({plan})")).unwrap_or_default()
            ));
            for (window, figures) in windows {
                let Some(used) = figures["utilization"].as_f64() else { continue };
                let resets = figures["resets_at"]
                    .as_str()
                    .map(|at| format!(", resets {}", text(&Value::from(at))))
                    .unwrap_or_default();
                lines.push(format!("  {}: {used:.0}% used{resets}", crate::run::plain(window)));
            }
        }
        _ => lines.push("no plan windows (an API key's login has none)".to_owned()),
    }
    lines
}

/// `switchboard stop-task SESSION TASK`
#[derive(Debug, Args)]
pub(crate) struct StopTaskArgs {
    /// The session: its id or a unique prefix.
    session: String,
    /// The task's id, as `switchboard sessions show` lists them; without one, the tasks
    /// running in the background are listed.
    task: Option<String>,
    #[command(flatten)]
    connection: Connection,
}

/// `switchboard stop-task`: stops one task running in the background (the turn goes on), or
/// lists them.
pub(crate) async fn stop_task(args: StopTaskArgs) -> ExitCode {
    let result = async {
        let client = args.connection.client()?;
        let id = client.resolve(&args.session).await?;
        let Some(task) = args.task else {
            let session =
                client.request(reqwest::Method::GET, &format!("/api/sessions/{id}"), None).await?;
            let tasks = session["background_tasks"].as_array().cloned().unwrap_or_default();
            if args.connection.json {
                println!("{}", Value::Array(tasks));
            } else if tasks.is_empty() {
                println!("nothing runs in the background in {id}");
            } else {
                for task in &tasks {
                    println!(
                        "{}  {}  {}",
                        crate::run::plain(task["task_id"].as_str().unwrap_or("")),
                        crate::run::plain(task["task_type"].as_str().unwrap_or("")),
                        crate::run::plain(task["description"].as_str().unwrap_or(""))
                    );
                }
            }
            return Ok(());
        };
        let path = format!("/api/sessions/{id}/tasks/{}/stop", query_escape(&task));
        let reply = client.request(reqwest::Method::POST, &path, Some(json!({}))).await?;
        if args.connection.json {
            println!("{reply}");
        } else {
            println!("stopped {task} in {id}");
        }
        Ok::<(), String>(())
    }
    .await;
    finish(result)
}

/// `switchboard open`: the web UI in a browser, signed in.
///
/// The browser gets the token through a private file that forwards to the signed-in address,
/// never on a command line other users of the machine could read (`ps`).
pub(crate) async fn open(args: OpenArgs) -> ExitCode {
    let result = async {
        let client = args.connection.client()?;
        let fragment = match &args.session {
            Some(name) => format!("#/s/{}", client.resolve(name).await?),
            None => String::new(),
        };
        let signed_in = match &client.token {
            Some(token) => format!("{}/?token={}{fragment}", client.base, query_escape(token)),
            None => format!("{}/{fragment}", client.base),
        };
        if args.print {
            println!("{signed_in}");
            return Ok(());
        }
        let page = forwarding_page(&args.connection.data.resolve(), &signed_in)?;
        let browser = std::env::var_os("BROWSER").unwrap_or_else(|| {
            if cfg!(target_os = "macos") { "open".into() } else { "xdg-open".into() }
        });
        #[allow(clippy::disallowed_methods)] // a browser, not the Claude CLI
        let launched = std::process::Command::new(&browser)
            .arg(&page)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
        match launched {
            Ok(_) => println!("opened {}/{fragment}", client.base),
            Err(error) => {
                return Err(format!(
                    "cannot start a browser ({}: {error}); open {}/{fragment} yourself, or print the signed-in address with --print",
                    browser.to_string_lossy(),
                    client.base
                ))
            }
        }
        Ok::<(), String>(())
    }
    .await;
    finish(result)
}

/// A private page (0600, a random name) that forwards the browser to `address`; its path. It
/// stays for the browser to read, in the data directory (itself private) when there is one.
fn forwarding_page(data_dir: &std::path::Path, address: &str) -> Result<PathBuf, String> {
    let dir = if data_dir.is_dir() { data_dir.to_path_buf() } else { std::env::temp_dir() };
    let quoted = serde_json::to_string(address).map_err(|error| error.to_string())?;
    let html = format!(
        "<!doctype html><meta charset=utf-8><title>Switchboard</title>\n\
         <script>location.replace({quoted});</script>\n"
    );
    let mut file = tempfile::Builder::new()
        .prefix("open-")
        .suffix(".html")
        .tempfile_in(&dir)
        .map_err(|error| format!("cannot write a page in {}: {error}", dir.display()))?;
    file.write_all(html.as_bytes()).map_err(|error| error.to_string())?;
    let (_, path) = file.keep().map_err(|error| error.to_string())?;
    Ok(path)
}

/// `text` for a URL's query: everything but letters, digits and `-._~` percent-encoded.
pub(crate) fn query_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

pub(crate) fn finish(result: Result<(), String>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("switchboard: {message}");
            ExitCode::from(1)
        }
    }
}

/// A session's subscriber socket: its events as stored after `after`, or (with `view`) the
/// updates of its view.
pub(crate) async fn subscribe(
    client: &Client,
    id: &str,
    after: u64,
    view: bool,
) -> Result<Socket, String> {
    let view = if view { "&view=true" } else { "" };
    client
        .websocket(&format!("/api/sessions/{id}/subscribe?after={after}{view}"))
        .await
        .map_err(|error| format!("cannot subscribe: {error}"))
}

/// A WebSocket to the daemon.
pub(crate) type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

impl Client {
    /// Opens the daemon's WebSocket at `path`, with the token.
    pub(crate) async fn websocket(&self, path: &str) -> Result<Socket, String> {
        let url = format!("{}{path}", self.base.replacen("http", "ws", 1));
        let mut request = url.into_client_request().map_err(|error| error.to_string())?;
        if let Some(token) = &self.token {
            let value = format!("Bearer {token}")
                .parse()
                .map_err(|_| "the token is not a valid header value".to_owned())?;
            request.headers_mut().insert("authorization", value);
        }
        let (socket, _) = tokio_tungstenite::connect_async(request)
            .await
            .map_err(|error| format!("cannot reach the daemon at {}: {error}", self.base))?;
        Ok(socket)
    }
}

async fn tail(client: &Client, id: &str, after: u64, json_output: bool) -> Result<(), String> {
    // A person reads the session's view (the daemon's one projection of its lines); a script
    // reads the events as stored.
    let mut socket = subscribe(client, id, after, !json_output).await?;
    let mut reader = Reader { session: id.to_owned(), ..Reader::default() };
    let mut stdout = std::io::stdout();
    let mut unknown_told = false;
    while let Some(frame) = socket.next().await {
        let frame = frame.map_err(|error| format!("the connection broke: {error}"))?;
        let WsMessage::Text(text) = frame else { continue };
        if json_output {
            println!("{text}");
            continue;
        }
        let Ok(frame) = serde_json::from_str::<ViewSubscriberFrame>(&text) else {
            // A daemon of a newer release may say what this client does not know: said once,
            // and the tail goes on (`--json` prints every frame as it came).
            if !unknown_told {
                unknown_told = true;
                let note =
                    "! the daemon sent something this client cannot read (a newer daemon?)\n";
                let _ = stdout.write_all(note.as_bytes());
            }
            continue;
        };
        let _ = stdout.write_all(reader.read(&frame).as_bytes());
        let _ = stdout.flush();
    }
    Ok(())
}

/// Turns the view's updates into what a person reads in a terminal.
#[derive(Default)]
struct Reader {
    session: String,
    /// In the middle of a line of streamed text.
    mid_line: bool,
    /// Messages whose text arrived as deltas (their finished block is not printed again).
    streamed: std::collections::HashSet<String>,
}

impl Reader {
    /// The text for one frame (empty for frames with nothing to show).
    fn read(&mut self, frame: &ViewSubscriberFrame) -> String {
        let mut out = String::new();
        match frame {
            ViewSubscriberFrame::View(view) => {
                for update in &view.updates {
                    if let ViewUpdate::Session(update) = update {
                        self.update(update, &mut out);
                    }
                }
            }
            // The daemon's word about the subscription (lagged, store_failing, shutdown, ...).
            ViewSubscriberFrame::Server(said) => {
                let (kind, message) = said.said();
                self.line(&mut out, &format!("! {kind}: {message}"));
            }
        }
        out
    }

    /// Starts a line of its own (ending streamed text first).
    fn line(&mut self, out: &mut String, text: &str) {
        if self.mid_line {
            out.push('\n');
            self.mid_line = false;
        }
        out.push_str(text);
        out.push('\n');
    }

    fn update(&mut self, update: &Update, out: &mut String) {
        // A subagent's work is indented under the call that started it.
        let parent = match update {
            Update::TextDelta { parent_tool_use_id, .. }
            | Update::Block { parent_tool_use_id, .. }
            | Update::ToolResult { parent_tool_use_id, .. }
            | Update::TurnEnded { parent_tool_use_id, .. } => parent_tool_use_id.as_deref(),
            _ => None,
        };
        let nested = parent.is_some();
        let indent = if nested { "  │ " } else { "" };
        match update {
            Update::Prompt { text, .. } => self.line(out, &format!("\n> {text}")),
            Update::TextDelta { message_id, text, .. } if !nested => {
                self.streamed.insert(message_id.clone());
                out.push_str(text);
                self.mid_line = !text.ends_with('\n');
            }
            Update::Block { message_id, block, .. } => match block {
                Block::Text { text } if nested || !self.streamed.contains(message_id) => {
                    self.line(out, &format!("{indent}{text}"));
                }
                Block::Text { .. } if self.mid_line => {
                    out.push('\n');
                    self.mid_line = false;
                }
                Block::ToolUse { name, input, .. } => {
                    let summary = crate::run::summarize(name, input);
                    self.line(out, &format!("{indent}→ {name} {summary}"));
                }
                _ => {}
            },
            Update::ToolResult { text, is_error, .. } => {
                let first = text.lines().next().unwrap_or_default();
                let mark = if *is_error { "✗" } else { "←" };
                let first: String = first.chars().take(100).collect();
                self.line(out, &format!("{indent}  {mark} {first}"));
            }
            Update::PermissionAsked(asked) => {
                let summary = crate::run::summarize(&asked.tool_name, &asked.input);
                let (tool, request, session) = (&asked.tool_name, &asked.request_id, &self.session);
                self.line(
                    out,
                    &format!(
                        "? {tool} {summary}: waiting for you \
                         (switchboard approve {session} {request}, or deny)"
                    ),
                );
            }
            Update::PermissionDecided { tool_name, behavior, by, message, .. } => {
                let allowed = *behavior == Behavior::Allow;
                let said = crate::run::decision(tool_name, allowed, by, message);
                self.line(out, &format!("{indent}{said}"));
            }
            Update::TurnEnded {
                duration_ms,
                cost_usd,
                interrupted,
                failed,
                subtype,
                result,
                ..
            } if !nested => {
                let seconds = *duration_ms as f64 / 1000.0;
                let said = if *interrupted {
                    "— interrupted".to_owned()
                } else if *failed {
                    crate::run::failure(subtype, result.as_deref().unwrap_or_default())
                } else {
                    "— turn done".to_owned()
                };
                self.line(out, &format!("{said} · {seconds:.1} s · ${cost_usd:.4}"));
            }
            Update::Notice { level, text, .. } => {
                let mark = if *level == Level::Info { "·" } else { "!" };
                self.line(out, &format!("{mark} {text}"));
            }
            Update::State { to, .. }
                if matches!(to, SessionState::Exited | SessionState::Crashed) =>
            {
                let to = if *to == SessionState::Exited { "exited" } else { "crashed" };
                self.line(out, &format!("— the session {to}"));
            }
            _ => {}
        }
    }
}

fn print_table(sessions: &[Value]) {
    println!("{:<36}  {:<19}  {:>8}  {:<20}  TITLE", "ID", "STATE", "COST", "MODEL");
    for session in sessions {
        // Each on its own: a session this client cannot read (a newer daemon's) is one row.
        let session = match serde_json::from_value::<SessionView>(session.clone()) {
            Ok(session) => session,
            Err(error) => {
                let id = serde_json::from_value::<SessionId>(session.clone())
                    .map_or_else(|_| "?".to_owned(), |session| session.id);
                println!("{id:<36}  (this client cannot read it: {error})");
                continue;
            }
        };
        let record = &session.record;
        let pending = session.pending_permissions.len();
        let state =
            if pending > 0 { format!("waiting ({pending})") } else { record.state.to_string() };
        println!(
            "{:<36}  {:<19}  {:>8}  {:<20}  {}",
            record.id,
            state,
            format!("${:.4}", record.cost_usd),
            record.model.as_deref().unwrap_or("-"),
            record.title.as_deref().unwrap_or("")
        );
    }
}

fn print_session(session: &SessionView) {
    let record = &session.record;
    let or_dash = |text: &Option<String>| text.clone().unwrap_or_else(|| "-".to_owned());
    let rows = [
        ("id", record.id.clone()),
        ("state", record.state.to_string()),
        ("claude_session_id", or_dash(&record.claude_session_id)),
        ("cwd", record.cwd.clone()),
        ("model", or_dash(&record.model)),
        ("permission_mode", or_dash(&record.permission_mode)),
        ("title", or_dash(&record.title)),
        ("cost_usd", Value::from(record.cost_usd).to_string()),
        ("running", session.running.to_string()),
        (
            "origin",
            record.launch.origin.as_ref().map_or_else(
                || "-".to_owned(),
                |origin| {
                    let ceiling = if origin.ceiling.is_some() { ", under its ceiling" } else { "" };
                    format!("{}, token {}{ceiling}", origin.face.as_str(), origin.token)
                },
            ),
        ),
    ];
    for (key, value) in rows {
        println!("{key:<18} {value}");
    }
    for pending in &session.pending_permissions {
        println!(
            "pending            {} {} {}",
            pending.request_id, pending.tool_name, pending.input
        );
    }
    for task in &session.background_tasks {
        println!(
            "background         {} {} {}",
            crate::run::plain(&task.task_id),
            crate::run::plain(task.task_type.as_deref().unwrap_or("-")),
            crate::run::plain(task.description.as_deref().unwrap_or(""))
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answerer_is_a_name_the_daemon_takes() {
        assert_eq!(answerer(Some("alice".into())), "cli:alice");
        assert_eq!(answerer(Some("Ali ce\u{202e}(x)".into())), "cli:Alicex");
        assert_eq!(answerer(Some("  ".into())), "cli:user");
        assert_eq!(answerer(None), "cli:user");
        assert_eq!(answerer(Some("x".repeat(100))).len(), 64);
    }

    #[test]
    fn a_session_is_named_by_a_unique_prefix() {
        let ids = ["4f1c2a", "4f9b00", "a0b1c2"];
        assert_eq!(pick("a0", &ids).unwrap(), "a0b1c2");
        assert_eq!(pick("4f9", &ids).unwrap(), "4f9b00");
        let error = pick("4f", &ids).unwrap_err();
        assert!(error.contains("names 2 sessions") && error.contains("4f1c2a"), "{error}");
        assert!(pick("zz", &ids).unwrap_err().contains("no session zz"));
        assert_eq!(pick("4f1c2a", &["4f1c2a", "4f1c2ab"]).unwrap(), "4f1c2a", "a whole id wins");
    }

    #[test]
    fn the_tail_reads_like_a_terminal_session() {
        let mut reader = Reader { session: "s1".into(), ..Reader::default() };
        // As the daemon sends them: every field written.
        let frame = |updates: Value| {
            let frame = json!({"type": "view", "seq": 1, "ts": 0, "updates": updates});
            serde_json::from_value::<ViewSubscriberFrame>(frame).unwrap()
        };
        let tool_use = |message: &str, parent: Value, name: &str, input: Value| {
            json!({"update": "block", "message_id": message, "index": 1, "parent_tool_use_id": parent,
                "uuid": null, "block": {"kind": "tool_use", "tool_use_id": "t", "name": name,
                "input": input, "rebuilt": false}})
        };
        let mut text = reader.read(&frame(json!([
            {"update": "prompt", "text": "RUN it", "images": [], "uuid": null, "queued": false},
            {"update": "text_delta", "message_id": "m", "index": 0, "text": "Running ", "parent_tool_use_id": null},
            {"update": "text_delta", "message_id": "m", "index": 0, "text": "it.", "parent_tool_use_id": null},
            {"update": "block", "message_id": "m", "index": 0, "parent_tool_use_id": null, "uuid": null, "block": {"kind": "text", "text": "Running it."}},
            tool_use("m", Value::Null, "Bash", json!({"command": "ls -la"})),
            {"update": "permission_asked", "request_id": "r1", "tool_name": "Bash", "input": {"command": "ls -la"},
                "tool_use_id": "t", "suggestions": [], "reason": "", "agent_id": null, "timeout_secs": 60, "asked_at_ms": 0},
            {"update": "permission_decided", "request_id": "r1", "tool_name": "Bash", "behavior": "deny",
                "by": {"kind": "person", "who": "alice"}, "message": "not now", "tool_use_id": "t", "decided_at_ms": 0},
            tool_use("n", json!("t1"), "Read", json!({"file_path": "/x"})),
            {"update": "turn_ended", "parent_tool_use_id": null, "subtype": "success", "failed": false, "interrupted": false,
                "result": null, "duration_ms": 1500, "input_tokens": 0, "output_tokens": 0, "cost_usd": 0.01,
                "total_cost_usd": 0.01, "models": [], "context_tokens": null, "context_window": null},
        ])));
        let lagged = json!({"type": "lagged", "message": "caught up from the log"});
        text.push_str(&reader.read(&serde_json::from_value(lagged).unwrap()));
        let expected = "\n> RUN it\nRunning it.\n→ Bash ls -la\n\
            ? Bash ls -la: waiting for you (switchboard approve s1 r1, or deny)\n\
            ✗ Bash denied by alice: not now\n  │ → Read /x\n— turn done · 1.5 s · $0.0100\n\
            ! lagged: caught up from the log\n";
        assert_eq!(text, expected);
    }
}

/// `switchboard token …`
#[derive(Debug, Args)]
pub(crate) struct TokenArgs {
    #[command(subcommand)]
    command: TokenCommand,
    #[command(flatten)]
    connection: Connection,
}

#[derive(Debug, Subcommand)]
enum TokenCommand {
    /// Make a token and print it (once: the daemon keeps only its digest).
    Create {
        /// Its name: 1-64 letters, digits, '.', '_' or '-' (what decisions made with it are
        /// recorded as).
        name: String,
        /// What it may do: read (watch), approve (also answer requests), operate (also start
        /// and steer sessions) or admin (also set a session's claude, env or MCP servers, and
        /// manage tokens).
        #[arg(long, value_parser = ["read", "approve", "operate", "admin"])]
        scope: String,
        /// What turns this token starts may spend per day (UTC), in US dollars; past it, its
        /// sessions pause and it starts nothing more that day (`PATCH /api/budget` changes it).
        #[arg(long, value_name = "USD")]
        daily_budget_usd: Option<f64>,
        /// A policy file that bounds what the token starts and answers (below admin): its
        /// sessions are never allowed more than it allows, run in no mode that skips asking,
        /// and the token allows no request the ceiling sends to a person (docs/mcp.md).
        #[arg(long, value_name = "POLICY")]
        ceiling: Option<std::path::PathBuf>,
    },
    /// List the tokens: name, scope, when made and last used (never the tokens).
    List,
    /// Revoke a token: refused at once, and the sockets and streams opened with it end.
    Revoke {
        /// Its name.
        name: String,
    },
}

/// `switchboard token create|list|revoke`, through the daemon's API (an admin token).
pub(crate) async fn token(args: TokenArgs) -> ExitCode {
    let json_output = args.connection.json;
    let result = async {
        let client = args.connection.client()?;
        match args.command {
            TokenCommand::Create { name, scope, daily_budget_usd, ceiling } => {
                if let Some(usd) = daily_budget_usd {
                    switchboard_server::budget::check_limit("--daily-budget-usd", usd)?;
                }
                let mut body = json!({"name": name, "scope": scope});
                if let Some(path) = &ceiling {
                    let text = std::fs::read_to_string(path).map_err(|error| {
                        format!("cannot read the ceiling {}: {error}", path.display())
                    })?;
                    // Checked here too, so the error names the file.
                    switchboard_session::Ceiling::new(&name, &text)
                        .map_err(|error| format!("{}: {error}", path.display()))?;
                    body["ceiling"] = json!(text);
                }
                let mut made =
                    client.request(reqwest::Method::POST, "/api/tokens", Some(body)).await?;
                // The token alone first: it is shown this once, whatever else the answer holds.
                let token = typed::<MadeToken>(made.clone())?.token;
                if let Some(usd) = daily_budget_usd {
                    let limit = json!({"token_daily_usd": {&name: usd}});
                    // The token exists now: shown even if its budget could not be set.
                    if let Err(error) =
                        client.request(reqwest::Method::PATCH, "/api/budget", Some(limit)).await
                    {
                        println!("{token}");
                        return Err(format!(
                            "token {name} was made (above, shown once), but its daily budget was not set: {error}"
                        ));
                    }
                    if let Some(made) = made.as_object_mut() {
                        made.insert("daily_budget_usd".into(), json!(usd));
                    }
                }
                if json_output {
                    println!("{made}");
                } else {
                    println!("{token}");
                    eprintln!(
                        "token {name} ({scope}): shown this once; the daemon keeps only its digest"
                    );
                }
            }
            TokenCommand::List => {
                let list = client.request(reqwest::Method::GET, "/api/tokens", None).await?;
                if json_output {
                    println!("{list}");
                } else {
                    println!(
                        "{:<24} {:<8} {:<29} {:<29} CEILING",
                        "NAME", "SCOPE", "CREATED", "LAST USED"
                    );
                    for token in typed::<Vec<TokenInfo>>(list)? {
                        let time = |ms: Option<u64>| match ms {
                            Some(ms) if ms > 0 => format_ms(ms),
                            _ => "-".to_owned(),
                        };
                        let created = if token.builtin {
                            "(the daemon's own)".to_owned()
                        } else {
                            time(Some(token.created_ms))
                        };
                        println!(
                            "{:<24} {:<8} {:<29} {:<29} {}",
                            token.name,
                            token.scope.as_str(),
                            created,
                            time(token.last_used_ms),
                            if token.ceiling.is_some() { "yes" } else { "-" },
                        );
                    }
                }
            }
            TokenCommand::Revoke { name } => {
                let path = format!("/api/tokens/{}", query_escape(&name));
                let revoked = client.request(reqwest::Method::DELETE, &path, None).await?;
                if json_output {
                    println!("{revoked}");
                } else {
                    println!("revoked {name}");
                }
            }
        }
        Ok::<(), String>(())
    }
    .await;
    finish(result)
}

/// Milliseconds since the epoch as an HTTP date (`Tue, 24 Nov 2026 02:19:40 GMT`).
pub(crate) fn format_ms(ms: u64) -> String {
    httpdate::fmt_http_date(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms))
}
