//! `GET /api/terminals`: the WebSocket through which `switchboard claude` registers the
//! interactive CLI it runs in a person's terminal, hands in the CLI's transcript as it grows,
//! and takes back the keys to type (a prompt sent from the browser or the API, the Esc of an
//! interrupt). The session is [`Daemon::attach_terminal`]'s; see `docs/api.md` for the frames.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{Message as WsMessage, WebSocket};
use axum::extract::State;
use axum::response::Response;
use futures::{SinkExt, StreamExt};
use serde::Deserialize;
use serde_json::json;
use switchboard_transport::terminal::{Keys, KeysOut, TranscriptIn};

use crate::daemon::{Daemon, TerminalHello};
use crate::error::ApiError;

/// How long the terminal has to say `hello` after the socket opens.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// The most transcript lines one `lines` frame may carry.
pub const MAX_LINES_PER_FRAME: usize = 1024;

/// What the terminal sends after its `hello`.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
enum FromTerminal {
    /// Transcript lines, in order, each without its newline.
    Lines { lines: Vec<String> },
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
    crate::extract::Upgrade(upgrade): crate::extract::Upgrade,
) -> Result<Response, ApiError> {
    Ok(upgrade
        .max_message_size(crate::socket::MAX_WS_MESSAGE_BYTES)
        .read_buffer_size(crate::socket::CLI_WS_READ_BUFFER_BYTES)
        .on_upgrade(move |socket| serve(daemon, socket)))
}

fn frame(value: serde_json::Value) -> WsMessage {
    WsMessage::Text(value.to_string().into())
}

async fn refuse(mut socket: WebSocket, error: String) {
    let _ = socket.send(frame(json!({"type": "error", "error": error}))).await;
    let _ = socket.close().await;
}

async fn serve(daemon: Arc<Daemon>, mut socket: WebSocket) {
    let hello = match tokio::time::timeout(HELLO_TIMEOUT, socket.recv()).await {
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
    let (record, lines, keys) = match daemon.attach_terminal(hello).await {
        Ok(attached) => attached,
        Err(error) => return refuse(socket, error.to_string()).await,
    };
    let registered = json!({"type": "registered", "session": record.id});
    if socket.send(frame(registered)).await.is_err() {
        lines.ended(None, None, "the terminal went away").await;
        return;
    }
    relay(socket, lines, keys).await;
}

/// Moves transcript lines in and keys out until the CLI exits, the terminal goes away, or the
/// session is stopped (then the CLI goes on in its terminal, without Switchboard).
async fn relay(socket: WebSocket, mut lines: TranscriptIn, mut keys: KeysOut) {
    let (mut sink, mut stream) = socket.split();
    let (code, signal, note) = loop {
        tokio::select! {
            incoming = stream.next() => {
                let text = match incoming {
                    Some(Ok(WsMessage::Text(text))) => text,
                    Some(Ok(WsMessage::Close(_))) | None | Some(Err(_)) => {
                        break (None, None, "the terminal went away".to_owned());
                    }
                    Some(Ok(_)) => continue,
                };
                match serde_json::from_str::<FromTerminal>(&text) {
                    Ok(FromTerminal::Lines { lines: batch }) if batch.len() <= MAX_LINES_PER_FRAME => {
                        for line in batch {
                            if !lines.line(line.into_bytes()).await {
                                return;
                            }
                        }
                    }
                    Ok(FromTerminal::Lines { lines: batch }) => {
                        let error = format!("a frame carries at most {MAX_LINES_PER_FRAME} lines, not {}", batch.len());
                        let _ = sink.send(frame(json!({"type": "error", "error": error}))).await;
                    }
                    Ok(FromTerminal::Exit { code, signal }) => break (code, signal, String::new()),
                    Err(error) => {
                        let error = format!("unreadable frame: {error}");
                        let _ = sink.send(frame(json!({"type": "error", "error": error}))).await;
                    }
                }
            }
            next = keys.next_keys() => {
                let out = match next {
                    Some(Keys::Prompt(text)) => json!({"type": "prompt", "text": text}),
                    Some(Keys::Escape) => json!({"type": "escape"}),
                    None => {
                        let _ = sink.send(frame(json!({"type": "detached"}))).await;
                        let _ = sink.close().await;
                        break (None, None, "stopped: the CLI goes on in its terminal, without Switchboard".to_owned());
                    }
                };
                if sink.send(frame(out)).await.is_err() {
                    break (None, None, "the terminal went away".to_owned());
                }
            }
        }
    };
    lines.ended(code, signal, &note).await;
}
