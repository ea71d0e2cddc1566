//! Serving the router on a listener: what `axum::serve` does, plus the limits a daemon facing
//! untrusted clients needs. One port serves REST and WebSocket over HTTP/1.1 and gRPC over
//! HTTP/2 (cleartext, as gRPC clients speak it from their first byte): a connection that opens
//! with HTTP/2's preface is served as HTTP/2, any other as HTTP/1.1, and a request whose
//! content type is `application/grpc` goes to the gRPC router. Every connection gets
//! `TCP_NODELAY`, must finish its request headers (or its preface) within
//! [`ServeOptions::header_read_timeout`], and every request body must keep arriving
//! ([`crate::pacing`]). Connections are admitted per peer ([`crate::peers`]): past a peer's
//! share or the daemon's limit, the oldest connection that carries nothing a client follows is
//! shed to make room, and where there is none the new one is closed at once, before it can
//! hold a file descriptor of the daemon's. On shutdown the listener closes first, then open
//! connections finish their requests, then every session is stopped.
//!
//! A connection's first bytes are read under the header-read timeout (`sniff`), and the bytes
//! read are served again (`Counted` replays them). A WebSocket keeps its place among the
//! connections until it closes. HTTP/2 connections get keep-alive pings and a cap on calls at
//! once, and are closed after [`H2_IDLE`] without a call (`Calls` counts each call until its
//! response body ends): HTTP/1.1's header timer closes an idle connection, and HTTP/2 needs
//! its own, or idle connections could hold every place.

use crate::socket::CLOSE_GRACE;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{watch, Notify};

use crate::auth::AuthConfig;
use crate::daemon::Daemon;
use crate::pacing::Paced;
use crate::peers::{Admission, Admitted, Limits};

/// How long a client may take to send a request's headers (a connection that trickles them
/// holds a file descriptor; 300 such took a daemon past its limit).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

pub use crate::peers::MAX_CONNECTIONS;

/// Limits of [`serve_with`].
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// See [`HEADER_READ_TIMEOUT`].
    pub header_read_timeout: Duration,
    /// Connections at once, in all and per peer (default: [`Limits::for_this_process`]).
    pub connections: Limits,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            header_read_timeout: HEADER_READ_TIMEOUT,
            connections: Limits::for_this_process(),
        }
    }
}

/// Serves the API on `listener` until `shutdown` resolves, with the default limits; then
/// stops every session (see [`serve_with`]).
pub async fn serve(
    listener: TcpListener,
    daemon: Arc<Daemon>,
    auth: AuthConfig,
    shutdown: impl Future<Output = ()> + Send,
) -> std::io::Result<()> {
    serve_with(listener, daemon, auth, ServeOptions::default(), shutdown).await
}

/// Serves the API on `listener` until `shutdown` resolves. Then: the listener closes (nothing
/// new is accepted), requests in flight finish, client sockets are told the daemon is
/// shutting down, every session is stopped (its CLI interrupted, its input closed, then
/// signalled) and its last events stored, and the sockets are closed (code 1001). Returns
/// once the connections ended, or after [`CLOSE_GRACE`].
pub async fn serve_with(
    listener: TcpListener,
    daemon: Arc<Daemon>,
    auth: AuthConfig,
    options: ServeOptions,
    shutdown: impl Future<Output = ()> + Send,
) -> std::io::Result<()> {
    let rest = crate::api::router(daemon.clone(), auth.clone());
    let grpc = crate::grpc::router(daemon.clone(), auth).await;
    let app = Routers { rest, grpc: Some(grpc) };
    // Commands other nodes forward to this one (with a bus), while this one serves.
    let commands = tokio::spawn(crate::fleet::answer_commands(daemon.clone()));
    let served = accept(listener, daemon, app, options, shutdown, true).await;
    commands.abort();
    served
}

/// Serves the agents-ui relay protocol alone on `listener` (the port its frontends discover:
/// `switchboard serve --relay-ports`) until `shutdown` resolves: `/` for CLIs, `/ws` for
/// frontends (a page from an allowed origin needs no token there). It stops nothing: the
/// daemon's main [`serve_with`] drains the sessions.
pub async fn serve_relay(
    listener: TcpListener,
    daemon: Arc<Daemon>,
    auth: AuthConfig,
    shutdown: impl Future<Output = ()> + Send,
) -> std::io::Result<()> {
    let app = Routers { rest: crate::relay::router(daemon.clone(), auth), grpc: None };
    accept(listener, daemon, app, ServeOptions::default(), shutdown, false).await
}

