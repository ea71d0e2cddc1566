//! The HTTP + WebSocket API (`docs/api.md`).
//!
//! The route table is defined once ([`routes`]: method, path, who checks the caller,
//! handler): the router is built from it, and `docs/api.md` is checked against it both ways.
//! Beside it, the REST handlers, the subscriber sockets (every frame already queued goes with
//! one flush), and the `--sdk-url` ingress (a POST's slot and token are checked before its
//! body is read).

use std::sync::Arc;

use axum::extract::ws::{Message as WsMessage, WebSocket};
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, patch, post};
use axum::Extension;
use axum::{Json, Router};
use futures::{SinkExt, StreamExt};
use serde::Deserialize;
use serde_json::{json, Value};
use switchboard_session::PendingPermission;

use crate::auth::{require_auth, require_scope, AuthConfig};
use crate::daemon::{CreateSession, Daemon, Subscribed};
use crate::error::ApiError;
use crate::extract::{Body, OptionalBody, Params, Upgrade};
use crate::faces::{permission_mode, user_message, view, viewer_at, SessionView};
pub use crate::faces::{MAX_BODY_BYTES, MAX_EVENTS_PAGE};

mod account;
mod audit;
mod policy;
mod search;
mod unsettled;
mod workspace;

use crate::frames::{event_frame, ClientFrame, PermissionBody, ServerFrame};
use crate::tokens::{Caller, Scope};
pub use account::Me;

/// How long the body of a CLI's `POST /session/{slot}/events` may take to arrive.
pub const INGRESS_BODY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Who checks a route's caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Guard {
    /// The API's token ([`require_auth`]), with at least this scope ([`require_scope`]).
    Api(Scope),
    /// A token of the route's own, checked by its handler: a CLI's per-session token, the
    /// relay's ingress token, or the page at `/` (which shows the login form).
    Own,
}

/// One route: method, path, who checks the caller, and the handler.
pub struct Route {
    /// `GET`, `POST`, `PATCH`, `DELETE`.
    pub method: &'static str,
    /// The path, with `{parameters}`.
    pub path: &'static str,
    /// Who checks the caller.
    pub guard: Guard,
    handler: axum::routing::MethodRouter<Arc<Daemon>>,
}

impl std::fmt::Debug for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Route").finish_non_exhaustive()
    }
}

