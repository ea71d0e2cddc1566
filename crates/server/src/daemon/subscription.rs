//! Following a session ([`Subscription`]): its history from the store, then the live tail,
//! every event once and in order however the subscriber joins or falls behind.
//!
//! A `Subscription` is a cancel-safe state machine polled in the caller's task: it attaches to
//! the tail first, reads the store after `after`, then takes the tail, skipping what it
//! already gave; a gap or a lag sends it back to the store. A session that runs on another
//! node of a fleet is followed through `Bus::tail` instead of the local tail, with the same
//! promise.

use super::*;

/// One item of a subscription.
#[derive(Debug, Clone)]
pub enum Subscribed {
    /// The next event.
    Event(Arc<EventRecord>),
    /// The subscriber fell behind the live buffer; it continues from the store (the next
    /// events follow without a gap).
    Lagged,
    /// The session's events cannot be stored now (the reason); the daemon retries and holds
    /// the CLI back. No event is lost or skipped meanwhile.
    StoreFailing(String),
    /// The store takes the session's events again.
    StoreRecovered,
}

/// What a subscription follows of a running session.
pub(super) struct Attached {
    pub(super) tail: broadcast::Receiver<Arc<EventRecord>>,
    pub(super) finished: watch::Receiver<bool>,
    pub(super) store_error: watch::Receiver<Option<String>>,
    /// A session followed on the bus: kept while the subscription follows it.
    pub(super) _remote: Option<Arc<crate::bus::RemoteTail>>,
}

/// A subscription to one session's events: history from the store, then the live tail.
///
/// It attaches to the tail before reading history, so nothing published from then on is
/// missed, and skips on the tail what history already gave. A gap on the tail (an event
/// published between attaching and reading) or a lag sends it back to the store. When the
/// session ends it reads the last events from the store and waits for a resume.
/// [`Subscription::next`] is cancel-safe: all progress lives in the struct.
pub struct Subscription {
    pub(super) daemon: Arc<Daemon>,
    pub(super) id: String,
    /// The last seq handed out.
    pub(super) sent: u64,
    /// The live tail, the session's end signal and its store state, while it runs.
    pub(super) tail: Option<Attached>,
    /// A page of history being handed out.
    pub(super) backlog: std::collections::VecDeque<Arc<EventRecord>>,
    /// Read the store before taking from the tail again.
    pub(super) need_history: bool,
    /// The session was purged; nothing more will come.
    pub(super) done: bool,
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription").finish_non_exhaustive()
    }
}

impl Subscription {
    /// The seq of the last event handed out (or the `after` it started from).
    pub fn position(&self) -> u64 {
        self.sent
    }

