//! What a schedule does next, decided from its definition, its state and the moment, with no
//! clock, store or session of its own: [`plan`] answers a [`Step`], and the state's own methods
//! write what was done. The daemon's scheduler ([`crate::daemon`]) runs the steps; tests run
//! the planner on any moment they like.
//!
//! - The due run is always the **last** time due at or before now: runs missed while the daemon
//!   was down, or while a run went on, are one run, never several.
//! - A due run found more than [`GRACE_MS`] late (the daemon was down) runs once or is skipped,
//!   as the schedule's `missed` says; a run that waited in the queue or was held is never
//!   "missed".
//! - A run still going when the next is due: the next is skipped or waits for it
//!   (`overlap`), never started beside it.
//! - A run claimed by another node (in a fleet, through the shared document's compare and set)
//!   is its, until its lease ends: a node lost mid-claim leaves it to the others then.

use serde::{Deserialize, Serialize};

use super::{Missed, Overlap, Schedule, ScheduleState};
use switchboard_session::projection::UsageWindow;

/// How late a due run may be found and still be on time (not "missed").
pub const GRACE_MS: u64 = 60_000;

/// How long a node's claim on a run holds before another node may take the run (the start of
/// a session takes far less).
pub const LEASE_MS: u64 = 120_000;

/// The runs a schedule's state remembers, newest last.
pub const MAX_RUNS_KEPT: usize = 50;

/// What a schedule does now.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Nothing more, ever (a one-time schedule that ran, or a paused one).
    Idle,
    /// Nothing before this moment.
    Wait {
        /// The moment to look again.
        until_ms: u64,
    },
    /// Start the run due at `due_ms` now.
    Run {
        /// When it fell due.
        due_ms: u64,
    },
    /// Pass the run due at `due_ms` by.
    Skip {
        /// When it fell due.
        due_ms: u64,
        /// Why it is passed by.
        why: SkipWhy,
    },
    /// The run due at `due_ms` waits for the one still going.
    Queue {
        /// When it fell due.
        due_ms: u64,
    },
    /// The run due at `due_ms` waits for the usage window or the budget.
    Hold {
        /// When it fell due.
        due_ms: u64,
        /// What holds it.
        hold: Hold,
    },
}

/// Why a run was passed by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SkipWhy {
    /// The previous run was still going (`overlap = "skip"`).
    Overlap,
    /// It fell due while the daemon was down (`missed = "skip"`).
    Missed,
}

/// What holds a run back, and until when (`None`: until a person, or a new report, lifts it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hold {
    /// Why, for people.
    pub why: String,
    /// When it is expected to start (Unix milliseconds).
    pub until_ms: Option<u64>,
}

/// What the scheduler knows besides the schedule: the moment, this node, whether the
/// schedule's last run still goes, and what holds new runs back.
#[derive(Debug, Clone)]
pub struct Look<'a> {
    /// Now (Unix milliseconds).
    pub now_ms: u64,
    /// This node's name (`local` on a daemon of its own).
    pub node: &'a str,
    /// Whether the schedule's last run still goes.
    pub running: bool,
    /// What holds new runs back now, if anything.
    pub hold: Option<Hold>,
}

/// How often a held run with no known end is looked at again.
pub const HOLD_RECHECK_MS: u64 = 60_000;

/// The schedule's next step.
pub fn plan(schedule: &Schedule, state: &ScheduleState, look: &Look<'_>) -> Step {
    if schedule.paused {
        return Step::Idle;
    }
    let Ok(timing) = schedule.timing() else { return Step::Idle };
    let now = look.now_ms;
    let after = state.last_due_ms.unwrap_or(schedule.created_ms.saturating_sub(1));
    let Some(next) = timing.next_after(after) else { return Step::Idle };
    if next > now {
        return Step::Wait { until_ms: next };
    }
    let due = timing.last_at_or_before(now).unwrap_or(next).max(next);
    if let Some(claim) = &state.claim {
        if claim.until_ms > now {
            // Another node starts it (or this one is): its to finish, or to lose.
            return Step::Wait { until_ms: claim.until_ms };
        }
    }
    let waited = state.pending.is_some();
    if !waited && now.saturating_sub(due) > GRACE_MS && schedule.missed == Missed::Skip {
        return Step::Skip { due_ms: due, why: SkipWhy::Missed };
    }
    if look.running {
        return match schedule.overlap {
            Overlap::Skip if !waited => Step::Skip { due_ms: due, why: SkipWhy::Overlap },
            _ => Step::Queue { due_ms: due },
        };
    }
    match &look.hold {
        Some(hold) => Step::Hold { due_ms: due, hold: hold.clone() },
        None => Step::Run { due_ms: due },
    }
}