/// Every route, defined once: the router is built from this table, and `docs/api.md`
/// documents exactly these (a test checks both ways).
pub fn routes() -> Vec<Route> {
    use axum::routing::delete;
    let route = |method, path, guard, handler| Route { method, path, guard, handler };
    let mcp = crate::mcp::service();
    vec![
        route("GET", "/api/health", Guard::Api(Scope::Read), get(health)),
        route("GET", "/metrics", Guard::Api(Scope::Read), get(metrics)),
        // The MCP face: each tool asks its own scope (crate::mcp).
        route("POST", "/mcp", Guard::Api(Scope::Read), axum::routing::post_service(mcp.clone())),
        route("GET", "/mcp", Guard::Api(Scope::Read), axum::routing::get_service(mcp.clone())),
        route("DELETE", "/mcp", Guard::Api(Scope::Read), axum::routing::delete_service(mcp)),
        route("GET", "/api/me", Guard::Api(Scope::Read), get(account::me)),
        route("GET", "/api/tokens", Guard::Api(Scope::Admin), get(account::list_tokens)),
        route("POST", "/api/tokens", Guard::Api(Scope::Admin), post(account::create_token)),
        route(
            "DELETE",
            "/api/tokens/{name}",
            Guard::Api(Scope::Admin),
            delete(account::revoke_token),
        ),
        route("GET", "/api/audit", Guard::Api(Scope::Admin), get(audit::page)),
        route("GET", "/api/audit/verify", Guard::Api(Scope::Admin), get(audit::verify)),
        route("GET", "/api/search", Guard::Api(Scope::Read), get(search::search)),
        route("GET", "/api/blame", Guard::Api(Scope::Read), get(search::blame)),
        route("GET", "/api/budget", Guard::Api(Scope::Read), get(account::budget)),
        route("GET", "/api/usage", Guard::Api(Scope::Read), get(account::usage)),
        route("POST", "/api/policy/test", Guard::Api(Scope::Read), post(policy::test_policy)),
        route("GET", "/api/nodes", Guard::Api(Scope::Read), get(account::nodes)),
        route("PATCH", "/api/budget", Guard::Api(Scope::Admin), patch(account::change_budget)),
        route("GET", "/api/push/key", Guard::Api(Scope::Approve), get(account::push_key)),
        route(
            "GET",
            "/api/push/subscriptions",
            Guard::Api(Scope::Admin),
            get(account::push_subscriptions),
        ),
        route(
            "POST",
            "/api/push/subscriptions",
            Guard::Api(Scope::Approve),
            post(account::push_subscribe),
        ),
        route(
            "DELETE",
            "/api/push/subscriptions/{id}",
            Guard::Api(Scope::Approve),
            delete(account::push_unsubscribe),
        ),
        route(
            "POST",
            "/api/push/subscriptions/{id}/test",
            Guard::Api(Scope::Approve),
            post(account::push_test),
        ),
        route(
            "GET",
            "/api/schedules",
            Guard::Api(Scope::Read),
            get(crate::unattended::list_schedules),
        ),
        route(
            "POST",
            "/api/schedules",
            Guard::Api(Scope::Operate),
            post(crate::unattended::add_schedule),
        ),
        route(
            "GET",
            "/api/schedules/{name}",
            Guard::Api(Scope::Read),
            get(crate::unattended::get_schedule),
        ),
        route(
            "PATCH",
            "/api/schedules/{name}",
            Guard::Api(Scope::Operate),
            patch(crate::unattended::pause_schedule),
        ),
        route(
            "DELETE",
            "/api/schedules/{name}",
            Guard::Api(Scope::Operate),
            delete(crate::unattended::remove_schedule),
        ),
        route(
            "POST",
            "/api/schedules/{name}/run",
            Guard::Api(Scope::Operate),
            post(crate::unattended::run_schedule),
        ),
        route(
            "GET",
            "/api/triggers",
            Guard::Api(Scope::Read),
            get(crate::unattended::list_triggers),
        ),
        route(
            "POST",
            "/api/triggers",
            Guard::Api(Scope::Operate),
            post(crate::unattended::add_trigger),
        ),
        route(
            "PATCH",
            "/api/triggers/{name}",
            Guard::Api(Scope::Operate),
            patch(crate::unattended::pause_trigger),
        ),
        route(
            "DELETE",
            "/api/triggers/{name}",
            Guard::Api(Scope::Operate),
            delete(crate::unattended::remove_trigger),
        ),
        route("GET", "/api/sessions", Guard::Api(Scope::Read), get(list_sessions)),
        route("POST", "/api/sessions", Guard::Api(Scope::Operate), post(create_session)),
        route("GET", "/api/sessions/{id}", Guard::Api(Scope::Read), get(get_session)),
        route("DELETE", "/api/sessions/{id}", Guard::Api(Scope::Operate), delete(delete_session)),
        route("PATCH", "/api/sessions/{id}", Guard::Api(Scope::Operate), patch(amend_session)),
        route("GET", "/api/sessions/{id}/usage", Guard::Api(Scope::Read), get(session_usage)),
        route("GET", "/api/sessions/{id}/cli/{question}", Guard::Api(Scope::Read), get(ask_cli)),
        route(
            "DELETE",
            "/api/sessions/{id}/queue/{uuid}",
            Guard::Api(Scope::Operate),
            delete(cancel_queued),
        ),
        route(
            "POST",
            "/api/sessions/{id}/tasks/{task_id}/stop",
            Guard::Api(Scope::Operate),
            post(stop_task),
        ),
        route(
            "GET",
            "/api/sessions/{id}/diff",
            Guard::Api(Scope::Read),
            get(workspace::session_diff),
        ),
        route(
            "POST",
            "/api/sessions/{id}/commit",
            Guard::Api(Scope::Operate),
            post(workspace::session_commit),
        ),
        route(
            "POST",
            "/api/sessions/{id}/merge",
            Guard::Api(Scope::Operate),
            post(workspace::session_merge),
        ),
        route(
            "POST",
            "/api/sessions/{id}/push",
            Guard::Api(Scope::Operate),
            post(workspace::session_push),
        ),
        route(
            "POST",
            "/api/sessions/{id}/discard",
            Guard::Api(Scope::Operate),
            post(workspace::session_discard),
        ),
        route(
            "POST",
            "/api/sessions/{id}/rewind",
            Guard::Api(Scope::Operate),
            post(workspace::session_rewind),
        ),
        route(
            "GET",
            "/api/sessions/{id}/files",
            Guard::Api(Scope::Operate),
            get(workspace::session_files),
        ),
        route(
            "GET",
            "/api/sessions/{id}/file",
            Guard::Api(Scope::Operate),
            get(workspace::session_file),
        ),
        route("GET", "/api/directories", Guard::Api(Scope::Operate), get(directories)),
        route(
            "POST",
            "/api/sessions/{id}/messages",
            Guard::Api(Scope::Operate),
            post(send_message),
        ),
        route("POST", "/api/sessions/{id}/interrupt", Guard::Api(Scope::Operate), post(interrupt)),
        route("POST", "/api/sessions/{id}/model", Guard::Api(Scope::Operate), post(set_model)),
        route(
            "POST",
            "/api/sessions/{id}/permission-mode",
            Guard::Api(Scope::Operate),
            post(set_permission_mode),
        ),
        route("POST", "/api/sessions/{id}/resume", Guard::Api(Scope::Operate), post(resume)),
        route("GET", "/api/sessions/{id}/unsettled", Guard::Api(Scope::Read), get(unsettled::list)),
        route(
            "POST",
            "/api/sessions/{id}/unsettled/{call}",
            Guard::Api(Scope::Operate),
            post(unsettled::settle),
        ),
        route(
            "GET",
            "/api/sessions/{id}/permissions",
            Guard::Api(Scope::Read),
            get(list_permissions),
        ),
        route(
            "POST",
            "/api/sessions/{id}/permissions/{request_id}",
            Guard::Api(Scope::Approve),
            post(answer_permission),
        ),
        route(
            "POST",
            "/api/sessions/{id}/permissions/{request_id}/link",
            Guard::Api(Scope::Approve),
            post(permission_link),
        ),
        route("GET", "/api/sessions/{id}/events", Guard::Api(Scope::Read), get(list_events)),
        route("GET", "/api/sessions/{id}/view", Guard::Api(Scope::Read), get(session_view)),
        route("GET", "/api/sessions/{id}/subscribe", Guard::Api(Scope::Read), get(subscribe)),
        route("GET", "/api/events", Guard::Api(Scope::Read), get(dashboard)),
        route("GET", "/api/claude/sessions", Guard::Api(Scope::Read), get(crate::compat::list)),
        route("GET", "/api/claude/agents", Guard::Api(Scope::Read), get(crate::compat::agents)),
        route("GET", "/api/claude/sessions/{id}", Guard::Api(Scope::Read), get(crate::compat::get)),
        route(
            "GET",
            "/api/claude/sessions/{id}/subscribe",
            Guard::Api(Scope::Read),
            get(crate::compat::subscribe),
        ),
        route("GET", "/api/terminals", Guard::Api(Scope::Operate), get(crate::terminal::attach)),
        route("GET", "/api/sessions/{id}/shell", Guard::Api(Scope::Admin), get(crate::shell::open)),
        route("GET", "/ws", Guard::Api(Scope::Read), get(crate::relay::frontend)),
        // The UI's files go out gzipped to browsers that take it (a third of the bytes).
        route(
            "GET",
            "/ui/{*path}",
            Guard::Api(Scope::Read),
            get(crate::ui::asset).layer(tower_http::compression::CompressionLayer::new()),
        ),
        // One-tap approval links: the link is the credential ([`crate::links`]).
        route("GET", "/a/{link}", Guard::Own, get(crate::approval::page)),
        route("POST", "/a/{link}", Guard::Own, post(crate::approval::answer)),
        route("POST", "/api/pair", Guard::Api(Scope::Admin), post(crate::pairing::create)),
        route("GET", "/pair/{code}", Guard::Own, get(crate::pairing::page)),
        route("POST", "/pair/{code}", Guard::Own, post(crate::pairing::redeem)),
        route("POST", "/hooks/pre-tool-use", Guard::Own, post(crate::hooks::pre_tool_use)),
        route(
            "POST",
            "/hooks/permission-request",
            Guard::Own,
            post(crate::hooks::permission_request),
        ),
        route("POST", "/hooks/claude", Guard::Api(Scope::Operate), post(crate::hooks::claude_hook)),
        // A trigger's webhook: its signature is its authentication.
        route("POST", "/hooks/{name}", Guard::Own, post(crate::unattended::webhook)),
        route("GET", "/v1/sessions/ws/{slot}", Guard::Own, get(ingress)),
        route("POST", "/session/{slot}/events", Guard::Own, post(ingress_events)),
        // The relay's CLI socket (an upgrade) or the web UI's page.
        route("GET", "/", Guard::Own, get(crate::ui::root)),
    ]
}

