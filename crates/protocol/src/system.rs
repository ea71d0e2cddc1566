//! `type:"system"` messages, chosen by `subtype`.

use serde_json::{Number, Value};

use crate::permission::PermissionMode;
use crate::wire::{wire_enum, wire_struct, Num};

wire_enum! {
    /// A `system` line.
    pub enum SystemMessage by "subtype" {
        /// Opens **every** turn (not just the first), with tools, model, mode and session id.
        Init(SystemInit) = "init",
        /// `status:"requesting"` before API calls (2.1.330), `"compacting"`, or `null` with a new
        /// `permissionMode`.
        Status(SystemStatus) = "status",
        /// The conversation was compacted.
        CompactBoundary(CompactBoundary) = "compact_boundary",
        /// 2.1.330: an API call failed and will be retried.
        ApiRetry(ApiRetry) = "api_retry",
        /// 2.1.330: an estimate of thinking tokens so far.
        ThinkingTokens(ThinkingTokens) = "thinking_tokens",
        /// 2.1.330: a subagent or background task started.
        TaskStarted(TaskEvent) = "task_started",
        /// 2.1.330: a task made progress.
        TaskProgress(TaskEvent) = "task_progress",
        /// 2.1.330: a task's state changed (`patch`).
        TaskUpdated(TaskEvent) = "task_updated",
        /// A task finished.
        TaskNotification(TaskEvent) = "task_notification",
        /// 2.1.330: the set of background tasks changed.
        BackgroundTasksChanged(BackgroundTasksChanged) = "background_tasks_changed",
        /// 2.1.330: a tool call was denied without asking (the mode or a rule said no).
        PermissionDenied(PermissionDenied) = "permission_denied",
        /// A hook started.
        HookStarted(HookEvent) = "hook_started",
        /// A hook printed something.
        HookProgress(HookEvent) = "hook_progress",
        /// A hook finished.
        HookResponse(HookEvent) = "hook_response",
        /// Files were uploaded.
        FilesPersisted(FilesPersisted) = "files_persisted",
        /// 2.1.330: words for a person (a hook's feedback, a status line, why auto mode cannot
        /// check); with `prevent_continuation` the turn stops after it.
        Informational(Informational) = "informational",
        /// With `CLAUDE_CODE_EMIT_SESSION_STATE_EVENTS=1` (2.1.100 on): `running`,
        /// `requires_action`, `idle`; `idle` comes once held-back results and background agents
        /// are done: the CLI's own word that the turn is over.
        SessionStateChanged(SessionStateChanged) = "session_state_changed",
        /// A notification the CLI's own screen would show (`key`, `text`, `priority`).
        Notification(SystemNotification) = "notification",
        /// The slash-command list, replaced mid-session (skills found as the agent works).
        CommandsChanged(CommandsChanged) = "commands_changed",
        /// The model refused; the turn is retried once on a fallback model. The messages it
        /// retracted are named.
        ModelRefusalFallback(ModelRefusalFallback) = "model_refusal_fallback",
        /// The model refused, and no retry runs.
        ModelRefusalNoFallback(ModelRefusalFallback) = "model_refusal_no_fallback",
    }
}

wire_struct! {
    /// One of `system/init`'s `mcp_servers`.
    pub struct McpServerEntry {
        /// Its name as configured.
        req name: String = "name",
        /// `connected`, `failed`, `needs-auth`, `pending`, ...
        opt status: String = "status",
        /// Where it was configured (2.1.330 on): `user`, `project`, `local`, `dynamic` (the
        /// session's `--mcp-config`), `plugin`, `sdk`, ...: an open set.
        opt source: String = "source",
    }
}

impl SystemInit {
    /// Its MCP servers, typed; an entry that is not a server's (no `name`) is left out, so that
    /// one odd entry costs that entry, not the `init` (whose session id matters more).
    pub fn mcp_server_list(&self) -> Vec<McpServerEntry> {
        self.mcp_servers
            .iter()
            .flatten()
            .filter_map(|entry| serde_json::from_value(entry.clone()).ok())
            .collect()
    }
}

