//! Tests for the wire macros: unknown fields kept, unknown variants kept, field modes, tags.

use serde_json::{json, Value};

use super::*;
use crate::content::ContentBlock;
use crate::message::{Message, ResultMessage};
use crate::permission::{PermissionMode, PermissionResult};

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
    let mode: PermissionMode = serde_json::from_str(r#""auto""#).unwrap();
    assert_eq!(mode, PermissionMode::Other("auto".into()));
    assert_eq!(serde_json::to_string(&mode).unwrap(), r#""auto""#);
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
