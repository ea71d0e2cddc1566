//! The control protocol: requests in both directions, their responses, and cancellation.
//!
//! Every `control_request` carries a `request_id`; exactly one `control_response` with the same
//! id answers it (2.1.37 answers `set_permission_mode` twice and never answers an unknown
//! subtype: see `docs/protocol.md`).

use indexmap::IndexMap;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::permission::{PermissionMode, PermissionResult, PermissionUpdate};
use crate::wire::{wire_enum, wire_from, wire_struct, Extra, RawJson};

wire_struct! {
    /// `{"type":"control_request","request_id":...,"request":{"subtype":...}}`
    pub struct ControlRequest tags { "type" = "control_request" } {
        /// Correlates the response. Ours are unique per session; the CLI's are UUIDs.
        req request_id: String = "request_id",
        /// What is asked.
        req request: ControlRequestPayload = "request",
    }
}

impl ControlRequest {
    /// A request with the given id and payload.
    pub fn new(request_id: impl Into<String>, request: impl Into<ControlRequestPayload>) -> Self {
        ControlRequest {
            request_id: request_id.into(),
            request: request.into(),
            extra: Extra::new(),
        }
    }

    /// The payload's subtype (also for unknown payloads, when they carry one).
    pub fn subtype(&self) -> Option<&str> {
        self.request.tag()
    }
}

wire_enum! {
    /// The control subtypes of the stream-json control protocol, chosen by `subtype`.
    pub enum ControlRequestPayload by "subtype" {
        /// Host → CLI: register hooks, agents, prompts. Optional; see [`InitializeRequest`].
        Initialize(InitializeRequest) = "initialize",
        /// CLI → host: may this tool run?
        CanUseTool(CanUseToolRequest) = "can_use_tool",
        /// Host → CLI: stop the current turn.
        Interrupt(InterruptRequest) = "interrupt",
        /// Host → CLI: switch the permission mode.
        SetPermissionMode(SetPermissionModeRequest) = "set_permission_mode",
        /// Host → CLI: switch the model (from the next turn).
        SetModel(SetModelRequest) = "set_model",
        /// Host → CLI: set the thinking budget.
        SetMaxThinkingTokens(SetMaxThinkingTokensRequest) = "set_max_thinking_tokens",
        /// Host → CLI: list MCP servers.
        McpStatus(McpStatusRequest) = "mcp_status",
        /// Either way: a JSON-RPC message for an SDK MCP server.
        McpMessage(McpMessageRequest) = "mcp_message",
        /// Host → CLI: reconnect an MCP server.
        McpReconnect(McpReconnectRequest) = "mcp_reconnect",
        /// Host → CLI: enable or disable an MCP server.
        McpToggle(McpToggleRequest) = "mcp_toggle",
        /// Host → CLI: replace the MCP server set.
        McpSetServers(McpSetServersRequest) = "mcp_set_servers",
        /// Host → CLI: restore files to a checkpoint.
        RewindFiles(RewindFilesRequest) = "rewind_files",
        /// CLI → host: run a hook registered in `initialize`.
        HookCallback(HookCallbackRequest) = "hook_callback",
        /// Host → CLI (2.1.250 on): the session's cost and the plan's usage windows.
        GetUsage(GetUsageRequest) = "get_usage",
        /// Host → CLI (2.1.100 on): the context window, by what fills it.
        GetContextUsage(GetContextUsageRequest) = "get_context_usage",
        /// Host → CLI (2.1.100 on): drop a queued prompt by its `uuid`.
        CancelAsyncMessage(CancelAsyncMessageRequest) = "cancel_async_message",
        /// Host → CLI (2.1.100 on): stop one background task.
        StopTask(StopTaskRequest) = "stop_task",
        /// Host → CLI (2.1.330): the session's title.
        RenameSession(RenameSessionRequest) = "rename_session",
        /// Host → CLI (2.1.330): the permission rules in force.
        ListPermissionRules(ListPermissionRulesRequest) = "list_permission_rules",
        /// Host → CLI (2.1.330): the hooks configured, as the `/hooks` menu lists them.
        GetHooksListing(GetHooksListingRequest) = "get_hooks_listing",
        /// CLI → host (2.1.100 on): an MCP server asks the person for input.
        Elicitation(ElicitationRequest) = "elicitation",
    }
}

