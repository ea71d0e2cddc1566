//! Store, then publish: the pump takes a session's events in order in the actor's own task,
//! numbers and stores them (retrying while the store refuses), and only then hands them to
//! subscribers, the projection and the record writer.
//!
//! - The pump is an `EventSink` the session's actor calls in its own task
//!   (`SessionEvents::hand_to`): a pump task of its own was one more wake-up on every line's
//!   path, and an idle session's task and queue.
//! - For a batch it numbers the events, appends them to the store, feeds the session's
//!   `Projector`, hands the stored batch (`observers::Stored`) to the after-store observers,
//!   and only then publishes it on the session's live tail (a bounded `broadcast`). The record
//!   copies the `View` (state, Claude session id, model, mode, cost, title, a relay CLI's
//!   cwd): the daemon reads no line itself.
//! - The record reaches the store through [`write_records`] (one task; a session queued once
//!   until its record is written, each write of the record as it is then), so no event waits
//!   for a record's write: a pump that waited held its session's next events back while the
//!   store's low-priority writer thread was folding (0.4–0.6 s at the p99 with 20 busy
//!   sessions).
//! - A batch the store refuses uses no number and is published to no one: it is retried (the
//!   actor waits meanwhile, so the CLI is held back), the session's `store_error` tells
//!   subscribers and dashboards, and after `STORE_RETRY_LIMIT` the session is stopped, marked
//!   crashed, and a `lost` event later counts what was dropped. A batch whose append failed
//!   but which is found in the store exactly (a commit whose answer was lost) counts as
//!   stored.

use super::*;

/// The daemon's record writer: stores each changed session record, one at a time, as the store
/// takes them. A session queued several times before its turn is written once, as it is then
/// (records are whole values: the last one written is the newest). Ends with the daemon.
pub(super) async fn write_records(
    daemon: std::sync::Weak<Daemon>,
    mut queue: mpsc::UnboundedReceiver<Arc<LiveSession>>,
) {
    while let Some(live) = queue.recv().await {
        let Some(daemon) = daemon.upgrade() else { return };
        // Under the lock a rename, a resume and a rotation write under: each write is of the
        // record as it is when written.
        let _writing = daemon.record_writes.lock().await;
        // Cleared before the record is read: a change after this queues the session again.
        // Already clear: its run's last write had it (a rename since then must not be undone).
        if !live.record_dirty.swap(false, std::sync::atomic::Ordering::SeqCst) {
            continue;
        }
        let record = current_record(&live);
        match daemon.store.update_session(&record).await {
            Ok(()) => {}
            // Another node took the session over (this one was lost to it): its run here
            // ends, so that one CLI runs it.
            Err(StoreError::Moved { id, node }) => {
                tracing::warn!(session = %id, ?node, "taken over by another node; its run here stops");
                if let Some(handle) = live.handle() {
                    tokio::spawn(async move {
                        let _ = handle.shutdown(STOP_GRACE).await;
                    });
                }
            }
            Err(error) => {
                tracing::error!(session = %record.id, %error, "cannot update the session record")
            }
        }
    }
}

/// Drains the events of a session that was refused before it went live (nothing of it is
/// stored), so that its actor is never held up while its CLI is stopped.
pub(super) async fn pump_discarding(mut events: SessionEvents) {
    while events.recv().await.is_some() {}
}

/// Moves a session's events into the store and out to subscribers, and keeps its record: the
/// session's [`EventSink`], called in its actor's task (one task fewer on every event's path
/// than a pump of its own, which also cost every idle session its task and queue).
///
/// A relay session (an external CLI at `/`) follows the agents-ui relay protocol's rotation rule: each distinct
/// Claude session id on the connection is its own Switchboard session. When the CLI moves to
/// another Claude session, the current one ends with a `rotated` event and the pump goes on
/// with the session of the new id (a new one, or the one this connection had for it before).
pub(super) struct Pump {
    pub(super) daemon: Arc<Daemon>,
    pub(super) id: String,
    pub(super) live: Arc<LiveSession>,
    /// The run's number: only this run's end ends the session's run.
    pub(super) run: u64,
    /// The last sequence number used.
    pub(super) seq: u64,
    /// A relay CLI's session (rotations apply), and whether relay frontends see its lines.
    pub(super) relay: bool,
    pub(super) relayed: bool,
    /// This connection's Claude session ids and their Switchboard sessions.
    pub(super) seen: HashMap<String, String>,
    /// When this connection's last rotations were (at most [`crate::relay_limits::RELAY_ROTATIONS_PER_SECOND`]).
    pub(super) rotations: crate::relay_limits::Window,
    /// Events the store refused for good (the session was stopped for it), not yet noted in
    /// the log (an earlier run's too).
    pub(super) lost: u64,
    /// The CLI process, marked ended in the runs file when the session ends.
    pub(super) cli_run: Option<switchboard_transport::CliRun>,
    /// Whether [`Pump::end`] began: a pump dropped without it by a panic (of its actor, or of
    /// its own code) ends the run from a task of its own, or the session would never be
    /// finished and a stop would wait for it forever. (Dropped otherwise, its runtime is
    /// shutting down, and there is nothing to end.)
    pub(super) ended: bool,
}

