//! The top-level messages of the stream-json protocol, one per NDJSON line, in both directions.
//!
//! [`Message`] is a tagged enum over every `type`, each typed variant's body boxed: a line's
//! message is moved from its decode into its session's core, and a `Message` is 72 bytes to
//! move where its largest body is 656 (a const assertion holds it there). The nested tagged
//! enums are in `system`, `control`, `stream`, `content` and `permission`.

use indexmap::IndexMap;
use serde_json::{Map, Number, Value};

use crate::content::{AssistantBody, ContentBlock, ModelUsage, Usage, UserBody};
use crate::control::{ControlCancelRequest, ControlRequest, ControlResponse};
use crate::stream::StreamEvent;
use crate::system::SystemMessage;
use crate::wire::{wire_enum, wire_from, wire_str_enum, wire_struct, Extra, Num, TextOr};

wire_enum! {
    /// One line of the protocol, chosen by `type`.
    ///
    /// Every typed variant's body is boxed (`Unknown` keeps its `Value` inline): a line's
    /// message is moved several times on its way (decoded, handed to its session, into its
    /// core), and a `Message` of boxes is 72 bytes to move, where the largest body is 656.
    ///
    /// Decode with [`Message::decode`] (or [`crate::Received::decode`] to keep the exact bytes);
    /// write with [`Message::encode`]. A `type` this crate does not know decodes to
    /// `Message::Unknown` with every field kept; a known one whose fields do not fit, to
    /// `Message::Drift`.
    pub enum Message by "type" {
        /// CLI → host: `system/*` (init per turn, status, api_retry, task_*, ...).
        System(Box<SystemMessage>) = "system",
        /// CLI → host: one content block of the model's answer.
        Assistant(Box<AssistantMessage>) = "assistant",
        /// Both ways: a prompt (host → CLI), a tool result or a replayed prompt (CLI → host).
        User(Box<UserMessage>) = "user",
        /// CLI → host: a raw Anthropic stream event (`--include-partial-messages`).
        StreamEvent(Box<StreamEventMessage>) = "stream_event",
        /// CLI → host: the end of a turn.
        Result(Box<ResultMessage>) = "result",
        /// CLI → host: a long tool is still running.
        ToolProgress(Box<ToolProgressMessage>) = "tool_progress",
        /// CLI → host: a summary of tool calls.
        ToolUseSummary(Box<ToolUseSummaryMessage>) = "tool_use_summary",
        /// CLI → host: login progress.
        AuthStatus(Box<AuthStatusMessage>) = "auth_status",
        /// Both ways: keeps a connection alive; ignored by the CLI.
        KeepAlive(Box<KeepAliveMessage>) = "keep_alive",
        /// CLI → host (streamlined mode): text.
        StreamlinedText(Box<StreamlinedTextMessage>) = "streamlined_text",
        /// CLI → host (streamlined mode): a tool summary.
        StreamlinedToolUseSummary(Box<StreamlinedToolUseSummaryMessage>) = "streamlined_tool_use_summary",
        /// CLI → host (2.1.330): a user message's lifecycle (`queued`, `started`, `completed`).
        CommandLifecycle(Box<CommandLifecycleMessage>) = "command_lifecycle",
        /// Both ways: a control request.
        ControlRequest(Box<ControlRequest>) = "control_request",
        /// Both ways: the answer to a control request.
        ControlResponse(Box<ControlResponse>) = "control_response",
        /// CLI → host: the CLI withdraws one of its requests.
        ControlCancelRequest(Box<ControlCancelRequest>) = "control_cancel_request",
        /// Host → CLI: set environment variables for tools (2.1.37 applies them; 2.1.330
        /// accepts but Bash did not see them).
        UpdateEnvironmentVariables(Box<UpdateEnvironmentVariablesMessage>) = "update_environment_variables",
        /// CLI → host (2.1.250 on): the conversation was discarded (`/clear`, leaving plan mode
        /// with a clean context): a new one goes on, its running cost counted from zero.
        ConversationReset(Box<ConversationResetMessage>) = "conversation_reset",
        /// CLI → host: the account's usage windows changed (five-hour, seven-day, ...).
        RateLimitEvent(Box<RateLimitEventMessage>) = "rate_limit_event",
        /// CLI → host: a predicted next prompt, after a turn, when `initialize` asked for them.
        PromptSuggestion(Box<PromptSuggestionMessage>) = "prompt_suggestion",
        ;
        /// A line of a known `type` whose fields do not fit this crate's model of that type:
        /// kept whole, with the reason and what could still be read (see [`Drift`]).
        Drift(Box<Drift>)
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
        /// Who the prompt is from. The CLI's trust checks treat a prompt without one as
        /// unattributed; Switchboard stamps a person's prompt `{"kind":"human"}` (every
        /// version takes the field; 2.1.330 echoes it on the turn's `result`).
        opt origin: MessageOrigin = "origin",
        /// When to run it if a turn is running (2.1.120 on; older CLIs ignore it and queue).
        opt priority: MessagePriority = "priority",
    }
}

