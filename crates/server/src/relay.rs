//! The agents-ui relay protocol, so frontends written for it work unchanged: a Claude Code CLI
//! launched elsewhere with `--sdk-url ws://DAEMON/` connects at `/` (with the ingress token);
//! frontends connect at `/ws` and get every raw line the CLIs send plus
//! `{"type":"status","text":"claude code connected"|"claude code disconnected"}`. A frontend's
//! user message goes to the CLI its `session_id` names (else the one CLI connected; with
//! several, it is refused), and
//! its permission answers (both of the protocol's forms) are a person's. Each connection is its
//! own Switchboard session (stored, steerable, with permissions decided by the daemon's policy
//! or a person; `auto-approve` is a policy), so nothing about it is lost either.
//!
//! - An external CLI at `/` becomes a session once its upgrade is done, over
//!   `sdk_url::external` (no process; its socket's end is its exit). The pump applies the
//!   protocol's rotation: when the CLI announces another Claude session id, `Daemon::rotate`
//!   ends the current session (`rotated` event) and hands its handle to the session for that
//!   id (new, or the connection's earlier one), so each Claude session id is its own
//!   Switchboard session.
//! - Frontends at `/ws` get the CLI's raw lines from the pump once stored (the pump also sends
//!   "disconnected" after the last) and the "connected" status line from the socket handler,
//!   and steer through the session handle (`Daemon::relay_handles`: relay CLIs and sessions
//!   created with `relay`). The feed is a broadcast whose sender waits for room
//!   (`async-broadcast`, `RELAY_BUFFER` lines): no frontend misses a line, the relay's pumps
//!   wait for the slowest frontend, and a frontend that cannot take a write (a frame, a flush,
//!   a reply) within `STALL_LIMIT` is dropped, so that it cannot hold the others back for
//!   good.
//! - A permission answer in either of the protocol's forms (`permission_answer`; anything but
//!   a plain allow denies) goes through the session's first-answer-wins table as a person's.
//! - [`router`] is the relay alone, for the discovery port (`serve_relay`), where a page from
//!   an allowed origin needs no token.

use std::sync::Arc;

use axum::extract::ws::{Message as WsMessage, WebSocketUpgrade};
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use futures::{SinkExt, StreamExt};
use switchboard_protocol::{ControlRequestPayload, Message};
use switchboard_session::{AnswerBehavior, PermissionAnswer};

use crate::daemon::{relay_status as status, Daemon};
use crate::error::ApiError;
use crate::tokens::{Caller, Scope};

/// `GET /`: an externally launched CLI connects. Its session is made once the upgrade is
/// done: a client that goes away before the `101` leaves nothing behind (a session made
/// before stayed `starting` for good).
pub(crate) async fn cli(
    State(daemon): State<Arc<Daemon>>,
    headers: HeaderMap,
    upgrade: WebSocketUpgrade,
) -> Result<Response, ApiError> {
    if let Some(expected) = daemon.ingress_token() {
        if !crate::auth::tokens_match(expected, crate::auth::bearer(&headers).unwrap_or("")) {
            return Err(ApiError::unauthorized_bearer("the relay's ingress token"));
        }
    }
    Ok(upgrade
        .max_message_size(switchboard_protocol::MAX_LINE_BYTES)
        .read_buffer_size(crate::socket::CLI_WS_READ_BUFFER_BYTES)
        .on_upgrade(move |mut socket| async move {
            // The attach and the first publish run once, boxed: held inline, their futures
            // would size this task (which lives as long as the CLI's socket) at their largest,
            // about 7 KiB a connected CLI where the socket's own loop needs a fraction of it.
            // Only the session's id is kept: a record held here would weigh on the task for
            // as long as the socket lives.
            let (id, slot) = match Box::pin(daemon.attach_external()).await {
                Ok((record, slot)) => (record.id, slot),
                Err(error) => {
                    let close = axum::extract::ws::CloseFrame {
                        code: axum::extract::ws::close_code::AGAIN,
                        reason: error.to_string().into(),
                    };
                    let _ = socket.send(WsMessage::Close(Some(close))).await;
                    return;
                }
            };
            daemon.set_relay_current(Some(id));
            Box::pin(daemon.relay_publish(&status("claude code connected"))).await;
            // The CLI's lines reach the frontends from the session's pump, once stored (and
            // de-duplicated); so does "disconnected", after the last of them.
            crate::socket::pipe(socket, slot, daemon.ping_interval()).await;
        }))
}