/// Serves `GET /metrics` alone, with no token, on `listener` (`switchboard serve
/// --metrics-listen`) until `shutdown` resolves. It stops nothing.
pub async fn serve_metrics(
    listener: TcpListener,
    daemon: Arc<Daemon>,
    shutdown: impl Future<Output = ()> + Send,
) -> std::io::Result<()> {
    let app = Routers { rest: crate::api::metrics_router(daemon.clone()), grpc: None };
    accept(listener, daemon, app, ServeOptions::default(), shutdown, false).await
}

/// What a port serves: its HTTP routes, and gRPC's (for requests of its content type).
#[derive(Clone)]
struct Routers {
    rest: axum::Router,
    grpc: Option<axum::Router>,
}

/// The accept loop: see [`serve_with`]; `drain`: stop every session at the end.
async fn accept(
    listener: TcpListener,
    daemon: Arc<Daemon>,
    routers: Routers,
    options: ServeOptions,
    shutdown: impl Future<Output = ()> + Send,
    drain: bool,
) -> std::io::Result<()> {
    // Every body must keep arriving, whoever reads it ([`Paced`], wrapped per connection below).
    let app = tower::service_fn(move |request: axum::http::Request<axum::body::Body>| {
        let router = match &routers.grpc {
            Some(grpc) if crate::grpc::is_grpc(&request) => grpc.clone(),
            _ => routers.rest.clone(),
        };
        tower::ServiceExt::oneshot(router, request)
    });
    // One set of places for every port the daemon serves.
    let peers = daemon.peers(options.connections);
    let live = Arc::new(Live::default());
    // Dropped to tell every connection to finish gracefully.
    let (stop, stopping) = watch::channel(());
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                // Out of file descriptors (or another passing failure): wait a moment rather
                // than spin, and go on.
                tracing::warn!(%error, "cannot accept a connection");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let place = match peers.admit(peer.ip()) {
            Admission::Admitted(place) => Arc::new(place),
            Admission::Refused => {
                tracing::warn!(%peer, limits = ?peers.limits(), "too many connections, each carrying a socket or stream; closing a new one");
                drop(stream);
                continue;
            }
        };
        no_delay(&stream);
        let app = app.clone();
        let stopping = stopping.clone();
        let header_read_timeout = options.header_read_timeout;
        // The place goes with the socket, into a WebSocket if the connection upgrades: it is
        // free again when the socket is dropped.
        let mut stream = Counted {
            stream,
            prefix: Vec::new(),
            read: 0,
            _place: place.clone(),
            _live: Live::enter(&live),
        };
        tokio::spawn(async move {
            // The version is read under the same timer as the headers (hyper's own sniffing
            // would wait for a first byte with no timer at all).
            let http2 = tokio::select! {
                sniffed = sniff(&mut stream, header_read_timeout) => match sniffed {
                    Ok(http2) => http2,
                    Err(error) => {
                        tracing::trace!(%peer, %error, "connection ended before its first request");
                        return;
                    }
                },
                () = place.shed() => return,
            };
            let io = TokioIo::new(stream);
            if http2 {
                // Its calls are counted (a response holds its call until its body ends): a
                // connection with none for `H2_IDLE` is closed, as HTTP/1.1's header timer
                // closes an idle one, so that idle connections cannot hold every place. A
                // followed stream being answered holds the connection's place (it is not shed).
                let calls = Arc::new(Calls::default());
                let counted = {
                    let (calls, place) = (calls.clone(), place.clone());
                    tower::service_fn(move |request: axum::http::Request<hyper::body::Incoming>| {
                        let call = Call::begin(&calls);
                        let place = place.clone();
                        let followed = crate::grpc::is_followed_stream(request.uri().path());
                        let request = request.map(|body| axum::body::Body::new(Paced::new(body)));
                        let answer = tower::ServiceExt::oneshot(app.clone(), request);
                        async move {
                            let response = answer.await?;
                            // Only a followed stream, answered, holds the connection: any other
                            // answer a client does not read (its window shut) must not.
                            let hold =
                                (followed && response.status().is_success()).then(|| place.hold());
                            Ok::<_, std::convert::Infallible>(response.map(|body| {
                                let held =
                                    Held { body, _call: Some(call), _hold: hold, lease: None };
                                axum::body::Body::new(held)
                            }))
                        }
                    })
                };
                let connection = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .timer(TokioTimer::new())
                    .keep_alive_interval(Some(H2_KEEP_ALIVE))
                    .keep_alive_timeout(H2_KEEP_ALIVE)
                    .max_concurrent_streams(H2_MAX_STREAMS)
                    .serve_connection(io, TowerToHyperService::new(counted));
                let idle = async move {
                    calls.idle(H2_IDLE).await;
                    tracing::trace!(%peer, "an HTTP/2 connection without a call; closing it");
                };
                let shed = place.clone();
                drive(
                    connection,
                    stopping,
                    idle,
                    shed.shed(),
                    |connection| connection.graceful_shutdown(),
                    peer,
                )
                .await;
                return;
            }
            // A request holds its place from when its body has arrived until its answer has
            // been sent (a connection still sending one, or idle, holds nothing); a WebSocket
            // (its upgrade answered) until it closes.
            let upgrading = {
                let place = place.clone();
                tower::service_fn(move |request: axum::http::Request<hyper::body::Incoming>| {
                    let place = place.clone();
                    let lease = crate::peers::Lease::new(place.clone());
                    let request = request
                        .map(|body| axum::body::Body::new(Paced::leased(body, lease.clone())));
                    let answer = tower::ServiceExt::oneshot(app.clone(), request);
                    async move {
                        let response = answer.await?;
                        if response.status() == axum::http::StatusCode::SWITCHING_PROTOCOLS {
                            place.hold_for_good();
                        }
                        Ok::<_, std::convert::Infallible>(response.map(|body| {
                            axum::body::Body::new(Held {
                                body,
                                _call: None,
                                _hold: None,
                                lease: Some(lease),
                            })
                        }))
                    }
                })
            };
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(header_read_timeout)
                .serve_connection(io, TowerToHyperService::new(upgrading))
                .with_upgrades();
            let never = std::future::pending::<()>();
            drive(
                connection,
                stopping,
                never,
                place.shed(),
                |connection| connection.graceful_shutdown(),
                peer,
            )
            .await;
        });
    }
    // Nothing new is accepted; requests in flight finish.
    drop(listener);
    drop(stop);
    // Client sockets are told, every session stops and is stored, then the sockets close.
    if drain {
        daemon.drain().await;
    }
    // Wait (bounded) for the connections to send their close frames and end.
    if tokio::time::timeout(CLOSE_GRACE, live.ended()).await.is_err() {
        tracing::debug!("some connections were still open when the daemon stopped");
    }
    Ok(())
}

