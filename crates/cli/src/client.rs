//! The client commands: `switchboard sessions …`, `approve`, `deny`. They talk to a running
//! daemon, found through `--url`/`--token`, `SWITCHBOARD_URL`/`SWITCHBOARD_TOKEN`, or the data
//! directory the daemon wrote.

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::process::ExitCode;

use clap::{Args, Subcommand};
use futures::StreamExt;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message as WsMessage;

use crate::serve::DataDirArg;

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
    json: bool,
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
        /// The session id.
        id: String,
    },
    /// Follow a session's events as they happen (from the start, or after --after).
    Tail {
        /// The session id.
        id: String,
        /// Start after this sequence number.
        #[arg(long, default_value_t = 0)]
        after: u64,
    },
    /// Stop a session (its record stays), or delete it with --purge.
    Rm {
        /// The session id.
        id: String,
        /// Also delete its record and event log.
        #[arg(long)]
        purge: bool,
    },
}

/// `switchboard approve|deny SESSION REQUEST`
#[derive(Debug, Args)]
pub(crate) struct AnswerArgs {
    /// The session id.
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

struct Client {
    base: String,
    token: Option<String>,
    http: reqwest::Client,
}

impl Connection {
    fn client(&self) -> Result<Client, String> {
        let data_dir = switchboard_server::DataDir::new(self.data.resolve());
        let base = match &self.url {
            Some(url) => url.trim_end_matches('/').to_owned(),
            None => data_dir.read_info()?.url,
        };
        let token = self.token.clone().or_else(|| data_dir.stored_api_token());
        Ok(Client { base, token, http: reqwest::Client::new() })
    }
}

impl Client {
    async fn request(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, String> {
        let mut request = self.http.request(method, format!("{}{path}", self.base));
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request
            .send()
            .await
            .map_err(|error| format!("cannot reach the daemon at {}: {error}", self.base))?;
        let status = response.status();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        if status.is_success() {
            Ok(body)
        } else {
            let message = body["error"]["message"]
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| status.to_string());
            Err(message)
        }
    }
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
                    print_table(&sessions);
                }
            }
            SessionsCommand::Show { id } => {
                let session = client
                    .request(reqwest::Method::GET, &format!("/api/sessions/{id}"), None)
                    .await?;
                if json_output {
                    println!("{session}");
                } else {
                    print_session(&session);
                }
            }
            SessionsCommand::Tail { id, after } => tail(&client, &id, after, json_output).await?,
            SessionsCommand::Rm { id, purge } => {
                let path = format!("/api/sessions/{id}{}", if purge { "?purge=true" } else { "" });
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

pub(crate) async fn answer(args: AnswerArgs, allow: bool) -> ExitCode {
    let result = async {
        let client = args.connection.client()?;
        let body = json!({
            "behavior": if allow { "allow" } else { "deny" },
            "message": args.message,
            "remember": args.remember && allow,
            "by": format!("cli:{}", std::env::var("USER").unwrap_or_else(|_| "user".into())),
        });
        let path = format!("/api/sessions/{}/permissions/{}", args.session, args.request);
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

fn finish(result: Result<(), String>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("switchboard: {message}");
            ExitCode::from(1)
        }
    }
}

async fn tail(client: &Client, id: &str, after: u64, json_output: bool) -> Result<(), String> {
    let url = format!(
        "{}/api/sessions/{id}/subscribe?after={after}",
        client.base.replacen("http", "ws", 1)
    );
    let mut request = url.into_client_request().map_err(|error| error.to_string())?;
    if let Some(token) = &client.token {
        let value = format!("Bearer {token}")
            .parse()
            .map_err(|_| "the token is not a valid header value".to_owned())?;
        request.headers_mut().insert("authorization", value);
    }
    let (mut socket, _) = tokio_tungstenite::connect_async(request)
        .await
        .map_err(|error| format!("cannot subscribe: {error}"))?;
    while let Some(frame) = socket.next().await {
        let frame = frame.map_err(|error| format!("the connection broke: {error}"))?;
        let WsMessage::Text(text) = frame else { continue };
        if json_output {
            println!("{text}");
            continue;
        }
        let frame: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        println!("{}", describe_frame(&frame));
    }
    Ok(())
}

/// One line for a subscription frame.
fn describe_frame(frame: &Value) -> String {
    let seq = frame["seq"].as_u64().map(|seq| seq.to_string()).unwrap_or_else(|| "-".into());
    let event = &frame["event"];
    let detail = match event["event"].as_str() {
        Some("line") => {
            let line = &event["line"];
            let kind = line["type"].as_str().unwrap_or("?");
            let subtype = line["subtype"]
                .as_str()
                .or_else(|| line["request"]["subtype"].as_str())
                .or_else(|| line["event"]["type"].as_str())
                .map(|s| format!("/{s}"))
                .unwrap_or_default();
            format!("{} {kind}{subtype}", event["direction"].as_str().unwrap_or(""))
        }
        Some("state") => format!(
            "state {} → {}",
            event["from"].as_str().unwrap_or("?"),
            event["to"].as_str().unwrap_or("?")
        ),
        Some("permission_requested") => format!(
            "permission_requested {} {} (request {})",
            event["tool_name"].as_str().unwrap_or("?"),
            event["input"],
            event["request_id"].as_str().unwrap_or("?")
        ),
        Some("permission_decided") => format!(
            "permission_decided {} {} by {}",
            event["tool_name"].as_str().unwrap_or("?"),
            event["behavior"].as_str().unwrap_or("?"),
            event["by"]
        ),
        Some(other) => other.to_owned(),
        // Not an event: the daemon's word about the subscription (lagged, store_failing,
        // shutdown, ...).
        None => match (frame["type"].as_str(), frame["message"].as_str()) {
            (Some(kind), Some(message)) => format!("{kind}: {message}"),
            _ => frame.to_string(),
        },
    };
    format!("{seq}\t{detail}")
}

fn print_table(sessions: &Value) {
    println!("{:<36}  {:<19}  {:>8}  {:<20}  TITLE", "ID", "STATE", "COST", "MODEL");
    for session in sessions.as_array().into_iter().flatten() {
        let pending = session["pending_permissions"].as_array().map_or(0, Vec::len);
        let state = if pending > 0 {
            format!("waiting ({pending})")
        } else {
            session["state"].as_str().unwrap_or("?").to_owned()
        };
        println!(
            "{:<36}  {:<19}  {:>8}  {:<20}  {}",
            session["id"].as_str().unwrap_or("?"),
            state,
            format!("${:.4}", session["cost_usd"].as_f64().unwrap_or(0.0)),
            session["model"].as_str().unwrap_or("-"),
            session["title"].as_str().unwrap_or("")
        );
    }
}

fn print_session(session: &Value) {
    for key in [
        "id",
        "state",
        "claude_session_id",
        "cwd",
        "model",
        "permission_mode",
        "title",
        "cost_usd",
        "running",
    ] {
        println!(
            "{key:<18} {}",
            match &session[key] {
                Value::String(text) => text.clone(),
                Value::Null => "-".to_owned(),
                other => other.to_string(),
            }
        );
    }
    for pending in session["pending_permissions"].as_array().into_iter().flatten() {
        println!(
            "pending            {} {} {}",
            pending["request_id"].as_str().unwrap_or("?"),
            pending["tool_name"].as_str().unwrap_or("?"),
            pending["input"]
        );
    }
}
