//! The top-level messages of the stream-json protocol, one per NDJSON line, in both directions.

use indexmap::IndexMap;
use serde_json::{Map, Number, Value};

use crate::content::{AssistantBody, ContentBlock, ModelUsage, Usage, UserBody};
use crate::control::{ControlCancelRequest, ControlRequest, ControlResponse};
use crate::stream::StreamEvent;
use crate::system::SystemMessage;
use crate::wire::{wire_enum, wire_from, wire_struct, Extra, TextOr};

wire_enum! {
    /// One line of the protocol, chosen by `type`.
    ///
    /// Decode with [`Message::decode`] (or [`crate::Received::decode`] to keep the exact bytes);
    /// write with [`Message::encode`]. A `type` this crate does not know decodes to
    /// `Message::Unknown` with every field kept.
    pub enum Message by "type" {
        /// CLI → host: `system/*` (init per turn, status, api_retry, task_*, ...).
        System(SystemMessage) = "system",
        /// CLI → host: one content block of the model's answer.
        Assistant(AssistantMessage) = "assistant",
        /// Both ways: a prompt (host → CLI), a tool result or a replayed prompt (CLI → host).
        User(UserMessage) = "user",
        /// CLI → host: a raw Anthropic stream event (`--include-partial-messages`).
        StreamEvent(StreamEventMessage) = "stream_event",
        /// CLI → host: the end of a turn.
        Result(ResultMessage) = "result",
        /// CLI → host: a long tool is still running.
        ToolProgress(ToolProgressMessage) = "tool_progress",
        /// CLI → host: a summary of tool calls.
        ToolUseSummary(ToolUseSummaryMessage) = "tool_use_summary",
        /// CLI → host: login progress.
        AuthStatus(AuthStatusMessage) = "auth_status",
        /// Both ways: keeps a connection alive; ignored by the CLI.
        KeepAlive(KeepAliveMessage) = "keep_alive",
        /// CLI → host (streamlined mode): text.
        StreamlinedText(StreamlinedTextMessage) = "streamlined_text",
        /// CLI → host (streamlined mode): a tool summary.
        StreamlinedToolUseSummary(StreamlinedToolUseSummaryMessage) = "streamlined_tool_use_summary",
        /// CLI → host (2.1.330): a user message's lifecycle (`queued`, `started`, `completed`).
        CommandLifecycle(CommandLifecycleMessage) = "command_lifecycle",
        /// Both ways: a control request.
        ControlRequest(ControlRequest) = "control_request",
        /// Both ways: the answer to a control request.
        ControlResponse(ControlResponse) = "control_response",
        /// CLI → host: the CLI withdraws one of its requests.
        ControlCancelRequest(ControlCancelRequest) = "control_cancel_request",
        /// Host → CLI: set environment variables for tools (2.1.37 applies them; 2.1.330
        /// accepts but Bash did not see them).
        UpdateEnvironmentVariables(UpdateEnvironmentVariablesMessage) = "update_environment_variables",
    }
}

wire_struct! {
    /// `{"type":"assistant","message":{...},"parent_tool_use_id":...,"session_id":...}`
    pub struct AssistantMessage tags { "type" = "assistant" } {
        /// The Anthropic message (one content block per line).
        req message: AssistantBody = "message",
        /// The Task/Agent tool call this belongs to, for a subagent's messages.
        nul parent_tool_use_id: String = "parent_tool_use_id",
        /// The CLI's session.
        opt session_id: String = "session_id",
        /// This line's id.
        opt uuid: String = "uuid",
        /// On API-error messages: `rate_limit`, `server_error`, `unknown`, ...
        opt error: String = "error",
    }
}

wire_struct! {
    /// `{"type":"user","message":{"role":"user","content":...},...}`
    pub struct UserMessage tags { "type" = "user" } {
        /// The Anthropic message.
        req message: UserBody = "message",
        /// The Task/Agent tool call this belongs to (CLI → host); `null` for a prompt.
        nul parent_tool_use_id: String = "parent_tool_use_id",
        /// The session; the CLI ignores what the host sends (`""` is conventional).
        opt session_id: String = "session_id",
        /// An id the CLI uses to de-duplicate prompts (a repeated uuid is not run again).
        opt uuid: String = "uuid",
        /// Marks a message the CLI echoes (`--replay-user-messages`, `set_model`).
        opt is_replay: bool = "isReplay",
        /// Marks a message the CLI made itself.
        opt is_synthetic: bool = "isSynthetic",
        /// The structured output of the tool whose result this carries (a string on errors).
        opt tool_use_result: Value = "tool_use_result",
    }
}

impl UserMessage {
    /// A prompt to send to the CLI.
    pub fn prompt(text: impl Into<String>) -> Self {
        Self::with_content(TextOr::Text(text.into()))
    }

