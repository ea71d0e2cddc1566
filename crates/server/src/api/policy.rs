//! `POST /api/policy/test`: a dry run of a candidate policy over stored sessions
//! ([`Daemon::trial`]), answered as NDJSON: `{"progress": …}` lines as the run goes, then one
//! `{"report": …}` (or `{"error": …}`). Read-only; a client that goes away ends the run.

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Extension;
use bytes::Bytes;
use serde::Deserialize;
use serde_json::json;
use tokio::sync::mpsc;

use crate::daemon::{Daemon, TrialFilter};
use crate::error::ApiError;
use crate::extract::Body;
use crate::tokens::Caller;

/// The largest candidate policy taken.
const MAX_POLICY_BYTES: usize = 64 * 1024;

/// What `POST /api/policy/test` takes.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TrialBody {
    /// The candidate policy, as TOML.
    policy: String,
    /// Which sessions: ids, `cwd=`, `token=`, `schedule=`, `trigger=` (default: every one).
    #[serde(default)]
    sessions: Option<String>,
    /// Only calls since: RFC 3339, or an age (`7d`, `24h`, `90m`).
    #[serde(default)]
    since: Option<String>,
}

/// `POST /api/policy/test`.
pub(super) async fn test_policy(
    State(daemon): State<Arc<Daemon>>,
    Extension(caller): Extension<Caller>,
    Body(body): Body<TrialBody>,
) -> Result<Response, ApiError> {
    if body.policy.len() > MAX_POLICY_BYTES {
        return Err(ApiError::invalid(format!("policy: at most {} KiB", MAX_POLICY_BYTES / 1024)));
    }
    switchboard_session::Policy::from_toml(&body.policy)
        .map_err(|error| ApiError::invalid(format!("policy: {error}")))?;
    let mut filter = TrialFilter::parse(body.sessions.as_deref().unwrap_or(""))
        .map_err(|error| ApiError::invalid(format!("sessions: {error}")))?;
    filter.since_ms = body
        .since
        .as_deref()
        .map(crate::search::query::since_ms)
        .transpose()
        .map_err(|error| ApiError::invalid(format!("since: {error}")))?;
    // A token with a ceiling sees only the sessions started under it.
    filter.within = caller.ceiling().map(|ceiling| ceiling.text.clone());
    let slot = daemon.trial_slot()?;
    let (lines, stream) = mpsc::channel::<Result<Bytes, Infallible>>(16);
    tokio::spawn(async move {
        let (progress, mut told) = mpsc::channel(16);
        let run = daemon.trial(slot, &body.policy, &filter, &progress);
        tokio::pin!(run);
        let outcome = loop {
            tokio::select! {
                Some(step) = told.recv() => {
                    if lines.send(Ok(line(&json!({ "progress": step })))).await.is_err() {
                        // The client went away: the run ends here.
                        return;
                    }
                }
                outcome = &mut run => break outcome,
            }
        };
        while let Ok(step) = told.try_recv() {
            let _ = lines.send(Ok(line(&json!({ "progress": step })))).await;
        }
        let last = match outcome {
            Ok(report) => json!({ "report": report }),
            Err(error) => {
                let error = ApiError::from(error);
                json!({ "error": { "code": error.code, "message": error.message } })
            }
        };
        let _ = lines.send(Ok(line(&last))).await;
    });
    let body = axum::body::Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(stream));
    Ok(([(header::CONTENT_TYPE, "application/x-ndjson")], body).into_response())
}

fn line(value: &serde_json::Value) -> Bytes {
    let mut text = value.to_string();
    text.push('\n');
    Bytes::from(text)
}
