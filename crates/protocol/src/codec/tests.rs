//! Tests for the line splitter and the decoder.

use super::*;

fn drain(splitter: &mut LineSplitter) -> Vec<Result<RawLine, LineError>> {
    std::iter::from_fn(|| splitter.next_line()).collect()
}

#[test]
fn many_lines_in_one_chunk_and_one_line_over_many_chunks() {
    let mut splitter = LineSplitter::default();
    splitter.push(b"{\"a\":1}\n{\"b\":2}\n{\"c\"");
    let lines: Vec<Vec<u8>> = drain(&mut splitter).into_iter().map(|l| l.unwrap().bytes).collect();
    assert_eq!(lines, [b"{\"a\":1}".to_vec(), b"{\"b\":2}".to_vec()]);
    splitter.push(b":");
    assert!(splitter.next_line().is_none(), "need more");
    splitter.push(b"3}\n");
    let line = splitter.next_line().unwrap().unwrap();
    assert_eq!(line.bytes, b"{\"c\":3}");
    assert_eq!(line.position, Position { line: 3, offset: 16 });
}

#[test]
fn crlf_is_tolerated_and_blank_lines_are_skipped_but_counted() {
    let mut splitter = LineSplitter::default();
    splitter.push(b"\n  \r\n{\"a\":1}\r\n\n{\"b\":2}\n");
    let lines: Vec<RawLine> = drain(&mut splitter).into_iter().map(Result::unwrap).collect();
    assert_eq!(lines[0].bytes, b"{\"a\":1}");
    assert_eq!(lines[0].position.line, 3);
    assert_eq!(lines[1].bytes, b"{\"b\":2}");
    assert_eq!(lines[1].position, Position { line: 5, offset: 15 });
}

#[test]
fn an_oversize_line_is_one_error_and_the_stream_goes_on() {
    let mut splitter = LineSplitter::new(16);
    splitter.push(b"{\"ok\":1}\n{\"big\":\"0123456789");
    assert_eq!(splitter.next_line().unwrap().unwrap().bytes, b"{\"ok\":1}");
    let error = splitter.next_line().unwrap().unwrap_err();
    assert_eq!(error.kind, LineErrorKind::Oversize { limit: 16 });
    assert_eq!(error.position, Position { line: 2, offset: 9 });
    assert!(error.preview.starts_with("{\"big\""));
    // The rest of the big line, in pieces, is skipped without buffering.
    splitter.push(b"0123456789");
    assert!(splitter.next_line().is_none());
    assert_eq!(splitter.buffered(), 0);
    splitter.push(b"\"}\n{\"next\":2}\n");
    let next = splitter.next_line().unwrap().unwrap();
    assert_eq!(next.bytes, b"{\"next\":2}");
    assert_eq!(next.position.line, 3);
    assert_eq!(next.position.offset, 9 + 18 + 10 + 3);
}

#[test]
fn an_oversize_line_that_arrives_whole_is_reported_too() {
    let mut splitter = LineSplitter::new(4);
    splitter.push(b"{\"abc\":1}\n{}\n");
    assert!(matches!(
        splitter.next_line(),
        Some(Err(LineError { kind: LineErrorKind::Oversize { .. }, .. }))
    ));
    assert_eq!(splitter.next_line().unwrap().unwrap().bytes, b"{}");
}

#[test]
fn finish_returns_a_trailing_line_without_newline() {
    let mut splitter = LineSplitter::default();
    splitter.push(b"{\"a\":1}\n{\"b\":2}");
    assert_eq!(splitter.next_line().unwrap().unwrap().bytes, b"{\"a\":1}");
    assert!(splitter.next_line().is_none());
    assert_eq!(splitter.finish().unwrap().unwrap().bytes, b"{\"b\":2}");
    assert!(splitter.finish().is_none());
}

