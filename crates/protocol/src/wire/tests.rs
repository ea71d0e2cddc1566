//! Tests for the wire macros: unknown fields kept, unknown variants kept, field modes, tags.

use serde_json::{json, Value};

use super::*;
use crate::content::ContentBlock;
use crate::message::{Message, ResultMessage};
use crate::permission::{PermissionMode, PermissionResult, PermissionUpdate};

#[test]
fn peek_tag_reads_leading_plain_pairs_and_falls_back_otherwise() {
    assert_eq!(
        peek_tag(r#"{"type":"system","subtype":"init"}"#, "subtype").as_deref(),
        Some("init")
    );
    assert_eq!(peek_tag(r#" { "type" : "user" } "#, "type").as_deref(), Some("user"));
    // The tag after a non-string value, after an escaped string, or escaped itself.
    assert_eq!(peek_tag(r#"{"n":1,"type":"result"}"#, "type").as_deref(), Some("result"));
    assert_eq!(peek_tag(r#"{"a":"x\"y","type":"result"}"#, "type").as_deref(), Some("result"));
    assert_eq!(peek_tag(r#"{"type":"a\u0062"}"#, "type").as_deref(), Some("ab"));
    // Absent, not a string, not an object.
    assert_eq!(peek_tag(r#"{"kind":"x"}"#, "type"), None);
    assert_eq!(peek_tag(r#"{"type":7}"#, "type"), None);
    assert_eq!(peek_tag(r#"[1]"#, "type"), None);
    assert_eq!(peek_tag(r#"{"type":"#, "type"), None);
}

#[test]
fn unknown_fields_are_kept_in_order_and_written_back() {
    let line =
        r#"{"type":"result","zeta":1,"subtype":"success","alpha":{"x":[1]},"is_error":false}"#;
    let result: ResultMessage = serde_json::from_str(line).unwrap();
    assert_eq!(result.extra.keys().collect::<Vec<_>>(), ["zeta", "alpha"]);
    let written: Value = serde_json::to_value(&result).unwrap();
    assert_eq!(written, serde_json::from_str::<Value>(line).unwrap());
}

#[test]
fn unknown_variants_are_kept_whole() {
    let block: ContentBlock =
        serde_json::from_str(r#"{"type":"future_block","data":[1,2]}"#).unwrap();
    assert_eq!(block.tag(), Some("future_block"));
    assert_eq!(serde_json::to_value(&block).unwrap(), json!({"type":"future_block","data":[1,2]}));
    let message = Message::decode(br#"{"type":"brand_new","x":1}"#).unwrap();
    assert!(matches!(message, Message::Unknown(_)));
    assert_eq!(message.type_name(), Some("brand_new"));
}

#[test]
fn a_known_tag_with_the_wrong_fields_is_an_error_naming_the_tag() {
    let error = serde_json::from_str::<ContentBlock>(r#"{"type":"text","text":5}"#).unwrap_err();
    assert!(error.to_string().contains("type \"text\""), "{error}");
    // A whole line that does not fit is no error but its drift form, with that reason.
    let message = Message::decode(br#"{"type":"result","subtype":"success"}"#).unwrap();
    let Message::Drift(drift) = &message else { panic!("{message:?}") };
    assert!(drift.reason.contains("missing field `is_error`"), "{}", drift.reason);
    assert!(drift.reason.starts_with("type \"result\""), "{}", drift.reason);
}

#[test]
fn duplicate_known_fields_are_rejected() {
    let error =
        serde_json::from_str::<ResultMessage>(r#"{"subtype":"a","subtype":"b","is_error":true}"#)
            .unwrap_err();
    assert!(error.to_string().contains("duplicate field `subtype`"), "{error}");
}

#[test]
fn opt_fields_distinguish_absent_from_null_when_asked_to() {
    // `stop_reason` is `opt Option<String>`: absent, null and a string all survive.
    for line in [
        r#"{"type":"result","subtype":"s","is_error":false}"#,
        r#"{"type":"result","subtype":"s","is_error":false,"stop_reason":null}"#,
        r#"{"type":"result","subtype":"s","is_error":false,"stop_reason":"end_turn"}"#,
    ] {
        let result: ResultMessage = serde_json::from_str(line).unwrap();
        assert_eq!(serde_json::to_string(&result).unwrap(), line);
    }
}

#[test]
fn string_enums_keep_values_they_do_not_know() {
    let mode: PermissionMode = serde_json::from_str(r#""manual""#).unwrap();
    assert_eq!(mode, PermissionMode::Other("manual".into()));
    assert_eq!(serde_json::to_string(&mode).unwrap(), r#""manual""#);
    assert_eq!("plan".parse::<PermissionMode>().unwrap(), PermissionMode::Plan);
}

#[test]
fn tags_are_written_first_and_enums_pick_by_their_own_key() {
    let allow = PermissionResult::allow(json!({"command": "ls"}));
    assert_eq!(
        serde_json::to_string(&allow).unwrap(),
        r#"{"behavior":"allow","updatedInput":{"command":"ls"}}"#
    );
    let back: PermissionResult =
        serde_json::from_str(r#"{"updatedInput":{},"behavior":"allow"}"#).unwrap();
    assert!(back.is_allow());
}

#[test]
fn text_or_items_reads_both_forms() {
    let text: TextOr<ContentBlock> = serde_json::from_str(r#""hi""#).unwrap();
    assert_eq!(text, TextOr::Text("hi".into()));
    let items: TextOr<ContentBlock> =
        serde_json::from_str(r#"[{"type":"text","text":"hi"}]"#).unwrap();
    assert_eq!(items, TextOr::Items(vec![ContentBlock::text("hi")]));
    assert!(serde_json::from_str::<TextOr<ContentBlock>>("5").is_err());
}

/// An object's keys, in order.
fn keys(value: &Value) -> Vec<&str> {
    value.as_object().unwrap().keys().map(String::as_str).collect()
}

#[test]
fn nested_enums_read_their_tag_wherever_it_is() {
    use crate::stream::{Delta, StreamEvent};
    // The CLI writes the tag first; a tag later in the object reads the same.
    for line in [
        r#"{"type":"stream_event","event":{"type":"content_block_delta","index":2,"delta":{"type":"text_delta","text":"hi"}},"session_id":"s"}"#,
        r#"{"event":{"index":2,"delta":{"text":"hi","type":"text_delta"},"type":"content_block_delta"},"session_id":"s","type":"stream_event"}"#,
    ] {
        let Message::StreamEvent(message) = Message::decode(line.as_bytes()).unwrap() else {
            panic!("{line}")
        };
        let StreamEvent::ContentBlockDelta(delta) = &message.event else { panic!("{line}") };
        assert_eq!(delta.index, 2);
        assert!(matches!(&delta.delta, Delta::Text(text) if text.text == "hi"), "{line}");
        assert!(delta.extra.is_empty() && message.extra.is_empty(), "{line}");
    }
    // Read from a `Value` rather than text, too.
    let block: ContentBlock =
        serde_json::from_value(json!({"text": "hi", "type": "text"})).unwrap();
    assert_eq!(block, ContentBlock::text("hi"));
}

#[test]
fn nested_values_an_enum_does_not_know_are_kept_whole_in_order() {
    for (text, order) in [
        (r#"{"type":"future_block","b":[1,{"c":null}],"a":1.5}"#, ["type", "b", "a"]),
        (r#"{"b":[1,{"c":null}],"type":"future_block","a":1.5}"#, ["b", "type", "a"]),
        (r#"{"b":[1,{"c":null}],"a":1.5,"kind":"text"}"#, ["b", "a", "kind"]),
        (r#"{"type":7,"b":[1,{"c":null}],"a":1.5}"#, ["type", "b", "a"]),
    ] {
        let block: ContentBlock = serde_json::from_str(text).unwrap();
        let ContentBlock::Unknown(value) = &block else { panic!("{text}: {block:?}") };
        assert_eq!(keys(value), order, "{text}");
        assert_eq!(serde_json::to_string(&block).unwrap(), text);
    }
    for text in [r#""text""#, "[1,2]", "null", "true", "-3", "{}"] {
        let block: ContentBlock = serde_json::from_str(text).unwrap();
        assert_eq!(block, ContentBlock::Unknown(serde_json::from_str(text).unwrap()), "{text}");
    }
}

#[test]
fn a_variant_that_reads_its_own_tag_still_gets_it() {
    // `addRules` and its kin keep `type` as a field of their struct.
    for text in [
        r#"{"type":"addRules","rules":[{"toolName":"Bash"}],"behavior":"allow","destination":"session"}"#,
        r#"{"rules":[{"toolName":"Bash"}],"type":"removeRules","behavior":"deny","destination":"session"}"#,
    ] {
        let update: PermissionUpdate = serde_json::from_str(text).unwrap();
        let (PermissionUpdate::AddRules(rules) | PermissionUpdate::RemoveRules(rules)) = &update
        else {
            panic!("{text}: {update:?}")
        };
        assert_eq!(Some(rules.kind.as_str()), update.tag());
        assert!(rules.extra.is_empty(), "{text}");
        assert_eq!(
            serde_json::to_value(&update).unwrap(),
            serde_json::from_str::<Value>(text).unwrap()
        );
    }
}

#[test]
fn an_enum_inside_an_enum_reads_from_a_value_and_keeps_the_outer_tag() {
    use crate::system::SystemMessage;
    // `system` lines pick their struct by `subtype` after `type` picked `system`.
    let unknown = json!({"type": "system", "subtype": "brand_new", "x": 1});
    let message: Message = serde_json::from_value(unknown.clone()).unwrap();
    let Message::System(system) = &message else { panic!("{message:?}") };
    let SystemMessage::Unknown(value) = &**system else { panic!("{message:?}") };
    assert_eq!(keys(value), ["type", "subtype", "x"]);
    assert_eq!(serde_json::to_value(&message).unwrap(), unknown);
    let status = json!({"subtype": "status", "type": "system", "status": null});
    let message: Message = serde_json::from_value(status.clone()).unwrap();
    assert!(
        matches!(&message, Message::System(system) if matches!(**system, SystemMessage::Status(_))),
        "{message:?}"
    );
    assert_eq!(serde_json::to_value(&message).unwrap(), status);
}

#[test]
fn a_nested_variant_that_does_not_fit_names_its_tags_and_one_position() {
    let text = r#"{"role":"assistant","content":[{"type":"text","text":5}]}"#;
    let error = serde_json::from_str::<crate::content::AssistantBody>(text).unwrap_err();
    let error = error.to_string();
    assert!(error.starts_with("type \"text\": invalid type: integer `5`"), "{error}");
    assert_eq!(error.matches(" at line ").count(), 1, "{error}");
    // Tag first or not, the same error.
    let later = r#"{"role":"assistant","content":[{"text":5,"type":"text"}]}"#;
    let later = serde_json::from_str::<crate::content::AssistantBody>(later).unwrap_err();
    assert!(later.to_string().starts_with("type \"text\": invalid type: integer `5`"), "{later}");
}

#[test]
fn without_position_drops_only_serde_jsons_position() {
    assert_eq!(without_position("bad at line 1 column 20"), "bad");
    assert_eq!(without_position("bad at line x column 20"), "bad at line x column 20");
    assert_eq!(without_position("seen at line 3"), "seen at line 3");
    assert_eq!(without_position("plain"), "plain");
}

#[test]
fn a_nested_tag_is_the_first_string_of_its_key_as_a_lines_is() {
    // A whole line peeks at the first `type` that is a string; a value inside a line reads
    // the same one.
    let block = r#"{"type":null,"type":"text","text":"hi"}"#;
    let read: ContentBlock = serde_json::from_str(block).unwrap();
    assert_eq!(read, ContentBlock::text("hi"));
    assert_eq!(ContentBlock::from_json_str(block).unwrap(), read);
    let line = format!(r#"{{"type":"assistant","message":{{"content":[{block}]}}}}"#);
    let Message::Assistant(message) = Message::decode(line.as_bytes()).unwrap() else {
        panic!("{line}")
    };
    assert_eq!(message.message.content, [ContentBlock::text("hi")]);
}

#[test]
fn entries_before_a_nested_tag_keep_their_exact_text() {
    use crate::control::{ControlResponse, ControlResponseBody};
    // A payload kept as text (`RawJson`) is the text that came, read in place or not.
    let payload = r#"{"n":123456789012345678901234567890, "s":"\u00e9"}"#;
    for body in [
        format!(r#"{{"subtype":"success","request_id":"r","response":{payload}}}"#),
        format!(r#"{{"request_id":"r","response":{payload},"subtype":"success"}}"#),
    ] {
        let line = format!(r#"{{"type":"control_response","response":{body}}}"#);
        let response: ControlResponse = serde_json::from_str(&line).unwrap();
        let ControlResponseBody::Success(success) = &response.response else { panic!("{line}") };
        assert_eq!(success.request_id, "r");
        assert_eq!(success.response.as_ref().map(|raw| raw.get()), Some(payload), "{line}");
    }
}

#[test]
fn objects_nested_inside_entries_before_their_tag_are_refused_past_a_small_depth() {
    // Each tool result's `content` holds the next, before its `type`: every level would be
    // read again from its text, with a depth limit of its own.
    fn nest(levels: usize) -> String {
        let mut block = r#"{"type":"text","text":"deep"}"#.to_owned();
        for _ in 0..levels {
            block = format!(r#"{{"tool_use_id":"x","content":[{block}],"type":"tool_result"}}"#);
        }
        format!(r#"{{"type":"user","message":{{"role":"user","content":[{block}]}}}}"#)
    }
    // Two levels read (the replay inside a replay), as the CLI's own order would.
    let Message::User(user) = Message::decode(nest(2).as_bytes()).unwrap() else { panic!() };
    let TextOr::Items(blocks) = &user.message.content else { panic!("{user:?}") };
    assert!(matches!(&blocks[0], ContentBlock::ToolResult(_)), "{blocks:?}");
    // Deeper (within the depth a single reader allows the whole line): an error for that line,
    // its drift form, not a recursion with a fresh limit at every level; the next line on the
    // same thread reads as ever.
    for levels in [3, 60] {
        let message = Message::decode(nest(levels).as_bytes()).unwrap();
        let Message::Drift(drift) = &message else { panic!("{levels}: {message:?}") };
        assert!(drift.reason.contains("nested more than 2 deep"), "{}", drift.reason);
    }
    // Thousands of levels: the line's reader refuses it before any replay.
    assert!(Message::decode(nest(5_000).as_bytes()).is_err());
    assert!(matches!(Message::decode(nest(2).as_bytes()).unwrap(), Message::User(_)));
}
