//! What the daemon's operations fail with ([`DaemonError`]); each face maps it to its own
//! status (REST codes, gRPC statuses).

use super::*;

/// Why a daemon operation failed.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// Bad input.
    #[error("{0}")]
    Invalid(String),
    /// No such session.
    #[error("no session {0}")]
    NotFound(String),
    /// No such thing besides a session (a schedule, a trigger): the sentence names it.
    #[error("{0}")]
    Missing(String),
    /// The request conflicts with what is (a schedule's run still going): the sentence says.
    #[error("{0}")]
    Conflict(String),
    /// The session is not running (exited, crashed, or the daemon restarted).
    #[error("session {0} is not running; resume it first")]
    NotRunning(String),
    /// The session is running (and cannot be resumed again).
    #[error("session {0} is already running")]
    AlreadyRunning(String),
    /// The session refused.
    #[error(transparent)]
    Session(#[from] switchboard_session::SessionError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The daemon is shutting down and starts nothing new.
    #[error("the daemon is shutting down")]
    ShuttingDown,
    /// Something inside the daemon failed (a poisoned lock, a task that died).
    #[error("internal error: {0}")]
    Internal(String),
    /// A budget is spent: the sentence says which, and how to go on.
    #[error("{0}")]
    Budget(String),
    /// The session's worktree is not as the request needs it (changes in it, or none).
    #[error("{0}")]
    Worktree(String),
    /// Something the daemon waited on did not finish in time (a slow disk): try again.
    #[error("{0}")]
    Busy(String),
    /// The caller may not see this (the sentence says what would let it).
    #[error("{0}")]
    Forbidden(String),
    /// The daemon runs as many sessions as it may ([`Placement::max_running`]).
    #[error("{running} sessions run on this daemon, the most it runs at once (serve --max-running {max}); stop one, or raise the limit")]
    MaxRunning {
        /// Sessions running or starting.
        running: usize,
        /// The limit.
        max: usize,
    },
    /// The CLI cannot put the files back (no checkpoint for that message, checkpointing off,
    /// the session working).
    #[error("{0}")]
    Rewind(String),
    /// Another live process writes the Claude session's transcript: it is not typed into,
    /// resumed or forked (one writer per transcript).
    #[error("{0}")]
    HeldElsewhere(String),
    /// The session is parked: its request is answered first (which resumes it).
    #[error("{0}")]
    Parked(String),
    /// The session's last run left tool calls unsettled: each is settled first.
    #[error("{0}")]
    Unsettled(String),
    /// The session's CLI is too old for a control (the message names the version that has it).
    #[error("{0}")]
    CliTooOld(String),
    /// The session runs on another daemon that shares this one's database.
    #[error("{0}")]
    OtherNode(String),
    /// The node that runs the session refused a command forwarded to it, as its API said.
    #[error("{message}")]
    Forwarded {
        /// The HTTP status it answered.
        status: u16,
        /// Its error code.
        code: String,
        /// Its sentence.
        message: String,
    },
}