    /// A prompt made of content blocks (text, images).
    pub fn blocks(blocks: Vec<ContentBlock>) -> Self {
        Self::with_content(TextOr::Items(blocks))
    }

    fn with_content(content: TextOr<ContentBlock>) -> Self {
        UserMessage {
            message: UserBody { role: "user".to_owned(), content, extra: Extra::new() },
            parent_tool_use_id: None,
            session_id: Some(String::new()),
            ..UserMessage::default()
        }
    }

    /// Sets the uuid the CLI de-duplicates by.
    pub fn with_uuid(mut self, uuid: impl Into<String>) -> Self {
        self.uuid = Some(uuid.into());
        self
    }

    /// The tool results this message carries.
    pub fn tool_results(&self) -> impl Iterator<Item = &crate::content::ToolResultBlock> {
        let blocks: &[ContentBlock] = match &self.message.content {
            TextOr::Items(blocks) => blocks,
            TextOr::Text(_) => &[],
        };
        blocks.iter().filter_map(|block| match block {
            ContentBlock::ToolResult(result) => Some(result),
            _ => None,
        })
    }
}

wire_struct! {
    /// `{"type":"stream_event","event":{...},...}`
    pub struct StreamEventMessage tags { "type" = "stream_event" } {
        /// The Anthropic SSE event.
        req event: StreamEvent = "event",
        /// The Task/Agent tool call this belongs to.
        nul parent_tool_use_id: String = "parent_tool_use_id",
        /// The CLI's session.
        opt session_id: String = "session_id",
        /// This line's id.
        opt uuid: String = "uuid",
    }
}

wire_struct! {
    /// `{"type":"result","subtype":...,"is_error":...,...}`: a turn ended.
    ///
    /// API failures arrive as `subtype:"success"` with `is_error:true`; interrupts as
    /// `error_during_execution` (with `is_error` false on 2.1.37, true on 2.1.330). Cost and
    /// usage totals are per process, not per turn.
    pub struct ResultMessage tags { "type" = "result" } {
        /// `success`, `error_during_execution`, `error_max_turns`, `error_max_budget_usd`,
        /// `error_max_structured_output_retries`.
        req subtype: String = "subtype",
        /// Whether the turn failed.
        req is_error: bool = "is_error",
        /// Wall time of the turn.
        opt duration_ms: u64 = "duration_ms",
        /// Time spent in API calls (cumulative).
        opt duration_api_ms: u64 = "duration_api_ms",
        /// API round trips.
        opt num_turns: u64 = "num_turns",
        /// The final text (absent on error subtypes).
        opt result: String = "result",
        /// Why the last message stopped (`null` for normal turns on 2.1.37).
        opt stop_reason: Option<String> = "stop_reason",
        /// The CLI's session.
        opt session_id: String = "session_id",
        /// Cost so far in US dollars (integer `0` or a float, kept as sent).
        opt total_cost_usd: Number = "total_cost_usd",
        /// Token totals.
        opt usage: Usage = "usage",
        /// Per-model totals, in the order the CLI wrote them.
        opt model_usage: IndexMap<String, ModelUsage> = "modelUsage",
        /// Tool calls denied during the turn.
        opt permission_denials: Vec<PermissionDenial> = "permission_denials",
        /// Error texts, on error subtypes.
        opt errors: Vec<String> = "errors",
        /// Structured output (with a JSON schema).
        opt structured_output: Value = "structured_output",
        /// 2.1.330: `completed`, `aborted_streaming`, `aborted_tools`, `api_error`.
        opt terminal_reason: String = "terminal_reason",
        /// 2.1.330: the HTTP status of the API failure.
        opt api_error_status: Option<u64> = "api_error_status",
        /// This line's id.
        opt uuid: String = "uuid",
    }
}

impl ResultMessage {
    /// `total_cost_usd` as a float.
    pub fn cost_usd(&self) -> Option<f64> {
        self.total_cost_usd.as_ref().and_then(Number::as_f64)
    }
}

wire_struct! {
    /// One entry of `result.permission_denials`.
    pub struct PermissionDenial {
        /// The tool.
        req tool_name: String = "tool_name",
        /// The call.
        req tool_use_id: String = "tool_use_id",
        /// Its input.
        opt tool_input: Value = "tool_input",
    }
}

wire_struct! {
    /// `tool_progress`
    pub struct ToolProgressMessage tags { "type" = "tool_progress" } {
        /// The call.
        req tool_use_id: String = "tool_use_id",
        /// The tool.
        req tool_name: String = "tool_name",
        /// The Task/Agent tool call this belongs to.
        nul parent_tool_use_id: String = "parent_tool_use_id",
        /// Seconds since it started.
        opt elapsed_time_seconds: Number = "elapsed_time_seconds",
        /// The CLI's session.
        opt session_id: String = "session_id",
        /// This line's id.
        opt uuid: String = "uuid",
    }
}

