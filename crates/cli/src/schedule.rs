//! `switchboard schedule …` and `switchboard trigger …`: unattended work, through the daemon's
//! API (docs/schedules.md). A schedule runs a task on a cron expression or once; a trigger runs
//! it, or sends GitHub feedback to the session that made a branch, when its signed webhook
//! arrives.

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde_json::{json, Value};
use switchboard_server::daemon::ScheduleList;
use switchboard_server::daemon::ScheduleView;
use switchboard_server::schedules::{RunOutcome, Schedule};
use switchboard_server::unattended::{TriggerMade, TriggerView};

use crate::client::{finish, format_ms, query_escape, typed, Connection, SessionArgs};

/// What each run starts: the task's flags, shared by schedules and triggers.
#[derive(Debug, Args)]
struct TaskArgs {
    /// The prompt each run asks (a trigger's is a template: `{{issue.title}}`, `{{field?}}`).
    #[arg(long, value_name = "TEXT")]
    prompt: Option<String>,
    #[command(flatten)]
    session: SessionArgs,
    /// What one run may spend (US dollars): reached, the run pauses.
    #[arg(long, value_name = "USD")]
    max_budget_usd: Option<f64>,
    /// The notify file's channels that hear of the runs.
    #[arg(long, value_name = "CHANNEL")]
    notify: Vec<String>,
    /// The most of a usage window unattended runs spend (0 to 1, 0.5 is half): new runs wait
    /// while a window is at or past it, and a run that reaches it pauses.
    #[arg(long, value_name = "SHARE")]
    max_window_utilization: Option<f64>,
}

impl TaskArgs {
    /// The create request each run starts from, if a prompt was given.
    fn task(&self) -> Result<Option<Value>, String> {
        let Some(prompt) = &self.prompt else { return Ok(None) };
        let mut request = self.session.request()?;
        request.prompt = Some(prompt.replace("\\n", "\n"));
        request.launch.max_budget_usd = self.max_budget_usd;
        request.launch.notify = (!self.notify.is_empty()).then(|| self.notify.clone());
        serde_json::to_value(&request).map(Some).map_err(|error| error.to_string())
    }
}

/// `switchboard schedule …`
#[derive(Debug, Args)]
pub(crate) struct ScheduleArgs {
    #[command(subcommand)]
    command: ScheduleCommand,
    #[command(flatten)]
    connection: Connection,
}

#[derive(Debug, Subcommand)]
enum ScheduleCommand {
    /// Add a schedule: a task run on a cron expression, or once.
    ///
    /// `--cron "0 3 * * *" --time-zone Europe/Paris` runs at 03:00 there; six fields put
    /// seconds first (`"*/30 * * * * *"`). `--at 2026-12-01T09:00:00+01:00` runs once.
    Add {
        /// Its name: lowercase letters, digits, '-', '_', '.'.
        name: String,
        /// A cron expression.
        #[arg(long, value_name = "EXPR", required_unless_present = "at", conflicts_with = "at")]
        cron: Option<String>,
        /// The time zone the cron expression is read in (IANA; default UTC).
        #[arg(long, value_name = "ZONE", requires = "cron")]
        time_zone: Option<String>,
        /// Run once, at this moment (RFC 3339).
        #[arg(long, value_name = "TIME")]
        at: Option<String>,
        /// A run still going when the next is due: skip the next, or queue it.
        #[arg(long, value_parser = ["skip", "queue"], default_value = "skip")]
        overlap: String,
        /// Runs that fell due while the daemon was down: run the last once, or skip them.
        #[arg(long, value_parser = ["run-once", "skip"], default_value = "run-once")]
        missed: String,
        /// What the schedule's runs may spend in a day (UTC), in US dollars.
        #[arg(long, value_name = "USD")]
        daily_usd: Option<f64>,
        #[command(flatten)]
        task: TaskArgs,
    },
    /// List the schedules: when each runs next, its last run, and the runs that wait.
    #[command(alias = "ls")]
    List,
    /// Show one schedule: its next times and its last runs.
    Show {
        /// Its name.
        name: String,
    },
    /// Run a schedule now (refused while its last run still goes).
    RunNow {
        /// Its name.
        name: String,
    },
    /// Pause a schedule: nothing is due until it is resumed.
    Pause {
        /// Its name.
        name: String,
    },
    /// Resume a paused schedule.
    Resume {
        /// Its name.
        name: String,
    },
    /// Remove a schedule (its runs' sessions stay).
    Rm {
        /// Its name.
        name: String,
    },
}

