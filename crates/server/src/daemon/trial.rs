//! A dry run of a candidate policy over stored sessions ([`Daemon::trial`]): the sessions a
//! filter picks, each log read in pages and replayed ([`switchboard_session::replay`]), each
//! call decided again by the candidate under the ceiling the session ran under, and counted
//! ([`switchboard_session::policy::trial`]). Read-only: nothing is written, no session runs.
//! One dry run at a time on a node; progress goes out on a bounded channel, so a slow reader
//! slows the run rather than growing a queue.

use switchboard_session::policy::trial::{Headline, Trial, TrialReport};
use switchboard_session::replay::Replay;

use std::path::Path;

use switchboard_session::MatchContext;

use super::*;

/// Events read per page.
const PAGE: usize = 2000;

/// Progress is told at least this often, in calls.
const TELL_EVERY: u64 = 5000;

/// Which sessions a dry run reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrialFilter {
    /// These ids only (empty: any).
    pub ids: Vec<String>,
    /// Sessions in this directory or under it.
    pub cwd: Option<String>,
    /// Sessions a token of this name started.
    pub token: Option<String>,
    /// Runs of this schedule.
    pub schedule: Option<String>,
    /// Runs of this trigger.
    pub trigger: Option<String>,
    /// Calls made at or after this time (Unix milliseconds); sessions not touched since are
    /// skipped.
    pub since_ms: Option<u64>,
    /// A token's ceiling: only the sessions started under it.
    pub within: Option<Arc<str>>,
}

/// The most words a filter has.
const MAX_FILTER_WORDS: usize = 64;

impl TrialFilter {
    /// Reads `text`: words separated by commas or spaces, each a session id, `cwd=PATH`,
    /// `token=NAME`, `schedule=NAME` or `trigger=NAME`.
    pub fn parse(text: &str) -> Result<TrialFilter, String> {
        let mut filter = TrialFilter::default();
        let words: Vec<&str> =
            text.split([',', ' ']).map(str::trim).filter(|word| !word.is_empty()).collect();
        if words.len() > MAX_FILTER_WORDS {
            return Err(format!("a session filter has at most {MAX_FILTER_WORDS} words"));
        }
        for word in words {
            let (key, value) = match word.split_once('=') {
                Some((key, value)) if !value.is_empty() => (key, value.to_owned()),
                Some((key, _)) => return Err(format!("{key}= names nothing")),
                None => {
                    if !word.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
                        return Err(format!(
                            "{word:?} is not a session id (or cwd=, token=, schedule=, trigger=)"
                        ));
                    }
                    filter.ids.push(word.to_owned());
                    continue;
                }
            };
            let slot = match key {
                "cwd" => &mut filter.cwd,
                "token" => &mut filter.token,
                "schedule" => &mut filter.schedule,
                "trigger" => &mut filter.trigger,
                other => {
                    return Err(format!(
                        "{other:?} is no filter: a session id, cwd=, token=, schedule= or trigger="
                    ))
                }
            };
            if slot.is_some() {
                return Err(format!("{key}= is given twice; each key once (ids: any of them)"));
            }
            *slot = Some(value);
        }
        Ok(filter)
    }

    /// Whether a call of a picked session counts: made since `since_ms`, if given.
    fn counts(&self, call: &switchboard_session::replay::ReplayedCall) -> bool {
        self.since_ms.is_none_or(|since| call.at_ms >= since)
    }

    /// Whether it picks `record`.
    fn picks(&self, record: &SessionRecord) -> bool {
        let origin = record.launch.origin.as_ref();
        let run = record.launch.run.as_ref();
        let run_of = |kind: switchboard_store::RunKind, name: &Option<String>| match name {
            None => true,
            Some(name) => run.is_some_and(|run| run.kind == kind && &run.name == name),
        };
        (self.ids.is_empty() || self.ids.contains(&record.id))
            && self
                .cwd
                .as_ref()
                .is_none_or(|cwd| Path::new(&record.cwd).starts_with(cwd) || record.cwd == *cwd)
            && self.token.as_ref().is_none_or(|token| origin.is_some_and(|o| &o.token == token))
            && run_of(switchboard_store::RunKind::Schedule, &self.schedule)
            && run_of(switchboard_store::RunKind::Trigger, &self.trigger)
            && self.since_ms.is_none_or(|since| record.updated_ms >= since)
            && self
                .within
                .as_ref()
                .is_none_or(|within| origin.and_then(|o| o.ceiling.as_deref()) == Some(&**within))
    }
}

