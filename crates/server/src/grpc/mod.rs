//! The gRPC face: `proto/switchboard/v1/switchboard.proto`, served on the daemon's own port
//! (requests whose content type is `application/grpc` come here, over HTTP/2) with the same
//! token. It calls the daemon as the REST handlers do, and a session's events are the one
//! projection's updates ([`crate::view::Viewer`]), typed.
//!
//! - `build.rs` compiles the proto with protox (no system `protoc`) and tonic-prost-build, and
//!   keeps the descriptor set for reflection.
//! - It imports nothing of REST: the input checks and the session view every face shares are
//!   in `faces`; its errors are the API's classification (`error::ApiError`) in gRPC codes.
//! - `Subscribe` is the daemon's `Subscription` through a `Viewer`: each stored event becomes
//!   its updates as typed `SessionEvent`s sharing its `seq` (numbered by `part` of `parts`),
//!   or one `RawLine`, so no seq is skipped. Streams are capped daemon-wide ([`MAX_STREAMS`]).
//! - The health check is open (for probes, with a 1 KiB request limit); every other call
//!   needs the bearer token (without auth, a loopback host), with the scope
//!   [`METHOD_SCOPES`] gives it (one not listed needs `admin`), and browsers (`Origin`) are
//!   refused.

use std::pin::Pin;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::Response;
use futures::Stream;
use serde_json::Value;
use switchboard_session::projection::{Block, ModelTotals};
use switchboard_session::{
    AnswerBehavior, Behavior as SessionBehavior, DecidedBy, PendingPermission, PermissionAnswer,
    SessionEvent, SessionState, Update,
};
use switchboard_store::EventRecord;
use tokio::sync::mpsc;
use tonic::{Code, Status};

use crate::auth::AuthConfig;
use crate::daemon::{CreateSession, Daemon, DaemonError, Phase, Subscribed};
use crate::error::ApiError;
use crate::tokens::{Caller, Scope};
use crate::view::{DaemonUpdate, ViewUpdate};

/// The code generated from the `.proto`, and its encoded descriptors (for reflection).
pub mod pb {
    #![allow(missing_docs, clippy::all, clippy::pedantic, unreachable_pub)]
    tonic::include_proto!("switchboard.v1");

    /// The encoded `FileDescriptorSet` of `switchboard.v1`.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        include_bytes!(concat!(env!("OUT_DIR"), "/switchboard_descriptor.bin"));
}

use pb::switchboard_server::{Switchboard, SwitchboardServer};

mod schedules;
mod search;

/// Events a subscriber's stream holds before its task waits (the daemon's subscription reads
/// the store when it falls behind, so nothing is lost meanwhile).
pub const STREAM_BUFFER: usize = 256;

/// Streams (`Subscribe`, `WatchSessions`) open at once, daemon-wide; more are refused with
/// RESOURCE_EXHAUSTED. As many as the connections the daemon serves (`serve::MAX_CONNECTIONS`):
/// one connection can carry many streams.
pub const MAX_STREAMS: usize = 4096;

/// The largest health request taken (a service's name): the health check needs no token.
const MAX_HEALTH_MESSAGE_BYTES: usize = 1024;

/// The one call open without the token.
const HEALTH_CHECK: &str = "/grpc.health.v1.Health/Check";

/// The `Switchboard` service's path prefix.
const SERVICE: &str = "/switchboard.v1.Switchboard/";

/// The scope each `Switchboard` method needs, as its REST twin does. A call not named here
/// needs `admin` (fails closed); server reflection needs `read`.
pub const METHOD_SCOPES: &[(&str, Scope)] = &[
    ("CreateSession", Scope::Operate),
    ("ListSessions", Scope::Read),
    ("GetSession", Scope::Read),
    ("StopSession", Scope::Operate),
    ("ResumeSession", Scope::Operate),
    ("SendMessage", Scope::Operate),
    ("Interrupt", Scope::Operate),
    ("SetModel", Scope::Operate),
    ("SetPermissionMode", Scope::Operate),
    ("AnswerPermission", Scope::Approve),
    ("RewindFiles", Scope::Operate),
    ("Subscribe", Scope::Read),
    ("WatchSessions", Scope::Read),
    ("ListNodes", Scope::Read),
    ("GetUsage", Scope::Read),
    ("AskCli", Scope::Read),
    ("CancelQueued", Scope::Operate),
    ("StopTask", Scope::Operate),
    ("ListSchedules", Scope::Read),
    ("AddSchedule", Scope::Operate),
    ("PauseSchedule", Scope::Operate),
    ("RemoveSchedule", Scope::Operate),
    ("RunSchedule", Scope::Operate),
    ("Search", Scope::Read),
    ("Blame", Scope::Read),
];

/// A create request as gRPC sends it, read as the daemon's.
fn create_request(request: pb::CreateSessionRequest) -> Result<CreateSession, Status> {
    let transport = match request.transport.as_deref() {
        None => None,
        Some(text) => Some(crate::daemon::TransportKind::parse(text).ok_or_else(|| {
            Status::invalid_argument(format!("unknown transport {text:?} (stdio or sdk-url)"))
        })?),
    };
    let create = CreateSession {
        launch: crate::daemon::Launch {
            cwd: request.cwd.into(),
            model: request.model,
            permission_mode: request.permission_mode,
            policy: request.policy,
            allowed_tools: request.allowed_tools,
            disallowed_tools: request.disallowed_tools,
            system_prompt: request.system_prompt,
            append_system_prompt: request.append_system_prompt,
            max_turns: request.max_turns,
            max_budget_usd: request.max_budget_usd,
            notify: (!request.notify.is_empty()).then_some(request.notify),
            worktree: None,
            mcp_config: request.mcp_config,
            claude: request.claude.map(Into::into),
            transport,
            env: request.env.into_iter().collect(),
            relay: request.relay,
            cli_version: request.cli_version,
            origin: None,
            run: None,
            max_window_utilization: request.max_window_utilization,
        },
        prompt: request.prompt,
        resume: request.resume,
        fork: request.fork,
        resume_at: request.resume_at,
        worktree: request.worktree,
        node: request.node,
        started_by: None,
        origin: None,
    };
    Ok(create)
}

/// The scope a call to `path` needs ([`METHOD_SCOPES`]).
fn scope_of(path: &str) -> Scope {
    if path.starts_with("/grpc.reflection.") {
        return Scope::Read;
    }
    path.strip_prefix(SERVICE)
        .and_then(|method| METHOD_SCOPES.iter().find(|(name, _)| *name == method))
        .map_or(Scope::Admin, |(_, scope)| *scope)
}

