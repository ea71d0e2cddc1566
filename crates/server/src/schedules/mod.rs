//! Work that runs while nobody watches: **schedules** (a task run on a cron expression or once)
//! and **triggers** (a task, or feedback to the session that made a branch, started by a signed
//! webhook).
//!
//! A task is a create request ([`CreateSession`]) with its prompt: every run is a fresh session,
//! its record linked to what ran it ([`switchboard_store::RunOf`]) and started under the face
//! [`switchboard_store::Face::Schedule`] or `Trigger` with the creator's token (and its ceiling).
//!
//! Definitions and their state live in one shared document ([`book`]): a file in the data
//! directory on a daemon of its own, a row of the database several daemons share in a fleet.
//! Every change to it is a compare and set, so a run claimed by one node ([`ScheduleState::claim`])
//! is claimed by no other: in a fleet a run happens once.
//!
//! - [`when`]: a schedule's timing (cron in a time zone, or once);
//! - [`plan`]: what a schedule does next, decided with no clock or store;
//! - [`template`]: a trigger's prompt filled from its payload, by path, with no code;
//! - [`signature`]: a webhook's HMAC signature, checked;
//! - [`feedback`]: a GitHub check run, review or merge conflict, read for the session that made
//!   its branch.

pub mod book;
pub mod feedback;
pub mod plan;
pub mod signature;
pub mod template;
pub mod trigger;
pub mod when;

use serde::{Deserialize, Serialize};

use crate::create::CreateSession;
pub use plan::{Hold, Look, SkipWhy, Step};
pub use when::Timing;

/// The most schedules a daemon keeps (the book is one document of at most 4 MiB, rewritten on
/// each run: each schedule's state is bounded, and so is their number).
pub const MAX_SCHEDULES: usize = 128;

/// The most triggers a daemon keeps.
pub const MAX_TRIGGERS: usize = 32;

/// The size the book may reach through trigger runs that wait in the queue (what is left of
/// the document's 4 MiB is the schedules' and the triggers' own).
pub const QUEUE_BOOK_BYTES: usize = 2 * 1024 * 1024;

/// The paths under `/hooks/` that are the daemon's own, never a trigger's.
pub const RESERVED_HOOKS: &[&str] = &["claude", "pre-tool-use", "permission-request"];

/// The longest schedule or trigger name.
pub const MAX_NAME_CHARS: usize = 64;

fn one() -> u32 {
    1
}

/// Now, in Unix milliseconds.
pub fn now_ms() -> u64 {
    switchboard_store::now_ms()
}

/// The scheduler's clock: the system's, or a test's own (paused time).
#[derive(Clone)]
pub struct Clock(std::sync::Arc<dyn Fn() -> u64 + Send + Sync>);

impl Clock {
    /// A clock that reads `now` (Unix milliseconds).
    pub fn new(now: impl Fn() -> u64 + Send + Sync + 'static) -> Clock {
        Clock(std::sync::Arc::new(now))
    }

    /// A clock that starts at `start_ms` and moves with tokio's time (which a test may pause
    /// and advance).
    pub fn tokio(start_ms: u64) -> Clock {
        let start = tokio::time::Instant::now();
        Clock::new(move || start_ms + start.elapsed().as_millis() as u64)
    }

    /// Now (Unix milliseconds).
    pub fn now_ms(&self) -> u64 {
        (self.0)()
    }
}

impl Default for Clock {
    fn default() -> Clock {
        Clock::new(now_ms)
    }
}

impl std::fmt::Debug for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Clock")
    }
}

/// A name for a schedule or trigger: lowercase letters, digits, `-`, `_` and `.`, starting with a
/// letter or digit (it is a path segment of `/hooks/{name}` and a word in logs).
pub fn check_name(what: &str, name: &str) -> Result<(), String> {
    let fine = !name.is_empty()
        && name.len() <= MAX_NAME_CHARS
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.".contains(&b))
        && name.as_bytes()[0].is_ascii_alphanumeric();
    if fine {
        Ok(())
    } else {
        Err(format!(
            "the {what} name {:?} is not one: 1 to {MAX_NAME_CHARS} lowercase letters, digits, '-', '_' or '.', starting with a letter or digit",
            name.chars().take(80).collect::<String>()
        ))
    }
}

