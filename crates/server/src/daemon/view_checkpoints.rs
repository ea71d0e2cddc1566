//! A session's view projected from its stored events ([`Daemon::viewer_at`],
//! [`Daemon::replay_view`]: what every face's pages, subscriptions and digests read), and the
//! checkpoints of sessions' views kept beside their logs, so that a daemon that has never
//! read a long session (it just started) projects a page of it from a checkpoint near the
//! page, not from the log's first event. The same places as the checkpoints held in memory
//! ([`crate::checkpoints`]: every 2,048th event); the projector's state as
//! [`Viewer::to_state`](crate::view::Viewer::to_state) writes it.
//!
//! - **Read:** a page that memory has no checkpoint near (none within 2,048 events of it)
//!   asks the store for its nearest, and holds it in memory from then on. Its event is read
//!   again first, as for one in memory: one of another log is passed by, the page replayed
//!   from the log's start (and its places written again). A state is stored in
//!   [`crate::view::STATE_FORMAT`], the fingerprint of the projection's source: one a build of
//!   other source stored is never read (a fix to the projection leaves none of the old one's
//!   states in use), and its place is written again as a read or a catch-up passes it.
//! - **Written** by two background tasks, never on a line's path:
//!   - a read that passes a place memory had no checkpoint at hands it to a writer (at most
//!     [`MAX_WAITING`] wait; past that, the session is left to a catch-up); a place already
//!     stored the same is left as it is;
//!   - a **catch-up** brings a session's stored checkpoints up to its log, one session at a
//!     time, a hundred events a read: each session of this node with 2,048 events or more
//!     since its last stored checkpoint at start (a log an older version stored, or a run the
//!     daemon was killed in), and each session whose run ends here (a relay CLI's rotation
//!     ends one).
//! - Both end with the daemon's serving: once it stops, nothing more is written (its store
//!   closes after it); what was not written is caught up at the next start.
//! - A live session's checkpoints past its run's start are written when its run ends (or a
//!   read passes them): a session read while it runs projects from the last one stored.
//! - Not stored: a projector larger than [`MAX_VIEWER_BYTES`] (its places are projected from
//!   the one before); a state of the right format that cannot be read back is passed by at
//!   every read (only a damaged database holds one).

use std::collections::HashSet;

use super::*;
use crate::checkpoints::{Start, EVERY, MAX_VIEWER_BYTES};
use crate::view::Viewer;

/// The most events one page of a session's log holds (`GET …/events`, a replay's page).
pub const MAX_EVENTS_PAGE: usize = 5000;

/// Events a catch-up ([`Keeping::CatchUp`]) reads from the log at once: few, as it runs beside
/// everything else and an event may be large (an image).
const CATCH_UP_PAGE: usize = 100;

/// How a projection keeps the checkpoints it passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Keeping {
    /// A read: in memory, and stored in the background (dropped if the writer is behind).
    Read,
    /// Bringing the stored checkpoints up to the log, in the background: each stored before
    /// the projection goes on, none in memory; the log read a few events at a time.
    CatchUp,
}

/// Checkpoints of reads waiting for the writer at most (each a copy of a projector).
const MAX_WAITING: usize = 8;

/// The largest stored state read back (a larger one is no checkpoint to a reader).
const MAX_STATE_BYTES: usize = 2 * MAX_VIEWER_BYTES;

/// A read's checkpoint for the writer.
pub(super) struct Later {
    id: String,
    seq: u64,
    ts_ms: u64,
    viewer: Viewer,
}

/// The stored checkpoints' queues and state (one a daemon).
pub(super) struct StoredCheckpoints {
    later: mpsc::Sender<Later>,
    catch_up: mpsc::UnboundedSender<String>,
    /// Sessions whose catch-up is queued and has not begun.
    queued: Mutex<HashSet<String>>,
    /// Reads' checkpoints waiting for the writer or being written, catch-ups queued or under
    /// way, and one while the scan at start goes on: 0 is settled.
    busy: watch::Sender<usize>,
}

