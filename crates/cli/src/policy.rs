//! `switchboard policy test FILE`: a dry run of a candidate policy over the daemon's stored
//! sessions (`POST /api/policy/test`, docs/policy.md): progress on stderr as it reads, then what
//! the policy would have done differently, per rule, with the calls to look at.

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde_json::json;
use switchboard_session::policy::trial::{Outcome, TrialReport};

use crate::client::{read_policy, typed, Connection};

/// `switchboard policy …`
#[derive(Debug, Args)]
pub(crate) struct PolicyArgs {
    #[command(subcommand)]
    command: PolicyCommand,
    #[command(flatten)]
    connection: Connection,
}

#[derive(Debug, Subcommand)]
enum PolicyCommand {
    /// Replay the tool calls of stored sessions through a policy file and report what it would
    /// have allowed, denied and asked, beside what really happened.
    ///
    /// Read-only: nothing runs, nothing is written. `--sessions` picks sessions by id,
    /// `cwd=PATH`, `token=NAME`, `schedule=NAME` or `trigger=NAME` (comma-separated, all must
    /// hold); `--since` keeps calls made since a time (RFC 3339) or an age (7d, 24h).
    ///
    /// Exit status: 0 the run finished; 1 it could not (the daemon, the policy, the filter).
    Test {
        /// The candidate policy file (TOML).
        file: PathBuf,
        /// Which sessions (default: all).
        #[arg(long, value_name = "FILTER")]
        sessions: Option<String>,
        /// Only calls since this time or age.
        #[arg(long, value_name = "T")]
        since: Option<String>,
        /// How many calls to list per rule and outcome (the daemon keeps 20).
        #[arg(long, value_name = "N", default_value_t = 3)]
        show: usize,
    },
}

/// `switchboard policy`
pub(crate) async fn policy(args: PolicyArgs) -> ExitCode {
    let PolicyCommand::Test { file, sessions, since, show } = args.command;
    match test(&args.connection, &file, sessions, since, show).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("switchboard policy test: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn test(
    connection: &Connection,
    file: &std::path::Path,
    sessions: Option<String>,
    since: Option<String>,
    show: usize,
) -> Result<(), String> {
    let policy = read_policy(file)?;
    let client = connection.client()?;
    let body = json!({"policy": policy, "sessions": sessions, "since": since});
    let live = std::io::stderr().is_terminal();
    let mut report = None;
    client
        .lines("/api/policy/test", body, |line| {
            if let Some(progress) = line.get("progress") {
                let read = progress["sessions_read"].as_u64().unwrap_or(0);
                let total = progress["sessions"].as_u64().unwrap_or(0);
                let calls = progress["headline"]["calls"].as_u64().unwrap_or(0);
                let text = format!("read {read}/{total} sessions, {calls} calls");
                if live {
                    eprint!("\r{text}");
                    let _ = std::io::stderr().flush();
                }
            } else if let Some(error) = line.get("error") {
                return Err(error["message"].as_str().unwrap_or("the dry run failed").to_owned());
            } else if let Some(done) = line.get("report") {
                report = Some(done.clone());
            }
            Ok(())
        })
        .await?;
    if live {
        eprintln!();
    }
    let report = report.ok_or("the daemon ended the answer without a report")?;
    if connection.json {
        println!("{report}");
        return Ok(());
    }
    let report: TrialReport = typed(report)?;
    print!("{}", text_report(&report, show));
    Ok(())
}

/// The report as a person reads it.
fn text_report(report: &TrialReport, show: usize) -> String {
    let h = &report.headline;
    let mut out = format!(
        "{} calls in {} sessions: it would have allowed {} unasked that were not, denied {} that ran, and asked {} that ran unasked ({} as they were).\n",
        h.calls, h.sessions, h.would_allow, h.would_deny_ran, h.would_ask_ran_unasked, h.same
    );
    for rule in &report.rules {
        let behavior = rule.behavior.map_or("mixed", |b| b.as_str());
        let total: u64 = rule.outcomes.values().map(|cell| cell.count).sum();
        out.push_str(&format!("\n{behavior:<5} {}  ({total} calls)\n", rule.rule));
        for (outcome, cell) in &rule.outcomes {
            out.push_str(&format!("      {:>6}  {}\n", cell.count, said(*outcome)));
            for call in cell.calls.iter().take(show) {
                out.push_str(&format!(
                    "              {} {}  (session {} at {})\n",
                    call.tool, call.summary, call.session, call.seq
                ));
            }
        }
    }
    out
}

fn said(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::RanUnasked => "ran unasked",
        Outcome::PersonAllowed => "a person allowed",
        Outcome::PersonRefused => "a person denied, or nobody answered",
        Outcome::PolicyDenied => "a policy rule denied",
        Outcome::Undecided => "no decision in the log",
    }
}
