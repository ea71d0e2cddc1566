//! Claude Code sessions.
//!
//! - [`spawn_session`] starts the CLI and the session actor; [`SessionHandle`] steers it (send
//!   messages, interrupt, switch model or mode, answer permissions and hooks, shut down) and
//!   the returned event stream reports everything, in order.
//! - [`core::SessionCore`] is the sans-IO state machine behind it.
//! - [`policy::Policy`] is the permission engine's pure core.
//! - [`pool::WarmPool`] keeps CLIs started ahead of their sessions.
//! - [`origin::TurnOrigin`] is who started a turn, typed (what a policy rule will name).
//! - [`replay::Replay`] reads a stored session's tool calls back with what decided each;
//!   [`policy::trial::Trial`] decides them again by another policy and counts the difference.
//! - [`unsettled::OpenCalls`] finds the calls a run started and never answered (its CLI ended
//!   under them), which are settled before the session runs again.
//! - [`projection::Projector`] turns a session's events into the one typed stream of what they
//!   mean ([`Update`]) and one snapshot ([`View`]): every face reads that, never the lines.

pub mod actor;
pub mod controls;
pub mod core;
pub mod cost;
pub mod event;
pub mod origin;
pub mod policy;
pub mod pool;
pub mod projection;
pub mod replay;
pub mod unsettled;

pub use actor::{
    spawn_session, spawn_session_on, EventSink, SessionConfig, SessionError, SessionEvents,
    SessionHandle, SinkFuture,
};
pub use controls::{priority_supported_by, version_at_least, CliControl};
pub use core::{
    hook_answer, AnswerBehavior, AnswerError, ParkedAnswer, PermissionAnswer, SessionSnapshot,
    SlashCommandInfo, ELICITATION_TOOL,
};
pub use event::{
    AskRule, DecidedBy, LineDirection, McpServer, PendingPermission, PermissionHints, SessionEvent,
    SessionState,
};
pub use origin::{OpenTurns, Sender, TurnOrigin};
pub use policy::ceiling::Ceiling;
pub use policy::{
    Behavior, CallFacts, Decision, EscalationStep, MatchContext, NotifyRoute, OnUnsettled, Policy,
    PolicyError,
};
pub use pool::{WarmCli, WarmPool, WarmStatus};
pub use projection::{Projector, Update, View};
