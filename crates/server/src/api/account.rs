//! The routes about who calls and what the daemon spends, not about one session: the caller
//! (`/api/me`), the named tokens, the fleet's nodes, the account's usage windows, the daily
//! budgets, and Web Push subscriptions.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::auth::AuthConfig;
use crate::daemon::Daemon;
use crate::error::ApiError;
use crate::extract::Body;
use crate::tokens::{Caller, Scope};

/// `GET /api/me`: the token a request presents, and the daemon's home folder (where a face
/// shortens the paths it shows, `~/app` for `/home/me/app`).
#[derive(Debug, Serialize, Deserialize)]
pub struct Me {
    /// The token's name.
    pub name: String,
    /// What it may do.
    pub scope: Scope,
    /// The daemon's `HOME`, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub home: Option<String>,
}

/// The token this request presents: its name and scope (the web UI shows what it allows), and
/// the daemon's home.
pub(super) async fn me(Extension(caller): Extension<Caller>) -> Json<Me> {
    let home = std::env::var_os("HOME").map(|home| home.to_string_lossy().into_owned());
    Json(Me { name: caller.name.to_string(), scope: caller.scope, home })
}

/// The daemon's tokens; with `--no-auth` there are none to manage.
fn tokens(auth: &AuthConfig) -> Result<&crate::tokens::Tokens, ApiError> {
    auth.tokens.as_deref().ok_or_else(|| {
        ApiError::invalid("the daemon runs with --no-auth: it has no tokens to manage")
    })
}

pub(super) async fn list_tokens(
    Extension(auth): Extension<AuthConfig>,
) -> Result<Json<Vec<crate::tokens::TokenInfo>>, ApiError> {
    Ok(Json(tokens(&auth)?.list()))
}

/// `POST /api/tokens`: `{name, scope, ceiling?}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CreateToken {
    name: String,
    scope: Scope,
    /// A policy's TOML that bounds what the token starts and answers.
    #[serde(default)]
    ceiling: Option<String>,
}

pub(super) async fn create_token(
    State(daemon): State<Arc<Daemon>>,
    Extension(auth): Extension<AuthConfig>,
    Extension(caller): Extension<Caller>,
    Body(body): Body<CreateToken>,
) -> Result<Response, ApiError> {
    let made = tokens(&auth)?.create_with(&body.name, body.scope, body.ceiling.as_deref()).await?;
    tracing::info!(name = %body.name, scope = %body.scope, by = %caller.name, "token created");
    daemon
        .audit(crate::audit::AuditEntry::TokenCreated {
            name: body.name.clone(),
            scope: body.scope.to_string(),
            ceiling: body.ceiling.is_some(),
            by: caller.who("rest", None),
        })
        .await;
    Ok((StatusCode::CREATED, Json(made)).into_response())
}

pub(super) async fn revoke_token(
    State(daemon): State<Arc<Daemon>>,
    Extension(auth): Extension<AuthConfig>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<Json<crate::tokens::TokenInfo>, ApiError> {
    let revoked = tokens(&auth)?.revoke(&name).await?;
    // Its devices hear no more (a push carries links that answer without a token).
    let devices = daemon.notifier().unsubscribe_by(&name).await;
    // What it made would go on starting sessions as it.
    let paused = daemon.pause_made_by(&name).await;
    tracing::info!(%name, by = %caller.name, devices, paused, "token revoked");
    daemon
        .audit(crate::audit::AuditEntry::TokenRevoked { name, by: caller.who("rest", None) })
        .await;
    Ok(Json(revoked))
}

/// The daemons sharing this one's database and bus, as their heartbeats say (`[]` without a
/// bus).
pub(super) async fn nodes(State(daemon): State<Arc<Daemon>>) -> Json<Vec<crate::bus::NodeStatus>> {
    Json(daemon.bus().map(|bus| bus.nodes()).unwrap_or_default())
}

/// `GET /api/usage`: the account's usage windows, as sessions last reported them.
pub(super) async fn usage(State(daemon): State<Arc<Daemon>>) -> Json<crate::usage::UsageReport> {
    Json(daemon.usage())
}

pub(super) async fn budget(State(daemon): State<Arc<Daemon>>) -> Json<crate::budget::Spend> {
    Json(daemon.budget())
}

pub(super) async fn change_budget(
    State(daemon): State<Arc<Daemon>>,
    Extension(caller): Extension<Caller>,
    Body(change): Body<crate::budget::LimitChange>,
) -> Result<Json<crate::budget::Spend>, ApiError> {
    let spend = daemon.change_budget(&change).await?;
    tracing::info!(by = %caller.name, daily_usd = ?spend.daily_usd, "daily budgets changed");
    let by = caller.who("rest", None);
    if let Some(daily) = change.daily_usd {
        let entry = crate::audit::AuditEntry::BudgetChanged {
            session: None,
            limit: "daily_usd".into(),
            usd: daily,
            by: by.clone(),
        };
        daemon.audit(entry).await;
    }
    for (token, daily) in &change.token_daily_usd {
        let entry = crate::audit::AuditEntry::BudgetChanged {
            session: None,
            limit: format!("token_daily_usd:{token}"),
            usd: *daily,
            by: by.clone(),
        };
        daemon.audit(entry).await;
    }
    Ok(Json(spend))
}

pub(super) async fn push_key(State(daemon): State<Arc<Daemon>>) -> Json<Value> {
    Json(json!({"public_key": daemon.notifier().push_key()}))
}

/// A subscription as the API shows it: its push service's host, not its endpoint (a
/// capability to wake the browser), nor its keys.
fn push_view(subscription: &crate::push::Subscription) -> Value {
    let host = subscription
        .endpoint
        .parse::<axum::http::Uri>()
        .ok()
        .and_then(|uri| uri.host().map(str::to_owned));
    json!({
        "id": subscription.id, "name": subscription.name, "by": subscription.by,
        "created_ms": subscription.created_ms, "events": subscription.events,
        "service": host,
    })
}

pub(super) async fn push_subscriptions(State(daemon): State<Arc<Daemon>>) -> Json<Vec<Value>> {
    Json(daemon.notifier().push_subscriptions().iter().map(push_view).collect())
}

pub(super) async fn push_subscribe(
    State(daemon): State<Arc<Daemon>>,
    Extension(caller): Extension<Caller>,
    Body(body): Body<crate::push::NewSubscription>,
) -> Result<Response, ApiError> {
    crate::faces::refuse_ceiling(
        &caller,
        "its devices would get one-tap links, which allow whatever its ceiling sends to a person",
    )?;
    let (subscription, created) = daemon.notifier().subscribe(body, &caller.name).await?;
    tracing::info!(id = %subscription.id, by = %caller.name, created, "push subscription");
    let status = if created { StatusCode::CREATED } else { StatusCode::OK };
    Ok((status, Json(push_view(&subscription))).into_response())
}

pub(super) async fn push_unsubscribe(
    State(daemon): State<Arc<Daemon>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    match daemon.notifier().unsubscribe(&id).await? {
        Some(_) => {
            tracing::info!(%id, by = %caller.name, "push subscription removed");
            Ok(StatusCode::NO_CONTENT)
        }
        None => Err(ApiError::not_found(format!("no push subscription {id}"))),
    }
}

pub(super) async fn push_test(
    State(daemon): State<Arc<Daemon>>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    if daemon.push_test(&id) {
        Ok(StatusCode::ACCEPTED)
    } else {
        Err(ApiError::not_found(format!("no push subscription {id}")))
    }
}