/// A task run on a cron expression or once, as `POST /api/schedules` takes it and the
/// document keeps it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Schedule {
    /// Its name, unique among the daemon's schedules.
    pub name: String,
    /// A cron expression: five fields (minute to weekday), or six with seconds first.
    #[serde(default)]
    pub cron: Option<String>,
    /// The time zone the cron expression is read in (an IANA name; `UTC` by default).
    #[serde(default)]
    pub time_zone: Option<String>,
    /// Instead of `cron`: once, at this moment (RFC 3339).
    #[serde(default)]
    pub at: Option<jiff::Timestamp>,
    /// What each run starts: a create request, its `prompt` required.
    pub task: CreateSession,
    /// A run still going when the next is due: `skip` the next (the default) or `queue` it.
    #[serde(default)]
    pub overlap: Overlap,
    /// Runs that fell due while the daemon was down: `run_once` (the default) or `skip`.
    #[serde(default)]
    pub missed: Missed,
    /// Runs start only while every usage window the CLI reports is below this share (0 to
    /// 1), and a run pauses when one reaches it: the most of a window unattended work spends.
    #[serde(default)]
    pub max_window_utilization: Option<f64>,
    /// What this schedule's runs may spend in a day (UTC), in US dollars: reached, new runs
    /// wait for the next day and the run that reached it pauses.
    #[serde(default)]
    pub daily_usd: Option<f64>,
    /// Paused: it runs nothing until resumed.
    #[serde(default)]
    pub paused: bool,
    /// When it was made (set by the daemon).
    #[serde(default)]
    pub created_ms: u64,
    /// Who made it, with the face and the token's ceiling (set by the daemon from the
    /// request's token): its runs start as that token, bounded by that ceiling.
    #[serde(default)]
    pub origin: Option<switchboard_store::Origin>,
    /// Who made it, as permission requests record who started a turn (set by the daemon).
    #[serde(default)]
    pub created_by: String,
}

/// What a run that falls due while the last one still goes does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Overlap {
    /// It is passed by.
    #[default]
    Skip,
    /// It starts when the last one ends (one waits at most, however many fall due).
    Queue,
}

/// What runs that fell due while the daemon was down do.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Missed {
    /// The last of them runs, once, when the daemon is back.
    #[default]
    RunOnce,
    /// They are passed by.
    Skip,
}

impl Schedule {
    /// Its timing, read and checked.
    pub fn timing(&self) -> Result<Timing, String> {
        match (&self.cron, &self.at) {
            (Some(cron), None) => Timing::cron(cron, self.time_zone.as_deref().unwrap_or("UTC")),
            (None, Some(at)) => {
                if self.time_zone.is_some() {
                    return Err("time_zone goes with cron; `at` is a moment (RFC 3339)".into());
                }
                let ms = u64::try_from(at.as_millisecond())
                    .map_err(|_| format!("`at` {at} is before 1970"))?;
                Ok(Timing::once(ms))
            }
            (Some(_), Some(_)) => Err("give cron or at, not both".into()),
            (None, None) => {
                Err("a schedule needs cron (a cron expression) or at (a moment)".into())
            }
        }
    }

    /// Checks what a request gives: its name, timing, caps and task. `now_ms` is the
    /// daemon's clock (a one-time schedule's moment must be after it).
    pub fn check(&self, now_ms: u64) -> Result<(), String> {
        check_name("schedule", &self.name)?;
        if let Timing::Once { at_ms } = self.timing()? {
            if at_ms <= now_ms {
                return Err(format!(
                    "`at` {} has passed; a schedule runs once in the future",
                    when::rfc3339(at_ms)
                ));
            }
        }
        check_task(&self.task)?;
        if let Some(cap) = self.max_window_utilization {
            crate::create::check_window_cap(cap)?;
        }
        if let Some(daily) = self.daily_usd {
            crate::budget::check_limit("daily_usd", daily)?;
        }
        Ok(())
    }

    /// An example schedule, for tests.
    #[cfg(test)]
    pub fn example(name: &str, cron: &str) -> Schedule {
        let mut task = CreateSession::new("/tmp");
        task.prompt = Some("tidy up".into());
        Schedule {
            name: name.into(),
            cron: Some(cron.into()),
            time_zone: None,
            at: None,
            task,
            overlap: Overlap::default(),
            missed: Missed::default(),
            max_window_utilization: None,
            daily_usd: None,
            paused: false,
            created_ms: 0,
            origin: None,
            created_by: "admin".into(),
        }
    }
}

/// A task is a fresh session's create request: a prompt, and no conversation to resume.
pub fn check_task(task: &CreateSession) -> Result<(), String> {
    match task.prompt.as_deref() {
        Some(prompt) if !prompt.trim().is_empty() => {}
        _ => return Err("the task needs a prompt: what each run asks".into()),
    }
    if task.resume.is_some() || task.fork || task.resume_at.is_some() {
        return Err("each run is a fresh session: a task resumes no conversation".into());
    }
    if task.launch.cwd.as_os_str().is_empty() {
        return Err("the task needs cwd: the directory each run works in".into());
    }
    if !task.launch.cwd.is_absolute() {
        return Err(format!(
            "the task's cwd {} is not an absolute path",
            task.launch.cwd.display()
        ));
    }
    Ok(())
}

