//! Search and blame over REST (read scope): `GET /api/search?q=` answers a query of the
//! search language (`crate::search::query`, docs/search.md), `GET /api/blame` names the
//! session, turn and tool call that last wrote a line.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde::Deserialize;

use crate::daemon::Daemon;
use crate::error::ApiError;
use crate::extract::Params;

/// `GET /api/search?q=QUERY&limit=N&before=NEXT`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SearchParams {
    /// The query.
    #[serde(default)]
    q: String,
    /// Hits a page holds (50 by default, at most 1000).
    #[serde(default)]
    limit: Option<usize>,
    /// The page before's `next`.
    #[serde(default)]
    before: Option<String>,
}

/// A page of hits, or the groups (`crate::search::Answer`).
pub(super) async fn search(
    State(daemon): State<Arc<Daemon>>,
    Params(params): Params<SearchParams>,
) -> Result<Json<crate::search::Answer>, ApiError> {
    let answer = daemon.search_answer(&params.q, params.limit, params.before.as_deref()).await?;
    Ok(Json(answer))
}

/// `GET /api/blame?path=FILE&line=TEXT[&tail=PATH]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct BlameParams {
    /// The file: an absolute path.
    path: String,
    /// The line's text.
    line: String,
    /// The file's path in its repository, tried when no call wrote `path` itself (a clone
    /// elsewhere, a worktree merged).
    #[serde(default)]
    tail: Option<String>,
}

/// `{"found": {"call": …, "prompt": …, "title": …}}`, or `{"found": null}`.
pub(super) async fn blame(
    State(daemon): State<Arc<Daemon>>,
    Params(params): Params<BlameParams>,
) -> Result<Json<crate::search::BlameAnswer>, ApiError> {
    Ok(Json(daemon.blame_answer(&params.path, &params.line, params.tail.as_deref()).await?))
}
