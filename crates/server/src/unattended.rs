//! The REST face of unattended work: schedules (`/api/schedules`), triggers
//! (`/api/triggers`) and their webhook (`POST /hooks/{name}`, signed with the trigger's own
//! secret, no bearer token). What each does is the daemon's ([`crate::daemon`]'s schedules and
//! triggers parts); this is their routes.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};

use crate::daemon::{Daemon, ScheduleList, ScheduleView};
use crate::error::ApiError;
use crate::extract::Body;
use crate::schedules::trigger::{QueuedRun, Trigger, TriggerRun};
use crate::schedules::{Hold, Schedule};
use crate::tokens::Caller;

/// A trigger as faces show it: no secret.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TriggerView {
    /// The trigger (its secret blank).
    pub trigger: Trigger,
    /// Its webhook's path.
    pub path: String,
    /// What its last deliveries did, newest first.
    pub runs: Vec<TriggerRun>,
    /// Runs waiting for a usage window.
    pub queued: Vec<QueuedRun>,
    /// What holds them.
    pub hold: Option<Hold>,
}

/// `POST /api/triggers`'s answer: the trigger, and its secret, shown this once.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TriggerMade {
    /// The trigger.
    #[serde(flatten)]
    pub view: TriggerView,
    /// The secret its deliveries are signed with.
    pub secret: String,
}

/// `PATCH /api/schedules/{name}` and `/api/triggers/{name}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pause {
    /// Paused, or running again.
    pub paused: bool,
}

/// Whether `caller` may change what was made with `origin`: any token may, but one with a
/// ceiling only what was made under that ceiling (a run starts as its maker, with the maker's
/// reach).
fn may_manage(
    caller: &Caller,
    origin: Option<&switchboard_store::Origin>,
    what: &str,
) -> Result<(), ApiError> {
    let Some(ceiling) = caller.ceiling() else { return Ok(()) };
    let made_under = origin.and_then(|origin| origin.ceiling.as_deref());
    if made_under == Some(&*ceiling.text) {
        return Ok(());
    }
    Err(crate::tokens::ScopeError::Ceiling {
        name: caller.name.clone(),
        why: format!("it changes only the {what} made under its ceiling"),
    }
    .into())
}

/// The book's refusal as the API's: a name taken is a conflict, the rest bad input.
fn refused(why: String) -> ApiError {
    if why.contains("exists; remove it first") {
        ApiError::conflict("exists", why)
    } else {
        ApiError::invalid(why)
    }
}

pub(crate) async fn list_schedules(State(daemon): State<Arc<Daemon>>) -> Json<ScheduleList> {
    Json(daemon.schedule_list().await)
}

pub(crate) async fn add_schedule(
    State(daemon): State<Arc<Daemon>>,
    Extension(caller): Extension<Caller>,
    Body(schedule): Body<Schedule>,
) -> Result<Response, ApiError> {
    let view = add_schedule_as(&daemon, &caller, schedule, "api").await?;
    Ok((StatusCode::CREATED, Json(view)).into_response())
}

/// Adds `schedule` for `caller` (through `channel`: `api`, `grpc`): what its task's fields
/// need is checked as a create's, and who made it is set from the token, never the request.
pub(crate) async fn add_schedule_as(
    daemon: &Daemon,
    caller: &Caller,
    mut schedule: Schedule,
    channel: &str,
) -> Result<ScheduleView, ApiError> {
    crate::tokens::check_create(caller, &schedule.task)?;
    schedule.created_ms = daemon.clock_ms();
    schedule.origin = Some(caller.origin(switchboard_store::Face::Schedule));
    schedule.created_by = caller.who(channel, None);
    schedule.task.started_by = None;
    schedule.task.origin = None;
    daemon.books().add_schedule(schedule.clone(), daemon.clock_ms()).await.map_err(refused)?;
    tracing::info!(schedule = %schedule.name, by = %caller.name, "schedule added");
    let entry = daemon.books().get().schedules.get(&schedule.name).cloned();
    let entry =
        entry.ok_or_else(|| ApiError::not_found(format!("no schedule {}", schedule.name)))?;
    Ok(daemon.schedule_view(&entry).await)
}

