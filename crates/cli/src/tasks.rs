//! `switchboard loop`: runs a list of tasks on the daemon, each in a fresh session (its own CLI
//! process and Claude session), one after another or a few at a time, and sums them up.

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::io::Read as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use clap::Args;
use futures::StreamExt;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message as WsMessage;

use crate::client::{Client, Connection};

/// The largest task list read.
const MAX_TASKS_BYTES: u64 = 16 * 1024 * 1024;

/// `switchboard loop [FILE]`
#[derive(Debug, Args)]
pub(crate) struct LoopArgs {
    /// The tasks: a file, or `-` (the default) for stdin. One prompt per line, or JSON lines
    /// `{"prompt": …, "cwd": …, "model": …, "policy": …}` (only `prompt` is required; `policy`
    /// is the API's: inline TOML, `auto-approve`, or a file on the daemon's machine). Blank
    /// lines and lines starting with `#` are skipped.
    #[arg(value_name = "FILE", default_value = "-")]
    file: PathBuf,
    /// How many tasks run at once.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    parallel: u16,
    /// The working directory of tasks that name none (default: this one).
    #[arg(long, value_name = "DIR")]
    cwd: Option<PathBuf>,
    /// The model of tasks that name none.
    #[arg(long, value_name = "MODEL")]
    model: Option<String>,
    /// A permission policy file for tasks that name none (sent to the daemon as text).
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// The permission mode of every task.
    #[arg(long, value_name = "MODE")]
    permission_mode: Option<String>,
    /// Give up on a task whose turn has not ended after this many seconds (its session is
    /// stopped, and it counts as failed). Default: wait as long as it takes (a task may wait
    /// for a person's approval).
    #[arg(long, value_name = "SECONDS")]
    timeout: Option<u64>,
    #[command(flatten)]
    connection: Connection,
}

/// One task, as read.
#[derive(Debug, Clone)]
struct Task {
    number: usize,
    prompt: String,
    cwd: PathBuf,
    model: Option<String>,
    policy: Option<String>,
}

/// How a task ended.
#[derive(Debug, Clone, serde::Serialize)]
struct Outcome {
    task: usize,
    prompt: String,
    session_id: Option<String>,
    ok: bool,
    result: Option<String>,
    cost_usd: f64,
    duration_ms: u64,
    error: Option<String>,
}

pub(crate) async fn run(args: LoopArgs) -> ExitCode {
    let json_output = args.connection.json();
    let tasks = match read_tasks(&args) {
        Ok(tasks) => tasks,
        Err(message) => {
            eprintln!("switchboard loop: {message}");
            return ExitCode::from(2);
        }
    };
    let client = match args.connection.client() {
        Ok(client) => Arc::new(client.named("loop")),
        Err(message) => {
            eprintln!("switchboard loop: {message}");
            return ExitCode::from(1);
        }
    };
    let total = tasks.len();
    // Told on a Ctrl-C: tasks not started yet do not start, and running ones stop their
    // sessions (one whose session is being created stops it as soon as it exists).
    let (cancel, cancelled) = tokio::sync::watch::channel(false);
    let settings = Settings {
        permission_mode: args.permission_mode.clone(),
        timeout: args.timeout.map(std::time::Duration::from_secs),
    };
    let runs = futures::stream::iter(tasks.into_iter().map(|task| {
        let (client, settings, cancelled) = (client.clone(), settings.clone(), cancelled.clone());
        async move { run_task(&client, task, &settings, cancelled).await }
    }))
    .buffer_unordered(usize::from(args.parallel));
    tokio::pin!(runs);
    let interrupt = interrupted();
    tokio::pin!(interrupt);
    let mut outcomes = Vec::with_capacity(total);
    let mut interrupted = false;
    loop {
        tokio::select! {
            outcome = runs.next() => match outcome {
                Some(outcome) => {
                    // A task the interrupt kept from starting is not reported as run.
                    if !(interrupted && outcome.session_id.is_none()) {
                        report(&outcome, total, json_output);
                        outcomes.push(outcome);
                    }
                }
                None => break,
            },
            () = &mut interrupt, if !interrupted => {
                interrupted = true;
                eprintln!("switchboard loop: interrupted; stopping the running tasks' sessions");
                let _ = cancel.send(true);
            }
        }
    }
    outcomes.sort_by_key(|outcome| outcome.task);
    let failed = outcomes.iter().filter(|outcome| !outcome.ok).count();
    let cost: f64 = outcomes.iter().map(|outcome| outcome.cost_usd).sum();
    if json_output {
        println!(
            "{}",
            json!({"summary": {"tasks": total, "finished": outcomes.len(), "failed": failed,
                "cost_usd": cost, "interrupted": interrupted}})
        );
    } else {
        println!(
            "{total} tasks: {} succeeded, {failed} failed{}, ${cost:.4}",
            outcomes.len() - failed,
            if interrupted {
                format!(", {} not run (interrupted)", total - outcomes.len())
            } else {
                String::new()
            },
        );
    }
    match (interrupted, failed) {
        (true, _) => ExitCode::from(130),
        (false, 0) => ExitCode::SUCCESS,
        (false, _) => ExitCode::from(1),
    }
}

