//! What a line of Claude Code's own transcript (`~/.claude/projects/<cwd>/<session>.jsonl`)
//! means where it differs from the stream-json protocol. An interactive CLI (one in a
//! terminal) speaks no protocol: its transcript is all there is to read, and its lines are
//! the protocol's `user`, `assistant` and `system` messages plus entries of its own
//! (`attachment`, `mode`, `file-history-snapshot`, …, kept as [`Message::Unknown`]).
//!
//! Two things a stream-json session learns from lines it never sees in a transcript:
//!
//! - **A prompt** is a `user` line the CLI wrote (a host's prompts are its own lines in
//!   stream-json): [`prompt`].
//! - **The end of a turn** has no `result` line. 2.1.330 writes `system/turn_duration` when a
//!   turn ends, and a `user` line `[Request interrupted by user]` (no `turn_duration`) when the
//!   person interrupts it: [`turn_end`].
//!
//! And one thing it learns only here: whether a permission request the CLI showed in its
//! terminal was answered there or by a `PermissionRequest` hook. The CLI runs those hooks while
//! its dialog shows (measured: 2.1.100 to 2.1.330), takes the first answer, and writes an
//! `attachment` of type `hook_permission_decision` (with the call's `toolUseID`) when a hook's
//! answer is the one it took, before the tool runs: [`hook_permission_decision`]. A call with
//! no such line was answered in the terminal; a refusal there leaves a tool result that begins
//! with [`REJECTED_MARKER`]: [`rejected`].
//!
//! The session core and the projection both ask this module, so the two read a transcript alike.

use serde_json::Value;

use crate::content::ContentBlock;
use crate::message::{Message, UserMessage};
use crate::system::SystemMessage;
use crate::wire::TextOr;

/// The text the CLI writes as a `user` line when the person interrupts a turn (2.1.330; the
/// tool-use variant adds ` for tool use`).
pub const INTERRUPTED_MARKER: &str = "[Request interrupted by user";

/// How a tool result the person refused in the terminal's dialog begins (2.1.100 to 2.1.330;
/// the line's `toolUseResult` says `User rejected tool use`).
pub const REJECTED_MARKER: &str = "The user doesn't want to proceed with this tool use";

/// A `PermissionRequest` hook's answer, as the CLI took it: the call (`toolUseID`) and whether
/// it may run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookPermissionDecision {
    /// The call's `tool_use` id.
    pub tool_use_id: String,
    /// The hook allowed it (else it denied it).
    pub allowed: bool,
}

/// The `PermissionRequest` hook's answer the CLI took, if `message` is the attachment that
/// records one.
pub fn hook_permission_decision(message: &Message) -> Option<HookPermissionDecision> {
    let Message::Unknown(value) = message.readable() else { return None };
    if value.get("type").and_then(Value::as_str) != Some("attachment") {
        return None;
    }
    let attachment = value.get("attachment")?;
    let field = |name: &str| attachment.get(name).and_then(Value::as_str);
    if field("type") != Some("hook_permission_decision")
        || field("hookEvent") != Some("PermissionRequest")
    {
        return None;
    }
    Some(HookPermissionDecision {
        tool_use_id: field("toolUseID")?.to_owned(),
        allowed: match field("decision")? {
            "allow" => true,
            "deny" => false,
            _ => return None,
        },
    })
}

/// Whether `result` is the CLI's refusal of a call the person turned down in its dialog (not a
/// tool that ran and failed).
pub fn rejected(result: &crate::content::ToolResultBlock) -> bool {
    if result.is_error != Some(true) {
        return false;
    }
    let first = match &result.content {
        Some(TextOr::Text(text)) => Some(text.as_str()),
        Some(TextOr::Items(blocks)) => blocks.iter().find_map(|block| match block {
            ContentBlock::Text(text) => Some(text.text.as_str()),
            _ => None,
        }),
        None => None,
    };
    first.is_some_and(|text| text.starts_with(REJECTED_MARKER))
}