impl SystemMessage {
    /// `session_id`, for every subtype.
    pub fn session_id(&self) -> Option<&str> {
        match self {
            SystemMessage::Init(m) => Some(m.session_id.as_str()),
            SystemMessage::Status(m) => m.session_id.as_deref(),
            SystemMessage::CompactBoundary(m) => m.session_id.as_deref(),
            SystemMessage::ApiRetry(m) => m.session_id.as_deref(),
            SystemMessage::ThinkingTokens(m) => m.session_id.as_deref(),
            SystemMessage::TaskStarted(m)
            | SystemMessage::TaskProgress(m)
            | SystemMessage::TaskUpdated(m)
            | SystemMessage::TaskNotification(m) => m.session_id.as_deref(),
            SystemMessage::BackgroundTasksChanged(m) => m.session_id.as_deref(),
            SystemMessage::PermissionDenied(m) => m.session_id.as_deref(),
            SystemMessage::HookStarted(m)
            | SystemMessage::HookProgress(m)
            | SystemMessage::HookResponse(m) => m.session_id.as_deref(),
            SystemMessage::FilesPersisted(m) => m.session_id.as_deref(),
            SystemMessage::Informational(m) => m.session_id.as_deref(),
            SystemMessage::SessionStateChanged(m) => m.session_id.as_deref(),
            SystemMessage::Notification(m) => m.session_id.as_deref(),
            SystemMessage::CommandsChanged(m) => m.session_id.as_deref(),
            SystemMessage::ModelRefusalFallback(m) | SystemMessage::ModelRefusalNoFallback(m) => {
                m.session_id.as_deref()
            }
            SystemMessage::Unknown(value) => value.get("session_id").and_then(Value::as_str),
        }
    }
}

wire_struct! {
    /// `system/init`
    pub struct SystemInit tags { "type" = "system", "subtype" = "init" } {
        /// The working directory.
        opt cwd: String = "cwd",
        /// The CLI's session id (first known from here).
        req session_id: String = "session_id",
        /// Tool names.
        opt tools: Vec<String> = "tools",
        /// MCP servers: `{name, status}`, and from 2.1.330 `source` ([`SystemInit::mcp_server_list`]
        /// reads them).
        opt mcp_servers: Vec<Value> = "mcp_servers",
        /// The model in use.
        opt model: String = "model",
        /// The permission mode in force.
        opt permission_mode: PermissionMode = "permissionMode",
        /// Slash command names.
        opt slash_commands: Vec<String> = "slash_commands",
        /// Where the API key came from.
        opt api_key_source: String = "apiKeySource",
        /// The CLI's version.
        opt claude_code_version: String = "claude_code_version",
        /// The output style.
        opt output_style: String = "output_style",
        /// Agent names.
        opt agents: Vec<String> = "agents",
        /// Skill names.
        opt skills: Vec<String> = "skills",
        /// Plugins: `{name, path, source?}`.
        opt plugins: Vec<Value> = "plugins",
        /// Protocol features the CLI says it has, an open set (`interrupt_cancel_queued_v1`:
        /// an `interrupt` with `cancel_queued` also drops the queued prompts). The Agent SDK
        /// documents it; 2.1.250 and newer list it (and `interrupt_receipt_v1`,
        /// `msg_lifecycle_v1`, ...).
        opt capabilities: Vec<String> = "capabilities",
        /// This line's id.
        opt uuid: String = "uuid",
    }
}

wire_struct! {
    /// `system/status`
    pub struct SystemStatus tags { "type" = "system", "subtype" = "status" } {
        /// `requesting`, `compacting`, or `null`.
        opt status: Option<String> = "status",
        /// The new mode, when it changed.
        opt permission_mode: PermissionMode = "permissionMode",
        /// The CLI's session.
        opt session_id: String = "session_id",
        /// This line's id.
        opt uuid: String = "uuid",
    }
}

wire_struct! {
    /// `system/compact_boundary`
    pub struct CompactBoundary tags { "type" = "system", "subtype" = "compact_boundary" } {
        /// `{trigger: manual|auto, pre_tokens}`.
        opt compact_metadata: Value = "compact_metadata",
        /// The CLI's session.
        opt session_id: String = "session_id",
        /// This line's id.
        opt uuid: String = "uuid",
    }
}

