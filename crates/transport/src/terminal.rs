//! An interactive CLI in a person's own terminal (`switchboard claude`). It speaks no protocol
//! and Switchboard holds no pipe to it: what it says comes from its transcript (read where it
//! runs, and handed in here line by line), and what the session writes goes back as keys, a
//! prompt typed one character at a time and an interrupt as the Esc key.
//!
//! The session's own lines pass through unchanged (the session records them as written); this
//! module reads them only to turn each into [`Keys`]. A prompt that cannot be typed (an image,
//! a control character that the terminal would take as a key) is reported undelivered.
//!
//! [`attached`] gives the session a [`CliLink`] and the terminal two halves: [`TranscriptIn`]
//! (the CLI's transcript lines, decoded as any line, and its exit) and [`KeysOut`] (each line
//! the session writes, read once by [`keys_of`]: a prompt to type, or Esc for an interrupt).
//! Closing the session's input ends `KeysOut`: the terminal is told it is detached, and the
//! CLI goes on.
//!
//! A tool call the CLI's hooks hand to the daemon (`PreToolUse`, and `PermissionRequest` for a
//! dialog it shows) comes in through a [`HookGate`]: put to the session as the CLI's own control
//! request (a `hook_callback`, or a `can_use_tool` when a person must answer a held call), so
//! that the session's policy, its people and its log treat it as any other; the session's
//! answer, which [`KeysOut`] reads instead of typing it, goes back to the hook.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

pub use bytes::Bytes;
use switchboard_protocol::codec::Received;
use switchboard_protocol::content::ContentBlock;
use switchboard_protocol::control::{ControlCancelRequest, ControlRequest, ControlResponse};
use switchboard_protocol::{ControlRequestPayload, Message, TextOr, UserMessage};
use tokio::sync::{mpsc, oneshot, watch};

use crate::stdio::{self, CliLink, CliProcess, ExitInfo, TransportEvent, WriterCommand};

/// What to type into the terminal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Keys {
    /// A prompt: its characters one at a time (a newline in it as Ctrl-J, which the CLI takes
    /// as a new line of the prompt), then Enter.
    Prompt {
        /// The text.
        text: String,
        /// The session's line it came from (reported undelivered if it is never typed).
        line: Bytes,
    },
    /// The Esc key: the CLI interrupts its turn.
    Escape,
}

/// The longest prompt typed into a terminal, in characters (each takes a moment to type).
pub const MAX_TYPED_CHARS: usize = 16 * 1024;

/// Whether `text` can be typed into the CLI's prompt as it is, as a prompt and nothing else:
/// not empty; not beginning with `/`, `!` or `#`, which the CLI takes as a slash command, a
/// shell command it runs without asking, or a note to its memory; at most
/// [`MAX_TYPED_CHARS`]; and no control character other than a newline (a carriage return, a
/// tab, an escape would each be a key of its own).
pub fn typable(text: &str) -> Result<(), String> {
    if text.trim().is_empty() {
        return Err("the message is empty".to_owned());
    }
    // (The CLI looks past leading blanks.)
    if let Some(first) = text.trim_start().chars().next().filter(|c| matches!(c, '/' | '!' | '#')) {
        return Err(format!(
            "a message for an interactive session is typed into its terminal, where a first {first:?} makes it a command, not a prompt: type commands in the terminal"
        ));
    }
    let length = text.chars().count();
    if length > MAX_TYPED_CHARS {
        return Err(format!(
            "a message for an interactive session is typed one character at a time, and this one has {length} characters (at most {MAX_TYPED_CHARS}): put the text in a file and name it"
        ));
    }
    match text.chars().find(|c| c.is_control() && *c != '\n') {
        Some(c) => Err(format!(
            "a message for an interactive session is typed into its terminal, and U+{:04X} would be a key there, not text: remove it",
            u32::from(c)
        )),
        None => Ok(()),
    }
}

/// The text a prompt is typed as, or why it cannot be typed into a terminal.
pub fn prompt_text(user: &UserMessage) -> Result<String, String> {
    let text = match &user.message.content {
        TextOr::Text(text) => text.clone(),
        TextOr::Items(blocks) => {
            let mut texts = Vec::new();
            for block in blocks {
                match block {
                    ContentBlock::Text(text) => texts.push(text.text.as_str()),
                    _ => return Err("only text can be typed into a terminal".to_owned()),
                }
            }
            texts.join("\n\n")
        }
    };
    let text = text.replace("\r\n", "\n");
    typable(&text)?;
    Ok(text)
}