/// The connections whose sockets are still open (shed ones included, until they close).
#[derive(Debug, Default)]
struct Live {
    open: AtomicUsize,
    changed: Notify,
}

impl Live {
    fn enter(live: &Arc<Live>) -> LiveGuard {
        live.open.fetch_add(1, Ordering::SeqCst);
        LiveGuard(live.clone())
    }

    /// Resolves once every socket is closed.
    async fn ended(&self) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.open.load(Ordering::SeqCst) == 0 {
                return;
            }
            changed.await;
        }
    }
}

/// One open socket of [`Live`].
#[derive(Debug)]
struct LiveGuard(Arc<Live>);

impl Drop for LiveGuard {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::SeqCst);
        self.0.changed.notify_waiters();
    }
}

/// Turns Nagle's algorithm off: live frames are small and come one after another, and with it
/// a frame waited for the ACK of the one before (tens of ms at the p99).
fn no_delay(stream: &tokio::net::TcpStream) {
    if let Err(error) = stream.set_nodelay(true) {
        tracing::debug!(%error, "cannot set TCP_NODELAY on a connection");
    }
}

/// Runs a connection to its end; it is asked to finish gracefully when the daemon stops or
/// `idle` resolves (whichever comes first, once), and dropped at once when `shed`.
async fn drive<C, E>(
    connection: C,
    mut stopping: watch::Receiver<()>,
    idle: impl Future<Output = ()>,
    shed: impl Future<Output = ()>,
    graceful_shutdown: impl Fn(std::pin::Pin<&mut C>),
    peer: std::net::SocketAddr,
) where
    C: Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    tokio::pin!(connection);
    tokio::pin!(idle);
    tokio::pin!(shed);
    let mut told = false;
    loop {
        tokio::select! {
            result = connection.as_mut() => {
                if let Err(error) = result {
                    tracing::trace!(%peer, %error, "connection ended with an error");
                }
                break;
            }
            _ = stopping.changed(), if !told => {
                told = true;
                graceful_shutdown(connection.as_mut());
            }
            () = &mut idle, if !told => {
                told = true;
                graceful_shutdown(connection.as_mut());
            }
            () = &mut shed => {
                tracing::debug!(%peer, "connection shed to make room for another");
                break;
            }
        }
    }
}

/// What every HTTP/2 connection opens with (RFC 9113, section 3.4).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// How often an HTTP/2 connection is pinged, and how long its answer may take: a peer gone
/// without a word frees its place.
const H2_KEEP_ALIVE: Duration = Duration::from_secs(20);

