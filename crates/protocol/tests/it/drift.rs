//! Lines of a known type whose fields do not fit: what a CLI version that changed a field's
//! shape writes. None of them is malformed.

use switchboard_protocol::codec::Decoder;
use switchboard_protocol::{Message, Num, SystemMessage};

/// `system/api_retry` as 2.1.120 and 2.1.200 write it: the delay with a fraction.
const FLOAT_RETRY: &str = r#"{"type":"system","subtype":"api_retry","attempt":1,"max_retries":10,"retry_delay_ms":559.9200000000001,"error_status":529,"error":"overloaded","session_id":"s-1","uuid":"u-1"}"#;

#[test]
fn a_delay_written_as_a_float_reads_and_re_encodes_unchanged() {
    let message = Message::decode_str(FLOAT_RETRY).unwrap();
    let Message::System(system) = &message else { panic!("not a system line: {message:?}") };
    let SystemMessage::ApiRetry(retry) = &**system else {
        panic!("not read as api_retry: {message:?}")
    };
    let delay = retry.retry_delay_ms.as_ref().unwrap();
    assert_eq!(delay.get(), 560);
    assert!((delay.as_f64() - 559.92).abs() < 0.001);
    assert_eq!(Num::or_zero(&retry.attempt), 1);
    let again: serde_json::Value = serde_json::from_str(&message.encode()).unwrap();
    let original: serde_json::Value = serde_json::from_str(FLOAT_RETRY).unwrap();
    assert_eq!(again, original);
}

#[test]
fn durations_and_counts_take_a_float_or_an_integer() {
    let line = r#"{"type":"result","subtype":"success","is_error":false,"duration_ms":1234.5,"duration_api_ms":1000,"num_turns":2.0,"result":"ok","usage":{"input_tokens":10.4,"output_tokens":7},"modelUsage":{"m":{"inputTokens":3.6,"contextWindow":200000}}}"#;
    let Message::Result(result) = Message::decode_str(line).unwrap() else { panic!() };
    assert_eq!(Num::or_zero(&result.duration_ms), 1235, "rounded");
    assert_eq!(Num::or_zero(&result.num_turns), 2);
    let usage = result.usage.unwrap();
    assert_eq!(Num::or_zero(&usage.input_tokens), 10);
    assert_eq!(Num::or_zero(&usage.output_tokens), 7);
    let model = &result.model_usage.unwrap()["m"];
    assert_eq!(Num::or_zero(&model.input_tokens), 4);
    assert_eq!(model.context_window.as_ref().map(Num::get), Some(200_000));
}

#[test]
fn a_negative_or_huge_quantity_reads_within_range() {
    let read = |text: &str| serde_json::from_str::<Num>(text).unwrap().get();
    assert_eq!(read("-3"), 0);
    assert_eq!(read("-0.5"), 0);
    assert_eq!(read("1e300"), u64::MAX);
    assert_eq!(read("18446744073709551615"), u64::MAX);
    assert!(serde_json::from_str::<Num>("\"5\"").is_err(), "a string is not a number");
}

#[test]
fn a_field_of_another_shape_is_left_out_and_the_rest_is_read() {
    // `usage` became a string: the turn's end still reads, without it.
    let line = r#"{"type":"result","subtype":"success","is_error":false,"result":"done","usage":"n/a","session_id":"s-9","uuid":"u-9"}"#;
    let message = Message::decode_str(line).unwrap();
    let Message::Drift(drift) = &message else { panic!("not a drift: {message:?}") };
    assert!(drift.reason.contains("result"), "names the type: {}", drift.reason);
    assert_eq!(drift.left_out, "usage");
    let Message::Result(result) = message.readable() else { panic!("not salvaged") };
    assert_eq!(result.result.as_deref(), Some("done"));
    assert!(result.usage.is_none());
    // The routing fields read from the line itself.
    assert_eq!(message.type_name(), Some("result"));
    assert_eq!(message.subtype(), Some("success"));
    assert_eq!(message.session_id(), Some("s-9"));
    // Written back exactly as it came, the unfit field included.
    let again: serde_json::Value = serde_json::from_str(&message.encode()).unwrap();
    assert_eq!(again["usage"], "n/a");
}

#[test]
fn the_deepest_part_that_does_not_fit_is_the_one_left_out() {
    // One token count became an object: only it is left out, the other counts stay.
    let line = r#"{"type":"result","subtype":"success","is_error":false,"usage":{"input_tokens":{"cached":1},"output_tokens":5}}"#;
    let message = Message::decode_str(line).unwrap();
    let Message::Drift(drift) = &message else { panic!() };
    assert_eq!(drift.left_out, "usage.input_tokens");
    let Message::Result(result) = message.readable() else { panic!() };
    assert_eq!(Num::or_zero(&result.usage.as_ref().unwrap().output_tokens), 5);
}

