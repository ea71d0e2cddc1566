//! Properties of the codec: arbitrary objects split at arbitrary points come out whole, in
//! order, and nothing panics on arbitrary bytes.

use proptest::prelude::*;
use serde_json::{Map, Value};
use switchboard_protocol::codec::{Decoder, LineSplitter};

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
        ".{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(".{0,8}", inner, 0..6)
                .prop_map(|map| Value::Object(map.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

fn json_object() -> impl Strategy<Value = Value> {
    (
        prop_oneof![
            Just("user"),
            Just("assistant"),
            Just("stream_event"),
            Just("system"),
            Just("result"),
            Just("control_request"),
            Just("control_response"),
            Just("no_such_type")
        ],
        prop::collection::btree_map("[a-z_]{1,10}", json_value(), 0..6),
    )
        .prop_map(|(kind, fields)| {
            let mut object: Map<String, Value> = fields.into_iter().collect();
            object.insert("type".into(), Value::from(kind));
            Value::Object(object)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Lines split at arbitrary points come out whole and in order.
    #[test]
    fn splits_never_lose_or_reorder_lines(
        objects in prop::collection::vec(json_object(), 1..12),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..16),
        crlf in any::<bool>(),
    ) {
        let mut stream = Vec::new();
        let mut expected = Vec::new();
        for object in &objects {
            let line = serde_json::to_string(object).unwrap();
            stream.extend_from_slice(line.as_bytes());
            stream.extend_from_slice(if crlf { b"\r\n" } else { b"\n" });
            expected.push(line.into_bytes());
        }
        let mut points: Vec<usize> = cuts.iter().map(|cut| cut.index(stream.len() + 1)).collect();
        points.push(0);
        points.push(stream.len());
        points.sort_unstable();
        let mut splitter = LineSplitter::default();
        let mut lines = Vec::new();
        for window in points.windows(2) {
            splitter.push(&stream[window[0]..window[1]]);
            while let Some(line) = splitter.next_line() {
                lines.push(line.unwrap().bytes);
            }
        }
        prop_assert!(splitter.finish().is_none());
        prop_assert_eq!(lines, expected);
    }

    /// Every object decodes (typed or unknown, or a schema error item for a known type with
    /// wrong fields) and the count of items equals the count of lines.
    #[test]
    fn decoder_yields_one_item_per_line(objects in prop::collection::vec(json_object(), 1..12)) {
        let mut decoder = Decoder::default();
        let mut stream = String::new();
        for object in &objects {
            stream.push_str(&serde_json::to_string(object).unwrap());
            stream.push('\n');
        }
        decoder.push(stream.as_bytes());
        let mut items = 0;
        while let Some(item) = decoder.next_item() {
            if let Ok(received) = item {
                prop_assert_eq!(received.encode(), format!("{}\n", received.raw).into_bytes());
            }
            items += 1;
        }
        prop_assert_eq!(items, objects.len());
    }

    /// Arbitrary bytes in arbitrary chunks never panic, and the line limit holds.
    #[test]
    fn arbitrary_bytes_never_panic(chunks in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..64), 0..16)) {
        let mut decoder = Decoder::new(48);
        for chunk in &chunks {
            decoder.push(chunk);
            while let Some(item) = decoder.next_item() {
                if let Ok(received) = item {
                    prop_assert!(received.raw.len() <= 48);
                }
            }
            prop_assert!(decoder.buffered() <= 48 + 64);
        }
        let _ = decoder.finish();
    }
}

/// A huge line does not cost its size for the rest of the stream: once it is taken, the
/// splitter gives the buffer back before holding the next bytes.
#[test]
fn a_huge_line_does_not_keep_its_buffer() {
    let mut splitter = LineSplitter::default();
    let mut huge = vec![b'x'; 4 * 1024 * 1024];
    huge.push(b'\n');
    splitter.push(&huge);
    assert_eq!(splitter.next_line().unwrap().unwrap().bytes.len(), 4 * 1024 * 1024);
    assert!(splitter.capacity() >= 4 * 1024 * 1024);
    splitter.push(b"{\"type\":\"ok\"}\n");
    assert!(
        splitter.capacity() <= switchboard_protocol::codec::KEEP_BUFFER_BYTES,
        "still holds {} bytes",
        splitter.capacity()
    );
    assert_eq!(splitter.next_line().unwrap().unwrap().bytes, b"{\"type\":\"ok\"}");
}
