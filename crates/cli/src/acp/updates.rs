//! What an editor is told of a session: the view's updates (the one projection, as every face
//! reads it) in the Agent Client Protocol's words. Nothing here reads a protocol line or does
//! I/O.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use agent_client_protocol::v1::schema::{
    ContentBlock, ContentChunk, CurrentModeUpdate, Diff, Plan, PlanEntry, PlanEntryPriority,
    PlanEntryStatus, SessionUpdate, ToolCall, ToolCallContent, ToolCallLocation, ToolCallStatus,
    ToolCallUpdate, ToolCallUpdateFields, ToolKind,
};
use serde_json::Value;
use switchboard_server::view::ViewUpdate;
use switchboard_session::projection::Block;
use switchboard_session::Update;

/// The most characters of a tool's output an editor is sent (the rest is in the log).
pub(crate) const MAX_OUTPUT_CHARS: usize = 20_000;

/// Turns a session's updates into what the editor is told, remembering what it was told of
/// each tool call.
#[derive(Debug, Default)]
pub(crate) struct Translator {
    /// Tool calls announced (a call's block is seen twice: rebuilt, then as the CLI wrote it).
    announced: HashSet<String>,
    /// Prompts this editor sent (by uuid): not echoed back to it.
    own: HashSet<String>,
    /// The file each edit changes, by call.
    paths: HashMap<String, PathBuf>,
}

impl Translator {
    /// A prompt the editor sent itself, whose echo it is not told.
    pub(crate) fn sent(&mut self, uuid: &str) {
        self.own.insert(uuid.to_owned());
    }

    /// The file call `id` edited, if it was an edit (forgotten then: it is told once).
    pub(crate) fn take_path(&mut self, id: &str) -> Option<PathBuf> {
        self.paths.remove(id)
    }

    /// What the editor is told of `update` read from the session's history, where the pieces
    /// of a text or thinking whose whole block is there are left out: the block is told.
    pub(crate) fn replay(&mut self, update: &ViewUpdate) -> Vec<SessionUpdate> {
        match update {
            ViewUpdate::Session(Update::Block {
                parent_tool_use_id: None,
                block: Block::Text { text },
                ..
            }) => vec![SessionUpdate::AgentMessageChunk(chunk(text))],
            ViewUpdate::Session(Update::Block {
                parent_tool_use_id: None,
                block: Block::Thinking { thinking, .. },
                ..
            }) => vec![SessionUpdate::AgentThoughtChunk(chunk(thinking))],
            other => self.translate(other),
        }
    }

    /// What the editor is told of `update` (nothing for what it has no words for).
    pub(crate) fn translate(&mut self, update: &ViewUpdate) -> Vec<SessionUpdate> {
        let ViewUpdate::Session(update) = update else { return Vec::new() };
        match update {
            Update::Prompt { text, uuid, .. } => {
                // The editor's own, seen once and forgotten (what is kept stays bounded).
                if uuid.as_ref().is_some_and(|uuid| self.own.remove(uuid)) {
                    return Vec::new();
                }
                vec![SessionUpdate::UserMessageChunk(chunk(text))]
            }
            Update::TextDelta { text, parent_tool_use_id: None, .. } => {
                vec![SessionUpdate::AgentMessageChunk(chunk(text))]
            }
            Update::ThinkingDelta { thinking, parent_tool_use_id: None, .. } => {
                vec![SessionUpdate::AgentThoughtChunk(chunk(thinking))]
            }
            Update::Block {
                parent_tool_use_id: None,
                block: Block::ToolUse { tool_use_id, name, input, .. },
                ..
            } => {
                if !self.announced.insert(tool_use_id.clone()) {
                    return Vec::new();
                }
                if kind_of(name) == ToolKind::Edit {
                    if let Some(path) = input.get("file_path").and_then(Value::as_str) {
                        self.paths.insert(tool_use_id.clone(), PathBuf::from(path));
                    }
                }
                let mut updates =
                    vec![SessionUpdate::ToolCall(tool_call(tool_use_id, name, input))];
                if let Some(plan) = plan_of(name, input) {
                    updates.push(SessionUpdate::Plan(plan));
                }
                updates
            }
            Update::ToolResult {
                tool_use_id, parent_tool_use_id: None, is_error, text, ..
            } => {
                // Its result ends a call: its announcement is forgotten (bounded).
                self.announced.remove(tool_use_id);
                let status =
                    if *is_error { ToolCallStatus::Failed } else { ToolCallStatus::Completed };
                let mut fields = ToolCallUpdateFields::new().status(status);
                if !text.is_empty() {
                    let shown = clip(text);
                    fields = fields.content(vec![ToolCallContent::from(ContentBlock::from(shown))]);
                }
                vec![SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
                    tool_use_id.clone(),
                    fields,
                ))]
            }
            Update::Mode { mode } => {
                vec![SessionUpdate::CurrentModeUpdate(CurrentModeUpdate::new(mode.clone()))]
            }
            _ => Vec::new(),
        }
    }
}