#[test]
fn a_content_block_that_does_not_fit_is_left_out_of_its_message() {
    let line = r#"{"type":"assistant","message":{"id":"m1","role":"assistant","content":[{"type":"text","text":"hi"},{"type":"tool_use","id":7,"name":"Bash","input":{}}]},"parent_tool_use_id":null,"session_id":"s"}"#;
    let message = Message::decode_str(line).unwrap();
    let Message::Drift(drift) = &message else { panic!("{message:?}") };
    assert_eq!(drift.left_out, "message.content[1]");
    let Message::Assistant(assistant) = message.readable() else { panic!() };
    assert_eq!(assistant.message.content.len(), 1);
}

#[test]
fn a_result_with_nothing_else_readable_still_ends_its_turn() {
    // Two fields of other shapes: no single part can be left out, so the routing fields
    // alone are read.
    let line = r#"{"type":"result","subtype":"error_during_execution","is_error":"yes","result":"x","duration_ms":"slow","num_turns":[],"session_id":"s-2"}"#;
    let message = Message::decode_str(line).unwrap();
    let Message::Drift(drift) = &message else { panic!() };
    assert!(drift.left_out.starts_with("every field but subtype"), "{}", drift.left_out);
    let Message::Result(result) = message.readable() else { panic!("{message:?}") };
    assert_eq!(result.subtype, "error_during_execution");
    assert!(result.is_error, "an unreadable is_error follows the subtype");
    assert_eq!(result.result.as_deref(), Some("x"));
}

#[test]
fn an_unreadable_control_request_keeps_its_routing_fields() {
    let line = r#"{"type":"control_request","request_id":"r-1","request":{"subtype":"can_use_tool","tool_name":42,"input":{}}}"#;
    let message = Message::decode_str(line).unwrap();
    let Message::Drift(drift) = &message else { panic!("{message:?}") };
    assert!(drift.salvaged.is_none(), "nothing can be left out of a permission request");
    assert_eq!(drift.request_id(), Some("r-1"));
    assert_eq!(message.subtype(), Some("can_use_tool"));
    assert!(matches!(message.readable(), Message::Drift(_)));
}

#[test]
fn only_text_that_is_not_a_json_object_is_malformed() {
    for bad in ["{\"type\":", "[1,2]", "\"text\"", "not json"] {
        assert!(Message::decode_str(bad).is_err(), "{bad}");
    }
    // An object whose `type` is not a string is of no known type: unknown, not malformed.
    assert!(matches!(Message::decode_str(r#"{"type":5}"#).unwrap(), Message::Unknown(_)));
}

#[test]
fn the_decoder_yields_a_drift_as_a_line_not_an_error() {
    let mut decoder = Decoder::default();
    decoder.push(br#"{"type":"tool_progress","tool_use_id":["x"],"tool_name":"Bash"}"#);
    decoder.push(b"\n");
    let item = decoder.next_item().unwrap().expect("a line, not an error");
    assert!(matches!(item.message, Message::Drift(_)));
}

#[test]
fn a_huge_line_that_does_not_fit_is_kept_without_trying_to_salvage_it() {
    let text = "x".repeat(switchboard_protocol::message::SALVAGE_MAX_BYTES);
    let line =
        format!(r#"{{"type":"result","subtype":"success","is_error":false,"usage":"{text}"}}"#);
    let message = Message::decode_str(&line).unwrap();
    let Message::Drift(drift) = &message else { panic!() };
    // Only the routing fields were read: the salvage was not tried.
    assert!(drift.left_out.starts_with("every field but"), "{}", drift.left_out);
}

#[test]
fn a_hook_matcher_written_as_null_reads_as_every_tool() {
    // The SDKs write `"matcher": null` for "all tools".
    let line = r#"{"type":"control_request","request_id":"r","request":{"subtype":"initialize","hooks":{"PreToolUse":[{"matcher":null,"hookCallbackIds":["h"]}]}}}"#;
    let message = Message::decode_str(line).unwrap();
    assert!(!matches!(message, Message::Drift(_)), "{message:?}");
    let again: serde_json::Value = serde_json::from_str(&message.encode()).unwrap();
    assert_eq!(again, serde_json::from_str::<serde_json::Value>(line).unwrap());
}

#[test]
fn a_reason_quoting_a_long_value_is_cut_short() {
    let long = "y".repeat(10_000);
    let line = format!(
        r#"{{"type":"result","subtype":"success","is_error":false,"duration_ms":"{long}"}}"#
    );
    let Message::Drift(drift) = Message::decode_str(&line).unwrap() else { panic!() };
    assert!(drift.reason.chars().count() <= switchboard_protocol::message::MAX_REASON_CHARS + 1);
    assert!(drift.reason.ends_with('…'), "{}", drift.reason);
    assert_eq!(drift.left_out, "duration_ms");
}

#[test]
fn a_pending_permission_request_is_never_left_out() {
    // An answer listing a pending request that does not fit: no reading may drop it.
    let line = r#"{"type":"control_response","response":{"subtype":"error","request_id":"r","error":"Already initialized","pending_permission_requests":[{"type":"control_request","request_id":"p1","request":{"subtype":"can_use_tool","tool_name":5,"input":{}}}]}}"#;
    let Message::Drift(drift) = Message::decode_str(line).unwrap() else { panic!() };
    assert!(!drift.left_out.contains("pending_permission_requests"), "{}", drift.left_out);
}
