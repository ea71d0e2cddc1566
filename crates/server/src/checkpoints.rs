//! Checkpoints of sessions' views, so that a page of a long session is projected from a
//! checkpoint near it, not from the log's start.
//!
//! A page of a session's view (`GET …/view`, `…/subscribe?view=true`, gRPC, MCP) needs the
//! projection of every event before it: which messages are streaming, which tool a result
//! answers. Replaying the log from its first event for every page made opening a
//! 100,000-event session a replay of all of it, and paging back through it quadratic. A
//! replay now keeps the projector as it stands at every [`EVERY`]th event, and a later replay
//! starts from the nearest one at or before where it must stop: at most [`EVERY`] events a
//! page, whatever the session's length, once the daemon has read the session and while its
//! checkpoints are kept (a session of more than [`MAX_KEPT`] × [`EVERY`] events cannot keep
//! all of them here; its early pages start from those stored beside the log).
//!
//! - **Bounded:** at most [`MAX_KEPT`] checkpoints, of about [`MAX_KEPT_BYTES`] in all, are
//!   held, the least recently used dropped first, so a daemon's memory stays flat however
//!   many sessions are paged through.
//! - **Checked before use:** a checkpoint remembers the time its event was stored; a replay
//!   from it reads that event again first, and a log that does not have it (the session was
//!   deleted and its id used again) is replayed from its start, and its checkpoints dropped.
//! - Held here in memory; stored beside the log too ([`crate::daemon`]'s `view_checkpoints`),
//!   so that a daemon's first read of a session starts from the stored checkpoint nearest it.

use parking_lot::Mutex;
use std::collections::HashMap;

use crate::view::Viewer;

/// A checkpoint is kept at every event whose seq is a multiple of this.
pub const EVERY: u64 = 2048;

/// The most checkpoints held at once, across sessions.
pub const MAX_KEPT: usize = 256;

/// The most bytes their projectors hold together, about ([`Viewer::approximate_bytes`]); a
/// projector larger than an eighth of this is not kept.
pub const MAX_KEPT_BYTES: usize = 32 * 1024 * 1024;

/// The most bytes one checkpoint's projector may hold, about ([`Viewer::approximate_bytes`]):
/// a larger one is neither kept nor stored.
pub const MAX_VIEWER_BYTES: usize = MAX_KEPT_BYTES / 8;

/// Whether event `seq` is a checkpoint's place: every [`EVERY`]th.
pub fn is_place(seq: u64) -> bool {
    seq != 0 && seq.is_multiple_of(EVERY)
}

/// One session's projector at one event.
struct Checkpoint {
    /// The event it stands after.
    seq: u64,
    viewer: Viewer,
    /// Its [`Viewer::approximate_bytes`].
    bytes: usize,
    /// When the event was stored: a replay from here reads the event again and compares.
    ts_ms: u64,
    /// For the least recently used.
    used: u64,
}

/// The daemon's view checkpoints.
#[derive(Default)]
pub struct Checkpoints {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    kept: HashMap<(String, u64), Checkpoint>,
    bytes: usize,
    clock: u64,
}

impl std::fmt::Debug for Checkpoints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kept = self.inner.lock().kept.len();
        f.debug_struct("Checkpoints").field("kept", &kept).finish()
    }
}

/// Where a replay starts: the projector there, the checkpoint's seq and its event's time.
#[derive(Debug)]
pub struct Start {
    /// The projector after event `seq`.
    pub viewer: Viewer,
    /// The checkpoint's event.
    pub seq: u64,
    /// When that event was stored.
    pub ts_ms: u64,
}

impl Checkpoints {
    /// The latest checkpoint of session `id` at or before event `at`.
    pub fn nearest(&self, id: &str, at: u64) -> Option<Start> {
        let mut inner = self.inner.lock();
        let Inner { kept, clock, .. } = &mut *inner;
        // At most [`MAX_KEPT`] to look through (`at` may be far past any event: a subscription
        // from the end of the numbers).
        let (_, checkpoint) = kept
            .iter_mut()
            .filter(|((session, seq), _)| session == id && *seq <= at)
            .max_by_key(|((_, seq), _)| *seq)?;
        *clock += 1;
        checkpoint.used = *clock;
        Some(Start {
            viewer: checkpoint.viewer.clone(),
            seq: checkpoint.seq,
            ts_ms: checkpoint.ts_ms,
        })
    }