impl Drop for Pump {
    fn drop(&mut self) {
        if self.ended || !std::thread::panicking() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        tracing::error!(session = %self.id, "a session's actor ended without ending its pump; ending it");
        let orphan = Pump {
            daemon: self.daemon.clone(),
            id: std::mem::take(&mut self.id),
            live: self.live.clone(),
            run: self.run,
            seq: self.seq,
            relay: self.relay,
            relayed: self.relayed,
            seen: HashMap::new(),
            rotations: crate::relay_limits::Window::new(Duration::from_secs(1)),
            lost: self.lost,
            cli_run: self.cli_run.take(),
            ended: false,
        };
        runtime.spawn(orphan.end());
    }
}

impl Pump {
    pub(super) fn new(
        daemon: Arc<Daemon>,
        id: String,
        live: Arc<LiveSession>,
        run: u64,
        seq: u64,
        cli_run: Option<switchboard_transport::CliRun>,
    ) -> Pump {
        let (relay, relayed) = {
            let record = live.record.lock();
            (record.launch.transport == Some(TransportKind::Relay), record.launch.relayed())
        };
        let lost = live.lost.swap(0, std::sync::atomic::Ordering::SeqCst);
        let seen = HashMap::new();
        let rotations = crate::relay_limits::Window::new(Duration::from_secs(1));
        Pump {
            daemon,
            id,
            live,
            run,
            seq,
            relay,
            relayed,
            seen,
            rotations,
            lost,
            cli_run,
            ended: false,
        }
    }

    pub(super) async fn take(&mut self, batch: Vec<SessionEvent>) {
        let daemon = self.daemon.clone();
        let mut rest: &[SessionEvent] = &batch;
        while !rest.is_empty() {
            let rotation = if self.relay { rotation_point(&self.live, rest) } else { None };
            let (now, later) = match &rotation {
                Some((at, _)) => rest.split_at(*at),
                None => (rest, &[][..]),
            };
            let Pump { id, live, seq, lost, relayed, .. } = self;
            // What is rare (a loss to note, a rotation) is boxed where it happens: this future
            // is made for every batch, and carried them all inline (4,272 bytes; 744 without).
            let stored = (*lost == 0 || Box::pin(note_lost(&daemon, id, live, seq, lost)).await)
                && publish(&daemon, id, live, now, seq, *relayed).await;
            if !stored {
                *lost += now.len() as u64;
            }
            // Decisions, kept by request id for links' pages, under the session they are in.
            for event in now {
                if let SessionEvent::PermissionDecided { request_id, behavior, by, .. } = event {
                    let decision =
                        crate::decisions::Decision { behavior: *behavior, by: by.clone() };
                    daemon.decisions.note(id, request_id, decision);
                }
            }
            if let Some((_, claude_session_id)) = rotation {
                if let Err(why) = self.may_rotate(&claude_session_id) {
                    // Its lines go on in the same session: nothing is lost, nothing more made.
                    tracing::warn!(session = %self.id, "a relay CLI's rotation refused: {why}");
                    self.live.record.lock().claude_session_id = Some(claude_session_id);
                    rest = later;
                    continue;
                }
                let (daemon, id, live, seq) = (&self.daemon, &self.id, &self.live, &self.seq);
                let rotated =
                    Box::pin(daemon.rotate(id, live, *seq, &claude_session_id, &mut self.seen))
                        .await;
                match rotated {
                    Ok((next_id, next_live, next_run, next_seq)) => {
                        (self.id, self.live, self.run, self.seq) =
                            (next_id, next_live, next_run, next_seq);
                    }
                    Err(error) => {
                        tracing::error!(session = %self.id, %error, "cannot rotate the relay session");
                        // Go on in the same session rather than lose lines.
                        self.live.record.lock().claude_session_id = Some(claude_session_id);
                    }
                }
            }
            rest = later;
        }
    }