/// Reads the task list (bounded), with each task's defaults filled in.
fn read_tasks(args: &LoopArgs) -> Result<Vec<Task>, String> {
    let shown = args.file.display().to_string();
    let mut text = String::new();
    let read = if args.file.as_os_str() == "-" {
        std::io::stdin().take(MAX_TASKS_BYTES + 1).read_to_string(&mut text)
    } else {
        std::fs::File::open(&args.file)
            .map_err(|error| format!("cannot open {shown}: {error}"))?
            .take(MAX_TASKS_BYTES + 1)
            .read_to_string(&mut text)
    };
    read.map_err(|error| format!("cannot read {shown}: {error}"))?;
    if text.len() as u64 > MAX_TASKS_BYTES {
        return Err(format!("{shown} is over 16 MiB"));
    }
    let cwd = match &args.cwd {
        Some(cwd) => cwd.clone(),
        None => {
            std::env::current_dir().map_err(|error| format!("no working directory: {error}"))?
        }
    };
    let cwd = std::path::absolute(&cwd).unwrap_or(cwd);
    let policy = args.policy.as_deref().map(crate::client::read_policy).transpose()?;
    let mut tasks = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let number = tasks.len() + 1;
        let at = index + 1;
        let task = if line.starts_with('{') {
            let value: Value = serde_json::from_str(line)
                .map_err(|error| format!("line {at}: not a JSON task: {error}"))?;
            let field = |name: &str| -> Result<Option<String>, String> {
                match value.get(name) {
                    None | Some(Value::Null) => Ok(None),
                    Some(Value::String(text)) => Ok(Some(text.clone())),
                    Some(_) => Err(format!("line {at}: `{name}` must be a string")),
                }
            };
            if let Some(unknown) = value.as_object().and_then(|fields| {
                fields
                    .keys()
                    .find(|key| !["prompt", "cwd", "model", "policy"].contains(&key.as_str()))
            }) {
                return Err(format!(
                    "line {at}: unknown field `{unknown}` (prompt, cwd, model, policy)"
                ));
            }
            let prompt = field("prompt")?.filter(|prompt| !prompt.trim().is_empty());
            Task {
                number,
                prompt: prompt.ok_or_else(|| format!("line {at}: the task has no prompt"))?,
                cwd: field("cwd")?
                    .map(|dir| std::path::absolute(&dir).unwrap_or_else(|_| PathBuf::from(dir)))
                    .unwrap_or_else(|| cwd.clone()),
                model: field("model")?.or_else(|| args.model.clone()),
                policy: field("policy")?.or_else(|| policy.clone()),
            }
        } else {
            Task {
                number,
                prompt: line.to_owned(),
                cwd: cwd.clone(),
                model: args.model.clone(),
                policy: policy.clone(),
            }
        };
        tasks.push(task);
    }
    if tasks.is_empty() {
        return Err(format!("{shown} has no task (one prompt per line, or JSON lines)"));
    }
    Ok(tasks)
}

/// What every task shares.
#[derive(Debug, Clone)]
struct Settings {
    permission_mode: Option<String>,
    timeout: Option<std::time::Duration>,
}

/// Resolves on the first Ctrl-C or SIGTERM.
async fn interrupted() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
}

