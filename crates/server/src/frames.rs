//! The frames of the API's own WebSockets (`…/subscribe` and `/api/events`): one tagged set
//! each way, by `type`. What the daemon sends is a [`ServerFrame`] (events are spliced from
//! the stored text, not parsed again: [`event_frame`]); what a subscriber may send is a
//! [`ClientFrame`]. The relay's `/ws` and the transcript endpoints speak the agents-ui
//! protocols instead, and are not these. A `ClientFrame` is read strictly, and its permission
//! answer is [`PermissionBody`], the same body `POST …/permissions/{request_id}` takes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use switchboard_session::{AnswerBehavior, PermissionAnswer};
use switchboard_store::EventRecord;

use crate::error::{ApiError, ErrorBody};
use crate::tokens::{Caller, Scope};

/// A frame the daemon sends (other than an event: see [`event_frame`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ServerFrame {
    /// The subscriber fell behind; what it missed follows (a subscription), or it should
    /// reload (a dashboard, with how many changes it `missed`).
    Lagged {
        /// What to do.
        message: String,
        /// Dashboard changes missed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        missed: Option<u64>,
    },
    /// A client frame was acted on.
    Ack {
        /// Its `type`.
        of: String,
        /// A `permission_response`'s request.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request_id: Option<String>,
    },
    /// A client frame was refused, or the subscription failed: the API's one error shape.
    Error {
        /// `{code, message}`.
        error: ErrorBody,
    },
    /// The session's events cannot be stored now; the daemon retries (docs/api.md).
    StoreFailing {
        /// Why.
        message: String,
    },
    /// The store takes the session's events again.
    StoreRecovered {
        /// A sentence.
        message: String,
    },
    /// The daemon is shutting down; the socket closes (1001) once its sessions are stored.
    Shutdown {
        /// A sentence.
        message: String,
    },
}

impl ServerFrame {
    /// Its `type` and what it says, for a person.
    pub fn said(&self) -> (&'static str, String) {
        match self {
            ServerFrame::Lagged { message, .. } => ("lagged", message.clone()),
            ServerFrame::Ack { of, .. } => ("ack", of.clone()),
            ServerFrame::Error { error } => ("error", error.message.clone()),
            ServerFrame::StoreFailing { message } => ("store_failing", message.clone()),
            ServerFrame::StoreRecovered { message } => ("store_recovered", message.clone()),
            ServerFrame::Shutdown { message } => ("shutdown", message.clone()),
        }
    }
}

/// What a subscriber of `…/subscribe?view=true` receives: one event's view, or the daemon's
/// word about the subscription.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ViewSubscriberFrame {
    /// One event's updates.
    View(crate::view::ViewFrame),
    /// Lagged, an error, the store failing or recovered, the daemon shutting down.
    Server(ServerFrame),
}

impl From<ApiError> for ServerFrame {
    fn from(error: ApiError) -> Self {
        ServerFrame::Error { error: ErrorBody { code: error.code.into(), message: error.message } }
    }
}

impl ServerFrame {
    /// The frame as JSON text.
    pub fn text(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| "{\"type\":\"error\"}".to_owned())
    }
}

/// An event as the API shows it (`GET …/events` and subscriber frames alike):
/// `{"type":"event","seq","ts","dir","event"}`, as text. The payload is the JSON text the
/// daemon's pump wrote; it is spliced in, not parsed and written again, because this runs once
/// per event per subscriber.
pub fn event_frame(record: &EventRecord) -> String {
    let dir = serde_json::to_string(&record.dir).unwrap_or_else(|_| "\"\"".to_owned());
    format!(
        "{{\"type\":\"event\",\"seq\":{},\"ts\":{},\"dir\":{dir},\"event\":{}}}",
        record.seq, record.ts_ms, record.payload
    )
}

/// A frame a subscriber sends on `…/subscribe`.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ClientFrame {
    /// A message for the session (`content`: a string or content blocks).
    UserMessage(UserMessageFrame),
    /// An answer to a permission request: the body of `POST …/permissions/{request_id}` plus
    /// `request_id`.
    PermissionResponse(PermissionBody),
    /// Stop the current turn.
    Interrupt(InterruptFrame),
}

/// The fields of a `user_message` frame.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserMessageFrame {
    /// A string, or content blocks.
    pub content: Value,
    /// While a turn runs: `now` (steer it), `next`, `later`.
    #[serde(default)]
    pub priority: Option<switchboard_protocol::MessagePriority>,
}

/// An `interrupt` frame: `cancel_queued` also drops the prompts queued behind the turn.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InterruptFrame {
    /// Also drop every prompt still queued behind the turn.
    #[serde(default)]
    pub cancel_queued: bool,
}

impl ClientFrame {
    /// Reads one frame; the error names the problem.
    pub fn parse(text: &str) -> Result<ClientFrame, ApiError> {
        serde_json::from_str(text).map_err(|error| {
            ApiError::invalid(format!(
                "unreadable frame ({error}); send user_message, permission_response or interrupt"
            ))
        })
    }

