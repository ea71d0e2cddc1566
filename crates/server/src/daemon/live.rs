//! A running session as the daemon holds it ([`LiveSession`]): its handle, its run, its
//! phase, the commands forwarded to it from other nodes ([`SessionCommand`]), and the place it
//! takes among the running ([`Admitted`]).
//!
//! A session's lifecycle is one value, `LiveSession::run` (its run number and handle): the
//! daemon begins a run, and only that run's pump ends it, so a pump that finishes after a
//! resume began the next run leaves that run alone. When a run ends the session lets go of
//! what only a run needs (the live tail with its buffer, the projection's open messages and
//! calls), and the daemon forgets it (`forget_if_finished`, under the map's lock that a run
//! begins under; a relay session its CLI rotated away from too): a finished session costs its
//! stored record, not its live machinery. It is kept while it owes the log a `lost` note or
//! its store is failing (its record then lives only in memory). A resume makes it live again,
//! as after a restart; its subscribers read what the tail held from the store and wait for
//! that resume. [`Phase`] (serving, draining, closed) is the daemon's: `drain` tells every
//! socket, stops every session and stores it, then closes them.

use super::*;

/// What a person asks of a running session ([`Daemon::command`]): carried out on the node
/// that runs it, forwarded there over the bus as JSON when that is another node.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum SessionCommand {
    /// A message from `by`.
    Message {
        /// The message.
        message: switchboard_protocol::UserMessage,
        /// Who sent it.
        by: String,
        /// Who sent it, as a rule names it (a node of an older release sends none: unknown).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        origin: Option<switchboard_session::TurnOrigin>,
    },
    /// An answer to a permission request.
    Answer {
        /// The request.
        request_id: String,
        /// The answer.
        answer: switchboard_session::PermissionAnswer,
        /// Who answered.
        by: String,
    },
    /// Interrupt the turn.
    Interrupt {
        /// Also drop every prompt still queued behind it.
        #[serde(default)]
        cancel_queued: bool,
    },
    /// Switch the model.
    SetModel {
        /// The model.
        model: String,
    },
    /// Switch the permission mode.
    SetMode {
        /// The mode.
        mode: PermissionMode,
    },
    /// Stop the session's CLI.
    Stop,
    /// Put a question or request to the session's CLI; its answer is the command's.
    Ask {
        /// What.
        control: switchboard_session::CliControl,
    },
    /// Start a session here (placed on this node by another).
    Create {
        /// The request, as the node that placed it took it.
        request: CreateSession,
        /// Who asked (the request's own `started_by` is never sent).
        by: Option<String>,
        /// Who asked, as a rule names it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        started_as: Option<switchboard_session::TurnOrigin>,
        /// Through which face, with which token and ceiling (never the request's own).
        #[serde(default)]
        origin: Option<switchboard_store::Origin>,
        /// The schedule's or trigger's run it is (a request never carries one of its own).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        run: Option<switchboard_store::RunOf>,
    },
}

impl SessionCommand {
    /// Says in who asked that it came through node `node`, within the channel's parentheses
    /// (`token phone (api via beta)`), so that the token is still read from it (its budget).
    pub(super) fn via(mut self, node: &str) -> SessionCommand {
        if let SessionCommand::Message { by, .. } | SessionCommand::Answer { by, .. } = &mut self {
            *by = via(by, node);
        }
        self
    }
}

/// `who` through node `node`: `token phone (api)` → `token phone (api via beta)`.
pub(super) fn via(who: &str, node: &str) -> String {
    match who.strip_suffix(')') {
        Some(open) => format!("{open} via {node})"),
        None => format!("{who} via {node}"),
    }
}

#[cfg(test)]
mod via_tests {
    #[test]
    fn the_token_is_still_read_from_who_came_through_another_node() {
        let who = super::via("token phone (api)", "beta");
        assert_eq!(who, "token phone (api via beta)");
        assert_eq!(crate::budget::token_of(&who), Some("phone"));
        assert_eq!(super::via("alice", "beta"), "alice via beta");
    }
}

