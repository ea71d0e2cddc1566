//! The Switchboard daemon: many sessions at once, each a durable event log that any number of
//! clients can watch and steer over HTTP and WebSocket.
//!
//! - [`daemon::Daemon`]: sessions, the pump that stores then publishes every event, gap-free
//!   subscriptions, restart recovery.
//! - [`api::router`]: the REST + WebSocket API behind [`auth::require_auth`].
//! - [`grpc::router`]: the gRPC API (`proto/switchboard/v1/switchboard.proto`) on the same port.

pub mod addresses;
pub mod agents;
pub mod api;
mod approval;
pub mod audit;
pub mod auth;
pub mod browse;
pub mod budget;
pub mod bus;
pub mod ceiling;
pub mod changes;
pub mod checkpoints;
mod compat;
pub mod create;
pub mod daemon;
pub mod data_dir;
pub mod decisions;
pub mod diff;
pub mod error;
pub mod externals;
mod extract;
pub mod faces;
mod files;
mod fleet;
pub mod frames;
mod git;
pub mod grpc;
pub mod hook_keys;
pub mod hooks;
pub mod links;
pub mod mcp;
pub mod metrics;
pub mod notify;
pub mod pacing;
pub mod pair_codes;
pub mod pairing;
pub mod peers;
mod prompt;
pub mod push;
mod refusals;
mod relay;
pub mod relay_limits;
pub mod schedules;
pub mod search;
mod serve;
pub mod shared;
mod shell;
pub mod socket;
pub mod terminal;
mod text;
pub mod tokens;
pub mod traces;
pub mod transcripts;
mod ui;
pub mod unattended;
pub mod usage;
pub mod view;
pub mod watchers;
pub mod worktree;

pub use api::router;
pub use auth::{generate_token, AuthConfig};
pub use daemon::Phase;
pub use daemon::{
    CreateSession, Daemon, DaemonConfig, DaemonError, Launch, Subscribed, Subscription, WarmSpec,
    MAX_WARM_CLIS,
};
pub use data_dir::{DaemonInfo, DataDir};
pub use error::ApiError;
pub use serve::{
    serve, serve_metrics, serve_relay, serve_with, ServeOptions, H2_IDLE, HEADER_READ_TIMEOUT,
    MAX_CONNECTIONS,
};
pub use socket::CLOSE_GRACE;
pub use tokens::{Caller, Scope, Tokens};