/// How far a dry run has got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TrialProgress {
    /// Sessions to read.
    pub sessions: u64,
    /// Sessions read.
    pub sessions_read: u64,
    /// The counts so far.
    pub headline: Headline,
}

/// The one dry run a node runs at a time, taken ([`Daemon::trial_slot`]).
#[derive(Debug)]
pub struct TrialSlot {
    _held: tokio::sync::OwnedMutexGuard<()>,
}

impl Daemon {
    /// The slot a dry run needs: refused while another goes on (one at a time: each reads
    /// every log it picks).
    pub fn trial_slot(&self) -> Result<TrialSlot, DaemonError> {
        self.trials.clone().try_lock_owned().map(|held| TrialSlot { _held: held }).map_err(|_| {
            DaemonError::Conflict("a dry run is going on already; try again when it ends".into())
        })
    }

    /// Runs `policy` (a policy's TOML) over the sessions `filter` picks, telling `progress`
    /// as it goes; the report.
    pub async fn trial(
        &self,
        _slot: TrialSlot,
        policy: &str,
        filter: &TrialFilter,
        progress: &tokio::sync::mpsc::Sender<TrialProgress>,
    ) -> Result<TrialReport, DaemonError> {
        let candidate = Policy::from_toml(policy)
            .map_err(|error| DaemonError::Invalid(format!("the policy to test: {error}")))?;
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let mut sessions: Vec<SessionRecord> =
            self.store.list_sessions().await?.into_iter().filter(|r| filter.picks(r)).collect();
        sessions.sort_by_key(|record| record.created_ms);
        let total = sessions.len() as u64;
        let mut trial = Trial::new(candidate.clone());
        let mut told = 0;
        let tell = |trial: &Trial, read: u64| TrialProgress {
            sessions: total,
            sessions_read: read,
            headline: trial.headline(),
        };
        for (index, record) in sessions.iter().enumerate() {
            let policy = match crate::ceiling::of_launch(&record.launch) {
                Ok(Some(ceiling)) => candidate.clone().under(Arc::new(ceiling)),
                Ok(None) => candidate.clone(),
                // A ceiling that no longer parses: its session is left out, not judged loose.
                Err(_) => continue,
            };
            let mut replay = Replay::new();
            let mut context = MatchContext { cwd: PathBuf::from(&record.cwd), home: home.clone() };
            let mut after = 0;
            loop {
                let page = self.store.events_after(&record.id, after, PAGE).await?;
                let Some(last) = page.last() else { break };
                after = last.seq;
                for stored in &page {
                    let Ok(event) = SessionEvent::from_stored(&stored.kind, &stored.payload) else {
                        continue;
                    };
                    let calls = replay.read(stored.seq, stored.ts_ms, &event);
                    if let Some(cwd) = replay.cwd() {
                        context.cwd = PathBuf::from(cwd);
                    }
                    for call in calls.iter().filter(|call| filter.counts(call)) {
                        trial.add_under(&policy, &record.id, call, &context);
                    }
                }
                if trial.headline().calls >= told + TELL_EVERY {
                    told = trial.headline().calls;
                    let _ = progress.send(tell(&trial, index as u64)).await;
                }
                if page.len() < PAGE {
                    break;
                }
            }
            for call in replay.finish().iter().filter(|call| filter.counts(call)) {
                trial.add_under(&policy, &record.id, call, &context);
            }
            trial.session_read();
            let _ = progress.send(tell(&trial, index as u64 + 1)).await;
        }
        Ok(trial.report())
    }
}
