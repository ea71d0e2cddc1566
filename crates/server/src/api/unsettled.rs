//! The routes of the calls a stopped session's last run left unsettled
//! ([`crate::daemon::Daemon::unsettled`]): listed, and each settled by a person before the
//! session runs again.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::{Extension, Json};
use serde::Deserialize;
use switchboard_session::unsettled::{Settle, UnsettledCall};

use crate::daemon::Daemon;
use crate::error::ApiError;
use crate::extract::Body;
use crate::tokens::Caller;

/// `GET /api/sessions/{id}/unsettled`.
pub(super) async fn list(
    State(daemon): State<Arc<Daemon>>,
    Path(id): Path<String>,
) -> Result<Json<Vec<UnsettledCall>>, ApiError> {
    Ok(Json(daemon.unsettled(&id).await?))
}

/// What `POST /api/sessions/{id}/unsettled/{call}` takes.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SettleBody {
    /// `interrupted` or `done`.
    settle: Settle,
    /// What the model is told with `done` (what the person found).
    #[serde(default)]
    note: Option<String>,
}

/// `POST /api/sessions/{id}/unsettled/{call}`: the calls still unsettled.
pub(super) async fn settle(
    State(daemon): State<Arc<Daemon>>,
    Extension(caller): Extension<Caller>,
    Path((id, call)): Path<(String, String)>,
    Body(body): Body<SettleBody>,
) -> Result<Json<Vec<UnsettledCall>>, ApiError> {
    let note = body.note.map(|note| note.trim().to_owned()).filter(|note| !note.is_empty());
    let by = caller.who("api", None);
    Ok(Json(daemon.settle_call(&id, &call, body.settle, note, &by).await?))
}
