//! `GET /api/terminals`: the WebSocket through which `switchboard claude` registers the
//! interactive CLI it runs in a person's terminal, hands in the CLI's transcript as it grows,
//! and takes back the keys to type (a prompt sent from the browser or the API, the Esc of an
//! interrupt). The session is [`Daemon::attach_terminal`]'s; see `docs/api.md` for the frames.
//!
//! Each transcript line comes in a binary frame of its own. A prompt is typed only while the
//! session is idle and the terminal said `ready` (or a turn ended), and the next once the
//! transcript shows the CLI took it: keys typed while the CLI works, or before it is past the
//! dialogs of its start, could answer one of them. What a terminal cannot type is refused by
//! `Daemon::send_message` (the one way a person's message reaches a session from REST, gRPC
//! and this socket) before it is queued.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{Message as WsMessage, WebSocket};
use axum::extract::State;
use axum::response::Response;
use futures::{SinkExt, StreamExt};
use serde::{Deserialize, Serialize};
use switchboard_session::{SessionSnapshot, SessionState};
use switchboard_transport::terminal::Bytes;
use switchboard_transport::terminal::{Keys, KeysOut, TranscriptIn};
use tokio::sync::watch;

use crate::daemon::{Daemon, TerminalHello};
use crate::error::ApiError;
use crate::tokens::Caller;

/// How long the terminal has to say `hello` after the socket opens.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a prompt typed into the terminal may take to show in its transcript before the
/// next one is typed anyway (the CLI may have been busy with a dialog of its own), plus
/// [`PROMPT_TYPING_ALLOWANCE`] per character for the typing itself.
pub const PROMPT_START_LIMIT: Duration = Duration::from_secs(10);

/// How long the terminal may take to type one character of a prompt (it pauses after each).
pub const PROMPT_TYPING_ALLOWANCE: Duration = Duration::from_millis(10);

/// Prompts held at most while the CLI works; more are reported undelivered at once.
pub const MAX_HELD_PROMPTS: usize = 64;

/// The largest `hello` frame.
pub const MAX_HELLO_BYTES: usize = 64 * 1024;

/// What the daemon sends a terminal: `registered` once (or `error`, and the socket closes), then
/// the keys to type. `switchboard claude` reads these same types. (Its `Debug` leaves the hook
/// key out.)
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToTerminal {
    /// The session is registered.
    Registered {
        /// Its id.
        session: String,
        /// The key the CLI's hooks ask with (`POST /hooks/pre-tool-use`,
        /// `/hooks/permission-request`): for the CLI's settings only, never a command line, file
        /// or environment.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        hook_key: Option<String>,
    },
    /// Type this prompt.
    Prompt {
        /// Its text.
        text: String,
    },
    /// Press Esc (an interrupt).
    Escape,
    /// The session was stopped: the CLI goes on in its terminal, without Switchboard.
    Detached,
    /// Refused.
    Error {
        /// Why.
        error: String,
    },
}

impl std::fmt::Debug for ToTerminal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ToTerminal::Registered { session, hook_key } => f
                .debug_struct("Registered")
                .field("session", session)
                .field("hook_key", &hook_key.as_ref().map(|_| "…"))
                .finish(),
            ToTerminal::Prompt { text } => f.debug_struct("Prompt").field("text", text).finish(),
            ToTerminal::Escape => f.write_str("Escape"),
            ToTerminal::Detached => f.write_str("Detached"),
            ToTerminal::Error { error } => f.debug_struct("Error").field("error", error).finish(),
        }
    }
}

