//! The scheduler: every node looks at the book of schedules ([`crate::schedules::book`]) at
//! least once a second, plans each schedule ([`crate::schedules::plan`]) and does what the plan
//! says. A run is claimed in the book first (compare and set: in a fleet, one node wins), then
//! started as a fresh session through [`Daemon::create`], like any other, its record linked to
//! the schedule ([`switchboard_store::RunOf`]) and started as the schedule's creator, under
//! that token's ceiling and daily budget. What the run spends is capped by the schedule's
//! `max_window_utilization` (the session pauses there) and its `daily_usd`.

use super::observers::{Observer, Stored, Waiting};
use super::*;
use crate::schedules::book::ScheduleEntry;
use crate::schedules::plan::{self, Look, Step};
use crate::schedules::{Pending, Schedule, ScheduleState};

/// The longest a scheduler sleeps before it looks again (other nodes' changes, runs that
/// ended, holds that lifted).
pub(super) const LOOK_EVERY: Duration = Duration::from_secs(1);

/// A schedule as every face shows it: its definition (the task's secrets hidden), its state,
/// its next times, and what its last runs' sessions did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ScheduleView {
    /// The schedule.
    pub schedule: Schedule,
    /// What it did and does.
    pub state: ScheduleState,
    /// Its next due times (Unix milliseconds), at most five.
    pub next_ms: Vec<u64>,
    /// A run that waits, and when it is expected to start (`None`: when the last run ends,
    /// or unknown).
    pub waiting: Option<WaitingRun>,
    /// The last runs' sessions, newest first (at most ten).
    pub sessions: Vec<RunSession>,
}

/// `GET /api/schedules`: every schedule, and the queue of runs that wait.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ScheduleList {
    /// The schedules, by name.
    pub schedules: Vec<ScheduleView>,
    /// Runs that wait (a schedule's or a trigger's), soonest first.
    pub queue: Vec<QueueEntry>,
}

/// A run that waits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueEntry {
    /// `schedule` or `trigger`.
    pub kind: String,
    /// Its schedule's or trigger's name.
    pub name: String,
    /// When it fell due, or came.
    pub since_ms: u64,
    /// Why it waits.
    pub why: String,
    /// When it is expected to start (`None`: when the run before it ends, or unknown).
    pub starts_ms: Option<u64>,
}

/// A run that waits in the queue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WaitingRun {
    /// When it fell due.
    pub due_ms: u64,
    /// Why it waits.
    pub why: String,
    /// When it is expected to start.
    pub starts_ms: Option<u64>,
}

/// What a run's session did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSession {
    /// The session.
    pub id: String,
    /// The run's due time.
    pub due_ms: u64,
    /// Its state now (`None`: it was deleted).
    pub state: Option<RecordState>,
    /// What it spent.
    pub spent_usd: f64,
    /// Its title.
    pub title: Option<String>,
}

impl Daemon {
    /// The book of schedules and triggers.
    pub fn books(&self) -> &crate::schedules::book::Books {
        &self.books
    }

    /// Now, by the daemon's clock (a test's own, or the system's).
    pub fn clock_ms(&self) -> u64 {
        self.config.clock.now_ms()
    }

    /// This node's name in claims (`local` on a daemon of its own).
    pub(super) fn claimer(&self) -> &str {
        self.config.node.as_deref().unwrap_or("local")
    }

