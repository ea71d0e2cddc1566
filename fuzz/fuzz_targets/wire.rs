//! Fuzzes the typed messages the wire macros generate: any line that decodes must write out
//! as a line that decodes again, to the same writing (a typed message is stable), and a line
//! read into a known type loses nothing: its writing is the same JSON value as the line. A
//! line that names a key twice in one object is only decoded and written. A field the CLI
//! always sends (`parent_tool_use_id`) is written as `null` when a line lacks it.
//!
//! Run: `scripts/fuzz.sh 60 wire`.

#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use switchboard_protocol::Message;

fuzz_target!(|data: &[u8]| {
    let Ok(message) = Message::decode(data) else { return };
    let written = message.encode();
    let again = Message::decode(written.as_bytes()).expect("a written message decodes");
    // The line as read: terminal control sequences it starts with are not part of it (1.0.112
    // glues a screen clear to a line; see `without_terminal_escapes`).
    let text = std::str::from_utf8(data).expect("a decoded line is text");
    let data = switchboard_protocol::codec::without_terminal_escapes(text).as_bytes();
    if has_repeated_keys(data) {
        // JSON leaves open which of two same-named keys counts: no single answer to check.
        return;
    }
    assert_eq!(again.encode(), written, "a typed message writes the same way twice");
    if matches!(message, Message::Drift(_)) {
        return;
    }
    let mut sent: Value = serde_json::from_slice(data).expect("a decoded line is JSON");
    with_always_written(&mut sent);
    let kept: Value = serde_json::from_str(&written).expect("a written message is JSON");
    assert_eq!(kept, sent, "a message read and written again loses nothing");
});

/// The line as its type writes it: a `nul` field (`wire_struct!`) is always written, `null`
/// when the line had no such key, so the comparison adds that `null` to the line first.
/// Nothing is lost that way; the writing only says outright what absence meant.
fn with_always_written(sent: &mut Value) {
    let Some(line) = sent.as_object_mut() else { return };
    match line.get("type").and_then(Value::as_str) {
        Some("assistant" | "user" | "stream_event" | "tool_progress") => {
            line.entry("parent_tool_use_id").or_insert(Value::Null);
        }
        Some("control_request") => {
            let Some(request) = line.get_mut("request").and_then(Value::as_object_mut) else {
                return;
            };
            if request.get("subtype").and_then(Value::as_str) == Some("set_max_thinking_tokens") {
                request.entry("max_thinking_tokens").or_insert(Value::Null);
            }
        }
        _ => {}
    }
}

/// Whether some object in the line names a key twice.
fn has_repeated_keys(data: &[u8]) -> bool {
    struct Check(bool);
    impl<'de> serde::de::DeserializeSeed<'de> for &mut Check {
        type Value = ();
        fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(self)
        }
    }
    impl<'de> serde::de::Visitor<'de> for &mut Check {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("JSON")
        }
        fn visit_bool<E>(self, _: bool) -> Result<(), E> {
            Ok(())
        }
        fn visit_i64<E>(self, _: i64) -> Result<(), E> {
            Ok(())
        }
        fn visit_u64<E>(self, _: u64) -> Result<(), E> {
            Ok(())
        }
        fn visit_f64<E>(self, _: f64) -> Result<(), E> {
            Ok(())
        }
        fn visit_str<E>(self, _: &str) -> Result<(), E> {
            Ok(())
        }
        fn visit_unit<E>(self) -> Result<(), E> {
            Ok(())
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            while seq.next_element_seed(&mut *self)?.is_some() {}
            Ok(())
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            let mut seen = std::collections::HashSet::new();
            while let Some(key) = map.next_key::<String>()? {
                if !seen.insert(key) {
                    self.0 = true;
                }
                map.next_value_seed(&mut *self)?;
            }
            Ok(())
        }
    }
    let mut check = Check(false);
    let mut reader = serde_json::Deserializer::from_slice(data);
    let _ = serde::de::DeserializeSeed::deserialize(&mut check, &mut reader);
    check.0
}