wire_struct! {
    /// `system/api_retry` (2.1.330)
    pub struct ApiRetry tags { "type" = "system", "subtype" = "api_retry" } {
        /// Which retry this is (1-based).
        opt attempt: Num = "attempt",
        /// The limit (10 by default; `CLAUDE_CODE_MAX_RETRIES`).
        opt max_retries: Num = "max_retries",
        /// The wait before the retry.
        opt retry_delay_ms: Num = "retry_delay_ms",
        /// The HTTP status that failed.
        opt error_status: Option<u64> = "error_status",
        /// `rate_limit`, `server_error`, `overloaded`, ...
        opt error: String = "error",
        /// The CLI's session.
        opt session_id: String = "session_id",
        /// This line's id.
        opt uuid: String = "uuid",
    }
}

wire_struct! {
    /// `system/thinking_tokens` (2.1.330)
    pub struct ThinkingTokens tags { "type" = "system", "subtype" = "thinking_tokens" } {
        /// Estimated thinking tokens so far.
        opt estimated_tokens: Number = "estimated_tokens",
        /// The increase since the last estimate.
        opt estimated_tokens_delta: Number = "estimated_tokens_delta",
        /// The CLI's session.
        opt session_id: String = "session_id",
        /// This line's id.
        opt uuid: String = "uuid",
    }
}

wire_struct! {
    /// `system/task_started`, `task_progress`, `task_updated`, `task_notification`.
    pub struct TaskEvent {
        /// Always `system`.
        req kind: String = "type",
        /// Which of the four.
        req subtype: String = "subtype",
        /// The task.
        opt task_id: String = "task_id",
        /// The Task/Agent tool call that started it.
        opt tool_use_id: String = "tool_use_id",
        /// What it does.
        opt description: String = "description",
        /// `completed`, `failed`, `stopped` (task_notification).
        opt status: String = "status",
        /// The final summary (task_notification).
        opt summary: String = "summary",
        /// Where its output went (task_notification).
        opt output_file: String = "output_file",
        /// The change (task_updated).
        opt patch: Value = "patch",
        /// The CLI's session.
        opt session_id: String = "session_id",
        /// This line's id.
        opt uuid: String = "uuid",
    }
}

wire_struct! {
    /// `system/background_tasks_changed` (2.1.330)
    pub struct BackgroundTasksChanged tags { "type" = "system", "subtype" = "background_tasks_changed" } {
        /// The tasks now running in the background (the whole set).
        opt tasks: Vec<BackgroundTaskInfo> = "tasks",
        /// The CLI's session.
        opt session_id: String = "session_id",
        /// This line's id.
        opt uuid: String = "uuid",
    }
}

wire_struct! {
    /// One of `background_tasks_changed`'s tasks.
    pub struct BackgroundTaskInfo {
        /// Its id: what `stop_task` names.
        req task_id: String = "task_id",
        /// This run of it.
        opt run_id: String = "run_id",
        /// `local_bash` (a Bash command run in the background), `local_agent` (a subagent), ...
        opt task_type: String = "task_type",
        /// What it does.
        opt description: String = "description",
        /// A subagent's type (`general-purpose`, ...).
        opt subagent_type: String = "subagent_type",
    }
}

wire_struct! {
    /// `system/permission_denied` (2.1.330): a call refused without asking anyone (auto
    /// mode's classifier, `dontAsk`, a safety check with no one to ask).
    pub struct PermissionDenied tags { "type" = "system", "subtype" = "permission_denied" } {
        /// The tool.
        opt tool_name: String = "tool_name",
        /// The call.
        opt tool_use_id: String = "tool_use_id",
        /// The subagent whose call it was.
        opt agent_id: String = "agent_id",
        /// `classifier`, `mode`, `rule`, `safetyCheck`, ...
        opt decision_reason_type: String = "decision_reason_type",
        /// A finer code (`auto_mode_no_check_in_session`).
        opt decision_reason_code: String = "decision_reason_code",
        /// The deciding part's reason.
        opt decision_reason: String = "decision_reason",
        /// What the model is told.
        opt message: String = "message",
        /// The CLI's session.
        opt session_id: String = "session_id",
        /// This line's id.
        opt uuid: String = "uuid",
    }
}