/// Pauses or resumes schedule `name`.
pub(crate) async fn pause_schedule_as(
    daemon: &Daemon,
    caller: &Caller,
    name: &str,
    paused: bool,
) -> Result<ScheduleView, ApiError> {
    let origin = daemon.books().get().schedules.get(name).and_then(|e| e.schedule.origin.clone());
    may_manage(caller, origin.as_ref(), "schedules")?;
    let changed = daemon
        .books()
        .change_schedule(name, |entry| {
            // Resumed: what fell due while it was paused is passed by, not run as "missed".
            if entry.schedule.paused && !paused {
                let now = daemon.clock_ms();
                entry.state.last_due_ms = Some(entry.state.last_due_ms.unwrap_or(0).max(now));
                entry.state.pending = None;
                entry.state.pending_due_ms = None;
            }
            entry.schedule.paused = paused;
            Ok(entry.clone())
        })
        .await
        .map_err(refused)?;
    let entry = changed.ok_or_else(|| ApiError::not_found(format!("no schedule {name}")))?;
    Ok(daemon.schedule_view(&entry).await)
}

/// Removes schedule `name`.
pub(crate) async fn remove_schedule_as(
    daemon: &Daemon,
    caller: &Caller,
    name: &str,
) -> Result<(), ApiError> {
    let origin = daemon.books().get().schedules.get(name).and_then(|e| e.schedule.origin.clone());
    may_manage(caller, origin.as_ref(), "schedules")?;
    if !daemon.books().remove_schedule(name).await.map_err(refused)? {
        return Err(ApiError::not_found(format!("no schedule {name}")));
    }
    tracing::info!(schedule = %name, by = %caller.name, "schedule removed");
    Ok(())
}

pub(crate) async fn get_schedule(
    State(daemon): State<Arc<Daemon>>,
    Path(name): Path<String>,
) -> Result<Json<ScheduleView>, ApiError> {
    let entry = daemon.books().get().schedules.get(&name).cloned();
    let entry = entry.ok_or_else(|| ApiError::not_found(format!("no schedule {name}")))?;
    Ok(Json(daemon.schedule_view(&entry).await))
}

pub(crate) async fn pause_schedule(
    State(daemon): State<Arc<Daemon>>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    Body(pause): Body<Pause>,
) -> Result<Json<ScheduleView>, ApiError> {
    pause_schedule_as(&daemon, &caller, &name, pause.paused).await.map(Json)
}

