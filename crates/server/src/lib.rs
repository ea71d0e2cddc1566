//! The Switchboard daemon: many sessions at once, each a durable event log that any number of
//! clients can watch and steer over HTTP and WebSocket.
//!
//! - [`daemon::Daemon`]: sessions, the pump that stores then publishes every event, gap-free
//!   subscriptions, restart recovery.
//! - [`api::router`]: the REST + WebSocket API behind [`auth::require_auth`].

pub mod api;
pub mod auth;
mod compat;
pub mod daemon;
pub mod error;
mod relay;
mod serve;
pub mod transcripts;
mod ui;

pub use api::router;
pub use auth::{generate_token, AuthConfig};
pub use daemon::{CreateSession, Daemon, DaemonConfig, DaemonError, Subscribed, Subscription};
pub use error::ApiError;
pub use serve::{serve, serve_with, ServeOptions, HEADER_READ_TIMEOUT, MAX_CONNECTIONS};

/// The daemon's listener: every accepted connection gets `TCP_NODELAY`. Live frames are small
/// and come one after another; with Nagle's algorithm a frame waited for the ACK of the one
/// before, which the client may delay by up to tens of milliseconds.
pub fn nodelay(
    listener: tokio::net::TcpListener,
) -> impl axum::serve::Listener<Io = tokio::net::TcpStream, Addr = std::net::SocketAddr> {
    use axum::serve::ListenerExt;
    listener.tap_io(|stream| {
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, "cannot set TCP_NODELAY on a connection");
        }
    })
}