/// `switchboard trigger …`
#[derive(Debug, Args)]
pub(crate) struct TriggerArgs {
    #[command(subcommand)]
    command: TriggerCommand,
    #[command(flatten)]
    connection: Connection,
}

#[derive(Debug, Subcommand)]
enum TriggerCommand {
    /// Add a trigger: a webhook at /hooks/NAME, signed with its secret (printed once), that
    /// starts the task with the prompt its payload fills, or (--feedback) sends GitHub's failed
    /// checks, reviews and conflicts to the session that made the branch.
    Add {
        /// Its name (its webhook is /hooks/NAME).
        name: String,
        /// Route GitHub feedback to the session whose worktree made the branch.
        #[arg(long)]
        feedback: bool,
        /// The X-GitHub-Event values that start the task (default: any).
        #[arg(long = "event", value_name = "EVENT")]
        events: Vec<String>,
        /// The secret deliveries are signed with (default: one is made).
        #[arg(
            long,
            value_name = "SECRET",
            env = "SWITCHBOARD_TRIGGER_SECRET",
            hide_env_values = true
        )]
        secret: Option<String>,
        #[command(flatten)]
        task: TaskArgs,
    },
    /// List the triggers and what their last deliveries did.
    #[command(alias = "ls")]
    List,
    /// Pause a trigger: its deliveries are refused.
    Pause {
        /// Its name.
        name: String,
    },
    /// Resume a paused trigger.
    Resume {
        /// Its name.
        name: String,
    },
    /// Remove a trigger.
    Rm {
        /// Its name.
        name: String,
    },
}

/// `switchboard schedule add|list|show|run-now|pause|resume|rm`.
pub(crate) async fn schedule(args: ScheduleArgs) -> ExitCode {
    let json_output = args.connection.json;
    let result = async {
        let client = args.connection.client()?;
        let path = |name: &str| format!("/api/schedules/{}", query_escape(name));
        let pause = |name: &str, paused: bool| {
            let client = &client;
            let path = path(name);
            async move {
                let body = json!({"paused": paused});
                let view = client.request(reqwest::Method::PATCH, &path, Some(body)).await?;
                if json_output {
                    println!("{view}");
                } else {
                    let view: ScheduleView = typed(view)?;
                    let now = if paused { "paused" } else { "resumed" };
                    println!("schedule {} {now}", view.schedule.name);
                }
                Ok::<(), String>(())
            }
        };
        match args.command {
            ScheduleCommand::Add {
                name,
                cron,
                time_zone,
                at,
                overlap,
                missed,
                daily_usd,
                task,
            } => {
                let run = task.task()?.ok_or("a schedule needs --prompt: what each run asks")?;
                let body = without_nulls(json!({
                    "name": name, "cron": cron, "time_zone": time_zone, "at": at,
                    "overlap": overlap, "missed": missed.replace('-', "_"), "daily_usd": daily_usd,
                    "max_window_utilization": task.max_window_utilization, "task": run,
                }));
                let made =
                    client.request(reqwest::Method::POST, "/api/schedules", Some(body)).await?;
                if json_output {
                    println!("{made}");
                } else {
                    let view: ScheduleView = typed(made)?;
                    println!("schedule {} added", view.schedule.name);
                    if let Some(next) = view.next_ms.first() {
                        println!("next run: {}", format_ms(*next));
                    }
                }
            }
            ScheduleCommand::List => {
                let list = client.request(reqwest::Method::GET, "/api/schedules", None).await?;
                if json_output {
                    println!("{list}");
                } else {
                    print_list(&typed::<ScheduleList>(list)?);
                }
            }
            ScheduleCommand::Show { name } => {
                let view = client.request(reqwest::Method::GET, &path(&name), None).await?;
                if json_output {
                    println!("{view}");
                } else {
                    print_schedule(&typed::<ScheduleView>(view)?);
                }
            }
            ScheduleCommand::RunNow { name } => {
                let run = format!("{}/run", path(&name));
                let session = client.request(reqwest::Method::POST, &run, None).await?;
                if json_output {
                    println!("{session}");
                } else {
                    let id = session["id"].as_str().unwrap_or_default();
                    println!("{id}");
                    eprintln!("schedule {name} runs now (switchboard sessions tail {id})");
                }
            }
            ScheduleCommand::Pause { name } => pause(&name, true).await?,
            ScheduleCommand::Resume { name } => pause(&name, false).await?,
            ScheduleCommand::Rm { name } => {
                client.request(reqwest::Method::DELETE, &path(&name), None).await?;
                if !json_output {
                    println!("removed schedule {name}");
                }
            }
        }
        Ok::<(), String>(())
    }
    .await;
    finish(result)
}