    /// Starts the scheduler: it runs while the daemon is held anywhere and serving.
    pub(super) fn start_scheduler(self: &Arc<Self>) {
        // Claims this node made before it last stopped lapse now (not in two minutes): a run
        // it had started is found by its due time and adopted, not started again.
        let (me, node) = (Arc::downgrade(self), self.claimer().to_owned());
        tokio::spawn(async move {
            let Some(daemon) = me.upgrade() else { return };
            let now = daemon.clock_ms();
            for (name, entry) in daemon.books.get().schedules {
                if entry.state.claim.as_ref().is_some_and(|claim| claim.node == node) {
                    daemon
                        .note_schedule(&name, |state| {
                            if let Some(claim) = state.claim.as_mut().filter(|c| c.node == node) {
                                claim.until_ms = claim.until_ms.min(now);
                            }
                        })
                        .await;
                }
            }
        });
        // The dashboards hear of each change to the book, here or read from another node.
        let mut book = self.books.watch();
        let me = Arc::downgrade(self);
        tokio::spawn(async move {
            while book.changed().await.is_ok() {
                let Some(daemon) = me.upgrade() else { return };
                daemon.tell_dashboards(Change::SchedulesChanged {});
            }
        });
        let me = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                let Some(daemon) = me.upgrade() else { return };
                if !matches!(*daemon.phase.borrow(), Phase::Serving) {
                    return;
                }
                let wake = Box::pin(daemon.look_at_schedules()).await;
                let now = daemon.clock_ms();
                let mut changed = daemon.books.watch();
                changed.mark_unchanged();
                drop(daemon);
                let pause = Duration::from_millis(wake.saturating_sub(now)).min(LOOK_EVERY);
                tokio::select! {
                    _ = tokio::time::sleep(pause) => {}
                    _ = changed.changed() => {}
                }
            }
        });
    }

    /// Plans every schedule and does what each plan says; when to look again at the latest.
    async fn look_at_schedules(self: &Arc<Self>) -> u64 {
        Box::pin(self.start_queued_triggers()).await;
        let book = self.books.get();
        let now = self.clock_ms();
        let mut wake = now + LOOK_EVERY.as_millis() as u64;
        for (name, entry) in &book.schedules {
            let step = self.plan_schedule(entry, now).await;
            match step {
                Step::Idle => {}
                Step::Wait { until_ms } => wake = wake.min(until_ms),
                Step::Run { due_ms } => {
                    // Claimed here, started on a task of its own: many schedules due at once
                    // each start on time, none waiting on the others' CLIs.
                    let seen = entry.state.last_session();
                    if let Some(claimed) = self.claim_run(name, due_ms, seen).await {
                        let (daemon, name) = (self.clone(), name.clone());
                        tokio::spawn(async move {
                            let _ =
                                Box::pin(daemon.launch_run(&name, due_ms, claimed, false)).await;
                        });
                    }
                }
                Step::Skip { due_ms, why } => {
                    tracing::info!(schedule = %name, due = %crate::schedules::when::rfc3339(due_ms), ?why, "run passed by");
                    self.note_schedule(name, |state| {
                        if state.last_due_ms.is_none_or(|last| last < due_ms) {
                            state.skipped(due_ms, why, now);
                        }
                    })
                    .await;
                }
                Step::Queue { due_ms } => {
                    self.note_schedule(name, |state| {
                        state.pend(due_ms, Pending::Queued);
                    })
                    .await;
                }
                Step::Hold { due_ms, hold } => {
                    if let Some(until) = hold.until_ms {
                        wake = wake.min(until);
                    }
                    if entry.state.pending != Some(Pending::Held { hold: hold.clone() }) {
                        tracing::info!(schedule = %name, "run held: {}", hold.why);
                    }
                    self.note_schedule(name, |state| {
                        state.pend(due_ms, Pending::Held { hold: hold.clone() });
                    })
                    .await;
                }
            }
        }
        wake
    }

    /// What schedule `entry` does now: whether its last run still goes and what holds runs
    /// back are read only when a run is due.
    async fn plan_schedule(&self, entry: &ScheduleEntry, now: u64) -> Step {
        let mut look = Look { now_ms: now, node: self.claimer(), running: false, hold: None };
        let step = plan::plan(&entry.schedule, &entry.state, &look);
        if !matches!(step, Step::Run { .. }) {
            return step;
        }
        look.running = match entry.state.last_session() {
            Some(id) => self.run_goes(id).await,
            None => false,
        };
        look.hold = self.hold_of(&entry.schedule, &entry.state, now).await;
        plan::plan(&entry.schedule, &entry.state, &look)
    }

    /// What holds schedule `schedule`'s new runs back now, if anything.
    async fn hold_of(
        &self,
        schedule: &Schedule,
        state: &ScheduleState,
        now: u64,
    ) -> Option<plan::Hold> {
        let windows = self.usage.report().windows;
        let spent = match schedule.daily_usd {
            Some(_) => self.spent_today(state, now).await,
            None => 0.0,
        };
        plan::hold(&windows, schedule.max_window_utilization, spent, schedule.daily_usd, now)
    }

    /// What the runs started today (UTC) spent.
    async fn spent_today(&self, state: &ScheduleState, now: u64) -> f64 {
        let Some(today) = state.today.as_ref().filter(|today| today.day == now / 86_400_000) else {
            return 0.0;
        };
        let mut spent = 0.0;
        for session in &today.sessions {
            if let Ok(Some(record)) = self.record(session).await {
                spent += record.spent_usd;
            }
        }
        spent
    }

    /// Whether session `id` (a run's) still goes: its record is not final, and its node is not
    /// lost.
    async fn run_goes(&self, id: &str) -> bool {
        match self.record(id).await {
            // On a node that was lost, it goes no more (until it is resumed elsewhere).
            Ok(Some(record)) => !record.state.is_final() && !self.node_lost(&record),
            // Deleted, or unreadable: nothing to wait for.
            _ => false,
        }
    }

    /// Changes schedule `name`'s state; a failure is logged (the next look tries again).
    async fn note_schedule(&self, name: &str, mut change: impl FnMut(&mut ScheduleState)) {
        let changed = self
            .books
            .change_schedule(name, |entry| {
                change(&mut entry.state);
                Ok(())
            })
            .await;
        if let Err(error) = changed {
            tracing::warn!(schedule = %name, %error, "cannot note the schedule's run");
        }
    }

    /// Runs schedule `name` now, whatever its timing says (`POST
    /// /api/schedules/{name}/run`): refused while its last run still goes.
    pub async fn run_schedule_now(
        self: &Arc<Self>,
        name: &str,
    ) -> Result<SessionRecord, DaemonError> {
        let entry = self
            .books
            .get()
            .schedules
            .get(name)
            .cloned()
            .ok_or_else(|| DaemonError::Missing(format!("no schedule {name}")))?;
        if let Some(id) = entry.state.last_session() {
            if self.run_goes(id).await {
                return Err(DaemonError::Conflict(format!(
                    "schedule {name}'s last run (session {id}) still goes; stop it first, or wait"
                )));
            }
        }
        let due = self.clock_ms().max(entry.state.last_due_ms.map_or(0, |last| last + 1));
        let Some(claimed) = self.claim_run(name, due, entry.state.last_session()).await else {
            return Err(DaemonError::Conflict(format!(
                "schedule {name}'s run is being started already"
            )));
        };
        Box::pin(self.launch_run(name, due, claimed, true)).await
    }

    /// Claims schedule `name`'s run due at `due_ms` for this node, planned from a state whose
    /// last started run was `seen_last`: the schedule, and the lapsed claim it replaced if
    /// any; `None` when another node has it, the state moved on, or it is gone.
    async fn claim_run(
        &self,
        name: &str,
        due_ms: u64,
        seen_last: Option<&str>,
    ) -> Option<(Schedule, Option<crate::schedules::Claim>)> {
        let node = self.claimer().to_owned();
        let now = self.clock_ms();
        let claimed = self
            .books
            .change_schedule(name, |entry| {
                let lapsed = entry.state.claim(due_ms, &node, now, seen_last)?;
                Ok((entry.schedule.clone(), lapsed))
            })
            .await;
        match claimed {
            Ok(claimed) => claimed,
            Err(why) => {
                tracing::debug!(schedule = %name, "not claimed: {why}");
                None
            }
        }
    }

    /// The session of schedule `name`'s run due at `due_ms`, if one was started (by a node lost
    /// before it noted it).
    async fn run_session(&self, name: &str, due_ms: u64) -> Option<SessionRecord> {
        let records = self.store.list_sessions().await.ok()?;
        records.into_iter().find(|record| {
            record.launch.run.as_ref().is_some_and(|run| {
                run.kind == switchboard_store::RunKind::Schedule
                    && run.name == name
                    && run.due_ms == Some(due_ms)
            })
        })
    }

    /// Starts the session of schedule `name`'s run due at `due_ms`, claimed here, and notes
    /// what came of it in the book.
    async fn launch_run(
        self: &Arc<Self>,
        name: &str,
        due_ms: u64,
        (schedule, lapsed): (Schedule, Option<crate::schedules::Claim>),
        now_asked: bool,
    ) -> Result<SessionRecord, DaemonError> {
        let node = self.claimer().to_owned();
        let now = self.clock_ms();
        // Taken over from a node lost mid-start: its session, if it made one, is the run's.
        if lapsed.as_ref().is_some_and(|lapsed| lapsed.due_ms == due_ms) {
            if let Some(record) = self.run_session(name, due_ms).await {
                tracing::info!(schedule = %name, session = %record.id, "a lost node had started the run: its session is the run's");
                let (id, on) = (record.id.clone(), record.node.clone());
                self.note_schedule(name, |state| state.started(due_ms, &id, on.as_deref(), now))
                    .await;
                return Ok(record);
            }
        }
        let remaining = match schedule.daily_usd {
            Some(daily) => {
                let state = self.books.get().schedules.get(name).map(|entry| entry.state.clone());
                let spent = match state {
                    Some(state) => self.spent_today(&state, now).await,
                    None => 0.0,
                };
                Some((daily - spent).max(0.0))
            }
            None => None,
        };
        let request = run_request(&schedule, due_ms, remaining, now_asked);
        // Not cut short: a create stopped midway could leave a session the book never hears
        // of (a create that takes past the claim's lease is found by a node taking it over).
        let started = Box::pin(self.create(request)).await;
        let at = self.clock_ms();
        match &started {
            Ok(record) => {
                tracing::info!(schedule = %name, session = %record.id, "run started");
                let (id, on) = (record.id.clone(), record.node.clone());
                self.note_schedule(name, |state| {
                    if !state.holds(due_ms, &node) {
                        tracing::warn!(schedule = %name, "the run's claim lapsed before its session started");
                    }
                    state.started(due_ms, &id, on.as_deref(), at);
                    // Kept for the daily budget only.
                    if schedule.daily_usd.is_none() {
                        state.today = None;
                    }
                })
                .await;
            }
            Err(error) => {
                tracing::warn!(schedule = %name, %error, "run failed to start");
                let error = error.to_string();
                self.note_schedule(name, |state| state.failed(due_ms, error.clone(), at)).await;
            }
        }
        started
    }

    /// Pauses the schedules and triggers token `token` made (it was revoked: they would start
    /// sessions as it); how many.
    pub async fn pause_made_by(&self, token: &str) -> usize {
        let made = |origin: &Option<switchboard_store::Origin>| {
            origin.as_ref().is_some_and(|origin| origin.token == token)
        };
        let book = self.books.get();
        let mut paused = 0;
        for (name, entry) in &book.schedules {
            if made(&entry.schedule.origin) && !entry.schedule.paused {
                let done = self.books.change_schedule(name, |entry| {
                    entry.schedule.paused = true;
                    Ok(())
                });
                paused += usize::from(matches!(done.await, Ok(Some(()))));
            }
        }
        for (name, entry) in &book.triggers {
            if made(&entry.trigger.origin) && !entry.trigger.paused {
                let done = self.books.change_trigger(name, |entry| {
                    entry.trigger.paused = true;
                    Ok(())
                });
                paused += usize::from(matches!(done.await, Ok(Some(()))));
            }
        }
        paused
    }

    /// Every schedule as faces show it, and the queue of runs that wait (a schedule's or a
    /// trigger's), soonest first.
    pub async fn schedule_list(&self) -> ScheduleList {
        let book = self.books.get();
        let mut schedules = Vec::with_capacity(book.schedules.len());
        let mut queue = Vec::new();
        for (name, entry) in &book.schedules {
            let view = self.schedule_view(entry).await;
            if let Some(waiting) = &view.waiting {
                queue.push(QueueEntry {
                    kind: "schedule".into(),
                    name: name.clone(),
                    since_ms: waiting.due_ms,
                    why: waiting.why.clone(),
                    starts_ms: waiting.starts_ms,
                });
            }
            schedules.push(view);
        }
        for (name, entry) in &book.triggers {
            let hold = entry.state.hold.as_ref();
            for run in &entry.state.queued {
                queue.push(QueueEntry {
                    kind: "trigger".into(),
                    name: name.clone(),
                    since_ms: run.at_ms,
                    why: hold.map(|hold| hold.why.clone()).unwrap_or_default(),
                    starts_ms: hold.and_then(|hold| hold.until_ms),
                });
            }
        }
        queue.sort_by_key(|entry| (entry.starts_ms.unwrap_or(u64::MAX), entry.since_ms));
        ScheduleList { schedules, queue }
    }

    /// Schedule `name` as faces show it.
    pub async fn schedule_view(&self, entry: &ScheduleEntry) -> ScheduleView {
        let now = self.clock_ms();
        let mut schedule = entry.schedule.clone();
        schedule.task.launch = schedule.task.launch.public();
        let next_ms = match (schedule.paused, schedule.timing()) {
            (false, Ok(timing)) => {
                let after = entry
                    .state
                    .last_due_ms
                    .unwrap_or(schedule.created_ms.saturating_sub(1))
                    .max(now);
                timing.upcoming(after, 5)
            }
            _ => Vec::new(),
        };
        let waiting = match (&entry.state.pending, entry.state.pending_due_ms) {
            (Some(Pending::Queued), Some(due_ms)) => {
                Some(WaitingRun { due_ms, why: "its last run still goes".into(), starts_ms: None })
            }
            (Some(Pending::Held { hold }), Some(due_ms)) => {
                Some(WaitingRun { due_ms, why: hold.why.clone(), starts_ms: hold.until_ms })
            }
            _ => None,
        };
        let mut sessions = Vec::new();
        for run in entry.state.runs.iter().rev() {
            if sessions.len() >= 10 {
                break;
            }
            if let crate::schedules::RunOutcome::Started { session, .. } = &run.outcome {
                let record = self.record(session).await.ok().flatten();
                sessions.push(RunSession {
                    id: session.clone(),
                    due_ms: run.due_ms,
                    state: record.as_ref().map(|record| record.state),
                    spent_usd: record.as_ref().map_or(0.0, |record| record.spent_usd),
                    title: record.and_then(|record| record.title),
                });
            }
        }
        ScheduleView { schedule, state: entry.state.clone(), next_ms, waiting, sessions }
    }
}

