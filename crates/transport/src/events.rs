//! What a session hears from its CLI ([`Events`]): the queue every transport writes its events
//! to and, for a CLI on a WebSocket (`--sdk-url`, the relay's `/`), the socket's frames
//! themselves, read where the events are read.
//!
//! A CLI's line used to cross two tasks: its socket's reader decoded it and queued it, and the
//! session's task took it from the queue. With a thousand CLIs that each send a line now and
//! then, that was two wake-ups and two tasks' cold state a line, and the queue between them
//! (the relay benchmark's profile of that shape put the moving of lines between tasks near
//! half of the relay's CPU; docs/benchmarks.md). The server now hands a connection's frames to
//! the session ([`crate::sdk_url::IngressReader::attach`]): whoever reads the [`Events`] (the
//! session's actor) reads the socket, decodes, drops repeats and handles each line in its one
//! task, and a CLI that sends nothing costs no task of its own for reading.
//!
//! The order the session hears things in is the queue's order, with a connection's lines
//! where its reader used to queue them:
//! - the queue is looked at first: what was queued before a connection was handed over (its
//!   `Connected`, its predecessor's `Disconnected`) comes before its lines, and the writer's
//!   stamps and an exit are not held back by a CLI that talks without pause; once a
//!   connection's first line was heard, it gets a turn after every 32 of the queue's events in
//!   a row, so that a flood of the CLI's standard error does not keep its socket unread;
//! - one connection is read at a time; the next is taken once the current one's frames ended
//!   (its socket closed, or its holder stopped it after the frame it was on), and every line
//!   of a frame read is heard before that;
//! - a connection's end goes out when both its halves are gone: its reader, dropped here once
//!   its frames end (the holder is told, [`crate::sdk_url::Attached`]), and its writer, which
//!   the holder drops after that, so `Disconnected` follows its last line.
//!
//! While the session is busy (a full queue toward its subscribers, say) its CLI's socket is
//! not read, and the CLI waits on its own socket: backpressure, as the queue's bound was.

use std::task::{Context, Poll};

use bytes::Bytes;
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TryRecvError;

use crate::sdk_url::Connection;
use crate::stdio::TransportEvent;

/// A connection's incoming frames, as its server reads them: each item a text or binary
/// frame's payload (control frames are the server's), `None` at the socket's end or once the
/// server stopped it. Polled like a stream: pending registers `cx`'s waker.
pub trait Frames: Send {
    /// The next frame's payload, or `None` at the end (not polled again after).
    fn poll_frame(&mut self, cx: &mut Context<'_>) -> Poll<Option<Bytes>>;
}

/// A session's events from its CLI, in order; ends after `Exited` (see the module's notes).
#[derive(Debug)]
pub struct Events {
    queue: mpsc::Receiver<TransportEvent>,
    /// Connections handed over by a WebSocket slot, in the order they came.
    connections: Option<mpsc::Receiver<Box<Connection>>>,
    /// The connection being read.
    current: Option<Box<Connection>>,
    /// Queue events heard in a row while the connection being read had started giving lines.
    streak: u8,
}

/// At most this many queue events in a row while a connection has lines to give: a CLI that
/// floods its standard error (queued by the transport) does not keep its socket from being read.
const QUEUE_STREAK: u8 = 32;

impl Events {
    /// Events that all come through `queue` (a CLI on stdio, in a terminal).
    pub fn new(queue: mpsc::Receiver<TransportEvent>) -> Events {
        Events { queue, connections: None, current: None, streak: 0 }
    }

    /// Events from `queue` and from the sockets a WebSocket slot hands over.
    pub(crate) fn with_connections(
        queue: mpsc::Receiver<TransportEvent>,
        connections: mpsc::Receiver<Box<Connection>>,
    ) -> Events {
        Events { queue, connections: Some(connections), current: None, streak: 0 }
    }

    /// The next event; `None` once the transport is gone. Cancel-safe: an event is taken only
    /// when it is returned.
    pub async fn recv(&mut self) -> Option<TransportEvent> {
        std::future::poll_fn(|cx| self.poll_recv(cx)).await
    }

    /// The next event if one is ready now (a frame already read counts, one still in the
    /// socket's buffer too).
    pub fn try_recv(&mut self) -> Result<TransportEvent, TryRecvError> {
        // The queues are polled with a waker that does nothing: whoever calls this polls `recv`
        // again before it sleeps, and that registers its own.
        match self.poll_next(&mut Context::from_waker(std::task::Waker::noop()), false) {
            Poll::Ready(Some(event)) => Ok(event),
            Poll::Ready(None) => Err(TryRecvError::Disconnected),
            Poll::Pending => Err(TryRecvError::Empty),
        }
    }