/// Runs one task in a session of its own, to its result; then stops the session, so that the
/// next task gets a fresh CLI and Claude session. A cancelled task stops its session (or
/// starts none).
async fn run_task(
    client: &Client,
    task: Task,
    settings: &Settings,
    mut cancelled: tokio::sync::watch::Receiver<bool>,
) -> Outcome {
    let started = Instant::now();
    let mut outcome = Outcome {
        task: task.number,
        prompt: task.prompt.clone(),
        session_id: None,
        ok: false,
        result: None,
        cost_usd: 0.0,
        duration_ms: 0,
        error: None,
    };
    if *cancelled.borrow() {
        outcome.error = Some("interrupted before it started".into());
        return outcome;
    }
    // Shown to relay frontends too, as the relay protocol's loop shows its tasks.
    let mut body = json!({"cwd": task.cwd, "prompt": task.prompt, "relay": true});
    let mode = settings.permission_mode.clone();
    for (name, value) in [("model", task.model), ("policy", task.policy), ("permission_mode", mode)]
    {
        if let Some(value) = value {
            body[name] = json!(value);
        }
    }
    let session = match client.request(reqwest::Method::POST, "/api/sessions", Some(body)).await {
        Ok(session) => session,
        Err(error) => {
            outcome.error = Some(error);
            return outcome;
        }
    };
    let id = match serde_json::from_value::<crate::client::SessionId>(session.clone()) {
        Ok(made) if !made.id.is_empty() => made.id,
        Ok(_) | Err(_) => {
            outcome.error = Some(format!("the daemon answered without a session id: {session}"));
            return outcome;
        }
    };
    outcome.session_id = Some(id.clone());
    let waited = async {
        match settings.timeout {
            Some(limit) => tokio::time::timeout(limit, until_result(client, &id))
                .await
                .unwrap_or_else(|_| Err(format!("no result within {} s", limit.as_secs()))),
            None => until_result(client, &id).await,
        }
    };
    let ended = tokio::select! {
        ended = waited => ended,
        _ = cancelled.wait_for(|cancelled| *cancelled) => Err("interrupted".to_owned()),
    };
    match ended {
        Ok(turn) => {
            outcome.ok = turn["failed"] == false && turn["interrupted"] == false;
            outcome.result = turn["result"].as_str().map(str::to_owned);
            outcome.cost_usd = turn["total_cost_usd"].as_f64().unwrap_or(0.0);
            if !outcome.ok {
                outcome.error = Some(format!(
                    "the turn ended with {}",
                    turn["subtype"].as_str().unwrap_or("an error")
                ));
            }
        }
        Err(error) => outcome.error = Some(error),
    }
    // Its CLI ends here: the next task starts fresh.
    if let Err(error) =
        client.request(reqwest::Method::DELETE, &format!("/api/sessions/{id}"), None).await
    {
        eprintln!("switchboard loop: cannot stop session {id}: {error}");
    }
    outcome.duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    outcome
}

/// Follows a session's view (the daemon's one projection of its lines) until its first turn
/// ends: that update; an error if its CLI ends first.
async fn until_result(client: &Client, id: &str) -> Result<Value, String> {
    let mut socket = crate::client::subscribe(client, id, 0, true).await?;
    while let Some(frame) = socket.next().await {
        let frame = frame.map_err(|error| format!("the connection broke: {error}"))?;
        let WsMessage::Text(text) = frame else { continue };
        let frame: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        for update in frame["updates"].as_array().into_iter().flatten() {
            // The main conversation's turn (a subagent's own result has its call as parent).
            if update["update"] == "turn_ended" && update["parent_tool_use_id"].is_null() {
                return Ok(update.clone());
            }
            if update["update"] == "notice" && update["kind"] == "exited" {
                let why = update["text"].as_str().unwrap_or("it exited");
                return Err(format!("the CLI ended before its result: {why}"));
            }
        }
    }
    Err("the daemon closed the session's stream before its result".to_owned())
}

/// Prints a finished task.
fn report(outcome: &Outcome, total: usize, json_output: bool) {
    if json_output {
        println!("{}", serde_json::to_string(outcome).unwrap_or_default());
        return;
    }
    let mark = if outcome.ok { "✓" } else { "✗" };
    let said = outcome.error.clone().or_else(|| outcome.result.clone()).unwrap_or_default();
    let said: String = said.lines().next().unwrap_or_default().chars().take(100).collect();
    println!(
        "{mark} {}/{total}  ${:.4}  {:.1}s  {}  {said}",
        outcome.task,
        outcome.cost_usd,
        outcome.duration_ms as f64 / 1000.0,
        outcome.session_id.as_deref().unwrap_or("-"),
    );
}