wire_struct! {
    /// `elicitation`: an MCP server's `elicitation/create`, passed on by the CLI (2.1.100 on;
    /// 2.1.37 answers the server "Method not found"). Answered with an [`ElicitationResult`].
    pub struct ElicitationRequest tags { "subtype" = "elicitation" } {
        /// The asking server.
        req mcp_server_name: String = "mcp_server_name",
        /// What it asks, in its words.
        req message: String = "message",
        /// `form` (fill in `requested_schema`) or `url` (open `url`).
        opt mode: String = "mode",
        /// URL mode: where to go.
        opt url: String = "url",
        /// URL mode: the id its completion names.
        opt elicitation_id: String = "elicitation_id",
        /// Form mode: a flat JSON schema (an object of strings, numbers, booleans, enums).
        opt requested_schema: Value = "requested_schema",
        /// The schema's properties in the server's order.
        opt property_order: Vec<String> = "property_order",
        /// A heading from the server's `_meta`.
        opt title: String = "title",
        /// A short label from the server's `_meta`.
        opt display_name: String = "display_name",
        /// A subtitle from the server's `_meta`.
        opt description: String = "description",
    }
}

wire_struct! {
    /// The answer to an [`ElicitationRequest`] (MCP's `ElicitResult`).
    pub struct ElicitationResult {
        /// `accept` (with `content`), `decline`, or `cancel`.
        req action: String = "action",
        /// What the person filled in.
        opt content: Map<String, Value> = "content",
    }
}

wire_struct! {
    /// `get_usage`
    pub struct GetUsageRequest tags { "subtype" = "get_usage" } {
        /// Skip the scan of the last week's transcripts (the answer's `behaviors` is `null`).
        opt skip_behaviors: bool = "skip_behaviors",
    }
}

wire_struct! {
    /// `get_context_usage`
    pub struct GetContextUsageRequest tags { "subtype" = "get_context_usage" } {
        /// `summary` (from the last answer's usage, no token-count calls) or `full`.
        opt detail: String = "detail",
    }
}

wire_struct! {
    /// `cancel_async_message`: answered `{"cancelled": bool}`.
    pub struct CancelAsyncMessageRequest tags { "subtype" = "cancel_async_message" } {
        /// The queued prompt's `uuid`.
        req message_uuid: String = "message_uuid",
    }
}

wire_struct! {
    /// `stop_task`
    pub struct StopTaskRequest tags { "subtype" = "stop_task" } {
        /// The task (`system/task_started`'s `task_id`).
        req task_id: String = "task_id",
    }
}

wire_struct! {
    /// `rename_session`
    pub struct RenameSessionRequest tags { "subtype" = "rename_session" } {
        /// The title.
        req title: String = "title",
        /// `host` (a person renamed it in the host) or `remote`.
        opt source: String = "source",
        /// Refused if the CLI has moved on to another session since.
        opt session_id: String = "session_id",
    }
}

wire_struct! {
    /// `list_permission_rules`
    pub struct ListPermissionRulesRequest tags { "subtype" = "list_permission_rules" } {}
}

wire_struct! {
    /// `get_hooks_listing`
    pub struct GetHooksListingRequest tags { "subtype" = "get_hooks_listing" } {}
}