wire_struct! {
    /// `tool_use_summary`
    pub struct ToolUseSummaryMessage tags { "type" = "tool_use_summary" } {
        /// The summary.
        req summary: String = "summary",
        /// The calls summarised.
        opt preceding_tool_use_ids: Vec<String> = "preceding_tool_use_ids",
        /// The CLI's session.
        opt session_id: String = "session_id",
        /// This line's id.
        opt uuid: String = "uuid",
    }
}

wire_struct! {
    /// `auth_status`
    pub struct AuthStatusMessage tags { "type" = "auth_status" } {
        /// Whether a login is in progress.
        req is_authenticating: bool = "isAuthenticating",
        /// Lines to show.
        opt output: Vec<String> = "output",
        /// What failed.
        opt error: String = "error",
        /// The CLI's session.
        opt session_id: String = "session_id",
        /// This line's id.
        opt uuid: String = "uuid",
    }
}

wire_struct! {
    /// `{"type":"keep_alive"}`
    pub struct KeepAliveMessage tags { "type" = "keep_alive" } {}
}

wire_struct! {
    /// `streamlined_text`
    pub struct StreamlinedTextMessage tags { "type" = "streamlined_text" } {
        /// The text.
        req text: String = "text",
        /// The CLI's session.
        opt session_id: String = "session_id",
        /// This line's id.
        opt uuid: String = "uuid",
    }
}

wire_struct! {
    /// `streamlined_tool_use_summary`
    pub struct StreamlinedToolUseSummaryMessage tags { "type" = "streamlined_tool_use_summary" } {
        /// The summary.
        req tool_summary: String = "tool_summary",
        /// The CLI's session.
        opt session_id: String = "session_id",
        /// This line's id.
        opt uuid: String = "uuid",
    }
}

wire_struct! {
    /// `command_lifecycle` (2.1.330): for each user message with a `uuid`.
    pub struct CommandLifecycleMessage tags { "type" = "command_lifecycle" } {
        /// The user message's uuid.
        req command_uuid: String = "command_uuid",
        /// `queued`, `started`, `completed`.
        req state: String = "state",
        /// The CLI's session.
        opt session_id: String = "session_id",
        /// This line's id.
        opt uuid: String = "uuid",
    }
}

wire_struct! {
    /// `{"type":"update_environment_variables","variables":{...}}`
    pub struct UpdateEnvironmentVariablesMessage tags { "type" = "update_environment_variables" } {
        /// Name → value.
        req variables: Map<String, Value> = "variables",
    }
}

/// Which way a line travels, as far as its content tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Written by the CLI.
    FromCli,
    /// Written by the host.
    ToCli,
    /// Either (a `keep_alive`, an unknown type).
    Either,
}

impl Direction {
    /// `from_cli`, `to_cli`, `either`.
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::FromCli => "from_cli",
            Direction::ToCli => "to_cli",
            Direction::Either => "either",
        }
    }
}

/// An error decoding one line.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// Not valid JSON, or not an object.
    #[error("malformed JSON: {0}")]
    Malformed(serde_json::Error),
    /// Valid JSON of a known type whose fields do not fit the type.
    #[error("{type_name} does not fit its schema: {source}")]
    Schema {
        /// The line's `type`.
        type_name: String,
        /// What did not fit.
        source: serde_json::Error,
    },
    /// Not UTF-8.
    #[error("line is not UTF-8: {0}")]
    NotUtf8(std::str::Utf8Error),
}

impl Message {
    /// Decodes one line (without its newline).
    pub fn decode(line: &[u8]) -> Result<Message, DecodeError> {
        let text = std::str::from_utf8(line).map_err(DecodeError::NotUtf8)?;
        Self::decode_str(text)
    }

    /// Decodes one line given as text.
    pub fn decode_str(text: &str) -> Result<Message, DecodeError> {
        match Message::from_json_str(text) {
            Ok(Message::Unknown(Value::Object(map))) => Ok(Message::Unknown(Value::Object(map))),
            Ok(Message::Unknown(_)) => Err(DecodeError::Malformed(serde::de::Error::custom(
                "a protocol line must be a JSON object",
            ))),
            Ok(message) => Ok(message),
            Err(error) if error.is_syntax() || error.is_eof() => Err(DecodeError::Malformed(error)),
            Err(error) => {
                // Valid JSON that does not fit: name the type. (peek again only on this path)
                let type_name = crate::wire::peek_tag(text, "type").map(|t| t.into_owned());
                match type_name {
                    Some(type_name) => Err(DecodeError::Schema { type_name, source: error }),
                    None => Err(DecodeError::Malformed(error)),
                }
            }
        }
    }