/// `GET /ws`: a frontend.
pub(crate) async fn frontend(
    State(daemon): State<Arc<Daemon>>,
    axum::Extension(caller): axum::Extension<Caller>,
    crate::extract::Upgrade(upgrade): crate::extract::Upgrade,
) -> Response {
    // A follower's place (a named token's count of followers).
    let seat = match daemon.watchers().seat(caller.token_name(), None) {
        Ok(seat) => seat,
        Err(error) => return axum::response::IntoResponse::into_response(ApiError::from(error)),
    };
    // Subscribed before the handshake answers: a CLI that connects as soon as the frontend's
    // socket opens is never announced before the frontend listens.
    let feed = daemon.relay_subscribe();
    upgrade
        .max_message_size(crate::socket::MAX_WS_MESSAGE_BYTES)
        .read_buffer_size(crate::socket::WS_READ_BUFFER_BYTES)
        .on_upgrade(move |socket| async move {
            let _seat = seat;
            let revocable = caller.clone();
            crate::tokens::until_revoked(&revocable, feed_frontend(daemon, caller, feed, socket))
                .await
        })
}

/// A relay frontend's socket: every relay line out, its frames in, until it or the daemon
/// goes.
async fn feed_frontend(
    daemon: Arc<Daemon>,
    caller: Caller,
    mut feed: async_broadcast::Receiver<axum::extract::ws::Utf8Bytes>,
    socket: axum::extract::ws::WebSocket,
) {
    let (mut sink, incoming) = socket.split();
    let reader_daemon = daemon.clone();
    let (reader, mut replies) = crate::socket::spawn_frame_reader(incoming, move |text| {
        let (daemon, caller) = (reader_daemon.clone(), caller.clone());
        async move { forward(&daemon, &caller, text.as_str()).await }
    });
    // Every write to the frontend is bounded: while one waits, the frontend takes no
    // line from the feed, and the feed holds every relay CLI back.
    let limit = daemon.stall_limit();
    if daemon.relay_handle().is_some() {
        let connected = WsMessage::Text(status("claude code is connected").into());
        if !within(limit, sink.send(connected)).await {
            reader.abort();
            return;
        }
    }
    let mut drain_watch = crate::socket::DrainWatch::new(daemon.phase());
    loop {
        tokio::select! {
            drain = drain_watch.next() => {
                let step = crate::socket::send_drain(&mut sink, drain);
                if !matches!(tokio::time::timeout(limit, step).await, Ok(true)) {
                    break;
                }
            }
            line = feed.recv_direct() => match line {
                Ok(line) => {
                    // Lines already waiting go out in the same write (one flush).
                    let mut written = within(limit, sink.feed(WsMessage::Text(line))).await;
                    let mut queued = 1;
                    while written && queued < crate::socket::MAX_FRAMES_PER_FLUSH {
                        let Ok(line) = feed.try_recv() else { break };
                        written = within(limit, sink.feed(WsMessage::Text(line))).await;
                        queued += 1;
                    }
                    if !written || !within(limit, sink.flush()).await {
                        break;
                    }
                }
                // The feed never overflows (its sender waits); closed: the daemon ends.
                Err(_) => break,
            },
            reply = replies.recv() => match reply {
                Some(reply) => {
                    if !within(limit, sink.send(WsMessage::Text(reply.into()))).await {
                        break;
                    }
                }
                // The frontend went away.
                None => break,
            },
        }
    }
    reader.abort();
}

/// The relay alone, for the port agents-ui frontends discover (`switchboard serve
/// --relay-ports`): `/` for CLIs (the ingress token, as on the main port) and `/ws` for
/// frontends. A frontend there may come without the API token if its page's `Origin` is one
/// the daemon allows (`--allow-origin`): a frontend written for the relay protocol sends no
/// token, and only the origins a person named can reach it that way.
pub(crate) fn router(daemon: Arc<Daemon>, auth: crate::auth::AuthConfig) -> axum::Router {
    use axum::routing::get;
    axum::Router::new()
        .route("/", get(cli_checked))
        .route(
            "/ws",
            get(frontend).layer(axum::middleware::from_fn_with_state(auth.clone(), frontend_auth)),
        )
        .layer(axum::Extension(auth))
        .with_state(daemon)
}

