//! The routes of a session's change and files: its diff, commit, merge, push, rewind and
//! discard (a worktree's review), and the Files view's listing and reads.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::daemon::Daemon;
use crate::error::ApiError;
use crate::extract::{Body, Params};
use crate::tokens::{Caller, Scope};

pub(super) async fn session_diff(
    State(daemon): State<Arc<Daemon>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<crate::diff::SessionDiff>, ApiError> {
    // A directory's diff shows its files: for those that may read them in Files.
    Ok(Json(daemon.diff(&id, caller.scope >= Scope::Operate).await?))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CommitBody {
    #[serde(default)]
    message: Option<String>,
}

pub(super) async fn session_commit(
    State(daemon): State<Arc<Daemon>>,
    Path(id): Path<String>,
    Body(body): Body<CommitBody>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(daemon.commit(&id, body.message.as_deref()).await?))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct MergeBody {
    mode: crate::worktree::MergeMode,
}

pub(super) async fn session_merge(
    State(daemon): State<Arc<Daemon>>,
    Path(id): Path<String>,
    Body(body): Body<MergeBody>,
) -> Result<Response, ApiError> {
    use crate::worktree::MergeRefused;
    Ok(match daemon.merge(&id, body.mode).await? {
        Ok(merged) => Json(merged).into_response(),
        Err(MergeRefused::Conflicts(files)) => {
            let message = format!(
                "{} file(s) conflict; nothing was merged: {}",
                files.len(),
                files.iter().take(20).cloned().collect::<Vec<_>>().join(", ")
            );
            let body =
                json!({"error": {"code": "merge_conflict", "message": message, "files": files}});
            (StatusCode::CONFLICT, Json(body)).into_response()
        }
        Err(MergeRefused::Other(why)) => ApiError::conflict("worktree", why).into_response(),
    })
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PushBody {
    #[serde(default)]
    remote: Option<String>,
}

pub(super) async fn session_push(
    State(daemon): State<Arc<Daemon>>,
    Path(id): Path<String>,
    Body(body): Body<PushBody>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(daemon.push(&id, body.remote.as_deref().unwrap_or("origin")).await?))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RewindBody {
    /// The prompt's `uuid`: the files go back to how they were before it ran.
    message: String,
    #[serde(default)]
    dry_run: bool,
}

pub(super) async fn session_rewind(
    State(daemon): State<Arc<Daemon>>,
    Path(id): Path<String>,
    Body(body): Body<RewindBody>,
) -> Result<Json<crate::daemon::Rewind>, ApiError> {
    Ok(Json(daemon.rewind(&id, &body.message, body.dry_run).await?))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct BrowseQuery {
    /// From the session's directory; empty for the directory itself.
    #[serde(default)]
    path: String,
}

pub(super) async fn session_files(
    State(daemon): State<Arc<Daemon>>,
    Path(id): Path<String>,
    Params(query): Params<BrowseQuery>,
) -> Result<Json<crate::browse::Listing>, ApiError> {
    let path = query.path;
    let found = daemon.browse(&id, move |root, touched, refuse| {
        crate::browse::list(root, &path, touched, refuse)
    });
    Ok(Json(found.await?.map_err(crate::faces::browse_error)?))
}

pub(super) async fn session_file(
    State(daemon): State<Arc<Daemon>>,
    Path(id): Path<String>,
    Params(query): Params<BrowseQuery>,
) -> Result<Json<crate::browse::FileView>, ApiError> {
    let path = query.path;
    let found = daemon.browse(&id, move |root, touched, refuse| {
        crate::browse::read(root, &path, touched, refuse)
    });
    Ok(Json(found.await?.map_err(crate::faces::browse_error)?))
}

pub(super) async fn session_discard(
    State(daemon): State<Arc<Daemon>>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    daemon.discard(&id).await?;
    Ok(StatusCode::NO_CONTENT)
}