/// Streams (calls) one HTTP/2 connection may have open at once.
const H2_MAX_STREAMS: u32 = 256;

/// How long an HTTP/2 connection may have no call open before it is closed.
pub const H2_IDLE: Duration = Duration::from_secs(60);

/// The calls open on one HTTP/2 connection.
#[derive(Default)]
struct Calls {
    open: std::sync::atomic::AtomicUsize,
    changed: tokio::sync::Notify,
}

impl Calls {
    /// Resolves once no call has been open for `limit`.
    async fn idle(&self, limit: Duration) {
        use std::sync::atomic::Ordering;
        loop {
            if self.open.load(Ordering::SeqCst) == 0 {
                tokio::select! {
                    () = tokio::time::sleep(limit) => {
                        if self.open.load(Ordering::SeqCst) == 0 {
                            return;
                        }
                    }
                    () = self.changed.notified() => {}
                }
            } else {
                self.changed.notified().await;
            }
        }
    }
}

/// One open call: counted from its request until its response's body ends (or is dropped).
struct Call(Arc<Calls>);

impl Call {
    fn begin(calls: &Arc<Calls>) -> Call {
        calls.open.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        calls.changed.notify_one();
        Call(calls.clone())
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        self.0.changed.notify_one();
    }
}

/// A response body that keeps what its answer holds until it ends (or is dropped): an HTTP/2
/// call open and, for a followed stream, its connection's place; an HTTP/1.1 request's
/// [`crate::peers::Lease`].
struct Held {
    body: axum::body::Body,
    _call: Option<Call>,
    _hold: Option<crate::peers::Hold>,
    lease: Option<Arc<crate::peers::Lease>>,
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(lease) = &self.lease {
            lease.end();
        }
    }
}

impl http_body::Body for Held {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        context: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let polled = std::pin::Pin::new(&mut self.body).poll_frame(context);
        if let (std::task::Poll::Ready(None), Some(lease)) = (&polled, &self.lease) {
            lease.end();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// Reads a connection's first bytes, up to HTTP/2's preface or the first byte that differs from
/// it, within `limit`: whether it speaks HTTP/2. The bytes read are kept to be read again.
async fn sniff(stream: &mut Counted, limit: Duration) -> std::io::Result<bool> {
    use tokio::io::AsyncReadExt;
    let deadline = tokio::time::Instant::now() + limit;
    while stream.prefix.len() < H2_PREFACE.len() {
        let mut chunk = [0u8; 24];
        let want = H2_PREFACE.len() - stream.prefix.len();
        let read = tokio::time::timeout_at(deadline, stream.stream.read(&mut chunk[..want]))
            .await
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??;
        if read == 0 {
            break;
        }
        stream.prefix.extend_from_slice(&chunk[..read]);
        if !H2_PREFACE.starts_with(&stream.prefix) {
            return Ok(false);
        }
    }
    Ok(stream.prefix == H2_PREFACE)
}

/// A connection's socket and its place among [`ServeOptions::connections`], with the first
/// bytes read to tell its HTTP version ([`sniff`]): they are read again first.
struct Counted {
    stream: tokio::net::TcpStream,
    prefix: Vec<u8>,
    read: usize,
    _place: Arc<Admitted>,
    _live: LiveGuard,
}

impl tokio::io::AsyncRead for Counted {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        context: &mut std::task::Context<'_>,
        buffer: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        if self.read < self.prefix.len() {
            let rest = &self.prefix[self.read..];
            let take = rest.len().min(buffer.remaining());
            buffer.put_slice(&rest[..take]);
            self.read += take;
            if self.read == self.prefix.len() {
                self.prefix = Vec::new();
                self.read = 0;
            }
            return std::task::Poll::Ready(Ok(()));
        }
        std::pin::Pin::new(&mut self.stream).poll_read(context, buffer)
    }
}

impl tokio::io::AsyncWrite for Counted {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        context: &mut std::task::Context<'_>,
        bytes: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.stream).poll_write(context, bytes)
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        context: &mut std::task::Context<'_>,
        buffers: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.stream).poll_write_vectored(context, buffers)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        context: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_flush(context)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        context: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_shutdown(context)
    }
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn accepted_connections_have_nodelay() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let _client = tokio::net::TcpStream::connect(address).await.unwrap();
        let (accepted, _) = listener.accept().await.unwrap();
        assert!(!accepted.nodelay().unwrap());
        super::no_delay(&accepted);
        assert!(accepted.nodelay().unwrap());
    }
}
