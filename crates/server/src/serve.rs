//! Serving the router on a listener: what `axum::serve` does, plus the limits a daemon facing
//! untrusted clients needs. Every connection gets `TCP_NODELAY`, must finish its request
//! headers within [`ServeOptions::header_read_timeout`], and counts against
//! [`ServeOptions::max_connections`] (past it, new connections are closed at once, before
//! they can hold a file descriptor of the daemon's). On shutdown the listener closes first,
//! then open connections finish their requests, then every session is stopped.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

use crate::auth::AuthConfig;
use crate::daemon::Daemon;

/// How long a client may take to send a request's headers (a connection that trickles them
/// holds a file descriptor; 300 such took a daemon past its limit).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections served at once (HTTP and WebSocket alike); more are closed on arrival.
pub const MAX_CONNECTIONS: usize = 4096;

/// Limits of [`serve_with`].
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// See [`HEADER_READ_TIMEOUT`].
    pub header_read_timeout: Duration,
    /// See [`MAX_CONNECTIONS`].
    pub max_connections: usize,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions { header_read_timeout: HEADER_READ_TIMEOUT, max_connections: MAX_CONNECTIONS }
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
/// new is accepted), connections are told to finish, every session is stopped (its CLI
/// interrupted, its input closed, then signalled), and this returns once their last events
/// are stored.
pub async fn serve_with(
    listener: TcpListener,
    daemon: Arc<Daemon>,
    auth: AuthConfig,
    options: ServeOptions,
    shutdown: impl Future<Output = ()> + Send,
) -> std::io::Result<()> {
    let app = crate::api::router(daemon.clone(), auth);
    let slots = Arc::new(Semaphore::new(options.max_connections));
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
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::warn!(%peer, limit = options.max_connections, "too many connections; closing a new one");
            drop(stream);
            continue;
        };
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, "cannot set TCP_NODELAY on a connection");
        }
        let service = TowerToHyperService::new(app.clone());
        let mut stopping = stopping.clone();
        let header_read_timeout = options.header_read_timeout;
        tokio::spawn(async move {
            let mut builder = Builder::new(TokioExecutor::new());
            builder.http1().timer(TokioTimer::new()).header_read_timeout(header_read_timeout);
            builder.http2().timer(TokioTimer::new()).enable_connect_protocol();
            let connection = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
            tokio::pin!(connection);
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
                        connection.as_mut().graceful_shutdown();
                    }
                }
            }
            drop(slot);
        });
    }
    drop(listener);
    drop(stop);
    daemon.stop_all().await;
    Ok(())
}