wire_struct! {
    /// `initialize`. Both CLI versions accept it before the first user message; only 2.1.330
    /// accepts it later (2.1.37 answers "Already initialized"). Sent again, it returns the
    /// pending permission requests in the response envelope.
    pub struct InitializeRequest tags { "subtype" = "initialize" } {
        /// Hook event name (`PreToolUse`, `PostToolUse`, `Stop`, ...) → matchers with callback ids.
        opt hooks: IndexMap<String, Vec<HookMatcher>> = "hooks",
        /// Names of SDK-hosted MCP servers.
        opt sdk_mcp_servers: Vec<String> = "sdkMcpServers",
        /// JSON schema for structured output.
        opt json_schema: Value = "jsonSchema",
        /// Replaces the system prompt.
        opt system_prompt: String = "systemPrompt",
        /// Appended to the system prompt.
        opt append_system_prompt: String = "appendSystemPrompt",
        /// Custom agents by name.
        opt agents: Map<String, Value> = "agents",
        /// The host shows a Stop for each background task (`stop_task`), so an interrupt stops
        /// the turn only: found with 2.1.330, a background subagent outlives an interrupt with
        /// it and is killed by one without. Every pinned version takes the field.
        opt per_task_stop_affordance: bool = "perTaskStopAffordance",
        /// Ask for a `prompt_suggestion` after each turn but the first (2.1.120 on; one more
        /// request to the model, on the turn's prompt cache).
        opt prompt_suggestions: bool = "promptSuggestions",
    }
}

wire_struct! {
    /// One hook matcher in `initialize.hooks[event]`.
    pub struct HookMatcher {
        /// Tool-name pattern (`Bash`, `Edit|Write`); absent or `null` (as the SDKs write it)
        /// matches all.
        opt matcher: Option<String> = "matcher",
        /// The ids the CLI sends back in `hook_callback.callback_id`.
        req hook_callback_ids: Vec<String> = "hookCallbackIds",
        /// Seconds the CLI waits for the answer.
        opt timeout: u64 = "timeout",
    }
}

impl InitializeRequest {
    /// Registers callback ids for one hook event (`PreToolUse`, `Stop`, ...).
    pub fn with_hook(mut self, event: &str, matchers: Vec<HookMatcher>) -> Self {
        self.hooks
            .get_or_insert_with(IndexMap::new)
            .entry(event.to_owned())
            .or_default()
            .extend(matchers);
        self
    }
}

wire_struct! {
    /// `can_use_tool`: the CLI asks whether a tool call may run.
    pub struct CanUseToolRequest tags { "subtype" = "can_use_tool" } {
        /// The tool.
        req tool_name: String = "tool_name",
        /// 2.1.330: the name to show a person.
        opt display_name: String = "display_name",
        /// The tool's arguments.
        req input: Value = "input",
        /// 2.1.330: the Bash description, or the file name for Write.
        opt description: String = "description",
        /// Rule changes the CLI offers ("always allow"). Echoing them back unchanged may write
        /// to the project's settings file: see [`PermissionUpdate::into_session_scoped`].
        opt permission_suggestions: Vec<PermissionUpdate> = "permission_suggestions",
        /// The path that made the call need permission.
        opt blocked_path: String = "blocked_path",
        /// Why the CLI asks (a hook's reason, for one).
        opt decision_reason: String = "decision_reason",
        /// 2.1.330: `mode`, `hook`, `other`, ...
        opt decision_reason_type: String = "decision_reason_type",
        /// The `tool_use` block this call came from.
        opt tool_use_id: String = "tool_use_id",
        /// The subagent that makes the call.
        opt agent_id: String = "agent_id",
        /// 2.1.330: a person must answer in the session itself: no one-tap approve, no stored
        /// grant or automatic approval (AskUserQuestion; an auto-mode classifier's block).
        opt requires_user_interaction: bool = "requires_user_interaction",
        /// 2.1.330, with a built-in safety check: `false` when one of them takes a person's
        /// approval (`rm -rf ~/`), `true` when each may be approved automatically (a sensitive
        /// file's path). Absent without a safety check.
        opt classifier_approvable: bool = "classifier_approvable",
        /// 2.1.330: no "always allow" for this ask (the rule would be broader than the call).
        opt suppress_always_allow_rule: bool = "suppress_always_allow_rule",
        /// 2.1.330: approve must not be one stray key away; nothing is preselected.
        opt default_to_no: bool = "default_to_no",
        /// 2.1.330: the person's own `permissions.ask` rule that forced this ask.
        opt matched_ask_rule: MatchedAskRule = "matched_ask_rule",
        /// 2.1.330: the ask's own heading, when the CLI words one.
        opt title: String = "title",
        /// 2.1.330, an MCP tool: the server it comes from.
        opt mcp_server: McpServerProvenance = "mcp_server",
        /// 2.1.330, `decision_reason_type` `hook`: the hook event that asked (`PreToolUse`).
        opt decision_reason_hook_event: String = "decision_reason_hook_event",
        /// 2.1.330, `decision_reason_type` `hook`: where that hook is configured (`settings`).
        opt decision_reason_hook_source: String = "decision_reason_hook_source",
    }
}