/// A session admitted to start ([`Daemon::admit_run`]), until it has.
pub(super) struct Admitted(pub(super) Arc<std::sync::atomic::AtomicUsize>);

impl Drop for Admitted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A live session: its current run, its projection, and its live tail.
pub(super) struct LiveSession {
    /// The session's one lifecycle value: which run of its CLI is current, and its handle
    /// while it runs. Begun by the daemon, ended only by that run's own pump.
    pub(super) run: Mutex<Run>,
    pub(super) record: Mutex<SessionRecord>,
    /// The session's one projection, fed by the pump: the record reads its view.
    pub(super) projector: Mutex<switchboard_session::Projector>,
    /// The live tail, created by the first subscriber while a run goes on (an unwatched
    /// session pays nothing) and dropped when the run ends: a finished session keeps no
    /// buffer of its last events (its subscribers read them from the store).
    pub(super) tail: Mutex<Option<broadcast::Sender<Arc<EventRecord>>>>,
    /// Set by the pump when the session's CLI is gone and its last events are stored.
    pub(super) finished: watch::Sender<bool>,
    /// Why the session's events cannot be stored right now (`None` while they can): the
    /// pump retries, holding the CLI back, and subscribers are told.
    pub(super) store_error: watch::Sender<Option<String>>,
    /// Whether `store_error` may hold an error: the pump's look on every append (an atomic
    /// load, where the watch's look takes its lock). Written by the pump only, with the watch.
    pub(super) store_failing: std::sync::atomic::AtomicBool,
    /// Events the store refused for good and the log does not mention yet (noted as soon as
    /// the store takes an event of this session again, a resume's included).
    pub(super) lost: std::sync::atomic::AtomicU64,
    /// The record changed and waits for the daemon's record writer (queued once until then).
    pub(super) record_dirty: std::sync::atomic::AtomicBool,
    /// Why the session is paused (a budget it reached), while it is.
    pub(super) paused: Mutex<Option<String>>,
    /// Who hears of it: its policy's `[notify]`, with its own `notify` channels.
    pub(super) route: Mutex<switchboard_session::NotifyRoute>,
    /// Held while its budget is checked and its pause changed (by its pump, a person's raise).
    pub(super) budget_check: Mutex<()>,
    /// What the search index keeps of its updates, read as the pump projects them
    /// ([`crate::search::finder`]).
    pub(super) finder: Mutex<crate::search::finder::Finder>,
    /// The spans of its turns, fed as the pump projects them while traces are sent
    /// ([`crate::traces::tracer`]).
    pub(super) tracer: Mutex<crate::traces::tracer::SessionTracer>,
}

/// A session's current run (see [`LiveSession::run`]).
#[derive(Default)]
pub(super) struct Run {
    /// Counts the runs: the first is 1, each resume the next.
    pub(super) number: u64,
    /// The session's handle while this run's CLI runs.
    pub(super) handle: Option<SessionHandle>,
}

impl LiveSession {
    pub(super) fn new(record: SessionRecord) -> LiveSession {
        // Its updates feed only the record: no tool input is parsed as it streams.
        let mut projector = switchboard_session::Projector::without_partial_inputs();
        if is_terminal(&record) {
            projector.set_transcript();
        }
        projector.continue_from_cost(record.cost_usd);
        let finder = crate::search::finder::Finder::new(record.model.clone());
        let tracer = crate::traces::tracer::SessionTracer::new(
            &record.id,
            &record.cwd,
            record.model.clone(),
        );
        LiveSession {
            finder: Mutex::new(finder),
            tracer: Mutex::new(tracer),
            run: Mutex::new(Run::default()),
            record: Mutex::new(record),
            projector: Mutex::new(projector),
            tail: Mutex::new(None),
            finished: watch::channel(false).0,
            store_error: watch::channel(None).0,
            store_failing: std::sync::atomic::AtomicBool::new(false),
            lost: std::sync::atomic::AtomicU64::new(0),
            record_dirty: std::sync::atomic::AtomicBool::new(false),
            paused: Mutex::new(None),
            route: Mutex::new(switchboard_session::NotifyRoute::default()),
            budget_check: Mutex::new(()),
        }
    }

