//! Transports to the Claude Code CLI. Each owns a pipe or a socket and turns it into decoded
//! lines in and encoded lines out; nothing above a transport knows which kind it talks to.
//!
//! - [`stdio`]: spawn `claude` and speak over its stdin/stdout (every current CLI).
//! - [`sdk_url`]: spawn `claude --sdk-url` and speak over the WebSocket it opens to us
//!   (CLIs up to 2.1.120).
//! - [`terminal`]: an interactive CLI in a person's terminal: its transcript's lines in, keys
//!   out (`switchboard claude`).
//! - [`events`]: what a session hears from its CLI: one queue, and a WebSocket CLI's frames
//!   read in the session's own task.
//! - [`procs`]: no process outlives its session (run ids, the sweep, leftovers of a killed
//!   daemon).
//! - [`random`]: tokens and ids from the OS's random source.

pub mod events;
pub mod procs;
pub mod random;
pub mod sdk_url;
pub mod stdio;
pub mod terminal;

pub use stdio::{
    cli_command, spawn, CliLink, CliOptions, CliProcess, CliRun, ExitInfo, TransportError,
    TransportEvent,
};