wire_struct! {
    /// `can_use_tool.matched_ask_rule`: a `permissions.ask` rule that made the CLI ask.
    pub struct MatchedAskRule {
        /// The settings it is in (`userSettings`, `projectSettings`, ...).
        req source: String = "source",
        /// The tool the rule names.
        req tool_name: String = "tool_name",
        /// The rule's content (`git push *`), when it has one.
        opt rule_content: String = "rule_content",
    }
}

wire_struct! {
    /// `can_use_tool.mcp_server`: an MCP tool's server and where it was configured.
    pub struct McpServerProvenance {
        /// The server's name.
        req name: String = "name",
        /// `sdk`, `plugin`, `user`, `project`, `local`, `dynamic`, `managed`, `enterprise`,
        /// `claudeai`, `agent`: an open set.
        req source: String = "source",
    }
}

wire_struct! {
    /// `interrupt`
    pub struct InterruptRequest tags { "subtype" = "interrupt" } {
        /// Also drop every queued prompt (each told `cancelled`). Honoured where init's
        /// `capabilities` list `interrupt_cancel_queued_v1`; older CLIs ignore it.
        opt cancel_queued: bool = "cancel_queued",
    }
}

wire_struct! {
    /// `set_permission_mode`
    pub struct SetPermissionModeRequest tags { "subtype" = "set_permission_mode" } {
        /// The new mode.
        req mode: PermissionMode = "mode",
    }
}

wire_struct! {
    /// `set_model`
    pub struct SetModelRequest tags { "subtype" = "set_model" } {
        /// A model id or alias; `default` resets. Absent also resets.
        opt model: String = "model",
    }
}

wire_struct! {
    /// `set_max_thinking_tokens`
    pub struct SetMaxThinkingTokensRequest tags { "subtype" = "set_max_thinking_tokens" } {
        /// The budget; `null` turns the override off.
        nul max_thinking_tokens: u64 = "max_thinking_tokens",
    }
}

wire_struct! {
    /// `mcp_status`
    pub struct McpStatusRequest tags { "subtype" = "mcp_status" } {}
}

wire_struct! {
    /// `mcp_message`
    pub struct McpMessageRequest tags { "subtype" = "mcp_message" } {
        /// The SDK MCP server.
        req server_name: String = "server_name",
        /// The JSON-RPC message.
        req message: Value = "message",
    }
}

wire_struct! {
    /// `mcp_reconnect`
    pub struct McpReconnectRequest tags { "subtype" = "mcp_reconnect" } {
        /// The server.
        req server_name: String = "serverName",
    }
}

wire_struct! {
    /// `mcp_toggle`
    pub struct McpToggleRequest tags { "subtype" = "mcp_toggle" } {
        /// The server.
        req server_name: String = "serverName",
        /// On or off.
        req enabled: bool = "enabled",
    }
}

wire_struct! {
    /// `mcp_set_servers`
    pub struct McpSetServersRequest tags { "subtype" = "mcp_set_servers" } {
        /// Name → `{type, command?, args?, env?, url?}`.
        req servers: Map<String, Value> = "servers",
    }
}

wire_struct! {
    /// `rewind_files`
    pub struct RewindFilesRequest tags { "subtype" = "rewind_files" } {
        /// The user message whose checkpoint to restore.
        req user_message_id: String = "user_message_id",
        /// Only report what would change.
        opt dry_run: bool = "dry_run",
    }
}

