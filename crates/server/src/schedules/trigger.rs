//! A trigger: a webhook (`POST /hooks/{name}`) that starts its task with a prompt filled from
//! the payload ([`super::template`]), or sends feedback about a branch to the session that made
//! it ([`super::feedback`]). Its requests are signed with its own secret
//! ([`super::signature`]); a delivery seen before (its id, or the same signed body) runs once.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::template::Template;
use crate::create::CreateSession;

/// The delivery keys a trigger remembers, to run each delivery once (two a delivery: its id
/// and its body's digest).
pub const MAX_SEEN: usize = 2000;

/// A key as the book keeps it: 96 bits of its SHA-256, in hex (a delivery id may be long).
fn digest(key: &str) -> String {
    use sha2::Digest as _;
    hex::encode(&sha2::Sha256::digest(key.as_bytes())[..12])
}

/// The runs a trigger's state remembers.
pub const MAX_TRIGGER_RUNS: usize = 50;

/// The runs a trigger's queue holds while a usage window holds unattended work back.
pub const MAX_QUEUED: usize = 100;

/// The shortest secret taken.
pub const MIN_SECRET_CHARS: usize = 16;

/// A trigger, as `POST /api/triggers` takes it and the document keeps it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Trigger {
    /// Its name: its webhook is `/hooks/{name}`.
    pub name: String,
    /// The secret its requests are signed with (made when not given; shown once).
    #[serde(default)]
    pub secret: String,
    /// What a delivery starts: a create request whose `prompt` is a template. None: the
    /// trigger only routes feedback.
    #[serde(default)]
    pub task: Option<CreateSession>,
    /// Route GitHub feedback (a failed check, a review, a merge conflict) to the session that
    /// made the branch, when there is one.
    #[serde(default)]
    pub feedback: bool,
    /// The `X-GitHub-Event` values that start the task (none: any).
    #[serde(default)]
    pub events: Vec<String>,
    /// Runs pause when a usage window reaches this share (0 to 1).
    #[serde(default)]
    pub max_window_utilization: Option<f64>,
    /// Paused: deliveries are refused (409).
    #[serde(default)]
    pub paused: bool,
    /// Set by the daemon, as a schedule's.
    #[serde(default)]
    pub created_ms: u64,
    /// Who made it: its runs start as that token, under its ceiling.
    #[serde(default)]
    pub origin: Option<switchboard_store::Origin>,
    /// Who made it, as a turn's starter is recorded.
    #[serde(default)]
    pub created_by: String,
}

impl Trigger {
    /// Checks what a request gives.
    pub fn check(&self) -> Result<(), String> {
        super::check_name("trigger", &self.name)?;
        if crate::schedules::RESERVED_HOOKS.contains(&self.name.as_str()) {
            return Err(format!(
                "/hooks/{} is the daemon's own; name the trigger otherwise",
                self.name
            ));
        }
        if self.secret.chars().count() < MIN_SECRET_CHARS {
            return Err(format!("the secret is at least {MIN_SECRET_CHARS} characters"));
        }
        if self.task.is_none() && !self.feedback {
            return Err(
                "a trigger starts a task, routes feedback, or both: give task or feedback".into()
            );
        }
        if let Some(task) = &self.task {
            super::check_task(task)?;
            self.template()?;
        }
        if let Some(cap) = self.max_window_utilization {
            crate::create::check_window_cap(cap)?;
        }
        if self.events.len() > 32
            || self.events.iter().any(|event| super::check_name("event", event).is_err())
        {
            return Err("events are at most 32 GitHub event names (check_run, issues, ...)".into());
        }
        Ok(())
    }

    /// Its prompt template, read.
    pub fn template(&self) -> Result<Template, String> {
        let prompt = self.task.as_ref().and_then(|task| task.prompt.as_deref()).unwrap_or_default();
        Template::parse(prompt)
    }

    /// Whether a delivery of `event` (its `X-GitHub-Event`, if sent) starts the task.
    pub fn starts_on(&self, event: Option<&str>) -> bool {
        self.task.is_some()
            && (self.events.is_empty()
                || event.is_some_and(|event| self.events.iter().any(|e| e == event)))
    }

    /// The trigger as faces show it: without its secret.
    pub fn public(&self) -> Trigger {
        Trigger { secret: String::new(), ..self.clone() }
    }
}

/// What a trigger has seen and done.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TriggerState {
    /// The deliveries seen (their ids, and their signed bodies' digests), oldest first.
    pub seen: VecDeque<String>,
    /// What the last deliveries did, oldest first.
    pub runs: Vec<TriggerRun>,
    /// Runs that wait for a usage window, oldest first.
    pub queued: VecDeque<QueuedRun>,
    /// What holds them, as last seen.
    pub hold: Option<super::Hold>,
}

