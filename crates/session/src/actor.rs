//! The session actor: one task owns a session's [`SessionCore`] and its transport; everyone
//! else holds a cheap, cloneable [`SessionHandle`].
//!
//! [`spawn_session_on`] takes a ready `CliLink`, whichever transport the caller picked and
//! spawned (the daemon spawns stdio or `--sdk-url` CLIs itself, with
//! [`SessionConfig::launch_options`], which adds the policy's deny rules as
//! `--disallowedTools`); [`spawn_session`] is the stdio shorthand. Ending a CLI has one
//! escalation, the transport's (`CliProcess::begin_shutdown`: close input, SIGTERM, SIGKILL).
//!
//! - The actor's one task owns the core and the transport and applies effects. Timers are
//!   tasks that send a command back, held in the actor's `JoinSet` so that none outlives the
//!   session (a sleeper left behind kept the command queue's memory for up to a minute after
//!   the session ended).
//! - The owner's event stream is lossless and bounded (backpressure reaches the CLI's pipe),
//!   and handed over in batches, one per wake-up of the actor (up to [`TRANSPORT_BATCH`] of the
//!   CLI's lines found waiting, or one command), so a busy session costs one queue operation
//!   per batch. Extra observers ([`SessionHandle::subscribe`]) may lag. The snapshot (`watch`)
//!   is published before the events of each step, so an observer never sees an event newer
//!   than the snapshot.
//! - The owner may instead hand the stream to an [`EventSink`] ([`SessionEvents::hand_to`]),
//!   which the actor calls in its own task after giving it what was queued before. A sink
//!   handed over after the session ended gets the rest from a task of its own; the actor
//!   closes the way in before its last look, so a sink is always either taken or served so. A
//!   sink must never wait for its own session's actor. The daemon's pump is such a sink, so
//!   while the store refuses a batch and the pump retries, the session's commands (answers,
//!   interrupts) wait with its CLI; a pump dropped by a panic ends its run from a task of its
//!   own.
//! - Queue slots are allocated 32 at a time from the start, so what a queue carries is kept
//!   small (commands box their payloads, the transport boxes its rare large events): an idle
//!   session's queues cost about 2 KiB, not the 25 KiB they did.
//! - A warm CLI's session ([`crate::pool`]) starts with prompts held (`hold_prompts`), logs the
//!   `initialize` line without writing it again, and feeds the events the CLI wrote meanwhile
//!   (its answer first).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;
use switchboard_protocol::control::{
    ControlSuccess, HookOutput, InterruptRequest, McpMessageRequest, McpReconnectRequest,
    McpSetServersRequest, McpStatusRequest, McpToggleRequest, RewindFilesRequest,
    SetMaxThinkingTokensRequest, SetModelRequest, SetPermissionModeRequest,
};
use switchboard_protocol::{
    ContentBlock, ControlRequestPayload, InitializeRequest, InitializeResponse, PermissionMode,
    UserMessage,
};
use switchboard_transport::stdio::{self, CliOptions, ShutdownStep, TransportEvent};
use switchboard_transport::TransportError;
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio::task::JoinSet;

use crate::core::{
    AnswerError, ControlFailure, Effect, PermissionAnswer, SessionCore, SessionSnapshot, Timer,
};
use crate::event::SessionEvent;
use crate::policy::{MatchContext, Policy};

/// Batches of events queued for the session's owner before the actor waits (and, behind it,
/// the CLI). A batch is what one wake-up of the actor made: at most [`TRANSPORT_BATCH`] of the
/// CLI's lines, or one command.
pub const EVENT_QUEUE: usize = 32;

/// What the CLI said that the actor takes in one wake-up, and hands on as one batch.
pub const TRANSPORT_BATCH: usize = 32;

/// Commands queued for the actor.
pub const COMMAND_QUEUE: usize = 64;

/// Events kept for [`SessionHandle::subscribe`] observers that fall behind (they are told they
/// lagged; the owner's stream is lossless).
pub const OBSERVER_BUFFER: usize = 256;

/// How long each shutdown step waits by default.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// How to start a session.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// How to launch the CLI.
    pub cli: CliOptions,
    /// The permission policy.
    pub policy: Policy,
    /// `initialize` to send before anything else (hooks, agents, prompts). `None` sends a bare
    /// one, which also makes the CLI report its commands and models.
    pub initialize: Option<InitializeRequest>,
    /// How long our control requests wait for the CLI.
    pub control_timeout: Duration,
    /// The CLI is interactive, in a person's terminal, and the session reads its transcript
    /// ([`SessionCore::set_transcript`]): no `initialize` is sent, and only prompts and
    /// interrupts reach it.
    pub transcript: bool,
    /// People's answers to requests parked in an earlier run, which this run's CLI asks about
    /// again ([`SessionCore::set_parked_answers`]).
    pub parked_answers: Vec<crate::core::ParkedAnswer>,
    /// Whoever runs the session lets a parked session's CLI go and resumes it with the answer
    /// (the daemon does): the policy's `park_after` parks only then.
    pub parkable: bool,
}