    pub(super) async fn end(mut self) {
        self.ended = true;
        let (daemon, live, run, relayed) =
            (self.daemon.clone(), self.live.clone(), self.run, self.relayed);
        let (daemon, live, run) = (&daemon, &live, &run);
        let id = std::mem::take(&mut self.id);
        let id = &id;
        let (mut seq, mut lost) = (self.seq, self.lost);
        if lost > 0 && !note_lost(daemon, id, live, &mut seq, &mut lost).await {
            // Noted when this session stores an event again (a resume).
            live.lost.fetch_add(lost, std::sync::atomic::Ordering::SeqCst);
        }
        super::search::run_ended(daemon, id, seq);
        super::view_checkpoints::run_ended(daemon, id, seq);
        // This run is over: its record is stored (exited or crashed) and the run ends, unless
        // a resume began the next run meanwhile (then the record and the end are that run's).
        let mut record_stored = true;
        if live.run_number() == *run {
            let _writing = daemon.record_writes.lock().await;
            // This write has the record as it ends: one still queued is not needed.
            live.record_dirty.store(false, std::sync::atomic::Ordering::SeqCst);
            {
                let record = current_record(live);
                match daemon.store.update_session(&record).await {
                    // Another node's now: nothing of it is kept here.
                    Ok(()) | Err(StoreError::Moved { .. }) => {}
                    Err(error) => {
                        tracing::error!(session = %id, %error, "cannot store the session's last record");
                        record_stored = false;
                    }
                }
            }
        }
        // A record the store refused lives on in memory, where `Daemon::record` finds it.
        if live.end(*run) && record_stored {
            daemon.forget_if_finished(id, live);
        }
        if relayed {
            daemon.relay_publish(&relay_status("claude code disconnected")).await;
        }
        if let Some(cli_run) = &self.cli_run {
            daemon.record_run(cli_run, false).await;
        }
    }
}

impl EventSink for Pump {
    fn take(&mut self, events: Vec<SessionEvent>) -> SinkFuture<'_> {
        Box::pin(Pump::take(self, events))
    }

    fn end(self: Box<Self>) -> SinkFuture<'static> {
        Box::pin(Pump::end(*self))
    }
}

impl Pump {
    /// Whether this connection may move to `claude_session_id`'s session now, or why not
    /// ([`crate::relay_limits`]).
    pub(super) fn may_rotate(&mut self, claude_session_id: &str) -> Result<(), String> {
        use crate::relay_limits::{MAX_RELAY_SESSIONS, RELAY_ROTATIONS_PER_SECOND};
        let known = self.seen.contains_key(claude_session_id);
        // The current session and those seen before it.
        if !known && self.seen.len() + 1 >= MAX_RELAY_SESSIONS {
            return Err(format!(
                "the connection has {MAX_RELAY_SESSIONS} sessions already (MAX_RELAY_SESSIONS)"
            ));
        }
        if !self.rotations.has_room(RELAY_ROTATIONS_PER_SECOND) {
            return Err(format!(
                "more than {RELAY_ROTATIONS_PER_SECOND} rotations in a second (RELAY_ROTATIONS_PER_SECOND)"
            ));
        }
        if !known {
            self.daemon.relay_may_make_session()?;
        }
        self.rotations.take(RELAY_ROTATIONS_PER_SECOND);
        Ok(())
    }
}