/// What the terminal sends after its `hello` (besides its transcript's lines, one binary
/// frame each).
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
enum FromTerminal {
    /// The CLI's screen is up and idle, past any dialog of its start: a prompt may be typed.
    Ready,
    /// The CLI exited.
    Exit {
        #[serde(default)]
        code: Option<i32>,
        #[serde(default)]
        signal: Option<i32>,
    },
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
enum Hello {
    Hello {
        #[serde(flatten)]
        hello: TerminalHello,
    },
}

pub(crate) async fn attach(
    State(daemon): State<Arc<Daemon>>,
    axum::Extension(caller): axum::Extension<Caller>,
    crate::extract::Upgrade(upgrade): crate::extract::Upgrade,
) -> Result<Response, ApiError> {
    // A terminal's session runs under the daemon's policy, not a token's ceiling.
    crate::faces::refuse_ceiling(
        &caller,
        "it registers no terminal (whose session is no ceiling's)",
    )?;
    Ok(upgrade
        // A transcript line is a frame of its own, at most a protocol line long.
        .max_message_size(switchboard_protocol::MAX_LINE_BYTES + 1024)
        .read_buffer_size(crate::socket::CLI_WS_READ_BUFFER_BYTES)
        .on_upgrade(move |socket| serve(daemon, caller, socket)))
}

fn frame(to: ToTerminal) -> WsMessage {
    WsMessage::Text(serde_json::to_string(&to).unwrap_or_default().into())
}

async fn refuse(mut socket: WebSocket, error: String) {
    let _ = socket.send(frame(ToTerminal::Error { error })).await;
    let _ = socket.close().await;
}

async fn serve(daemon: Arc<Daemon>, caller: Caller, mut socket: WebSocket) {
    let hello = match tokio::time::timeout(HELLO_TIMEOUT, socket.recv()).await {
        Ok(Some(Ok(WsMessage::Text(text)))) if text.len() > MAX_HELLO_BYTES => {
            return refuse(socket, format!("a hello is at most {MAX_HELLO_BYTES} bytes")).await
        }
        Ok(Some(Ok(WsMessage::Text(text)))) => match serde_json::from_str::<Hello>(&text) {
            Ok(Hello::Hello { hello }) => hello,
            Err(error) => {
                return refuse(socket, format!("the first frame must be a hello: {error}")).await
            }
        },
        Ok(_) => return,
        Err(_) => {
            let seconds = HELLO_TIMEOUT.as_secs();
            return refuse(socket, format!("no hello within {seconds} s")).await;
        }
    };
    let (record, lines, keys, snapshot, hook_key) = match daemon.attach_terminal(hello).await {
        Ok(attached) => attached,
        Err(error) => return refuse(socket, error.to_string()).await,
    };
    let registered =
        ToTerminal::Registered { session: record.id.clone(), hook_key: Some(hook_key) };
    if socket.send(frame(registered)).await.is_ok() {
        relay(socket, lines, keys, snapshot, caller).await;
    } else {
        lines.ended(None, None, "the terminal went away", Vec::new()).await;
    }
    daemon.hook_keys().ended(&record.id);
}

/// Moves transcript lines in and keys out until the CLI exits, the terminal goes away, or the
/// session is stopped (then the CLI goes on in its terminal, without Switchboard).
///
/// A prompt is typed only while the CLI is idle, and the next only once the transcript shows
/// the CLI took it (or [`PROMPT_START_LIMIT`] passed): keys typed while the CLI works could
/// land in a dialog of its own, a permission prompt whose default Enter would accept. Nor is
/// one typed before the CLI is known to be past the dialogs of its start (the terminal says
/// `ready`, or a turn has ended). Esc is pressed only while the CLI works (when idle, it would
/// clear the person's draft, and a second one open the CLI's rewind).
async fn relay(
    socket: WebSocket,
    mut lines: TranscriptIn,
    mut keys: KeysOut,
    mut snapshot: watch::Receiver<SessionSnapshot>,
    caller: Caller,
) {
    let (mut sink, mut stream) = socket.split();
    let mut held: VecDeque<(String, Bytes)> = VecDeque::new();
    // Until when the last prompt typed may take to show (the CLI taking it ends the wait).
    let mut typed_until: Option<tokio::time::Instant> = None;
    let mut ready = false;
    let (code, signal, note) = loop {
        let (idle, turns) = {
            let now = snapshot.borrow();
            (now.state == SessionState::Idle, now.turns)
        };
        ready |= turns > 0;
        if typed_until.is_some() && !idle {
            typed_until = None;
        }
        if typed_until.is_some_and(|until| tokio::time::Instant::now() >= until) {
            typed_until = None;
        }
        if ready && idle && typed_until.is_none() {
            if let Some((text, line)) = held.pop_front() {
                if sink.send(frame(ToTerminal::Prompt { text: text.clone() })).await.is_err() {
                    held.push_front((text, line));
                    break (None, None, "the terminal went away".to_owned());
                }
                let typing = PROMPT_TYPING_ALLOWANCE
                    .saturating_mul(u32::try_from(text.chars().count()).unwrap_or(u32::MAX));
                typed_until = Some(tokio::time::Instant::now() + PROMPT_START_LIMIT + typing);
            }
        }
        let recheck = typed_until;
        tokio::select! {
            incoming = stream.next() => match incoming {
                Some(Ok(WsMessage::Binary(line))) => {
                    if !lines.line(line).await {
                        return;
                    }
                }
                Some(Ok(WsMessage::Text(text))) => match serde_json::from_str::<FromTerminal>(&text) {
                    Ok(FromTerminal::Ready) => ready = true,
                    Ok(FromTerminal::Exit { code, signal }) => break (code, signal, String::new()),
                    Err(error) => {
                        let error = format!("unreadable frame: {error}");
                        let _ = sink.send(frame(ToTerminal::Error { error })).await;
                    }
                },
                Some(Ok(WsMessage::Close(_))) | None | Some(Err(_)) => {
                    break (None, None, "the terminal went away".to_owned());
                }
                Some(Ok(_)) => {}
            },
            next = keys.next_keys() => match next {
                Some(Keys::Prompt { line, .. }) if held.len() >= MAX_HELD_PROMPTS => {
                    lines.undelivered(line).await;
                }
                Some(Keys::Prompt { text, line }) => held.push_back((text, line)),
                Some(Keys::Escape) if snapshot.borrow().state == SessionState::Idle => {}
                Some(Keys::Escape) => {
                    if sink.send(frame(ToTerminal::Escape)).await.is_err() {
                        break (None, None, "the terminal went away".to_owned());
                    }
                }
                None => {
                    let _ = sink.send(frame(ToTerminal::Detached)).await;
                    let _ = sink.close().await;
                    break (None, None, "stopped: the CLI goes on in its terminal, without Switchboard".to_owned());
                }
            },
            changed = snapshot.changed() => if changed.is_err() { return },
            // Its token revoked: the socket ends, and the session says why.
            () = caller.revoked() => {
                let _ = sink.close().await;
                break (None, None, "its token was revoked".to_owned());
            }
            _ = sleep_until(recheck) => {}
        }
    };
    lines.ended(code, signal, &note, held.into_iter().map(|(_, line)| line).collect()).await;
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}