/// The keys a line the session wrote stands for: `Ok(None)` for a line a terminal has no key
/// for (nothing to do), `Err` for a prompt that cannot be typed.
pub fn keys_of(line: Bytes) -> Result<Option<Keys>, String> {
    let message = Message::decode(&line).map_err(|error| error.to_string())?;
    keys_for(message, line)
}

/// [`keys_of`] for a line read already.
fn keys_for(message: Message, line: Bytes) -> Result<Option<Keys>, String> {
    match message {
        Message::User(user) => Ok(Some(Keys::Prompt { text: prompt_text(&user)?, line })),
        Message::ControlRequest(request)
            if matches!(request.request, ControlRequestPayload::Interrupt(_)) =>
        {
            Ok(Some(Keys::Escape))
        }
        _ => Ok(None),
    }
}

/// The terminal's end of a session: the transcript's lines in, and the CLI's exit.
#[derive(Debug)]
pub struct TranscriptIn {
    events: mpsc::Sender<TransportEvent>,
    exited: watch::Sender<bool>,
    lines: u64,
}

/// The terminal's end of a session: the keys to type. Dropped (the terminal is gone, or the
/// session), it ends every hook's wait: no answer will come through it.
#[derive(Debug)]
pub struct KeysOut {
    events: mpsc::Sender<TransportEvent>,
    writer: mpsc::Receiver<WriterCommand>,
    hooks: HookGate,
}

impl Drop for KeysOut {
    fn drop(&mut self) {
        self.hooks.close();
    }
}

/// The most tool calls a terminal's hooks may have waiting at once (a CLI asks one at a time,
/// subagents a few more).
pub const MAX_WAITING_HOOKS: usize = 32;

/// What a terminal's CLI asks through its hooks, put to the session as the CLI's own control
/// requests; each answer goes back to the hook that waits for it.
#[derive(Debug, Clone)]
pub struct HookGate {
    events: mpsc::Sender<TransportEvent>,
    waiting: Arc<Mutex<HashMap<String, oneshot::Sender<Box<ControlResponse>>>>>,
}

impl HookGate {
    /// Puts `request` to the session as the CLI's control request named `request_id` (unique:
    /// the caller's). The session's answer comes on the returned receiver, which is dropped
    /// unanswered when the session ends first. Refused, with the reason, when
    /// [`MAX_WAITING_HOOKS`] already wait or the session is gone.
    pub async fn ask(
        &self,
        request_id: &str,
        request: impl Into<ControlRequestPayload>,
    ) -> Result<oneshot::Receiver<Box<ControlResponse>>, String> {
        let (answer, answered) = oneshot::channel();
        {
            let mut waiting = self.waiting.lock();
            waiting.retain(|_, waiter| !waiter.is_closed());
            if waiting.len() >= MAX_WAITING_HOOKS {
                return Err(format!("{MAX_WAITING_HOOKS} tool calls already wait for an answer"));
            }
            waiting.insert(request_id.to_owned(), answer);
        }
        let line = Message::from(ControlRequest::new(request_id, request)).encode();
        let received = Received::decode(line.as_bytes()).map_err(|error| error.to_string())?;
        if self.events.send(TransportEvent::Line(Box::new(received))).await.is_err() {
            self.forget(request_id);
            return Err("the session has ended".to_owned());
        }
        Ok(answered)
    }

    /// Forgets the call `request_id`: a late answer is dropped.
    fn forget(&self, request_id: &str) {
        self.waiting.lock().remove(request_id);
    }

    /// Withdraws the call `request_id` (its hook went away unanswered): the session is told, as
    /// the CLI tells it of a request it gave up on, and stops waiting for a person.
    pub fn withdraw(&self, request_id: &str) {
        self.forget(request_id);
        let line = Message::from(ControlCancelRequest {
            request_id: request_id.to_owned(),
            ..Default::default()
        })
        .encode();
        let Ok(received) = Received::decode(line.as_bytes()) else { return };
        let event = TransportEvent::Line(Box::new(received));
        // From a drop: at once where the queue has room, else on a task of its own.
        if let Err(mpsc::error::TrySendError::Full(event)) = self.events.try_send(event) {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                let events = self.events.clone();
                runtime.spawn(async move {
                    let _ = events.send(event).await;
                });
            }
        }
    }

    /// The session is over for this terminal: every hook still waiting gets no answer (its
    /// receiver ends), and none is asked again.
    pub fn close(&self) {
        self.waiting.lock().clear();
    }

    /// Hands `response`, when it answers a request a hook waits for, to that hook; gives it
    /// back otherwise.
    fn answer(&self, response: Box<ControlResponse>) -> Option<Box<ControlResponse>> {
        let Some(request_id) = response.request_id() else { return Some(response) };
        let waiter = self.waiting.lock().remove(request_id);
        match waiter {
            Some(waiter) => {
                let _ = waiter.send(response);
                None
            }
            None => Some(response),
        }
    }
}

