//! Request bodies that must keep arriving: every request's body, on every route and over both
//! HTTP versions, has [`BODY_GRACE`] to begin and must then average at least [`BODY_MIN_RATE`]
//! bytes a second, or its reader gets an error (and the request its answer: 408 for the routes
//! that read a body themselves, a gRPC status for a call). A client that promises 100 bytes and
//! sends 9, or trickles a 16 MiB body a byte at a time, or opens an HTTP/2 stream and never ends
//! its request, holds its connection for seconds, not for ever.
//!
//! The allowance grows with what has arrived: by the time `n` bytes are in, the body has had
//! `BODY_GRACE + n / BODY_MIN_RATE` seconds. The largest body the API takes (16 MiB) may take
//! about 17 minutes at the floor rate; a phone on a slow link sends a form in well under a second.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

/// How long a request body may take before its pace is judged.
pub const BODY_GRACE: Duration = Duration::from_secs(10);

/// The slowest average a request body may arrive at after [`BODY_GRACE`], in bytes a second.
pub const BODY_MIN_RATE: u64 = 16 * 1024;

/// What a body that arrived too slowly reads as.
#[derive(Debug, thiserror::Error)]
#[error(
    "the request body arrived too slowly ({received} bytes in {elapsed_s} s; a body has {grace} s, \
     then must average {rate} KiB/s)",
    grace = BODY_GRACE.as_secs(),
    rate = BODY_MIN_RATE / 1024
)]
pub struct TooSlow {
    /// Bytes that had arrived.
    pub received: u64,
    /// Seconds since the body began.
    pub elapsed_s: u64,
}

/// A request body held to [`BODY_GRACE`] and [`BODY_MIN_RATE`].
pub struct Paced<B> {
    body: B,
    started: Instant,
    received: u64,
    /// Fires at the current deadline; `None` once the body ended.
    timer: Option<Pin<Box<Sleep>>>,
    /// Begun when the body has arrived whole.
    lease: Option<std::sync::Arc<crate::peers::Lease>>,
}

impl<B> std::fmt::Debug for Paced<B> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("Paced").field("received", &self.received).finish_non_exhaustive()
    }
}

impl<B: Body> Paced<B> {
    /// Paces `body` from now.
    pub fn new(body: B) -> Self {
        let started = Instant::now();
        let timer = (!body.is_end_stream())
            .then(|| Box::pin(tokio::time::sleep_until(started + BODY_GRACE)));
        Paced { body, started, received: 0, timer, lease: None }
    }

    /// Paced, and `lease` begun once the body has arrived whole (at once for an empty one).
    pub fn leased(body: B, lease: std::sync::Arc<crate::peers::Lease>) -> Self {
        let mut paced = Paced::new(body);
        if paced.timer.is_none() {
            lease.begin();
        } else {
            paced.lease = Some(lease);
        }
        paced
    }

    /// The body has arrived whole.
    fn ended(&mut self) {
        self.timer = None;
        if let Some(lease) = self.lease.take() {
            lease.begin();
        }
    }

    /// When the body must have more than `received` bytes in.
    fn deadline(&self) -> Instant {
        let earned = Duration::from_secs_f64(self.received as f64 / BODY_MIN_RATE as f64);
        self.started + BODY_GRACE + earned
    }
}