/// The caller `require_token` put in a call's extensions (a call without one is refused
/// before it gets here).
fn caller<T>(request: &tonic::Request<T>) -> Result<Caller, Status> {
    request
        .extensions()
        .get::<Caller>()
        .cloned()
        .ok_or_else(|| Status::unauthenticated("no caller"))
}

/// The gRPC routes: the `Switchboard` service and server reflection behind the token, and
/// `grpc.health.v1.Health` open (for probes), on one router.
pub async fn router(daemon: Arc<Daemon>, auth: AuthConfig) -> axum::Router {
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter.set_serving::<SwitchboardServer<Api>>().await;
    {
        // Not serving once the daemon drains.
        let mut phase = daemon.phase();
        tokio::spawn(async move {
            if phase.wait_for(|phase| *phase != Phase::Serving).await.is_ok() {
                reporter.set_not_serving::<SwitchboardServer<Api>>().await;
                reporter.set_service_status("", tonic_health::ServingStatus::NotServing).await;
            }
        });
    }
    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
    };
    // v1, and v1alpha for the clients that know only it (older grpcurl, grpcui).
    let reflection_v1 =
        reflection().build_v1().expect("the descriptor set compiled from the .proto is valid");
    let reflection_v1alpha =
        reflection().build_v1alpha().expect("the descriptor set compiled from the .proto is valid");
    let streams = Arc::new(tokio::sync::Semaphore::new(MAX_STREAMS));
    let service = SwitchboardServer::new(Api { daemon, streams })
        .max_decoding_message_size(crate::faces::MAX_BODY_BYTES);
    let health = health.max_decoding_message_size(MAX_HEALTH_MESSAGE_BYTES);
    tonic::service::Routes::new(service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(health)
        .into_axum_router()
        .layer(axum::middleware::from_fn_with_state(auth, require_token))
        .layer(axum::middleware::map_response(too_large_is_resource_exhausted))
}

/// tonic answers a request message over the limit with OutOfRange; gRPC's code for it is
/// ResourceExhausted, which clients (and the docs) expect.
async fn too_large_is_resource_exhausted(mut response: Response) -> Response {
    let headers = response.headers_mut();
    let out_of_range = headers.get("grpc-status").is_some_and(|status| status == "11");
    let too_large = headers
        .get("grpc-message")
        .and_then(|message| message.to_str().ok())
        .is_some_and(|message| message.contains("too%20large") || message.contains("too large"));
    if out_of_range && too_large {
        headers.insert("grpc-status", axum::http::HeaderValue::from_static("8"));
    }
    response
}

/// The calls whose answer is a stream a client follows for as long as it likes (each needs the
/// token, and `Subscribe` and `WatchSessions` a follower's place): while one is answered, its
/// connection is not shed ([`crate::peers`]). Any other answer holds nothing.
pub fn is_followed_stream(path: &str) -> bool {
    matches!(
        path,
        "/switchboard.v1.Switchboard/Subscribe"
            | "/switchboard.v1.Switchboard/WatchSessions"
            | "/grpc.health.v1.Health/Watch"
    )
}

/// Whether a request is a gRPC call (its content type is `application/grpc`, `+proto` or
/// another).
pub fn is_grpc<B>(request: &axum::http::Request<B>) -> bool {
    request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("application/grpc"))
}

/// Middleware: every call but the health check needs the token (`authorization: Bearer
/// TOKEN`; without auth, a loopback host name), and no call may come from a browser (one that
/// says its `Origin`).
async fn require_token(
    State(auth): State<AuthConfig>,
    request: Request<Body>,
    next: Next,
) -> Response {
    if request.uri().path() == HEALTH_CHECK {
        return next.run(request).await;
    }
    if request.headers().contains_key(header::ORIGIN) {
        return Status::permission_denied("the gRPC API does not serve browsers").into_http();
    }
    let presented = crate::auth::bearer(request.headers()).unwrap_or("");
    let Some(caller) = auth.caller(presented) else {
        return Status::unauthenticated(
            "a valid token is required: `authorization: Bearer TOKEN` metadata",
        )
        .into_http();
    };
    if let Err(error) = crate::auth::check_host(&auth, request.headers()) {
        return api_status(error).into_http();
    }
    if let Err(refused) = caller.require(scope_of(request.uri().path())) {
        return Status::permission_denied(refused.to_string()).into_http();
    }
    let mut request = request;
    request.extensions_mut().insert(caller);
    next.run(request).await
}

/// The `Switchboard` service.
struct Api {
    daemon: Arc<Daemon>,
    /// Places for open streams ([`MAX_STREAMS`]).
    streams: Arc<tokio::sync::Semaphore>,
}

/// A server stream.
type Streamed<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

#[tonic::async_trait]
impl Switchboard for Api {
    async fn create_session(
        &self,
        request: tonic::Request<pb::CreateSessionRequest>,
    ) -> Result<tonic::Response<pb::Session>, Status> {
        let caller = caller(&request)?;
        let mut create = create_request(request.into_inner())?;
        create.started_by = Some(caller.sender("grpc", None));
        create.origin = Some(caller.origin(switchboard_store::Face::Grpc));
        crate::tokens::check_create(&caller, &create)
            .map_err(|refused| Status::permission_denied(refused.to_string()))?;
        let record = self.daemon.create(create).await.map_err(status)?;
        Ok(tonic::Response::new(session(&self.daemon, record).await))
    }

    async fn list_sessions(
        &self,
        _request: tonic::Request<pb::ListSessionsRequest>,
    ) -> Result<tonic::Response<pb::ListSessionsResponse>, Status> {
        let stored =
            self.daemon.store().list_sessions().await.map_err(|error| status(error.into()))?;
        let mut sessions = Vec::with_capacity(stored.len());
        for record in stored {
            let record = self.daemon.live_record(&record.id).unwrap_or(record);
            sessions.push(session(&self.daemon, record).await);
        }
        Ok(tonic::Response::new(pb::ListSessionsResponse { sessions }))
    }

    async fn get_usage(
        &self,
        _request: tonic::Request<pb::GetUsageRequest>,
    ) -> Result<tonic::Response<pb::GetUsageResponse>, Status> {
        let report = self.daemon.usage();
        Ok(tonic::Response::new(pb::GetUsageResponse {
            windows: report.windows.into_iter().map(usage_window).collect(),
            reported_at_ms: report.reported_at_ms,
            reported_by: report.reported_by,
        }))
    }

