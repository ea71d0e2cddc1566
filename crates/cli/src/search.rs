//! `switchboard search` and `switchboard blame`: the daemon's search over every session
//! (`GET /api/search`, docs/search.md) and the session that last wrote a line (`GET
//! /api/blame`), printed for a person or as JSON.

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use switchboard_server::search::{Answer, BlameAnswer, Hit};

use crate::client::{query_escape, typed, Connection};

/// `switchboard search …`
#[derive(Debug, Args)]
pub(crate) struct SearchArgs {
    /// The query: words and "phrases" the text holds, and filters such as tool:Bash
    /// file:deploy.sh wrote:src/main.rs command:rm decision:deny by:person who:NAME
    /// origin:schedule schedule:nightly model:M project:DIR node:N session:ID kind:turn
    /// worktree:yes since:7d until:T cost:0.5; group:project (or model, session, tool,
    /// origin, node, day) adds the entries and their cost up instead. docs/search.md has
    /// them all.
    #[arg(required = true, num_args = 1.., value_name = "QUERY")]
    query: Vec<String>,
    /// Hits to show (50 by default, at most 1000).
    #[arg(long, short = 'n')]
    limit: Option<usize>,
    /// Show the page that starts here (a page's `next`).
    #[arg(long, value_name = "NEXT")]
    before: Option<String>,
    #[command(flatten)]
    connection: Connection,
}

/// `switchboard blame …`
#[derive(Debug, Args)]
pub(crate) struct BlameArgs {
    /// The line: FILE:LINE (LINE counts from 1).
    #[arg(value_name = "FILE:LINE")]
    at: String,
    #[command(flatten)]
    connection: Connection,
}

/// `switchboard search`
pub(crate) async fn search(args: SearchArgs) -> ExitCode {
    let query = args.query.join(" ");
    let mut path = format!("/api/search?q={}", query_escape(&query));
    if let Some(limit) = args.limit {
        path.push_str(&format!("&limit={limit}"));
    }
    if let Some(before) = &args.before {
        path.push_str(&format!("&before={}", query_escape(before)));
    }
    let answer = match fetch::<Answer>(&args.connection, &path).await {
        Ok(answer) => answer,
        Err(message) => {
            eprintln!("switchboard search: {message}");
            return ExitCode::FAILURE;
        }
    };
    if args.connection.json {
        println!("{}", serde_json::to_string(&answer).unwrap_or_default());
        return ExitCode::SUCCESS;
    }
    if let Some(groups) = &answer.groups {
        println!("{:>10}  {:>8}  KEY", "COST", "ENTRIES");
        for group in groups {
            println!(
                "{:>10}  {:>8}  {}",
                format!("${:.4}", group.cost_usd),
                group.entries,
                group.key.as_deref().unwrap_or("(none)")
            );
        }
    } else if answer.hits.is_empty() {
        println!("nothing found");
    } else {
        for hit in &answer.hits {
            println!("{}", line_of(hit));
        }
        if let Some(next) = &answer.next {
            println!("more: switchboard search --before {next} {query}");
        }
    }
    if answer.behind > 0 {
        eprintln!(
            "(the index misses part of {} session(s) now: it is being rebuilt from the log)",
            answer.behind
        );
    }
    ExitCode::SUCCESS
}

/// One hit on one line: when, the session (and its title), the event, what it is.
fn line_of(hit: &Hit) -> String {
    let entry = &hit.hit.entry;
    let when = jiff::Timestamp::from_millisecond(entry.ts_ms as i64)
        .map(|at| at.strftime("%Y-%m-%d %H:%M:%S").to_string())
        .unwrap_or_default();
    let what = match entry.kind {
        switchboard_store::EntryKind::ToolCall => {
            let detail = entry
                .command
                .clone()
                .or_else(|| entry.paths.first().map(|touched| touched.path.clone()))
                .unwrap_or_default();
            format!("{} {}", entry.tool.as_deref().unwrap_or("?"), detail)
        }
        switchboard_store::EntryKind::Decision => format!(
            "{} {} by {}{}",
            entry.decision.as_deref().unwrap_or("?"),
            entry.tool.as_deref().unwrap_or("?"),
            entry.decided_by.as_deref().unwrap_or("?"),
            entry.who.as_deref().map(|who| format!(" ({who})")).unwrap_or_default()
        ),
        switchboard_store::EntryKind::Turn => format!("turn ended, ${:.4}", entry.cost_usd),
        switchboard_store::EntryKind::Prompt => format!("prompt: {}", entry.text),
        switchboard_store::EntryKind::Answer => format!("answer: {}", entry.text),
    };
    let what: String = what.replace(['\n', '\r'], " ").chars().take(160).collect();
    format!(
        "{when}  {}#{}  {:<24}  {what}",
        &entry.session_id[..entry.session_id.len().min(8)],
        entry.seq,
        hit.title.as_deref().unwrap_or("").chars().take(24).collect::<String>()
    )
}