impl SessionConfig {
    /// A session in `cwd` with `policy`.
    pub fn new(cwd: impl Into<PathBuf>, policy: Policy) -> Self {
        SessionConfig {
            cli: CliOptions::new(cwd),
            policy,
            initialize: None,
            control_timeout: crate::core::CONTROL_TIMEOUT,
            transcript: false,
            parked_answers: Vec::new(),
            parkable: false,
        }
    }

    /// How to launch the CLI for this session, whichever transport the caller picks: the
    /// options, plus the policy's deny rules as the CLI's own `--disallowedTools` (defence in
    /// depth: the policy's hook decides every call, and the CLI holds the deny rules too).
    pub fn launch_options(&self) -> CliOptions {
        let mut cli = self.cli.clone();
        for rule in self.policy.deny_rules() {
            if !cli.disallowed_tools.iter().any(|existing| existing == rule) {
                cli.disallowed_tools.push(rule.to_owned());
            }
        }
        cli
    }
}

/// Why a session call failed.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The CLI could not be started.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The session has ended.
    #[error("the session has ended")]
    Ended,
    /// A control request failed.
    #[error(transparent)]
    Control(#[from] ControlFailure),
    /// An answer was not taken.
    #[error(transparent)]
    Answer(#[from] AnswerError),
    /// A response payload did not have the expected shape.
    #[error("unexpected response payload: {0}")]
    Payload(String),
}

/// What a handle asks of the actor. The payloads are boxed (a timer's id too): a queue holds
/// its slots from the start (tokio allocates them 32 at a time), and this keeps an idle
/// session's at 24 bytes each.
enum Command {
    SendUser(Box<(UserMessage, Option<crate::origin::Sender>)>),
    Control(Box<ControlRequestPayload>, oneshot::Sender<Result<ControlSuccess, ControlFailure>>),
    InterruptAll(oneshot::Sender<Result<ControlSuccess, ControlFailure>>),
    AnswerPermission(Box<Answer<PermissionAnswer>>, oneshot::Sender<Result<(), AnswerError>>),
    AnswerHook(Box<Answer<Value>>, oneshot::Sender<Result<(), AnswerError>>),
    Shutdown(Duration, oneshot::Sender<ShutdownStep>),
    Timer(Box<Timer>),
}

/// An answer to a request of the CLI's, and who gave it.
struct Answer<T> {
    request_id: String,
    answer: T,
    who: String,
}

/// A session's events, every one in order and none lost: what [`spawn_session`] returns beside
/// the handle.
///
/// The actor hands them over in batches, one per wake-up (the CLI's lines it found waiting, or
/// one command), so a busy session costs one queue operation per batch rather than per event,
/// and an idle one holds a queue of small slots. The actor waits while [`EVENT_QUEUE`] batches
/// are queued.
///
/// Or the owner hands them to an [`EventSink`] ([`SessionEvents::hand_to`]), which the actor
/// then calls itself: no task of the owner's, and no queue, on an event's path.
pub struct SessionEvents {
    batches: mpsc::Receiver<Vec<SessionEvent>>,
    ready: std::vec::IntoIter<SessionEvent>,
    handover: oneshot::Sender<Handover>,
}

impl std::fmt::Debug for SessionEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionEvents").finish_non_exhaustive()
    }
}

/// What an [`EventSink`] call returns.
pub type SinkFuture<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'a>>;

/// Takes a session's events in the session actor's own task ([`SessionEvents::hand_to`]).
///
/// The actor waits for each call, which holds the CLI back as a full queue would. Nothing a
/// sink does may wait for its own session's actor (a [`SessionHandle`] call from a sink would
/// never be answered): spawn such work.
pub trait EventSink: Send + 'static {
    /// The next events, in order (at least one).
    fn take(&mut self, events: Vec<SessionEvent>) -> SinkFuture<'_>;
    /// The session ended: every event was taken.
    fn end(self: Box<Self>) -> SinkFuture<'static>;
}

/// A sink, and the events queued before it was handed over (they go to it first).
struct Handover {
    sink: Box<dyn EventSink>,
    batches: mpsc::Receiver<Vec<SessionEvent>>,
    ready: Vec<SessionEvent>,
}

impl Handover {
    /// The events queued before the hand-over, in order: what was taken out of the queue, then
    /// what is still in it (its sender, the actor, sends nothing meanwhile, or is gone).
    fn queued(&mut self) -> Vec<SessionEvent> {
        let mut events = std::mem::take(&mut self.ready);
        while let Ok(batch) = self.batches.try_recv() {
            events.extend(batch);
        }
        events
    }
}