    async fn list_nodes(
        &self,
        _request: tonic::Request<pb::ListNodesRequest>,
    ) -> Result<tonic::Response<pb::ListNodesResponse>, Status> {
        let statuses = self.daemon.bus().map(|bus| bus.nodes()).unwrap_or_default();
        let nodes = statuses
            .into_iter()
            .map(|status| {
                let info = status.info;
                pb::Node {
                    node: info.node,
                    url: info.url,
                    running: info.running as u64,
                    version: info.version,
                    started_ms: info.started_ms,
                    roots: info.roots,
                    capacity: info.capacity as u64,
                    cli_version: info.cli_version,
                    silent_ms: status.silent_ms,
                    lost: status.lost,
                    this: status.this,
                }
            })
            .collect();
        Ok(tonic::Response::new(pb::ListNodesResponse { nodes }))
    }

    async fn get_session(
        &self,
        request: tonic::Request<pb::GetSessionRequest>,
    ) -> Result<tonic::Response<pb::Session>, Status> {
        let id = request.into_inner().id;
        let record = self.record(&id).await?;
        Ok(tonic::Response::new(session(&self.daemon, record).await))
    }

    async fn stop_session(
        &self,
        request: tonic::Request<pb::StopSessionRequest>,
    ) -> Result<tonic::Response<pb::StopSessionResponse>, Status> {
        let caller = caller(&request)?;
        let request = request.into_inner();
        self.within(&caller, &request.id).await?;
        if request.purge {
            self.daemon
                .delete(&request.id, request.force, request.delete_branch)
                .await
                .map_err(status)?;
        } else {
            self.daemon.stop(&request.id, false).await.map_err(status)?;
        }
        let session = if request.purge {
            None
        } else {
            Some(session(&self.daemon, self.record(&request.id).await?).await)
        };
        Ok(tonic::Response::new(pb::StopSessionResponse { session }))
    }

    async fn resume_session(
        &self,
        request: tonic::Request<pb::ResumeSessionRequest>,
    ) -> Result<tonic::Response<pb::Session>, Status> {
        let caller = caller(&request)?;
        let id = request.into_inner().id;
        self.within(&caller, &id).await?;
        let record = self.daemon.resume(&id).await.map_err(status)?;
        Ok(tonic::Response::new(session(&self.daemon, record).await))
    }

    async fn send_message(
        &self,
        request: tonic::Request<pb::SendMessageRequest>,
    ) -> Result<tonic::Response<pb::SendMessageResponse>, Status> {
        let caller = caller(&request)?;
        let by = caller.sender("grpc", None);
        let request = request.into_inner();
        self.within(&caller, &request.id).await?;
        let message = if request.images.is_empty() {
            crate::faces::user_message(Value::String(request.text)).map_err(api_status)?
        } else {
            let text = (!request.text.is_empty())
                .then(|| switchboard_protocol::ContentBlock::text(request.text));
            let images = request
                .images
                .iter()
                .map(|image| crate::prompt::image_block(&image.data, &image.media_type));
            crate::prompt::message_of(text.into_iter().chain(images).collect())
                .map_err(|why| api_status(ApiError::invalid(why)))?
        };
        let priority =
            (!request.priority.is_empty()).then(|| request.priority.parse().ok()).flatten();
        let mut message = crate::prompt::with_priority(message, priority)
            .map_err(|why| api_status(ApiError::invalid(why)))?;
        let uuid = uuid::Uuid::new_v4().to_string();
        message.uuid = Some(uuid.clone());
        self.daemon.send_message(&request.id, message, by).await.map_err(status)?;
        Ok(tonic::Response::new(pb::SendMessageResponse { uuid }))
    }

    async fn ask_cli(
        &self,
        request: tonic::Request<pb::AskCliRequest>,
    ) -> Result<tonic::Response<pb::AskCliResponse>, Status> {
        let request = request.into_inner();
        let Some(control) = switchboard_session::CliControl::question(&request.question) else {
            return Err(Status::invalid_argument(
                "question must be usage, context, permission-rules or hooks",
            ));
        };
        let answer = self.daemon.ask_cli(&request.id, control).await.map_err(status)?;
        Ok(tonic::Response::new(pb::AskCliResponse { answer: to_struct(&answer) }))
    }

    async fn cancel_queued(
        &self,
        request: tonic::Request<pb::CancelQueuedRequest>,
    ) -> Result<tonic::Response<pb::CancelQueuedResponse>, Status> {
        let caller = caller(&request)?;
        let request = request.into_inner();
        self.within(&caller, &request.id).await?;
        let control = switchboard_session::CliControl::CancelMessage { uuid: request.uuid };
        let answer = self.daemon.ask_cli(&request.id, control).await.map_err(status)?;
        let cancelled = answer["cancelled"] == true;
        Ok(tonic::Response::new(pb::CancelQueuedResponse { cancelled }))
    }

    async fn list_schedules(
        &self,
        request: tonic::Request<pb::ListSchedulesRequest>,
    ) -> Result<tonic::Response<pb::ListSchedulesResponse>, Status> {
        schedules::list(self, request).await
    }

    async fn add_schedule(
        &self,
        request: tonic::Request<pb::AddScheduleRequest>,
    ) -> Result<tonic::Response<pb::Schedule>, Status> {
        schedules::add(self, request).await
    }

    async fn pause_schedule(
        &self,
        request: tonic::Request<pb::PauseScheduleRequest>,
    ) -> Result<tonic::Response<pb::Schedule>, Status> {
        schedules::pause(self, request).await
    }

    async fn remove_schedule(
        &self,
        request: tonic::Request<pb::RemoveScheduleRequest>,
    ) -> Result<tonic::Response<pb::RemoveScheduleResponse>, Status> {
        schedules::remove(self, request).await
    }

    async fn run_schedule(
        &self,
        request: tonic::Request<pb::RunScheduleRequest>,
    ) -> Result<tonic::Response<pb::Session>, Status> {
        schedules::run(self, request).await
    }

    async fn search(
        &self,
        request: tonic::Request<pb::SearchRequest>,
    ) -> Result<tonic::Response<pb::SearchResponse>, Status> {
        search::search(self, request).await
    }

    async fn blame(
        &self,
        request: tonic::Request<pb::BlameRequest>,
    ) -> Result<tonic::Response<pb::BlameResponse>, Status> {
        search::blame(self, request).await
    }

    async fn stop_task(
        &self,
        request: tonic::Request<pb::StopTaskRequest>,
    ) -> Result<tonic::Response<pb::StopTaskResponse>, Status> {
        let caller = caller(&request)?;
        let request = request.into_inner();
        self.within(&caller, &request.id).await?;
        let control = switchboard_session::CliControl::StopTask { task_id: request.task_id };
        self.daemon.ask_cli(&request.id, control).await.map_err(status)?;
        Ok(tonic::Response::new(pb::StopTaskResponse {}))
    }