    /// The next item; `None` when the session no longer exists.
    pub async fn next(&mut self) -> Option<Result<Subscribed, DaemonError>> {
        loop {
            if self.done {
                return None;
            }
            if let Some(event) = self.backlog.pop_front() {
                self.sent = event.seq;
                return Some(Ok(Subscribed::Event(event)));
            }
            if self.need_history {
                if self.tail.is_none() {
                    self.tail = self.daemon.attach(&self.id);
                }
                // Fell a whole buffer behind the live tail while reading (or not reading):
                // say so, and jump the tail to now; the store has everything in between.
                if let Some(attached) = self.tail.as_mut() {
                    if attached.tail.len() >= LIVE_BUFFER {
                        attached.tail = attached.tail.resubscribe();
                        self.daemon.metrics.lagged();
                        return Some(Ok(Subscribed::Lagged));
                    }
                }
                let page =
                    match self.daemon.store.events_after(&self.id, self.sent, HISTORY_PAGE).await {
                        Ok(page) => page,
                        Err(error) => return Some(Err(error.into())),
                    };
                if !page.is_empty() {
                    // A large event read by many subscribers at once is held once.
                    let watchers = &self.daemon.watchers;
                    self.backlog.extend(page.into_iter().map(|event| watchers.share(event)));
                    continue;
                }
                self.need_history = false;
            }
            let Some(Attached { tail, finished, store_error, .. }) = self.tail.as_mut() else {
                // Not running: wait for a resume (armed before looking, so none is missed).
                let started = self.daemon.started.notified();
                tokio::pin!(started);
                started.as_mut().enable();
                if let Some(attached) = self.daemon.attach(&self.id) {
                    self.tail = Some(attached);
                    self.need_history = true;
                    continue;
                }
                match self.daemon.store.get_session(&self.id).await {
                    Ok(Some(_)) => {}
                    Ok(None) => {
                        self.done = true;
                        return Some(Err(DaemonError::NotFound(self.id.clone())));
                    }
                    Err(error) => return Some(Err(error.into())),
                }
                // With a bus, whatever node runs the session (this one included) publishes
                // what it stores: follow that, then read the store once more for the seam.
                if let Some(bus) = &self.daemon.config.bus {
                    match bus.tail(self.daemon.store.clone(), &self.id).await {
                        Ok((tail, remote)) => {
                            self.tail = Some(Attached {
                                tail,
                                finished: remote.finished.subscribe(),
                                store_error: remote.store_error.subscribe(),
                                _remote: Some(remote),
                            });
                            self.need_history = true;
                            continue;
                        }
                        Err(error) => {
                            tracing::warn!(session = %self.id, %error, "cannot follow the session on the bus; trying again");
                            // Again soon (the bus comes back), or at a start here.
                            tokio::select! {
                                () = started => {}
                                () = tokio::time::sleep(crate::bus::QUIET_CHECK) => {}
                            }
                            self.need_history = true;
                            continue;
                        }
                    }
                }
                started.await;
                self.need_history = true;
                continue;
            };
            tokio::select! {
                // The store's state first: a recovery is reported before the events stored
                // after it (a burst of them would otherwise keep it waiting). Then the tail:
                // what it holds (or its lag) is reported before the end.
                biased;
                changed = store_error.changed() => {
                    if changed.is_ok() {
                        let now = store_error.borrow_and_update().clone();
                        return Some(Ok(match now {
                            Some(reason) => Subscribed::StoreFailing(reason),
                            None => Subscribed::StoreRecovered,
                        }));
                    }
                    // The session was let go of (its run ended): what the tail still held
                    // is in the store; read it there, then wait for a resume.
                    self.tail = None;
                    self.need_history = true;
                }
                received = tail.recv() => match received {
                    Ok(event) if event.seq <= self.sent => {}
                    Ok(event) if Some(event.seq) != self.sent.checked_add(1) => {
                        self.need_history = true
                    }
                    Ok(event) => {
                        self.sent = event.seq;
                        return Some(Ok(Subscribed::Event(event)));
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        self.need_history = true;
                        self.daemon.metrics.lagged();
                        return Some(Ok(Subscribed::Lagged));
                    }
                    Err(broadcast::error::RecvError::Closed) => {
                        self.tail = None;
                        self.need_history = true;
                    }
                },
                // The session ended: its last events are stored; read them, then wait.
                () = ended(finished) => {
                    self.tail = None;
                    self.need_history = true;
                }
            }
        }
    }
}

/// Shares the dashboards' changes with the other nodes on the bus: this node's go out, theirs
/// come in (marked `from_node`, and never sent out again). Each node says for itself which
/// nodes it finds lost (`nodes_changed` stays here).
pub(super) async fn share_changes(
    daemon: &Arc<Daemon>,
    bus: &Arc<crate::bus::Bus>,
) -> Result<(), DaemonError> {
    use futures::StreamExt as _;
    let mut theirs = bus.changes().await.map_err(DaemonError::Busy)?;
    let mut ours = daemon.dashboard.subscribe();
    let out = bus.clone();
    tokio::spawn(async move {
        loop {
            match ours.recv().await {
                Ok(change) => {
                    // Each node says for itself which nodes it finds lost, and that the
                    // shared book of schedules changed (it reads the book itself).
                    let own = change.from_node.is_none();
                    if own
                        && !matches!(
                            change.change,
                            Change::NodesChanged { .. } | Change::SchedulesChanged {}
                        )
                    {
                        out.publish_change(&change);
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => return,
            }
        }
    });
    let (me, node) = (Arc::downgrade(daemon), bus.node().to_owned());
    tokio::spawn(async move {
        while let Some(message) = theirs.next().await {
            let Some(daemon) = me.upgrade() else { return };
            let Ok(told) = serde_json::from_slice::<crate::bus::ToldChange>(&message.payload)
            else {
                continue;
            };
            if told.node == node {
                continue;
            }
            let mut change = told.change;
            change.from_node = Some(told.node);
            let _ = daemon.dashboard.send(change);
        }
    });
    Ok(())
}