/// Where a relay CLI moves to another Claude session in `events`: the index of the line that
/// says so (it belongs to the new session) and the new id.
pub(super) fn rotation_point(
    live: &LiveSession,
    events: &[SessionEvent],
) -> Option<(usize, String)> {
    // Most batches carry no session id at all: no lock, no copy.
    if !events.iter().any(|event| matches!(event, SessionEvent::ClaudeSessionId(_))) {
        return None;
    }
    // The first id a connection announces is its session's own, even within this batch.
    let mut current = live.record.lock().claude_session_id.clone();
    let (index, new) = events.iter().enumerate().find_map(|(index, event)| match event {
        SessionEvent::ClaudeSessionId(new) => match &current {
            Some(current) if current != new => Some((index, new.clone())),
            Some(_) => None,
            None => {
                current = Some(new.clone());
                None
            }
        },
        _ => None,
    })?;
    // The core emits the id right after the line that carried it.
    let at = events[..index]
        .iter()
        .rposition(|event| matches!(event, SessionEvent::Line(_)))
        .unwrap_or(index);
    Some((at, new))
}

/// Stores events, then publishes them (for a relay session, the CLI's raw lines to the relay's
/// frontends too) and updates the session's record.
///
/// Nothing is published that is not stored, and a sequence number is used only by a stored
/// event. When the store refuses a batch, subscribers and dashboards are told and the batch is
/// tried again (the pump reads nothing more meanwhile, so the CLI is held back and memory stays
/// bounded); if it is still refused after [`STORE_RETRY_LIMIT`], the session is stopped and
/// marked crashed with the reason. Returns false then: the session's events are being lost.
pub(super) async fn publish(
    daemon: &Arc<Daemon>,
    id: &str,
    live: &Arc<LiveSession>,
    batch: &[SessionEvent],
    seq: &mut u64,
    relay: bool,
) -> bool {
    if batch.is_empty() {
        return true;
    }
    let records: Vec<Arc<EventRecord>> = batch
        .iter()
        .zip(*seq + 1..)
        .map(|(event, seq)| {
            let dir = match event {
                SessionEvent::Line(line) if line.direction == LineDirection::FromCli => "from_cli",
                SessionEvent::Line(_) => "to_cli",
                _ => "switchboard",
            };
            Arc::new(event_record(id, seq, dir, event.kind(), event.to_json_text()))
        })
        .collect();
    let appending = std::time::Instant::now();
    if !store_with_retries(daemon, id, live, &records).await {
        return false;
    }
    let handing = std::time::Instant::now();
    daemon.metrics.stored((handing - appending).as_secs_f64());
    let mut turn_ends = Vec::new();
    let mut spent = 0.0;
    let mut measured = crate::metrics::Measured::default();
    let before = *seq;
    let mut found = Finding {
        before,
        ts_ms: records[0].ts_ms,
        entries: Vec::new(),
        traced: daemon.traces.is_some().then(Vec::new),
    };
    let changed = project(live, batch, &mut turn_ends, &mut spent, &mut measured, &mut found);
    *seq += records.len() as u64;
    // The observers first (a budget reached pauses the session before a subscriber sees the
    // turn's end), then the subscribers.
    let stored = Stored {
        id,
        live,
        batch,
        before,
        turn_ends: &turn_ends,
        spent,
        changed,
        relayed: relay,
        measured: &measured,
        found: found.entries,
        traced: found.traced.unwrap_or_default(),
    };
    for observer in &daemon.observers {
        if let Some(waiting) = observer.stored(daemon, &stored) {
            waiting.await;
        }
    }
    if let Some(tail) = live.tail() {
        for record in records {
            let _ = tail.send(record);
        }
    }
    daemon.metrics.published(handing.elapsed().as_secs_f64());
    true
}

/// Whether `records` (one session's, in order) are all in the store, exactly as they are.
pub(super) async fn stored_already(store: &dyn Store, records: &[Arc<EventRecord>]) -> bool {
    let Some(first) = records.first() else { return true };
    match store.events_after(&first.session_id, first.seq - 1, records.len()).await {
        Ok(stored) => {
            stored.len() == records.len()
                && stored.iter().zip(records).all(|(stored, record)| *stored == **record)
        }
        Err(_) => false,
    }
}