/// How a transcript's turn ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TurnEnd {
    /// The person interrupted it.
    pub interrupted: bool,
    /// How long it took, when the CLI says (`turn_duration`'s `durationMs`).
    pub duration_ms: Option<u64>,
}

/// The end of a turn, if `message` marks one.
pub fn turn_end(message: &Message) -> Option<TurnEnd> {
    match message.readable() {
        Message::System(system) => match &**system {
            SystemMessage::Unknown(value)
                if value.get("subtype").and_then(Value::as_str) == Some("turn_duration") =>
            {
                Some(TurnEnd {
                    interrupted: false,
                    duration_ms: value.get("durationMs").and_then(Value::as_u64),
                })
            }
            _ => None,
        },
        Message::User(user) if is_main(user) && is_interruption(user) => {
            Some(TurnEnd { interrupted: true, duration_ms: None })
        }
        _ => None,
    }
}

/// The person's prompt, if `message` is one: a `user` line of the main conversation with
/// text, not a tool result, not a note the CLI made for itself (`isMeta`: a slash command's
/// output, a caveat) and not an interruption's marker.
pub fn prompt(message: &Message) -> Option<&UserMessage> {
    let Message::User(user) = message.readable() else { return None };
    let flag = |name: &str| user.extra.get(name).and_then(Value::as_bool) == Some(true);
    // `isCompactSummary`: the summary a `/compact` leaves, written as a user line.
    let meta = flag("isMeta") || flag("isCompactSummary");
    if meta || !is_main(user) || is_interruption(user) {
        return None;
    }
    let has_text = match &user.message.content {
        TextOr::Text(text) => !text.is_empty(),
        TextOr::Items(blocks) => {
            blocks
                .iter()
                .any(|block| matches!(block, ContentBlock::Text(_) | ContentBlock::Image(_)))
                && !blocks.iter().any(|block| matches!(block, ContentBlock::ToolResult(_)))
        }
    };
    has_text.then_some(user)
}

/// The Claude session a transcript line belongs to: its `sessionId` (every entry has one; only
/// some also carry the protocol's `session_id`).
pub fn session_id(message: &Message) -> Option<&str> {
    let extra = match message.readable() {
        Message::User(user) => &user.extra,
        Message::Assistant(assistant) => &assistant.extra,
        Message::Unknown(value) => return value.get("sessionId").and_then(Value::as_str),
        Message::System(system) => match &**system {
            SystemMessage::Unknown(value) => return value.get("sessionId").and_then(Value::as_str),
            _ => return message.session_id(),
        },
        _ => return message.session_id(),
    };
    extra.get("sessionId").and_then(Value::as_str).or_else(|| message.session_id())
}

/// Not a subagent's line (`isSidechain`, or a Task call's `parent_tool_use_id`).
fn is_main(user: &UserMessage) -> bool {
    user.parent_tool_use_id.is_none()
        && user.extra.get("isSidechain").and_then(Value::as_bool) != Some(true)
}