impl SessionEvents {
    /// Hands every event, from the first not yet taken, to `sink`, called in the actor's own
    /// task from its next wake-up on. If the session has already ended, a task of its own
    /// gives the sink what is left and ends it.
    pub fn hand_to(self, sink: Box<dyn EventSink>) {
        let SessionEvents { batches, ready, handover: slot } = self;
        let handover = Handover { sink, batches, ready: ready.collect() };
        if let Err(mut handover) = slot.send(handover) {
            // The actor is gone: nothing sends any more, and the queue holds the rest.
            tokio::spawn(async move {
                let events = handover.queued();
                if !events.is_empty() {
                    handover.sink.take(events).await;
                }
                handover.sink.end().await;
            });
        }
    }

    /// The next event; `None` once the session has ended and every event was taken. Cancel
    /// safe.
    pub async fn recv(&mut self) -> Option<SessionEvent> {
        loop {
            if let Some(event) = self.ready.next() {
                return Some(event);
            }
            self.ready = self.batches.recv().await?.into_iter();
        }
    }
}

/// A cheap handle to a running session. Clone it freely; every clone can steer the session and
/// answer its permission requests (the first answer wins).
#[derive(Clone)]
pub struct SessionHandle {
    /// The CLI process this session started (`None` for one that connected on its own).
    cli_run: Option<switchboard_transport::CliRun>,
    commands: mpsc::Sender<Command>,
    snapshot: watch::Receiver<SessionSnapshot>,
    observers: Observers,
}

impl std::fmt::Debug for SessionHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionHandle").finish_non_exhaustive()
    }
}

/// The broadcast for extra observers, created on the first `subscribe` (an idle session with
/// no observer pays nothing for it).
type Observers = Arc<OnceLock<broadcast::Sender<Arc<SessionEvent>>>>;

/// Starts a session over stdio: spawns the CLI ([`SessionConfig::launch_options`]) and the
/// actor. Returns the handle and the session's event stream (every event, in order, lossless;
/// the actor waits when it is full). A caller that picks another transport spawns it itself
/// and calls [`spawn_session_on`].
pub fn spawn_session(
    config: SessionConfig,
) -> Result<(SessionHandle, SessionEvents), SessionError> {
    let link = stdio::spawn(&config.launch_options())?;
    Ok(spawn_session_on(config, link))
}

/// Starts a session over a transport the caller already has: a CLI it started
/// ([`switchboard_transport::stdio::spawn`] or [`switchboard_transport::sdk_url::spawn`], with
/// [`SessionConfig::launch_options`]) or one that connected on its own
/// ([`switchboard_transport::sdk_url::external`]). `config.cli` only gives the cwd for rule
/// matching here; nothing is spawned.
pub fn spawn_session_on(
    config: SessionConfig,
    link: stdio::CliLink,
) -> (SessionHandle, SessionEvents) {
    start_actor(config, link, None)
}

/// What a warm CLI brings to its session ([`crate::pool::WarmCli`]): the `initialize` line
/// the pool already wrote, what the CLI said meanwhile (its answer first), and the permission
/// mode to set before the first prompt.
pub(crate) struct WarmStart {
    pub(crate) sent: Arc<str>,
    pub(crate) received: Vec<TransportEvent>,
    pub(crate) mode: Option<PermissionMode>,
}

/// Starts the actor on `link`; a warm one skips writing what the pool wrote.
pub(crate) fn start_actor(
    config: SessionConfig,
    link: stdio::CliLink,
    warm: Option<WarmStart>,
) -> (SessionHandle, SessionEvents) {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let mut core =
        SessionCore::new(config.policy.clone(), MatchContext { cwd: config.cli.cwd.clone(), home });
    core.set_control_timeout(config.control_timeout);
    if config.transcript {
        core.set_transcript();
    }
    core.set_parked_answers(config.parked_answers.clone());
    if config.parkable {
        core.set_parkable();
    }
    let (commands_tx, commands_rx) = mpsc::channel(COMMAND_QUEUE);
    let (events_tx, events_rx) = mpsc::channel(EVENT_QUEUE);
    let (handover_tx, handover_rx) = oneshot::channel();
    let (snapshot_tx, snapshot_rx) = watch::channel(core.snapshot());
    let observers: Observers = Arc::new(OnceLock::new());
    let actor = Actor {
        core,
        link,
        commands: commands_rx,
        self_commands: commands_tx.downgrade(),
        timers: JoinSet::new(),
        out: Out::Queue(events_tx),
        handover: Some(handover_rx),
        pending: Vec::new(),
        last_batch: 0,
        observers: observers.clone(),
        snapshot: snapshot_tx,
        control_replies: HashMap::new(),
    };
    let cli_run = actor.link.process.run().cloned();
    let initialize = (!config.transcript)
        .then(|| ControlRequestPayload::Initialize(config.initialize.unwrap_or_default()));
    tokio::spawn(actor.run(initialize, warm));
    let events =
        SessionEvents { batches: events_rx, ready: Vec::new().into_iter(), handover: handover_tx };
    (SessionHandle { cli_run, commands: commands_tx, snapshot: snapshot_rx, observers }, events)
}