fn chunk(text: &str) -> ContentChunk {
    ContentChunk::new(ContentBlock::from(text))
}

fn clip(text: &str) -> String {
    match text.char_indices().nth(MAX_OUTPUT_CHARS) {
        Some((at, _)) => format!("{}\n… ({} characters in all)", &text[..at], text.chars().count()),
        None => text.to_owned(),
    }
}

/// What kind of call a tool makes, as an editor shows it.
pub(crate) fn kind_of(tool: &str) -> ToolKind {
    match tool {
        "Edit" | "MultiEdit" | "Write" | "NotebookEdit" => ToolKind::Edit,
        "Read" | "NotebookRead" => ToolKind::Read,
        "Bash" | "BashOutput" | "KillShell" | "KillBash" => ToolKind::Execute,
        "Grep" | "Glob" | "LS" | "ToolSearch" => ToolKind::Search,
        "WebFetch" | "WebSearch" => ToolKind::Fetch,
        "Task" | "Agent" | "TodoWrite" => ToolKind::Think,
        "ExitPlanMode" | "EnterPlanMode" => ToolKind::SwitchMode,
        _ => ToolKind::Other,
    }
}

/// A title for a call: the command, the file, else the tool.
pub(crate) fn title_of(tool: &str, input: &Value) -> String {
    let text = |key: &str| input.get(key).and_then(Value::as_str);
    match tool {
        "Bash" => text("command").map_or_else(|| tool.to_owned(), |command| format!("`{command}`")),
        _ => match text("file_path").or_else(|| text("path")).or_else(|| text("pattern")) {
            Some(target) => format!("{tool} {target}"),
            None => text("description").map_or_else(|| tool.to_owned(), str::to_owned),
        },
    }
}

/// A tool call, with its diff for an edit and the file it touches.
pub(crate) fn tool_call(id: &str, tool: &str, input: &Value) -> ToolCall {
    let mut call = ToolCall::new(id.to_owned(), title_of(tool, input))
        .kind(kind_of(tool))
        .status(ToolCallStatus::Pending)
        .raw_input(input.clone());
    let diffs = diffs_of(tool, input);
    if !diffs.is_empty() {
        call = call.content(diffs);
    }
    if let Some(path) = input.get("file_path").and_then(Value::as_str) {
        call = call.locations(vec![ToolCallLocation::new(path)]);
    }
    call
}

/// An edit as diffs: Edit's old and new text, each of MultiEdit's edits, Write's whole file.
pub(crate) fn diffs_of(tool: &str, input: &Value) -> Vec<ToolCallContent> {
    let Some(path) = input.get("file_path").and_then(Value::as_str) else { return Vec::new() };
    let text = |value: &Value, key: &str| value.get(key).and_then(Value::as_str).map(str::to_owned);
    let diff = |old: Option<String>, new: String| {
        ToolCallContent::Diff(Diff::new(path, new).old_text(old))
    };
    match tool {
        "Edit" => match text(input, "new_string") {
            Some(new) => vec![diff(text(input, "old_string"), new)],
            None => Vec::new(),
        },
        "MultiEdit" => input
            .get("edits")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|edit| Some(diff(text(edit, "old_string"), text(edit, "new_string")?)))
            .collect(),
        "Write" => text(input, "content").map(|new| vec![diff(None, new)]).unwrap_or_default(),
        _ => Vec::new(),
    }
}