wire_struct! {
    /// `system/hook_started`, `hook_progress`, `hook_response`.
    pub struct HookEvent {
        /// Always `system`.
        req kind: String = "type",
        /// Which of the three.
        req subtype: String = "subtype",
        /// The hook run.
        opt hook_id: String = "hook_id",
        /// The hook's name.
        opt hook_name: String = "hook_name",
        /// The event (`PreToolUse`, ...).
        opt hook_event: String = "hook_event",
        /// Its stdout.
        opt stdout: String = "stdout",
        /// Its stderr.
        opt stderr: String = "stderr",
        /// Its output.
        opt output: String = "output",
        /// Its exit code (hook_response).
        opt exit_code: i64 = "exit_code",
        /// `success`, `error`, `cancelled` (hook_response).
        opt outcome: String = "outcome",
        /// The CLI's session.
        opt session_id: String = "session_id",
        /// This line's id.
        opt uuid: String = "uuid",
    }
}

wire_struct! {
    /// `system/files_persisted`
    pub struct FilesPersisted tags { "type" = "system", "subtype" = "files_persisted" } {
        /// `{filename, file_id}`.
        opt files: Vec<Value> = "files",
        /// `{filename, error}`.
        opt failed: Vec<Value> = "failed",
        /// When.
        opt processed_at: String = "processed_at",
        /// The CLI's session.
        opt session_id: String = "session_id",
        /// This line's id.
        opt uuid: String = "uuid",
    }
}

wire_struct! {
    /// `system/informational` (2.1.330)
    pub struct Informational tags { "type" = "system", "subtype" = "informational" } {
        /// The words, as plain text.
        req content: String = "content",
        /// `info`, `notice`, `suggestion`, `warning`.
        opt level: String = "level",
        /// The tool call it is about.
        opt tool_use_id: String = "tool_use_id",
        /// The turn stops after it (a Stop hook said no).
        opt prevent_continuation: bool = "prevent_continuation",
        /// A feature tag.
        opt tag: String = "tag",
        /// The CLI's session.
        opt session_id: String = "session_id",
        /// This line's id.
        opt uuid: String = "uuid",
    }
}

wire_struct! {
    /// `system/session_state_changed`
    pub struct SessionStateChanged tags { "type" = "system", "subtype" = "session_state_changed" } {
        /// `idle`, `running`, `requires_action`.
        req state: String = "state",
        /// The CLI's session.
        opt session_id: String = "session_id",
        /// This line's id.
        opt uuid: String = "uuid",
    }
}

wire_struct! {
    /// `system/notification`
    pub struct SystemNotification tags { "type" = "system", "subtype" = "notification" } {
        /// What it is about (one shown at a time per key).
        opt notification_key: String = "key",
        /// The words.
        req text: String = "text",
        /// `low`, `medium`, `high`, `immediate`.
        opt priority: String = "priority",
        /// How long the CLI's own screen shows it.
        opt timeout_ms: Num = "timeout_ms",
        /// The CLI's session.
        opt session_id: String = "session_id",
        /// This line's id.
        opt uuid: String = "uuid",
    }
}

wire_struct! {
    /// `system/commands_changed`: replaces the slash-command list.
    pub struct CommandsChanged tags { "type" = "system", "subtype" = "commands_changed" } {
        /// The whole list now.
        req commands: Vec<crate::control::SlashCommand> = "commands",
        /// The CLI's session.
        opt session_id: String = "session_id",
        /// This line's id.
        opt uuid: String = "uuid",
    }
}

wire_struct! {
    /// `system/model_refusal_fallback` and `system/model_refusal_no_fallback`.
    pub struct ModelRefusalFallback {
        /// Always `system`.
        req kind: String = "type",
        /// Which of the two.
        req subtype: String = "subtype",
        /// The model that refused.
        opt original_model: String = "original_model",
        /// The model that retries (`model_refusal_fallback`).
        opt fallback_model: String = "fallback_model",
        /// `session` (the session's model is swapped) or `local` (a subagent's answer only).
        opt scope: String = "scope",
        /// The refusal's category (`cyber`, `bio`, ...), when known.
        opt api_refusal_category: Option<String> = "api_refusal_category",
        /// The messages taken back: the refused partial answer and its tool results. Taken out
        /// of the view; the log keeps them.
        opt retracted_message_uuids: Vec<String> = "retracted_message_uuids",
        /// The prompt the refused request answered.
        opt refused_user_message_uuid: Option<String> = "refused_user_message_uuid",
        /// Words for a person.
        opt content: String = "content",
        /// The CLI's session.
        opt session_id: String = "session_id",
        /// This line's id.
        opt uuid: String = "uuid",
    }
}