/// `/` on the relay port: the checks `/` has on the main port, then the CLI's socket.
async fn cli_checked(
    State(daemon): State<Arc<Daemon>>,
    axum::Extension(auth): axum::Extension<crate::auth::AuthConfig>,
    headers: HeaderMap,
    upgrade: WebSocketUpgrade,
) -> Result<Response, ApiError> {
    crate::auth::check_outside_auth(&auth, &headers)?;
    cli(State(daemon), headers, upgrade).await
}

/// `/ws` on the relay port: a page from an allowed origin comes in as it is; anyone else needs
/// what the API needs.
async fn frontend_auth(
    State(auth): State<crate::auth::AuthConfig>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Result<Response, ApiError> {
    let origin =
        request.headers().get(axum::http::header::ORIGIN).and_then(|origin| origin.to_str().ok());
    if origin.is_some_and(|origin| auth.allowed_origins.iter().any(|allowed| allowed == origin)) {
        let mut request = request;
        request.extensions_mut().insert(Caller::unnamed(RELAY_FRONTEND, Scope::Operate));
        return Ok(next.run(request).await);
    }
    crate::auth::require_auth(State(auth), request, next).await
}

/// One write to a relay frontend (a frame, a flush): whether it was done within `limit`. One
/// that was not gets the frontend dropped (logged).
///
/// Nearly every write is done at once (into the socket's buffer): the write is tried first,
/// and only one that must wait is timed. Timing every write read the clock for each frame:
/// 1.5% of the relay's CPU with ten frontends.
async fn within<E>(
    limit: std::time::Duration,
    write: impl std::future::Future<Output = Result<(), E>>,
) -> bool {
    let mut write = std::pin::pin!(write);
    if let Some(done) = futures::FutureExt::now_or_never(write.as_mut()) {
        return done.is_ok();
    }
    match tokio::time::timeout(limit, write).await {
        Ok(Ok(())) => true,
        Ok(Err(_)) => false,
        Err(_) => {
            tracing::warn!("a relay frontend took nothing for {limit:?}; dropping it");
            false
        }
    }
}

/// The most lines one frame from a frontend may carry.
pub(crate) const MAX_LINES_PER_FRAME: usize = 64;

/// Who a relay frontend that came without a token (from an allowed origin) is: it may steer
/// and answer, as the relay protocol's frontends do.
pub(crate) const RELAY_FRONTEND: &str = "relay frontend";

/// What a frontend sent, to the CLI: user messages (to the CLI whose Claude session id they
/// name, else the one CLI connected; with several, one that names none is refused) and
/// interrupts go through the session (so they are logged);
/// a permission answer, in either of the relay protocol's forms, is a person's decision;
/// anything else is refused with a status line. An answer needs the `approve` scope, the rest
/// `operate`.
async fn forward(daemon: &Daemon, caller: &Caller, text: &str) -> Option<String> {
    let mut replies = Vec::new();
    let lines: Vec<&str> = text.split('\n').filter(|line| !line.trim().is_empty()).collect();
    if lines.len() > MAX_LINES_PER_FRAME {
        return Some(status(&format!(
            "a frame may carry {MAX_LINES_PER_FRAME} lines at most; this one was not read"
        )));
    }
    for line in lines {
        let answer = permission_answer(line);
        // An answer needs `approve`; one that runs another input, and anything else, `operate`.
        let needed = match &answer {
            Some(Ok(answer)) if answer.answer.updated_input.is_some() => Scope::Operate,
            Some(_) => Scope::Approve,
            None => Scope::Operate,
        };
        if let Err(refused) = caller.require(needed) {
            replies.push(status(&refused.to_string()));
            continue;
        }
        if caller.ceiling().is_some() {
            // Relay sessions are no ceiling's: a token with one only watches them.
            let refused = format!(
                "token {} has a ceiling: relay sessions are not under it, so it only watches them",
                caller.name
            );
            replies.push(status(&refused));
            continue;
        }
        match answer {
            Some(Ok(answer)) => {
                if let Err(message) =
                    answer_permission(daemon, answer, &caller.who("relay", None)).await
                {
                    replies.push(status(&message));
                }
                continue;
            }
            Some(Err(message)) => {
                replies.push(status(&message));
                continue;
            }
            None => {}
        }
        let Some(current) = daemon.relay_handle() else {
            replies.push(status("no claude code is connected"));
            continue;
        };
        let result = match Message::decode(line.as_bytes()) {
            Ok(Message::User(user)) => {
                // Routed by the Claude session id it names, as the relay protocol routes; one
                // that names none goes to the one CLI connected, and is refused when there
                // are several (it could reach a CLI it was not meant for).
                let named = user.session_id.clone().filter(|id| !id.is_empty());
                let connected = daemon.relay_handles();
                let handle = match &named {
                    None if connected.len() > 1 => {
                        replies.push(status(&format!(
                            "{} claude codes are connected: name the one this message is for with its session_id",
                            connected.len()
                        )));
                        continue;
                    }
                    None => Some(current.clone()),
                    Some(named) => connected.into_iter().find_map(|(id, claude, handle)| {
                        (claude.as_deref() == Some(named.as_str())).then_some((id, handle))
                    }),
                };
                match handle {
                    Some((id, handle)) => {
                        let by = caller.sender("relay", None);
                        let may = match daemon.check_still_ours(&id).await {
                            Ok(()) => daemon.may_send(&id, &by.who),
                            Err(fenced) => Err(fenced),
                        };
                        match may {
                            Ok(()) => handle
                                .send_message_from(*user, Some(by))
                                .await
                                .map_err(|error| error.to_string()),
                            Err(refused) => Err(refused.to_string()),
                        }
                    }
                    None => Err(format!(
                        "no claude code with session {} is connected",
                        named.unwrap_or_default()
                    )),
                }
            }
            Ok(Message::ControlRequest(request))
                if matches!(request.request, ControlRequestPayload::Interrupt(_)) =>
            {
                current.1.interrupt().await.map_err(|error| error.to_string())
            }
            Ok(Message::Drift(drift)) => Err(format!(
                "a {} line that does not fit the protocol: {}",
                drift.field("type").unwrap_or("?"),
                drift.reason
            )),
            Ok(other) => Err(format!(
                "the relay takes user messages, interrupts and permission answers; {} is decided by Switchboard",
                other.type_name().unwrap_or("this message")
            )),
            Err(error) => Err(format!("unreadable line: {error}")),
        };
        if let Err(message) = result {
            replies.push(status(&message));
        }
    }
    (!replies.is_empty()).then(|| replies.join("\n"))
}

/// A frontend's answer to a permission request.
struct FrontendAnswer {
    request_id: String,
    answer: PermissionAnswer,
}

/// A permission answer in either form the relay protocol shows, if `line` is one:
/// `{"type":"control_response","response":{"subtype":"success","request_id":…,
/// "response":{"behavior":"allow"|"deny","updatedInput":…,"message":…}}}`, or the agents-ui
/// relay's `{"type":"control_response","request_id":…,"permission":{"allow":true}}`.
/// It is `Err` (refused, with why) when it cannot be read one way: both forms at once, or an
/// `updatedInput` that is not an object. An allow needs `"allow": true`, or `"behavior":
/// "allow"` in a `success`; anything else denies.
fn permission_answer(line: &str) -> Option<Result<FrontendAnswer, String>> {
    let value: serde_json::Value = serde_json::from_str(line).ok()?;
    if value.get("type")?.as_str()? != "control_response" {
        return None;
    }
    let text = |value: &serde_json::Value| value.as_str().map(str::to_owned);
    let (permission, response) = (value.get("permission"), value.get("response"));
    if permission.is_some() && response.is_some() {
        return Some(Err(
            "a permission answer in both forms at once (permission and response) was not taken"
                .into(),
        ));
    }
    if let Some(permission) = permission {
        let allow = permission.get("allow").and_then(serde_json::Value::as_bool) == Some(true);
        return Some(Ok(FrontendAnswer {
            request_id: text(value.get("request_id")?)?,
            answer: PermissionAnswer {
                behavior: if allow { AnswerBehavior::Allow } else { AnswerBehavior::Deny },
                message: permission.get("message").and_then(text),
                ..PermissionAnswer::default()
            },
        }));
    }
    let response = response?;
    let request_id = text(response.get("request_id")?)?;
    let decision = response.get("response");
    let updated_input = decision.and_then(|decision| decision.get("updatedInput"));
    if updated_input.is_some_and(|input| !input.is_object()) {
        return Some(Err(format!(
            "the answer to {request_id} has an updatedInput that is not an object; it was not taken"
        )));
    }
    let allow = response.get("subtype").and_then(serde_json::Value::as_str) == Some("success")
        && decision
            .and_then(|decision| decision.get("behavior"))
            .and_then(serde_json::Value::as_str)
            == Some("allow");
    Some(Ok(FrontendAnswer {
        request_id,
        answer: PermissionAnswer {
            behavior: if allow { AnswerBehavior::Allow } else { AnswerBehavior::Deny },
            updated_input: updated_input.cloned(),
            message: decision
                .and_then(|decision| decision.get("message"))
                .and_then(text)
                .or_else(|| response.get("error").and_then(text)),
            ..PermissionAnswer::default()
        },
    }))
}

/// Answers a relay session's waiting request as a person (first answer wins), whichever relay
/// CLI asked it.
async fn answer_permission(
    daemon: &Daemon,
    answer: FrontendAnswer,
    who: &str,
) -> Result<(), String> {
    let asked = daemon.relay_handles().into_iter().find_map(|(id, _, handle)| {
        let waiting = daemon
            .waiting_here(&id)
            .unwrap_or_default()
            .iter()
            .any(|pending| pending.request_id == answer.request_id);
        waiting.then_some((id, handle))
    });
    let Some((id, handle)) = asked else {
        return Err(format!("no permission request {} is waiting", answer.request_id));
    };
    daemon.check_still_ours(&id).await.map_err(|error| error.to_string())?;
    handle
        .respond_permission(&answer.request_id, answer.answer, who)
        .await
        .map_err(|error| error.to_string())
}

#[cfg(test)]
mod tests {
    use super::permission_answer;
    use switchboard_session::AnswerBehavior;

    fn behavior(line: &str) -> Result<AnswerBehavior, String> {
        permission_answer(line).expect("a permission answer").map(|answer| answer.answer.behavior)
    }

    #[test]
    fn frontend_answers_allow_only_when_they_say_so_plainly() {
        let allow = [
            r#"{"type":"control_response","request_id":"r","permission":{"allow":true}}"#,
            r#"{"type":"control_response","response":{"subtype":"success","request_id":"r","response":{"behavior":"allow"}}}"#,
        ];
        for line in allow {
            assert_eq!(behavior(line), Ok(AnswerBehavior::Allow), "{line}");
        }
        let deny = [
            r#"{"type":"control_response","request_id":"r","permission":{"allow":"yes"}}"#,
            r#"{"type":"control_response","request_id":"r","permission":{}}"#,
            r#"{"type":"control_response","response":{"subtype":"error","request_id":"r","response":{"behavior":"allow"}}}"#,
            r#"{"type":"control_response","response":{"subtype":"success","request_id":"r"}}"#,
            r#"{"type":"control_response","response":{"subtype":"success","request_id":"r","response":{"behavior":"ask"}}}"#,
        ];
        for line in deny {
            assert_eq!(behavior(line), Ok(AnswerBehavior::Deny), "{line}");
        }
        let refused = [
            r#"{"type":"control_response","request_id":"r","permission":{"allow":true},"response":{"subtype":"success","request_id":"r","response":{"behavior":"deny"}}}"#,
            r#"{"type":"control_response","response":{"subtype":"success","request_id":"r","response":{"behavior":"allow","updatedInput":"rm -rf /"}}}"#,
        ];
        for line in refused {
            assert!(behavior(line).is_err(), "{line}");
        }
        assert!(permission_answer(r#"{"type":"user"}"#).is_none());
        assert!(permission_answer("not json").is_none());
    }
}
