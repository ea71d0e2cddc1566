//! The audit trail over REST (admin scope): `GET /api/audit` pages it, `GET /api/audit/verify`
//! checks it whole (`crate::audit`, docs/observability.md).

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::audit::AuditRecord;
use crate::daemon::Daemon;
use crate::error::ApiError;
use crate::extract::Params;

/// The most records one page holds.
pub(super) const MAX_AUDIT_PAGE: usize = 1000;

/// `GET /api/audit?after=SEQ&since=T&limit=N`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AuditQuery {
    /// Records after this one (default: from the first).
    #[serde(default)]
    after: u64,
    /// Only records written since this time (RFC 3339) or age (`7d`, `24h`).
    #[serde(default)]
    since: Option<String>,
    /// At most this many (default and most: [`MAX_AUDIT_PAGE`]).
    #[serde(default)]
    limit: Option<usize>,
}

/// A page of the trail: `{"records": [...], "last_seq", "more"}`; ask again with
/// `after=last_seq` (and no `since`) while `more`. With `since`, the page starts at the first
/// record written since then, and every record after it follows, without a hole (the nodes'
/// clocks, and a clock's steps, do not go one way: a later record may say earlier).
pub(super) async fn page(
    State(daemon): State<Arc<Daemon>>,
    Params(query): Params<AuditQuery>,
) -> Result<Json<Value>, ApiError> {
    let limit = query.limit.unwrap_or(MAX_AUDIT_PAGE).clamp(1, MAX_AUDIT_PAGE);
    let since = query
        .since
        .as_deref()
        .map(crate::search::query::since_ms)
        .transpose()
        .map_err(ApiError::invalid)?;
    let mut after = query.after;
    loop {
        let read = daemon.audit_page(after, limit).await?;
        let more = read.len() == limit;
        let last_seq = read.last().map_or(after, |record| record.seq);
        let start = match since {
            Some(since) => read.iter().position(|record| record.at_ms >= since),
            None => Some(0),
        };
        match start {
            Some(start) => {
                let records: Vec<AuditRecord> = read.into_iter().skip(start).collect();
                return Ok(Json(json!({"records": records, "last_seq": last_seq, "more": more})));
            }
            // Nothing on this page is that recent: on to the next.
            None if more => after = last_seq,
            None => {
                return Ok(Json(json!({"records": [], "last_seq": last_seq, "more": false})));
            }
        }
    }
}

/// The whole trail checked: `{"ok": true, "records", "head_seq", "head_hash"}`, or
/// `{"ok": false, "seq", "problem"}` naming the first record that does not follow.
pub(super) async fn verify(State(daemon): State<Arc<Daemon>>) -> Result<Json<Value>, ApiError> {
    Ok(Json(match daemon.audit_verify().await? {
        Ok(verified) => {
            let mut value = serde_json::to_value(verified).unwrap_or_default();
            value["ok"] = json!(true);
            value
        }
        Err(broken) => {
            let mut value = serde_json::to_value(broken).unwrap_or_default();
            value["ok"] = json!(false);
            value
        }
    }))
}
