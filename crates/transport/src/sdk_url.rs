//! The `--sdk-url` transport: the CLI is started with `--sdk-url ws://…/v1/sessions/ws/SLOT`
//! and connects to us over WebSocket, carrying a per-session bearer token. The token reaches it
//! on a file descriptor (`CLAUDE_CODE_WEBSOCKET_AUTH_FILE_DESCRIPTOR`), never in its
//! environment, which its tools inherit; a CLI launched by hand can be given it as
//! `CLAUDE_CODE_SESSION_ACCESS_TOKEN`.
//!
//! [`spawn`] starts the CLI and returns the usual [`CliLink`] plus an [`IngressSlot`]: the
//! server's WebSocket handler authenticates the CLI against the slot and moves bytes between
//! the socket and the slot ([`IngressSlot::connect`]); the session above sees the same lines
//! as over stdio, plus `Connected` / `Disconnected` events.
//!
//! How the CLI reconnects depends on its version (docs/protocol.md):
//! - 2.1.37 tries twice (about 1 s and 5 s after the drop), replays nothing, then ends its
//!   input and exits 0;
//! - 2.1.120 keeps trying for 600 s (backoff 1 s·2^(n-1), at most 30 s, ±25 % jitter), stops at
//!   close codes 1002, 4001 and 4003, and re-sends every line it wrote with a `uuid` (the last
//!   1000) on each reconnect.
//!
//! Lines the CLI sends twice are dropped by `uuid`. Toward the CLI a written frame is not a
//! delivered one (a socket can die with it in its buffer), so the slot keeps what it cannot
//! yet know arrived ([`Delivery`]): a prompt stays unconfirmed until the CLI echoes it
//! (`--replay-user-messages`) and is sent again, with the same `uuid`, on every reconnect (both
//! versions run a `uuid` once); a permission answer whose send failed is sent again (an answer
//! to a request the CLI no longer waits for is ignored). What never arrives is reported as
//! `Undelivered` before the CLI's exit. Only CLIs up to 2.1.120 accept a non-Anthropic
//! `--sdk-url` ([`MAX_SDK_URL_VERSION`]).
//!
//! The details the session relies on:
//!
//! - [`IngressSlot::connect`] gives an [`IngressReader`] and an [`IngressWriter`]; the server
//!   hands the socket's frames to the session with [`IngressReader::attach`], and its task reads
//!   them ([`crate::events`]). The session hears `Connected { reconnect }`, per
//!   line it writes `Sent` (or `Resent`), and `Disconnected` once both halves are gone, after
//!   the last frame's lines, in queue room reserved when the connection began, so a full queue
//!   cannot lose it.
//! - Lines queued while the CLI is away wait in the slot. A repeated incoming line is one whose
//!   `uuid` is among the last [`SEEN_UUIDS`]; the model's output is looked up only where the
//!   CLI may send it again (a reconnected socket, a hybrid POST), other kinds always.
//! - Prompts wait in [`Delivery`] until their echo or a later prompt's (bounded by count and
//!   bytes), answers whose send failed until written; a new connection sends those first, in
//!   their first order. At the CLI's exit what is left is reported `Undelivered` before
//!   `Exited`, and the queue is closed, so later lines are refused (the actor reports those).
//! - The socket's writer never waits for the session's queue (its stamps go with `try_send`,
//!   or a task of their own when it is full): the actor may be waiting to queue a line for that
//!   very writer.
//! - [`external`] is the same slot with no process, for a CLI that connects on its own (the
//!   relay's `/`): its socket's end is its exit.

use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use std::task::{Context, Poll};
use switchboard_protocol::codec::{Decoder, LineError, LineErrorKind, Position};
use switchboard_protocol::{Envelope, Received};
use tokio::sync::{mpsc, oneshot, watch, OwnedMutexGuard};

use crate::events::{Events, Frames};
use crate::stdio::{
    self, CliLink, CliOptions, CliProcess, TransportError, TransportEvent, WriterCommand,
};

/// The environment variable that carries the session's token to the CLI.
pub const SESSION_TOKEN_ENV: &str = "CLAUDE_CODE_SESSION_ACCESS_TOKEN";

/// The variable that names the file descriptor a CLI reads its session token from instead
/// ([`stdio::SECRET_FD`]).
pub const AUTH_FD_ENV: &str = "CLAUDE_CODE_WEBSOCKET_AUTH_FILE_DESCRIPTOR";

/// The newest CLI that connects to a non-Anthropic `--sdk-url` (2.1.121 refuses).
pub const MAX_SDK_URL_VERSION: (u32, u32, u32) = (2, 1, 120);

/// Line uuids remembered to drop lines the CLI sends twice: a reconnecting CLI replays from a
/// buffer of its last 1,000 messages.
pub const SEEN_UUIDS: usize = 1024;

type OutgoingQueue = Arc<tokio::sync::Mutex<mpsc::Receiver<WriterCommand>>>;

/// Where one CLI connects.
pub struct IngressSlot {
    /// The slot's id (the last path segment of its URL).
    pub id: String,
    token: String,
    /// Lines for the CLI, written by the session, taken by whichever connection is up.
    outgoing: OutgoingQueue,
    events: mpsc::Sender<TransportEvent>,
    /// Where connections hand their frames to the session's [`Events`].
    connections: mpsc::Sender<Box<Connection>>,
    /// Whether a connection came before (the next one is a reconnect).
    connected_before: AtomicBool,
    /// The session closed its input: refuse new connections.
    closed: AtomicBool,
    seen: Mutex<SeenLines>,
    /// The newest claim on the slot: a connection holds it while this is its ticket. A new
    /// connection (or [`IngressSlot::disconnect`]) takes the next ticket, and the one up now
    /// lets go at once.
    claim: watch::Sender<u64>,
    tickets: std::sync::atomic::AtomicU64,
    /// For a CLI Switchboard did not start (it connected on its own): its socket closing is
    /// its end, reported as an exit.
    external_exit: Option<watch::Sender<bool>>,
    /// What was sent that may not have arrived.
    delivery: Mutex<Delivery>,
}

/// What the slot knows of the lines it sent.
#[derive(Debug, Default)]
struct Delivery {
    /// The CLI echoes each prompt (it runs with `--replay-user-messages`): prompts with a
    /// `uuid` are kept in `unconfirmed` from their first send to their echo.
    confirms: bool,
    /// Prompts sent and not echoed yet, oldest first (at most [`UNCONFIRMED_LIMIT`] of them and
    /// [`UNCONFIRMED_BYTES`] in all).
    unconfirmed: indexmap::IndexMap<String, Bytes>,
    unconfirmed_bytes: usize,
    /// Lines whose send failed that are safe to send again, oldest first; each stays until a
    /// connection has written it.
    retry: VecDeque<Bytes>,
    /// What the current connection sends before the queue: on a reconnect, the unconfirmed
    /// prompts and the lines to retry, in the order they were first sent.
    replay: VecDeque<Bytes>,
    /// Lines a connection took from the queue while it was let go, never written
    /// ([`IngressWriter::hold_next`]): the next connection takes them first, as from the queue.
    held: VecDeque<Bytes>,
}