    /// Keeps `viewer` as session `id` stands after event `seq` (stored at `ts_ms`), if `seq` is
    /// a checkpoint's place ([`is_place`]) and none is kept there; whether it was kept now.
    pub fn keep(&self, id: &str, seq: u64, ts_ms: u64, viewer: &Viewer) -> bool {
        if !is_place(seq) {
            return false;
        }
        let bytes = viewer.approximate_bytes();
        if bytes > MAX_VIEWER_BYTES {
            return false;
        }
        let mut inner = self.inner.lock();
        let Inner { kept, bytes: held, clock } = &mut *inner;
        let key = (id.to_owned(), seq);
        if kept.contains_key(&key) {
            return false;
        }
        while !kept.is_empty() && (kept.len() >= MAX_KEPT || *held + bytes > MAX_KEPT_BYTES) {
            let oldest = kept
                .iter()
                .min_by_key(|(_, checkpoint)| checkpoint.used)
                .map(|(key, _)| key.clone());
            if let Some(dropped) = oldest.and_then(|oldest| kept.remove(&oldest)) {
                *held -= dropped.bytes;
            }
        }
        *clock += 1;
        *held += bytes;
        kept.insert(key, Checkpoint { seq, viewer: viewer.clone(), bytes, ts_ms, used: *clock });
        true
    }

    /// Drops session `id`'s checkpoints (its log is not the one they were taken from).
    pub fn forget(&self, id: &str) {
        let mut inner = self.inner.lock();
        let Inner { kept, bytes, .. } = &mut *inner;
        kept.retain(|(session, _), checkpoint| {
            let keep = session != id;
            if !keep {
                *bytes -= checkpoint.bytes;
            }
            keep
        });
    }

    /// How many checkpoints are held.
    pub fn len(&self) -> usize {
        self.inner.lock().kept.len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nearest_checkpoint_at_or_before_a_place_is_found() {
        let checkpoints = Checkpoints::default();
        let viewer = Viewer::new();
        checkpoints.keep("s", 100, 1, &viewer); // not a checkpoint's place
        assert!(checkpoints.is_empty());
        checkpoints.keep("s", EVERY, 10, &viewer);
        checkpoints.keep("s", 3 * EVERY, 30, &viewer);
        assert!(checkpoints.nearest("s", EVERY - 1).is_none());
        assert_eq!(checkpoints.nearest("s", EVERY).map(|start| start.seq), Some(EVERY));
        let start = checkpoints.nearest("s", 3 * EVERY - 1).unwrap();
        assert_eq!((start.seq, start.ts_ms), (EVERY, 10));
        assert_eq!(checkpoints.nearest("s", 10 * EVERY).map(|start| start.seq), Some(3 * EVERY));
        assert!(checkpoints.nearest("other", 10 * EVERY).is_none());
        // From the end of the numbers, at once.
        assert_eq!(checkpoints.nearest("s", u64::MAX).map(|start| start.seq), Some(3 * EVERY));
        checkpoints.forget("s");
        assert!(checkpoints.is_empty());
    }

    #[test]
    fn at_most_so_many_are_kept_the_least_recently_used_dropped() {
        let checkpoints = Checkpoints::default();
        let viewer = Viewer::new();
        for n in 1..=MAX_KEPT as u64 {
            checkpoints.keep("s", n * EVERY, n, &viewer);
        }
        // The first is used again: the second is now the least recently used.
        assert!(checkpoints.nearest("s", EVERY).is_some());
        checkpoints.keep("t", EVERY, 1, &viewer);
        assert_eq!(checkpoints.len(), MAX_KEPT);
        assert_eq!(checkpoints.nearest("s", 2 * EVERY).map(|start| start.seq), Some(EVERY));
        assert_eq!(checkpoints.nearest("s", EVERY).map(|start| start.seq), Some(EVERY));
        assert!(checkpoints.nearest("t", EVERY).is_some());
    }
}