wire_struct! {
    /// `hook_callback`: the CLI runs a hook the host registered.
    pub struct HookCallbackRequest tags { "subtype" = "hook_callback" } {
        /// One of the ids from `initialize.hooks`.
        req callback_id: String = "callback_id",
        /// The hook input: `hook_event_name`, `tool_name`, `tool_input`, `session_id`, ...
        req input: Value = "input",
        /// The tool call, for tool hooks.
        opt tool_use_id: String = "tool_use_id",
    }
}

impl HookCallbackRequest {
    /// `input.hook_event_name` (`PreToolUse`, `PostToolUse`, `Stop`, ...).
    pub fn hook_event_name(&self) -> Option<&str> {
        self.input.get("hook_event_name").and_then(Value::as_str)
    }
}

macro_rules! payload_from_unit {
    ($($ty:ident),*) => {$(
        impl $ty {
            /// The request with no arguments.
            pub fn new() -> Self {
                Self::default()
            }
        }
    )*};
}
payload_from_unit!(InterruptRequest, McpStatusRequest);

wire_struct! {
    /// `{"type":"control_response","response":{...}}`
    pub struct ControlResponse tags { "type" = "control_response" } {
        /// Success or error, with the request id.
        req response: ControlResponseBody = "response",
    }
}

wire_enum! {
    /// The body of a control response, chosen by `subtype`.
    pub enum ControlResponseBody by "subtype" {
        /// The request succeeded.
        Success(ControlSuccess) = "success",
        /// The request failed.
        Error(ControlError) = "error",
    }
}

wire_struct! {
    /// `{"subtype":"success","request_id":...,"response":{...}}`
    pub struct ControlSuccess tags { "subtype" = "success" } {
        /// The request answered.
        req request_id: String = "request_id",
        /// The payload, kept as raw JSON until asked for a type: its shape depends on the
        /// request (see [`ControlSuccess::payload`]). 2.1.37 omits it for `interrupt`,
        /// `set_model` and `set_max_thinking_tokens`.
        opt response: RawJson = "response",
        /// Re-sent `initialize`: every `can_use_tool` still waiting (2.1.330 puts them here).
        opt pending_permission_requests: Vec<ControlRequest> = "pending_permission_requests",
    }
}

wire_struct! {
    /// `{"subtype":"error","request_id":...,"error":...}`
    pub struct ControlError tags { "subtype" = "error" } {
        /// The request answered.
        req request_id: String = "request_id",
        /// What went wrong.
        req error: String = "error",
        /// 2.1.330: `unsupported_request`, `bypass_not_launched`, ...
        opt error_code: String = "error_code",
        /// Re-sent `initialize` on 2.1.37 ("Already initialized"): the pending requests.
        opt pending_permission_requests: Vec<ControlRequest> = "pending_permission_requests",
    }
}

impl ControlResponse {
    /// The request id this answers.
    pub fn request_id(&self) -> Option<&str> {
        match &self.response {
            ControlResponseBody::Success(success) => Some(&success.request_id),
            ControlResponseBody::Error(error) => Some(&error.request_id),
            ControlResponseBody::Unknown(value) => value.get("request_id").and_then(Value::as_str),
        }
    }

    /// A success response carrying `payload`.
    pub fn success<T: Serialize>(request_id: impl Into<String>, payload: &T) -> Self {
        let raw = serde_json::value::to_raw_value(payload).ok().map(RawJson);
        ControlResponse {
            response: ControlResponseBody::Success(ControlSuccess {
                request_id: request_id.into(),
                response: raw,
                ..ControlSuccess::default()
            }),
            extra: Extra::new(),
        }
    }

    /// The answer to a `can_use_tool` request.
    pub fn permission(request_id: impl Into<String>, result: &PermissionResult) -> Self {
        Self::success(request_id, result)
    }