/// `switchboard trigger add|list|pause|resume|rm`.
pub(crate) async fn trigger(args: TriggerArgs) -> ExitCode {
    let json_output = args.connection.json;
    let result = async {
        let client = args.connection.client()?;
        let path = |name: &str| format!("/api/triggers/{}", query_escape(name));
        match args.command {
            TriggerCommand::Add { name, feedback, events, secret, task } => {
                let run = task.task()?;
                if run.is_none() && !feedback {
                    return Err("a trigger starts a task (--prompt), routes feedback (--feedback), or both".into());
                }
                let body = without_nulls(json!({
                    "name": name, "feedback": feedback, "events": events, "secret": secret,
                    "max_window_utilization": task.max_window_utilization, "task": run,
                }));
                let made = client.request(reqwest::Method::POST, "/api/triggers", Some(body)).await?;
                if json_output {
                    println!("{made}");
                } else {
                    let made: TriggerMade = typed(made)?;
                    println!("{}", made.secret);
                    eprintln!(
                        "trigger {name}: POST {} signed with the secret above (shown this once), as GitHub signs (X-Hub-Signature-256)",
                        made.view.path
                    );
                }
            }
            TriggerCommand::List => {
                let list = client.request(reqwest::Method::GET, "/api/triggers", None).await?;
                if json_output {
                    println!("{list}");
                } else {
                    print_triggers(&typed::<Vec<TriggerView>>(list)?);
                }
            }
            TriggerCommand::Pause { name } => {
                client.request(reqwest::Method::PATCH, &path(&name), Some(json!({"paused": true}))).await?;
                if !json_output {
                    println!("trigger {name} paused");
                }
            }
            TriggerCommand::Resume { name } => {
                client.request(reqwest::Method::PATCH, &path(&name), Some(json!({"paused": false}))).await?;
                if !json_output {
                    println!("trigger {name} resumed");
                }
            }
            TriggerCommand::Rm { name } => {
                client.request(reqwest::Method::DELETE, &path(&name), None).await?;
                if !json_output {
                    println!("removed trigger {name}");
                }
            }
        }
        Ok::<(), String>(())
    }
    .await;
    finish(result)
}

/// `value` without its `null` fields (what a request leaves to the daemon's defaults).
fn without_nulls(mut value: Value) -> Value {
    if let Some(map) = value.as_object_mut() {
        map.retain(|_, field| !field.is_null());
    }
    value
}

/// When a schedule runs, in words.
fn when(schedule: &Schedule) -> String {
    match (&schedule.cron, &schedule.at) {
        (Some(cron), _) => match &schedule.time_zone {
            Some(zone) => format!("{cron} ({zone})"),
            None => cron.clone(),
        },
        (None, Some(at)) => format!("once at {at}"),
        (None, None) => "-".into(),
    }
}

/// The last run of `view`, in words.
fn last_run(view: &ScheduleView) -> String {
    let Some(run) = view.state.runs.last() else { return "-".into() };
    match &run.outcome {
        RunOutcome::Started { session, .. } => {
            let session_now = view.sessions.iter().find(|known| &known.id == session);
            let short: String = session.chars().take(8).collect();
            match session_now {
                Some(now) => {
                    let state = now.state.map_or("deleted", |state| state.as_str());
                    format!("{short} {state} ${:.2}", now.spent_usd)
                }
                None => short,
            }
        }
        RunOutcome::Skipped { why, times } => format!("skipped ×{times} ({})", skip_word(*why)),
        RunOutcome::Failed { error } => format!("failed: {error}"),
    }
}