#[test]
fn malformed_lines_become_error_items_and_decoding_goes_on() {
    let mut decoder = Decoder::default();
    decoder.push(
        b"this is not json {\n[1,2]\n{\"type\":\"keep_alive\"}\n\xff\xfe\n{\"type\":\"user\"}\n",
    );
    let items: Vec<DecodedItem> = std::iter::from_fn(|| decoder.next_item()).collect();
    assert_eq!(items.len(), 5);
    let error = items[0].as_ref().unwrap_err();
    assert_eq!(error.position.line, 1);
    assert_eq!(error.preview, "this is not json {");
    assert!(error.to_string().contains("line 1 (byte 0)"), "{error}");
    assert!(items[1].as_ref().unwrap_err().to_string().contains("must be a JSON object"));
    assert!(matches!(items[2].as_ref().unwrap().message, Message::KeepAlive(_)));
    assert!(items[3].as_ref().unwrap_err().to_string().contains("not UTF-8"));
    // A user line without `message` is no error: it is the type's drift form, with the reason.
    let Message::Drift(drift) = &items[4].as_ref().unwrap().message else {
        panic!("{:?}", items[4])
    };
    assert!(drift.reason.contains("type \"user\": missing field `message`"), "{}", drift.reason);
}

#[test]
fn preview_is_short_and_marks_truncation() {
    let long = "x".repeat(500);
    let preview = preview(long.as_bytes());
    assert_eq!(preview.chars().count(), PREVIEW_CHARS + 1);
    assert!(preview.ends_with('…'));
    assert_eq!(super::preview(b"short"), "short");
}

#[test]
fn encode_line_ends_with_exactly_one_newline_and_has_no_raw_newline_inside() {
    let message = crate::UserMessage::prompt("two\nlines").into();
    let bytes = encode_line(&message);
    assert_eq!(bytes.iter().filter(|&&b| b == b'\n').count(), 1);
    assert_eq!(bytes.last(), Some(&b'\n'));
}

/// The decoder's lines, read where its buffer holds them: blank lines skipped but counted,
/// CRLF taken off, an oversize line reported where it began, a line split across pushes read
/// whole, and the last line without a newline given by `finish`, each at its place.
#[test]
fn the_decoder_reads_each_line_in_place_with_its_position() {
    let mut decoder = Decoder::new(24);
    decoder.push(
        b"\n \r\n{\"type\":\"keep_alive\"}\r\n{\"big\":\"0123456789abcdef\"}\n{\"type\":\"ke",
    );
    let first = decoder.next_item().unwrap().unwrap();
    assert_eq!(&*first.raw, "{\"type\":\"keep_alive\"}");
    assert!(matches!(first.message, Message::KeepAlive(_)));
    let oversize = decoder.next_item().unwrap().unwrap_err();
    assert_eq!(oversize.position, Position { line: 4, offset: 27 });
    assert!(matches!(oversize.kind, LineErrorKind::Oversize { limit: 24 }), "{oversize}");
    assert!(decoder.next_item().is_none());
    decoder.push(b"ep_alive\"}\n{\"type\":\"keep_alive\"}");
    let split = decoder.next_item().unwrap().unwrap();
    assert_eq!(&*split.raw, "{\"type\":\"keep_alive\"}");
    assert!(decoder.next_item().is_none());
    let last = decoder.finish().unwrap().unwrap();
    assert_eq!(&*last.raw, "{\"type\":\"keep_alive\"}");
    assert!(decoder.finish().is_none());
}

#[test]
fn a_line_after_a_terminal_clear_is_read_from_its_brace() {
    // 1.0.112's `/clear`: clear screen, clear scrollback, cursor home, then the init line.
    let line =
        "\u{1b}[2J\u{1b}[3J\u{1b}[H{\"type\":\"system\",\"subtype\":\"init\",\"session_id\":\"s\"}";
    let received = Received::decode(line.as_bytes()).unwrap();
    assert!(matches!(received.message, Message::System(_)));
    assert!(received.raw.starts_with('{'), "kept from its brace: {}", received.raw);
    assert_eq!(without_terminal_escapes("{}"), "{}");
    // Not a control sequence: left as it is (and so malformed).
    assert_eq!(without_terminal_escapes("\u{1b}[2J\u{1b}x{}"), "\u{1b}x{}");
    assert_eq!(without_terminal_escapes("\u{1b}[2"), "\u{1b}[2");
    assert!(Received::decode("\u{1b}[\u{1}J{}".as_bytes()).is_err());
}
