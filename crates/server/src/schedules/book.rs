//! The book of schedules and triggers: their definitions and state, one shared document
//! (`schedules`), changed only by compare and set ([`crate::shared::SharedDoc`]). On a daemon of
//! its own it is `schedules.json` in the data directory ([`crate::shared::FileDocuments`]); on a
//! database several daemons share, a row of it, read again every second for other nodes'
//! changes. A run claimed through it is claimed on every node.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use switchboard_store::Documents;

use super::trigger::QueuedRun;
use super::trigger::{Trigger, TriggerState};
use super::{Hold, Schedule, ScheduleState, MAX_SCHEDULES, MAX_TRIGGERS, QUEUE_BOOK_BYTES};
use crate::shared::SharedDoc;

/// Every schedule and trigger, with their state.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Book {
    /// The schedules, by name.
    pub schedules: BTreeMap<String, ScheduleEntry>,
    /// The triggers, by name.
    pub triggers: BTreeMap<String, TriggerEntry>,
}

/// A schedule and its state.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ScheduleEntry {
    /// What it is.
    pub schedule: Schedule,
    /// What it did and does.
    #[serde(default)]
    pub state: ScheduleState,
}

/// A trigger and its state.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TriggerEntry {
    /// What it is.
    pub trigger: Trigger,
    /// What it saw and did.
    #[serde(default)]
    pub state: TriggerState,
}

/// The shared book.
#[derive(Debug, Clone)]
pub struct Books {
    doc: Arc<SharedDoc<Book>>,
}

impl Books {
    /// The book in `store` (the fleet's documents, or this daemon's files), followed for other
    /// nodes' changes when `follow`.
    pub async fn open(store: Arc<dyn Documents>, follow: bool) -> Result<Books, String> {
        let doc = SharedDoc::open(store, "schedules", || Ok(Book::default())).await?;
        if follow {
            doc.follow();
        }
        Ok(Books { doc })
    }

    /// The book as last read or written here.
    pub fn get(&self) -> Book {
        self.doc.get()
    }

    /// Told when the book changes.
    pub fn watch(&self) -> tokio::sync::watch::Receiver<(Book, u64)> {
        self.doc.watch()
    }

    /// Adds `schedule` (checked against `now_ms`, the daemon's clock): refused if its name is
    /// taken or the book is full.
    pub async fn add_schedule(&self, schedule: Schedule, now_ms: u64) -> Result<(), String> {
        schedule.check(now_ms)?;
        self.doc
            .update(|book| {
                if book.schedules.contains_key(&schedule.name) {
                    return Err(format!(
                        "a schedule named {} exists; remove it first",
                        schedule.name
                    ));
                }
                if book.schedules.len() >= MAX_SCHEDULES {
                    return Err(format!("at most {MAX_SCHEDULES} schedules; remove one first"));
                }
                let entry =
                    ScheduleEntry { schedule: schedule.clone(), state: ScheduleState::default() };
                book.schedules.insert(schedule.name.clone(), entry);
                Ok(())
            })
            .await
    }

    /// Removes schedule `name`; whether it was there.
    pub async fn remove_schedule(&self, name: &str) -> Result<bool, String> {
        self.doc.update(|book| Ok(book.schedules.remove(name).is_some())).await
    }

    /// Changes schedule `name` (its definition or state) with `change`; `Ok(None)` when there is
    /// no such schedule.
    pub async fn change_schedule<R>(
        &self,
        name: &str,
        mut change: impl FnMut(&mut ScheduleEntry) -> Result<R, String>,
    ) -> Result<Option<R>, String> {
        self.doc
            .update(|book| match book.schedules.get_mut(name) {
                Some(entry) => change(entry).map(Some),
                None => Ok(None),
            })
            .await
    }

    /// Adds `trigger` (checked): refused if its name is taken or the book is full.
    pub async fn add_trigger(&self, trigger: Trigger) -> Result<(), String> {
        trigger.check()?;
        self.doc
            .update(|book| {
                if book.triggers.contains_key(&trigger.name) {
                    return Err(format!(
                        "a trigger named {} exists; remove it first",
                        trigger.name
                    ));
                }
                if book.triggers.len() >= MAX_TRIGGERS {
                    return Err(format!("at most {MAX_TRIGGERS} triggers; remove one first"));
                }
                let entry =
                    TriggerEntry { trigger: trigger.clone(), state: TriggerState::default() };
                book.triggers.insert(trigger.name.clone(), entry);
                Ok(())
            })
            .await
    }

    /// Queues trigger `name`'s `run` behind `hold`: refused when its queue is full, or when the
    /// book would pass [`QUEUE_BOOK_BYTES`] with it (the schedules keep their room); `Ok(false)`
    /// when there is no such trigger.
    pub async fn queue_trigger_run(
        &self,
        name: &str,
        run: &QueuedRun,
        hold: &Hold,
    ) -> Result<bool, String> {
        self.doc
            .update(|book| {
                let size = serde_json::to_vec(&*book).map_or(usize::MAX, |text| text.len());
                if size.saturating_add(run.prompt.len()) > QUEUE_BOOK_BYTES {
                    return Err(format!("the queue is full ({}); this run is refused", hold.why));
                }
                match book.triggers.get_mut(name) {
                    Some(entry) => entry.state.queue(run.clone(), hold.clone()).map(|()| true),
                    None => Ok(false),
                }
            })
            .await
    }

    /// Removes trigger `name`; whether it was there.
    pub async fn remove_trigger(&self, name: &str) -> Result<bool, String> {
        self.doc.update(|book| Ok(book.triggers.remove(name).is_some())).await
    }

    /// Changes trigger `name` with `change`; `Ok(None)` when there is no such trigger.
    pub async fn change_trigger<R>(
        &self,
        name: &str,
        mut change: impl FnMut(&mut TriggerEntry) -> Result<R, String>,
    ) -> Result<Option<R>, String> {
        self.doc
            .update(|book| match book.triggers.get_mut(name) {
                Some(entry) => change(entry).map(Some),
                None => Ok(None),
            })
            .await
    }
}