    /// Who hears of the session.
    pub(super) fn route(&self) -> switchboard_session::NotifyRoute {
        self.route.lock().clone()
    }

    /// Why the session is paused, if it is.
    pub(super) fn paused(&self) -> Option<String> {
        self.paused.lock().clone()
    }

    /// Pauses the session for `why`, or (`None`) lets it go on; whether it was paused.
    pub(super) fn set_paused(&self, why: Option<String>) -> bool {
        std::mem::replace(&mut *self.paused.lock(), why).is_some()
    }

    /// Who sent the CLI its latest message, as the session's core knows it (the sender travels
    /// with each message); `None` when it runs nowhere here.
    pub(super) fn sender(&self) -> Option<String> {
        self.handle().and_then(|handle| handle.snapshot().sender)
    }

    /// Begins the next run, with `handle`; its number. A run whose CLI still runs is not
    /// replaced (two resumes at once: the second is refused).
    pub(super) fn begin(&self, handle: Option<SessionHandle>) -> Result<u64, DaemonError> {
        let mut run = self.run.lock();
        if run.handle.is_some() && handle.is_some() {
            return Err(DaemonError::AlreadyRunning(self.id()));
        }
        run.number += 1;
        run.handle = handle;
        self.finished.send_replace(false);
        // A new run is not paused (a resume is refused while a budget holds it).
        self.set_paused(None);
        Ok(run.number)
    }

    /// Ends run `number`, if it is still the current one (a resume may have begun the next
    /// while this one's pump finished: that run must not be marked finished). Whether it was.
    pub(super) fn end(&self, number: u64) -> bool {
        let mut run = self.run.lock();
        if run.number != number {
            return false;
        }
        run.handle = None;
        // A session that ended is not paused (a resume checks its budget again).
        self.set_paused(None);
        self.finish();
        true
    }

    /// Says the run is over, and lets go of what only a run needs: the live tail (its
    /// subscribers take what it still holds, then read the store and wait for a resume) and
    /// the projection's state for open messages and calls.
    pub(super) fn finish(&self) {
        {
            let mut tail = self.tail.lock();
            // Under the tail's lock, which `Daemon::attach` checks `finished` under: no tail
            // is made for a run that is over.
            self.finished.send_replace(true);
            *tail = None;
        }
        self.projector.lock().end_run();
    }

    /// The live tail, if anyone follows the session.
    pub(super) fn tail(&self) -> Option<broadcast::Sender<Arc<EventRecord>>> {
        self.tail.lock().clone()
    }

    /// Ends the current run and hands its handle over (a relay CLI rotating to another
    /// session).
    pub(super) fn hand_over(&self) -> Result<Option<SessionHandle>, DaemonError> {
        let mut run = self.run.lock();
        let handle = run.handle.take();
        self.finish();
        Ok(handle)
    }

    pub(super) fn id(&self) -> String {
        self.record.lock().id.clone()
    }

    /// The current run's number.
    pub(super) fn run_number(&self) -> u64 {
        self.run.lock().number
    }

    /// The handle while a run's CLI runs.
    pub(super) fn handle(&self) -> Option<SessionHandle> {
        self.run.lock().handle.clone()
    }
}

/// Where the daemon is in its life. Client sockets follow it: when it drains they are told,
/// and when it has closed they are closed (WebSocket close code 1001, "going away").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Serving.
    Serving,
    /// Stopping every session; sockets stay open to carry their last events.
    Draining,
    /// Every session is stopped and stored.
    Closed,
}