/// The receiving ends, for the tasks [`StoredCheckpoints::start`] spawns.
pub(super) struct Receivers {
    later: mpsc::Receiver<Later>,
    catch_up: mpsc::UnboundedReceiver<String>,
}

impl StoredCheckpoints {
    pub(super) fn new() -> (StoredCheckpoints, Receivers) {
        let (later, later_rx) = mpsc::channel(MAX_WAITING);
        let (catch_up, catch_up_rx) = mpsc::unbounded_channel();
        let stored = StoredCheckpoints {
            later,
            catch_up,
            queued: Mutex::default(),
            // The scan at start has not run.
            busy: watch::channel(1).0,
        };
        (stored, Receivers { later: later_rx, catch_up: catch_up_rx })
    }

    /// Spawns the writer, the catch-up and the scan at start.
    pub(super) fn start(daemon: &Arc<Daemon>, receivers: Receivers) {
        tokio::spawn(write_later(Arc::downgrade(daemon), receivers.later));
        tokio::spawn(catch_up(Arc::downgrade(daemon), receivers.catch_up));
        tokio::spawn(scan_at_start(Arc::downgrade(daemon)));
    }
}

/// Session `id`'s run ended here with its log at `last`: its stored checkpoints are brought up
/// to it, if a place has passed.
pub(super) fn run_ended(daemon: &Daemon, id: &str, last: u64) {
    if last >= EVERY {
        daemon.catch_up_view_checkpoints(id);
    }
}

impl Daemon {
    /// A viewer that has projected session `id`'s events up to `after`, silently: the state
    /// they leave, for updates from there on. It starts from the nearest checkpoint of the
    /// session's view at or before `after` (in memory, [`crate::checkpoints`], or stored beside
    /// the log), so a page of a long session costs the events since that checkpoint, not the
    /// whole log before it; it keeps the checkpoints it passes as `keeping` says.
    pub(crate) async fn viewer_at(
        &self,
        id: &str,
        after: u64,
        keeping: Keeping,
    ) -> Result<Viewer, DaemonError> {
        let start = self.nearest_view_checkpoint(id, after, keeping).await;
        self.viewer_from(id, after, keeping, start).await
    }

    /// [`Daemon::viewer_at`] from `start` (a checkpoint at or before `after`), or from the
    /// log's start.
    async fn viewer_from(
        &self,
        id: &str,
        after: u64,
        keeping: Keeping,
        start: Option<Start>,
    ) -> Result<Viewer, DaemonError> {
        if let Some(start) = start {
            // The checkpoint's own event is read again, to see that this log is the one it was
            // taken from (a log without it, or with another event there, is not).
            let mut viewer = Some(start.viewer);
            let mut confirmed = false;
            let resumed = self
                .project(id, start.seq - 1, after, &mut viewer, keeping, &mut |record, viewer| {
                    if record.seq == start.seq {
                        confirmed = record.ts_ms == start.ts_ms;
                    }
                    if !confirmed {
                        // Not the log it was taken from, or the checkpoint's event is missing.
                        *viewer = None;
                    }
                    record.seq != start.seq
                })
                .await?;
            if let (Some(viewer), true) = (resumed, confirmed) {
                return Ok(viewer);
            }
            self.view_checkpoints.forget(id);
        }
        let mut viewer = Some(Viewer::new());
        let projected = self.project(id, 0, after, &mut viewer, keeping, &mut |_, _| true).await?;
        Ok(projected.unwrap_or_default())
    }

    /// Projects session `id`'s events up to `after` from its start, page by page, each update
    /// to `visit`; keeps checkpoints of the view on the way.
    pub(crate) async fn replay_view(
        &self,
        id: &str,
        after: u64,
        visit: &mut impl FnMut(&EventRecord, crate::view::ViewUpdate),
    ) -> Result<Viewer, DaemonError> {
        self.replay_view_from(id, 0, Viewer::new(), after, visit).await
    }

