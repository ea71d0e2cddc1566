//! After-store observers: what happens once a batch of a session's events is in the store.
//!
//! The pump stores and numbers a batch and projects it, then gives one [`Stored`] to each
//! observer the daemon registered when it opened (`Daemon::open`), in order: the notices, the
//! budgets, the usage windows, the relay's frontends, parked requests, a run's end (`schedules::RunEnds`), the metrics
//! (`measures::Measures`), the audit trail, the search index (`search::Indexing`), the traces (`traces::Tracing`), the record
//! writer; then it hands the batch to the session's
//! subscribers (the live tail), so that a budget the batch reached has paused the session
//! before anyone sees the turn end. An observer sees only what is stored, so the
//! store-before-seen invariant holds for it as for a subscriber. A new "once it is stored"
//! feature is an observer in its own part, registered where the daemon opens, not a branch in
//! the pump. This file is a leaf:
//! the trait and what it is told; each observer lives in its feature's part.

use std::future::Future;
use std::pin::Pin;

use super::*;

/// A turn of the main conversation that ended, as the projection read it, at `index` in its
/// batch.
pub(super) struct TurnEnd {
    pub(super) index: usize,
    pub(super) subtype: String,
    pub(super) interrupted: bool,
    pub(super) failed: bool,
    pub(super) result: Option<String>,
}

/// One stored batch of one session, as every observer sees it.
pub(super) struct Stored<'a> {
    /// The session.
    pub id: &'a str,
    pub live: &'a Arc<LiveSession>,
    /// Its events, and their records as stored (the same order).
    pub batch: &'a [SessionEvent],
    /// The last seq before the batch.
    pub before: u64,
    /// The main conversation's turns that ended in it, as the projection read them.
    pub turn_ends: &'a [TurnEnd],
    /// What its turns cost (the projection's steps of the reported totals), in US dollars.
    pub spent: f64,
    /// Whether the projection changed anything a session list shows.
    pub changed: bool,
    /// Whether the session's lines go to the relay's frontends.
    pub relayed: bool,
    /// What the metrics count of it, as the projection read it.
    pub measured: &'a crate::metrics::Measured,
    /// What the search index keeps of it, as the projection read it (the session's facts
    /// not in them yet: `search::Indexing` adds them).
    pub found: Vec<switchboard_store::SearchEntry>,
    /// The spans that ended in it, when traces are sent (`traces::Tracing` sends them).
    pub traced: Vec<crate::traces::tracer::Finished>,
}

/// What an observer still has to wait for (the relay, on its slowest frontend).
pub(super) type Waiting<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// Told of each stored batch. Most observers act at once and return `None`; one that must
/// wait returns what to wait on, and the pump waits before it takes the session's next batch.
pub(super) trait Observer: Send + Sync {
    /// Acts on `stored`.
    fn stored<'a>(&'a self, daemon: &'a Arc<Daemon>, stored: &'a Stored<'a>)
        -> Option<Waiting<'a>>;
}