fn print_list(list: &ScheduleList) {
    if list.schedules.is_empty() {
        println!("no schedules (switchboard schedule add NAME --cron EXPR --prompt TEXT)");
        return;
    }
    println!("{:<20} {:<28} {:<30} LAST RUN", "NAME", "WHEN", "NEXT");
    for view in &list.schedules {
        let next = if view.schedule.paused {
            "paused".to_owned()
        } else {
            view.next_ms.first().map_or("-".into(), |next| format_ms(*next))
        };
        println!(
            "{:<20} {:<28} {:<30} {}",
            view.schedule.name,
            when(&view.schedule),
            next,
            last_run(view)
        );
    }
    if !list.queue.is_empty() {
        println!();
        println!("waiting:");
        for entry in &list.queue {
            let starts = entry.starts_ms.map_or("when the run before it ends".into(), |at| {
                format!("starts {}", format_ms(at))
            });
            println!("  {} {}: {}; {starts}", entry.kind, entry.name, entry.why);
        }
    }
}

fn print_schedule(view: &ScheduleView) {
    let schedule = &view.schedule;
    println!(
        "{}  {}{}",
        schedule.name,
        when(schedule),
        if schedule.paused { "  (paused)" } else { "" }
    );
    println!(
        "  task: {} in {}",
        schedule.task.prompt.as_deref().unwrap_or_default(),
        schedule.task.launch.cwd.display()
    );
    for next in &view.next_ms {
        println!("  next: {}", format_ms(*next));
    }
    if let Some(waiting) = &view.waiting {
        let starts = waiting.starts_ms.map_or("when the last run ends".into(), format_ms);
        println!("  waiting since {}: {}; starts {starts}", format_ms(waiting.due_ms), waiting.why);
    }
    for run in view.state.runs.iter().rev().take(10) {
        let what = match &run.outcome {
            RunOutcome::Started { session, .. } => {
                let now = view.sessions.iter().find(|known| &known.id == session);
                let state = now.and_then(|now| now.state).map_or("deleted", |state| state.as_str());
                format!("started {session} ({state})")
            }
            RunOutcome::Skipped { why, times } => format!("skipped ×{times} ({})", skip_word(*why)),
            RunOutcome::Failed { error } => format!("failed: {error}"),
        };
        println!("  run due {}: {what}", format_ms(run.due_ms));
    }
}

fn print_triggers(triggers: &[TriggerView]) {
    if triggers.is_empty() {
        println!("no triggers (switchboard trigger add NAME --prompt TEMPLATE, or --feedback)");
        return;
    }
    println!("{:<20} {:<24} {:<9} LAST DELIVERY", "NAME", "PATH", "FEEDBACK");
    for view in triggers {
        let last = view.runs.first().map_or("-".into(), |run| {
            let session = run
                .session
                .as_deref()
                .map(|id| format!(" {}", id.chars().take(8).collect::<String>()))
                .unwrap_or_default();
            format!("{} {}{session}", format_ms(run.at_ms), run.outcome)
        });
        let feedback = if view.trigger.feedback { "yes" } else { "-" };
        let paused = if view.trigger.paused { " (paused)" } else { "" };
        println!("{:<20} {:<24} {:<9} {last}{paused}", view.trigger.name, view.path, feedback);
        if !view.queued.is_empty() {
            let why = view.hold.as_ref().map(|hold| hold.why.as_str()).unwrap_or_default();
            println!("  {} runs waiting: {why}", view.queued.len());
        }
    }
}

fn skip_word(why: switchboard_server::schedules::SkipWhy) -> &'static str {
    match why {
        switchboard_server::schedules::SkipWhy::Overlap => "the last run still went",
        switchboard_server::schedules::SkipWhy::Missed => "missed while the daemon was down",
    }
}