    /// [`Daemon::replay_view`] from `viewer`, the view after event `from`: the events after
    /// it up to `after`.
    pub(crate) async fn replay_view_from(
        &self,
        id: &str,
        from: u64,
        viewer: Viewer,
        after: u64,
        visit: &mut impl FnMut(&EventRecord, crate::view::ViewUpdate),
    ) -> Result<Viewer, DaemonError> {
        let mut viewer = Some(viewer);
        let projected = self
            .project(id, from, after, &mut viewer, Keeping::Read, &mut |record, viewer| {
                if let Some(viewer) = viewer {
                    viewer.apply(record, &mut |update| visit(record, update));
                }
                false
            })
            .await?;
        Ok(projected.unwrap_or_default())
    }

    /// Reads session `id`'s events after `from` up to `after`, page by page; each goes to
    /// `each` first (which projects it itself and answers false, or answers true for it to be
    /// applied silently, or drops the viewer to stop), and the view is kept at each
    /// checkpoint's place as `keeping` says.
    async fn project(
        &self,
        id: &str,
        from: u64,
        after: u64,
        viewer: &mut Option<Viewer>,
        keeping: Keeping,
        each: &mut impl FnMut(&EventRecord, &mut Option<Viewer>) -> bool,
    ) -> Result<Option<Viewer>, DaemonError> {
        let page_size = match keeping {
            Keeping::Read => MAX_EVENTS_PAGE,
            Keeping::CatchUp => CATCH_UP_PAGE,
        };
        let mut position = from;
        while position < after {
            // A catch-up ends with the daemon's serving (its store closes after it).
            if keeping == Keeping::CatchUp {
                self.check_serving()?;
            }
            let want = usize::try_from(after - position).unwrap_or(usize::MAX).min(page_size);
            let page = self.store.events_after(id, position, want).await?;
            let Some(last) = page.last() else { break };
            for record in page.iter().filter(|record| record.seq <= after) {
                if each(record, viewer) {
                    if let Some(viewer) = viewer.as_mut() {
                        viewer.apply(record, &mut |_| {});
                    }
                }
                let Some(viewer) = viewer.as_ref() else { return Ok(None) };
                if !crate::checkpoints::is_place(record.seq) {
                    continue;
                }
                match keeping {
                    Keeping::Read => {
                        if self.view_checkpoints.keep(id, record.seq, record.ts_ms, viewer) {
                            self.store_view_checkpoint_later(id, record.seq, record.ts_ms, viewer);
                        }
                    }
                    Keeping::CatchUp => {
                        self.store_view_checkpoint(id, record.seq, record.ts_ms, viewer).await?
                    }
                }
            }
            position = last.seq;
        }
        Ok(viewer.take())
    }

    /// The nearest checkpoint of session `id`'s view at or before event `at`: memory's (not
    /// for a catch-up), or the store's when memory has none within [`EVERY`] events of `at`.
    async fn nearest_view_checkpoint(&self, id: &str, at: u64, keeping: Keeping) -> Option<Start> {
        let memory = match keeping {
            Keeping::Read => self.view_checkpoints.nearest(id, at),
            Keeping::CatchUp => None,
        };
        // None can be nearer than memory's, or than the log's start.
        let nearest_possible = at - at % EVERY;
        if nearest_possible == 0 || memory.as_ref().is_some_and(|m| m.seq == nearest_possible) {
            return memory;
        }
        let kept = self.store.view_checkpoints()?;
        let stored = match kept.view_checkpoint(id, at, crate::view::STATE_FORMAT).await {
            Ok(Some(stored)) => stored,
            Ok(None) => return memory,
            Err(error) => {
                tracing::warn!(session = %id, %error, "cannot read a stored checkpoint of a session's view; it is projected from its log");
                return memory;
            }
        };
        if memory.as_ref().is_some_and(|m| m.seq >= stored.seq) {
            return memory;
        }
        self.read_stored(id, stored, at, keeping).await.or(memory)
    }

