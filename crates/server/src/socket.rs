//! Socket plumbing every WebSocket endpoint shares: buffer sizes, reading a client's frames
//! on a task of its own, moving frames between a CLI's socket and its slot, and following the
//! daemon's phase as it drains. Nothing here knows a route.
//!
//! - `spawn_frame_reader`: a client's frames are read on a task of their own; tungstenite
//!   zeroes its read buffer on every read poll, so a writing loop must not poll for reads on
//!   every frame it sends.
//! - `pipe`: frames between a CLI's socket and its slot. The session's own task reads the
//!   socket's frames (handed to it with the connection); the loop writes the session's lines and pings, and ends the socket on a disconnect request,
//!   a silent peer or the session's end.
//! - `next_drain`: a socket's part in a graceful shutdown.

use std::sync::Arc;

use axum::extract::ws::{Message as WsMessage, WebSocket};
use futures::{SinkExt, StreamExt};

/// How long a closing socket or stream gets to say goodbye (a stopping daemon waits this long
/// for its connections to end after it closed them; a subscriber's last frames, a gRPC
/// stream's trailer, within it).
pub const CLOSE_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// The largest WebSocket message accepted from a client.
pub const MAX_WS_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// The WebSocket read buffer. Clients send little (tungstenite's default of 128 KiB is zeroed
/// on every read, which costs more than the frames themselves).
pub const WS_READ_BUFFER_BYTES: usize = 4 * 1024;

/// The read buffer of a CLI's WebSocket (`--sdk-url`, the relay's `/`). tungstenite zeroes the
/// buffer's whole capacity before every read, including the read that finds the socket empty:
/// with its default of 128 KiB that was 14% of the relay's CPU in the load benchmark, and at
/// 16 KiB still most of the relay's `memset` (two reads per line). Every connected CLI holds
/// it: at 2 KiB rather than 4, 1,000 CLIs hold 2 MB less, and a CLI's line (a few hundred
/// bytes) costs fewer instructions (under callgrind, the relay bench's shape of 1,000 slow
/// CLIs 45,459 → 38,852 a line; one CLI flat out 22,961 → 22,657; 1 KiB was no better). A
/// long line takes more reads, each as cheap.
pub const CLI_WS_READ_BUFFER_BYTES: usize = 2 * 1024;

/// Frames written to a subscriber per flush at most (a busy socket gets them in one write).
pub const MAX_FRAMES_PER_FLUSH: usize = 64;

/// What a client socket does as the daemon drains (see [`crate::daemon::Phase`]).
pub(crate) enum Drain {
    /// Send this notice; the socket stays open for the sessions' last events.
    Notice(WsMessage),
    /// Send this close frame and end.
    Close(WsMessage),
}

/// Sends what the daemon's drain asks of a client socket: a notice (then the socket goes on,
/// `true`) or the close frame (then it ends, `false`; also when the send failed).
pub(crate) async fn send_drain<S>(sink: &mut S, drain: Drain) -> bool
where
    S: futures::Sink<WsMessage> + Unpin,
{
    match drain {
        Drain::Notice(notice) => sink.send(notice).await.is_ok(),
        Drain::Close(close) => {
            let _ = sink.send(close).await;
            false
        }
    }
}

/// A client socket's view of the daemon's drain. It keeps one waiting future for the socket's
/// life (made again only after a notice): a socket that made a new one for every frame it
/// sent registered with the daemon's one phase channel, shared by every socket, each time,
/// and 1,000 busy sockets contended for its lock.
pub(crate) struct DrainWatch {
    next: std::pin::Pin<Box<dyn std::future::Future<Output = (Drain, PhaseReceiver)> + Send>>,
}

type PhaseReceiver = tokio::sync::watch::Receiver<crate::daemon::Phase>;

impl DrainWatch {
    pub(crate) fn new(mut phase: PhaseReceiver) -> DrainWatch {
        // A socket whose task starts after the drain began still hears of it: the phase as it
        // is now counts as a change (a fresh receiver has already seen it).
        phase.mark_changed();
        DrainWatch { next: Box::pin(next_drain(phase)) }
    }

    /// The next step of the drain. Cancel-safe: the waiting lives in `self`.
    pub(crate) async fn next(&mut self) -> Drain {
        let (drain, phase) = (&mut self.next).await;
        self.next = Box::pin(next_drain(phase));
        drain
    }
}