    /// The events waiting in the queue (not counting lines still in a socket).
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// Whether the queue is empty (a socket may still hold lines).
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Polls for the next event: the queue first, then the connection being read (taking the
    /// next one once it ended).
    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<TransportEvent>> {
        self.poll_next(cx, true)
    }

    /// [`Events::poll_recv`]; `register`: whether `cx`'s waker is the one to wake for the
    /// socket (not for `try_recv`'s).
    fn poll_next(&mut self, cx: &mut Context<'_>, register: bool) -> Poll<Option<TransportEvent>> {
        loop {
            // The connection's turn after a long run of the queue's, once its own first line
            // was heard (its `Connected`, queued before it was handed over, came before that).
            if self.streak >= QUEUE_STREAK {
                self.streak = 0;
                if let Some(current) = &mut self.current {
                    match current.poll_event(register.then(|| cx.waker())) {
                        Poll::Ready(Some(event)) => return Poll::Ready(Some(event)),
                        Poll::Ready(None) => self.current = None,
                        Poll::Pending => {}
                    }
                }
            }
            let queue_closed = match self.queue.poll_recv(cx) {
                Poll::Ready(Some(event)) => {
                    if self.current.as_ref().is_some_and(|current| current.started()) {
                        self.streak += 1;
                    }
                    return Poll::Ready(Some(event));
                }
                Poll::Ready(None) => true,
                Poll::Pending => false,
            };
            if self.current.is_none() {
                if let Some(connections) = &mut self.connections {
                    match connections.poll_recv(cx) {
                        Poll::Ready(Some(connection)) => {
                            self.current = Some(connection);
                            self.streak = 0;
                            // The queue again first: what was queued while this connection was
                            // handed over (its `Connected`, the last one's `Disconnected`) comes
                            // before its lines.
                            continue;
                        }
                        Poll::Ready(None) => self.connections = None,
                        Poll::Pending => {}
                    }
                }
            }
            let Some(current) = &mut self.current else {
                return if queue_closed { Poll::Ready(None) } else { Poll::Pending };
            };
            match current.poll_event(register.then(|| cx.waker())) {
                Poll::Ready(Some(event)) => {
                    self.streak = 0;
                    return Poll::Ready(Some(event));
                }
                Poll::Ready(None) => {
                    // Its reader goes (and the holder hears so); if its writer went first,
                    // its `Disconnected` is in the queue now, after its last line.
                    self.current = None;
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::time::Duration;

    /// Frames fed by the test; they end when the sender is dropped.
    struct Fed(mpsc::Receiver<Bytes>);

    impl Frames for Fed {
        fn poll_frame(&mut self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
            self.0.poll_recv(cx)
        }
    }

    fn fed() -> (mpsc::Sender<Bytes>, Box<dyn Frames>) {
        let (sender, receiver) = mpsc::channel(8);
        (sender, Box::new(Fed(receiver)))
    }

    fn kind(event: &TransportEvent) -> String {
        match event {
            TransportEvent::Connected { reconnect } => format!("connected {reconnect}"),
            TransportEvent::Line(line) => format!("line {}", line.uuid().unwrap_or_default()),
            TransportEvent::BadLine(_) => "bad line".to_owned(),
            TransportEvent::Disconnected => "disconnected".to_owned(),
            TransportEvent::Exited(_) => "exited".to_owned(),
            other => format!("{other:?}"),
        }
    }

    async fn next(events: &mut Events) -> String {
        let event = tokio::time::timeout(Duration::from_secs(10), events.recv())
            .await
            .expect("an event comes")
            .expect("the events go on");
        kind(&event)
    }

    fn output(uuid: &str) -> String {
        format!(
            "{{\"type\":\"stream_event\",\"uuid\":\"{uuid}\",\"session_id\":\"s\",\"event\":{{\"type\":\"ping\"}}}}\n"
        )
    }

    /// A connection handed over is read where the events are: its `Connected` first, each
    /// frame's lines in order (a line split over frames, a bad one), nothing more once its
    /// frames end (the holder hears it), and its `Disconnected` when its writer goes too,
    /// after its last line. A reconnected CLI's repeated output is heard once.
    #[tokio::test]
    async fn a_connections_frames_are_read_in_the_sessions_task() {
        let (mut link, slot) = crate::sdk_url::external("t");
        let (reader, writer) = slot.connect().await.unwrap();
        let (frames, handed) = fed();
        let mut attached = reader.attach(handed).await;
        let two = format!("{}{}{{\"type\":\"stream_ev", output("a"), output("b"));
        frames.send(Bytes::from(two)).await.unwrap();
        let rest =
            "ent\",\"uuid\":\"c\",\"session_id\":\"s\",\"event\":{\"type\":\"ping\"}}\nnot json\n";
        frames.send(Bytes::from(rest)).await.unwrap();
        let mut heard = Vec::new();
        for _ in 0..5 {
            heard.push(next(&mut link.events).await);
        }
        assert_eq!(heard, ["connected false", "line a", "line b", "line c", "bad line"]);
        assert!(matches!(link.events.try_recv(), Err(TryRecvError::Empty)));
        // Its frames end: the holder hears so once the events have read that far.
        drop(frames);
        let waker = std::task::Waker::noop();
        assert!(std::pin::Pin::new(&mut attached)
            .poll(&mut Context::from_waker(waker))
            .is_pending());
        assert!(matches!(link.events.try_recv(), Err(TryRecvError::Empty)));
        tokio::time::timeout(Duration::from_secs(10), &mut attached).await.unwrap();
        drop(writer);
        assert_eq!(next(&mut link.events).await, "disconnected");
        assert_eq!(next(&mut link.events).await, "exited");
    }

    /// A flood of the queue's events (a CLI's standard error) does not keep a connection that
    /// has started giving lines unread: it gets a turn after every `QUEUE_STREAK` of them.
    #[tokio::test]
    async fn a_flooded_queue_leaves_the_socket_its_turn() {
        let (mut link, slot) = crate::sdk_url::external("t");
        let (reader, _writer) = slot.connect().await.unwrap();
        let (frames, handed) = fed();
        let _attached = reader.attach(handed).await;
        frames.send(Bytes::from(output("a"))).await.unwrap();
        assert_eq!(next(&mut link.events).await, "connected false");
        assert_eq!(next(&mut link.events).await, "line a");
        let streak = usize::from(QUEUE_STREAK);
        for _ in 0..2 * streak {
            slot.stamp(TransportEvent::Stderr(Box::new("noise".to_owned())));
        }
        frames.send(Bytes::from(output("b"))).await.unwrap();
        frames.send(Bytes::from(output("c"))).await.unwrap();
        let mut heard = Vec::new();
        for _ in 0..2 * streak + 2 {
            heard.push(next(&mut link.events).await);
        }
        let lines: Vec<usize> =
            (0..heard.len()).filter(|at| heard[*at].starts_with("line")).collect();
        assert_eq!(lines, [streak, 2 * streak + 1], "{heard:?}");
        assert_eq!(heard[streak], "line b");
    }

    /// Whoever holds a connection can tell whether the session has read all its socket gave
    /// (a socket's silence means something only then).
    #[tokio::test]
    async fn the_holder_sees_whether_the_session_is_behind() {
        let (mut link, slot) = crate::sdk_url::external("t");
        let (reader, _writer) = slot.connect().await.unwrap();
        let (frames, handed) = fed();
        let attached = reader.attach(handed).await;
        assert!(attached.behind(), "not read at all yet");
        assert_eq!(next(&mut link.events).await, "connected false");
        assert!(matches!(link.events.try_recv(), Err(TryRecvError::Empty)));
        assert!(!attached.behind(), "read to the socket's wait");
        frames.send(Bytes::from(output("a"))).await.unwrap();
        assert!(attached.behind(), "the socket woke, the session has not read it");
        assert_eq!(next(&mut link.events).await, "line a");
        assert!(matches!(link.events.try_recv(), Err(TryRecvError::Empty)));
        assert!(!attached.behind());
    }

    /// A session that is gone lets go of a connection handed to it at once.
    #[tokio::test]
    async fn a_session_gone_lets_go_of_its_connections_at_once() {
        let (link, slot) = crate::sdk_url::external("t");
        let (reader, _writer) = slot.connect().await.unwrap();
        drop(link);
        let (_frames, handed) = fed();
        tokio::time::timeout(Duration::from_secs(10), reader.attach(handed).await).await.unwrap();
    }
}