struct Actor {
    core: SessionCore,
    link: stdio::CliLink,
    commands: mpsc::Receiver<Command>,
    self_commands: mpsc::WeakSender<Command>,
    /// The core's timers: each a task that sleeps and sends [`Command::Timer`] back. Owned
    /// here, so that none outlives the session (dropping the set aborts them): a sleeper left
    /// behind kept the command queue's memory for up to its whole duration after the session
    /// ended. (A `DelayQueue` instead cost every idle session about 5 KiB for its wheel.)
    timers: JoinSet<()>,
    /// Where events go: the owner's queue, until it hands them to a sink.
    out: Out,
    /// Where a sink arrives ([`SessionEvents::hand_to`]); `None` once one did, or the owner
    /// let the stream go.
    handover: Option<oneshot::Receiver<Handover>>,
    /// Events of this wake-up, handed on together by [`Actor::flush`].
    pending: Vec<SessionEvent>,
    /// How many events the last batch had: the next one's first event makes room for as
    /// many, where growing from empty moved a flat-out CLI's batch of 32 events (over 500
    /// bytes each) three times. An idle actor holds no room (a reader of its batches keeps
    /// the last one until the next: at most 64 places).
    last_batch: usize,
    observers: Observers,
    snapshot: watch::Sender<SessionSnapshot>,
    control_replies: HashMap<String, oneshot::Sender<Result<ControlSuccess, ControlFailure>>>,
}

impl Actor {
    /// The run's start: `initialize` (or a warm CLI's state); whether the CLI exited already.
    async fn start(
        &mut self,
        initialize: Option<ControlRequestPayload>,
        warm: Option<WarmStart>,
    ) -> bool {
        let mut effects = self.core.on_started(initialize);
        let mut exited = false;
        match warm {
            None => self.apply(effects).await,
            Some(warm) => {
                // The pool wrote this `initialize` when it warmed the CLI: the log records it
                // here all the same, but it is not written twice.
                let mut skipped = false;
                effects.retain(|effect| match effect {
                    Effect::Send(line) if !skipped && **line == *warm.sent => {
                        skipped = true;
                        false
                    }
                    _ => true,
                });
                // Prompts wait until the mode is set, and the session stays `starting` until
                // then, as a cold one does until `initialize` is answered.
                self.core.hold_prompts();
                self.apply(effects).await;
                // What the CLI said meanwhile: `initialize`'s answer, first.
                for event in warm.received {
                    if !exited {
                        exited = self.on_transport(event).await;
                    }
                }
                if let Some(mode) = warm.mode.filter(|_| !exited) {
                    let request =
                        SetPermissionModeRequest { mode, ..SetPermissionModeRequest::default() };
                    let (_, effects) = self
                        .core
                        .control_before_prompts(ControlRequestPayload::SetPermissionMode(request));
                    self.apply(effects).await;
                }
                let effects = self.core.release_prompts();
                self.apply(effects).await;
            }
        }
        self.flush().await;
        exited
    }

    /// The actor's life, as its task's future. Not an `async fn`: one keeps a copy of its
    /// arguments beside the locals they are moved into for the whole future's life (the actor
    /// twice, about 2 KiB a session), where an `async move` block uses what it captured in
    /// place. The start's arguments, read once, are boxed for the same reason.
    fn run(
        mut self,
        initialize: Option<ControlRequestPayload>,
        warm: Option<WarmStart>,
    ) -> impl std::future::Future<Output = ()> + Send {
        let start = Box::new((initialize, warm));
        async move {
            // Taken out of its box in a scope of its own, which frees the box at once (a
            // captured box emptied in place is freed only when the whole future ends).
            let (initialize, warm) = {
                let start = start;
                *start
            };
            // Boxed, as each wake-up's work is (see below).
            let exited = Box::pin(self.start(initialize, warm)).await;
            self.live(exited).await;
        }
    }

    /// The actor's wake-ups until its CLI exits, then its end.
    async fn live(&mut self, exited: bool) {
        let mut exited = exited;
        let mut shutdown_waiters: Vec<oneshot::Sender<ShutdownStep>> = Vec::new();
        let mut commands_open = true;
        while !exited {
            let wake = tokio::select! {
                arrived = handover(&mut self.handover), if self.handover.is_some() => {
                    Wake::Handover(arrived)
                }
                event = self.link.events.recv() => match event {
                    Some(event) => Wake::Transport(event),
                    None => break,
                },
                command = self.commands.recv(), if commands_open => Wake::Command(command),
            };
            // Boxed: what a wake-up's work holds lives only while it runs, so that a waiting
            // session's task holds its actor, not the largest of those states (about 3 KiB).
            let woken = Box::pin(self.wake(wake, &mut shutdown_waiters)).await;
            match woken {
                Woken::Exited => exited = true,
                Woken::CommandsClosed => commands_open = false,
                Woken::Done => {}
            }
        }
        Box::pin(self.finish()).await;
        let step = ShutdownStep::InputClosed;
        for waiter in shutdown_waiters {
            let _ = waiter.send(step);
        }
        let _ = self.snapshot.send(self.core.snapshot());
    }

