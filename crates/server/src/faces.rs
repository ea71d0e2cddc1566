//! What every face shares (REST and WebSocket in `api`, gRPC in `grpc`, the relay): the session
//! as every face shows it, the checks of a prompt and of a permission mode, the largest body a
//! request may carry, and a session's view replayed from its log. No face imports another;
//! each imports this.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use switchboard_protocol::{PermissionMode, UserMessage};
use switchboard_session::PendingPermission;
use switchboard_store::SessionRecord;

use crate::daemon::Daemon;
use crate::error::ApiError;

pub use crate::daemon::MAX_EVENTS_PAGE;

/// The largest request body accepted (prompts may carry base64 images).
pub const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;

/// A session as every face shows it (`GET /api/sessions`, gRPC's `Session`, the CLI client's
/// `switchboard sessions`): its public record, flattened, and what it is doing now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionView {
    /// Its record, secrets hidden.
    #[serde(flatten)]
    pub record: SessionRecord,
    /// Whether its CLI is running.
    pub running: bool,
    /// Permission requests waiting for a person.
    pub pending_permissions: Vec<PendingPermission>,
    /// Tasks running in the background (Bash commands, subagents), each of which may be
    /// stopped alone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub background_tasks: Vec<switchboard_session::projection::BackgroundTask>,
    /// `--sdk-url`: since when the CLI's socket is down (Unix milliseconds), while it is.
    pub disconnected_since_ms: Option<u64>,
    /// Why the session is paused (`state` is `paused`): the budget it reached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<String>,
    /// The slash commands and skills its CLI offers, while it runs.
    pub slash_commands: Vec<switchboard_session::SlashCommandInfo>,
    /// The node that ran it is lost (several daemons on one database): it runs nowhere now,
    /// and any node may resume it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub node_lost: bool,
    /// It runs (or ran last) on another node: its files, terminal and worktree are there.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub elsewhere: bool,
}

/// A session as every face shows it: its public record, whether it runs, what waits.
pub(crate) async fn view(daemon: &Daemon, record: SessionRecord) -> SessionView {
    let record = crate::daemon::public_record(record);
    let under_way = daemon.under_way(&record).await;
    let snapshot = daemon.handle(&record.id).ok().map(|handle| handle.snapshot());
    // A session on another node runs as its record says (that node keeps the record), unless
    // that node is lost.
    let node_lost = daemon.node_lost(&record);
    let elsewhere = daemon.runs_elsewhere(&record);
    let running = (snapshot.is_some() || (daemon.runs_elsewhere(&record) && !node_lost))
        && !record.state.is_final();
    let (disconnected_since_ms, slash_commands) = match snapshot {
        Some(snapshot) => (snapshot.disconnected_since_ms, snapshot.slash_commands),
        None => (None, Vec::new()),
    };
    let paused = daemon.paused(&record.id);
    SessionView {
        record,
        running,
        pending_permissions: under_way.pending_permissions,
        background_tasks: under_way.background_tasks,
        disconnected_since_ms,
        paused,
        slash_commands,
        node_lost,
        elsewhere,
    }
}

/// A prompt's content (a string, or text and image blocks) as a user message, checked by
/// [`crate::prompt`].
pub(crate) fn user_message(content: Value) -> Result<UserMessage, ApiError> {
    crate::prompt::user_message(content).map_err(ApiError::invalid)
}

/// A permission mode's name, or an error that lists the known ones.
pub(crate) fn permission_mode(name: &str) -> Result<PermissionMode, ApiError> {
    let mode: PermissionMode = name.parse().unwrap_or_default();
    if let PermissionMode::Other(other) = &mode {
        return Err(ApiError::invalid(format!(
            "unknown mode {other:?} (one of: {})",
            PermissionMode::KNOWN.join(", ")
        )));
    }
    Ok(mode)
}

/// A viewer that has projected a session's events up to `after`, silently: the state they
/// leave, for updates from there on, from the nearest checkpoint of the session's view
/// ([`Daemon::viewer_at`]).
pub(crate) async fn viewer_at(
    daemon: &Daemon,
    id: &str,
    after: u64,
) -> Result<crate::view::Viewer, ApiError> {
    Ok(daemon.viewer_at(id, after, crate::daemon::Keeping::Read).await?)
}