    /// Writes the message as one line of compact JSON, without the newline.
    pub fn encode(&self) -> String {
        // Serializing our own types cannot fail: every map key is a string.
        serde_json::to_string(self).unwrap_or_else(|_| String::from("{}"))
    }

    /// The `type` of the line (for unknown messages, the one it carried).
    pub fn type_name(&self) -> Option<&str> {
        self.tag()
    }

    /// The subtype: `system.subtype`, `result.subtype`, `request.subtype` of a control request,
    /// `response.subtype` of a control response.
    pub fn subtype(&self) -> Option<&str> {
        match self {
            Message::System(system) => system.tag(),
            Message::Result(result) => Some(&result.subtype),
            Message::ControlRequest(request) => request.request.tag(),
            Message::ControlResponse(response) => response.response.tag(),
            Message::Unknown(value) => value.get("subtype").and_then(Value::as_str),
            _ => None,
        }
    }

    /// Which way this line travels, guessed from its content.
    pub fn direction(&self) -> Direction {
        use crate::control::ControlRequestPayload as P;
        match self {
            Message::System(_)
            | Message::Assistant(_)
            | Message::StreamEvent(_)
            | Message::Result(_)
            | Message::ToolProgress(_)
            | Message::ToolUseSummary(_)
            | Message::AuthStatus(_)
            | Message::StreamlinedText(_)
            | Message::StreamlinedToolUseSummary(_)
            | Message::CommandLifecycle(_)
            | Message::ControlCancelRequest(_) => Direction::FromCli,
            Message::UpdateEnvironmentVariables(_) => Direction::ToCli,
            Message::User(user) => {
                let from_cli = user.tool_use_result.is_some()
                    || user.is_replay == Some(true)
                    || user.parent_tool_use_id.is_some()
                    || user.session_id.as_deref().is_some_and(|id| !id.is_empty())
                    || user.extra.contains_key("timestamp");
                if from_cli {
                    Direction::FromCli
                } else {
                    Direction::ToCli
                }
            }
            Message::ControlRequest(request) => match request.request {
                P::CanUseTool(_) | P::HookCallback(_) => Direction::FromCli,
                P::McpMessage(_) | P::Unknown(_) => Direction::Either,
                _ => Direction::ToCli,
            },
            Message::ControlResponse(response) => {
                // The CLI's responses answer our requests; ours answer can_use_tool
                // (`behavior`) and hook_callback. A payload tells them apart.
                match &response.response {
                    crate::control::ControlResponseBody::Success(success) => {
                        match &success.response {
                            Some(raw)
                                if raw.get().contains("\"behavior\"")
                                    || raw.get().contains("hookSpecificOutput") =>
                            {
                                Direction::ToCli
                            }
                            _ => Direction::FromCli,
                        }
                    }
                    _ => Direction::FromCli,
                }
            }
            Message::KeepAlive(_) | Message::Unknown(_) => Direction::Either,
        }
    }

    /// `session_id`, where the message carries one.
    pub fn session_id(&self) -> Option<&str> {
        match self {
            Message::System(system) => system.session_id(),
            Message::Assistant(m) => m.session_id.as_deref(),
            Message::User(m) => m.session_id.as_deref(),
            Message::StreamEvent(m) => m.session_id.as_deref(),
            Message::Result(m) => m.session_id.as_deref(),
            Message::ToolProgress(m) => m.session_id.as_deref(),
            Message::ToolUseSummary(m) => m.session_id.as_deref(),
            Message::AuthStatus(m) => m.session_id.as_deref(),
            Message::StreamlinedText(m) => m.session_id.as_deref(),
            Message::StreamlinedToolUseSummary(m) => m.session_id.as_deref(),
            Message::CommandLifecycle(m) => m.session_id.as_deref(),
            Message::Unknown(value) => value.get("session_id").and_then(Value::as_str),
            _ => None,
        }
        .filter(|id| !id.is_empty())
    }
}

wire_from!(Message {
    System(SystemMessage),
    Assistant(AssistantMessage),
    User(UserMessage),
    StreamEvent(StreamEventMessage),
    Result(ResultMessage),
    ToolProgress(ToolProgressMessage),
    ToolUseSummary(ToolUseSummaryMessage),
    AuthStatus(AuthStatusMessage),
    KeepAlive(KeepAliveMessage),
    StreamlinedText(StreamlinedTextMessage),
    StreamlinedToolUseSummary(StreamlinedToolUseSummaryMessage),
    CommandLifecycle(CommandLifecycleMessage),
    ControlRequest(ControlRequest),
    ControlResponse(ControlResponse),
    ControlCancelRequest(ControlCancelRequest),
    UpdateEnvironmentVariables(UpdateEnvironmentVariablesMessage),
});
