//! Claude Code sessions: the permission engine, and (next) the session actor and its handle.

pub mod policy;

pub use policy::{Behavior, Decision, MatchContext, Policy, PolicyError};
