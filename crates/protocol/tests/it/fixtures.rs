//! Every line of every capture decodes, re-encodes byte-for-byte, and loses nothing in the
//! typed view; the typed view of each file is snapshotted.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use switchboard_protocol::codec::{Decoder, LineErrorKind};
use switchboard_protocol::content::ContentBlock;
use switchboard_protocol::control::{ControlRequestPayload, ControlResponseBody};
use switchboard_protocol::stream::{Delta, StreamEvent};
use switchboard_protocol::{Envelope, Message, Received, SystemMessage, TextOr};

/// One line of a capture file.
#[derive(Deserialize)]
struct CaptureLine<'a> {
    dir: &'a str,
    #[serde(borrow)]
    msg: Option<&'a RawValue>,
    raw: Option<String>,
}

pub(crate) fn fixture_files() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut files = Vec::new();
    for dir in std::fs::read_dir(&root).unwrap() {
        let dir = dir.unwrap().path();
        if !dir.is_dir() {
            continue;
        }
        for file in std::fs::read_dir(&dir).unwrap() {
            let file = file.unwrap().path();
            if file.extension().is_some_and(|ext| ext == "ndjson") {
                files.push(file);
            }
        }
    }
    files.sort();
    assert!(files.len() >= 140, "expected the capture corpus, found {} files", files.len());
    files
}

/// The `msg` lines of one capture: (direction, exact bytes).
pub(crate) fn messages(path: &Path) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .filter_map(|line| {
            let capture: CaptureLine<'_> = serde_json::from_str(line).unwrap();
            capture.msg.map(|msg| (capture.dir.to_owned(), msg.get().to_owned()))
        })
        .collect()
}

fn fixture_name(path: &Path) -> String {
    let version = path.parent().unwrap().file_name().unwrap().to_string_lossy();
    let scenario = path.file_stem().unwrap().to_string_lossy();
    format!("{version}__{scenario}")
}

/// Messages the captures sent on purpose to see what the CLI does with unknown input.
fn deliberately_unknown(message: &Message) -> bool {
    match message {
        Message::Unknown(value) => value["type"] == "bogus_type",
        Message::ControlRequest(request) => {
            matches!(&request.request, ControlRequestPayload::Unknown(v) if v["subtype"] == "frobnicate_capture_test")
        }
        _ => false,
    }
}