/// Builds the router from [`routes`].
pub fn router(daemon: Arc<Daemon>, auth: AuthConfig) -> Router {
    let mut api = Router::new();
    let mut own = Router::new();
    for route in routes() {
        match route.guard {
            Guard::Api(scope) => {
                let mut handler = route.handler;
                if scope >= Scope::Operate && route.path.contains("{id}") {
                    // A token with a ceiling operates only the sessions under it.
                    handler = handler.layer(axum::middleware::from_fn_with_state(
                        daemon.clone(),
                        crate::faces::within_ceiling,
                    ));
                }
                let checked =
                    handler.layer(axum::middleware::from_fn_with_state(scope, require_scope));
                api = api.route(route.path, checked);
            }
            Guard::Own => own = own.route(route.path, route.handler),
        }
    }
    let api = api
        .fallback(not_found)
        .method_not_allowed_fallback(crate::extract::method_not_allowed)
        .with_state(daemon.clone())
        // The MCP face reads the daemon from its request (its service has no router state).
        .layer(axum::Extension(daemon.clone()))
        .layer(axum::Extension(auth.clone()))
        .layer(axum::middleware::from_fn_with_state(auth.clone(), require_auth));
    let own = own
        .method_not_allowed_fallback(crate::extract::method_not_allowed)
        .layer(axum::Extension(auth))
        .with_state(daemon);
    own.merge(api).layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
}

/// The slot `slot_id` if the request carries its token.
fn ingress_slot(
    daemon: &Daemon,
    slot_id: &str,
    headers: &axum::http::HeaderMap,
) -> Result<Arc<switchboard_transport::sdk_url::IngressSlot>, ApiError> {
    let slot = daemon
        .ingress_slot(slot_id)
        .ok_or_else(|| ApiError::not_found("no session waits for a CLI here"))?;
    if slot.accepts(crate::auth::bearer(headers).unwrap_or("")) {
        Ok(slot)
    } else {
        Err(ApiError::unauthorized_bearer("the session's CLI token"))
    }
}

/// The hybrid transport's ingress: `{"events": [message, …]}` from the CLI, fed to the same
/// session as its socket, with the same auth and de-duplication. The slot and its token are
/// checked before a byte of the body is read; the body then has [`INGRESS_BODY_TIMEOUT`] to
/// arrive, and at most [`MAX_BODY_BYTES`].
async fn ingress_events(
    State(daemon): State<Arc<Daemon>>,
    Path(slot_id): Path<String>,
    headers: axum::http::HeaderMap,
    body: axum::body::Body,
) -> Result<Json<Value>, ApiError> {
    let slot = ingress_slot(&daemon, &slot_id, &headers)?;
    let body = crate::extract::bounded_body(body, MAX_BODY_BYTES, INGRESS_BODY_TIMEOUT).await?;
    #[derive(Deserialize)]
    struct Events<'a> {
        #[serde(borrow)]
        events: Vec<&'a serde_json::value::RawValue>,
    }
    let events: Events<'_> = serde_json::from_slice(&body)
        .map_err(|error| ApiError::invalid(format!("expected {{\"events\": [...]}}: {error}")))?;
    slot.post_events(&events.events).await;
    Ok(Json(json!({"accepted": events.events.len()})))
}

/// `--sdk-url`: a CLI connects. Its bearer token must be its session's
/// (`CLAUDE_CODE_SESSION_ACCESS_TOKEN`); lines flow both ways, one per text frame, each
/// ending in `\n`.
async fn ingress(
    State(daemon): State<Arc<Daemon>>,
    Path(slot_id): Path<String>,
    headers: axum::http::HeaderMap,
    Upgrade(upgrade): Upgrade,
) -> Result<Response, ApiError> {
    let slot = ingress_slot(&daemon, &slot_id, &headers)?;
    Ok(upgrade
        .max_message_size(switchboard_protocol::MAX_LINE_BYTES)
        .read_buffer_size(crate::socket::CLI_WS_READ_BUFFER_BYTES)
        .on_upgrade(move |socket| crate::socket::pipe(socket, slot, daemon.ping_interval())))
}

async fn not_found() -> ApiError {
    ApiError::not_found("no such endpoint")
}