/// Appends `records`, retrying while the store refuses them (see [`publish`]). Whether they
/// are stored.
pub(super) async fn store_with_retries(
    daemon: &Arc<Daemon>,
    id: &str,
    live: &Arc<LiveSession>,
    records: &[Arc<EventRecord>],
) -> bool {
    let limit = daemon.config.store_retry_limit.unwrap_or(STORE_RETRY_LIMIT);
    let started = tokio::time::Instant::now();
    let mut pause = Duration::from_millis(50);
    let mut retried = false;
    loop {
        let appended = match daemon.store.append_shared(records).await {
            // A try that failed may have committed all the same (a database connection that
            // dropped as it committed): then the events are there, exactly, and stored.
            Err(StoreError::OutOfSequence { .. })
                if retried && Box::pin(stored_already(&*daemon.store, records)).await =>
            {
                Ok(())
            }
            other => other,
        };
        match appended {
            Ok(()) => {
                // Subscribers hear of a change only (every append passes here: the flag
                // first, the watch's write lock only when there is an error to clear).
                let failing = live.store_failing.load(std::sync::atomic::Ordering::Acquire);
                if failing {
                    live.store_failing.store(false, std::sync::atomic::Ordering::Relaxed);
                }
                if failing && live.store_error.send_if_modified(|error| error.take().is_some()) {
                    tracing::info!(session = %id, "the store takes this session's events again");
                    daemon.tell_dashboards(Change::StoreRecovered { session_id: id.to_owned() });
                }
                return true;
            }
            Err(error) => {
                let reason = format!("the event log cannot be written: {error}");
                let first = live.store_error.send_if_modified(|error| {
                    let first = error.is_none();
                    *error = Some(reason.clone());
                    first
                });
                // After the watch: whoever finds the flag set finds the error to clear.
                live.store_failing.store(true, std::sync::atomic::Ordering::Release);
                if first {
                    tracing::error!(session = %id, %error, "cannot store events; retrying, the CLI waits");
                    daemon.tell_dashboards(Change::StoreFailing {
                        session_id: id.to_owned(),
                        error: reason.clone(),
                    });
                }
                if started.elapsed() >= limit {
                    Box::pin(fail_session(daemon, id, live, &reason)).await;
                    return false;
                }
                retried = true;
                Box::pin(tokio::time::sleep(pause)).await;
                pause = (pause * 2).min(Duration::from_secs(2));
            }
        }
    }
}

/// Notes in the log that `lost` events could not be stored (one try: the session is
/// failing). Whether it was stored; the log then goes on from the next seq.
pub(super) async fn note_lost(
    daemon: &Arc<Daemon>,
    id: &str,
    live: &Arc<LiveSession>,
    seq: &mut u64,
    lost: &mut u64,
) -> bool {
    let reason = live.store_error.borrow().clone().unwrap_or_default();
    let payload = json!({"event": "lost", "count": *lost, "reason": reason});
    let record = Arc::new(event_record(id, *seq + 1, "switchboard", "lost", payload.to_string()));
    if daemon.store.append_shared(std::slice::from_ref(&record)).await.is_err() {
        return false;
    }
    *seq += 1;
    *lost = 0;
    live.store_failing.store(false, std::sync::atomic::Ordering::Relaxed);
    live.store_error.send_if_modified(|error| error.take().is_some());
    if let Some(tail) = live.tail() {
        let _ = tail.send(record);
    }
    true
}

/// The store refused a session's events for too long: its CLI is stopped (in the background:
/// the pump goes on draining its events, which cannot be stored) and its record, kept in
/// memory when the store cannot take it, says why.
pub(super) async fn fail_session(
    daemon: &Arc<Daemon>,
    id: &str,
    live: &Arc<LiveSession>,
    reason: &str,
) {
    tracing::error!(session = %id, %reason, "giving up on storing this session's events; stopping it");
    if let Some(handle) = live.handle() {
        tokio::spawn(async move {
            let _ = handle.shutdown(STOP_GRACE).await;
        });
    }
    {
        let mut record = live.record.lock();
        record.state = RecordState::Crashed;
        record.updated_ms = now_ms();
    }
    daemon.tell_dashboards(Change::SessionFailed {
        session_id: id.to_owned(),
        error: reason.to_string(),
    });
    daemon.record_changed(live);
}

/// Waits until a session's pump has finished (or its sender is gone).
pub(super) async fn ended(finished: &mut watch::Receiver<bool>) {
    // The guard `wait_for` returns is dropped at once: it must not live across an await.
    let _ = finished.wait_for(|finished| *finished).await.map(|_| ());
}