    /// One wake-up's work; its events go out together at the end.
    async fn wake(
        &mut self,
        wake: Wake,
        shutdown_waiters: &mut Vec<oneshot::Sender<ShutdownStep>>,
    ) -> Woken {
        let mut woken = Woken::Done;
        match wake {
            // A sink handed over is taken at once: what was queued before it must not wait
            // for the CLI's next line (an idle session may say nothing for hours).
            Wake::Handover(arrived) => {
                self.handover = None;
                if let Ok(handover) = arrived {
                    self.install(handover).await;
                }
            }
            Wake::Transport(event) => {
                let mut exited = self.on_transport(event).await;
                // What else the CLI said meanwhile goes out in the same batch.
                for _ in 1..TRANSPORT_BATCH {
                    if exited {
                        break;
                    }
                    match self.link.events.try_recv() {
                        Ok(event) => exited = self.on_transport(event).await,
                        Err(_) => break,
                    }
                }
                if exited {
                    woken = Woken::Exited;
                }
            }
            Wake::Command(None) => {
                // Every handle is gone: end the CLI, and keep reading until it exits.
                self.begin_shutdown(SHUTDOWN_GRACE).await;
                woken = Woken::CommandsClosed;
            }
            Wake::Command(Some(command)) => match command {
                Command::SendUser(message) => {
                    let (message, by) = *message;
                    let effects = self.core.send_user_from(message, by);
                    self.apply(effects).await;
                }
                Command::Control(payload, reply) => {
                    let (request_id, effects) = self.core.control(*payload);
                    self.control_replies.insert(request_id, reply);
                    self.apply(effects).await;
                }
                Command::InterruptAll(reply) => {
                    let (request_id, effects) = self.core.interrupt_all();
                    self.control_replies.insert(request_id, reply);
                    self.apply(effects).await;
                }
                Command::AnswerPermission(answer, reply) => {
                    let Answer { request_id, answer, who } = *answer;
                    let result = self.core.answer_permission(&request_id, answer, &who);
                    self.answered(result, reply).await;
                }
                Command::AnswerHook(answer, reply) => {
                    let Answer { request_id, answer, who } = *answer;
                    let result = self.core.answer_hook(&request_id, answer, &who);
                    self.answered(result, reply).await;
                }
                Command::Shutdown(grace, reply) => {
                    shutdown_waiters.push(reply);
                    self.begin_shutdown(grace).await;
                }
                Command::Timer(timer) => {
                    let effects = self.core.on_timer(*timer);
                    self.apply(effects).await;
                }
            },
        }
        self.flush().await;
        woken
    }

    /// Feeds one event of the CLI's to the core; returns whether the CLI exited.
    async fn on_transport(&mut self, event: TransportEvent) -> bool {
        let effects = match event {
            TransportEvent::Line(received) => self.core.on_line(*received),
            TransportEvent::BadLine(error) => self.core.on_bad_line(*error),
            TransportEvent::Stderr(line) => self.core.on_stderr(*line),
            TransportEvent::Connected { reconnect } => self.core.on_connected(reconnect),
            TransportEvent::Disconnected => self.core.on_disconnected(),
            TransportEvent::Undelivered(line) => self.core.on_undelivered(&line),
            TransportEvent::Sent(line) => self.core.on_sent(&line),
            TransportEvent::Resent(line) => self.core.on_resent(&line),
            TransportEvent::Exited(exit) => {
                let description = exit.describe();
                let effects = self.core.on_exit(exit.code, exit.signal, description);
                self.apply(effects).await;
                return true;
            }
        };
        self.apply(effects).await;
        false
    }

    /// Interrupts a running turn, closes the CLI's input, and starts the SIGTERM / SIGKILL
    /// escalation in its own task; the loop keeps reading the CLI's last lines meanwhile.
    async fn begin_shutdown(&mut self, grace: Duration) {
        if self.core.state().is_final() {
            return;
        }
        self.core.on_shutdown_requested();
        if matches!(
            self.core.state(),
            crate::SessionState::Working | crate::SessionState::AwaitingPermission
        ) {
            let (_, effects) =
                self.core.control(ControlRequestPayload::Interrupt(InterruptRequest::new()));
            self.apply(effects).await;
        }
        // Closes the input now; SIGTERM and SIGKILL follow if the CLI stays (the transport's
        // one escalation). The loop goes on reading the CLI's last lines meanwhile.
        drop(self.link.process.begin_shutdown(grace));
    }