/// A session's link to a CLI in a terminal, the two halves its terminal uses, and the gate its
/// hooks ask through.
pub fn attached() -> (CliLink, TranscriptIn, KeysOut, HookGate) {
    let (events_tx, events) = mpsc::channel(stdio::EVENT_QUEUE);
    let (writer_tx, writer_rx) = mpsc::channel(stdio::WRITE_QUEUE);
    let (exited_tx, exited) = watch::channel(false);
    let lines = TranscriptIn { events: events_tx.clone(), exited: exited_tx, lines: 0 };
    let hooks = HookGate { events: events_tx.clone(), waiting: Arc::default() };
    let keys = KeysOut { events: events_tx, writer: writer_rx, hooks: hooks.clone() };
    let events = crate::events::Events::new(events);
    let link = CliLink { events, process: CliProcess::new(None, writer_tx, exited, None) };
    (link, lines, keys, hooks)
}

impl TranscriptIn {
    /// One line of the CLI's transcript (its text copied once, into the line's event); false
    /// once the session is gone.
    pub async fn line(&mut self, line: Bytes) -> bool {
        self.lines += 1;
        let position = switchboard_protocol::codec::Position { line: self.lines, offset: 0 };
        // The error's preview reads only the line's head.
        let preview = switchboard_protocol::codec::preview(&line);
        let event = match Received::decode(&line) {
            Ok(received) => TransportEvent::Line(Box::new(received)),
            Err(error) => TransportEvent::BadLine(Box::new(switchboard_protocol::LineError {
                position,
                preview,
                kind: switchboard_protocol::codec::LineErrorKind::Malformed(error.to_string()),
                control_request: None,
            })),
        };
        self.events.send(event).await.is_ok()
    }

    /// One of the session's lines that will never be typed.
    pub async fn undelivered(&self, line: Bytes) {
        let _ = self.events.send(TransportEvent::Undelivered(Box::new(line))).await;
    }

    /// The CLI ended (`code`/`signal` as its terminal saw them; both `None` when the terminal
    /// went away without saying). `untyped`: the session's lines it never got.
    pub async fn ended(
        self,
        code: Option<i32>,
        signal: Option<i32>,
        note: &str,
        untyped: Vec<Bytes>,
    ) {
        for line in untyped {
            let _ = self.events.send(TransportEvent::Undelivered(Box::new(line))).await;
        }
        let exit =
            ExitInfo { code, signal, stderr_tail: note.to_owned(), wrote_output: self.lines > 0 };
        let _ = self.events.send(TransportEvent::Exited(Box::new(exit))).await;
        let _ = self.exited.send(true);
    }
}