/// What holds a schedule's new runs back, if anything: a usage window [`window_hold`] names,
/// or the schedule's daily budget spent, until the next day (UTC).
pub fn hold(
    windows: &[UsageWindow],
    cap: Option<f64>,
    spent_today: f64,
    daily_usd: Option<f64>,
    now_ms: u64,
) -> Option<Hold> {
    if let Some(hold) = window_hold(windows, cap, now_ms) {
        return Some(hold);
    }
    let daily = daily_usd.filter(|daily| spent_today >= *daily)?;
    let day = 86_400_000;
    Some(Hold {
        why: format!(
            "the daily budget of {} is spent ({})",
            crate::budget::dollars(daily),
            crate::budget::dollars(spent_today)
        ),
        until_ms: Some((now_ms / day + 1) * day),
    })
}

/// The usage window that holds unattended work back, if one does: one the CLI reported used
/// up (`rejected`), or used at or past `cap`, until it resets. A window whose reset has passed
/// is not read (it starts again from nothing).
pub fn window_hold(windows: &[UsageWindow], cap: Option<f64>, now_ms: u64) -> Option<Hold> {
    windows.iter().find_map(|window| {
        let resets_ms = window.resets_at.map(|seconds| seconds.saturating_mul(1000));
        if resets_ms.is_some_and(|resets| resets <= now_ms) {
            return None;
        }
        let why = if window.status == "rejected" {
            format!("the usage window {} is used up", window.window)
        } else {
            let (cap, used) = (cap?, window.utilization?);
            if used < cap {
                return None;
            }
            format!(
                "the usage window {} is at {:.0}%, at or past the cap of {:.0}%",
                window.window,
                used * 100.0,
                cap * 100.0
            )
        };
        Some(Hold { why, until_ms: resets_ms })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedules::{Claim, Pending, RunNote, RunOutcome};

    const MIN: u64 = 60_000;
    /// 2026-11-30T06:00:00Z.
    const T0: u64 = 1_796_018_400_000;

    fn every_minute() -> Schedule {
        let mut schedule = Schedule::example("tidy", "0 * * * * *");
        schedule.created_ms = T0 - 30_000;
        schedule
    }

    fn look(now_ms: u64) -> Look<'static> {
        Look { now_ms, node: "a", running: false, hold: None }
    }

    #[test]
    fn a_run_is_due_at_its_time_then_waits_for_the_next() {
        let schedule = every_minute();
        let mut state = ScheduleState::default();
        assert_eq!(plan(&schedule, &state, &look(T0 - 1)), Step::Wait { until_ms: T0 });
        assert_eq!(plan(&schedule, &state, &look(T0 + 10)), Step::Run { due_ms: T0 });
        state.claim(T0, "a", T0 + 10, None).unwrap();
        state.started(T0, "s1", Some("a"), T0 + 20);
        assert_eq!(plan(&schedule, &state, &look(T0 + 20)), Step::Wait { until_ms: T0 + MIN });
        assert_eq!(state.runs.len(), 1);
        assert_eq!(state.claim, None);
    }

    #[test]
    fn runs_missed_while_down_are_one_run_or_none() {
        let hour = 60 * MIN;
        let mut schedule = Schedule::example("hourly", "0 0 * * * *");
        schedule.created_ms = T0 - MIN;
        let mut state = ScheduleState { last_due_ms: Some(T0), ..ScheduleState::default() };
        // Down for three and a half hours: the last due time runs, once.
        let back = T0 + 3 * hour + 30 * MIN;
        assert_eq!(plan(&schedule, &state, &look(back)), Step::Run { due_ms: T0 + 3 * hour });
        schedule.missed = Missed::Skip;
        assert_eq!(
            plan(&schedule, &state, &look(back)),
            Step::Skip { due_ms: T0 + 3 * hour, why: SkipWhy::Missed }
        );
        // On time (within the grace) it runs, even so.
        let on_time = T0 + 3 * hour + 7_000;
        assert_eq!(plan(&schedule, &state, &look(on_time)), Step::Run { due_ms: T0 + 3 * hour });
        state.skipped(T0 + 3 * hour, SkipWhy::Missed, back);
        assert_eq!(state.last_due_ms, Some(T0 + 3 * hour));
        assert!(matches!(
            state.runs[0].outcome,
            RunOutcome::Skipped { why: SkipWhy::Missed, times: 1 }
        ));
        assert_eq!(plan(&schedule, &state, &look(back)), Step::Wait { until_ms: T0 + 4 * hour });
    }

    #[test]
    fn a_run_that_overlaps_is_skipped_or_queued_never_doubled() {
        let mut schedule = every_minute();
        let mut state = ScheduleState { last_due_ms: Some(T0), ..ScheduleState::default() };
        let running = Look { running: true, ..look(T0 + MIN + 5) };
        assert_eq!(
            plan(&schedule, &state, &running),
            Step::Skip { due_ms: T0 + MIN, why: SkipWhy::Overlap }
        );
        schedule.overlap = Overlap::Queue;
        assert_eq!(plan(&schedule, &state, &running), Step::Queue { due_ms: T0 + MIN });
        state.pend(T0 + MIN, Pending::Queued);
        // Three minutes later the first run still goes: still one run waits.
        let later = Look { running: true, ..look(T0 + 4 * MIN + 5) };
        assert_eq!(plan(&schedule, &state, &later), Step::Queue { due_ms: T0 + 4 * MIN });
        // It ends: the queued run starts, however late, not "missed" even with missed = skip.
        schedule.missed = Missed::Skip;
        assert_eq!(
            plan(&schedule, &state, &look(T0 + 4 * MIN + 5 + 2 * MIN)),
            Step::Run { due_ms: T0 + 6 * MIN }
        );
    }

    #[test]
    fn another_nodes_claim_holds_until_its_lease_ends() {
        let schedule = every_minute();
        let mut state = ScheduleState { last_due_ms: Some(T0), ..ScheduleState::default() };
        assert_eq!(state.claim(T0 + MIN, "b", T0 + MIN + 1, None), Ok(None));
        // This node, a: the run is b's; and b's own second claim is refused too (one start at
        // a time, a "run now" beside the scheduler's included).
        let refused = state.clone().claim(T0 + MIN, "a", T0 + MIN + 2, None).unwrap_err();
        assert!(refused.contains("node b"), "{refused}");
        assert!(state.clone().claim(T0 + 2 * MIN, "b", T0 + MIN + 2, None).is_err());
        assert_eq!(
            plan(&schedule, &state, &look(T0 + MIN + 2)),
            Step::Wait { until_ms: T0 + MIN + 1 + LEASE_MS }
        );
        // b was lost mid-claim: once the lease ends, a takes the run, and is told of b's claim
        // (b may have started the session already).
        let late = T0 + MIN + 1 + LEASE_MS;
        assert_eq!(plan(&schedule, &state, &look(late)), Step::Run { due_ms: T0 + 3 * MIN });
        let lapsed = state.claim(T0 + 3 * MIN, "a", late, None).unwrap().unwrap();
        assert_eq!((lapsed.node.as_str(), lapsed.due_ms), ("b", T0 + MIN));
        state.started(T0 + 3 * MIN, "s2", Some("a"), late);
        // b comes back and finishes its claim: the run it claimed was passed by.
        let error = state.clone().claim(T0 + MIN, "b", late + 1, None).unwrap_err();
        assert!(error.contains("already"), "{error}");
        // A node that planned from a stale book (it had not read s2's start) claims nothing.
        let stale = state.clone().claim(T0 + 9 * MIN, "b", late + 9 * MIN, None).unwrap_err();
        assert!(stale.contains("changed since it was read"), "{stale}");
        assert!(state.claim(T0 + 9 * MIN, "b", late + 9 * MIN, Some("s2")).is_ok());
    }

    #[test]
    fn a_hold_delays_a_run_and_a_one_time_schedule_runs_once() {
        let schedule = every_minute();
        let state = ScheduleState { last_due_ms: Some(T0), ..ScheduleState::default() };
        let hold = Hold { why: "x".into(), until_ms: Some(T0 + 10 * MIN) };
        let held = Look { hold: Some(hold.clone()), ..look(T0 + MIN + 1) };
        assert_eq!(plan(&schedule, &state, &held), Step::Hold { due_ms: T0 + MIN, hold });
        let mut once = Schedule::example("once", "0 * * * * *");
        once.cron = None;
        once.at = Some(jiff::Timestamp::from_millisecond(T0 as i64).unwrap());
        let mut state = ScheduleState::default();
        once.created_ms = T0 - MIN;
        assert_eq!(plan(&once, &state, &look(T0)), Step::Run { due_ms: T0 });
        state.started(T0, "s", None, T0);
        assert_eq!(plan(&once, &state, &look(T0 + 99 * MIN)), Step::Idle);
        let mut paused = every_minute();
        paused.paused = true;
        assert_eq!(plan(&paused, &ScheduleState::default(), &look(T0)), Step::Idle);
    }

    #[test]
    fn the_usage_window_and_the_daily_budget_hold_runs() {
        let now = T0;
        let window = |status: &str, used: Option<f64>, resets: u64| UsageWindow {
            window: "five_hour".into(),
            status: status.into(),
            utilization: used,
            resets_at: Some(resets / 1000),
        };
        let resets = now + 3_600_000;
        let rejected = hold(&[window("rejected", None, resets)], None, 0.0, None, now).unwrap();
        assert_eq!(rejected.until_ms, Some(resets));
        assert!(rejected.why.contains("five_hour is used up"), "{}", rejected.why);
        let over = hold(&[window("allowed", Some(0.62), resets)], Some(0.5), 0.0, None, now);
        assert!(over.unwrap().why.contains("five_hour is at 62%, at or past the cap of 50%"));
        assert_eq!(hold(&[window("allowed", Some(0.4), resets)], Some(0.5), 0.0, None, now), None);
        // A window whose reset passed starts again: it holds nothing.
        assert_eq!(hold(&[window("rejected", None, now - 1000)], Some(0.5), 0.0, None, now), None);
        let spent = hold(&[], None, 2.5, Some(2.0), now).unwrap();
        assert_eq!(spent.until_ms, Some(1_796_083_200_000), "the next UTC midnight");
        assert!(spent.why.contains("the daily budget of $2.00 is spent ($2.50)"), "{}", spent.why);
    }

    #[test]
    fn a_row_of_skips_is_one_note_and_the_running_session_is_never_forgotten() {
        let mut state = ScheduleState::default();
        state.claim(T0, "a", T0, None).unwrap();
        state.started(T0, "s1", None, T0);
        for minute in 1..=(MAX_RUNS_KEPT as u64 * 2) {
            state.skipped(T0 + minute * MIN, SkipWhy::Overlap, T0 + minute * MIN);
        }
        assert_eq!(state.runs.len(), 2, "{:?}", state.runs);
        let RunOutcome::Skipped { times, .. } = state.runs[1].outcome else { panic!("a skip") };
        assert_eq!(times, MAX_RUNS_KEPT as u32 * 2);
        for due in 0..(MAX_RUNS_KEPT as u64 + 5) {
            state.failed(T0 + 1000 * MIN + due, "no".into(), T0);
        }
        assert_eq!(state.last_session(), Some("s1"), "the running run is still known");
    }

    #[test]
    fn the_state_remembers_a_bounded_number_of_runs() {
        let mut state = ScheduleState::default();
        for due in 0..(MAX_RUNS_KEPT as u64 + 5) {
            state.failed(due, "no".into(), due);
        }
        assert_eq!(state.runs.len(), MAX_RUNS_KEPT);
        assert_eq!(
            state.runs.last().map(|run: &RunNote| run.due_ms),
            Some(MAX_RUNS_KEPT as u64 + 4)
        );
        let _ = Claim { due_ms: 0, node: "a".into(), until_ms: 0 };
    }
}
