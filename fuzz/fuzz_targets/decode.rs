//! Fuzzes the NDJSON codec and the decoder together: arbitrary bytes, cut into chunks whose
//! sizes come from the input, must never panic; every decoded line must re-encode to its exact
//! bytes, its typed view must serialize to valid JSON, and routing must agree on the type.
//!
//! Run: `scripts/fuzz.sh 60 decode`.

#![no_main]

use libfuzzer_sys::fuzz_target;
use switchboard_protocol::{Decoder, Envelope, Message};

fuzz_target!(|data: &[u8]| {
    let Some((&chunk_seed, bytes)) = data.split_first() else { return };
    let chunk = usize::from(chunk_seed % 64) + 1;
    let mut decoder = Decoder::new(4096);
    let check = |decoder: &mut Decoder| {
        while let Some(item) = decoder.next_item() {
            if let Ok(received) = item {
                let mut expected = received.raw.as_bytes().to_vec();
                expected.push(b'\n');
                assert_eq!(received.encode(), expected);
                let typed = received.message.encode();
                serde_json::from_str::<serde_json::Value>(&typed)
                    .expect("typed view is valid JSON");
                let envelope =
                    Envelope::parse(received.raw.as_bytes()).expect("routing reads a decoded line");
                if !matches!(received.message, Message::Unknown(_)) {
                    assert_eq!(envelope.kind.as_deref(), received.message.type_name());
                }
            }
        }
    };
    for piece in bytes.chunks(chunk) {
        decoder.push(piece);
        check(&mut decoder);
    }
    if let Some(Ok(received)) = decoder.finish() {
        serde_json::from_str::<serde_json::Value>(&received.message.encode())
            .expect("typed view is valid JSON");
    }
});