    /// An error response (for control requests from the CLI this host cannot serve).
    pub fn error(request_id: impl Into<String>, error: impl Into<String>) -> Self {
        ControlResponse {
            response: ControlResponseBody::Error(ControlError {
                request_id: request_id.into(),
                error: error.into(),
                ..ControlError::default()
            }),
            extra: Extra::new(),
        }
    }

    /// The permission requests a re-sent `initialize` reported as still pending, wherever the
    /// CLI version put them (error body on 2.1.37, success body on 2.1.330).
    pub fn pending_permission_requests(&self) -> &[ControlRequest] {
        match &self.response {
            ControlResponseBody::Success(success) => success.pending_permission_requests.as_deref(),
            ControlResponseBody::Error(error) => error.pending_permission_requests.as_deref(),
            ControlResponseBody::Unknown(_) => None,
        }
        .unwrap_or(&[])
    }
}

wire_from!(ControlRequestPayload {
    Initialize(InitializeRequest),
    CanUseTool(CanUseToolRequest),
    Interrupt(InterruptRequest),
    SetPermissionMode(SetPermissionModeRequest),
    SetModel(SetModelRequest),
    SetMaxThinkingTokens(SetMaxThinkingTokensRequest),
    McpStatus(McpStatusRequest),
    McpMessage(McpMessageRequest),
    McpReconnect(McpReconnectRequest),
    McpToggle(McpToggleRequest),
    McpSetServers(McpSetServersRequest),
    RewindFiles(RewindFilesRequest),
    HookCallback(HookCallbackRequest),
});

impl ControlSuccess {
    /// The payload read as `T` (for example [`InitializeResponse`], [`PermissionResult`],
    /// [`HookOutput`]). `None` when the response has no payload.
    pub fn payload<T: serde::de::DeserializeOwned>(&self) -> Option<Result<T, serde_json::Error>> {
        self.response.as_ref().map(|raw| serde_json::from_str(raw.get()))
    }
}

wire_struct! {
    /// `{"type":"control_cancel_request","request_id":...}`: the CLI withdraws its own request
    /// (it does so for a pending `can_use_tool` on interrupt). Never send one to the CLI:
    /// 2.1.37 exits on it.
    pub struct ControlCancelRequest tags { "type" = "control_cancel_request" } {
        /// The request withdrawn.
        req request_id: String = "request_id",
    }
}

wire_struct! {
    /// The payload of a `rewind_files` success: `{"canRewind": true}`, and for a dry run what
    /// would change. The real CLI's `filesChanged` is an array of the paths (the SDK's types
    /// say a number): [`RewindFilesResponse::files`] and [`RewindFilesResponse::count`] read
    /// either. A dry run that cannot answers `canRewind: false` with an `error`.
    pub struct RewindFilesResponse {
        /// Whether the files can be (a rewind: were) put back.
        opt can_rewind: bool = "canRewind",
        /// The paths that would change (or their number).
        opt files_changed: Value = "filesChanged",
        /// Lines that would come back.
        opt insertions: u64 = "insertions",
        /// Lines that would go.
        opt deletions: u64 = "deletions",
        /// Why not.
        opt error: String = "error",
    }
}

impl RewindFilesResponse {
    /// Whether it could (without `canRewind`: when it says no error).
    pub fn can(&self) -> bool {
        self.can_rewind.unwrap_or(self.error.is_none())
    }

    /// The paths that would change, when the CLI listed them.
    pub fn files(&self) -> Option<Vec<&str>> {
        let paths = self.files_changed.as_ref()?.as_array()?;
        Some(paths.iter().filter_map(Value::as_str).collect())
    }

    /// How many files would change.
    pub fn count(&self) -> Option<u64> {
        let changed = self.files_changed.as_ref()?;
        changed.as_array().map(|paths| paths.len() as u64).or_else(|| changed.as_u64())
    }
}