/// `switchboard blame`
pub(crate) async fn blame(args: BlameArgs) -> ExitCode {
    match blame_at(&args).await {
        Ok(found) => {
            if found {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(message) => {
            eprintln!("switchboard blame: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Blames the line; whether a session wrote it.
async fn blame_at(args: &BlameArgs) -> Result<bool, String> {
    let (file, number) = args
        .at
        .rsplit_once(':')
        .and_then(|(file, line)| Some((file, line.parse::<usize>().ok().filter(|n| *n > 0)?)))
        .ok_or_else(|| format!("{:?}: say FILE:LINE, such as src/main.rs:12", args.at))?;
    let path = std::fs::canonicalize(file).map_err(|error| format!("{file}: {error}"))?;
    let text = std::fs::read_to_string(&path).map_err(|error| format!("{file}: {error}"))?;
    let line = text
        .lines()
        .nth(number - 1)
        .ok_or_else(|| format!("{file} has {} lines, not {number}", text.lines().count()))?;
    if line.trim().is_empty() {
        return Err(format!("{file}:{number} is blank"));
    }
    let mut query = format!(
        "/api/blame?path={}&line={}",
        query_escape(&path.display().to_string()),
        query_escape(line)
    );
    if let Some(tail) = in_repository(&path) {
        query.push_str(&format!("&tail={}", query_escape(&tail)));
    }
    let answer = fetch::<BlameAnswer>(&args.connection, &query).await?;
    if args.connection.json {
        println!("{}", serde_json::to_string(&answer).unwrap_or_default());
        return Ok(answer.found.is_some());
    }
    let Some(found) = answer.found else {
        println!("no session wrote {file}:{number} (or the index does not hold it)");
        return Ok(false);
    };
    let call = &found.call.entry;
    println!("{file}:{number}  {}", line.trim());
    println!(
        "written by session {}{}",
        call.session_id,
        found.title.as_deref().map(|title| format!(" ({title})")).unwrap_or_default()
    );
    let when = jiff::Timestamp::from_millisecond(call.ts_ms as i64)
        .map(|at| at.to_string())
        .unwrap_or_default();
    println!(
        "  call   {} {} at event {} ({when})",
        call.tool.as_deref().unwrap_or("?"),
        call.tool_use_id.as_deref().unwrap_or(""),
        call.seq
    );
    if let Some(command) = &call.command {
        println!("  command {}", command.lines().next().unwrap_or_default());
    }
    if let Some(prompt) = &found.prompt {
        let text: String = prompt.entry.text.replace('\n', " ").chars().take(120).collect();
        println!("  turn   event {}: {text}", prompt.entry.seq);
    }
    println!("  open   switchboard open {}", call.session_id);
    Ok(true)
}

/// The file's path in its git repository (`src/main.rs`), when it is in one.
fn in_repository(path: &Path) -> Option<String> {
    let mut dir: PathBuf = path.parent()?.to_path_buf();
    loop {
        if dir.join(".git").exists() {
            return path.strip_prefix(&dir).ok().map(|tail| tail.display().to_string());
        }
        if !dir.pop() {
            return None;
        }
    }
}

async fn fetch<T: serde::de::DeserializeOwned>(
    connection: &Connection,
    path: &str,
) -> Result<T, String> {
    let client = connection.client()?;
    let value = client.request(reqwest::Method::GET, path, None).await?;
    typed(value)
}