impl<B> Body for Paced<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<axum::BoxError>,
{
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        match Pin::new(&mut this.body).poll_frame(context) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.received += data.len() as u64;
                    let deadline = this.deadline();
                    if let Some(timer) = this.timer.as_mut() {
                        timer.as_mut().reset(deadline);
                    }
                }
                if this.body.is_end_stream() {
                    this.ended();
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(error))) => Poll::Ready(Some(Err(error.into()))),
            Poll::Ready(None) => {
                this.ended();
                Poll::Ready(None)
            }
            Poll::Pending => {
                let late = this
                    .timer
                    .as_mut()
                    .is_some_and(|timer| timer.as_mut().poll(context).is_ready());
                if !late {
                    return Poll::Pending;
                }
                this.timer = None;
                let elapsed_s = this.started.elapsed().as_secs();
                Poll::Ready(Some(Err(Box::new(TooSlow { received: this.received, elapsed_s }))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use std::pin::Pin;
    use std::task::Poll;

    use axum::body::Bytes;
    use http_body::{Body as _, Frame};
    use http_body_util::BodyExt;

    use super::*;

    type Fed = Result<Frame<Bytes>, std::convert::Infallible>;
    type FedBody = Paced<http_body_util::StreamBody<tokio_stream::wrappers::ReceiverStream<Fed>>>;

    /// A body fed by hand through a channel.
    fn channel_body() -> (tokio::sync::mpsc::Sender<Fed>, FedBody) {
        let (sender, receiver) = tokio::sync::mpsc::channel(8);
        let stream = tokio_stream::wrappers::ReceiverStream::new(receiver);
        (sender, Paced::new(http_body_util::StreamBody::new(stream)))
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_stops_arriving_fails_after_the_grace() {
        let (sender, mut body) = channel_body();
        sender.send(Ok(Frame::data(Bytes::from_static(b"123456789")))).await.unwrap();
        let first = body.frame().await.unwrap().unwrap();
        assert_eq!(first.into_data().unwrap(), "123456789");
        let started = Instant::now();
        let error = body.frame().await.unwrap().unwrap_err();
        // The grace, plus what nine bytes earned (well under a millisecond).
        assert!(
            started.elapsed() >= BODY_GRACE - Duration::from_millis(1),
            "{:?}",
            started.elapsed()
        );
        assert!(started.elapsed() < BODY_GRACE + Duration::from_millis(10));
        let slow = error.downcast_ref::<TooSlow>().expect("a TooSlow error");
        assert_eq!(slow.received, 9);
        assert!(error.to_string().contains("arrived too slowly"), "{error}");
        drop(sender);
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_at_the_floor_rate_arrives_whole_and_a_trickle_below_it_does_not() {
        // 64 KiB a second for a minute: above the floor, so it all arrives.
        let (sender, mut body) = channel_body();
        let feeder = tokio::spawn(async move {
            for _ in 0..60 {
                tokio::time::sleep(Duration::from_secs(1)).await;
                sender.send(Ok(Frame::data(Bytes::from(vec![b'x'; 64 * 1024])))).await.unwrap();
            }
        });
        let mut total = 0;
        for _ in 0..60 {
            total += body.frame().await.unwrap().unwrap().into_data().unwrap().len();
        }
        assert_eq!(total, 60 * 64 * 1024);
        feeder.await.unwrap();
        assert!(body.frame().await.is_none());

        // One byte every 5 s never fails inside the grace, and fails soon after it.
        let (sender, mut body) = channel_body();
        let started = Instant::now();
        let _feeder = tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(5)).await;
                if sender.send(Ok(Frame::data(Bytes::from_static(b"x")))).await.is_err() {
                    return;
                }
            }
        });
        loop {
            match body.frame().await.unwrap() {
                Ok(_) => assert!(started.elapsed() <= BODY_GRACE),
                Err(error) => {
                    assert!(error.is::<TooSlow>());
                    break;
                }
            }
        }
        assert!(started.elapsed() >= BODY_GRACE);
        assert!(started.elapsed() < BODY_GRACE + Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn an_ended_or_empty_body_is_never_timed() {
        let mut empty = Paced::new(http_body_util::Empty::<Bytes>::new());
        assert!(empty.is_end_stream());
        assert!(empty.timer.is_none());
        let mut full = Paced::new(http_body_util::Full::new(Bytes::from_static(b"abc")));
        let whole = (&mut full).collect().await.unwrap().to_bytes();
        assert_eq!(whole, "abc");
        tokio::time::sleep(BODY_GRACE * 2).await;
        assert!(matches!(
            Pin::new(&mut full)
                .poll_frame(&mut std::task::Context::from_waker(futures::task::noop_waker_ref())),
            Poll::Ready(None)
        ));
        assert!(Pin::new(&mut empty)
            .poll_frame(&mut std::task::Context::from_waker(futures::task::noop_waker_ref()))
            .is_ready());
    }
}