/// What a schedule has done and is doing: kept beside its definition, changed only by compare
/// and set.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ScheduleState {
    /// The last due time dealt with (run, skipped or failed).
    pub last_due_ms: Option<u64>,
    /// A node starting a run now.
    pub claim: Option<Claim>,
    /// A run that waits: queued behind the last, or held by the usage window or budget.
    pub pending: Option<Pending>,
    /// When that run fell due.
    pub pending_due_ms: Option<u64>,
    /// The last runs, oldest first (at most [`plan::MAX_RUNS_KEPT`]).
    pub runs: Vec<RunNote>,
    /// The session of the last run started: while it goes, no other run starts.
    pub last_started: Option<String>,
    /// The runs started today (UTC), for the schedule's daily budget.
    pub today: Option<DayRuns>,
}

/// The sessions of the runs started on one day (UTC), at most [`MAX_DAY_RUNS`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DayRuns {
    /// The day: Unix milliseconds / 86,400,000.
    pub day: u64,
    /// The runs' sessions.
    pub sessions: Vec<String>,
}

/// The most runs a day a schedule's daily budget counts (one a minute); a schedule that runs
/// more often than that has the first ones counted.
pub const MAX_DAY_RUNS: usize = 1440;

/// A node's claim on a run: the run is its until `until_ms`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claim {
    /// The run's due time.
    pub due_ms: u64,
    /// The node starting it.
    pub node: String,
    /// When the claim lapses, if the node has not finished it.
    pub until_ms: u64,
}

/// Why a run waits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Pending {
    /// Behind the run still going.
    Queued,
    /// Held (a usage window, the daily budget) until `hold.until_ms`.
    Held {
        /// What holds it.
        hold: Hold,
    },
}

/// One run: when it was due, when it was dealt with, and how.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunNote {
    /// When it fell due.
    pub due_ms: u64,
    /// When it was dealt with.
    pub at_ms: u64,
    /// How.
    #[serde(flatten)]
    pub outcome: RunOutcome,
}

/// How a run was dealt with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "outcome")]
pub enum RunOutcome {
    /// A session started.
    Started {
        /// The session.
        session: String,
        /// The node that runs it (in a fleet).
        node: Option<String>,
    },
    /// Passed by.
    Skipped {
        /// Why.
        why: SkipWhy,
        /// How many due runs in a row were passed by for that reason (the note is the last's).
        #[serde(default = "one")]
        times: u32,
    },
    /// The session could not start.
    Failed {
        /// Why it could not.
        error: String,
    },
}

impl ScheduleState {
    /// Claims the run due at `due_ms` for `node`: refused when it was dealt with, when a claim
    /// still holds (another node's, or this node's own: one start at a time), or when the last
    /// run started is no longer `seen_last` (the state the caller planned from is stale: it looks
    /// again). Answers the lapsed claim it replaced, if any: a node lost mid-start may have
    /// started that run's session already.
    pub fn claim(
        &mut self,
        due_ms: u64,
        node: &str,
        now_ms: u64,
        seen_last: Option<&str>,
    ) -> Result<Option<Claim>, String> {
        if self.last_due_ms.is_some_and(|last| last >= due_ms) {
            return Err(format!("the run due at {} was already dealt with", when::rfc3339(due_ms)));
        }
        if let Some(claim) = &self.claim {
            if claim.until_ms > now_ms {
                return Err(format!(
                    "node {} is starting the run due at {}",
                    claim.node,
                    when::rfc3339(claim.due_ms)
                ));
            }
        }
        if self.last_started.as_deref() != seen_last {
            return Err("the schedule's last run changed since it was read".into());
        }
        let lapsed = self.claim.take();
        self.claim =
            Some(Claim { due_ms, node: node.to_owned(), until_ms: now_ms + plan::LEASE_MS });
        Ok(lapsed)
    }

    /// Whether `node` still holds its claim on the run due at `due_ms`.
    pub fn holds(&self, due_ms: u64, node: &str) -> bool {
        self.claim.as_ref().is_some_and(|claim| claim.due_ms == due_ms && claim.node == node)
    }

