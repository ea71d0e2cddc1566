//! The agents-ui web-UI backend over Claude Code's own transcripts, so frontends written for
//! it work against Switchboard unchanged:
//!
//! - `GET /api/claude/sessions`: every transcript under `~/.claude/projects`;
//! - `GET /api/claude/sessions/{id}`: one;
//! - WebSocket `/api/claude/sessions/{id}/subscribe`: every existing transcript line on
//!   connect, then new ones as the file grows (pushed on file notifications, not polled).
//!   The client sends `{"type":"user_message","content":…}` (which takes the session over:
//!   Switchboard resumes it, or writes to the session already resuming it) and optionally
//!   `{"type":"subscribe","fromUuid":…}` (send again everything after that message), and may
//!   acknowledge lines with `{"type":"ack","uuid":…}` (taken silently: nothing is dropped
//!   either way); failures come back as `{"type":"error","error":…}`.

use std::sync::Arc;

use axum::extract::ws::{Message as WsMessage, WebSocket};
use axum::extract::{Path, State};
use axum::response::Response;
use axum::Json;
use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};

use crate::daemon::{CreateSession, Daemon};
use crate::error::ApiError;
use crate::tokens::{Caller, Scope};
use crate::transcripts::{watch_file, TranscriptInfo, TranscriptTail};

/// Transcript lines sent per read while replaying a file.
const REPLAY_BATCH: usize = 500;

pub(crate) async fn list(
    State(daemon): State<Arc<Daemon>>,
) -> Result<Json<Vec<TranscriptInfo>>, ApiError> {
    let transcripts = daemon.transcripts().clone();
    // Neither a reader that died nor an unreadable directory is the caller's fault: 500.
    let list = tokio::task::spawn_blocking(move || transcripts.list())
        .await
        .map_err(|error| ApiError::internal(format!("the transcript reader failed: {error}")))?
        .map_err(|error| ApiError::internal(format!("cannot read the transcripts: {error}")))?;
    Ok(Json(list))
}

/// A live Claude Code process ([`crate::agents`]), and the Switchboard session that runs or
/// follows its Claude session, if one does.
#[derive(Debug, serde::Serialize)]
pub(crate) struct AgentView {
    /// The process and its session, as Claude Code lists it.
    #[serde(flatten)]
    pub agent: crate::agents::ClaudeAgent,
    /// The Switchboard session that runs it or follows it through its hooks.
    pub switchboard_session: Option<String>,
}

/// `GET /api/claude/agents`: every Claude Code process of this user's running now, as
/// `claude agents --json` lists them (interactive, `-p` and background sessions alike).
pub(crate) async fn agents(
    State(daemon): State<Arc<Daemon>>,
) -> Result<Json<Vec<AgentView>>, ApiError> {
    let transcripts = daemon.transcripts().clone();
    let live = tokio::task::spawn_blocking(move || crate::agents::live(&transcripts))
        .await
        .map_err(|error| ApiError::internal(format!("the agents' reader failed: {error}")))?;
    let mut views = Vec::with_capacity(live.len());
    for agent in live {
        let switchboard_session = match daemon.externals().find(&agent.session_id) {
            Some(external) => Some(external.session),
            None => daemon.running_for_claude_session(&agent.session_id).await,
        };
        views.push(AgentView { agent, switchboard_session });
    }
    Ok(Json(views))
}

pub(crate) async fn get(
    State(daemon): State<Arc<Daemon>>,
    Path(id): Path<String>,
) -> Result<Json<TranscriptInfo>, ApiError> {
    find(&daemon, &id).await.map(Json)
}

async fn find(daemon: &Daemon, id: &str) -> Result<TranscriptInfo, ApiError> {
    let transcripts = daemon.transcripts().clone();
    let id_owned = id.to_owned();
    tokio::task::spawn_blocking(move || transcripts.find(&id_owned))
        .await
        .ok()
        .flatten()
        .ok_or_else(|| ApiError::not_found(format!("no Claude Code transcript for session {id}")))
}