/// Ends a run's session once its turn is over: at rest (idle, nothing queued, nothing
/// waiting for a person, not paused by a budget or cap), its CLI stops and the run is done
/// (the next may start). A session a person or feedback writes to again is resumed, as any.
pub(super) struct RunEnds;

impl Observer for RunEnds {
    fn stored<'a>(
        &'a self,
        _daemon: &'a Arc<Daemon>,
        stored: &'a Stored<'a>,
    ) -> Option<Waiting<'a>> {
        if stored.turn_ends.is_empty() || stored.live.record.lock().launch.run.is_none() {
            return None;
        }
        if stored.live.paused().is_some() {
            return None;
        }
        let handle = stored.live.handle().filter(|handle| {
            let now = handle.snapshot();
            now.state == SessionState::Idle
                && now.queued_turns == 0
                && now.pending_permissions.is_empty()
        })?;
        tracing::info!(session = %stored.id, "the run's turn is over: its CLI ends");
        tokio::spawn(async move {
            // Still at rest (a message, feedback say, may have come meanwhile).
            let now = handle.snapshot();
            if now.state == SessionState::Idle && now.queued_turns == 0 {
                let _ = handle.shutdown(STOP_GRACE).await;
            }
        });
        None
    }
}

/// The create request of schedule `schedule`'s run due at `due_ms`: its task, linked to it,
/// started as its creator, its spending capped by the schedule's (`remaining`: what its daily
/// budget leaves).
fn run_request(
    schedule: &Schedule,
    due_ms: u64,
    remaining: Option<f64>,
    now_asked: bool,
) -> CreateSession {
    let mut request = schedule.task.clone();
    request.launch.run = Some(switchboard_store::RunOf {
        kind: switchboard_store::RunKind::Schedule,
        name: schedule.name.clone(),
        due_ms: (!now_asked).then_some(due_ms),
        delivery: None,
    });
    if schedule.max_window_utilization.is_some() {
        request.launch.max_window_utilization = schedule.max_window_utilization;
    }
    if let Some(remaining) = remaining {
        let own = request.launch.max_budget_usd.unwrap_or(f64::INFINITY);
        request.launch.max_budget_usd = Some(own.min(remaining));
    }
    let origin = schedule.origin.clone().map(|origin| switchboard_store::Origin {
        face: switchboard_store::Face::Schedule,
        ..origin
    });
    request.origin = origin;
    request.started_by = Some(switchboard_session::Sender::new(
        format!("schedule {}, {}", schedule.name, schedule.created_by),
        Some(switchboard_session::TurnOrigin::Schedule),
    ));
    request
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runs_request_is_its_schedules_task_linked_capped_and_started_as_its_creator() {
        let mut task = CreateSession::new("/srv/app");
        task.prompt = Some("tidy".into());
        task.launch.max_budget_usd = Some(5.0);
        let value = json!({"name": "nightly", "cron": "0 3 * * *", "task": task,
            "max_window_utilization": 0.5, "daily_usd": 3.0});
        let mut schedule: Schedule = serde_json::from_value(value).unwrap();
        schedule.created_by = "token ci (api)".into();
        schedule.origin = Some(switchboard_store::Origin {
            face: switchboard_store::Face::Schedule,
            token: "ci".into(),
            ceiling: Some("[permissions]\ndefault = \"ask\"\n".into()),
        });
        // The day left $1.25 of its $3: the run may spend that, not its task's $5.
        let request = run_request(&schedule, 42, Some(1.25), false);
        assert_eq!(request.launch.max_budget_usd, Some(1.25));
        assert_eq!(request.launch.max_window_utilization, Some(0.5));
        let run = request.launch.run.as_ref().unwrap();
        assert_eq!(
            (run.kind, run.name.as_str(), run.due_ms),
            (switchboard_store::RunKind::Schedule, "nightly", Some(42))
        );
        let origin = request.origin.as_ref().unwrap();
        assert_eq!((origin.face, origin.token.as_str()), (switchboard_store::Face::Schedule, "ci"));
        assert!(origin.ceiling.is_some(), "the creator's ceiling bounds every run");
        let by = request.started_by.as_ref().unwrap();
        assert_eq!(by.who, "schedule nightly, token ci (api)");
        assert_eq!(by.origin, Some(switchboard_session::TurnOrigin::Schedule));
        assert_eq!(
            crate::budget::token_of(&by.who),
            Some("ci"),
            "the token's daily budget is charged"
        );
        // Run now: no due time; a task cheaper than what the day leaves keeps its own budget.
        let request = run_request(&schedule, 42, Some(9.0), true);
        assert_eq!(request.launch.run.unwrap().due_ms, None);
        assert_eq!(request.launch.max_budget_usd, Some(5.0));
    }
}