    /// The scope it needs: an answer `approve` (one that changes the input or ends the turn,
    /// `operate`), the others `operate`.
    pub fn scope(&self) -> Scope {
        match self {
            ClientFrame::PermissionResponse(body) => body.scope(),
            ClientFrame::UserMessage(_) | ClientFrame::Interrupt(_) => Scope::Operate,
        }
    }

    /// Its `type`.
    pub fn kind(&self) -> &'static str {
        match self {
            ClientFrame::UserMessage(_) => "user_message",
            ClientFrame::PermissionResponse(_) => "permission_response",
            ClientFrame::Interrupt(_) => "interrupt",
        }
    }
}

/// `{behavior, updated_input?, message?, remember?, answers?, interrupt?, by?}`, and in a
/// `permission_response` frame `request_id` (in `POST …/permissions/{request_id}` the path
/// names it; a body that names another is refused).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PermissionBody {
    /// The request answered (a frame's; the path names it in a `POST`).
    #[serde(default)]
    pub(crate) request_id: Option<String>,
    /// Allow or deny.
    behavior: AnswerBehavior,
    #[serde(default)]
    /// Run this input instead.
    updated_input: Option<Value>,
    #[serde(default)]
    /// What the model is told on deny.
    message: Option<String>,
    #[serde(default)]
    /// Allow again without asking, for the rest of the session.
    remember: bool,
    #[serde(default)]
    /// AskUserQuestion: question text → chosen label.
    answers: Option<BTreeMap<String, String>>,
    #[serde(default)]
    /// Deny and end the turn.
    interrupt: bool,
    /// Who answers (recorded with the decision, before the token's name).
    #[serde(default)]
    by: Option<String>,
}

impl PermissionBody {
    /// The scope an answer needs: `approve`, or `operate` for one that runs another input
    /// than the model's or ends the turn (steering, not answering).
    pub fn scope(&self) -> Scope {
        if self.updated_input.is_some() || self.interrupt {
            Scope::Operate
        } else {
            Scope::Approve
        }
    }

    /// The answer and who gave it: the caller's token and `channel`, after the name the body
    /// gives in `by`, if any ([`Caller::who`]).
    /// A `by` that is not a name is refused ([`crate::text::answerer`]).
    pub(crate) fn into_answer(
        self,
        caller: &Caller,
        channel: &str,
    ) -> Result<(PermissionAnswer, String), ApiError> {
        let by = crate::text::answerer(self.by).map_err(ApiError::invalid)?;
        let who = caller.who(channel, by);
        Ok((
            PermissionAnswer {
                behavior: self.behavior,
                updated_input: self.updated_input,
                message: self.message,
                remember: self.remember,
                updated_permissions: None,
                answers: self.answers,
                interrupt: self.interrupt,
            },
            who,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_frames_are_read_strictly() {
        assert!(matches!(
            ClientFrame::parse(r#"{"type":"user_message","content":"hi"}"#),
            Ok(ClientFrame::UserMessage(_))
        ));
        assert!(matches!(
            ClientFrame::parse(r#"{"type":"interrupt"}"#),
            Ok(ClientFrame::Interrupt(_))
        ));
        let answer = ClientFrame::parse(
            r#"{"type":"permission_response","request_id":"r1","behavior":"allow"}"#,
        );
        assert!(matches!(answer, Ok(ClientFrame::PermissionResponse(_))), "{answer:?}");
        for bad in [
            r#"{"type":"user_message"}"#,
            r#"{"type":"user_message","content":"x","colour":"red"}"#,
            r#"{"type":"interrupt","now":true}"#,
            r#"{"type":"launch"}"#,
            r#"{"content":"no type"}"#,
            "not json",
        ] {
            let error = ClientFrame::parse(bad).unwrap_err();
            assert!(error.message.contains("unreadable frame"), "{bad}: {}", error.message);
        }
    }

    #[test]
    fn server_frames_are_tagged() {
        let text = ServerFrame::Ack { of: "interrupt".into(), request_id: None }.text();
        assert_eq!(text, r#"{"type":"ack","of":"interrupt"}"#);
        let text = ServerFrame::from(ApiError::invalid("no")).text();
        assert_eq!(text, r#"{"type":"error","error":{"code":"invalid_request","message":"no"}}"#);
        let record = EventRecord {
            session_id: "s".into(),
            seq: 7,
            ts_ms: 1,
            dir: "switchboard".into(),
            kind: "stderr".into(),
            payload: r#"{"event":"stderr","text":"x"}"#.into(),
        };
        let event: Value = serde_json::from_str(&event_frame(&record)).unwrap();
        assert_eq!(event["type"], "event");
        assert_eq!(event["seq"], 7);
        assert_eq!(event["event"]["text"], "x");
    }
}