/// Prompts kept unconfirmed at most: past it (or past [`UNCONFIRMED_BYTES`]) the oldest is
/// given up and reported undelivered, so a CLI that never echoes cannot grow the slot without
/// bound.
pub const UNCONFIRMED_LIMIT: usize = 1000;

/// The bytes of unconfirmed prompts kept at most (a few large prompts reach it before
/// [`UNCONFIRMED_LIMIT`]).
pub const UNCONFIRMED_BYTES: usize = 64 * 1024 * 1024;

impl Delivery {
    /// Confirms the prompt `uuid` and every one sent before it: the CLI runs prompts in the
    /// order they came, and 2.1.37 echoes a turn's prompt only after its first assistant
    /// message (a local slash command's, never).
    fn confirm(&mut self, uuid: &str) {
        if let Some(position) = self.unconfirmed.get_index_of(uuid) {
            for (_, line) in self.unconfirmed.drain(..=position) {
                self.unconfirmed_bytes -= line.len();
            }
        }
    }

    /// Keeps a prompt until its echo; returns the prompts given up to stay in bounds.
    fn keep(&mut self, uuid: String, line: Bytes) -> Vec<Bytes> {
        self.unconfirmed_bytes += line.len();
        if let Some(old) = self.unconfirmed.insert(uuid, line) {
            self.unconfirmed_bytes -= old.len();
        }
        let mut given_up = Vec::new();
        while self.unconfirmed.len() > UNCONFIRMED_LIMIT
            || (self.unconfirmed_bytes > UNCONFIRMED_BYTES && self.unconfirmed.len() > 1)
        {
            let Some((_, line)) = self.unconfirmed.shift_remove_index(0) else { break };
            self.unconfirmed_bytes -= line.len();
            given_up.push(line);
        }
        given_up
    }
}

impl std::fmt::Debug for IngressSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IngressSlot").field("id", &self.id).finish_non_exhaustive()
    }
}

impl IngressSlot {
    fn new(
        id: String,
        token: String,
        outgoing: mpsc::Receiver<WriterCommand>,
        events: mpsc::Sender<TransportEvent>,
        connections: mpsc::Sender<Box<Connection>>,
        external_exit: Option<watch::Sender<bool>>,
    ) -> Arc<IngressSlot> {
        Arc::new(IngressSlot {
            id,
            token,
            outgoing: Arc::new(tokio::sync::Mutex::new(outgoing)),
            events,
            connections,
            connected_before: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            seen: Mutex::new(SeenLines::default()),
            claim: watch::channel(0).0,
            tickets: std::sync::atomic::AtomicU64::new(0),
            external_exit,
            delivery: Mutex::new(Delivery::default()),
        })
    }

    /// Tells the session about a line, without waiting: the socket's writer must never wait
    /// for the session's queue, whose reader may itself be waiting to queue a line for this
    /// writer. When the queue is full the news goes on a task of its own (one per line
    /// written, so bounded by the write queue).
    pub(crate) fn stamp(&self, event: TransportEvent) {
        match self.events.try_send(event) {
            Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => {}
            Err(mpsc::error::TrySendError::Full(event)) => {
                let events = self.events.clone();
                tokio::spawn(async move {
                    let _ = events.send(event).await;
                });
            }
        }
    }