/// Waits for the daemon's next phase and says what a client socket does about it.
async fn next_drain(mut phase: PhaseReceiver) -> (Drain, PhaseReceiver) {
    use crate::daemon::Phase;
    let closed = || {
        Drain::Close(WsMessage::Close(Some(axum::extract::ws::CloseFrame {
            code: axum::extract::ws::close_code::AWAY,
            reason: "the daemon stopped".into(),
        })))
    };
    loop {
        if phase.changed().await.is_err() {
            return (closed(), phase);
        }
        let now = *phase.borrow_and_update();
        match now {
            Phase::Serving => continue,
            Phase::Draining => {
                let notice = crate::frames::ServerFrame::Shutdown {
                    message: "the daemon is shutting down; its sessions are stopping".into(),
                };
                return (Drain::Notice(WsMessage::Text(notice.text().into())), phase);
            }
            Phase::Closed => return (closed(), phase),
        }
    }
}

/// Reads a client's text frames on a task of their own: polling the socket for reads on every
/// frame the writing loop sends would make tungstenite prepare (zero) its read buffer each
/// time. `handle` turns each frame into what the writing loop acts on, if anything; the
/// returned channel closes when the client goes. Abort the task when the writing loop ends.
pub(crate) fn spawn_frame_reader<T, F, Fut>(
    mut incoming: futures::stream::SplitStream<WebSocket>,
    mut handle: F,
) -> (FrameReader, tokio::sync::mpsc::Receiver<T>)
where
    T: Send + 'static,
    F: FnMut(axum::extract::ws::Utf8Bytes) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Option<T>> + Send,
{
    let (sender, receiver) = tokio::sync::mpsc::channel(16);
    let (reading, gone) = tokio::sync::watch::channel(());
    let task = tokio::spawn(async move {
        let _reading = reading;
        while let Some(Ok(frame)) = incoming.next().await {
            let text = match frame {
                WsMessage::Text(text) => text,
                WsMessage::Close(_) => break,
                _ => continue,
            };
            if let Some(item) = handle(text).await {
                if sender.send(item).await.is_err() {
                    break;
                }
            }
        }
    });
    (FrameReader(task, gone), receiver)
}

/// A socket's reading task ([`spawn_frame_reader`]): ended when dropped, so that a writer
/// that goes away (its token revoked, say) takes the whole socket with it.
pub(crate) struct FrameReader(tokio::task::JoinHandle<()>, tokio::sync::watch::Receiver<()>);

impl FrameReader {
    /// Resolves once the reading task ended: the client closed its side (or the socket
    /// failed).
    pub(crate) async fn gone(&self) {
        let mut gone = self.1.clone();
        while gone.changed().await.is_ok() {}
    }

    /// Ends the reading task.
    pub(crate) fn abort(&self) {
        self.0.abort();
    }
}

impl Drop for FrameReader {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What a CLI socket's reading (in its session's task) shares with its writing loop, in one
/// place (the reading touches it once a frame, and a line of each of 1,000 quiet sessions is a
/// cold read):
/// how many frames it has read (anything, pongs included; the pings look for silence), and the
/// loop's request that it stop after the frame it is on.
#[derive(Default)]
struct Reading {
    frames: std::sync::atomic::AtomicU64,
    stopped: std::sync::atomic::AtomicBool,
    waker: futures::task::AtomicWaker,
}

impl Reading {
    /// Asks the reading to stop after the frame it is on.
    fn stop(&self) {
        self.stopped.store(true, std::sync::atomic::Ordering::Release);
        self.waker.wake();
    }
}

/// A CLI socket's incoming frames as its session reads them ([`switchboard_transport::events`]):
/// text and binary frames' payloads, each frame counted (pongs too), until the socket's end
/// or a stop ([`Reading::stop`], looked at before each frame: a frame handed on is finished
/// first). After a stop, the frames that had already arrived are still read, up to
/// [`FRAMES_AFTER_STOP`]: a CLI that wrote its last lines and exited (its exit is what stops
/// the reading) is heard to its end, even when its session was busy elsewhere as they came.
struct SocketFrames<S> {
    incoming: S,
    shared: Arc<Reading>,
    /// Frames still read after a stop, while they are there at once.
    after_stop: u16,
}

/// What a stopped CLI socket still reads of what had arrived (a peer that keeps sending is
/// not read for ever): the events queue's bound, what the reading task before the session
/// read its sockets could hold.
const FRAMES_AFTER_STOP: u16 = 256;