    async fn apply(&mut self, effects: Vec<Effect>) {
        // The core has already moved on: publish the snapshot first, so whoever receives one
        // of these events sees a snapshot at least as new.
        if self.core.take_changed() {
            let _ = self.snapshot.send(self.core.snapshot());
        }
        for effect in effects {
            match effect {
                Effect::Send(line) => {
                    // Queue without waiting for the flush: the actor must keep reading the
                    // CLI's output while the pipe drains. A line the link refuses (its input
                    // was closed: shutdown began, or a `--sdk-url` CLI is gone) never reaches
                    // the CLI, and the log says so.
                    let bytes = Bytes::from(line.as_bytes().to_vec());
                    if self.link.process.enqueue(bytes).await.is_err() {
                        let effects = self.core.on_undelivered(line.as_bytes());
                        Box::pin(self.apply(effects)).await;
                    }
                }
                Effect::Emit(event) => {
                    if let Some(observers) = self.observers.get() {
                        let _ = observers.send(Arc::new(event.clone()));
                    }
                    if self.pending.capacity() == 0 {
                        self.pending.reserve(self.last_batch.clamp(1, 2 * TRANSPORT_BATCH));
                    }
                    self.pending.push(event);
                }
                Effect::StartTimer(timer, after) => {
                    // Timers that have fired leave the set here (it holds their results).
                    while self.timers.try_join_next().is_some() {}
                    let commands = self.self_commands.clone();
                    self.timers.spawn(async move {
                        tokio::time::sleep(after).await;
                        if let Some(commands) = commands.upgrade() {
                            let _ = commands.send(Command::Timer(Box::new(timer))).await;
                        }
                    });
                }
                Effect::ControlDone(request_id, result) => {
                    if let Some(reply) = self.control_replies.remove(&request_id) {
                        // Whoever waits for the answer finds its events handed on.
                        Box::pin(self.flush()).await;
                        let _ = reply.send(result);
                    }
                }
                Effect::End => Box::pin(self.begin_shutdown(SHUTDOWN_GRACE)).await,
            }
        }
    }
}

impl Actor {
    /// Hands this wake-up's events on, in one batch; waits while the owner's queue is full.
    async fn flush(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let batch = std::mem::take(&mut self.pending);
        self.last_batch = batch.len();
        loop {
            let arrived = match (&mut self.out, self.handover.as_mut()) {
                (Out::Sink(sink), _) => return sink.take(batch).await,
                (Out::Gone, _) => return,
                // A closed queue (the owner let the stream go) drops the batch.
                (Out::Queue(queue), None) => {
                    if let Ok(permit) = queue.reserve().await {
                        permit.send(batch);
                    }
                    return;
                }
                // Waits for room, or for the owner to hand the events to a sink meanwhile
                // (with the queue this would wait on).
                (Out::Queue(queue), Some(handover)) => tokio::select! {
                    permit = queue.reserve() => {
                        if let Ok(permit) = permit {
                            permit.send(batch);
                        }
                        return;
                    }
                    arrived = handover => arrived,
                },
            };
            self.handover = None;
            if let Ok(handover) = arrived {
                self.install(handover).await;
            }
        }
    }

    /// Applies an answer's effects, and replies once its events are handed on.
    async fn answered(
        &mut self,
        result: Result<Vec<Effect>, AnswerError>,
        reply: oneshot::Sender<Result<(), AnswerError>>,
    ) {
        let (effects, result) = split(result);
        self.apply(effects).await;
        self.flush().await;
        let _ = reply.send(result);
    }

    /// From now on events go to `handover`'s sink, after what was queued before it came.
    async fn install(&mut self, mut handover: Handover) {
        let queued = handover.queued();
        let mut sink = handover.sink;
        if !queued.is_empty() {
            sink.take(queued).await;
        }
        self.out = Out::Sink(sink);
    }

    /// The run is over: the last events go out, and a sink hears the end.
    async fn finish(&mut self) {
        self.flush().await;
        // No hand-over is taken after this one: a later `hand_to` finds the way closed and
        // serves its sink from a task of its own (`close` keeps one sent before it, and that
        // sink still gets what was queued for it).
        if let Some(mut handover) = self.handover.take() {
            handover.close();
            if let Ok(handover) = handover.try_recv() {
                self.install(handover).await;
            }
        }
        if let Out::Sink(sink) = std::mem::replace(&mut self.out, Out::Gone) {
            sink.end().await;
        }
    }
}

/// What woke the actor.
enum Wake {
    Handover(Result<Handover, oneshot::error::RecvError>),
    Transport(TransportEvent),
    Command(Option<Command>),
}

/// What a wake-up's work left to the loop.
enum Woken {
    Done,
    /// The CLI exited: the run is over.
    Exited,
    /// Every handle is gone: no command will come.
    CommandsClosed,
}

/// A sink's arrival; pending forever once none can come (see the `select!` guard).
async fn handover(
    slot: &mut Option<oneshot::Receiver<Handover>>,
) -> Result<Handover, oneshot::error::RecvError> {
    match slot {
        Some(receiver) => receiver.await,
        None => std::future::pending().await,
    }
}