/// `GET /metrics`: every metric, its gauges read now, in the OpenMetrics text format
/// (docs/observability.md).
async fn metrics(State(daemon): State<Arc<Daemon>>) -> Response {
    ([(axum::http::header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], daemon.scrape())
        .into_response()
}

/// `/metrics` alone, with no token: what `serve --metrics-listen` serves on an address of its
/// own, for a Prometheus that holds no token.
pub fn metrics_router(daemon: Arc<Daemon>) -> Router {
    Router::new().route("/metrics", get(metrics)).with_state(daemon)
}

async fn health(State(daemon): State<Arc<Daemon>>) -> Result<Json<Value>, ApiError> {
    let sessions =
        daemon.store().list_sessions().await.map_err(crate::daemon::DaemonError::from)?;
    let running = sessions.iter().filter(|s| daemon.handle(&s.id).is_ok()).count();
    Ok(Json(
        json!({"status": "ok", "version": env!("CARGO_PKG_VERSION"), "sessions": sessions.len(), "running": running, "warm": daemon.warm_status()}),
    ))
}

async fn list_sessions(
    State(daemon): State<Arc<Daemon>>,
) -> Result<Json<Vec<SessionView>>, ApiError> {
    let sessions =
        daemon.store().list_sessions().await.map_err(crate::daemon::DaemonError::from)?;
    let mut views = Vec::with_capacity(sessions.len());
    for stored in sessions {
        let record = daemon.live_record(&stored.id).unwrap_or(stored);
        views.push(view(&daemon, record).await);
    }
    Ok(Json(views))
}

async fn create_session(
    State(daemon): State<Arc<Daemon>>,
    Extension(caller): Extension<Caller>,
    Body(mut request): Body<CreateSession>,
) -> Result<Response, ApiError> {
    crate::tokens::check_create(&caller, &request)?;
    request.started_by = Some(caller.sender("api", None));
    // `switchboard acp` says it is the editor's face.
    let face = if caller.via() == Some("acp") {
        switchboard_store::Face::Acp
    } else {
        switchboard_store::Face::Api
    };
    request.origin = Some(caller.origin(face));
    let record = daemon.create(request).await?;
    Ok((StatusCode::CREATED, Json(view(&daemon, record).await)).into_response())
}

async fn get_session(
    State(daemon): State<Arc<Daemon>>,
    Path(id): Path<String>,
) -> Result<Json<SessionView>, ApiError> {
    let record =
        daemon.record(&id).await?.ok_or_else(|| ApiError::not_found(format!("no session {id}")))?;
    Ok(Json(view(&daemon, record).await))
}

#[derive(Debug, Deserialize)]
struct DeleteQuery {
    #[serde(default)]
    purge: bool,
    /// With `purge`: remove the session's worktree even with changes in it.
    #[serde(default)]
    force: bool,
    /// With `purge`: delete the worktree's branch too.
    #[serde(default)]
    delete_branch: bool,
}

async fn delete_session(
    State(daemon): State<Arc<Daemon>>,
    Path(id): Path<String>,
    Params(query): Params<DeleteQuery>,
) -> Result<Response, ApiError> {
    if query.purge {
        daemon.delete(&id, query.force, query.delete_branch).await?;
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    daemon.stop(&id, false).await?;
    let record =
        daemon.record(&id).await?.ok_or_else(|| ApiError::not_found(format!("no session {id}")))?;
    Ok(Json(view(&daemon, record).await).into_response())
}

/// Renames a session, puts it away, or changes what it may spend (`{"title"}`,
/// `{"archived"}`, `{"max_budget_usd"}`, `{"max_window_utilization"}`, or several).
async fn amend_session(
    State(daemon): State<Arc<Daemon>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    Body(body): Body<crate::daemon::Amend>,
) -> Result<Json<SessionView>, ApiError> {
    let record = daemon.amend(&id, &body).await?;
    if body.max_budget_usd.is_some() {
        daemon
            .audit(crate::audit::AuditEntry::BudgetChanged {
                session: Some(id.clone()),
                limit: "max_budget_usd".into(),
                usd: record.launch.max_budget_usd,
                by: caller.who("rest", None),
            })
            .await;
    }
    // The CLI hears of the new title too, where it can (2.1.330 on): its own transcript list
    // then shows it. The title is the record's either way.
    if let (Some(title), true) = (body.title.as_deref(), daemon.handle(&id).is_ok()) {
        let control = switchboard_session::CliControl::Rename { title: title.to_owned() };
        if let Err(error) = daemon.ask_cli(&id, control).await {
            tracing::debug!(session = %id, %error, "the CLI was not told the new title");
        }
    }
    Ok(Json(view(&daemon, record).await))
}

/// `GET /api/sessions/{id}/cli/{question}`: what the session's CLI says of `usage` (the
/// session's cost and the plan's windows), `context` (the context window by what fills it),
/// `permission-rules` (the rules in force) or `hooks` (the hooks configured). `409
/// cli_too_old` names the version that answers it.
async fn ask_cli(
    State(daemon): State<Arc<Daemon>>,
    Path((id, question)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let Some(control) = switchboard_session::CliControl::question(&question) else {
        return Err(ApiError::not_found(format!(
            "no question {question:.40}: ask usage, context, permission-rules or hooks"
        )));
    };
    Ok(Json(daemon.ask_cli(&id, control).await?))
}

/// `DELETE /api/sessions/{id}/queue/{uuid}`: drops a prompt that waits behind the running
/// turn (`cancel_async_message`); `{"cancelled": false}` when it was no longer queued.
async fn cancel_queued(
    State(daemon): State<Arc<Daemon>>,
    Path((id, uuid)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let control = switchboard_session::CliControl::CancelMessage { uuid };
    Ok(Json(daemon.ask_cli(&id, control).await?))
}

/// `POST /api/sessions/{id}/tasks/{task_id}/stop`: stops one background task (`stop_task`).
async fn stop_task(
    State(daemon): State<Arc<Daemon>>,
    Path((id, task_id)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let control = switchboard_session::CliControl::StopTask { task_id };
    Ok(Json(daemon.ask_cli(&id, control).await?))
}

pub use crate::daemon::MAX_USAGE_TURNS;

/// What a session's turns cost, from its log ([`Daemon::session_usage`]).
async fn session_usage(
    State(daemon): State<Arc<Daemon>>,
    Path(id): Path<String>,
) -> Result<Json<crate::daemon::SessionUsage>, ApiError> {
    Ok(Json(daemon.session_usage(&id).await?))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DirectoriesQuery {
    prefix: String,
}

/// The most directories `GET /api/directories` answers with.
pub const MAX_DIRECTORIES: usize = 50;
/// The most entries of a directory it reads: a larger one is completed from these alone.
pub const MAX_DIRECTORY_ENTRIES: usize = 20_000;
/// How long a listing may take (a slow or hung mount answers 503 meanwhile).
const DIRECTORIES_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// One listing at a time: a listing is a blocking task the timeout cannot cancel, so a hung
/// mount holds one blocking thread, not one per keystroke.
static LISTING: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(1);

/// Completes a working directory: the directories whose path starts with `prefix` (an
/// absolute path; `/home/me/pro` lists `/home/me/pro*`, `/home/me/` lists what is in it).
/// Hidden ones only when the name typed so far starts with a dot. A token holder may start a
/// session in any directory, so listing their names shows nothing a session could not.
async fn directories(
    Params(query): Params<DirectoriesQuery>,
) -> Result<Json<Vec<String>>, ApiError> {
    let prefix = query.prefix;
    if !prefix.starts_with('/') || prefix.contains('\0') || prefix.len() > 4096 {
        return Err(ApiError::invalid("`prefix` must be an absolute path"));
    }
    let (parent, start) = prefix.rsplit_once('/').unwrap_or(("", ""));
    let parent = if parent.is_empty() { "/".to_owned() } else { parent.to_owned() };
    let start = start.to_owned();
    let busy = || ApiError::unavailable("the directory could not be listed in time; try again");
    let permit = tokio::time::timeout(DIRECTORIES_TIMEOUT, LISTING.acquire())
        .await
        .map_err(|_| busy())?
        .map_err(|_| busy())?;
    let listing = tokio::task::spawn_blocking(move || -> Vec<String> {
        let _permit = permit;
        let Ok(entries) = std::fs::read_dir(&parent) else { return Vec::new() };
        let base = parent.trim_end_matches('/');
        let mut found: Vec<String> = entries
            .take(MAX_DIRECTORY_ENTRIES)
            .filter_map(Result::ok)
            .filter_map(|entry| {
                // The name first: a stat only for the entries that match it.
                let name = entry.file_name().into_string().ok()?;
                if !name.starts_with(&start) || (name.starts_with('.') && !start.starts_with('.')) {
                    return None;
                }
                let kind = entry.file_type().ok()?;
                // A link to a directory counts: its target is looked at.
                let directory = kind.is_dir()
                    || (kind.is_symlink()
                        && std::fs::metadata(entry.path()).is_ok_and(|meta| meta.is_dir()));
                directory.then(|| format!("{base}/{name}"))
            })
            .collect();
        found.sort();
        found.truncate(MAX_DIRECTORIES);
        found
    });
    match tokio::time::timeout(DIRECTORIES_TIMEOUT, listing).await {
        Ok(Ok(found)) => Ok(Json(found)),
        Ok(Err(_)) | Err(_) => Err(busy()),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MessageBody {
    /// A string, or content blocks (text, images).
    content: Value,
    /// While a turn runs: `now` (steer it), `next`, `later`.
    #[serde(default)]
    priority: Option<switchboard_protocol::MessagePriority>,
    /// The message's id, a UUID the client chooses, so that it knows the message's echo and
    /// turn before the answer comes (default: one the daemon makes).
    #[serde(default)]
    uuid: Option<String>,
}

async fn send_message(
    State(daemon): State<Arc<Daemon>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    Body(body): Body<MessageBody>,
) -> Result<Response, ApiError> {
    let mut message = crate::prompt::with_priority(user_message(body.content)?, body.priority)
        .map_err(ApiError::invalid)?;
    // Named here so that the caller can find it in the log: its echo, a `resent`, or an
    // `undelivered`.
    let uuid = match body.uuid {
        Some(given) => uuid::Uuid::parse_str(&given)
            .map_err(|_| ApiError::invalid(format!("uuid {given:?} is not a UUID")))?
            .to_string(),
        None => uuid::Uuid::new_v4().to_string(),
    };
    message.uuid = Some(uuid.clone());
    daemon.send_message(&id, message, caller.sender("api", None)).await?;
    Ok((StatusCode::ACCEPTED, Json(json!({"queued": true, "uuid": uuid}))).into_response())
}

async fn interrupt(
    State(daemon): State<Arc<Daemon>>,
    Path(id): Path<String>,
    OptionalBody(body): OptionalBody<crate::frames::InterruptFrame>,
) -> Result<Json<Value>, ApiError> {
    daemon.interrupt(&id, body.cancel_queued).await?;
    Ok(Json(json!({"interrupted": true, "cancel_queued": body.cancel_queued})))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelBody {
    model: String,
}

async fn set_model(
    State(daemon): State<Arc<Daemon>>,
    Path(id): Path<String>,
    Body(body): Body<ModelBody>,
) -> Result<Json<Value>, ApiError> {
    if body.model.trim().is_empty() {
        return Err(ApiError::invalid("model is empty"));
    }
    daemon.set_model(&id, &body.model).await?;
    Ok(Json(json!({"model": body.model})))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ModeBody {
    mode: String,
}

async fn set_permission_mode(
    State(daemon): State<Arc<Daemon>>,
    Path(id): Path<String>,
    Body(body): Body<ModeBody>,
) -> Result<Json<Value>, ApiError> {
    let mode = permission_mode(&body.mode)?;
    daemon.set_permission_mode(&id, mode).await?;
    Ok(Json(json!({"mode": body.mode})))
}

async fn resume(
    State(daemon): State<Arc<Daemon>>,
    Path(id): Path<String>,
) -> Result<Json<SessionView>, ApiError> {
    let record = daemon.resume(&id).await?;
    Ok(Json(view(&daemon, record).await))
}

async fn list_permissions(
    State(daemon): State<Arc<Daemon>>,
    Path(id): Path<String>,
) -> Result<Json<Vec<PendingPermission>>, ApiError> {
    let Some(record) = daemon.record(&id).await? else {
        return Err(ApiError::not_found(format!("no session {id}")));
    };
    Ok(Json(daemon.waiting(&record).await))
}

async fn answer_permission(
    State(daemon): State<Arc<Daemon>>,
    Extension(caller): Extension<Caller>,
    Path((id, request_id)): Path<(String, String)>,
    Body(body): Body<PermissionBody>,
) -> Result<Json<Value>, ApiError> {
    if body.request_id.as_ref().is_some_and(|named| *named != request_id) {
        return Err(ApiError::invalid("the body names another request_id than the path"));
    }
    caller.require(body.scope())?;
    let (answer, who) = body.into_answer(&caller, "api")?;
    let behavior = answer.behavior;
    crate::faces::check_answer_to(&daemon, &caller, &id, &request_id, &answer).await?;
    daemon.respond_permission(&id, &request_id, answer, &who).await?;
    Ok(Json(json!({"request_id": request_id, "behavior": behavior})))
}

/// A one-tap link to a waiting request, to hand to whoever should answer it (it answers as
/// `link (api:TOKEN)`); only a token that may answer may make one.
async fn permission_link(
    State(daemon): State<Arc<Daemon>>,
    Extension(caller): Extension<Caller>,
    Path((id, request_id)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let Some(record) = daemon.record(&id).await? else {
        return Err(ApiError::not_found(format!("no session {id}")));
    };
    // Whoever opens a link may allow: a token makes one only for what it could allow itself.
    let allow = switchboard_session::PermissionAnswer {
        behavior: switchboard_session::AnswerBehavior::Allow,
        ..switchboard_session::PermissionAnswer::default()
    };
    crate::faces::check_answer_to(&daemon, &caller, &id, &request_id, &allow).await?;
    let pending = daemon
        .waiting(&record)
        .await
        .into_iter()
        .find(|pending| pending.request_id == request_id)
        .ok_or_else(|| ApiError::not_found(format!("no request {request_id} waits in {id}")))?;
    let link =
        daemon.approval_link(&id, &pending, &format!("api:{}", caller.name)).ok_or_else(|| {
            ApiError::conflict(
                "too_long",
                format!(
            "request {request_id} and session {id} are too long together for a one-tap link \
             (at most {} characters); answer it with POST …/permissions/{{request_id}}",
            crate::links::MAX_LINK_CHARS
        ),
            )
        })?;
    let expires_ms = pending.expires_ms();
    Ok(Json(json!({"link": link, "expires_ms": expires_ms})))
}

/// A page of a session's log: `after` pages forward, `before` back, `limit` events at most.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PageQuery {
    #[serde(default)]
    after: Option<u64>,
    /// Page back: the last `limit` events before this seq.
    #[serde(default)]
    before: Option<u64>,
    #[serde(default)]
    limit: Option<usize>,
}

impl PageQuery {
    fn limit(&self) -> usize {
        self.limit.unwrap_or(MAX_EVENTS_PAGE).clamp(1, MAX_EVENTS_PAGE)
    }

    /// The page's events, in order (404 for an unknown session).
    async fn read(
        &self,
        daemon: &Daemon,
        id: &str,
    ) -> Result<Vec<switchboard_store::EventRecord>, ApiError> {
        if daemon.record(id).await?.is_none() {
            return Err(ApiError::not_found(format!("no session {id}")));
        }
        let store = daemon.store();
        let limit = self.limit();
        let events = match (self.after, self.before) {
            (Some(_), Some(_)) => {
                return Err(ApiError::invalid("give `after` or `before`, not both"));
            }
            (after, None) => store.events_after(id, after.unwrap_or(0), limit).await,
            (None, Some(before)) => store.events_before(id, before, limit).await,
        };
        Ok(events.map_err(crate::daemon::DaemonError::from)?)
    }
}

async fn list_events(
    State(daemon): State<Arc<Daemon>>,
    Path(id): Path<String>,
    Params(query): Params<PageQuery>,
) -> Result<Response, ApiError> {
    let events = query.read(&daemon, &id).await?;
    let body = format!("[{}]", events.iter().map(event_frame).collect::<Vec<_>>().join(","));
    Ok(([(axum::http::header::CONTENT_TYPE, "application/json")], body).into_response())
}

/// The view of a session: what one page of its events means (`{"updates", "first_seq",
/// "last_seq", "more"}`). `after` pages forward (ask again with `after=last_seq` while `more`),
/// `before` pages back (ask again with `before=first_seq` while `more`). Streamed pieces whose
/// block is complete within the page are left out. The projection up to the page starts from
/// the nearest checkpoint of the view (`checkpoints.rs`), or the log's start.
async fn session_view(
    State(daemon): State<Arc<Daemon>>,
    Path(id): Path<String>,
    Params(query): Params<PageQuery>,
) -> Result<Response, ApiError> {
    let page = query.read(&daemon, &id).await?;
    let start = match (query.after, page.first()) {
        (Some(after), _) => after,
        (None, Some(first)) => first.seq - 1,
        (None, None) => 0,
    };
    let mut viewer = viewer_at(&daemon, &id, start).await?;
    let mut updates = Vec::new();
    for record in &page {
        let (seq, ts) = (record.seq, record.ts_ms);
        viewer.apply(record, &mut |update| updates.push(crate::view::ViewItem { seq, ts, update }));
    }
    crate::view::settle_history(&mut updates);
    let first_seq = page.first().map_or(start, |record| record.seq);
    let last_seq = page.last().map_or(start, |record| record.seq);
    let more = match query.before {
        Some(_) => first_seq > 1,
        None => {
            page.len() == query.limit()
                && daemon.store().last_seq(&id).await.map_err(crate::daemon::DaemonError::from)?
                    > last_seq
        }
    };
    let body = serde_json::json!({
        "updates": updates, "first_seq": first_seq, "last_seq": last_seq, "more": more,
    });
    Ok(axum::Json(body).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SubscribeQuery {
    #[serde(default)]
    after: u64,
    /// Updates of the session's view instead of its events.
    #[serde(default)]
    view: bool,
}

async fn subscribe(
    State(daemon): State<Arc<Daemon>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    Params(query): Params<SubscribeQuery>,
    Upgrade(upgrade): Upgrade,
) -> Result<Response, ApiError> {
    if daemon.record(&id).await?.is_none() {
        return Err(ApiError::not_found(format!("no session {id}")));
    }
    // A place among the session's and the token's subscribers, or 429 before the handshake.
    let seat = daemon.watchers().seat(caller.token_name(), Some(&id))?;
    Ok(upgrade.max_message_size(crate::socket::MAX_WS_MESSAGE_BYTES).on_upgrade(
        move |socket| async move {
            let _seat = seat;
            let framer = if query.view {
                match viewer_at(&daemon, &id, query.after).await {
                    Ok(viewer) => Framer::View(Box::new(viewer)),
                    Err(error) => {
                        let (mut sink, _) = socket.split();
                        let _ = sink
                            .send(WsMessage::Text(ServerFrame::from(error).text().into()))
                            .await;
                        return;
                    }
                }
            } else {
                Framer::Events
            };
            let revocable = caller.clone();
            let serve = serve_subscriber(daemon, caller, id, query.after, framer, socket);
            crate::tokens::until_revoked(&revocable, serve).await
        },
    ))
}

/// What a subscriber gets: events as stored, or the updates of the session's view.
enum Framer {
    Events,
    View(Box<crate::view::Viewer>),
}

impl Framer {
    /// A subscription item as frames; `None` when the subscription ended.
    fn frames(
        &mut self,
        item: Option<Result<Subscribed, crate::daemon::DaemonError>>,
    ) -> Option<Vec<String>> {
        match (self, item?) {
            (Framer::Events, Ok(Subscribed::Event(record))) => Some(vec![event_frame(&record)]),
            (Framer::View(viewer), Ok(Subscribed::Event(record))) => {
                Some(viewer.frame(&record).into_iter().collect())
            }
            (_, other) => subscription_frame(Some(other)).map(|frame| vec![frame]),
        }
    }
}

async fn serve_subscriber(
    daemon: Arc<Daemon>,
    caller: Caller,
    id: String,
    after: u64,
    mut framer: Framer,
    socket: WebSocket,
) {
    let (mut sink, incoming) = socket.split();
    let (reader, mut replies) = {
        let (daemon, id) = (daemon.clone(), id.clone());
        crate::socket::spawn_frame_reader(incoming, move |text| {
            let (daemon, caller, id) = (daemon.clone(), caller.clone(), id.clone());
            async move { handle_client_frame(&daemon, &caller, &id, &text).await }
        })
    };
    let mut events = daemon.subscribe(&id, after);
    let mut drain_watch = crate::socket::DrainWatch::new(daemon.phase());
    // An item taken for the last write that the outbox had no room for then: the next write's
    // first (waited for), so that a write never waits on room its own earlier frames hold.
    let mut carried: Option<SubscriptionItem> = None;
    loop {
        let mut batch = Batch::default();
        if let Some(item) = carried.take() {
            if !batch.add(&daemon, &mut framer, item, reader.gone()).await {
                break;
            }
        } else {
            tokio::select! {
                // Events first: what is ready goes out before the daemon's goodbye.
                biased;
                item = events.next() => {
                    if !batch.add(&daemon, &mut framer, item, reader.gone()).await {
                        break;
                    }
                }
                reply = replies.recv() => match reply {
                    Some(reply) => batch.frames.push(reply),
                    // The client closed its side.
                    None => break,
                },
                drain = drain_watch.next() => match drain {
                    notice @ crate::socket::Drain::Notice(_) => {
                        if !crate::socket::send_drain(&mut sink, notice).await {
                            break;
                        }
                        continue;
                    }
                    crate::socket::Drain::Close(close) => {
                        // Every session's last events are stored by now: send this subscriber
                        // what it has not had yet, then close.
                        let last = daemon.store().last_seq(&id).await.unwrap_or(0);
                        'rest: while events.position() < last {
                            let Ok(item) = tokio::time::timeout(crate::socket::CLOSE_GRACE, events.next()).await else { break };
                            let Some(frames) = framer.frames(item) else { break };
                            for frame in frames {
                                if sink.feed(WsMessage::Text(frame.into())).await.is_err() {
                                    break 'rest;
                                }
                            }
                        }
                        let _ = sink.send(close).await;
                        break;
                    }
                },
            }
        }
        // Whatever else is ready goes in the same write, with one flush, as far as the outbox
        // has room for it now.
        let mut ended = false;
        for _ in 0..crate::socket::MAX_FRAMES_PER_FLUSH {
            match futures::FutureExt::now_or_never(events.next()) {
                Some(item) => match batch.try_add(&daemon, &mut framer, item) {
                    Added::Yes => {}
                    Added::Ended => {
                        ended = true;
                        break;
                    }
                    Added::NoRoom(item) => {
                        carried = Some(item);
                        break;
                    }
                },
                None => break,
            }
        }
        if !batch.write(&daemon, &mut sink).await || ended {
            break;
        }
    }
    reader.abort();
}

/// Frames for one write to a subscriber, each counted against the followers' outbox
/// ([`crate::watchers`]) before it is made: a subscriber waiting for room holds the event (a
/// large one shared with every other subscriber reading it), not a frame of its own.
#[derive(Default)]
struct Batch {
    frames: Vec<String>,
    counted: Vec<tokio::sync::OwnedSemaphorePermit>,
}

/// One item of a subscription, as [`Subscription::next`](crate::daemon::Subscription::next)
/// gives it.
type SubscriptionItem = Option<Result<Subscribed, crate::daemon::DaemonError>>;

/// What [`Batch::try_add`] did.
enum Added {
    Yes,
    /// The subscription ended.
    Ended,
    /// The outbox had no room for it now: it waits for the next write.
    NoRoom(SubscriptionItem),
}

/// The bytes an item's frames take, roughly: its event and a few dozen bytes.
fn item_bytes(item: &SubscriptionItem) -> usize {
    match item {
        Some(Ok(Subscribed::Event(record))) => record.payload.len() + 128,
        _ => 256,
    }
}

impl Batch {
    /// Adds `item` if the outbox has room for it now (never waiting).
    fn try_add(&mut self, daemon: &Daemon, framer: &mut Framer, item: SubscriptionItem) -> Added {
        let Some(counted) = daemon.watchers().try_reserve(item_bytes(&item)) else {
            return Added::NoRoom(item);
        };
        self.counted.push(counted);
        match framer.frames(item) {
            Some(frames) => {
                self.frames.extend(frames);
                Added::Yes
            }
            None => Added::Ended,
        }
    }

    /// Adds what `item` means; `false` when the subscription ended, the outbox had no room
    /// for it within the stall limit (the subscriber is let go: it resumes with `after`), or
    /// the subscriber went (`gone`) while it waited.
    async fn add(
        &mut self,
        daemon: &Daemon,
        framer: &mut Framer,
        item: Option<Result<Subscribed, crate::daemon::DaemonError>>,
        gone: impl std::future::Future<Output = ()>,
    ) -> bool {
        let bytes = item_bytes(&item);
        let limit = crate::watchers::write_limit(daemon.stall_limit(), bytes);
        let counted = tokio::select! {
            counted = daemon.watchers().reserve(bytes, limit) => counted,
            () = gone => return false,
        };
        let Some(counted) = counted else {
            tracing::info!(bytes, "a subscriber could not be written to: the followers' outbox stayed full; letting it go");
            return false;
        };
        self.counted.push(counted);
        match framer.frames(item) {
            Some(frames) => {
                self.frames.extend(frames);
                true
            }
            None => false,
        }
    }

    /// Writes and flushes the frames ([`crate::socket::write_frames`]).
    async fn write<S>(self, daemon: &Daemon, sink: &mut S) -> bool
    where
        S: futures::Sink<WsMessage> + Unpin,
    {
        let Batch { frames, counted } = self;
        let written = crate::socket::write_frames(daemon, sink, frames, true).await;
        drop(counted);
        written
    }
}

/// A subscription item as a frame; `None` when the subscription ended.
fn subscription_frame(
    item: Option<Result<Subscribed, crate::daemon::DaemonError>>,
) -> Option<String> {
    let frame = match item? {
        Ok(Subscribed::Event(record)) => return Some(event_frame(&record)),
        Ok(Subscribed::StoreFailing(reason)) => ServerFrame::StoreFailing {
            message: format!(
                "{reason}; the daemon retries and holds the CLI back, nothing is lost yet"
            ),
        },
        Ok(Subscribed::StoreRecovered) => ServerFrame::StoreRecovered {
            message: "the event log takes this session's events again".into(),
        },
        Ok(Subscribed::Lagged) => ServerFrame::Lagged {
            message: "you fell behind; catching up from the log".into(),
            missed: None,
        },
        Err(error) => ServerFrame::from(ApiError::from(error)),
    };
    Some(frame.text())
}

/// Acts on a frame from a subscriber ([`ClientFrame`]) and returns the ack or the error to
/// send back (the socket stays open either way). Each frame needs its scope: a `read` token
/// watches, an `approve` token also answers, an `operate` token also steers.
async fn handle_client_frame(
    daemon: &Arc<Daemon>,
    caller: &Caller,
    id: &str,
    text: &str,
) -> Option<String> {
    let result: Result<ServerFrame, ApiError> = async {
        let frame = ClientFrame::parse(text)?;
        let of = frame.kind();
        caller.require(frame.scope())?;
        let request_id = match frame {
            ClientFrame::UserMessage(message) => {
                crate::faces::check_within(daemon, caller, id).await?;
                let by = caller.sender("websocket", None);
                let prompt =
                    crate::prompt::with_priority(user_message(message.content)?, message.priority)
                        .map_err(ApiError::invalid)?;
                daemon.send_message(id, prompt, by).await?;
                None
            }
            ClientFrame::PermissionResponse(body) => {
                let request_id = body
                    .request_id
                    .clone()
                    .ok_or_else(|| ApiError::invalid("permission_response needs a request_id"))?;
                let (answer, who) = body.into_answer(caller, "websocket")?;
                crate::faces::check_answer_to(daemon, caller, id, &request_id, &answer).await?;
                Box::pin(daemon.respond_permission(id, &request_id, answer, &who)).await?;
                Some(request_id)
            }
            ClientFrame::Interrupt(frame) => {
                crate::faces::check_within(daemon, caller, id).await?;
                daemon.interrupt(id, frame.cancel_queued).await?;
                None
            }
        };
        Ok(ServerFrame::Ack { of: of.into(), request_id })
    }
    .await;
    Some(result.unwrap_or_else(ServerFrame::from).text())
}

async fn dashboard(
    State(daemon): State<Arc<Daemon>>,
    Extension(caller): Extension<Caller>,
    Upgrade(upgrade): Upgrade,
) -> Response {
    let seat = match daemon.watchers().seat(caller.token_name(), None) {
        Ok(seat) => seat,
        Err(error) => return ApiError::from(error).into_response(),
    };
    // Subscribed before the handshake answers: a change made as soon as the socket opens is
    // not missed.
    let changes = daemon.dashboard();
    upgrade
        .max_message_size(64 * 1024)
        .read_buffer_size(crate::socket::WS_READ_BUFFER_BYTES)
        .on_upgrade(move |socket| async move {
            let _seat = seat;
            crate::tokens::until_revoked(&caller, feed_dashboard(daemon, changes, socket)).await
        })
}

/// `/api/events`: the dashboard's changes to one socket, until it or the daemon goes.
async fn feed_dashboard(
    daemon: Arc<Daemon>,
    mut changes: tokio::sync::broadcast::Receiver<crate::changes::DashboardChange>,
    socket: WebSocket,
) {
    let (mut sink, incoming) = socket.split();
    // The client sends nothing of use: the reader only tells when it goes.
    let (reader, mut client) =
        crate::socket::spawn_frame_reader(incoming, |_| async { None::<()> });
    let mut drain_watch = crate::socket::DrainWatch::new(daemon.phase());
    loop {
        let change = tokio::select! {
            change = changes.recv() => change,
            _ = client.recv() => break,
            drain = drain_watch.next() => {
                if !crate::socket::send_drain(&mut sink, drain).await {
                    break;
                }
                continue;
            }
        };
        let frame = match change {
            Ok(change) => serde_json::to_string(&change).unwrap_or_default(),
            Err(tokio::sync::broadcast::error::RecvError::Lagged(missed)) => {
                let lagged = ServerFrame::Lagged {
                    message: "reload GET /api/sessions".into(),
                    missed: Some(missed),
                };
                lagged.text()
            }
            Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
        };
        if !crate::socket::write_frames(&daemon, &mut sink, vec![frame], false).await {
            break;
        }
    }
    reader.abort();
}