pub(crate) async fn subscribe(
    State(daemon): State<Arc<Daemon>>,
    axum::Extension(caller): axum::Extension<Caller>,
    Path(id): Path<String>,
    crate::extract::Upgrade(upgrade): crate::extract::Upgrade,
) -> Result<Response, ApiError> {
    let info = find(&daemon, &id).await?;
    // A follower's place (by the transcript's own id: its session's places are its own).
    let seat = daemon.watchers().seat(caller.token_name(), Some(&format!("claude:{id}")))?;
    Ok(upgrade
        .max_message_size(crate::socket::MAX_WS_MESSAGE_BYTES)
        .read_buffer_size(crate::socket::WS_READ_BUFFER_BYTES)
        .on_upgrade(move |socket| async move {
            let _seat = seat;
            let revocable = caller.clone();
            crate::tokens::until_revoked(&revocable, serve(daemon, caller, info, socket)).await
        }))
}

/// What the socket's reader hands to its writer.
enum ClientRequest {
    /// Replay from after this message uuid.
    ReplayFrom(String),
    /// Send this frame (an error).
    Reply(String),
}

async fn serve(daemon: Arc<Daemon>, caller: Caller, info: TranscriptInfo, socket: WebSocket) {
    let (mut sink, incoming) = socket.split();
    // Watch before reading, so an append between the two is not missed.
    let (watcher, mut changed) = match watch_file(&info.path) {
        Ok(watch) => watch,
        Err(error) => {
            let frame =
                json!({"type": "error", "error": format!("cannot watch the transcript: {error}")});
            let _ = sink.send(WsMessage::Text(frame.to_string().into())).await;
            return;
        }
    };
    let (reader, mut requests) = {
        let (daemon, info) = (daemon.clone(), info.clone());
        crate::socket::spawn_frame_reader(incoming, move |text| {
            let (daemon, caller, info) = (daemon.clone(), caller.clone(), info.clone());
            async move { handle_frame(&daemon, &caller, &info, &text).await }
        })
    };
    let mut tail = TranscriptTail::new(&info.path);
    let mut drain_watch = crate::socket::DrainWatch::new(daemon.phase());
    'serve: loop {
        // Send everything readable now, in batches.
        loop {
            let lines;
            (tail, lines) = blocking(tail, |tail| tail.read_available(REPLAY_BATCH)).await;
            if lines.is_empty() {
                break;
            }
            // Counted against the followers' outbox, and within the stall limit.
            if !crate::socket::write_frames(&daemon, &mut sink, lines, false).await {
                break 'serve;
            }
        }
        tokio::select! {
            change = changed.recv() => if change.is_none() { break },
            drain = drain_watch.next() => {
                if !crate::socket::send_drain(&mut sink, drain).await {
                    break;
                }
            }
            request = requests.recv() => match request {
                None => break,
                Some(ClientRequest::Reply(frame)) => {
                    if !crate::socket::write_frames(&daemon, &mut sink, vec![frame], false).await {
                        break;
                    }
                }
                Some(ClientRequest::ReplayFrom(uuid)) => {
                    // Read from the start, skip through `uuid`, then carry on as usual.
                    let found;
                    let wanted = uuid.clone();
                    (tail, found) = blocking(TranscriptTail::new(&info.path), move |tail| skip_through(tail, &wanted)).await;
                    if !found {
                        let frame = json!({"type": "error", "error": format!("no message {uuid} in this session")});
                        if !crate::socket::write_frames(&daemon, &mut sink, vec![frame.to_string()], false).await {
                            break;
                        }
                    }
                }
            },
        }
    }
    drop(watcher);
    reader.abort();
}