    async fn interrupt(
        &self,
        request: tonic::Request<pb::InterruptRequest>,
    ) -> Result<tonic::Response<pb::InterruptResponse>, Status> {
        let caller = caller(&request)?;
        let request = request.into_inner();
        self.within(&caller, &request.id).await?;
        self.daemon.interrupt(&request.id, request.cancel_queued).await.map_err(status)?;
        Ok(tonic::Response::new(pb::InterruptResponse {}))
    }

    async fn rewind_files(
        &self,
        request: tonic::Request<pb::RewindFilesRequest>,
    ) -> Result<tonic::Response<pb::RewindFilesResponse>, Status> {
        let caller = caller(&request)?;
        let request = request.into_inner();
        self.within(&caller, &request.id).await?;
        let rewind = self
            .daemon
            .rewind(&request.id, &request.message, request.dry_run)
            .await
            .map_err(status)?;
        Ok(tonic::Response::new(pb::RewindFilesResponse {
            can_rewind: rewind.can_rewind,
            dry_run: rewind.dry_run,
            files_changed: rewind.files_changed,
            files: rewind.files.unwrap_or_default(),
            insertions: rewind.insertions,
            deletions: rewind.deletions,
            reason: rewind.reason,
        }))
    }

    async fn set_model(
        &self,
        request: tonic::Request<pb::SetModelRequest>,
    ) -> Result<tonic::Response<pb::SetModelResponse>, Status> {
        let caller = caller(&request)?;
        let request = request.into_inner();
        self.within(&caller, &request.id).await?;
        if request.model.trim().is_empty() {
            return Err(Status::invalid_argument("model is empty"));
        }
        self.daemon.set_model(&request.id, &request.model).await.map_err(status)?;
        Ok(tonic::Response::new(pb::SetModelResponse { model: request.model }))
    }

    async fn set_permission_mode(
        &self,
        request: tonic::Request<pb::SetPermissionModeRequest>,
    ) -> Result<tonic::Response<pb::SetPermissionModeResponse>, Status> {
        let caller = caller(&request)?;
        let request = request.into_inner();
        self.within(&caller, &request.id).await?;
        let mode = crate::faces::permission_mode(&request.mode).map_err(api_status)?;
        self.daemon.set_permission_mode(&request.id, mode).await.map_err(status)?;
        Ok(tonic::Response::new(pb::SetPermissionModeResponse { mode: request.mode }))
    }

    async fn answer_permission(
        &self,
        request: tonic::Request<pb::AnswerPermissionRequest>,
    ) -> Result<tonic::Response<pb::AnswerPermissionResponse>, Status> {
        let caller = caller(&request)?;
        let request = request.into_inner();
        // Another input than the model's, or ending the turn, is steering: `operate`.
        if request.updated_input.is_some() || request.interrupt {
            caller
                .require(Scope::Operate)
                .map_err(|refused| Status::permission_denied(refused.to_string()))?;
        }
        let behavior = match pb::Behavior::try_from(request.behavior) {
            Ok(pb::Behavior::Allow) => AnswerBehavior::Allow,
            Ok(pb::Behavior::Deny) => AnswerBehavior::Deny,
            _ => return Err(Status::invalid_argument("behavior must be ALLOW or DENY")),
        };
        let answer = PermissionAnswer {
            behavior,
            updated_input: request.updated_input.map(|input| from_struct(&input)),
            message: request.message,
            remember: request.remember,
            updated_permissions: None,
            answers: None,
            interrupt: request.interrupt,
        };
        let by = crate::text::answerer(request.by).map_err(Status::invalid_argument)?;
        let who = caller.who("grpc", by);
        crate::faces::check_answer_to(
            &self.daemon,
            &caller,
            &request.id,
            &request.request_id,
            &answer,
        )
        .await
        .map_err(status)?;
        self.daemon
            .respond_permission(&request.id, &request.request_id, answer, &who)
            .await
            .map_err(status)?;
        Ok(tonic::Response::new(pb::AnswerPermissionResponse {
            request_id: request.request_id,
            behavior: request.behavior,
        }))
    }

    type SubscribeStream = Streamed<pb::SessionEvent>;

    async fn subscribe(
        &self,
        request: tonic::Request<pb::SubscribeRequest>,
    ) -> Result<tonic::Response<Self::SubscribeStream>, Status> {
        let caller = caller(&request)?;
        let request = request.into_inner();
        let place = self.place()?;
        self.record(&request.id).await?;
        let seat = self
            .daemon
            .watchers()
            .seat(caller.token_name(), Some(&request.id))
            .map_err(|error| api_status(error.into()))?;
        let viewer = crate::faces::viewer_at(&self.daemon, &request.id, request.after_seq)
            .await
            .map_err(api_status)?;
        let (sender, stream) = outbox(&self.daemon);
        let daemon = self.daemon.clone();
        tokio::spawn(async move {
            let stream = follow(daemon, request.id, request.after_seq, viewer, sender);
            crate::tokens::until_revoked(&caller, stream).await;
            drop((place, seat));
        });
        Ok(tonic::Response::new(stream))
    }

    type WatchSessionsStream = Streamed<pb::SessionChange>;

    async fn watch_sessions(
        &self,
        request: tonic::Request<pb::WatchSessionsRequest>,
    ) -> Result<tonic::Response<Self::WatchSessionsStream>, Status> {
        let caller = caller(&request)?;
        let place = self.place()?;
        let seat = self
            .daemon
            .watchers()
            .seat(caller.token_name(), None)
            .map_err(|error| api_status(error.into()))?;
        // Subscribed before the call answers: no change made meanwhile is missed.
        let changes = self.daemon.dashboard();
        let (sender, stream) = outbox(&self.daemon);
        let daemon = self.daemon.clone();
        tokio::spawn(async move {
            crate::tokens::until_revoked(&caller, watch(daemon, changes, sender)).await;
            drop((place, seat));
        });
        Ok(tonic::Response::new(stream))
    }
}

impl Api {
    /// Refused unless `caller` may operate session `id` (a token with a ceiling operates only
    /// the sessions under it: [`crate::faces::check_within`]).
    async fn within(&self, caller: &Caller, id: &str) -> Result<(), Status> {
        crate::faces::check_within(&self.daemon, caller, id).await.map_err(status)
    }

    /// A place for one more stream, or RESOURCE_EXHAUSTED.
    fn place(&self) -> Result<tokio::sync::OwnedSemaphorePermit, Status> {
        self.streams.clone().try_acquire_owned().map_err(|_| {
            Status::resource_exhausted(format!(
                "{MAX_STREAMS} streams are open already; close one, or try again later"
            ))
        })
    }

    /// A session's record, or NotFound.
    async fn record(&self, id: &str) -> Result<switchboard_store::SessionRecord, Status> {
        self.daemon
            .record(id)
            .await
            .map_err(status)?
            .ok_or_else(|| Status::not_found(format!("no session {id}")))
    }
}