    fn delivery(&self) -> parking_lot::MutexGuard<'_, Delivery> {
        self.delivery.lock()
    }

    /// Notes a line read from the CLI: an echo of a prompt (`isReplay`) confirms it.
    fn note_incoming(&self, received: &Received) {
        if let switchboard_protocol::Message::User(user) = received.message.readable() {
            if user.is_replay == Some(true) {
                if let Some(uuid) = &user.uuid {
                    let mut delivery = self.delivery();
                    if delivery.confirms {
                        delivery.confirm(uuid);
                    }
                }
            }
        }
    }

    /// The lines that never reached the CLI, once it is gone: unconfirmed prompts, lines to
    /// retry, and what is still queued, oldest first. Ends the current connection first (its
    /// writer holds the queue), and closes the queue: a line the session sends after this is
    /// refused at once, and the session reports it.
    pub async fn take_undelivered(&self) -> Vec<Bytes> {
        self.closed.store(true, Ordering::SeqCst);
        self.take_ticket();
        let mut outgoing = self.outgoing.lock().await;
        outgoing.close();
        let mut lines: Vec<Bytes> = {
            let mut delivery = self.delivery();
            let delivery = &mut *delivery;
            delivery.replay.clear();
            delivery.unconfirmed_bytes = 0;
            let mut lines: Vec<Bytes> =
                std::mem::take(&mut delivery.unconfirmed).into_values().collect();
            lines.extend(delivery.retry.drain(..));
            lines.extend(delivery.held.drain(..));
            lines
        };
        while let Ok(WriterCommand::Line(command)) = outgoing.try_recv() {
            let (line, done) = *command;
            let _ = done.send(Ok(()));
            lines.push(line);
        }
        lines
    }

    /// Whether `presented` is this slot's token (constant time).
    pub fn accepts(&self, presented: &str) -> bool {
        subtle::ConstantTimeEq::ct_eq(self.token.as_bytes(), presented.as_bytes()).into()
    }

    /// The slot's token: a secret, for launching the CLI by hand (`CLAUDE_CODE_SESSION_ACCESS_TOKEN`).
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Whether the session ended its input (no connection is accepted any more).
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Takes the slot for a new WebSocket: the reading and the writing half of the
    /// connection, for a socket read by one task and written by another (a frame read then
    /// needs no poll of the writing side). The session hears of the disconnection once both
    /// are dropped.
    ///
    /// The newest connection wins: an older one still holding the slot is told to let go
    /// ([`IngressWriter::replaced`]) and is waited for only while it finishes the frame it is
    /// on. A CLI whose old socket died silently is served as soon as it reconnects, not after
    /// the dead socket's ping timeout. `None` when the session is over, or when a newer
    /// connection came while this one waited.
    pub async fn connect(self: &Arc<Self>) -> Option<(IngressReader, IngressWriter)> {
        if self.is_closed() {
            return None;
        }
        let ticket = self.take_ticket();
        let outgoing = self.outgoing.clone().lock_owned().await;
        if *self.claim.borrow() != ticket || self.is_closed() {
            return None;
        }
        let reconnect = self.connected_before.swap(true, Ordering::SeqCst);
        let held_ahead = {
            // Sent again first, in the order first sent: what this CLI may not have. (Built
            // afresh each time: what an earlier connection did not get to stays in
            // `unconfirmed` and `retry` until written.)
            let mut delivery = self.delivery();
            let delivery = &mut *delivery;
            let mut replay: VecDeque<Bytes> = delivery.unconfirmed.values().cloned().collect();
            replay.extend(delivery.retry.iter().cloned());
            delivery.replay = replay;
            delivery.held.len()
        };
        let _ = self.events.send(TransportEvent::Connected { reconnect }).await;
        // Room for the end of the connection is taken now: a queue that is full when the
        // socket goes cannot lose the news (it was sent with `try_send`, and could).
        let disconnected = self.events.clone().reserve_owned().await.ok()?;
        let exited = match &self.external_exit {
            Some(_) => Some(self.events.clone().reserve_owned().await.ok()?),
            None => None,
        };
        let end = Arc::new(ConnectionEnd {
            slot: self.clone(),
            disconnected: Some(disconnected),
            exited,
        });
        Some((
            IngressReader { end: end.clone(), decoder: Decoder::default(), reconnect },
            IngressWriter { end, outgoing, ticket, held_ahead },
        ))
    }

    /// The next claim on the slot; whoever holds it now is told to let go.
    fn take_ticket(&self) -> u64 {
        let ticket = self.tickets.fetch_add(1, Ordering::SeqCst) + 1;
        self.claim.send_replace(ticket);
        ticket
    }

    /// Makes the server drop the CLI's current socket (the CLI reconnects by itself).
    pub fn disconnect(&self) {
        self.take_ticket();
    }

    /// The hybrid transport's `POST …/events` body: each event is one message (a JSON value),
    /// delivered like a line from the socket (with the same de-duplication).
    pub async fn post_events(&self, events: &[&serde_json::value::RawValue]) {
        for event in events {
            let item = Received::decode(event.get().as_bytes()).map_err(|error| LineError {
                position: Position { line: 0, offset: 0 },
                preview: switchboard_protocol::codec::preview(event.get().as_bytes()),
                kind: LineErrorKind::Malformed(error.to_string()),
                control_request: switchboard_protocol::codec::ControlRef::of(
                    event.get().as_bytes(),
                ),
            });
            // A POST may be sent again (the CLI retries one whose answer it lost).
            if !self.deliver(item, true).await {
                return;
            }
        }
    }

    /// Hands one decoded line (or bad line) to the session, unless the CLI sent it before;
    /// false when the session is gone. `again` says whether this line may be one the CLI sent
    /// before (see [`IngressSlot::is_new`]).
    async fn deliver(&self, item: Result<Received, LineError>, again: bool) -> bool {
        match self.accept(item, again) {
            Some(event) => self.events.send(event).await.is_ok(),
            None => true,
        }
    }

    /// One decoded line (or bad line) as the session hears it; `None` for a line the CLI sent
    /// before.
    fn accept(&self, item: Result<Received, LineError>, again: bool) -> Option<TransportEvent> {
        match item {
            Ok(received) if !self.is_new(&received, again) => None,
            Ok(received) => {
                self.note_incoming(&received);
                Some(TransportEvent::Line(Box::new(received)))
            }
            Err(error) => Some(TransportEvent::BadLine(Box::new(error))),
        }
    }

    /// Whether a line was not seen before, by its `uuid`; lines without one always are.
    /// Every line's `uuid` is remembered, and looked up unless the line cannot be a repeat:
    /// the model's output (`stream_event`, `assistant`, `result`) on a CLI's first socket. A
    /// CLI sends those again only when it reconnects (it replays its last messages), or in a
    /// hybrid POST it retries (`again`). Other kinds are always looked up: a prompt the CLI is
    /// sent twice with one `uuid` runs once but is echoed twice. The model's output is nearly
    /// every line, and most CLIs never reconnect, so most lines skip the lookup.
    fn is_new(&self, received: &Received, again: bool) -> bool {
        use switchboard_protocol::Message;
        let Some(uuid) = received.uuid() else { return true };
        let mut seen = self.seen.lock();
        let fingerprint = fingerprint(&uuid);
        let output = matches!(
            received.message,
            Message::StreamEvent(_) | Message::Assistant(_) | Message::Result(_)
        );
        if again || !output {
            return seen.first_time(fingerprint);
        }
        seen.remember(fingerprint);
        true
    }
}

/// The last [`SEEN_UUIDS`] line uuids of a connection, as 64-bit fingerprints in a ring, at
/// most 8 KiB however long the CLI stays (a hash set and a queue of the uuids themselves took
/// about 400 KB per long-lived connection). Looking one up scans the ring, which the compiler
/// vectorises: about a quarter of a microsecond when full.
#[derive(Debug, Default)]
struct SeenLines {
    ring: Vec<u64>,
    /// Where the next fingerprint goes once the ring is full (the oldest's place).
    next: usize,
}

impl SeenLines {
    /// Remembers `fingerprint` without looking it up.
    fn remember(&mut self, fingerprint: u64) {
        if self.ring.len() < SEEN_UUIDS {
            self.ring.push(fingerprint);
        } else {
            self.ring[self.next] = fingerprint;
            self.next = (self.next + 1) % SEEN_UUIDS;
        }
    }

    /// Whether `fingerprint` is new; it is remembered either way.
    fn first_time(&mut self, fingerprint: u64) -> bool {
        // Eight at a time without an early exit, so that the loop is vectorised.
        let mut chunks = self.ring.chunks_exact(8);
        let seen = chunks
            .by_ref()
            .any(|chunk| chunk.iter().fold(false, |seen, &x| seen | (x == fingerprint)))
            || chunks.remainder().contains(&fingerprint);
        if seen {
            return false;
        }
        self.remember(fingerprint);
        true
    }
}

/// A line uuid's fingerprint. The CLI's are random UUIDs: their 128 bits folded to 64 (the
/// canonical spelling only; another spelling of the same number is another text). Anything
/// else is hashed with fixed keys. A new line is taken for one of the last 1,024 with a chance
/// of 1,024 in 2^64 (about 1 in 10^16), and a CLI that made fingerprints collide on purpose
/// would only drop lines of its own session.
fn fingerprint(uuid: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let canonical = uuid.len() == 36 && !uuid.bytes().any(|byte| byte.is_ascii_uppercase());
    match uuid::Uuid::try_parse(uuid) {
        Ok(parsed) if canonical => {
            let (high, low) = parsed.as_u64_pair();
            high ^ low
        }
        _ => {
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            uuid.hash(&mut hasher);
            hasher.finish()
        }
    }
}

/// What reads a CLI connection's frames; see [`IngressSlot::connect`].
#[allow(missing_debug_implementations)] // A decoder's buffer and a shared end: nothing to show.
pub struct IngressReader {
    end: Arc<ConnectionEnd>,
    decoder: Decoder,
    /// The CLI connected before: this socket may begin with lines it sent on the last one.
    reconnect: bool,
}