fn is_interruption(user: &UserMessage) -> bool {
    let first = match &user.message.content {
        TextOr::Text(text) => Some(text.as_str()),
        TextOr::Items(blocks) => blocks.iter().find_map(|block| match block {
            ContentBlock::Text(text) => Some(text.text.as_str()),
            _ => None,
        }),
    };
    first.is_some_and(|text| text.starts_with(INTERRUPTED_MARKER))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(text: &str) -> Message {
        Message::decode(text.as_bytes()).expect("decodes")
    }

    #[test]
    fn a_hooks_permission_decision_and_a_refusal_in_the_dialog_are_read() {
        // As 2.1.330 writes them (an answer from afar, then one from the terminal).
        let decided = line(
            r#"{"parentUuid":"p","isSidechain":false,"type":"attachment","attachment":{"type":"hook_permission_decision","decision":"deny","toolUseID":"toolu_1","hookEvent":"PermissionRequest"},"uuid":"u","sessionId":"s"}"#,
        );
        assert_eq!(
            hook_permission_decision(&decided),
            Some(HookPermissionDecision { tool_use_id: "toolu_1".into(), allowed: false })
        );
        let other = line(
            r#"{"type":"attachment","attachment":{"type":"hook_success","toolUseID":"toolu_1","hookEvent":"PreToolUse"},"uuid":"u"}"#,
        );
        assert_eq!(hook_permission_decision(&other), None);
        let refused = line(
            r#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","content":"The user doesn't want to proceed with this tool use. The tool use was rejected (eg. if it was a file edit, the new_string was NOT written to the file). STOP what you are doing and wait for the user to tell you how to proceed.","is_error":true,"tool_use_id":"toolu_2"}]},"toolUseResult":"User rejected tool use","uuid":"u2"}"#,
        );
        let failed = line(
            r#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","content":"exit 1","is_error":true,"tool_use_id":"toolu_3"}]},"uuid":"u3"}"#,
        );
        let result = |message: &Message| match message {
            Message::User(user) => user.tool_results().next().cloned().unwrap(),
            _ => panic!("a user line"),
        };
        assert!(rejected(&result(&refused)));
        assert!(!rejected(&result(&failed)), "a tool that ran and failed was not refused");
    }

    #[test]
    fn a_typed_prompt_is_a_prompt_and_a_tool_result_is_not() {
        let typed = line(
            r#"{"type":"user","message":{"role":"user","content":"LIST the files"},"uuid":"u1","sessionId":"s","promptSource":"typed"}"#,
        );
        assert!(prompt(&typed).is_some());
        assert!(turn_end(&typed).is_none());
        let result = line(
            r#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"ok"}]},"uuid":"u2"}"#,
        );
        assert!(prompt(&result).is_none());
        let meta = line(
            r#"{"type":"user","isMeta":true,"message":{"role":"user","content":"<local-command-caveat>"},"uuid":"u3"}"#,
        );
        assert!(prompt(&meta).is_none());
        let side = line(
            r#"{"type":"user","isSidechain":true,"message":{"role":"user","content":"a subagent's task"},"uuid":"u4"}"#,
        );
        assert!(prompt(&side).is_none());
        let summary = line(
            r#"{"type":"user","isCompactSummary":true,"message":{"role":"user","content":"This session is being continued…"},"uuid":"u6"}"#,
        );
        assert!(prompt(&summary).is_none());
    }

    #[test]
    fn a_turn_ends_at_its_duration_or_at_an_interruption() {
        let done = line(
            r#"{"type":"system","subtype":"turn_duration","durationMs":449,"messageCount":16,"isMeta":false,"uuid":"x"}"#,
        );
        assert_eq!(turn_end(&done), Some(TurnEnd { interrupted: false, duration_ms: Some(449) }));
        let stopped = line(
            r#"{"type":"user","message":{"role":"user","content":[{"type":"text","text":"[Request interrupted by user]"}]},"uuid":"u5"}"#,
        );
        assert_eq!(turn_end(&stopped), Some(TurnEnd { interrupted: true, duration_ms: None }));
        assert!(prompt(&stopped).is_none());
        let for_tool = line(
            r#"{"type":"user","message":{"role":"user","content":"[Request interrupted by user for tool use]"}}"#,
        );
        assert!(turn_end(&for_tool).is_some_and(|end| end.interrupted));
        assert!(turn_end(&line(r#"{"type":"mode","mode":"normal","sessionId":"s"}"#)).is_none());
    }

    #[test]
    fn every_entry_names_its_session() {
        let typed =
            line(r#"{"type":"user","message":{"role":"user","content":"hi"},"sessionId":"s1"}"#);
        assert_eq!(session_id(&typed), Some("s1"));
        assert_eq!(
            session_id(&line(r#"{"type":"mode","mode":"normal","sessionId":"s2"}"#)),
            Some("s2")
        );
        let done = line(r#"{"type":"system","subtype":"turn_duration","sessionId":"s3"}"#);
        assert_eq!(session_id(&done), Some("s3"));
    }
}