/// Feeds a subscriber: a session's events after `after` as the viewer projects them, until the
/// subscriber goes or the daemon closes (then what is stored goes out first, and the stream
/// ends Unavailable).
async fn follow(
    daemon: Arc<Daemon>,
    id: String,
    after: u64,
    mut viewer: crate::view::Viewer,
    sender: Outbox<pb::SessionEvent>,
) {
    let mut events = daemon.subscribe(&id, after);
    let mut phase = daemon.phase();
    loop {
        let item = tokio::select! {
            biased;
            item = events.next() => item,
            () = sender.closed() => return,
            closed = closed(&mut phase) => {
                if closed {
                    // Every session's last events are stored by now: send them, then end.
                    let last = daemon.store().last_seq(&id).await.unwrap_or(0);
                    // Bounded, reading and writing alike: a client that reads no more cannot
                    // hold this task (and the daemon) past the grace.
                    let rest = async {
                        while events.position() < last {
                            let Some(item) = events.next().await else { break };
                            if !deliver(&mut viewer, item, &sender).await {
                                return false;
                            }
                        }
                        true
                    };
                    if !matches!(tokio::time::timeout(crate::socket::CLOSE_GRACE, rest).await, Ok(true)) {
                        return;
                    }
                }
                let goodbye = sender.send(Err(Status::unavailable("the daemon is shutting down")));
                let _ = tokio::time::timeout(crate::socket::CLOSE_GRACE, goodbye).await;
                return;
            }
        };
        let Some(item) = item else { return };
        if !deliver(&mut viewer, item, &sender).await {
            return;
        }
    }
}

/// Waits until the daemon has closed (every session stopped and stored); `false` if it went
/// away first.
async fn closed(phase: &mut tokio::sync::watch::Receiver<Phase>) -> bool {
    phase.wait_for(|phase| *phase == Phase::Closed).await.is_ok()
}

/// A stream's sending half: each message is counted against the followers' outbox
/// ([`crate::watchers`]) from when it is queued until the call takes it to encode, and a stream
/// that cannot queue one within the stall limit (its client stopped reading, or the outbox
/// stayed full) ends: what it still held queued is dropped then, its bytes counted out (a
/// client that reads nothing never has its stream polled again, so the stream cannot let go of
/// them itself).
struct Outbox<T> {
    daemon: Arc<Daemon>,
    sender: mpsc::Sender<Counted<T>>,
    queue: Arc<parking_lot::Mutex<mpsc::Receiver<Counted<T>>>>,
}

/// A queued message and its bytes' place in the outbox.
type Counted<T> = (Result<T, Status>, tokio::sync::OwnedSemaphorePermit);

/// The stream a call returns: the [`Outbox`]'s queue, shared so that the outbox can empty it.
struct Queued<T>(Arc<parking_lot::Mutex<mpsc::Receiver<Counted<T>>>>);

impl<T> Stream for Queued<T> {
    type Item = Result<T, Status>;

    fn poll_next(
        self: Pin<&mut Self>,
        context: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        // Never held across an await: the lock is only for this poll.
        let mut queue = self.0.lock();
        queue.poll_recv(context).map(|counted| counted.map(|(item, _counted)| item))
    }
}

/// A stream's [`Outbox`] and the stream the call returns.
fn outbox<T: Send + 'static>(daemon: &Arc<Daemon>) -> (Outbox<T>, Streamed<T>) {
    let (sender, receiver) = mpsc::channel(STREAM_BUFFER);
    let queue = Arc::new(parking_lot::Mutex::new(receiver));
    let stream = Queued(queue.clone());
    (Outbox { daemon: daemon.clone(), sender, queue }, Box::pin(stream))
}

impl<T: prost::Message> Outbox<T> {
    /// Queues `item`: whether the stream still takes messages.
    async fn send(&self, item: Result<T, Status>) -> bool {
        let bytes = item.as_ref().map_or(64, prost::Message::encoded_len);
        let limit = crate::watchers::write_limit(self.daemon.stall_limit(), bytes);
        let counted = tokio::select! {
            counted = self.daemon.watchers().reserve(bytes, limit) => counted,
            () = self.sender.closed() => return false,
        };
        let Some(counted) = counted else {
            tracing::info!(bytes, "a gRPC stream could not be written to: the followers' outbox stayed full; ending it");
            self.give_up();
            return false;
        };
        match tokio::time::timeout(limit, self.sender.send((item, counted))).await {
            Ok(sent) => sent.is_ok(),
            Err(_) => {
                tracing::info!(
                    ?limit,
                    "a gRPC stream's client took nothing within the stall limit; ending it"
                );
                self.give_up();
                false
            }
        }
    }

    /// Ends the stream: what it still holds queued is dropped, its bytes counted out.
    fn give_up(&self) {
        let mut queue = self.queue.lock();
        queue.close();
        while queue.try_recv().is_ok() {}
    }

    /// Resolves when the call ended.
    async fn closed(&self) {
        self.sender.closed().await;
    }
}

/// Sends what one subscription item means; whether the subscriber is still there (and the
/// subscription goes on).
async fn deliver(
    viewer: &mut crate::view::Viewer,
    item: Result<Subscribed, DaemonError>,
    sender: &Outbox<pb::SessionEvent>,
) -> bool {
    let events = match item {
        Ok(Subscribed::Event(record)) => session_events(viewer, &record),
        // The subscription reads the store itself: nothing is missing.
        Ok(Subscribed::Lagged) => return true,
        Ok(Subscribed::StoreFailing(reason)) => {
            vec![daemon_notice("warn", "store_failing", reason)]
        }
        Ok(Subscribed::StoreRecovered) => vec![daemon_notice(
            "info",
            "store_recovered",
            "the store takes the session's events again".into(),
        )],
        Err(error) => {
            sender.send(Err(status(error))).await;
            return false;
        }
    };
    for event in events {
        if !sender.send(Ok(event)).await {
            return false;
        }
    }
    true
}

/// A notice about the stream itself, not a stored event: seq 0.
fn daemon_notice(level: &str, kind: &str, text: String) -> pb::SessionEvent {
    pb::SessionEvent {
        seq: 0,
        ts_ms: 0,
        part: 0,
        parts: 1,
        event: Some(pb::session_event::Event::Notice(pb::Notice {
            level: level.into(),
            kind: kind.into(),
            text,
        })),
    }
}