/// What the search index keeps of a batch: read from its updates by the session's finder.
pub(super) struct Finding {
    /// The last seq before the batch (its events follow it, one seq each).
    before: u64,
    /// When the batch was stored.
    ts_ms: u64,
    /// What was found.
    entries: Vec<switchboard_store::SearchEntry>,
    /// The spans that ended in the batch, when traces are sent (`None`: they are not, and the
    /// session's tracer is not fed).
    traced: Option<Vec<crate::traces::tracer::Finished>>,
}

/// Projects a batch of events and updates the record from the view; whether anything a
/// dashboard shows changed.
///
/// The record reads only the session's one projection (state, model, mode, cost, and, where
/// the record has none yet, a title from the first prompt and the cwd a CLI that connected on
/// its own reports).
pub(super) fn project(
    live: &LiveSession,
    batch: &[SessionEvent],
    turn_ends: &mut Vec<TurnEnd>,
    spent: &mut f64,
    measured: &mut crate::metrics::Measured,
    found: &mut Finding,
) -> bool {
    let mut projector = live.projector.lock();
    let mut finder = live.finder.lock();
    let mut tracer = found.traced.is_some().then(|| live.tracer.lock());
    let mut changed = false;
    for (index, event) in batch.iter().enumerate() {
        // The cost follows a result, and may land in the next batch; a dropped or restored
        // CLI socket shows in the session list.
        changed |= matches!(
            event,
            SessionEvent::CostChanged(_)
                | SessionEvent::Connected { .. }
                | SessionEvent::Disconnected
        );
        projector.apply(event, &mut |update| {
            changed |= update.changes_summary();
            measured.note(&update);
            let seq = found.before + 1 + index as u64;
            finder.note(seq, found.ts_ms, &update, &mut found.entries);
            if let (Some(tracer), Some(traced)) = (tracer.as_mut(), found.traced.as_mut()) {
                tracer.note(seq, found.ts_ms, &update, traced);
            }
            // What the batch's turns (a subagent's too) cost, for the budgets.
            if let switchboard_session::Update::TurnEnded { cost_usd, .. } = &update {
                if cost_usd.is_finite() && *cost_usd > 0.0 {
                    *spent += cost_usd;
                }
            }
            // The main conversation's turns that ended, for notifications (a subagent's
            // result is not the session's).
            if let switchboard_session::Update::TurnEnded {
                parent_tool_use_id: None,
                subtype,
                interrupted,
                failed,
                result,
                ..
            } = update
            {
                turn_ends.push(TurnEnd { index, subtype, interrupted, failed, result });
            }
        });
    }
    if !changed {
        return false;
    }
    let mut record = live.record.lock();
    let view = projector.view();
    if let Some(state) = view.state {
        // A paused session reads so until it is let go on or ends.
        record.state = record_state(state, live.paused().is_some());
        // Ended with a request parked: it waits for a person with no process.
        if record.state.is_final() && view.pending_permissions.iter().any(is_parked) {
            record.state = RecordState::Parked;
        }
    }
    if view.claude_session_id.is_some() {
        record.claude_session_id.clone_from(&view.claude_session_id);
    }
    if view.model.is_some() {
        record.model.clone_from(&view.model);
    }
    if view.permission_mode.is_some() {
        record.permission_mode.clone_from(&view.permission_mode);
    }
    if view.cost_usd > 0.0 || view.turns > 0 {
        record.cost_usd = view.cost_usd;
    }
    if record.title.is_none() {
        record.title.clone_from(&view.title);
    }
    if record.cwd.is_empty() {
        if let Some(cwd) = &view.cwd {
            record.cwd.clone_from(cwd);
        }
    }
    record.updated_ms = now_ms();
    true
}

pub(super) fn event_record(
    session_id: &str,
    seq: u64,
    dir: &'static str,
    kind: &'static str,
    payload: String,
) -> EventRecord {
    EventRecord {
        session_id: session_id.to_owned(),
        seq,
        ts_ms: now_ms(),
        dir: dir.into(),
        kind: kind.into(),
        payload,
    }
}

/// An after-store observer ([`super::observers`]): a record the projection changed is queued
/// for its writer.
pub(super) struct Records;

impl Observer for Records {
    fn stored<'a>(&'a self, daemon: &'a Arc<Daemon>, s: &'a Stored<'a>) -> Option<Waiting<'a>> {
        if s.changed {
            daemon.record_changed(s.live);
        }
        None
    }
}