/// A trigger's run that waits: its filled prompt, its delivery.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueuedRun {
    /// The prompt its payload filled.
    pub prompt: String,
    /// Its delivery's id, if sent.
    pub delivery: Option<String>,
    /// When it came.
    pub at_ms: u64,
}

/// What one delivery did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TriggerRun {
    /// When it came.
    pub at_ms: u64,
    /// Its id (`X-GitHub-Delivery`), if sent.
    pub delivery: Option<String>,
    /// `started` (a session), `feedback` (sent to a session), `refused` (its payload did not fit).
    pub outcome: String,
    /// The session it started or reached.
    pub session: Option<String>,
    /// Why it was refused, or what was sent.
    pub detail: Option<String>,
}

impl TriggerState {
    /// Notes a delivery by its `keys` (any one seen before makes it a replay): whether it is
    /// new.
    pub fn first_time(&mut self, keys: &[String]) -> bool {
        let keys: Vec<String> = keys.iter().map(|key| digest(key)).collect();
        if keys.iter().any(|key| self.seen.contains(key)) {
            return false;
        }
        self.seen.extend(keys);
        while self.seen.len() > MAX_SEEN {
            self.seen.pop_front();
        }
        true
    }

    /// Forgets a delivery's `keys`: one that failed for a reason of the daemon's own (a limit,
    /// a shutdown) runs when it is delivered again.
    pub fn forget(&mut self, keys: &[String]) {
        let keys: Vec<String> = keys.iter().map(|key| digest(key)).collect();
        self.seen.retain(|seen| !keys.contains(seen));
    }

    /// Queues `run` behind `hold`: refused when the queue is full.
    pub fn queue(&mut self, run: QueuedRun, hold: super::Hold) -> Result<(), String> {
        if self.queued.len() >= MAX_QUEUED {
            return Err(format!(
                "{MAX_QUEUED} runs already wait for the usage window ({}); this one is refused",
                hold.why
            ));
        }
        self.queued.push_back(run);
        self.hold = Some(hold);
        Ok(())
    }

    /// Puts `run` back at the head of the queue (its start failed for the daemon's own reason).
    pub fn requeue(&mut self, run: QueuedRun) {
        self.queued.push_front(run);
    }

    /// The oldest queued run, taken from the queue.
    pub fn take_queued(&mut self) -> Option<QueuedRun> {
        let run = self.queued.pop_front();
        if self.queued.is_empty() {
            self.hold = None;
        }
        run
    }

    /// Notes what a delivery did.
    pub fn ran(&mut self, run: TriggerRun) {
        self.runs.push(run);
        let extra = self.runs.len().saturating_sub(MAX_TRIGGER_RUNS);
        self.runs.drain(..extra);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trigger() -> Trigger {
        let mut task = CreateSession::new("/tmp");
        task.prompt = Some("Fix issue #{{issue.number}}".into());
        Trigger {
            name: "issues".into(),
            secret: "0123456789abcdef".into(),
            task: Some(task),
            feedback: false,
            events: vec!["issues".into()],
            max_window_utilization: None,
            paused: false,
            created_ms: 0,
            origin: None,
            created_by: String::new(),
        }
    }

    #[test]
    fn a_trigger_is_checked_when_made() {
        assert!(trigger().check().is_ok());
        let mut bad = trigger();
        bad.secret = "short".into();
        assert!(bad.check().unwrap_err().contains("at least 16"));
        let mut bad = trigger();
        bad.name = "claude".into();
        assert!(bad.check().unwrap_err().contains("the daemon's own"));
        let mut bad = trigger();
        bad.task.as_mut().unwrap().prompt = Some("{{a b}}".into());
        assert!(bad.check().unwrap_err().contains("is not a field"));
        let mut bad = trigger();
        bad.task = None;
        assert!(bad.check().unwrap_err().contains("give task or feedback"));
        assert!(trigger().starts_on(Some("issues")));
        assert!(!trigger().starts_on(Some("push")));
        assert!(!trigger().starts_on(None));
        assert_eq!(trigger().public().secret, "");
    }

    #[test]
    fn a_delivery_runs_once_and_what_is_seen_is_bounded() {
        let mut state = TriggerState::default();
        assert!(state.first_time(&["id:1".into(), "body:aa".into()]));
        assert!(!state.first_time(&["id:1".into(), "body:bb".into()]), "the same id");
        assert!(!state.first_time(&["id:2".into(), "body:aa".into()]), "the same signed body");
        for n in 0..MAX_SEEN {
            state.first_time(&[format!("id:x{n}")]);
        }
        assert_eq!(state.seen.len(), MAX_SEEN);
    }
}