/// What one stored event means, typed: its updates in order (a turn's end is its result,
/// then its usage), or, for an event that means nothing more, the event itself as a raw line.
pub fn session_events(
    viewer: &mut crate::view::Viewer,
    record: &EventRecord,
) -> Vec<pb::SessionEvent> {
    use pb::session_event::Event;
    let mut typed: Vec<Event> = Vec::new();
    viewer.apply(record, &mut |update| typed.extend(events_of(update)));
    if typed.is_empty() {
        typed.push(Event::RawLine(raw_line(record)));
    }
    let parts = count(typed.len());
    typed
        .into_iter()
        .enumerate()
        .map(|(part, event)| pb::SessionEvent {
            seq: record.seq,
            ts_ms: i64::try_from(record.ts_ms).unwrap_or(i64::MAX),
            part: count(part),
            parts,
            event: Some(event),
        })
        .collect()
}

/// A stored event as a raw line: for a protocol line, the exact line (read back by the session
/// crate, which wrote it); for the daemon's own events, the event as stored.
fn raw_line(record: &EventRecord) -> pb::RawLine {
    let line = match SessionEvent::from_stored(&record.kind, &record.payload) {
        Ok(SessionEvent::Line(line)) => line.raw.to_string(),
        _ => record.payload.clone(),
    };
    pb::RawLine { direction: record.dir.to_string(), line }
}

/// The typed events of one update.
fn events_of(update: ViewUpdate) -> Vec<pb::session_event::Event> {
    use pb::session_event::Event;
    let update = match update {
        ViewUpdate::Daemon(DaemonUpdate::Run { resumed }) => {
            return vec![Event::RunStarted(pb::RunStarted { resumed })];
        }
        ViewUpdate::Daemon(DaemonUpdate::Rotated { to }) => {
            return vec![Event::Rotated(pb::Rotated { to })];
        }
        ViewUpdate::Daemon(DaemonUpdate::Lost { count, reason }) => {
            return vec![Event::Lost(pb::Lost { count, reason })];
        }
        ViewUpdate::Daemon(DaemonUpdate::CallSettled {
            tool_use_id,
            tool_name,
            settle,
            note,
            by,
        }) => {
            let how = match settle {
                switchboard_session::unsettled::Settle::Done => "done",
                switchboard_session::unsettled::Settle::Interrupted => "interrupted",
            };
            let note = note.map(|note| format!(": {note}")).unwrap_or_default();
            return vec![Event::Notice(pb::Notice {
                level: "info".into(),
                kind: "call_settled".into(),
                text: format!("{tool_name} call {tool_use_id} settled as {how} by {by}{note}"),
            })];
        }
        ViewUpdate::Daemon(DaemonUpdate::Unreadable { reason }) => {
            return vec![Event::Notice(pb::Notice {
                level: "error".into(),
                kind: "unreadable".into(),
                text: reason,
            })];
        }
        ViewUpdate::Session(update) => update,
    };
    let event = match update {
        Update::Started { cwd, model, permission_mode, cli_version } => {
            Event::CliStarted(pb::CliStarted { cwd, model, permission_mode, cli_version })
        }
        Update::Prompt { text, images, uuid, queued } => {
            Event::Prompt(pb::Prompt { text, images: count(images.len()), uuid, queued })
        }
        Update::Dequeued => Event::PromptDequeued(pb::PromptDequeued {}),
        Update::MessageStarted { message_id, parent_tool_use_id, model, context_tokens } => {
            Event::MessageStart(pb::MessageStart {
                message_id,
                parent_tool_use_id,
                model,
                context_tokens,
            })
        }
        Update::TextDelta { message_id, index, parent_tool_use_id, text } => {
            Event::TextDelta(pb::TextDelta { message_id, index, parent_tool_use_id, text })
        }
        Update::ThinkingDelta { message_id, index, parent_tool_use_id, thinking } => {
            Event::ThinkingDelta(pb::ThinkingDelta {
                message_id,
                index,
                parent_tool_use_id,
                thinking,
            })
        }
        Update::ToolUseStarted { message_id, index, parent_tool_use_id, tool_use_id, name } => {
            Event::ToolUseStart(pb::ToolUseStart {
                message_id,
                index,
                parent_tool_use_id,
                tool_use_id,
                name,
            })
        }
        Update::ToolInputDelta { tool_use_id, partial_json, received_bytes, partial_input } => {
            Event::ToolInputDelta(pb::ToolInputDelta {
                tool_use_id,
                partial_json,
                received_bytes,
                partial_input: partial_input.as_ref().and_then(to_struct),
            })
        }
        Update::Block { message_id, index, parent_tool_use_id, uuid: _, block } => match block {
            Block::Text { text } => {
                Event::TextBlock(pb::TextBlock { message_id, index, parent_tool_use_id, text })
            }
            Block::Thinking { thinking, redacted } => Event::ThinkingBlock(pb::ThinkingBlock {
                message_id,
                index,
                parent_tool_use_id,
                thinking,
                redacted,
            }),
            Block::ToolUse { tool_use_id, name, input, rebuilt } => Event::ToolUse(pb::ToolUse {
                message_id,
                index,
                parent_tool_use_id,
                tool_use_id,
                name,
                input: to_struct(&input),
                rebuilt,
            }),
            Block::Other { value } => Event::OtherBlock(pb::OtherBlock {
                message_id,
                index,
                parent_tool_use_id,
                json: value.to_string(),
            }),
        },
        Update::ToolResult {
            tool_use_id,
            tool_name,
            parent_tool_use_id,
            is_error,
            text,
            images,
            interrupted,
        } => Event::ToolResult(pb::ToolResult {
            tool_use_id,
            tool_name,
            parent_tool_use_id,
            is_error,
            text,
            interrupted,
            images: count(images.len()),
        }),
        Update::PermissionAsked(pending) => Event::PermissionRequest(permission_request(pending)),
        Update::PermissionDecided {
            request_id,
            tool_name,
            behavior,
            by,
            message,
            tool_use_id,
            decided_at_ms,
            origin,
        } => Event::PermissionDecision(pb::PermissionDecision {
            request_id,
            tool_name,
            behavior: match behavior {
                SessionBehavior::Allow => pb::Behavior::Allow,
                _ => pb::Behavior::Deny,
            }
            .into(),
            decided_by: decided_by(&by),
            message,
            tool_use_id,
            decided_at_ms: i64::try_from(decided_at_ms).unwrap_or(i64::MAX),
            origin: origin.map(|origin| origin.to_string()),
        }),
        Update::TurnEnded {
            parent_tool_use_id,
            subtype,
            interrupted,
            failed,
            result,
            duration_ms,
            input_tokens,
            output_tokens,
            cost_usd,
            total_cost_usd,
            models,
            context_tokens,
            context_window,
        } => {
            return vec![
                Event::TurnResult(pb::TurnResult {
                    parent_tool_use_id: parent_tool_use_id.clone(),
                    subtype,
                    interrupted,
                    failed,
                    result,
                    duration_ms,
                }),
                Event::UsageReport(pb::UsageReport {
                    parent_tool_use_id,
                    input_tokens,
                    output_tokens,
                    cost_usd,
                    total_cost_usd,
                    context_tokens,
                    context_window,
                    models: models.into_iter().map(model_usage).collect(),
                }),
            ];
        }
        Update::State { from, to } => Event::StatusChange(pb::StatusChange {
            from: status_of(from).into(),
            to: status_of(to).into(),
        }),
        Update::Model { model } => Event::ModelChange(pb::ModelChange { model }),
        Update::Mode { mode } => Event::ModeChange(pb::ModeChange { mode }),
        Update::ClaudeSession { claude_session_id } => {
            Event::ClaudeSession(pb::ClaudeSession { claude_session_id })
        }
        Update::Notice { level, kind, text } => Event::Notice(pb::Notice {
            level: serde_json::to_value(level)
                .ok()
                .and_then(|value| value.as_str().map(str::to_owned))
                .unwrap_or_default(),
            kind: kind.as_str().into(),
            text,
        }),
        Update::UsageWindows { windows } => Event::UsageWindows(pb::UsageWindows {
            windows: windows.into_iter().map(usage_window).collect(),
        }),
        Update::Retracted { uuids } => Event::Retracted(pb::Retracted { uuids }),
        Update::ConversationReset { trigger } => {
            Event::ConversationReset(pb::ConversationReset { trigger })
        }
        Update::PromptCancelled { uuid } => Event::PromptCancelled(pb::PromptCancelled { uuid }),
        Update::PromptSuggestion { suggestion } => {
            Event::PromptSuggestion(pb::PromptSuggestion { suggestion })
        }
        Update::BackgroundTasks { tasks } => Event::BackgroundTasks(pb::BackgroundTasks {
            tasks: tasks.into_iter().map(background_task).collect(),
        }),
    };
    vec![event]
}