/// Projects a session's events up to `after` from its start, each update to `visit`
/// ([`Daemon::replay_view`]).
pub(crate) async fn replay(
    daemon: &Daemon,
    id: &str,
    after: u64,
    visit: &mut impl FnMut(&switchboard_store::EventRecord, crate::view::ViewUpdate),
) -> Result<crate::view::Viewer, ApiError> {
    Ok(daemon.replay_view(id, after, visit).await?)
}

/// Whether `caller` may answer request `request_id` of session `id` with `answer`: a token
/// with a ceiling allows only what the ceiling allows ([`crate::ceiling::check_answer`]);
/// a request not waiting is left to the answer itself to refuse.
pub(crate) async fn check_answer_to(
    daemon: &Daemon,
    caller: &crate::tokens::Caller,
    id: &str,
    request_id: &str,
    answer: &switchboard_session::PermissionAnswer,
) -> Result<(), crate::daemon::DaemonError> {
    let Some(ceiling) = caller.ceiling() else {
        return Ok(());
    };
    if answer.behavior != switchboard_session::AnswerBehavior::Allow {
        return Ok(());
    }
    // It allows only in the sessions under its ceiling (a deny, anywhere).
    check_within(daemon, caller, id).await?;
    let Some(record) = daemon.record(id).await? else {
        return Err(crate::daemon::DaemonError::NotFound(id.to_owned()));
    };
    let waiting = daemon.waiting(&record).await;
    let Some(pending) = waiting.iter().find(|pending| pending.request_id == request_id) else {
        // Nothing to hold the allow to: refused, as the answer itself would be.
        return Err(crate::daemon::DaemonError::Session(
            switchboard_session::SessionError::Answer(switchboard_session::AnswerError::Unknown(
                request_id.to_owned(),
            )),
        ));
    };
    crate::ceiling::check_answer(ceiling, &caller.name, pending, answer, &record.cwd)
        .map_err(crate::daemon::DaemonError::Forbidden)
}

/// Whether `caller` may operate session `id` (steer, stop, resume, change its mode or
/// model, read its files, touch its worktree): a token with a ceiling operates only the
/// sessions started under that same ceiling, which bounds them; any other token, any session.
pub(crate) async fn check_within(
    daemon: &Daemon,
    caller: &crate::tokens::Caller,
    id: &str,
) -> Result<(), crate::daemon::DaemonError> {
    let Some(ceiling) = caller.ceiling() else {
        return Ok(());
    };
    let Some(record) = daemon.record(id).await? else {
        // No such session: the route itself says so.
        return Ok(());
    };
    let under = record.launch.origin.as_ref().and_then(|origin| origin.ceiling.as_deref());
    if under == Some(&*ceiling.text) {
        return Ok(());
    }
    Err(crate::daemon::DaemonError::Forbidden(format!(
        "token {} has a ceiling: it operates only the sessions started under it, and session {id} was not",
        caller.name
    )))
}

/// [`check_within`] for a route that operates a session (`{id}` in its path), before its
/// handler runs.
pub(crate) async fn within_ceiling(
    axum::extract::State(daemon): axum::extract::State<std::sync::Arc<Daemon>>,
    axum::Extension(caller): axum::Extension<crate::tokens::Caller>,
    params: axum::extract::RawPathParams,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    if caller.ceiling().is_some() {
        if let Some((_, id)) = params.iter().find(|(name, _)| *name == "id") {
            if let Err(error) = check_within(&daemon, &caller, id).await {
                return ApiError::from(error).into_response();
            }
        }
    }
    next.run(request).await
}

/// Refused for a token with a ceiling: what it asks (`why` says) would reach beyond it.
pub(crate) fn refuse_ceiling(caller: &crate::tokens::Caller, why: &str) -> Result<(), ApiError> {
    match caller.ceiling() {
        Some(_) => Err(ApiError::forbidden(format!("token {} has a ceiling: {why}", caller.name))),
        None => Ok(()),
    }
}

/// A Files view's refusal as the API says it.
pub(crate) fn browse_error(error: crate::browse::BrowseError) -> ApiError {
    match error {
        crate::browse::BrowseError::NotFound(_) => ApiError::not_found(error.to_string()),
        crate::browse::BrowseError::Invalid(_) => ApiError::invalid(error.to_string()),
    }
}
