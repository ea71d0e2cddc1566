//! What the projection tells: its updates ([`Update`]), the view they leave
//! ([`View`]) and their parts, and how a stretch of history is settled ([`settle`]). The
//! projection itself (`projection.rs`) makes them from the session's events.

use super::*;

/// One thing that happened in a session, in the order it happened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "update", rename_all = "snake_case")]
pub enum Update {
    /// The CLI started (its first `system/init`): where, with what.
    Started {
        /// Its working directory.
        cwd: Option<String>,
        /// The model.
        model: Option<String>,
        /// The permission mode.
        permission_mode: Option<String>,
        /// The CLI's version.
        cli_version: Option<String>,
    },
    /// A prompt went to the CLI.
    Prompt {
        /// Its text (text blocks joined by blank lines).
        text: String,
        /// Its images.
        images: Vec<Image>,
        /// The line's uuid (what a fork names).
        uuid: Option<String>,
        /// Sent while an earlier turn ran: it waits for that one to end.
        queued: bool,
    },
    /// The prompt that waited ([`Update::Prompt`] with `queued`) now runs.
    Dequeued,
    /// An assistant message began.
    MessageStarted {
        /// The API message id.
        message_id: String,
        /// The subagent's Task/Agent call, for a subagent's message.
        parent_tool_use_id: Option<String>,
        /// The model that writes it.
        model: Option<String>,
        /// Tokens of context it started from (input, cache reads and cache writes).
        context_tokens: Option<u64>,
    },
    /// More text of a content block.
    TextDelta {
        /// The API message id.
        message_id: String,
        /// The block's position in the message.
        index: u64,
        /// The subagent's Task/Agent call.
        parent_tool_use_id: Option<String>,
        /// The new text.
        text: String,
    },
    /// More thinking of a content block.
    ThinkingDelta {
        /// The API message id.
        message_id: String,
        /// The block's position in the message.
        index: u64,
        /// The subagent's Task/Agent call.
        parent_tool_use_id: Option<String>,
        /// The new thinking.
        thinking: String,
    },
    /// A tool call began streaming; its input follows in [`Update::ToolInputDelta`]s.
    ToolUseStarted {
        /// The API message id.
        message_id: String,
        /// The block's position in the message.
        index: u64,
        /// The subagent's Task/Agent call.
        parent_tool_use_id: Option<String>,
        /// The call's id.
        tool_use_id: String,
        /// The tool.
        name: String,
    },
    /// More of a tool call's input, as a fragment of its JSON text.
    ToolInputDelta {
        /// The call's id.
        tool_use_id: String,
        /// The fragment.
        partial_json: String,
        /// Bytes of input received so far.
        received_bytes: u64,
        /// The input so far, parsed with its open strings, arrays and objects closed where
        /// they stand (a Write's `content` grows in it), when the text so far parses that way.
        /// Given with the first fragments and then whenever the input has grown by
        /// [`PARTIAL_INPUT_STEP`] bytes and an eighth since the last one (so that a long input
        /// costs a bounded multiple of its size); never past [`MAX_REBUILT_INPUT_BYTES`].
        #[serde(skip_serializing_if = "Option::is_none")]
        partial_input: Option<Value>,
    },
    /// A content block is complete.
    Block {
        /// The API message id.
        message_id: String,
        /// The block's position in the message.
        index: u64,
        /// The subagent's Task/Agent call.
        parent_tool_use_id: Option<String>,
        /// The line's uuid (what a fork names), from the CLI's final line.
        uuid: Option<String>,
        /// The block.
        block: Block,
    },
    /// A tool's result.
    ToolResult {
        /// The call's id.
        tool_use_id: String,
        /// The tool, when its call was seen.
        tool_name: Option<String>,
        /// The subagent's Task/Agent call.
        parent_tool_use_id: Option<String>,
        /// Whether the tool failed.
        is_error: bool,
        /// Its text: for Bash, stdout then stderr.
        text: String,
        /// Its images.
        images: Vec<Image>,
        /// Bash: whether the command was interrupted.
        interrupted: bool,
    },
    /// A permission request waits for a person.
    PermissionAsked(PendingPermission),
    /// A tool call's permission was decided.
    PermissionDecided {
        /// The request (for a hook's decision, the hook callback's request).
        request_id: String,
        /// The tool.
        tool_name: String,
        /// Allow or deny.
        behavior: Behavior,
        /// Who decided.
        by: DecidedBy,
        /// The message the model sees on deny, or the reason on allow.
        message: String,
        /// The tool call, when known.
        tool_use_id: Option<String>,
        /// When (Unix milliseconds).
        decided_at_ms: u64,
        /// Who started the turn, when known.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        origin: Option<crate::TurnOrigin>,
    },
    /// A turn ended.
    TurnEnded {
        /// The subagent's Task/Agent call (a subagent's own result), or `None` for a turn.
        parent_tool_use_id: Option<String>,
        /// `success`, `error_during_execution`, `error_max_turns`, ...
        subtype: String,
        /// Interrupted by the person (the CLI reports it as `error_during_execution`).
        interrupted: bool,
        /// Failed (and not interrupted).
        failed: bool,
        /// The final text, or the error texts.
        result: Option<String>,
        /// Wall time of the turn.
        duration_ms: u64,
        /// Input tokens of the turn (with cache reads and writes).
        input_tokens: u64,
        /// Output tokens of the turn.
        output_tokens: u64,
        /// What this turn cost, in US dollars.
        cost_usd: f64,
        /// What the session has cost so far.
        total_cost_usd: f64,
        /// Totals per model so far, as the CLI reports them.
        models: Vec<ModelTotals>,
        /// Context tokens of the turn's last message in the main conversation.
        context_tokens: Option<u64>,
        /// The context window of the model that answered (the model of the main
        /// conversation's last message, looked up in `models`): `None` when the CLI did not
        /// say. A turn's other models (a subagent's, a title's) have windows of their own.
        context_window: Option<u64>,
    },
    /// The session's state changed.
    State {
        /// Before.
        from: SessionState,
        /// After.
        to: SessionState,
    },
    /// The model changed.
    Model {
        /// The model now.
        model: String,
    },
    /// The permission mode changed.
    Mode {
        /// The mode now.
        mode: String,
    },
    /// The CLI's session id became known or changed.
    ClaudeSession {
        /// The id.
        claude_session_id: String,
    },
    /// Something a person should read.
    Notice {
        /// `info`, `warn` or `error`.
        level: Level,
        /// What it is about.
        kind: NoticeKind,
        /// The text.
        text: String,
    },
    /// The account's usage windows as they stand now (`rate_limit_event`): every window the
    /// session has heard of, latest first.
    UsageWindows {
        /// The windows.
        windows: Vec<UsageWindow>,
    },
    /// Messages Claude Code took back (a refusal retried on a fallback model): whoever shows
    /// the transcript takes out the blocks whose line `uuid` is among them. The log keeps them.
    Retracted {
        /// The retracted lines' uuids.
        uuids: Vec<String>,
    },
    /// A queued prompt was dropped before it ran (`cancel_async_message`): no turn answers it.
    PromptCancelled {
        /// The prompt's uuid.
        uuid: String,
    },
    /// The conversation was discarded (`/clear`, leaving plan mode with a clean context): what
    /// follows is a new conversation of the same session. Its cost goes on adding up.
    ConversationReset {
        /// `clear`, `plan_mode_exit`, `fresh_session`, `onboarding`, when the CLI says.
        trigger: Option<String>,
    },
    /// What the person might type next, as Claude Code predicts it after a turn: offered, never
    /// sent by itself. A prompt sent since makes it stale.
    PromptSuggestion {
        /// The suggested prompt.
        suggestion: String,
    },
    /// The tasks running in the background now (the whole set): each may be stopped alone.
    BackgroundTasks {
        /// The tasks.
        tasks: Vec<BackgroundTask>,
    },
}