/// What writes a CLI connection's lines; see [`IngressSlot::connect`].
#[allow(missing_debug_implementations)] // A queue's guard and a shared end: nothing to show.
pub struct IngressWriter {
    // Dropped first (fields drop in order): `Disconnected` is sent before the slot is free.
    end: Arc<ConnectionEnd>,
    outgoing: OwnedMutexGuard<mpsc::Receiver<WriterCommand>>,
    /// This connection's claim on the slot.
    ticket: u64,
    /// How many of the slot's held lines came before this connection (it takes those first).
    held_ahead: usize,
}

/// Dropped when the connection's last half is: the session hears that the CLI disconnected
/// (after every line the connection read).
struct ConnectionEnd {
    slot: Arc<IngressSlot>,
    /// Queue room for `Disconnected`, taken when the connection began.
    disconnected: Option<mpsc::OwnedPermit<TransportEvent>>,
    /// Queue room for `Exited`, for a CLI that connected on its own.
    exited: Option<mpsc::OwnedPermit<TransportEvent>>,
}

impl IngressReader {
    /// A frame from the CLI, read by the caller's task: its lines go to the session through
    /// its queue (lines seen before are dropped). The server hands its sockets over with
    /// [`IngressReader::attach`] instead.
    pub async fn incoming(&mut self, payload: &[u8]) {
        self.decoder.push(payload);
        while let Some(item) = self.decoder.next_item() {
            if !self.end.slot.deliver(item, self.reconnect).await {
                return;
            }
        }
    }

    /// Hands the connection's frames to the session: its [`Events`] read them, in the
    /// session's own task, after whatever was queued before (see [`crate::events`]). What
    /// this returns resolves once they are done with them: the frames ended (the socket's end,
    /// or a stop the caller asked of them, after the frame they were on), or the session is
    /// gone. Drop the connection's writer after that, so that its end follows its last line.
    pub async fn attach(self, frames: Box<dyn Frames>) -> Attached {
        let (done, attached) = oneshot::channel();
        let slot = self.end.slot.clone();
        let nudge = Arc::new(Nudge::default());
        let connection = Box::new(Connection {
            frames,
            reader: self,
            waker: std::task::Waker::from(nudge.clone()),
            nudge: nudge.clone(),
            started: false,
            _done: done,
        });
        // A session gone drops it at once, and the caller hears that at once.
        let _ = slot.connections.send(connection).await;
        Attached { done: attached, nudge }
    }
}

/// A connection handed to the session's [`Events`] ([`IngressReader::attach`]), read there.
pub(crate) struct Connection {
    // Fields drop in order: the socket's half, then the reader (its share of the connection's
    // end), then the holder is told.
    frames: Box<dyn Frames>,
    /// Its decoder holds the rest of the last frame read: its lines are decoded one at a time,
    /// as they are heard (a 64 MiB frame of short lines is never millions of events at once).
    reader: IngressReader,
    /// What the frames are polled with ([`Nudge`]).
    waker: std::task::Waker,
    nudge: Arc<Nudge>,
    /// A line of it was heard.
    started: bool,
    _done: oneshot::Sender<()>,
}

/// The waker a connection's frames are polled with: it notes that they woke, then wakes the
/// session's task. The session's task is polled for many reasons (its commands, its other
/// queues, its own batch's next event) and a socket polled each time reads it each time
/// (tungstenite prepares its read buffer for every read, found empty or not); with this, a
/// connection's frames are polled again only once they woke.
#[derive(Default)]
struct Nudge {
    woken: AtomicBool,
    /// The frames said pending when last polled (they have nothing the session has not read,
    /// unless they woke since).
    waiting: AtomicBool,
    task: Mutex<Option<std::task::Waker>>,
}

impl std::task::Wake for Nudge {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        if let Some(task) = &*self.task.lock() {
            task.wake_by_ref();
        }
    }
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection").field("started", &self.started).finish_non_exhaustive()
    }
}

impl Connection {
    /// The connection's next event: a line of a frame read, or of the next frame; `None` once
    /// its frames ended. `task`: the waker to wake when the frames do (none: the one given
    /// last).
    pub(crate) fn poll_event(
        &mut self,
        task: Option<&std::task::Waker>,
    ) -> Poll<Option<TransportEvent>> {
        if let Some(task) = task {
            let mut registered = self.nudge.task.lock();
            if !registered.as_ref().is_some_and(|old| old.will_wake(task)) {
                *registered = Some(task.clone());
            }
        }
        loop {
            let reader = &mut self.reader;
            while let Some(item) = reader.decoder.next_item() {
                if let Some(event) = reader.end.slot.accept(item, reader.reconnect) {
                    self.started = true;
                    return Poll::Ready(Some(event));
                }
            }
            // Taken before the poll: a wake during it is not lost.
            let woken = self.nudge.woken.swap(false, Ordering::AcqRel);
            if self.nudge.waiting.load(Ordering::Relaxed) && !woken {
                return Poll::Pending;
            }
            let polled = self.frames.poll_frame(&mut Context::from_waker(&self.waker));
            self.nudge.waiting.store(polled.is_pending(), Ordering::Relaxed);
            let Some(payload) = std::task::ready!(polled) else {
                return Poll::Ready(None);
            };
            self.reader.decoder.push(&payload);
        }
    }

    /// A line of it was heard.
    pub(crate) fn started(&self) -> bool {
        self.started
    }
}

/// Resolves once the session is done with a connection's frames ([`IngressReader::attach`]).
pub struct Attached {
    done: oneshot::Receiver<()>,
    nudge: Arc<Nudge>,
}

impl Attached {
    /// Whether the session may not have read all the socket has for it: it has not polled the
    /// frames since they woke, or since they last gave a frame (it is busy elsewhere, storing a
    /// batch, say). A socket's silence then says nothing about the CLI.
    pub fn behind(&self) -> bool {
        self.nudge.woken.load(Ordering::Acquire) || !self.nudge.waiting.load(Ordering::Relaxed)
    }
}

impl std::fmt::Debug for Attached {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Attached").field("behind", &self.behind()).finish_non_exhaustive()
    }
}

impl std::future::Future for Attached {
    type Output = ();

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        // Nothing is ever sent: the sender's drop is the news.
        std::pin::Pin::new(&mut self.done).poll(cx).map(|_| ())
    }
}