wire_str_enum! {
    /// A prompt's `priority` while a turn runs. Found with the pinned CLIs (docs/protocol.md):
    /// from 2.1.120, `now` ends the running turn at once (its `result` has `stop_reason: null`;
    /// 2.1.250 on then say its prompt `cancelled`, though it ran) and runs this prompt as the
    /// next turn; 2.1.100 ends the turn with an error instead, and 2.1.37 and older ignore it.
    pub enum MessagePriority {
        /// Steer: stop the running turn and run this one.
        Now = "now",
        /// What every version does with a prompt that names none: it is taken into the running
        /// turn between tool calls (2.1.330 tells the model "address the message above as you
        /// continue this turn"), or runs next if the turn ends first.
        #[default]
        Next = "next",
        /// Its own turn, after the running one ends (2.1.120 on).
        Later = "later",
    }
}

wire_struct! {
    /// A user message's `origin`: `human` (a person typed it), `channel` (`server`: an MCP
    /// channel's), `peer` (`from`: another session), `task-notification` (`subkind`:
    /// `scheduled-trigger`, `external-event`, ...). An open set: unknown kinds and fields kept.
    pub struct MessageOrigin {
        /// `human`, `channel`, `peer`, `task-notification`, ...
        req kind: String = "kind",
        /// `channel`: the channel's server.
        opt server: String = "server",
        /// `task-notification`: what kind of delivery.
        opt subkind: String = "subkind",
        /// `peer`: the sending session's address.
        opt from: String = "from",
    }
}

impl MessageOrigin {
    /// `{"kind":"human"}`: a person's own words.
    pub fn human() -> MessageOrigin {
        MessageOrigin { kind: "human".to_owned(), ..MessageOrigin::default() }
    }