/// One usage window of the account, as Claude Code last reported it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UsageWindow {
    /// `five_hour`, `seven_day`, `seven_day_opus`, `seven_day_sonnet`, `overage`, ...
    pub window: String,
    /// `allowed`, `allowed_warning` (past a warning threshold) or `rejected` (used up).
    pub status: String,
    /// How much is used, 0 to 1, when said.
    pub utilization: Option<f64>,
    /// When it resets (Unix seconds), when said.
    pub resets_at: Option<u64>,
}

/// What a notice is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoticeKind {
    /// `stderr`.
    Stderr,
    /// `bad_line`.
    BadLine,
    /// `drift`.
    Drift,
    /// `exited`.
    Exited,
    /// `api_retry`.
    ApiRetry,
    /// `compacted`.
    Compacted,
    /// `disconnected`.
    Disconnected,
    /// `resent`.
    Resent,
    /// `undelivered`.
    Undelivered,
    /// `control_timed_out`.
    ControlTimedOut,
    /// `unsupported_control_request`.
    UnsupportedControlRequest,
    /// `rewound`.
    Rewound,
    /// `rewind_failed`.
    RewindFailed,
    /// `informational`: Claude Code's own words for a person (a hook's feedback, why auto
    /// mode cannot check a call).
    Informational,
    /// `permission_denied`: Claude Code refused a call without asking anyone.
    PermissionDenied,
    /// `notification`: a notification Claude Code's own screen would show.
    Notification,
    /// `conversation_reset`: the conversation was discarded; a new one goes on.
    ConversationReset,
    /// `refusal`: the model refused; retried on a fallback model, or not.
    Refusal,
    /// `rate_limited`: a usage window is used up, or past its warning.
    RateLimited,
    /// `background_task`: a task running in the background ended (completed, failed,
    /// stopped).
    BackgroundTask,
}

