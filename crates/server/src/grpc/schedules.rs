//! Schedules over gRPC (`ListSchedules`, `AddSchedule`, `PauseSchedule`, `RemoveSchedule`,
//! `RunSchedule`): the same add, pause, remove and run as REST (`crate::unattended`), the same
//! list (`Daemon::schedule_list`), mapped to the `.proto`'s messages here.

use serde_json::Value;
use tonic::Status;

use super::{api_status, caller, create_request, pb, session, Api};

pub(super) async fn list(
    api: &Api,
    _request: tonic::Request<pb::ListSchedulesRequest>,
) -> Result<tonic::Response<pb::ListSchedulesResponse>, Status> {
    let list = api.daemon.schedule_list().await;
    Ok(tonic::Response::new(pb::ListSchedulesResponse {
        schedules: list.schedules.into_iter().map(schedule).collect(),
        queue: list
            .queue
            .into_iter()
            .map(|entry| pb::WaitingInQueue {
                kind: entry.kind,
                name: entry.name,
                since_ms: entry.since_ms,
                why: entry.why,
                starts_ms: entry.starts_ms,
            })
            .collect(),
    }))
}

pub(super) async fn add(
    api: &Api,
    request: tonic::Request<pb::AddScheduleRequest>,
) -> Result<tonic::Response<pb::Schedule>, Status> {
    let caller = caller(&request)?;
    let request = request.into_inner();
    let task = request.task.ok_or_else(|| Status::invalid_argument("a schedule needs its task"))?;
    fn word<T: serde::de::DeserializeOwned>(
        what: &str,
        text: Option<String>,
    ) -> Result<Option<T>, Status> {
        text.map(|text| {
            serde_json::from_value(Value::String(text.clone())).map_err(|_| {
                Status::invalid_argument(format!("{what} {text:?} is not one of its words"))
            })
        })
        .transpose()
    }
    let at = request
        .at
        .map(|at| at.parse::<jiff::Timestamp>())
        .transpose()
        .map_err(|error| Status::invalid_argument(format!("`at` is not a moment: {error}")))?;
    let made = crate::schedules::Schedule {
        name: request.name,
        cron: request.cron,
        time_zone: request.time_zone,
        at,
        task: create_request(task)?,
        overlap: word("overlap", request.overlap)?.unwrap_or_default(),
        missed: word("missed", request.missed)?.unwrap_or_default(),
        max_window_utilization: request.max_window_utilization,
        daily_usd: request.daily_usd,
        paused: request.paused,
        created_ms: 0,
        origin: None,
        created_by: String::new(),
    };
    let view = crate::unattended::add_schedule_as(&api.daemon, &caller, made, "grpc")
        .await
        .map_err(api_status)?;
    Ok(tonic::Response::new(schedule(view)))
}

pub(super) async fn pause(
    api: &Api,
    request: tonic::Request<pb::PauseScheduleRequest>,
) -> Result<tonic::Response<pb::Schedule>, Status> {
    let caller = caller(&request)?;
    let request = request.into_inner();
    let view =
        crate::unattended::pause_schedule_as(&api.daemon, &caller, &request.name, request.paused)
            .await
            .map_err(api_status)?;
    Ok(tonic::Response::new(schedule(view)))
}

pub(super) async fn remove(
    api: &Api,
    request: tonic::Request<pb::RemoveScheduleRequest>,
) -> Result<tonic::Response<pb::RemoveScheduleResponse>, Status> {
    let caller = caller(&request)?;
    let request = request.into_inner();
    crate::unattended::remove_schedule_as(&api.daemon, &caller, &request.name)
        .await
        .map_err(api_status)?;
    Ok(tonic::Response::new(pb::RemoveScheduleResponse {}))
}

pub(super) async fn run(
    api: &Api,
    request: tonic::Request<pb::RunScheduleRequest>,
) -> Result<tonic::Response<pb::Session>, Status> {
    let caller = caller(&request)?;
    let name = request.into_inner().name;
    let record = crate::unattended::run_schedule_as(&api.daemon, &caller, &name)
        .await
        .map_err(api_status)?;
    Ok(tonic::Response::new(session(&api.daemon, record).await))
}

/// A schedule as gRPC shows it.
fn schedule(view: crate::daemon::ScheduleView) -> pb::Schedule {
    use crate::schedules::RunOutcome;
    let crate::daemon::ScheduleView { schedule, state, next_ms, waiting, sessions } = view;
    let runs = state
        .runs
        .iter()
        .rev()
        .map(|run| {
            let (outcome, session, node, detail) = match &run.outcome {
                RunOutcome::Started { session, node } => {
                    ("started", Some(session.clone()), node.clone(), None)
                }
                RunOutcome::Skipped { why, times } => {
                    ("skipped", None, None, Some(format!("{} ×{times}", json_word(why))))
                }
                RunOutcome::Failed { error } => ("failed", None, None, Some(error.clone())),
            };
            let known =
                session.as_ref().and_then(|id| sessions.iter().find(|known| &known.id == id));
            pb::ScheduleRun {
                due_ms: run.due_ms,
                at_ms: run.at_ms,
                outcome: outcome.into(),
                session,
                node,
                detail,
                state: known.and_then(|known| known.state).map(|state| state.as_str().to_owned()),
                spent_usd: known.map_or(0.0, |known| known.spent_usd),
            }
        })
        .collect();
    pb::Schedule {
        name: schedule.name,
        cron: schedule.cron,
        time_zone: schedule.time_zone,
        at: schedule.at.map(|at| at.to_string()),
        prompt: schedule.task.prompt.unwrap_or_default(),
        cwd: schedule.task.launch.cwd.display().to_string(),
        overlap: json_word(&schedule.overlap),
        missed: json_word(&schedule.missed),
        max_window_utilization: schedule.max_window_utilization,
        daily_usd: schedule.daily_usd,
        paused: schedule.paused,
        next_ms,
        waiting: waiting.map(|waiting| pb::WaitingRun {
            due_ms: waiting.due_ms,
            why: waiting.why,
            starts_ms: waiting.starts_ms,
        }),
        runs,
        created_by: schedule.created_by,
        created_ms: schedule.created_ms,
    }
}

/// A value's word on the wire (an enum's JSON string).
fn json_word(value: &impl serde::Serialize) -> String {
    match serde_json::to_value(value) {
        Ok(Value::String(word)) => word,
        _ => String::new(),
    }
}