    /// The run due at `due_ms` started session `session`.
    pub fn started(&mut self, due_ms: u64, session: &str, node: Option<&str>, now_ms: u64) {
        let node = node.map(str::to_owned);
        self.last_started = Some(session.to_owned());
        let day = now_ms / 86_400_000;
        let today = self.today.get_or_insert_with(DayRuns::default);
        if today.day != day {
            *today = DayRuns { day, sessions: Vec::new() };
        }
        if today.sessions.len() < MAX_DAY_RUNS {
            today.sessions.push(session.to_owned());
        }
        self.dealt(due_ms, now_ms, RunOutcome::Started { session: session.to_owned(), node });
    }

    /// The run due at `due_ms` was passed by: one note for a row of runs passed by for one
    /// reason (a long run would otherwise push every other note out).
    pub fn skipped(&mut self, due_ms: u64, why: SkipWhy, now_ms: u64) {
        let times = match self.runs.last() {
            Some(RunNote { outcome: RunOutcome::Skipped { why: last, times }, .. })
                if *last == why =>
            {
                let times = times.saturating_add(1);
                self.runs.pop();
                times
            }
            _ => 1,
        };
        self.dealt(due_ms, now_ms, RunOutcome::Skipped { why, times });
    }

    /// The run due at `due_ms` could not start.
    pub fn failed(&mut self, due_ms: u64, error: String, now_ms: u64) {
        self.dealt(due_ms, now_ms, RunOutcome::Failed { error });
    }

    /// The run due at `due_ms` waits; whether that changed anything.
    pub fn pend(&mut self, due_ms: u64, why: Pending) -> bool {
        let changed = self.pending.as_ref() != Some(&why) || self.pending_due_ms != Some(due_ms);
        self.pending = Some(why);
        self.pending_due_ms = Some(due_ms);
        changed
    }

    /// The session of the last run started, if any (kept apart from the notes, which a long
    /// history of failures could push it out of).
    pub fn last_session(&self) -> Option<&str> {
        self.last_started.as_deref()
    }

    fn dealt(&mut self, due_ms: u64, now_ms: u64, outcome: RunOutcome) {
        self.last_due_ms = Some(self.last_due_ms.map_or(due_ms, |last| last.max(due_ms)));
        self.claim = None;
        self.pending = None;
        self.pending_due_ms = None;
        self.runs.push(RunNote { due_ms, at_ms: now_ms, outcome });
        let extra = self.runs.len().saturating_sub(plan::MAX_RUNS_KEPT);
        self.runs.drain(..extra);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_tasks_are_checked() {
        assert!(check_name("schedule", "nightly-tidy.v2").is_ok());
        for bad in ["", "Nightly", "-x", "a/b", "a b", &"x".repeat(65)] {
            let error = check_name("schedule", bad).unwrap_err();
            assert!(error.contains("is not one"), "{error}");
        }
        let mut schedule = Schedule::example("n", "0 3 * * *");
        assert!(schedule.check(now_ms()).is_ok());
        schedule.task.prompt = None;
        assert!(schedule.check(now_ms()).unwrap_err().contains("needs a prompt"));
        schedule.task.prompt = Some("p".into());
        schedule.task.resume = Some("abc".into());
        assert!(schedule.check(now_ms()).unwrap_err().contains("resumes no conversation"));
        schedule.task.resume = None;
        schedule.max_window_utilization = Some(1.5);
        assert!(schedule.check(now_ms()).unwrap_err().contains("max_window_utilization"));
        schedule.max_window_utilization = Some(0.5);
        schedule.at = Some(jiff::Timestamp::UNIX_EPOCH);
        assert!(schedule.check(now_ms()).unwrap_err().contains("not both"));
        schedule.cron = None;
        schedule.time_zone = Some("UTC".into());
        assert!(schedule.check(now_ms()).unwrap_err().contains("time_zone goes with cron"));
    }

    #[test]
    fn a_schedule_is_read_from_its_json_with_unknown_keys_refused() {
        let text = r#"{"name":"n","cron":"0 3 * * *","time_zone":"Europe/Paris",
            "task":{"cwd":"/tmp","prompt":"p","model":"haiku"},"overlap":"queue"}"#;
        let schedule: Schedule = serde_json::from_str(text).unwrap();
        assert_eq!(schedule.overlap, Overlap::Queue);
        assert_eq!(schedule.task.launch.model.as_deref(), Some("haiku"));
        let error = serde_json::from_str::<Schedule>(&text.replace("overlap", "overlaps"))
            .unwrap_err()
            .to_string();
        assert!(error.contains("overlaps"), "{error}");
        let error = serde_json::from_str::<Schedule>(&text.replace("\"model\"", "\"modle\""))
            .unwrap_err()
            .to_string();
        assert!(error.contains("modle"), "{error}");
    }
}