wire_struct! {
    /// The payload of the `initialize` success response.
    pub struct InitializeResponse {
        /// Slash commands: `{name, description, argumentHint}`.
        opt commands: Vec<SlashCommand> = "commands",
        /// The output style in use.
        opt output_style: String = "output_style",
        /// Styles to choose from.
        opt available_output_styles: Vec<String> = "available_output_styles",
        /// Models to choose from.
        opt models: Vec<ModelInfo> = "models",
        /// The account the CLI runs as.
        opt account: Value = "account",
        /// 2.1.330: agents available.
        opt agents: Value = "agents",
        /// 2.1.330: the CLI's process id.
        opt pid: u64 = "pid",
        /// 2.1.330: the CLI's version.
        opt claude_code_version: String = "claude_code_version",
        /// 2.1.330: the mode in force.
        opt current_permission_mode: PermissionMode = "current_permission_mode",
    }
}

wire_struct! {
    /// One entry of `initialize.commands`.
    pub struct SlashCommand {
        /// The command, without the slash.
        req name: String = "name",
        /// What it does.
        opt description: String = "description",
        /// Its argument syntax.
        opt argument_hint: String = "argumentHint",
    }
}

wire_struct! {
    /// One entry of `initialize.models`.
    pub struct ModelInfo {
        /// The id or alias to pass to `set_model`.
        req value: String = "value",
        /// What to show.
        opt display_name: String = "displayName",
        /// A description.
        opt description: String = "description",
    }
}

wire_struct! {
    /// The payload a hook callback answers with (`PreToolUse`, `PostToolUse`, `Stop`, ...).
    pub struct HookOutput {
        /// `false` stops the agent.
        opt continue_: bool = "continue",
        /// Hide the hook's output from the transcript.
        opt suppress_output: bool = "suppressOutput",
        /// Shown when `continue` is false.
        opt stop_reason: String = "stopReason",
        /// `approve` or `block` (`Stop` and `SubagentStop` hooks).
        opt decision: String = "decision",
        /// Why, for `decision`.
        opt reason: String = "reason",
        /// A message shown to the user.
        opt system_message: String = "systemMessage",
        /// Event-specific output, e.g. the PreToolUse permission decision.
        opt hook_specific_output: HookSpecificOutput = "hookSpecificOutput",
    }
}

wire_struct! {
    /// `hookSpecificOutput`.
    pub struct HookSpecificOutput {
        /// `PreToolUse`, `PostToolUse`, `UserPromptSubmit`, `PermissionRequest`.
        req hook_event_name: String = "hookEventName",
        /// PreToolUse: `allow` (runs without `can_use_tool`), `deny`, or `ask`.
        opt permission_decision: String = "permissionDecision",
        /// PreToolUse: why; the model sees it on deny.
        opt permission_decision_reason: String = "permissionDecisionReason",
        /// PreToolUse: replacement input.
        opt updated_input: Value = "updatedInput",
        /// Extra context for the model.
        opt additional_context: String = "additionalContext",
    }
}

impl HookOutput {
    /// A PreToolUse answer: `decision` is `allow`, `deny` or `ask`.
    pub fn pre_tool_use(decision: &str, reason: impl Into<String>) -> Self {
        HookOutput {
            hook_specific_output: Some(HookSpecificOutput {
                hook_event_name: "PreToolUse".to_owned(),
                permission_decision: Some(decision.to_owned()),
                permission_decision_reason: Some(reason.into()),
                ..HookSpecificOutput::default()
            }),
            ..HookOutput::default()
        }
    }

    /// A Stop-hook answer: `approve` lets the agent stop, `block` makes it go on with `reason`.
    pub fn stop(decision: &str, reason: impl Into<String>) -> Self {
        HookOutput {
            decision: Some(decision.to_owned()),
            reason: Some(reason.into()),
            ..HookOutput::default()
        }
    }
}

/// The `updatedPermissions` to send for a person's "always allow", from the CLI's own
/// suggestions: rules and directories scoped to the session, mode switches dropped.
pub fn session_grants(suggestions: &[PermissionUpdate]) -> Vec<PermissionUpdate> {
    suggestions
        .iter()
        .filter(|update| !matches!(update, PermissionUpdate::SetMode(_)))
        .cloned()
        .map(PermissionUpdate::into_session_scoped)
        .collect()
}