pub(crate) async fn remove_schedule(
    State(daemon): State<Arc<Daemon>>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    remove_schedule_as(&daemon, &caller, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub(crate) async fn run_schedule(
    State(daemon): State<Arc<Daemon>>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    let record = run_schedule_as(&daemon, &caller, &name).await?;
    Ok((StatusCode::CREATED, Json(crate::faces::view(&daemon, record).await)).into_response())
}

/// Runs schedule `name` now, for `caller`.
pub(crate) async fn run_schedule_as(
    daemon: &Arc<Daemon>,
    caller: &Caller,
    name: &str,
) -> Result<switchboard_store::SessionRecord, ApiError> {
    let origin = daemon.books().get().schedules.get(name).and_then(|e| e.schedule.origin.clone());
    may_manage(caller, origin.as_ref(), "schedules")?;
    Ok(daemon.run_schedule_now(name).await?)
}

fn trigger_view(entry: &crate::schedules::book::TriggerEntry) -> TriggerView {
    let mut trigger = entry.trigger.public();
    if let Some(task) = &mut trigger.task {
        task.launch = task.launch.clone().public();
    }
    TriggerView {
        path: format!("/hooks/{}", trigger.name),
        trigger,
        runs: entry.state.runs.iter().rev().cloned().collect(),
        queued: entry.state.queued.iter().cloned().collect(),
        hold: entry.state.hold.clone(),
    }
}

pub(crate) async fn list_triggers(State(daemon): State<Arc<Daemon>>) -> Json<Vec<TriggerView>> {
    Json(daemon.books().get().triggers.values().map(trigger_view).collect())
}

pub(crate) async fn add_trigger(
    State(daemon): State<Arc<Daemon>>,
    Extension(caller): Extension<Caller>,
    Body(mut trigger): Body<Trigger>,
) -> Result<Response, ApiError> {
    if let Some(task) = &trigger.task {
        crate::tokens::check_create(&caller, task)?;
    }
    if trigger.secret.is_empty() {
        trigger.secret = crate::auth::generate_token();
    }
    trigger.created_ms = daemon.clock_ms();
    trigger.origin = Some(caller.origin(switchboard_store::Face::Trigger));
    trigger.created_by = caller.who("api", None);
    daemon.books().add_trigger(trigger.clone()).await.map_err(refused)?;
    tracing::info!(trigger = %trigger.name, by = %caller.name, "trigger added");
    let entry = daemon.books().get().triggers.get(&trigger.name).cloned();
    let entry = entry.ok_or_else(|| ApiError::not_found(format!("no trigger {}", trigger.name)))?;
    let made = TriggerMade { view: trigger_view(&entry), secret: trigger.secret };
    Ok((StatusCode::CREATED, Json(made)).into_response())
}

pub(crate) async fn pause_trigger(
    State(daemon): State<Arc<Daemon>>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    Body(pause): Body<Pause>,
) -> Result<Json<TriggerView>, ApiError> {
    let origin = daemon.books().get().triggers.get(&name).and_then(|e| e.trigger.origin.clone());
    may_manage(&caller, origin.as_ref(), "triggers")?;
    let changed = daemon
        .books()
        .change_trigger(&name, |entry| {
            entry.trigger.paused = pause.paused;
            Ok(trigger_view(entry))
        })
        .await
        .map_err(refused)?;
    changed.map(Json).ok_or_else(|| ApiError::not_found(format!("no trigger {name}")))
}

pub(crate) async fn remove_trigger(
    State(daemon): State<Arc<Daemon>>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    let origin = daemon.books().get().triggers.get(&name).and_then(|e| e.trigger.origin.clone());
    may_manage(&caller, origin.as_ref(), "triggers")?;
    if !daemon.books().remove_trigger(&name).await.map_err(refused)? {
        return Err(ApiError::not_found(format!("no trigger {name}")));
    }
    tracing::info!(trigger = %name, by = %caller.name, "trigger removed");
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /hooks/{name}`: a delivery, signed with the trigger's secret (no bearer token: the
/// signature is its authentication). The trigger is found before a byte of the body is read.
pub(crate) async fn webhook(
    State(daemon): State<Arc<Daemon>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Result<Response, ApiError> {
    if daemon.trigger(&name).is_none() {
        return Err(ApiError::not_found(format!("no trigger {name}")));
    }
    let body = crate::extract::bounded_body(
        body,
        crate::daemon::MAX_DELIVERY_BYTES,
        crate::daemon::DELIVERY_WITHIN,
    )
    .await?;
    let header = |name: &str| {
        headers.get(name).and_then(|value| value.to_str().ok()).map(|value| value.to_owned())
    };
    let delivery = crate::daemon::Delivery {
        signature: header(crate::schedules::signature::HEADER),
        id: header("x-github-delivery"),
        event: header("x-github-event"),
    };
    let delivered = daemon.deliver(&name, &delivery, &body).await?;
    let status = if delivered.outcome == "started" { StatusCode::CREATED } else { StatusCode::OK };
    Ok((status, Json(delivered)).into_response())
}