#[test]
fn every_capture_line_decodes_and_round_trips() {
    let mut total = 0;
    let mut failures = Vec::new();
    for path in fixture_files() {
        for (index, (_, raw)) in messages(&path).into_iter().enumerate() {
            total += 1;
            let place = format!("{}:{}", fixture_name(&path), index + 1);
            let received = match Received::decode(raw.as_bytes()) {
                Ok(received) => received,
                Err(error) => {
                    failures.push(format!("{place}: decode: {error}"));
                    continue;
                }
            };
            // Byte-for-byte when nothing changed.
            if received.encode() != format!("{raw}\n").into_bytes() {
                failures.push(format!("{place}: raw re-encode differs"));
            }
            // The typed view loses nothing: serializing it gives the same JSON value.
            let original: Value = serde_json::from_str(&raw).unwrap();
            let typed: Value = serde_json::from_str(&received.message.encode()).unwrap();
            if original != typed {
                failures.push(format!(
                    "{place}: typed view differs: {}",
                    first_difference(&original, &typed)
                ));
            }
            // Nothing unknown but what the captures sent on purpose.
            if has_unknown(&received.message) && !deliberately_unknown(&received.message) {
                failures
                    .push(format!("{place}: unknown variant in {}", &raw[..raw.len().min(200)]));
            }
            // The envelope agrees with the full decode.
            let envelope = Envelope::parse(raw.as_bytes()).unwrap();
            if envelope.kind.as_deref() != received.message.type_name()
                || envelope.subtype.as_deref() != received.message.subtype()
            {
                failures.push(format!("{place}: envelope disagrees"));
            }
        }
    }
    assert!(total > 4000, "only {total} lines read");
    assert!(
        failures.is_empty(),
        "{} of {total} lines failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn first_difference(a: &Value, b: &Value) -> String {
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => {
            for (key, value) in a {
                match b.get(key) {
                    None => return format!("missing {key}"),
                    Some(other) if other != value => {
                        return format!("{key}.{}", first_difference(value, other))
                    }
                    _ => {}
                }
            }
            b.keys()
                .find(|key| !a.contains_key(*key))
                .map(|key| format!("added {key}"))
                .unwrap_or_default()
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => a
            .iter()
            .zip(b)
            .position(|(x, y)| x != y)
            .map(|i| format!("[{i}].{}", first_difference(&a[i], &b[i])))
            .unwrap_or_default(),
        _ => format!("{a} != {b}"),
    }
}

/// Whether any enum in the message fell back to `Unknown`.
fn has_unknown(message: &Message) -> bool {
    let blocks_unknown = |blocks: &[ContentBlock]| {
        blocks.iter().any(|block| match block {
            ContentBlock::Unknown(_) => true,
            ContentBlock::ToolResult(result) => {
                matches!(&result.content, Some(TextOr::Items(items)) if items.iter().any(|b| matches!(b, ContentBlock::Unknown(_))))
            }
            _ => false,
        })
    };
    match message {
        Message::Unknown(_) => true,
        Message::System(system) => matches!(**system, SystemMessage::Unknown(_)),
        Message::Assistant(m) => blocks_unknown(&m.message.content),
        Message::User(m) => {
            matches!(&m.message.content, TextOr::Items(items) if blocks_unknown(items))
        }
        Message::StreamEvent(m) => match &m.event {
            StreamEvent::Unknown(_) => true,
            StreamEvent::ContentBlockDelta(delta) => matches!(delta.delta, Delta::Unknown(_)),
            StreamEvent::ContentBlockStart(start) => {
                matches!(start.content_block, ContentBlock::Unknown(_))
            }
            _ => false,
        },
        Message::ControlRequest(request) => match &request.request {
            ControlRequestPayload::Unknown(_) => true,
            ControlRequestPayload::CanUseTool(can_use_tool) => {
                can_use_tool.permission_suggestions.iter().flatten().any(|update| {
                    matches!(update, switchboard_protocol::PermissionUpdate::Unknown(_))
                })
            }
            _ => false,
        },
        Message::ControlResponse(response) => {
            matches!(response.response, ControlResponseBody::Unknown(_))
        }
        _ => false,
    }
}

/// A compact, reviewable view of how each line was typed.
fn view(dir: &str, message: &Message) -> Value {
    let mut view = json!({ "dir": dir, "variant": variant(message) });
    let object = view.as_object_mut().unwrap();
    if let Some(session_id) = message.session_id() {
        object.insert("session_id".into(), session_id.into());
    }
    match message {
        Message::Assistant(m) => {
            for block in &m.message.content {
                match block {
                    ContentBlock::Text(text) => {
                        object.insert("text".into(), short(&text.text));
                    }
                    ContentBlock::ToolUse(tool) => {
                        object.insert("tool".into(), tool.name.clone().into());
                        object.insert("tool_use_id".into(), tool.id.clone().into());
                    }
                    _ => {}
                }
            }
            if let Some(parent) = &m.parent_tool_use_id {
                object.insert("parent_tool_use_id".into(), parent.clone().into());
            }
        }
        Message::StreamEvent(m) => {
            if let StreamEvent::ContentBlockDelta(delta) = &m.event {
                if let Delta::Text(text) = &delta.delta {
                    object.insert("text".into(), short(&text.text));
                }
            }
        }
        Message::Result(m) => {
            object.insert("is_error".into(), m.is_error.into());
            if let Some(reason) = &m.terminal_reason {
                object.insert("terminal_reason".into(), reason.clone().into());
            }
        }
        Message::ControlRequest(m) => {
            object.insert("request_id".into(), m.request_id.clone().into());
            if let ControlRequestPayload::CanUseTool(request) = &m.request {
                object.insert("tool".into(), request.tool_name.clone().into());
                let suggestions: Vec<Value> = request
                    .permission_suggestions
                    .iter()
                    .flatten()
                    .map(|update| json!([update.tag(), update.destination().map(|d| d.as_str())]))
                    .collect();
                object.insert("suggestions".into(), suggestions.into());
            }
        }
        Message::ControlResponse(m) => {
            object.insert("request_id".into(), m.request_id().into());
            let pending = m.pending_permission_requests().len();
            if pending > 0 {
                object.insert("pending_permission_requests".into(), pending.into());
            }
        }
        Message::User(m) => {
            if let TextOr::Text(text) = &m.message.content {
                object.insert("text".into(), short(text));
            }
            let results: Vec<Value> =
                m.tool_results().map(|result| result.is_error.unwrap_or(false).into()).collect();
            if !results.is_empty() {
                object.insert("tool_results_is_error".into(), results.into());
            }
        }
        _ => {}
    }
    view
}

fn short(text: &str) -> Value {
    let mut text: String = text.chars().take(60).collect();
    if text.len() > 60 {
        text.push('…');
    }
    text.into()
}

fn variant(message: &Message) -> String {
    let name = message.type_name().unwrap_or("?").to_owned();
    match message {
        Message::Assistant(m) => format!("{name}/{}", block_names(&m.message.content)),
        Message::User(m) => match &m.message.content {
            TextOr::Text(_) => format!("{name}/text"),
            TextOr::Items(items) => format!("{name}/{}", block_names(items)),
        },
        Message::StreamEvent(m) => {
            let event = m.event.tag().unwrap_or("?");
            match &m.event {
                StreamEvent::ContentBlockDelta(delta) => {
                    format!("{name}/{event}/{}", delta.delta.tag().unwrap_or("?"))
                }
                StreamEvent::ContentBlockStart(start) => {
                    format!("{name}/{event}/{}", start.content_block.tag().unwrap_or("?"))
                }
                _ => format!("{name}/{event}"),
            }
        }
        _ => match message.subtype() {
            Some(subtype) => format!("{name}/{subtype}"),
            None => name,
        },
    }
}

fn block_names(blocks: &[ContentBlock]) -> String {
    let names: Vec<&str> = blocks.iter().map(|block| block.tag().unwrap_or("?")).collect();
    format!("[{}]", names.join(","))
}

#[test]
fn typed_view_snapshots() {
    for path in fixture_files() {
        let views: Vec<Value> = messages(&path)
            .iter()
            .map(|(dir, raw)| view(dir, &Message::decode(raw.as_bytes()).unwrap()))
            .collect();
        let mut settings = insta::Settings::clone_current();
        settings.set_snapshot_path("snapshots");
        settings.set_prepend_module_to_snapshot(false);
        settings.set_omit_expression(true);
        settings.bind(|| {
            insta::assert_json_snapshot!(fixture_name(&path), views, {
                "[].session_id" => "[session]",
                "[].request_id" => "[request]",
                "[].tool_use_id" => "[tool_use]",
                "[].parent_tool_use_id" => "[tool_use]",
            });
        });
    }
}

#[test]
fn raw_byte_chunks_of_the_captures_split_as_the_cli_would() {
    // p5_ws_framing sent a frame with two lines, a line over two frames, and a frame without
    // a newline glued to the next one (fatal for the CLI; for us, one malformed line).
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/2.1.37-sdk-url/p5_ws_framing.ndjson");
    let text = std::fs::read_to_string(path).unwrap();
    let mut decoder = Decoder::default();
    let mut types = Vec::new();
    let mut malformed = 0;
    for line in text.lines() {
        let capture: CaptureLine<'_> = serde_json::from_str(line).unwrap();
        let bytes = match (capture.dir, capture.msg, capture.raw) {
            ("out", Some(msg), _) => format!("{}\n", msg.get()),
            ("out", None, Some(raw)) => raw,
            _ => continue,
        };
        decoder.push(bytes.as_bytes());
        while let Some(item) = decoder.next_item() {
            match item {
                Ok(received) => types.push(received.message.type_name().unwrap_or("?").to_owned()),
                Err(error) => {
                    assert!(matches!(error.kind, LineErrorKind::Malformed(_)), "{error}");
                    malformed += 1;
                }
            }
        }
    }
    assert_eq!(types, ["control_request", "keep_alive", "user", "user"]);
    assert_eq!(malformed, 1, "the glued keep_alive + user line is one malformed line");
}

/// `Received::uuid` (typed for the common kinds) says what the line's envelope says, for every
/// captured line, and for lines whose typed view cannot hold it.
#[test]
fn a_lines_uuid_is_the_same_read_either_way() {
    let mut checked = 0;
    for file in fixture_files() {
        for (_, line) in messages(&file) {
            let received = Received::decode(line.as_bytes()).unwrap();
            let envelope = Envelope::parse(line.as_bytes()).unwrap();
            assert_eq!(received.uuid(), envelope.uuid, "{}: {line}", file.display());
            checked += usize::from(envelope.uuid.is_some());
        }
    }
    assert!(checked > 1000, "only {checked} lines with a uuid");
    for line in [
        r#"{"type":"stream_event","event":{"type":"message_stop"},"session_id":"s","parent_tool_use_id":null}"#,
        r#"{"type":"assistant","message":{"content":"not a list"},"uuid":"u-drift"}"#,
        r#"{"type":"brand_new","uuid":"u-unknown"}"#,
        r#"{"type":"system","subtype":"status","status":null,"uuid":"u-system"}"#,
        // Where the typed view gives up on the uuid, the envelope reads it.
        r#"{"type":"stream_event","event":{"type":"ping"},"uuid":null}"#,
        r#"{"type":"stream_event","event":{"type":"ping"},"uuid":7}"#,
        r#"{"type":"stream_event","event":{"type":"ping"},"uuid":"a","uuid":"b"}"#,
        r#"{"type":"result","subtype":"success","is_error":false,"uuid":"\u0061b\n"}"#,
        r#"{"type":"user","message":{"role":"user","content":"x"},"uuid":"u-\"quoted\""}"#,
    ] {
        let received = Received::decode(line.as_bytes()).unwrap();
        assert_eq!(received.uuid(), Envelope::parse(line.as_bytes()).unwrap().uuid, "{line}");
    }
}