impl NoticeKind {
    /// Its name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            NoticeKind::Stderr => "stderr",
            NoticeKind::BadLine => "bad_line",
            NoticeKind::Drift => "drift",
            NoticeKind::Exited => "exited",
            NoticeKind::ApiRetry => "api_retry",
            NoticeKind::Compacted => "compacted",
            NoticeKind::Disconnected => "disconnected",
            NoticeKind::Resent => "resent",
            NoticeKind::Undelivered => "undelivered",
            NoticeKind::ControlTimedOut => "control_timed_out",
            NoticeKind::UnsupportedControlRequest => "unsupported_control_request",
            NoticeKind::Rewound => "rewound",
            NoticeKind::RewindFailed => "rewind_failed",
            NoticeKind::Informational => "informational",
            NoticeKind::PermissionDenied => "permission_denied",
            NoticeKind::Notification => "notification",
            NoticeKind::ConversationReset => "conversation_reset",
            NoticeKind::Refusal => "refusal",
            NoticeKind::RateLimited => "rate_limited",
            NoticeKind::BackgroundTask => "background_task",
        }
    }
}

/// How much a notice matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    /// For the record.
    Info,
    /// Worth a look.
    Warn,
    /// Something went wrong.
    Error,
}

/// A finished content block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Block {
    /// Text (Markdown).
    Text {
        /// The text.
        text: String,
    },
    /// Thinking; `redacted` when the API sent it encrypted.
    Thinking {
        /// The thinking (empty when redacted).
        thinking: String,
        /// Whether it was redacted.
        redacted: bool,
    },
    /// A tool call with its whole input.
    ToolUse {
        /// The call's id.
        tool_use_id: String,
        /// The tool.
        name: String,
        /// Its input.
        input: Value,
        /// Rebuilt from the streamed fragments; the CLI's final line follows and confirms it.
        rebuilt: bool,
    },
    /// Any other block, as the CLI wrote it.
    Other {
        /// The block.
        value: Value,
    },
}

/// An image in a prompt or a tool result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Image {
    /// `base64` or `url`.
    pub source: String,
    /// `image/png`, ...
    pub media_type: Option<String>,
    /// The base64 data.
    pub data: Option<String>,
    /// The URL.
    pub url: Option<String>,
}

/// One model's totals so far.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelTotals {
    /// The model.
    pub model: String,
    /// Input tokens, with cache reads.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Cost, in US dollars.
    pub cost_usd: f64,
    /// Its context window, in tokens.
    pub context_window: Option<u64>,
}

/// A subagent in the tree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubagentNode {
    /// The Task/Agent call that started it.
    pub tool_use_id: String,
    /// The subagent that started this one, if nested.
    pub parent_tool_use_id: Option<String>,
    /// The task description.
    pub description: Option<String>,
    /// `general-purpose`, `Explore`, ...
    pub subagent_type: Option<String>,
    /// Its messages so far (assistant turns and tool results).
    pub messages: u64,
    /// Whether its result came back.
    pub finished: bool,
}

/// The session as its updates so far leave it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct View {
    /// The state.
    pub state: Option<SessionState>,
    /// The CLI's session id.
    pub claude_session_id: Option<String>,
    /// The model.
    pub model: Option<String>,
    /// The permission mode.
    pub permission_mode: Option<String>,
    /// The CLI's version.
    pub cli_version: Option<String>,
    /// The CLI's working directory, as it said.
    pub cwd: Option<String>,
    /// The first prompt's first line (at most 80 characters).
    pub title: Option<String>,
    /// Cost so far, in US dollars.
    pub cost_usd: f64,
    /// Turns ended.
    pub turns: u64,
    /// Prompts sent whose turn has not ended.
    pub open_turns: u64,
    /// Context tokens of the last assistant message.
    pub context_tokens: Option<u64>,
    /// The context window of the main conversation's model, as the last turn's result said.
    pub context_window: Option<u64>,
    /// Permission requests waiting for a person.
    pub pending_permissions: Vec<PendingPermission>,
    /// The subagent tree, in the order they started.
    pub subagents: Vec<SubagentNode>,
    /// The files the session's tools changed (Write, Edit, MultiEdit, NotebookEdit whose
    /// result was not an error), as the tools named them, first change first; at most
    /// [`MAX_TOUCHED_FILES`].
    pub touched_files: Vec<String>,
    /// The account's usage windows as Claude Code last reported them (`rate_limit_event`),
    /// latest first; at most [`MAX_USAGE_WINDOWS`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub usage_windows: Vec<UsageWindow>,
    /// Conversations discarded so far (`/clear` and the like): the session went on in a new
    /// one each time.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub conversation_resets: u64,
    /// The tasks running in the background (Bash commands, subagents), as Claude Code last
    /// listed them; at most 50.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub background_tasks: Vec<BackgroundTask>,
    /// What the person might type next, until a prompt is sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_suggestion: Option<String>,
    /// The MCP servers the CLI's `init` listed, with where each was configured (2.1.330 on);
    /// at most [`MAX_MCP_SERVERS`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp_servers: Vec<McpServerInfo>,
}