impl<S> switchboard_transport::events::Frames for SocketFrames<S>
where
    S: futures::Stream<Item = Result<WsMessage, axum::Error>> + Unpin + Send,
{
    fn poll_frame(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<bytes::Bytes>> {
        use std::sync::atomic::Ordering;
        use std::task::Poll;
        loop {
            let stopped = self.shared.stopped.load(Ordering::Acquire);
            if stopped {
                if self.after_stop == 0 {
                    return Poll::Ready(None);
                }
                self.after_stop -= 1;
            }
            let frame = match self.incoming.poll_next_unpin(cx) {
                Poll::Ready(Some(Ok(frame))) => frame,
                Poll::Ready(Some(Err(_)) | None) => return Poll::Ready(None),
                // Stopped, and nothing more has arrived.
                Poll::Pending if stopped => return Poll::Ready(None),
                Poll::Pending => {
                    self.shared.waker.register(cx.waker());
                    // A stop between the first look and the registration is seen here: one more
                    // look for what arrived meanwhile.
                    if self.shared.stopped.load(Ordering::Acquire) {
                        continue;
                    }
                    return Poll::Pending;
                }
            };
            // Only this reading counts: no locked add needed.
            let frames = &self.shared.frames;
            frames.store(frames.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
            match frame {
                WsMessage::Text(text) => return Poll::Ready(Some(text.into())),
                WsMessage::Binary(bytes) => return Poll::Ready(Some(bytes)),
                WsMessage::Close(_) => return Poll::Ready(None),
                WsMessage::Ping(_) | WsMessage::Pong(_) => {}
            }
        }
    }
}

/// Stops a socket's reading when dropped.
struct StopReading(Arc<Reading>);

impl Drop for StopReading {
    fn drop(&mut self) {
        self.0.stop();
    }
}

/// A socket's silence, seen at its ping ticks: one that read no frame since the tick before
/// last has been silent for two intervals.
struct Silence {
    /// The frame count at each of the last two ticks: at first, none before the connection
    /// and none at it (its ticks count from the connection).
    counts: [u64; 2],
}

impl Default for Silence {
    fn default() -> Silence {
        Silence { counts: [u64::MAX, 0] }
    }
}

impl Silence {
    /// A tick, with the frames read so far: whether the socket has gone silent.
    fn tick(&mut self, frames: u64) -> bool {
        let silent = frames == self.counts[0];
        self.counts = [self.counts[1], frames];
        silent
    }
}

/// Moves frames between a CLI's socket and its slot until either side ends.
///
/// The CLI's frames are read by its session's own task ([`switchboard_transport::events`]):
/// a line goes from the socket to the session with no task or queue between them, and a
/// frame read needs no poll of the writing side's futures (the session's queue, the ping
/// timer, the disconnect request). When the writing side ends first, the reading finishes the
/// frame it is on (every line that reached us goes to the session) and stops; the session
/// hears of the disconnection after that frame's lines.
///
/// Not an `async fn`, which would keep the socket twice for the connection's life (its
/// argument and the local it is moved into): an `async move` block holds what it captured once.
#[allow(clippy::manual_async_fn)] // deliberately not one: see above
pub(crate) fn pipe(
    socket: axum::extract::ws::WebSocket,
    slot: Arc<switchboard_transport::sdk_url::IngressSlot>,
    ping_every: std::time::Duration,
) -> impl std::future::Future<Output = ()> + Send {
    async move {
        let Some((reader, mut writer)) = slot.connect().await else { return };
        let (mut sink, incoming) = socket.split();
        let shared = Arc::new(Reading::default());
        // However this ends (a panic, the connection's future dropped), the reading stops
        // after the frame it is on, and lets go of the connection.
        let _stop = StopReading(shared.clone());
        let frames =
            SocketFrames { incoming, shared: shared.clone(), after_stop: FRAMES_AFTER_STOP };
        let mut reading = reader.attach(Box::new(frames)).await;

        // Our pings: a peer that sends nothing at all (not even a pong) for two intervals is dead,
        // and its socket is dropped so that the CLI's reconnect (or its end) can follow.
        let mut ping = tokio::time::interval(ping_every);
        ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ping.tick().await;
        // Made once: it hears a request from the moment it exists (one made per loop turn would
        // miss a request made while the loop was busy).
        let disconnect = writer.replaced();
        tokio::pin!(disconnect);
        let mut read_all = false;
        let mut silence = Silence::default();
        loop {
            tokio::select! {
                _ = &mut reading => {
                    // The CLI closed the socket, or it failed.
                    read_all = true;
                    break;
                }
                line = writer.next_outgoing() => match line {
                    Some(line) => {
                        let text = String::from_utf8_lossy(&line.line).into_owned();
                        // A socket that died with a full send buffer must not keep a newer
                        // connection waiting: the send gives way to a takeover.
                        let sent = tokio::select! {
                            sent = sink.send(WsMessage::Text(text.into())) => sent.is_ok(),
                            () = &mut disconnect => false,
                        };
                        if !sent {
                            // Taken and maybe not delivered: the slot sends it again or says so.
                            writer.undelivered(line);
                            break;
                        }
                        writer.sent(line);
                    }
                    None => {
                        let _ = sink.send(WsMessage::Close(None)).await;
                        break;
                    }
                },
                _ = ping.tick() => {
                    let frames = shared.frames.load(std::sync::atomic::Ordering::Relaxed);
                    // Silent only if the session read all the socket had: a session busy
                    // elsewhere (storing a batch, say) has not read even the CLI's pongs.
                    if silence.tick(frames) && !reading.behind() {
                        tracing::warn!(slot = %slot.id, "the CLI's socket went silent; dropping it");
                        break;
                    }
                    if sink.send(WsMessage::Ping(Vec::new().into())).await.is_err() {
                        break;
                    }
                }
                () = &mut disconnect => break,
            }
        }
        if !read_all {
            shared.stop();
            // Until the session has read past the frame it is on. It may be waiting for room in
            // the queue toward the CLI, reading nothing until it has it: what it queues meanwhile
            // waits for the next connection.
            loop {
                tokio::select! {
                    () = &mut reading => break,
                    queued = writer.hold_next() => if !queued {
                        (&mut reading).await;
                        break;
                    },
                }
            }
        }
        // Last, so that the session hears of this connection's end (its reader is done) before a
        // newer connection can take the slot and say it connected.
        drop(writer);
    }
}

/// Writes frames to a follower's socket and flushes them, their bytes counted against the
/// followers' outbox ([`crate::watchers`]) until the socket took them (`counted`: they are
/// already): whether it did, within the daemon's stall limit (and as long again as the frames
/// take at [`crate::watchers::FOLLOWER_MIN_RATE`]). A follower that stopped reading is let go
/// here.
pub(crate) async fn write_frames<S>(
    daemon: &crate::daemon::Daemon,
    sink: &mut S,
    frames: Vec<String>,
    counted: bool,
) -> bool
where
    S: futures::Sink<WsMessage> + Unpin,
{
    let bytes: usize = frames.iter().map(String::len).sum();
    let limit = crate::watchers::write_limit(daemon.stall_limit(), bytes);
    let _counted = if counted {
        None
    } else {
        let Some(counted) = daemon.watchers().reserve(bytes, limit).await else {
            tracing::info!(bytes, "a follower could not be written to: the followers' outbox stayed full; letting it go");
            return false;
        };
        Some(counted)
    };
    let write = async {
        for frame in frames {
            if sink.feed(WsMessage::Text(frame.into())).await.is_err() {
                return false;
            }
        }
        sink.flush().await.is_ok()
    };
    match tokio::time::timeout(limit, write).await {
        Ok(written) => written,
        Err(_) => {
            tracing::info!(
                bytes,
                ?limit,
                "a follower took nothing within the stall limit; letting it go"
            );
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two intervals without a frame are silence, counted from the connection; a frame in
    /// either of the last two intervals is not.
    #[test]
    fn silence_is_two_intervals_without_a_frame() {
        // Nothing read: silent at the second tick, two intervals after connecting.
        let mut silence = Silence::default();
        assert!(!silence.tick(0));
        assert!(silence.tick(0));
        // A frame in the first interval only: silent at the third tick.
        let mut silence = Silence::default();
        assert!(!silence.tick(1));
        assert!(!silence.tick(1));
        assert!(silence.tick(1));
        // A frame in the most recent interval only: not silent.
        let mut silence = Silence::default();
        assert!(!silence.tick(0));
        assert!(!silence.tick(1));
        // Frames again after a silence began: counted afresh.
        assert!(!silence.tick(1));
        assert!(silence.tick(1));
        assert!(!silence.tick(5));
        assert!(!silence.tick(5));
        assert!(silence.tick(5));
    }

    /// Wakes counted.
    struct Wakes(std::sync::atomic::AtomicUsize);

    impl futures::task::ArcWake for Wakes {
        fn wake_by_ref(this: &Arc<Self>) {
            this.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// Frames pass and are counted (a ping too, which is not handed on); a stop asked while
    /// the reading waits wakes it, and it ends; frames there when a stop comes are still read
    /// (a CLI's last words before it exited), up to the first wait and to `FRAMES_AFTER_STOP`.
    #[test]
    fn a_stop_wakes_a_waiting_reader_and_ends_its_reading() {
        use std::sync::atomic::Ordering;
        use std::task::{Context, Poll};
        use switchboard_transport::events::Frames;
        let wakes = Arc::new(Wakes(std::sync::atomic::AtomicUsize::new(0)));
        let waker = futures::task::waker(wakes.clone());
        let mut cx = Context::from_waker(&waker);
        let (mut sender, incoming) =
            futures::channel::mpsc::channel::<Result<WsMessage, axum::Error>>(8);
        let shared = Arc::new(Reading::default());
        let mut frames =
            SocketFrames { incoming, shared: shared.clone(), after_stop: FRAMES_AFTER_STOP };
        sender.try_send(Ok(WsMessage::Ping(Vec::new().into()))).unwrap();
        sender.try_send(Ok(WsMessage::Text("one".into()))).unwrap();
        assert_eq!(frames.poll_frame(&mut cx), Poll::Ready(Some(bytes::Bytes::from("one"))));
        assert_eq!(shared.frames.load(Ordering::Relaxed), 2);
        // Waiting: the stop wakes it, and it ends.
        assert_eq!(frames.poll_frame(&mut cx), Poll::Pending);
        shared.stop();
        assert_eq!(wakes.0.load(Ordering::SeqCst), 1);
        assert_eq!(frames.poll_frame(&mut cx), Poll::Ready(None));
        assert_eq!(shared.frames.load(Ordering::Relaxed), 2);

        // What had arrived when the stop came is read; the first wait ends it.
        let (sender, incoming) = futures::channel::mpsc::unbounded();
        let shared = Arc::new(Reading::default());
        let mut frames =
            SocketFrames { incoming, shared: shared.clone(), after_stop: FRAMES_AFTER_STOP };
        sender.unbounded_send(Ok(WsMessage::Text("last words".into()))).unwrap();
        shared.stop();
        assert_eq!(frames.poll_frame(&mut cx), Poll::Ready(Some(bytes::Bytes::from("last words"))));
        assert_eq!(frames.poll_frame(&mut cx), Poll::Ready(None));

        // A peer that keeps sending is read no further than the bound.
        let (sender, incoming) = futures::channel::mpsc::unbounded();
        let shared = Arc::new(Reading::default());
        let mut frames =
            SocketFrames { incoming, shared: shared.clone(), after_stop: FRAMES_AFTER_STOP };
        for _ in 0..usize::from(FRAMES_AFTER_STOP) + 10 {
            sender.unbounded_send(Ok(WsMessage::Text("more".into()))).unwrap();
        }
        shared.stop();
        let mut read = 0;
        while let Poll::Ready(Some(_)) = frames.poll_frame(&mut cx) {
            read += 1;
        }
        assert_eq!(read, usize::from(FRAMES_AFTER_STOP));
        assert_eq!(frames.poll_frame(&mut cx), Poll::Ready(None));
    }

    /// The socket's close, or its failure, ends the frames.
    #[test]
    fn a_close_or_an_error_ends_the_frames() {
        use std::task::{Context, Poll};
        use switchboard_transport::events::Frames;
        let mut cx = Context::from_waker(std::task::Waker::noop());
        for last in [Ok(WsMessage::Close(None)), Err(axum::Error::new("reset"))] {
            let (mut sender, incoming) =
                futures::channel::mpsc::channel::<Result<WsMessage, axum::Error>>(8);
            let mut frames =
                SocketFrames { incoming, shared: Arc::default(), after_stop: FRAMES_AFTER_STOP };
            sender.try_send(Ok(WsMessage::Binary(bytes::Bytes::from("b")))).unwrap();
            sender.try_send(last).unwrap();
            assert_eq!(frames.poll_frame(&mut cx), Poll::Ready(Some(bytes::Bytes::from("b"))));
            assert_eq!(frames.poll_frame(&mut cx), Poll::Ready(None));
        }
    }
}