fn background_task(task: switchboard_session::projection::BackgroundTask) -> pb::BackgroundTask {
    pb::BackgroundTask {
        task_id: task.task_id,
        task_type: task.task_type,
        description: task.description,
        subagent_type: task.subagent_type,
    }
}

fn usage_window(window: switchboard_session::projection::UsageWindow) -> pb::UsageWindow {
    pb::UsageWindow {
        window: window.window,
        status: window.status,
        utilization: window.utilization,
        resets_at: window.resets_at,
    }
}

fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn model_usage(totals: ModelTotals) -> pb::ModelUsage {
    pb::ModelUsage {
        model: totals.model,
        input_tokens: totals.input_tokens,
        output_tokens: totals.output_tokens,
        cost_usd: totals.cost_usd,
        context_window: totals.context_window,
    }
}

/// Who decided, as one word: `policy`, `policy:<rule>`, `person:<who>`, `timeout`,
/// `cancelled`, `link_closed`, `cli`, `terminal`.
fn decided_by(by: &DecidedBy) -> String {
    match by {
        DecidedBy::Policy { rule: Some(rule) } => format!("policy:{rule}"),
        DecidedBy::Policy { rule: None } => "policy".into(),
        DecidedBy::Person { who } => format!("person:{who}"),
        DecidedBy::Timeout => "timeout".into(),
        DecidedBy::Cancelled => "cancelled".into(),
        DecidedBy::LinkClosed => "link_closed".into(),
        DecidedBy::Cli => "cli".into(),
        DecidedBy::Terminal => "terminal".into(),
    }
}

fn status_of(state: SessionState) -> pb::Status {
    status_named(crate::daemon::record_state(state, false))
}

/// A session's state as the enum.
fn status_named(state: switchboard_store::RecordState) -> pb::Status {
    use switchboard_store::RecordState;
    match state {
        RecordState::Starting => pb::Status::Starting,
        RecordState::Idle => pb::Status::Idle,
        RecordState::Working => pb::Status::Working,
        RecordState::AwaitingPermission => pb::Status::AwaitingPermission,
        RecordState::Compacting => pb::Status::Compacting,
        RecordState::Exited => pb::Status::Exited,
        RecordState::Crashed => pb::Status::Crashed,
        RecordState::Paused => pb::Status::Paused,
        RecordState::Parked => pb::Status::Parked,
    }
}

fn permission_request(pending: PendingPermission) -> pb::PermissionRequest {
    pb::PermissionRequest {
        input: to_struct(&pending.input),
        request_id: pending.request_id,
        tool_name: pending.tool_name,
        tool_use_id: pending.tool_use_id,
        reason: pending.reason,
        agent_id: pending.agent_id,
        timeout_secs: pending.timeout_secs,
        asked_at_ms: i64::try_from(pending.asked_at_ms).unwrap_or(i64::MAX),
        always_allows: pending.always_allows,
        started_by: pending.started_by,
        origin: pending.origin.map(|origin| origin.to_string()),
        rule: pending.rule,
        cli_reason: pending.cli_reason,
        hints: (!pending.hints.is_empty()).then(|| permission_hints(&pending.hints)),
        parked_at_ms: pending.parked_at_ms.map(|at| i64::try_from(at).unwrap_or(i64::MAX)),
        park_expires_at_ms: pending
            .park_expires_at_ms
            .map(|at| i64::try_from(at).unwrap_or(i64::MAX)),
    }
}

fn permission_hints(hints: &switchboard_session::PermissionHints) -> pb::PermissionHints {
    pb::PermissionHints {
        requires_user_interaction: hints.requires_user_interaction,
        classifier_approvable: hints.classifier_approvable,
        default_to_no: hints.default_to_no,
        suppress_always_allow_rule: hints.suppress_always_allow_rule,
        matched_ask_rule: hints.matched_ask_rule.as_ref().map(|rule| pb::AskRule {
            source: rule.source.clone(),
            tool_name: rule.tool_name.clone(),
            rule_content: rule.rule_content.clone(),
        }),
        title: hints.title.clone(),
        mcp_server: hints.mcp_server.as_ref().map(|server| pb::McpServer {
            name: server.name.clone(),
            source: server.source.clone(),
        }),
        person_only: hints.person_only,
        no_standing_rule: hints.no_standing_rule,
    }
}