/// The most MCP servers a view lists (as many as a session's policy tells apart).
pub const MAX_MCP_SERVERS: usize = crate::policy::when::MAX_MCP_SERVERS;

/// An MCP server as the CLI's `init` listed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpServerInfo {
    /// Its name, as configured.
    pub name: String,
    /// `connected`, `failed`, `needs-auth`, ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Where it was configured (`user`, `project`, `dynamic`, `plugin`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

fn is_zero(count: &u64) -> bool {
    *count == 0
}

/// The most usage windows a view keeps (the CLI's names are its own output).
pub const MAX_USAGE_WINDOWS: usize = 8;

impl Update {
    /// Its `update` tag: `text_delta`, `block`, ...
    pub fn kind(&self) -> &'static str {
        match self {
            Update::Started { .. } => "started",
            Update::Prompt { .. } => "prompt",
            Update::Dequeued => "dequeued",
            Update::MessageStarted { .. } => "message_started",
            Update::TextDelta { .. } => "text_delta",
            Update::ThinkingDelta { .. } => "thinking_delta",
            Update::ToolUseStarted { .. } => "tool_use_started",
            Update::ToolInputDelta { .. } => "tool_input_delta",
            Update::Block { .. } => "block",
            Update::ToolResult { .. } => "tool_result",
            Update::PermissionAsked(_) => "permission_asked",
            Update::PermissionDecided { .. } => "permission_decided",
            Update::TurnEnded { .. } => "turn_ended",
            Update::State { .. } => "state",
            Update::Model { .. } => "model",
            Update::Mode { .. } => "mode",
            Update::ClaudeSession { .. } => "claude_session",
            Update::Notice { .. } => "notice",
            Update::UsageWindows { .. } => "usage_windows",
            Update::Retracted { .. } => "retracted",
            Update::ConversationReset { .. } => "conversation_reset",
            Update::BackgroundTasks { .. } => "background_tasks",
            Update::PromptSuggestion { .. } => "prompt_suggestion",
            Update::PromptCancelled { .. } => "prompt_cancelled",
        }
    }

    /// Whether it changes what a session list shows (state, model, mode, cost, title, cwd,
    /// waiting requests).
    pub fn changes_summary(&self) -> bool {
        matches!(
            self,
            Update::Started { .. }
                | Update::Prompt { .. }
                | Update::TurnEnded { parent_tool_use_id: None, .. }
                | Update::PermissionAsked(_)
                | Update::PermissionDecided { .. }
                | Update::State { .. }
                | Update::Model { .. }
                | Update::Mode { .. }
                | Update::ClaudeSession { .. }
        )
    }

    /// The streamed piece this update is, if it is one: its block's message id and index.
    fn streamed_piece(&self) -> Option<(&str, u64)> {
        match self {
            Update::TextDelta { message_id, index, .. }
            | Update::ThinkingDelta { message_id, index, .. } => Some((message_id, *index)),
            _ => None,
        }
    }
}

/// Drops, from a stretch of history, every streamed piece whose whole block follows in the
/// same stretch: someone reading history needs the block, not how it arrived. Live updates
/// are never settled. `update` finds an item's update (`None`: the item is none, and stays).
pub fn settle<T>(items: &mut Vec<T>, update: impl Fn(&T) -> Option<&Update>) {
    let mut finished: std::collections::HashSet<(String, u64)> = Default::default();
    let mut finished_tools: std::collections::HashSet<String> = Default::default();
    let mut keep = vec![true; items.len()];
    for (position, item) in items.iter().enumerate().rev() {
        let Some(update) = update(item) else { continue };
        match update {
            Update::Block { message_id, index, block, .. } => {
                finished.insert((message_id.clone(), *index));
                if let Block::ToolUse { tool_use_id, .. } = block {
                    finished_tools.insert(tool_use_id.clone());
                }
            }
            Update::ToolInputDelta { tool_use_id, .. } => {
                keep[position] = !finished_tools.contains(tool_use_id);
            }
            other => {
                if let Some((message_id, index)) = other.streamed_piece() {
                    keep[position] = !finished.contains(&(message_id.to_owned(), index));
                }
            }
        }
    }
    let mut position = 0;
    items.retain(|_| {
        position += 1;
        keep[position - 1]
    });
}