impl KeysOut {
    /// The next keys to type, in the order the session wrote them. A line that cannot be
    /// typed is reported undelivered and skipped. `None` once the session closed its input
    /// (it was stopped: the CLI goes on in its terminal without Switchboard). Cancel-safe:
    /// nothing taken is lost when the future is dropped between lines.
    pub async fn next_keys(&mut self) -> Option<Keys> {
        loop {
            let Some(WriterCommand::Line(command)) = self.writer.recv().await else {
                self.hooks.close();
                return None;
            };
            let (line, done) = *command;
            let _ = done.send(Ok(()));
            let keys = match Message::decode(&line) {
                Ok(Message::ControlResponse(response)) => match self.hooks.answer(response) {
                    None => continue,
                    Some(response) => keys_for(Message::ControlResponse(response), line.clone()),
                },
                Ok(message) => keys_for(message, line.clone()),
                Err(error) => Err(error.to_string()),
            };
            match keys {
                Ok(Some(keys)) => return Some(keys),
                Ok(None) => {}
                Err(reason) => {
                    tracing::warn!(%reason, "a line for a terminal session cannot be typed");
                    // On a task of its own: this future may be dropped at any await.
                    let events = self.events.clone();
                    tokio::spawn(async move {
                        let _ = events.send(TransportEvent::Undelivered(Box::new(line))).await;
                    });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompts_become_typed_text_and_an_interrupt_the_esc_key() {
        let prompt = br#"{"type":"user","message":{"role":"user","content":"two\r\nlines"},"parent_tool_use_id":null,"session_id":"","uuid":"u"}"#;
        assert!(
            matches!(keys_of(Bytes::from_static(prompt)), Ok(Some(Keys::Prompt { text, .. })) if text == "two\nlines")
        );
        let interrupt =
            br#"{"type":"control_request","request_id":"sb-1","request":{"subtype":"interrupt"}}"#;
        assert_eq!(keys_of(Bytes::from_static(interrupt)), Ok(Some(Keys::Escape)));
        let image = br#"{"type":"user","message":{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA=="}}]},"parent_tool_use_id":null}"#;
        assert!(keys_of(Bytes::from_static(image)).is_err());
        let keep_alive = br#"{"type":"keep_alive"}"#;
        assert_eq!(keys_of(Bytes::from_static(keep_alive)), Ok(None));
    }

    /// A hook's request reaches the session as the CLI's own line; the session's answer goes
    /// to the hook and is never typed; an answer no hook waits for is no keys either.
    #[tokio::test]
    async fn a_hooks_request_reaches_the_session_and_its_answer_the_hook_not_the_keys() {
        use switchboard_protocol::control::InterruptRequest;
        let (mut link, _lines, mut keys, gate) = attached();
        let answered = gate.ask("hook-1", InterruptRequest::default()).await.unwrap();
        let Some(TransportEvent::Line(received)) = link.events.recv().await else {
            panic!("the session sees the request")
        };
        assert!(
            matches!(&received.message, Message::ControlRequest(request) if request.request_id == "hook-1")
        );
        let stray = ControlResponse::success("hook-2", &serde_json::json!({}));
        let answer = ControlResponse::success("hook-1", &serde_json::json!({"ok": true}));
        let interrupt =
            br#"{"type":"control_request","request_id":"sb-1","request":{"subtype":"interrupt"}}"#;
        let lines = [
            Bytes::from(Message::from(stray).encode()),
            Bytes::from(Message::from(answer).encode()),
            Bytes::from_static(interrupt),
        ];
        // Each write waits until the terminal's end has taken it.
        let process = link.process;
        let writes = tokio::spawn(async move {
            for line in lines {
                process.send(line).await.unwrap();
            }
        });
        assert_eq!(keys.next_keys().await, Some(Keys::Escape), "the answers were not typed");
        writes.await.unwrap();
        let response = answered.await.unwrap();
        assert_eq!(response.request_id(), Some("hook-1"));

        // Withdrawn: the session hears the CLI gave up on it.
        let _withdrawn = gate.ask("hook-3", InterruptRequest::default()).await.unwrap();
        link.events.recv().await.unwrap();
        gate.withdraw("hook-3");
        let Some(TransportEvent::Line(received)) = link.events.recv().await else {
            panic!("the session hears of the withdrawal")
        };
        assert!(
            matches!(&received.message, Message::ControlCancelRequest(cancel) if cancel.request_id == "hook-3")
        );

        // The terminal's end gone: a hook still waiting hears so at once.
        let waiting = gate.ask("hook-4", InterruptRequest::default()).await.unwrap();
        drop(keys);
        assert!(waiting.await.is_err(), "no answer will come");
    }

    #[test]
    fn control_characters_are_refused_by_name() {
        assert!(typable("fix the build\nthen test").is_ok());
        let error = typable("stop\u{1b}[A").unwrap_err();
        assert!(error.contains("U+001B"), "{error}");
        assert!(typable("tab\there").unwrap_err().contains("U+0009"));
        assert!(typable("  \n").is_err());
        for command in ["/clear", "!rm -rf .", "# remember this", "  /clear"] {
            assert!(typable(command).unwrap_err().contains("command"), "{command}");
        }
        assert!(typable("fix /tmp/x, then run !important # later").is_ok());
        assert!(typable(&"x".repeat(MAX_TYPED_CHARS + 1)).unwrap_err().contains("file"));
    }
}