/// A session as the API shows it ([`crate::faces::view`]), as the message.
async fn session(daemon: &Daemon, record: switchboard_store::SessionRecord) -> pb::Session {
    let view = crate::faces::view(daemon, record).await;
    let record = view.record;
    pb::Session {
        origin: record.launch.origin.as_ref().map(|origin| pb::Origin {
            face: origin.face.as_str().to_owned(),
            token: origin.token.clone(),
            ceiling: origin.ceiling.clone(),
        }),
        status: status_named(record.state).into(),
        id: record.id,
        claude_session_id: record.claude_session_id,
        cwd: record.cwd,
        model: record.model,
        permission_mode: record.permission_mode,
        state: record.state.as_str().to_owned(),
        title: record.title,
        cost_usd: record.cost_usd,
        created_ms: i64::try_from(record.created_ms).unwrap_or(i64::MAX),
        updated_ms: i64::try_from(record.updated_ms).unwrap_or(i64::MAX),
        archived: record.archived,
        node: record.node,
        node_lost: view.node_lost,
        running: view.running,
        pending_permissions: view.pending_permissions.into_iter().map(permission_request).collect(),
        background_tasks: view.background_tasks.into_iter().map(background_task).collect(),
        slash_commands: view
            .slash_commands
            .into_iter()
            .map(|command| pb::SlashCommand {
                name: command.name,
                description: command.description,
                argument_hint: command.argument_hint,
                skill: command.skill,
            })
            .collect(),
    }
}

/// Follows the dashboard's feed for one `WatchSessions` stream.
async fn watch(
    daemon: Arc<Daemon>,
    mut changes: tokio::sync::broadcast::Receiver<crate::changes::DashboardChange>,
    sender: Outbox<pb::SessionChange>,
) {
    let mut phase = daemon.phase();
    loop {
        let change = tokio::select! {
            change = changes.recv() => change,
            () = sender.closed() => return,
            _ = closed(&mut phase) => {
                sender.send(Err(Status::unavailable("the daemon is shutting down"))).await;
                return;
            }
        };
        let change = match change {
            Ok(change) => session_change(&daemon, &change).await,
            Err(tokio::sync::broadcast::error::RecvError::Lagged(missed)) => {
                pb::SessionChange { event: "lagged".into(), missed, ..Default::default() }
            }
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
        };
        if !sender.send(Ok(change)).await {
            return;
        }
    }
}

/// One of the dashboard's changes as the message, with the session as it stands.
async fn session_change(
    daemon: &Daemon,
    change: &crate::changes::DashboardChange,
) -> pb::SessionChange {
    use crate::changes::Change;
    let change = &change.change;
    let event = change.event().to_owned();
    let id = change.session_id().unwrap_or_default().to_owned();
    let session = match change {
        Change::SessionCreated { .. } | Change::SessionChanged(_) => {
            let record = match daemon.live_record(&id) {
                Some(record) => Some(record),
                None => daemon.record(&id).await.ok().flatten(),
            };
            match record {
                Some(record) => Some(session(daemon, record).await),
                None => None,
            }
        }
        _ => None,
    };
    pb::SessionChange { event, id, session, error: change.error().map(str::to_owned), missed: 0 }
}

/// A daemon error as a status: the REST API's classification ([`ApiError`]), in gRPC's codes.
fn status(error: DaemonError) -> Status {
    api_status(ApiError::from(error))
}

fn api_status(error: ApiError) -> Status {
    use axum::http::StatusCode;
    let code = match error.status {
        StatusCode::BAD_REQUEST => Code::InvalidArgument,
        StatusCode::UNAUTHORIZED => Code::Unauthenticated,
        StatusCode::FORBIDDEN => Code::PermissionDenied,
        StatusCode::NOT_FOUND => Code::NotFound,
        StatusCode::CONFLICT if error.code == "exists" => Code::AlreadyExists,
        StatusCode::CONFLICT => Code::FailedPrecondition,
        StatusCode::PAYLOAD_TOO_LARGE | StatusCode::TOO_MANY_REQUESTS => Code::ResourceExhausted,
        StatusCode::SERVICE_UNAVAILABLE => Code::Unavailable,
        StatusCode::BAD_GATEWAY => Code::FailedPrecondition,
        _ => Code::Internal,
    };
    Status::new(code, format!("{} ({})", error.message, error.code))
}

/// A JSON object as a `Struct` (`None` for anything else).
fn to_struct(value: &Value) -> Option<prost_types::Struct> {
    let Value::Object(fields) = value else { return None };
    Some(prost_types::Struct {
        fields: fields.iter().map(|(key, value)| (key.clone(), to_value(value))).collect(),
    })
}

fn to_value(value: &Value) -> prost_types::Value {
    use prost_types::value::Kind;
    let kind = match value {
        Value::Null => Kind::NullValue(0),
        Value::Bool(bool) => Kind::BoolValue(*bool),
        Value::Number(number) => Kind::NumberValue(number.as_f64().unwrap_or_default()),
        Value::String(text) => Kind::StringValue(text.clone()),
        Value::Array(items) => {
            Kind::ListValue(prost_types::ListValue { values: items.iter().map(to_value).collect() })
        }
        Value::Object(_) => Kind::StructValue(to_struct(value).unwrap_or_default()),
    };
    prost_types::Value { kind: Some(kind) }
}

fn from_struct(value: &prost_types::Struct) -> Value {
    Value::Object(
        value.fields.iter().map(|(key, value)| (key.clone(), from_value(value))).collect(),
    )
}

fn from_value(value: &prost_types::Value) -> Value {
    use prost_types::value::Kind;
    match &value.kind {
        None | Some(Kind::NullValue(_)) => Value::Null,
        Some(Kind::BoolValue(bool)) => Value::Bool(*bool),
        Some(Kind::NumberValue(number)) => {
            // A whole number stays one (a Struct has only doubles).
            if number.fract() == 0.0 && number.abs() < 9.0e15 {
                Value::from(*number as i64)
            } else {
                serde_json::Number::from_f64(*number).map_or(Value::Null, Value::Number)
            }
        }
        Some(Kind::StringValue(text)) => Value::String(text.clone()),
        Some(Kind::ListValue(list)) => Value::Array(list.values.iter().map(from_value).collect()),
        Some(Kind::StructValue(fields)) => from_struct(fields),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_method_has_its_scope() {
        let proto = include_str!("../../../../proto/switchboard/v1/switchboard.proto");
        let methods: Vec<&str> = proto
            .lines()
            .filter_map(|line| line.trim().strip_prefix("rpc "))
            .filter_map(|rest| rest.split('(').next())
            .collect();
        assert!(methods.len() >= 12, "the proto is read: {methods:?}");
        for method in &methods {
            assert!(
                METHOD_SCOPES.iter().any(|(name, _)| name == method),
                "{method} has no scope in METHOD_SCOPES"
            );
        }
        assert_eq!(METHOD_SCOPES.len(), methods.len(), "METHOD_SCOPES names only the proto's");
        assert_eq!(scope_of("/switchboard.v1.Switchboard/AnswerPermission"), Scope::Approve);
        assert_eq!(scope_of("/switchboard.v1.Switchboard/Unknown"), Scope::Admin);
        assert_eq!(scope_of("/other.Service/ListSessions"), Scope::Admin);
    }
}