    /// The start a stored checkpoint gives a projection up to `at` (held in memory too for a
    /// read): none for one out of place, too large, or that cannot be read back.
    async fn read_stored(
        &self,
        id: &str,
        stored: switchboard_store::ViewCheckpoint,
        at: u64,
        keeping: Keeping,
    ) -> Option<Start> {
        if !crate::checkpoints::is_place(stored.seq)
            || stored.seq > at
            || stored.state.len() > MAX_STATE_BYTES
        {
            return None;
        }
        let state = stored.state;
        let viewer =
            tokio::task::spawn_blocking(move || Viewer::from_state(&state)).await.ok().flatten();
        let Some(viewer) = viewer else {
            tracing::debug!(session = %id, seq = stored.seq, "a stored checkpoint that cannot be read back is passed by");
            return None;
        };
        if keeping == Keeping::Read {
            self.view_checkpoints.keep(id, stored.seq, stored.ts_ms, &viewer);
        }
        Some(Start { viewer, seq: stored.seq, ts_ms: stored.ts_ms })
    }

    /// Stores `viewer` as session `id`'s view after event `seq` (stored at `ts_ms`) in the
    /// background, unless [`MAX_WAITING`] wait.
    fn store_view_checkpoint_later(&self, id: &str, seq: u64, ts_ms: u64, viewer: &Viewer) {
        if self.store.view_checkpoints().is_none() {
            return;
        }
        let Ok(room) = self.stored_checkpoints.later.try_reserve() else {
            // Left to a catch-up (queued once, whatever the number left).
            tracing::debug!(session = %id, seq, "the checkpoint writer is behind; a read's checkpoint is left to a catch-up");
            self.catch_up_view_checkpoints(id);
            return;
        };
        self.stored_checkpoints.busy.send_modify(|busy| *busy += 1);
        room.send(Later { id: id.to_owned(), seq, ts_ms, viewer: viewer.clone() });
    }

    /// Stores `viewer` as session `id`'s view after event `seq` (stored at `ts_ms`) now; one
    /// too large is not stored.
    async fn store_view_checkpoint(
        &self,
        id: &str,
        seq: u64,
        ts_ms: u64,
        viewer: &Viewer,
    ) -> Result<(), DaemonError> {
        let Some(kept) = self.store.view_checkpoints() else { return Ok(()) };
        if viewer.approximate_bytes() > MAX_VIEWER_BYTES {
            return Ok(());
        }
        // Written off the runtime's threads (a state may be megabytes).
        let viewer = viewer.clone();
        let state = tokio::task::spawn_blocking(move || viewer.to_state())
            .await
            .map_err(|error| DaemonError::Internal(format!("a checkpoint's state: {error}")))?;
        if state.is_empty() || state.len() > MAX_STATE_BYTES {
            return Ok(());
        }
        let format = crate::view::STATE_FORMAT.to_owned();
        let checkpoint = switchboard_store::ViewCheckpoint { seq, ts_ms, format, state };
        Ok(kept.put_view_checkpoint(id, &checkpoint).await?)
    }

    /// Queues session `id` for a catch-up (once until it begins).
    fn catch_up_view_checkpoints(&self, id: &str) {
        if self.store.view_checkpoints().is_none() {
            return;
        }
        let mut queued = self.stored_checkpoints.queued.lock();
        if !queued.insert(id.to_owned()) {
            return;
        }
        self.stored_checkpoints.busy.send_modify(|busy| *busy += 1);
        if self.stored_checkpoints.catch_up.send(id.to_owned()).is_err() {
            queued.remove(id);
            self.stored_checkpoints.busy.send_modify(|busy| *busy -= 1);
        }
    }

    /// Returns once nothing waits to be stored: no read's checkpoint waits for the writer, no
    /// catch-up is queued or under way, and the scan at start is done.
    pub async fn view_checkpoints_settled(&self) {
        let mut busy = self.stored_checkpoints.busy.subscribe();
        let _ = busy.wait_for(|busy| *busy == 0).await;
    }
}