impl IngressWriter {
    /// The next line for the CLI (with its newline: every frame must end in `\n`, or 2.1.37
    /// glues it to the next and dies): first what a reconnect sends again, then the session's
    /// queue. `None` when the session closed its input: close the socket then.
    pub async fn next_outgoing(&mut self) -> Option<Outgoing> {
        {
            let mut delivery = self.end.slot.delivery();
            while let Some(line) = delivery.replay.pop_front() {
                // A prompt confirmed since the connection began (2.1.120 replays its echoes
                // first) needs no second copy.
                let confirmed = prompt_uuid(&line)
                    .is_some_and(|uuid| !delivery.unconfirmed.contains_key(&uuid));
                if !confirmed {
                    return Some(Outgoing { line, again: true });
                }
            }
            // Only what was held before this connection began (in the queue's order): what it
            // holds itself is for the next one.
            if self.held_ahead > 0 {
                self.held_ahead -= 1;
                if let Some(line) = delivery.held.pop_front() {
                    drop(delivery);
                    return Some(self.taken(line));
                }
            }
        }
        let line = self.next_queued().await?;
        Some(self.taken(line))
    }

    /// The session's next queued line (its sender hears it was taken); `None` once the session
    /// closed its input.
    async fn next_queued(&mut self) -> Option<Bytes> {
        match self.outgoing.recv().await {
            Some(WriterCommand::Line(command)) => {
                let (line, done) = *command;
                let _ = done.send(Ok(()));
                Some(line)
            }
            None => {
                self.end.slot.closed.store(true, Ordering::SeqCst);
                None
            }
        }
    }

    /// A line taken to be written: a prompt the CLI confirms is kept until it does.
    fn taken(&self, line: Bytes) -> Outgoing {
        let given_up = {
            let mut delivery = self.end.slot.delivery();
            match prompt_uuid(&line) {
                Some(uuid) if delivery.confirms => delivery.keep(uuid, line.clone()),
                _ => Vec::new(),
            }
        };
        for old in given_up {
            self.end.slot.stamp(TransportEvent::Undelivered(Box::new(old)));
        }
        Outgoing { line, again: false }
    }

    /// Takes the session's next queued line without writing it, for the next connection: this
    /// one is being let go, and its session may be waiting for room in that queue, reading
    /// nothing until it has it (the server takes the queue's lines this way while the session
    /// reads past the connection's last frame). The next connection writes what is held after
    /// what it sends again and before the queue, in the order the session queued it; at the
    /// CLI's end it is undelivered. `false` once the session closed its input.
    pub async fn hold_next(&mut self) -> bool {
        let Some(line) = self.next_queued().await else { return false };
        self.end.slot.delivery().held.push_back(line);
        true
    }

    /// Resolves when this connection must let go of the slot: a newer connection came, or
    /// [`IngressSlot::disconnect`] was called. Made once per connection, it hears a claim made
    /// at any moment.
    pub fn replaced(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut claim = self.end.slot.claim.subscribe();
        let ticket = self.ticket;
        async move {
            let _ = claim.wait_for(|newest| *newest != ticket).await;
        }
    }

    /// `line` (taken with [`Self::next_outgoing`]) was written to the socket: the session
    /// records when (and that it went again, after a reconnect).
    pub fn sent(&mut self, line: Outgoing) {
        let event = match line.again {
            true => {
                let mut delivery = self.end.slot.delivery();
                if let Some(at) = delivery.retry.iter().position(|old| *old == line.line) {
                    delivery.retry.remove(at);
                }
                TransportEvent::Resent(Box::new(line.line))
            }
            false => TransportEvent::Sent(Box::new(line.line)),
        };
        self.end.slot.stamp(event);
    }

    /// The socket failed while sending `line` (taken with [`Self::next_outgoing`]). A prompt
    /// the CLI confirms is sent again on the next connection (it is still unconfirmed), and so
    /// is a control response; anything else may or may not have arrived, and the session
    /// records that.
    pub fn undelivered(&mut self, line: Outgoing) {
        let line = line.line;
        {
            let mut delivery = self.end.slot.delivery();
            let tracked = delivery.confirms
                && prompt_uuid(&line).is_some_and(|uuid| delivery.unconfirmed.contains_key(&uuid));
            if tracked {
                return;
            }
            if Envelope::parse(&line).is_ok_and(|envelope| envelope.kind() == "control_response") {
                if !delivery.retry.contains(&line) {
                    delivery.retry.push_back(line);
                }
                return;
            }
        }
        self.end.slot.stamp(TransportEvent::Undelivered(Box::new(line)));
    }
}

/// A line for the CLI, as taken from the slot.
#[derive(Debug, Clone)]
pub struct Outgoing {
    /// The line, with its newline.
    pub line: Bytes,
    /// Sent before, on an earlier connection.
    pub again: bool,
}

/// The `uuid` of a prompt for the CLI (a `user` line), if it has one.
fn prompt_uuid(line: &[u8]) -> Option<String> {
    let envelope = Envelope::parse(line).ok()?;
    (envelope.kind() == "user").then_some(())?;
    envelope.uuid.map(|uuid| uuid.into_owned())
}

impl Drop for ConnectionEnd {
    fn drop(&mut self) {
        if let Some(permit) = self.disconnected.take() {
            permit.send(TransportEvent::Disconnected);
        }
        if let Some(exited) = &self.slot.external_exit {
            // A CLI that connected on its own has no process here: its socket was all of it.
            self.slot.closed.store(true, Ordering::SeqCst);
            exited.send_replace(true);
            // Reported as a clean end: over a relay, a closed socket is how Claude Code says it
            // is done (the agents-ui relay protocol); the note says what was actually seen.
            let exit = stdio::ExitInfo {
                code: Some(0),
                signal: None,
                stderr_tail: "(an externally launched CLI: its WebSocket closed)".to_owned(),
                wrote_output: true,
            };
            if let Some(permit) = self.exited.take() {
                permit.send(TransportEvent::Exited(Box::new(exit)));
            }
        }
    }
}

/// A session for a CLI that connects on its own (the agents-ui relay protocol: the CLI was launched
/// elsewhere with `--sdk-url` pointing at us). No process is started; the socket closing ends
/// the session.
pub fn external(slot_id: &str) -> (CliLink, Arc<IngressSlot>) {
    let (events_tx, events) = mpsc::channel(stdio::EVENT_QUEUE);
    let (writer_tx, writer_rx) = mpsc::channel(stdio::WRITE_QUEUE);
    let (exited_tx, exited) = watch::channel(false);
    let (connections_tx, connections) = mpsc::channel(1);
    let slot = IngressSlot::new(
        slot_id.to_owned(),
        random_hex(),
        writer_rx,
        events_tx,
        connections_tx,
        Some(exited_tx),
    );
    let events = Events::with_connections(events, connections);
    (CliLink { events, process: CliProcess::new(None, writer_tx, exited, None) }, slot)
}