/// Where the actor's events go.
enum Out {
    /// The owner's queue ([`SessionEvents`]).
    Queue(mpsc::Sender<Vec<SessionEvent>>),
    /// A sink the owner handed the events to.
    Sink(Box<dyn EventSink>),
    /// The run is over.
    Gone,
}

fn split(result: Result<Vec<Effect>, AnswerError>) -> (Vec<Effect>, Result<(), AnswerError>) {
    match result {
        Ok(effects) => (effects, Ok(())),
        Err(error) => (Vec::new(), Err(error)),
    }
}

impl SessionHandle {
    /// The CLI process this session started, for the record (`None` for a CLI that connected
    /// on its own).
    pub fn cli_run(&self) -> Option<&switchboard_transport::CliRun> {
        self.cli_run.as_ref()
    }

    async fn call<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<T>) -> Command,
    ) -> Result<T, SessionError> {
        let (reply, result) = oneshot::channel();
        self.commands.send(make(reply)).await.map_err(|_| SessionError::Ended)?;
        result.await.map_err(|_| SessionError::Ended)
    }

    /// Sends a text prompt.
    pub async fn send_text(&self, text: impl Into<String>) -> Result<(), SessionError> {
        self.send_message(UserMessage::prompt(text)).await
    }

    /// Sends a prompt made of blocks (text, images).
    pub async fn send_blocks(&self, blocks: Vec<ContentBlock>) -> Result<(), SessionError> {
        self.send_message(UserMessage::blocks(blocks)).await
    }

    /// Sends a user message. While a turn runs the CLI queues it and runs it as its own turn.
    pub async fn send_message(&self, message: UserMessage) -> Result<(), SessionError> {
        self.send_message_from(message, None).await
    }

    /// Sends a user message from `by` (`token NAME (CHANNEL)`, and its origin): a permission
    /// request of the turns it starts records `by` as who started it, and a rule on origin
    /// judges by its origin (the sender travels with the message).
    pub async fn send_message_from(
        &self,
        message: UserMessage,
        by: Option<crate::origin::Sender>,
    ) -> Result<(), SessionError> {
        let command = Command::SendUser(Box::new((message, by)));
        self.commands.send(command).await.map_err(|_| SessionError::Ended)
    }

    /// Sends any control request and waits for the CLI's answer.
    pub async fn control(
        &self,
        payload: ControlRequestPayload,
    ) -> Result<ControlSuccess, SessionError> {
        Ok(self.call(|reply| Command::Control(Box::new(payload), reply)).await??)
    }

    /// Re-sends `initialize` (2.1.330 accepts it any time; 2.1.37 answers "Already
    /// initialized" with the pending permission requests, which this returns as an error).
    pub async fn initialize(
        &self,
        request: InitializeRequest,
    ) -> Result<InitializeResponse, SessionError> {
        let success = self.control(ControlRequestPayload::Initialize(request)).await?;
        decode_payload(&success)
    }

    /// Interrupts the current turn. A pending permission request is withdrawn by the CLI.
    pub async fn interrupt(&self) -> Result<(), SessionError> {
        self.control(ControlRequestPayload::Interrupt(InterruptRequest::new())).await.map(drop)
    }

    /// Interrupts the current turn and drops every prompt still queued behind it
    /// ([`SessionCore::interrupt_all`]).
    pub async fn interrupt_all(&self) -> Result<(), SessionError> {
        self.call(Command::InterruptAll).await??;
        Ok(())
    }

    /// Switches the model (from the next turn).
    pub async fn set_model(&self, model: impl Into<String>) -> Result<(), SessionError> {
        let request = SetModelRequest { model: Some(model.into()), ..SetModelRequest::default() };
        self.control(ControlRequestPayload::SetModel(request)).await.map(drop)
    }

    /// Switches the permission mode.
    pub async fn set_permission_mode(&self, mode: PermissionMode) -> Result<(), SessionError> {
        let request = SetPermissionModeRequest { mode, ..SetPermissionModeRequest::default() };
        self.control(ControlRequestPayload::SetPermissionMode(request)).await.map(drop)
    }

    /// Sets the thinking budget (`None` removes the override).
    pub async fn set_max_thinking_tokens(&self, tokens: Option<u64>) -> Result<(), SessionError> {
        let request =
            SetMaxThinkingTokensRequest { max_thinking_tokens: tokens, ..Default::default() };
        self.control(ControlRequestPayload::SetMaxThinkingTokens(request)).await.map(drop)
    }

    /// Lists MCP servers.
    pub async fn mcp_status(&self) -> Result<Value, SessionError> {
        let success =
            self.control(ControlRequestPayload::McpStatus(McpStatusRequest::new())).await?;
        decode_payload(&success)
    }

    /// Reconnects an MCP server.
    pub async fn mcp_reconnect(
        &self,
        server_name: impl Into<String>,
    ) -> Result<ControlSuccess, SessionError> {
        let request = McpReconnectRequest { server_name: server_name.into(), ..Default::default() };
        self.control(ControlRequestPayload::McpReconnect(request)).await
    }

    /// Enables or disables an MCP server.
    pub async fn mcp_toggle(
        &self,
        server_name: impl Into<String>,
        enabled: bool,
    ) -> Result<ControlSuccess, SessionError> {
        let request =
            McpToggleRequest { server_name: server_name.into(), enabled, ..Default::default() };
        self.control(ControlRequestPayload::McpToggle(request)).await
    }

    /// Replaces the MCP server set.
    pub async fn mcp_set_servers(
        &self,
        servers: serde_json::Map<String, Value>,
    ) -> Result<ControlSuccess, SessionError> {
        let request = McpSetServersRequest { servers, ..Default::default() };
        self.control(ControlRequestPayload::McpSetServers(request)).await
    }

    /// Sends a JSON-RPC message to an SDK MCP server.
    pub async fn mcp_message(
        &self,
        server_name: impl Into<String>,
        message: Value,
    ) -> Result<ControlSuccess, SessionError> {
        let request =
            McpMessageRequest { server_name: server_name.into(), message, ..Default::default() };
        self.control(ControlRequestPayload::McpMessage(request)).await
    }

    /// Restores files to the checkpoint of a user message.
    pub async fn rewind_files(
        &self,
        user_message_id: impl Into<String>,
        dry_run: bool,
    ) -> Result<ControlSuccess, SessionError> {
        let request = RewindFilesRequest {
            user_message_id: user_message_id.into(),
            dry_run: Some(dry_run),
            ..Default::default()
        };
        self.control(ControlRequestPayload::RewindFiles(request)).await
    }

    /// Answers a pending permission request. `who` is recorded with the decision.
    pub async fn respond_permission(
        &self,
        request_id: &str,
        answer: PermissionAnswer,
        who: &str,
    ) -> Result<(), SessionError> {
        let answer = Answer { request_id: request_id.to_owned(), answer, who: who.to_owned() };
        Ok(self.call(|reply| Command::AnswerPermission(Box::new(answer), reply)).await??)
    }

    /// Answers a pending hook callback.
    pub async fn respond_hook(
        &self,
        request_id: &str,
        output: &HookOutput,
        who: &str,
    ) -> Result<(), SessionError> {
        let output = serde_json::to_value(output)
            .map_err(|error| SessionError::Payload(error.to_string()))?;
        let answer =
            Answer { request_id: request_id.to_owned(), answer: output, who: who.to_owned() };
        Ok(self.call(|reply| Command::AnswerHook(Box::new(answer), reply)).await??)
    }

    /// What the session looks like now.
    pub fn snapshot(&self) -> SessionSnapshot {
        self.snapshot.borrow().clone()
    }

    /// Whether the CLI has ended (the state is final), without copying the snapshot. Whoever
    /// has seen the session's `exited` event sees it true: the actor publishes its snapshot
    /// before the events of the same step.
    pub fn cli_ended(&self) -> bool {
        self.snapshot.borrow().state.is_final()
    }

    /// A receiver of snapshot changes.
    pub fn watch(&self) -> watch::Receiver<SessionSnapshot> {
        self.snapshot.clone()
    }

    /// Another stream of the session's events, from now on. An observer that falls more than
    /// [`OBSERVER_BUFFER`] events behind is told it lagged.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<SessionEvent>> {
        self.observers.get_or_init(|| broadcast::channel(OBSERVER_BUFFER).0).subscribe()
    }

    /// Ends the session: interrupt a running turn, close the CLI's input, then SIGTERM and
    /// SIGKILL its process group after `grace` each. Returns when the CLI has exited.
    pub async fn shutdown(&self, grace: Duration) -> Result<(), SessionError> {
        match self.call(|reply| Command::Shutdown(grace, reply)).await {
            Ok(_) | Err(SessionError::Ended) => {}
            Err(error) => return Err(error),
        }
        let mut snapshot = self.snapshot.clone();
        let _ = snapshot.wait_for(|snapshot| snapshot.state.is_final()).await;
        Ok(())
    }
}

fn decode_payload<T: serde::de::DeserializeOwned>(
    success: &ControlSuccess,
) -> Result<T, SessionError> {
    match success.payload::<T>() {
        Some(Ok(value)) => Ok(value),
        Some(Err(error)) => Err(SessionError::Payload(error.to_string())),
        None => {
            serde_json::from_str("{}").map_err(|error| SessionError::Payload(error.to_string()))
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    #[cfg(target_pointer_width = "64")]
    fn a_command_slot_is_small() {
        // Every session's command queue holds a block of 32 of these from the start.
        assert_eq!(std::mem::size_of::<super::Command>(), 24);
    }
}