/// The writer of reads' checkpoints.
async fn write_later(daemon: std::sync::Weak<Daemon>, mut later: mpsc::Receiver<Later>) {
    while let Some(Later { id, seq, ts_ms, viewer }) = later.recv().await {
        let Some(daemon) = daemon.upgrade() else { return };
        // A daemon that stops writes no more (its store closes after it).
        if daemon.check_serving().is_ok() {
            if let Err(error) = daemon.store_view_checkpoint(&id, seq, ts_ms, &viewer).await {
                tracing::warn!(session = %id, %error, "cannot store a checkpoint of a session's view");
            }
        }
        daemon.stored_checkpoints.busy.send_modify(|busy| *busy -= 1);
    }
}

/// The catch-ups, one session at a time.
async fn catch_up(daemon: std::sync::Weak<Daemon>, mut queue: mpsc::UnboundedReceiver<String>) {
    while let Some(id) = queue.recv().await {
        let Some(me) = daemon.upgrade() else { return };
        me.stored_checkpoints.queued.lock().remove(&id);
        match catch_up_session(&me, &id).await {
            Ok(()) | Err(DaemonError::ShuttingDown) => {}
            Err(error) => {
                tracing::warn!(session = %id, %error, "cannot bring a session's stored view checkpoints up to its log")
            }
        }
        me.stored_checkpoints.busy.send_modify(|busy| *busy -= 1);
    }
}

/// Brings session `id`'s stored checkpoints up to its log: from its last stored checkpoint,
/// if a place has passed since.
async fn catch_up_session(daemon: &Daemon, id: &str) -> Result<(), DaemonError> {
    daemon.check_serving()?;
    let last = daemon.store.last_seq(id).await?;
    let Some(kept) = daemon.store.view_checkpoints() else { return Ok(()) };
    let stored = kept.view_checkpoint(id, last, crate::view::STATE_FORMAT).await?;
    if last < stored.as_ref().map_or(0, |stored| stored.seq) + EVERY {
        return Ok(());
    }
    // Goes on from the checkpoint just read (not read again).
    let start = match stored {
        Some(stored) => daemon.read_stored(id, stored, last, Keeping::CatchUp).await,
        None => None,
    };
    daemon.viewer_from(id, last, Keeping::CatchUp, start).await?;
    Ok(())
}

/// At start: queues each session of this node whose log has passed a place since its last
/// stored checkpoint.
async fn scan_at_start(daemon: std::sync::Weak<Daemon>) {
    let Some(me) = daemon.upgrade() else { return };
    let _settle = Settle(daemon.clone());
    let Some(kept) = me.store.view_checkpoints() else { return };
    let (marks, sessions) = match (
        kept.view_checkpoint_marks(crate::view::STATE_FORMAT).await,
        me.store.list_sessions().await,
    ) {
        (Ok(marks), Ok(sessions)) => (marks, sessions),
        (Err(error), _) | (_, Err(error)) => {
            tracing::warn!(%error, "the stored checkpoints of sessions' views cannot be brought up to their logs");
            return;
        }
    };
    for record in sessions {
        if record.node.is_some() && record.node != me.config.node {
            continue;
        }
        let last = match me.store.last_seq(&record.id).await {
            Ok(last) => last,
            Err(error) => {
                tracing::warn!(session = %record.id, %error, "cannot read a session's last event");
                continue;
            }
        };
        if last >= marks.get(&record.id).copied().unwrap_or(0) + EVERY {
            me.catch_up_view_checkpoints(&record.id);
        }
    }
}

/// Counts the scan at start as done when dropped (done, or failed).
struct Settle(std::sync::Weak<Daemon>);

impl Drop for Settle {
    fn drop(&mut self) {
        if let Some(daemon) = self.0.upgrade() {
            daemon.stored_checkpoints.busy.send_modify(|busy| *busy -= 1);
        }
    }
}