/// Starts a CLI that connects to `base` + a new random slot id (`base` is
/// `ws://HOST:PORT/v1/sessions/ws/`). The caller's server must route that URL's WebSocket to
/// the returned slot ([`IngressSlot::id`]).
pub fn spawn(
    options: &CliOptions,
    base: &str,
) -> Result<(CliLink, Arc<IngressSlot>), TransportError> {
    let slot_id = random_hex();
    let url = format!("{base}{slot_id}");
    let token = format!("{}{}", random_hex(), random_hex());
    let mut options = options.clone();
    options.extra_args.insert(0, format!("--sdk-url={url}"));
    options.no_permission_prompt_tool = true;
    // The CLI's echo of each prompt is how the slot knows it arrived.
    options.replay_user_messages = true;
    // Through a file descriptor, not the environment, which the CLI's tools inherit (every
    // CLI that takes a non-Anthropic `--sdk-url`, 1.0.112 to 2.1.120, reads it).
    options.env.remove(SESSION_TOKEN_ENV);
    let (mut child, run) = stdio::start_with_secret(&options, Some((AUTH_FD_ENV, token.as_str())))?;
    let pid = child.id();
    // The CLI reads from the socket, not stdin; stdin stays open (held by the child handle)
    // so that it does not read an end of input.
    let stdout = child.stdout.take().expect("stdout is piped");
    let stderr = child.stderr.take().expect("stderr is piped");
    let (events_tx, events) = mpsc::channel(stdio::EVENT_QUEUE);
    let (writer_tx, writer_rx) = mpsc::channel(stdio::WRITE_QUEUE);
    let (exited_tx, exited) = watch::channel(false);
    let (connections_tx, connections) = mpsc::channel(1);
    let slot = IngressSlot::new(slot_id, token, writer_rx, events_tx.clone(), connections_tx, None);
    slot.delivery().confirms = true;
    let events = Events::with_connections(events, connections);
    // Before the exit: every line that never reached the CLI.
    let last_words = {
        let slot = slot.clone();
        async move {
            let lines = slot.take_undelivered().await;
            lines.into_iter().map(|line| TransportEvent::Undelivered(Box::new(line))).collect()
        }
    };
    tokio::spawn(stdio::supervise(
        child,
        run.run_id.clone(),
        stdout,
        stderr,
        events_tx,
        exited_tx,
        last_words,
    ));
    Ok((CliLink { events, process: CliProcess::new(pid, writer_tx, exited, Some(run)) }, slot))
}

/// 32 hex characters from the OS's random source.
fn random_hex() -> String {
    crate::random::random_hex(16)
}