    /// Whether a person typed it.
    pub fn is_human(&self) -> bool {
        self.kind == "human"
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
        /// The API message the event belongs to (2.1.330 on; earlier CLIs leave it out).
        opt api_message_id: String = "api_message_id",
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
        opt duration_ms: Num = "duration_ms",
        /// Time spent in API calls (cumulative).
        opt duration_api_ms: Num = "duration_api_ms",
        /// API round trips.
        opt num_turns: Num = "num_turns",
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
        /// 2.1.330: the origin of the prompt the turn answered, as the host stamped it
        /// (`{"kind":"human"}`); absent where it was not a person's.
        opt origin: MessageOrigin = "origin",
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
    /// `conversation_reset` (2.1.250 on). The lines after it carry another `session_id`: the
    /// one a resume names (not `new_conversation_id`, as 2.1.332 writes them).
    pub struct ConversationResetMessage tags { "type" = "conversation_reset" } {
        /// The new conversation's id.
        opt new_conversation_id: String = "new_conversation_id",
        /// `clear`, `plan_mode_exit`, `fresh_session`, `onboarding`; absent from older CLIs.
        opt trigger: String = "trigger",
        /// With `clear`: the prompt whose `/clear` ran.
        opt user_message_uuid: String = "user_message_uuid",
        /// When, as the CLI's clock says (ISO 8601).
        opt timestamp: String = "timestamp",
        /// The CLI's session (the old conversation's).
        opt session_id: String = "session_id",
        /// This line's id.
        opt uuid: String = "uuid",
    }
}

wire_struct! {
    /// `rate_limit_event`: one usage window as it stands.
    pub struct RateLimitEventMessage tags { "type" = "rate_limit_event" } {
        /// The window.
        req rate_limit_info: RateLimitInfo = "rate_limit_info",
        /// The CLI's session.
        opt session_id: String = "session_id",
        /// This line's id.
        opt uuid: String = "uuid",
    }
}

wire_struct! {
    /// `rate_limit_event.rate_limit_info` (camelCase, as the CLI writes it).
    pub struct RateLimitInfo {
        /// `allowed`, `allowed_warning`, `rejected`.
        req status: String = "status",
        /// When the window resets (Unix seconds).
        opt resets_at: Num = "resetsAt",
        /// `five_hour`, `seven_day`, `seven_day_opus`, `seven_day_sonnet`,
        /// `seven_day_overage_included`, `overage`.
        opt rate_limit_type: String = "rateLimitType",
        /// How much of the window is used, 0 to 1.
        opt utilization: Num = "utilization",
        /// Overage: `allowed`, `allowed_warning`, `rejected`.
        opt overage_status: String = "overageStatus",
        /// When overage resets (Unix seconds).
        opt overage_resets_at: Num = "overageResetsAt",
        /// Why overage is off.
        opt overage_disabled_reason: String = "overageDisabledReason",
        /// Whether the account is using overage now.
        opt is_using_overage: bool = "isUsingOverage",
        /// The warning threshold crossed, 0 to 1.
        opt surpassed_threshold: Num = "surpassedThreshold",
    }
}

wire_struct! {
    /// `prompt_suggestion`
    pub struct PromptSuggestionMessage tags { "type" = "prompt_suggestion" } {
        /// The predicted prompt.
        req suggestion: String = "suggestion",
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

/// A line of a known `type` whose fields do not fit the model of that type: the drift form.
///
/// A CLI version may change a field's shape (a number written as a float, a string that became
/// an object). Such a line is not malformed: it is a JSON object with a `type`, kept exactly,
/// with the reason it did not fit. [`Message::decode`] also tries to read it without the part
/// that did not fit: when leaving out one field, or one element of an array, makes it fit,
/// [`Drift::salvaged`] is that reading, so a `result` whose `usage` changed shape still ends
/// its turn. The routing fields ([`Message::session_id`], [`Message::subtype`], the
/// [`crate::Envelope`]) read from the line itself either way.
#[derive(Debug, Clone, PartialEq)]
pub struct Drift {
    /// The line, every field included.
    pub value: Map<String, Value>,
    /// Why it did not fit, as the decoder said it.
    pub reason: String,
    /// The line read without the part named in [`Drift::left_out`], when that made it fit.
    pub salvaged: Option<Box<Message>>,
    /// Where the part left out of [`Drift::salvaged`] sits (`usage.input_tokens`,
    /// `message.content[2]`); empty without a salvaged reading.
    pub left_out: String,
}

/// Lines longer than this are not salvaged (each attempt decodes the line again).
pub const SALVAGE_MAX_BYTES: usize = 64 * 1024;

/// The longest reason kept (serde quotes an unfit string whole).
pub const MAX_REASON_CHARS: usize = 300;

/// Fields typed as any JSON (they always fit): not looked into for the part that does not;
/// pending permission requests, which must never be left out (each must still be answered);
/// and a permission request's hints that make it a person's to answer: a request whose hint
/// does not fit is not read without it (it would then look like one a policy may answer), it
/// is answered as unreadable.
const NOT_CANDIDATES: &[&str] = &[
    "input",
    "tool_use_result",
    "structured_output",
    "patch",
    "pending_permission_requests",
    "requires_user_interaction",
    "classifier_approvable",
    "matched_ask_rule",
    "suppress_always_allow_rule",
    "default_to_no",
];

/// How many parts a salvage tries leaving out, at most.
const SALVAGE_MAX_TRIES: usize = 200;

/// How deep a salvage looks for the part that does not fit (`message.content[2]` is 3 deep).
const SALVAGE_MAX_DEPTH: usize = 3;

impl Drift {
    /// The drift form of `value`, which did not fit for `reason`; `text` is the line.
    fn of(text: &str, value: Map<String, Value>, mut reason: String) -> Drift {
        if let Some((cut, _)) = reason.char_indices().nth(MAX_REASON_CHARS) {
            reason.truncate(cut);
            reason.push('…');
        }
        let salvage = if text.len() <= SALVAGE_MAX_BYTES { salvage(&value) } else { None };
        let salvage = salvage.or_else(|| routing_only(&value));
        let (salvaged, left_out) = match salvage {
            Some((message, path)) => (Some(Box::new(message)), path),
            None => (None, String::new()),
        };
        Drift { value, reason, salvaged, left_out }
    }

    /// A top-level string field of the line.
    pub fn field(&self, key: &str) -> Option<&str> {
        self.value.get(key).and_then(Value::as_str)
    }

    /// The subtype, where the line's type has one: `subtype`, `request.subtype` of a control
    /// request, `response.subtype` of a control response.
    pub fn subtype(&self) -> Option<&str> {
        let nested = |outer: &str| self.value.get(outer)?.get("subtype")?.as_str();
        match self.field("type") {
            Some("control_request") => nested("request"),
            Some("control_response") => nested("response"),
            _ => self.field("subtype"),
        }
    }

    /// The request id of a control request, response or cancel.
    pub fn request_id(&self) -> Option<&str> {
        match self.field("type") {
            Some("control_response") => self.value.get("response")?.get("request_id")?.as_str(),
            _ => self.field("request_id"),
        }
    }
}

/// One step of a path into a JSON value.
#[derive(Clone)]
enum Step {
    Key(String),
    Index(usize),
}

/// Reads `value` leaving out one part of it, deepest candidates first: the first reading that
/// fits, and where the part left out was.
fn salvage(value: &Map<String, Value>) -> Option<(Message, String)> {
    let mut candidates = Vec::new();
    let mut path = Vec::new();
    for (key, inner) in value {
        if is_tag(key) || NOT_CANDIDATES.contains(&key.as_str()) {
            continue;
        }
        path.push(Step::Key(key.clone()));
        collect_candidates(inner, &mut path, &mut candidates);
        path.pop();
    }
    // Deepest first: leaving out `usage.input_tokens` keeps more than leaving out `usage`.
    candidates.sort_by_key(|path: &Vec<Step>| std::cmp::Reverse(path.len()));
    for candidate in candidates.iter().take(SALVAGE_MAX_TRIES) {
        let mut trimmed = Value::Object(value.clone());
        if !remove_at(&mut trimmed, candidate) {
            continue;
        }
        let Ok(text) = serde_json::to_string(&trimmed) else { continue };
        match Message::from_json_str(&text) {
            Ok(Message::Unknown(_)) | Err(_) => {}
            Ok(message) => return Some((message, describe(candidate))),
        }
    }
    None
}

/// When no single part can be left out: the fields a turn's end (`result`) or a withdrawn
/// request (`control_cancel_request`) is routed by, read alone, so the session still moves on.
fn routing_only(value: &Map<String, Value>) -> Option<(Message, String)> {
    let kind = value.get("type")?.as_str()?;
    let keep: &[&str] = match kind {
        "result" => &["subtype", "is_error", "result", "session_id", "uuid"],
        "control_cancel_request" => &["request_id"],
        _ => return None,
    };
    let mut map = Map::new();
    map.insert("type".to_owned(), Value::from(kind));
    for &key in keep {
        match value.get(key) {
            Some(flag @ Value::Bool(_)) if key == "is_error" => {
                map.insert(key.to_owned(), flag.clone())
            }
            Some(text @ Value::String(_)) if key != "is_error" => {
                map.insert(key.to_owned(), text.clone())
            }
            _ => None,
        };
    }
    if kind == "result" {
        // A turn must end even when its subtype or outcome cannot be read: then it counts as
        // failed (the drift note says why), never as a success nobody can vouch for.
        if !map.contains_key("subtype") {
            map.insert("subtype".to_owned(), Value::from("unknown"));
        }
        if !map.contains_key("is_error") {
            let unreadable = value.get("is_error").is_some();
            let failed =
                unreadable || map.get("subtype").and_then(Value::as_str) != Some("success");
            map.insert("is_error".to_owned(), Value::Bool(failed));
        }
    }
    let text = serde_json::to_string(&map).ok()?;
    match Message::from_json_str(&text) {
        Ok(Message::Unknown(_)) | Err(_) => None,
        Ok(message) => Some((message, format!("every field but {}", keep.join(", ")))),
    }
}

/// Every part of `value` (at `path`) that could be left out, down to [`SALVAGE_MAX_DEPTH`].
fn collect_candidates(value: &Value, path: &mut Vec<Step>, out: &mut Vec<Vec<Step>>) {
    out.push(path.clone());
    if path.len() >= SALVAGE_MAX_DEPTH {
        return;
    }
    match value {
        Value::Object(map) => {
            let keep = |(key, _): &(&String, &Value)| {
                !is_tag(key) && !NOT_CANDIDATES.contains(&key.as_str())
            };
            for (key, inner) in map.iter().filter(keep) {
                path.push(Step::Key(key.clone()));
                collect_candidates(inner, path, out);
                path.pop();
            }
        }
        Value::Array(items) => {
            // Leaving out one element only helps where elements are objects (content blocks).
            for (index, inner) in items.iter().enumerate().filter(|(_, item)| item.is_object()) {
                path.push(Step::Index(index));
                collect_candidates(inner, path, out);
                path.pop();
            }
        }
        _ => {}
    }
}

/// A key that picks an object's shape: leaving it out would read the object as another kind
/// (a permission request as a request of no known subtype), so it is never left out.
fn is_tag(key: &str) -> bool {
    key == "type" || key == "subtype"
}

/// Removes the part at `path`; false when there is none.
fn remove_at(value: &mut Value, path: &[Step]) -> bool {
    let Some((last, parents)) = path.split_last() else { return false };
    let mut at = value;
    for step in parents {
        let next = match (step, at) {
            (Step::Key(key), Value::Object(map)) => map.get_mut(key),
            (Step::Index(index), Value::Array(items)) => items.get_mut(*index),
            _ => None,
        };
        let Some(next) = next else { return false };
        at = next;
    }
    match (last, at) {
        (Step::Key(key), Value::Object(map)) => map.shift_remove(key).is_some(),
        (Step::Index(index), Value::Array(items)) if *index < items.len() => {
            items.remove(*index);
            true
        }
        _ => false,
    }
}

/// `message.content[2]`.
fn describe(path: &[Step]) -> String {
    let mut text = String::new();
    for step in path {
        match step {
            Step::Key(key) => {
                if !text.is_empty() {
                    text.push('.');
                }
                text.push_str(key);
            }
            Step::Index(index) => text.push_str(&format!("[{index}]")),
        }
    }
    text
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
    /// Not UTF-8.
    #[error("line is not UTF-8: {0}")]
    NotUtf8(std::str::Utf8Error),
}

fn not_an_object() -> DecodeError {
    DecodeError::Malformed(serde::de::Error::custom("a protocol line must be a JSON object"))
}

impl Message {
    /// Decodes one line (without its newline).
    pub fn decode(line: &[u8]) -> Result<Message, DecodeError> {
        let text = std::str::from_utf8(line).map_err(DecodeError::NotUtf8)?;
        Self::decode_str(text)
    }

    /// Decodes one line given as text.
    ///
    /// Only text that is not a JSON object is an error. An object of a known `type` whose
    /// fields do not fit is [`Message::Drift`].
    pub fn decode_str(text: &str) -> Result<Message, DecodeError> {
        let text = crate::codec::without_terminal_escapes(text);
        match Message::from_json_str(text) {
            Ok(Message::Unknown(Value::Object(map))) => Ok(Message::Unknown(Value::Object(map))),
            Ok(Message::Unknown(_)) => Err(not_an_object()),
            Ok(message) => Ok(message),
            Err(error) if error.is_syntax() || error.is_eof() => Err(DecodeError::Malformed(error)),
            Err(error) => {
                // Valid JSON that does not fit its type (only this rare path reads it again).
                match serde_json::from_str::<Value>(text) {
                    Ok(Value::Object(map)) => {
                        Ok(Message::Drift(Box::new(Drift::of(text, map, error.to_string()))))
                    }
                    Ok(_) => Err(not_an_object()),
                    Err(error) => Err(DecodeError::Malformed(error)),
                }
            }
        }
    }

    /// Whether the line's type, or the subtype that picks its shape, is one the model lacks, or
    /// the line does not fit its type (a drift).
    pub fn is_unknown(&self) -> bool {
        use crate::control::{ControlRequestPayload, ControlResponseBody};
        use crate::stream::StreamEvent;
        match self {
            Message::Unknown(_) | Message::Drift(_) => true,
            Message::System(system) => matches!(**system, SystemMessage::Unknown(_)),
            Message::ControlRequest(request) => {
                matches!(request.request, ControlRequestPayload::Unknown(_))
            }
            Message::ControlResponse(response) => {
                matches!(response.response, ControlResponseBody::Unknown(_))
            }
            Message::StreamEvent(event) => matches!(event.event, StreamEvent::Unknown(_)),
            _ => false,
        }
    }

    /// The message as far as it was read: a drift form's salvaged reading, or itself.
    pub fn readable(&self) -> &Message {
        match self {
            Message::Drift(drift) => drift.salvaged.as_deref().unwrap_or(self),
            other => other,
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
            Message::Drift(drift) => drift.subtype(),
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
            | Message::ConversationReset(_)
            | Message::RateLimitEvent(_)
            | Message::PromptSuggestion(_)
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
            Message::Drift(drift) => match &drift.salvaged {
                Some(salvaged) => salvaged.direction(),
                None => Direction::Either,
            },
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
            Message::ConversationReset(m) => m.session_id.as_deref(),
            Message::RateLimitEvent(m) => m.session_id.as_deref(),
            Message::PromptSuggestion(m) => m.session_id.as_deref(),
            Message::Drift(drift) => drift.field("session_id"),
            Message::Unknown(value) => value.get("session_id").and_then(Value::as_str),
            _ => None,
        }
        .filter(|id| !id.is_empty())
    }
}

// A `Message` stays a few words to move (see its documentation): a body left inline fails here.
const _: () = assert!(std::mem::size_of::<Message>() <= 72);

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
    ConversationReset(ConversationResetMessage),
    RateLimitEvent(RateLimitEventMessage),
    PromptSuggestion(PromptSuggestionMessage),
});