/// A TodoWrite call as the session's plan.
fn plan_of(tool: &str, input: &Value) -> Option<Plan> {
    if tool != "TodoWrite" {
        return None;
    }
    let entries = input
        .get("todos")?
        .as_array()?
        .iter()
        .filter_map(|todo| {
            let content = todo.get("content")?.as_str()?;
            let status = match todo.get("status").and_then(Value::as_str) {
                Some("completed") => PlanEntryStatus::Completed,
                Some("in_progress") => PlanEntryStatus::InProgress,
                _ => PlanEntryStatus::Pending,
            };
            Some(PlanEntry::new(content, PlanEntryPriority::Medium, status))
        })
        .collect();
    Some(Plan::new(entries))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn block(id: &str, name: &str, input: Value) -> ViewUpdate {
        ViewUpdate::Session(Update::Block {
            message_id: "m".into(),
            index: 0,
            parent_tool_use_id: None,
            uuid: None,
            block: Block::ToolUse {
                tool_use_id: id.into(),
                name: name.into(),
                input,
                rebuilt: true,
            },
        })
    }

    #[test]
    fn an_edit_is_a_diff_announced_once_and_its_result_completes_it() {
        let mut translator = Translator::default();
        let edit = block(
            "t1",
            "Edit",
            json!({"file_path": "/w/a.txt", "old_string": "one", "new_string": "two"}),
        );
        let told = translator.translate(&edit);
        let [SessionUpdate::ToolCall(call)] = told.as_slice() else { panic!("{told:?}") };
        assert_eq!(call.kind, ToolKind::Edit);
        assert_eq!(call.title, "Edit /w/a.txt");
        let [ToolCallContent::Diff(diff)] = call.content.as_slice() else { panic!("{call:?}") };
        assert_eq!((diff.old_text.as_deref(), diff.new_text.as_str()), (Some("one"), "two"));
        assert!(translator.translate(&edit).is_empty(), "the CLI's own line confirms, not twice");
        let result = ViewUpdate::Session(Update::ToolResult {
            tool_use_id: "t1".into(),
            tool_name: Some("Edit".into()),
            parent_tool_use_id: None,
            is_error: false,
            text: "done".into(),
            images: Vec::new(),
            interrupted: false,
        });
        let told = translator.translate(&result);
        let [SessionUpdate::ToolCallUpdate(update)] = told.as_slice() else { panic!("{told:?}") };
        assert_eq!(update.fields.status, Some(ToolCallStatus::Completed));
    }

    #[test]
    fn prompts_echo_unless_the_editor_sent_them_and_todos_are_a_plan() {
        let mut translator = Translator::default();
        let prompt = |uuid: &str| {
            ViewUpdate::Session(Update::Prompt {
                text: "hi".into(),
                images: Vec::new(),
                uuid: Some(uuid.into()),
                queued: false,
            })
        };
        translator.sent("mine");
        assert!(translator.translate(&prompt("mine")).is_empty());
        assert!(matches!(
            translator.translate(&prompt("theirs")).as_slice(),
            [SessionUpdate::UserMessageChunk(_)]
        ));
        let todos = block(
            "t2",
            "TodoWrite",
            json!({"todos": [{"content": "write it", "status": "in_progress"}, {"content": "test it", "status": "pending"}]}),
        );
        let told = translator.translate(&todos);
        let [_, SessionUpdate::Plan(plan)] = told.as_slice() else { panic!("{told:?}") };
        assert_eq!(plan.entries.len(), 2);
        assert_eq!(plan.entries[0].status, PlanEntryStatus::InProgress);
        assert_eq!(title_of("Bash", &json!({"command": "ls"})), "`ls`");
    }
}