/// Whether a CLI version accepts a non-Anthropic `--sdk-url`.
pub fn supports_sdk_url(version: &str) -> bool {
    let parts: Vec<u32> = version.split('.').filter_map(|part| part.parse().ok()).collect();
    match parts.as_slice() {
        [major, minor, patch, ..] => (*major, *minor, *patch) <= MAX_SDK_URL_VERSION,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::events::{Events, Frames};

    #[test]
    fn a_connection_remembers_its_last_line_uuids_in_bounded_memory() {
        let mut seen = SeenLines::default();
        let uuid = |n: usize| format!("{n:08x}-0000-4000-8000-{:012x}", n * 7919);
        for n in 0..3 * SEEN_UUIDS {
            assert!(seen.first_time(fingerprint(&uuid(n))), "line {n} is new");
            // A replay of any of the last 1,024 is dropped.
            assert!(!seen.first_time(fingerprint(&uuid(n))));
            assert!(!seen.first_time(fingerprint(&uuid(n.saturating_sub(SEEN_UUIDS - 1)))));
        }
        assert_eq!(seen.ring.len(), SEEN_UUIDS);
        assert!(seen.ring.capacity() <= SEEN_UUIDS * 2, "the ring stays bounded");
        // Older ones are forgotten (a CLI replays no further back).
        assert!(seen.first_time(fingerprint(&uuid(0))));
        // Uuids that are not UUIDs, and other spellings of one, are texts of their own.
        assert!(seen.first_time(fingerprint("not-a-uuid")));
        assert!(!seen.first_time(fingerprint("not-a-uuid")));
        assert!(seen.first_time(fingerprint(&uuid(3 * SEEN_UUIDS - 1).to_uppercase())));
    }

    #[test]
    fn versions_that_accept_a_custom_sdk_url() {
        assert!(supports_sdk_url("2.1.37"));
        assert!(supports_sdk_url("2.1.120"));
        assert!(!supports_sdk_url("2.1.121"));
        assert!(!supports_sdk_url("2.1.330"));
        assert!(!supports_sdk_url("garbage"));
    }

    /// A connection as the server's socket loop holds it: until it is told to let go.
    fn hold(reader: IngressReader, writer: IngressWriter) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            writer.replaced().await;
            drop((reader, writer));
        })
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_connection_takes_the_slot_at_once() {
        let slot = free_slot();
        let (reader, writer) = slot.connect().await.unwrap();
        let old = hold(reader, writer);
        // The old socket never fails (it died silently): the new one is served anyway.
        let (reader, writer) =
            tokio::time::timeout(Duration::from_secs(1), slot.connect()).await.unwrap().unwrap();
        old.await.unwrap();
        let current = hold(reader, writer);
        // An operator's disconnect lets go of it too.
        slot.disconnect();
        tokio::time::timeout(Duration::from_secs(1), current).await.unwrap().unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn of_two_waiting_connections_the_newest_wins() {
        let slot = free_slot();
        let (reader, writer) = slot.connect().await.unwrap();
        let first = tokio::spawn({
            let slot = slot.clone();
            async move { slot.connect().await.is_some() }
        });
        tokio::task::yield_now().await;
        let second = tokio::spawn({
            let slot = slot.clone();
            async move { slot.connect().await.map(|(reader, writer)| hold(reader, writer)) }
        });
        tokio::task::yield_now().await;
        drop((reader, writer));
        assert!(!first.await.unwrap(), "an older waiting connection gives up");
        let newest = second.await.unwrap().expect("the newest connection is served");
        slot.disconnect();
        newest.await.unwrap();
    }

    /// A slot with no process behind it whose connections' ends do not end the session (unlike
    /// a relay CLI's), as for a CLI Switchboard started. The session's events are drained.
    fn free_slot() -> Arc<IngressSlot> {
        let (events_tx, mut events) = mpsc::channel(stdio::EVENT_QUEUE);
        let (_writer_tx, writer_rx) = mpsc::channel(stdio::WRITE_QUEUE);
        tokio::spawn(async move { while events.recv().await.is_some() {} });
        IngressSlot::new("t".into(), random_hex(), writer_rx, events_tx, mpsc::channel(1).0, None)
    }

    /// A slot whose CLI echoes prompts, with the session's ends: its queue and its events.
    fn confirming_slot(
    ) -> (Arc<IngressSlot>, mpsc::Sender<WriterCommand>, mpsc::Receiver<TransportEvent>) {
        let (events_tx, events) = mpsc::channel(stdio::EVENT_QUEUE);
        let (writer_tx, writer_rx) = mpsc::channel(stdio::WRITE_QUEUE);
        let slot = IngressSlot::new(
            "t".into(),
            random_hex(),
            writer_rx,
            events_tx,
            mpsc::channel(1).0,
            None,
        );
        slot.delivery().confirms = true;
        (slot, writer_tx, events)
    }

    async fn queue(writer: &mpsc::Sender<WriterCommand>, line: &str) {
        let (done, _) = tokio::sync::oneshot::channel();
        let line = Bytes::from(format!("{line}\n"));
        writer.send(WriterCommand::Line(Box::new((line, done)))).await.unwrap();
    }

    fn text(line: &Outgoing) -> &str {
        std::str::from_utf8(&line.line).unwrap().trim_end()
    }

    /// The events so far, as `kind: line`.
    fn drain(events: &mut mpsc::Receiver<TransportEvent>) -> Vec<String> {
        let mut seen = Vec::new();
        while let Ok(event) = events.try_recv() {
            seen.push(describe(event));
        }
        seen
    }

    /// An event as `kind: line`.
    fn describe(event: TransportEvent) -> String {
        match event {
            TransportEvent::Connected { reconnect } => format!("connected {reconnect}"),
            TransportEvent::Disconnected => "disconnected".to_owned(),
            TransportEvent::Sent(line) => {
                format!("sent {}", String::from_utf8_lossy(&line).trim_end())
            }
            TransportEvent::Resent(line) => {
                format!("resent {}", String::from_utf8_lossy(&line).trim_end())
            }
            TransportEvent::Undelivered(line) => {
                format!("undelivered {}", String::from_utf8_lossy(&line).trim_end())
            }
            TransportEvent::Line(line) => format!("line {}", line.raw),
            other => format!("{other:?}"),
        }
    }

    /// Frames that are all there at once, then end.
    struct Sent(VecDeque<Bytes>);

    impl Frames for Sent {
        fn poll_frame(&mut self, _: &mut Context<'_>) -> Poll<Option<Bytes>> {
            Poll::Ready(self.0.pop_front())
        }
    }

    /// A connection as the server makes one, whose CLI sends `lines` (a frame each) and goes:
    /// the events it makes, through its `Disconnected`.
    async fn one_connection(
        slot: &Arc<IngressSlot>,
        events: &mut Events,
        lines: &[String],
    ) -> Vec<String> {
        let (reader, writer) = slot.connect().await.unwrap();
        let frames = lines.iter().map(|line| Bytes::from(format!("{line}\n"))).collect();
        let attached = reader.attach(Box::new(Sent(frames))).await;
        let mut seen = Vec::new();
        let mut attached = std::pin::pin!(attached);
        loop {
            tokio::select! {
                () = &mut attached => break,
                event = events.recv() => seen.push(describe(event.unwrap())),
            }
        }
        drop(writer);
        loop {
            let event = describe(events.recv().await.unwrap());
            let end = event == "disconnected";
            seen.push(event);
            if end {
                return seen;
            }
        }
    }

    const PROMPT_A: &str = r#"{"type":"user","message":{"role":"user","content":"A"},"uuid":"a"}"#;
    const PROMPT_B: &str = r#"{"type":"user","message":{"role":"user","content":"B"},"uuid":"b"}"#;
    const ANSWER: &str = r#"{"type":"control_response","response":{"subtype":"success","request_id":"r1","response":{"behavior":"allow"}}}"#;
    const INTERRUPT: &str =
        r#"{"type":"control_request","request_id":"sb-9","request":{"subtype":"interrupt"}}"#;

    #[tokio::test]
    async fn a_reconnected_cli_sending_its_lines_again_is_heard_once() {
        // Its connections read where its events are, as the server's are.
        let (events_tx, events) = mpsc::channel(stdio::EVENT_QUEUE);
        let (_writer_tx, writer_rx) = mpsc::channel(stdio::WRITE_QUEUE);
        let (connections_tx, connections) = mpsc::channel(1);
        let slot =
            IngressSlot::new("t".into(), random_hex(), writer_rx, events_tx, connections_tx, None);
        slot.delivery().confirms = true;
        let mut events = Events::with_connections(events, connections);
        let line = |uuid: &str| {
            format!(r#"{{"type":"stream_event","event":{{"type":"ping"}},"uuid":"{uuid}"}}"#)
        };
        let system =
            |uuid: &str| format!(r#"{{"type":"system","subtype":"status","uuid":"{uuid}"}}"#);
        // A prompt sent twice with one uuid runs once, and is echoed twice: on a first socket too.
        let echo = r#"{"type":"user","message":{"role":"user","content":"hi"},"isReplay":true,"uuid":"e"}"#;
        let first = [line("1"), echo.to_owned(), system("2"), echo.to_owned(), line("3")];
        let mut heard = one_connection(&slot, &mut events, &first).await;
        // The CLI replays from its buffer: what we had, then what we did not.
        let second = [system("2"), line("3"), line("4"), system("5")];
        heard.extend(one_connection(&slot, &mut events, &second).await);
        // A hybrid CLI's POST that went again.
        let posted = serde_json::value::RawValue::from_string(line("4")).unwrap();
        slot.post_events(&[&posted]).await;
        assert!(events.try_recv().is_err(), "heard once");
        let expected = [line("1"), echo.to_owned(), system("2"), line("3")];
        let mut expected: Vec<String> =
            expected.iter().map(|line| format!("line {line}")).collect();
        expected.insert(0, "connected false".to_owned());
        expected.push("disconnected".to_owned());
        expected.push("connected true".to_owned());
        expected.extend([line("4"), system("5")].iter().map(|line| format!("line {line}")));
        expected.push("disconnected".to_owned());
        assert_eq!(heard, expected);
    }

    #[tokio::test]
    async fn what_a_dead_socket_may_have_lost_goes_first_on_the_next_one() {
        let (slot, writer, mut events) = confirming_slot();
        let (mut reader, mut first) = slot.connect().await.unwrap();
        // B: its send failed. A: written, never echoed. The answer's send failed. The
        // interrupt's send failed.
        for line in [PROMPT_B, PROMPT_A, ANSWER, INTERRUPT] {
            queue(&writer, line).await;
        }
        let b = first.next_outgoing().await.unwrap();
        first.undelivered(b);
        let a = first.next_outgoing().await.unwrap();
        first.sent(a);
        for _ in 0..2 {
            let line = first.next_outgoing().await.unwrap();
            first.undelivered(line);
        }
        // B's echo came before the socket died (it arrived after all): only A, sent after it,
        // is unconfirmed.
        reader
            .incoming(
                format!("{}\n", PROMPT_B.replace(r#""uuid""#, r#""isReplay":true,"uuid""#))
                    .as_bytes(),
            )
            .await;
        drop((reader, first));
        assert_eq!(
            drain(&mut events),
            [
                "connected false".to_owned(),
                format!("sent {PROMPT_A}"),
                format!("undelivered {INTERRUPT}"),
                format!("line {}", PROMPT_B.replace(r#""uuid""#, r#""isReplay":true,"uuid""#)),
                "disconnected".to_owned(),
            ],
            "a failed prompt or answer is not reported: it goes again"
        );
        queue(&writer, r#"{"type":"user","message":{"role":"user","content":"C"},"uuid":"c"}"#)
            .await;
        let (_reader, mut second) = slot.connect().await.unwrap();
        let mut order = Vec::new();
        for _ in 0..3 {
            let line = second.next_outgoing().await.unwrap();
            order.push((text(&line).to_owned(), line.again));
            second.sent(line);
        }
        assert_eq!(
            order,
            [
                (PROMPT_A.to_owned(), true),
                (ANSWER.to_owned(), true),
                (
                    r#"{"type":"user","message":{"role":"user","content":"C"},"uuid":"c"}"#
                        .to_owned(),
                    false
                ),
            ]
        );
        let seen = drain(&mut events);
        assert_eq!(seen[0], "connected true");
        assert_eq!(seen[1], format!("resent {PROMPT_A}"));
        assert_eq!(seen[2], format!("resent {ANSWER}"));
    }

    #[tokio::test]
    async fn what_a_connection_did_not_get_to_send_again_waits_for_the_next() {
        let (slot, writer, mut events) = confirming_slot();
        let (reader, mut first) = slot.connect().await.unwrap();
        queue(&writer, ANSWER).await;
        let answer = first.next_outgoing().await.unwrap();
        first.undelivered(answer);
        drop((reader, first));
        // The second connection dies before it gets to the answer.
        let (reader, second) = slot.connect().await.unwrap();
        drop((reader, second));
        let (_reader, mut third) = slot.connect().await.unwrap();
        let again = third.next_outgoing().await.unwrap();
        assert_eq!((text(&again), again.again), (ANSWER, true));
        third.sent(again);
        assert!(slot.delivery().retry.is_empty(), "written: no longer to retry");
        assert!(!drain(&mut events).iter().any(|event| event.starts_with("undelivered")));
    }

    /// Lines a connection took from the queue while it was let go go to the next one in the
    /// queue's order, after what was held before it and before the queue (written once,
    /// `Sent`; a prompt among them kept until confirmed only once written); at the CLI's end
    /// what no connection wrote is undelivered.
    #[tokio::test]
    async fn what_a_connection_took_while_let_go_goes_first_on_the_next() {
        let (slot, writer, mut events) = confirming_slot();
        let (reader, mut first) = slot.connect().await.unwrap();
        for line in [INTERRUPT, PROMPT_A] {
            queue(&writer, line).await;
        }
        for _ in 0..2 {
            assert!(first.hold_next().await);
        }
        assert!(slot.delivery().unconfirmed.is_empty(), "held, not written: nothing to confirm");
        drop((reader, first));
        // Let go before it wrote anything held: the next keeps their order, then the queue's.
        let (reader, mut second) = slot.connect().await.unwrap();
        queue(&writer, ANSWER).await;
        assert!(second.hold_next().await);
        queue(&writer, PROMPT_B).await;
        drop((reader, second));
        let (reader, mut third) = slot.connect().await.unwrap();
        let mut order = Vec::new();
        for _ in 0..4 {
            let line = third.next_outgoing().await.unwrap();
            order.push((text(&line).to_owned(), line.again));
            third.sent(line);
        }
        let expected = [(INTERRUPT, false), (PROMPT_A, false), (ANSWER, false), (PROMPT_B, false)];
        let expected: Vec<(String, bool)> =
            expected.iter().map(|(line, again)| ((*line).to_owned(), *again)).collect();
        assert_eq!(order, expected);
        let stamps = drain(&mut events);
        for line in [INTERRUPT, PROMPT_A, ANSWER, PROMPT_B] {
            assert!(stamps.contains(&format!("sent {line}")), "{stamps:?}");
        }
        assert!(!stamps.iter().any(|event| event.starts_with("undelivered")), "{stamps:?}");
        // Taken and held again, then the CLI ends: reported, not lost.
        queue(&writer, INTERRUPT).await;
        assert!(third.hold_next().await);
        drop((reader, third));
        let left = slot.take_undelivered().await;
        let left: Vec<&str> =
            left.iter().map(|line| std::str::from_utf8(line).unwrap().trim_end()).collect();
        assert_eq!(left, [PROMPT_A, PROMPT_B, INTERRUPT]);
    }

    #[tokio::test]
    async fn an_echo_confirms_every_prompt_before_it() {
        let (slot, writer, _events) = confirming_slot();
        let (mut reader, mut connection) = slot.connect().await.unwrap();
        for line in [PROMPT_A, PROMPT_B] {
            queue(&writer, line).await;
            let line = connection.next_outgoing().await.unwrap();
            connection.sent(line);
        }
        // 2.1.37 never echoes a local slash command's prompt: B's echo confirms A too.
        let echo = PROMPT_B.replace(r#""uuid""#, r#""isReplay":true,"uuid""#);
        reader.incoming(format!("{echo}\n").as_bytes()).await;
        assert!(slot.delivery().unconfirmed.is_empty());
        assert_eq!(slot.delivery().unconfirmed_bytes, 0);
    }

    #[tokio::test]
    async fn a_cli_gone_for_good_leaves_what_it_never_got() {
        let (slot, writer, _events) = confirming_slot();
        let (reader, mut connection) = slot.connect().await.unwrap();
        queue(&writer, PROMPT_A).await;
        let a = connection.next_outgoing().await.unwrap();
        connection.sent(a);
        drop((reader, connection));
        // Accepted while the CLI was away.
        queue(&writer, PROMPT_B).await;
        let lines: Vec<String> = slot
            .take_undelivered()
            .await
            .iter()
            .map(|line| String::from_utf8_lossy(line).trim_end().to_owned())
            .collect();
        assert_eq!(lines, [PROMPT_A, PROMPT_B]);
        assert!(slot.connect().await.is_none(), "the slot is closed");
        let (done, _) = tokio::sync::oneshot::channel();
        let late = WriterCommand::Line(Box::new((Bytes::from_static(b"{}\n"), done)));
        assert!(writer.send(late).await.is_err(), "a line sent later is refused at once");
    }

    #[tokio::test]
    async fn a_slot_whose_cli_does_not_echo_keeps_nothing() {
        let (slot, writer, mut events) = confirming_slot();
        slot.delivery().confirms = false;
        let (reader, mut connection) = slot.connect().await.unwrap();
        queue(&writer, PROMPT_A).await;
        let a = connection.next_outgoing().await.unwrap();
        connection.undelivered(a);
        drop((reader, connection));
        assert!(drain(&mut events).contains(&format!("undelivered {PROMPT_A}")));
        let (_reader, _connection) = slot.connect().await.unwrap();
        assert!(slot.delivery().replay.is_empty());
    }
}