/// Runs `work` on the tail on a blocking thread (it reads the file), handing the tail back.
async fn blocking<T: Send + 'static>(
    mut tail: TranscriptTail,
    work: impl FnOnce(&mut TranscriptTail) -> T + Send + 'static,
) -> (TranscriptTail, T) {
    match tokio::task::spawn_blocking(move || {
        let result = work(&mut tail);
        (tail, result)
    })
    .await
    {
        Ok(result) => result,
        Err(error) => std::panic::resume_unwind(error.into_panic()),
    }
}

/// Advances `tail` past the line whose `uuid` is `uuid`; false (and at the end) if none is.
/// One line at a time, so the tail stops right after the match and the lines after it stay
/// buffered for the normal send loop.
fn skip_through(tail: &mut TranscriptTail, uuid: &str) -> bool {
    while let Some(line) = tail.read_available(1).pop() {
        let is_match = serde_json::from_str::<Value>(&line)
            .ok()
            .is_some_and(|value| value.get("uuid").and_then(Value::as_str) == Some(uuid));
        if is_match {
            return true;
        }
    }
    false
}

/// Acts on a client frame; returns what the writer must do. A message (which starts or steers
/// a session) needs the `operate` scope.
async fn handle_frame(
    daemon: &Arc<Daemon>,
    caller: &Caller,
    info: &TranscriptInfo,
    text: &str,
) -> Option<ClientRequest> {
    let error = |message: String| {
        Some(ClientRequest::Reply(json!({"type": "error", "error": message}).to_string()))
    };
    let frame: Value = match serde_json::from_str(text) {
        Ok(frame) => frame,
        Err(parse) => return error(format!("unreadable frame: {parse}")),
    };
    match frame.get("type").and_then(Value::as_str) {
        Some("user_message") => {
            let Some(content) =
                frame.get("content").and_then(Value::as_str).filter(|c| !c.is_empty())
            else {
                return error("user_message needs a non-empty content string".into());
            };
            if let Err(refused) = caller.require(Scope::Operate) {
                return error(refused.to_string());
            }
            if caller.ceiling().is_some() {
                // A transcript's session is no ceiling's to take over.
                return error(format!(
                    "token {} has a ceiling: it takes over no transcript (start a session of its own)",
                    caller.name
                ));
            }
            match take_over(daemon, info, content, caller.sender("transcript", None)).await {
                Ok(()) => None,
                Err(message) => error(message),
            }
        }
        Some("subscribe") => frame
            .get("fromUuid")
            .and_then(Value::as_str)
            .map(|uuid| ClientRequest::ReplayFrom(uuid.to_owned())),
        // The web-UI backend's message acknowledgement: taken, with nothing to do. Every line
        // stays in the transcript, and a client that missed some asks for them again with
        // `subscribe` and `fromUuid`.
        Some("ack") => None,
        Some(other) => error(format!("unknown message type {other:?}")),
        None => error("a message needs a type".into()),
    }
}

/// Sends `content` to the session: through the daemon session already resuming it, or by
/// resuming it now (the CLI appends to the same transcript, which the socket follows).
async fn take_over(
    daemon: &Arc<Daemon>,
    info: &TranscriptInfo,
    content: &str,
    by: switchboard_session::Sender,
) -> Result<(), String> {
    if let Some(id) = daemon.running_for_claude_session(&info.id).await {
        // A terminal's session types it into the CLI there, as the web-UI backend does.
        return daemon
            .send_message(&id, switchboard_protocol::UserMessage::prompt(content), by)
            .await
            .map_err(|error| format!("Failed to send message to session: {error}"));
    }
    let cwd = info
        .cwd
        .clone()
        .ok_or_else(|| "the transcript does not say which directory it ran in".to_owned())?;
    let request = CreateSession {
        launch: crate::daemon::Launch { cwd: cwd.into(), ..Default::default() },
        resume: Some(info.id.clone()),
        prompt: Some(content.to_owned()),
        started_by: Some(by),
        ..CreateSession::default()
    };
    daemon
        .create(request)
        .await
        .map(drop)
        .map_err(|error| format!("Failed to resume the session: {error}"))
}
