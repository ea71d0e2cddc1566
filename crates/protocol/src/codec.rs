//! The sans-IO NDJSON codec: bytes in, lines out.
//!
//! Feed it whatever arrives (a pipe read, a WebSocket frame: many lines in one chunk or one
//! line over many chunks) with [`LineSplitter::push`], then take lines with
//! [`LineSplitter::next_line`] until it says "need more" (`None`). A line longer than the limit
//! becomes one error item naming its position and a preview, and the stream goes on with the
//! next line; so does a malformed line in [`Decoder`].
//!
//! This is a plain iterator-style API rather than a `tokio_util` codec so that one bad line
//! cannot end the stream (a `FramedRead` stops at the first `Err`); the transport wraps it.
//!
//! [`Decoder`] decodes each line where the splitter's buffer holds it and copies its text once,
//! into the [`Received`] (the exact text, shared as an `Arc<str>`, and the typed view).
//! [`encode_line`] is the strict writer of the lines we build.

use std::fmt;

use crate::message::{DecodeError, Message};

/// The longest line accepted, in bytes.
///
/// The largest real lines are about 5.3 MB: a 5 MB file written by the Write tool reaches the
/// wire four times over (input_json_delta, assistant, can_use_tool, tool result;
/// `q_large_tool_results`). 64 MiB leaves room for tool output ten times that size while still
/// bounding what one peer can make us buffer.
pub const MAX_LINE_BYTES: usize = 64 * 1024 * 1024;

/// Buffer capacity kept while idle; more is released once every line is taken.
pub const RETAINED_BUFFER_BYTES: usize = 16 * 1024;

/// How much of a bad line an error shows.
pub const PREVIEW_CHARS: usize = 80;

/// Where a line sits in the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    /// 1-based line number, counting blank lines.
    pub line: u64,
    /// Byte offset of the line's first byte from the start of the stream.
    pub offset: u64,
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {} (byte {})", self.line, self.offset)
    }
}

/// One complete line, without its `\n` (or `\r\n`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawLine {
    /// The bytes.
    pub bytes: Vec<u8>,
    /// Where it was.
    pub position: Position,
}

/// A line that could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{position}: {kind}; starts {preview:?}")]
pub struct LineError {
    /// Where it was.
    pub position: Position,
    /// The first [`PREVIEW_CHARS`] characters, lossily decoded.
    pub preview: String,
    /// What was wrong.
    pub kind: LineErrorKind,
    /// When the line's routing fields say it was a control request: its id and subtype. The
    /// request must still be answered, or the CLI waits for an answer forever.
    pub control_request: Option<ControlRef>,
}

/// The routing fields of a control request that could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlRef {
    /// `request_id`.
    pub request_id: String,
    /// `request.subtype`.
    pub subtype: Option<String>,
}

impl ControlRef {
    /// The control request `line` is, by its routing fields alone.
    pub fn of(line: &[u8]) -> Option<ControlRef> {
        let envelope = crate::envelope::Envelope::parse(line).ok()?;
        if envelope.kind() != "control_request" {
            return None;
        }
        Some(ControlRef {
            request_id: envelope.request_id.as_deref()?.to_owned(),
            subtype: envelope.subtype.as_deref().map(str::to_owned),
        })
    }
}

/// What was wrong with a line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LineErrorKind {
    /// Longer than the limit; the rest of it was skipped.
    #[error("line exceeds the {limit}-byte limit")]
    Oversize {
        /// The limit in force.
        limit: usize,
    },
    /// Not a protocol message: not UTF-8, not JSON, or not a JSON object. (An object of a
    /// known type whose fields do not fit is no error: it decodes to [`Message::Drift`].)
    #[error("{0}")]
    Malformed(String),
}

/// The most buffer capacity a [`LineSplitter`] keeps while it holds no bytes.
pub const KEEP_BUFFER_BYTES: usize = 64 * 1024;

/// Splits a byte stream into lines.
#[derive(Debug)]
pub struct LineSplitter {
    /// Bytes received and not yet returned; `buf[start..]` is live.
    buf: Vec<u8>,
    /// Where the next line begins in `buf`.
    start: usize,
    /// How far past `start` we already looked for `\n` (so a long line is scanned once).
    scanned: usize,
    /// The limit in force.
    max_line_bytes: usize,
    /// Position of `buf[start]`.
    next: Position,
    /// Set while skipping the rest of an oversize line.
    discarding: bool,
}

impl Default for LineSplitter {
    fn default() -> Self {
        Self::new(MAX_LINE_BYTES)
    }
}

impl LineSplitter {
    /// A splitter with the given line limit.
    pub fn new(max_line_bytes: usize) -> Self {
        LineSplitter {
            buf: Vec::new(),
            start: 0,
            scanned: 0,
            max_line_bytes,
            next: Position { line: 1, offset: 0 },
            discarding: false,
        }
    }

    /// Appends received bytes.
    pub fn push(&mut self, bytes: &[u8]) {
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        // A huge line once must not cost its size for the rest of the session: with nothing
        // held, a large buffer is given back.
        if self.buf.is_empty() && self.buf.capacity() > KEEP_BUFFER_BYTES {
            self.buf = Vec::new();
        }
        if self.discarding {
            // Only the end of the oversize line matters: keep from the first newline on.
            match memchr::memchr(b'\n', bytes) {
                Some(newline) => {
                    self.next.offset += newline as u64 + 1;
                    self.next.line += 1;
                    self.discarding = false;
                    self.buf.extend_from_slice(&bytes[newline + 1..]);
                }
                None => self.next.offset += bytes.len() as u64,
            }
            return;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes held for a line not yet complete.
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.start
    }

    /// Memory held for buffering, in bytes (at least [`LineSplitter::buffered`]).
    pub fn capacity(&self) -> usize {
        self.buf.capacity()
    }

    /// The next complete line, an error item, or `None` when more bytes are needed.
    pub fn next_line(&mut self) -> Option<Result<RawLine, LineError>> {
        let item = self.next_slice()?;
        Some(item.map(|(bytes, position)| RawLine { bytes: bytes.to_vec(), position }))
    }

    /// [`LineSplitter::next_line`], the line borrowed from the buffer (until the next push).
    fn next_slice(&mut self) -> Option<Result<(&[u8], Position), LineError>> {
        loop {
            if self.discarding {
                return None;
            }
            let live = &self.buf[self.start..];
            match memchr::memchr(b'\n', &live[self.scanned..]) {
                Some(found) => {
                    let end = self.scanned + found;
                    let position = self.next;
                    let mut line = &live[..end];
                    if line.last() == Some(&b'\r') {
                        line = &line[..line.len() - 1];
                    }
                    let length = line.len();
                    let blank = line.iter().all(u8::is_ascii_whitespace);
                    let oversize = (!blank && length > self.max_line_bytes)
                        .then(|| oversize(position, line, self.max_line_bytes));
                    let from = self.start;
                    self.start += end + 1;
                    self.scanned = 0;
                    self.next = Position {
                        line: position.line + 1,
                        offset: position.offset + end as u64 + 1,
                    };
                    if let Some(error) = oversize {
                        return Some(Err(error));
                    }
                    if !blank {
                        return Some(Ok((&self.buf[from..from + length], position)));
                    }
                }
                None => {
                    if live.is_empty() && self.buf.capacity() > RETAINED_BUFFER_BYTES {
                        // Idle after a big line: give the memory back.
                        self.buf = Vec::new();
                        self.start = 0;
                        self.scanned = 0;
                        return None;
                    }
                    self.scanned = live.len();
                    if live.len() > self.max_line_bytes {
                        let error = oversize(self.next, live, self.max_line_bytes);
                        self.next.offset += live.len() as u64;
                        self.buf.clear();
                        self.start = 0;
                        self.scanned = 0;
                        self.discarding = true;
                        return Some(Err(error));
                    }
                    return None;
                }
            }
        }
    }

    /// At the end of the stream: the last line if it had no newline.
    pub fn finish(&mut self) -> Option<Result<RawLine, LineError>> {
        if let Some(item) = self.next_line() {
            return Some(item);
        }
        if self.discarding {
            self.discarding = false;
            return None;
        }
        let live = &self.buf[self.start..];
        let mut line = live;
        if line.last() == Some(&b'\r') {
            line = &line[..line.len() - 1];
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            self.buf.clear();
            self.start = 0;
            self.scanned = 0;
            return None;
        }
        let item = RawLine { bytes: line.to_vec(), position: self.next };
        self.next.offset += live.len() as u64;
        self.next.line += 1;
        self.buf.clear();
        self.start = 0;
        self.scanned = 0;
        Some(Ok(item))
    }
}

fn oversize(position: Position, line: &[u8], limit: usize) -> LineError {
    LineError {
        position,
        preview: preview(line),
        kind: LineErrorKind::Oversize { limit },
        control_request: None,
    }
}

/// The first [`PREVIEW_CHARS`] characters of `bytes`, lossily decoded.
pub fn preview(bytes: &[u8]) -> String {
    let head = &bytes[..bytes.len().min(PREVIEW_CHARS * 4)];
    let text = String::from_utf8_lossy(head);
    let mut preview: String = text.chars().take(PREVIEW_CHARS).collect();
    if preview.len() < bytes.len() {
        preview.push('…');
    }
    preview
}

/// One decoded line: its exact bytes and its typed view.
///
/// [`Received::encode`] gives back exactly the bytes that came in (plus the newline), so a
/// relay forwards lines it did not change byte-for-byte, unknown fields and key order included.
#[derive(Debug, Clone, PartialEq)]
pub struct Received {
    /// The line as received, without its newline (shared: the session's event for the line
    /// holds the same text).
    pub raw: std::sync::Arc<str>,
    /// The typed view.
    pub message: Message,
}

impl Received {
    /// Decodes one line (without its newline); its text is copied once, into `raw`.
    pub fn decode(line: &[u8]) -> Result<Received, DecodeError> {
        let raw = std::str::from_utf8(line).map_err(DecodeError::NotUtf8)?;
        let raw = without_terminal_escapes(raw);
        let message = Message::decode_str(raw)?;
        Ok(Received { raw: raw.into(), message })
    }

    /// The line's `uuid`: from the typed message for the kinds a CLI sends most (no second
    /// read of the line), else from the line's [`Envelope`](crate::Envelope).
    pub fn uuid(&self) -> Option<std::borrow::Cow<'_, str>> {
        let typed = match &self.message {
            Message::StreamEvent(m) => m.uuid.as_deref(),
            Message::Assistant(m) => m.uuid.as_deref(),
            Message::User(m) => m.uuid.as_deref(),
            Message::Result(m) => m.uuid.as_deref(),
            _ => return crate::Envelope::parse(self.raw.as_bytes()).ok()?.uuid,
        };
        typed.map(std::borrow::Cow::Borrowed)
    }

    /// The line exactly as received, with a trailing `\n`.
    pub fn encode(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(self.raw.len() + 1);
        bytes.extend_from_slice(self.raw.as_bytes());
        bytes.push(b'\n');
        bytes
    }
}

/// Bytes in, decoded messages out: a [`LineSplitter`], each line decoded as
/// [`Received::decode`] does, where the splitter's buffer holds it.
#[derive(Debug, Default)]
pub struct Decoder {
    lines: LineSplitter,
}

/// What [`Decoder`] yields for each non-blank line.
pub type DecodedItem = Result<Received, LineError>;

impl Decoder {
    /// A decoder with the given line limit.
    pub fn new(max_line_bytes: usize) -> Self {
        Decoder { lines: LineSplitter::new(max_line_bytes) }
    }

    /// Appends received bytes.
    pub fn push(&mut self, bytes: &[u8]) {
        self.lines.push(bytes);
    }

    /// The next decoded line, an error item, or `None` when more bytes are needed. The line
    /// is decoded where the splitter holds it and copied once, into the `Received`.
    pub fn next_item(&mut self) -> Option<DecodedItem> {
        let item = self.lines.next_slice()?;
        Some(item.and_then(|(bytes, position)| decode_line(bytes, position)))
    }

    /// At the end of the stream: the last line if it had no newline.
    pub fn finish(&mut self) -> Option<DecodedItem> {
        let line = self.lines.finish()?;
        Some(line.and_then(|line| decode_line(&line.bytes, line.position)))
    }

    /// Bytes held for a line not yet complete.
    pub fn buffered(&self) -> usize {
        self.lines.buffered()
    }
}

fn decode_line(bytes: &[u8], position: Position) -> DecodedItem {
    // The preview is built only on the error path: the hot path allocates nothing extra.
    let malformed = |error: DecodeError| LineError {
        position,
        preview: preview(bytes),
        kind: LineErrorKind::Malformed(error.to_string()),
        control_request: ControlRef::of(bytes),
    };
    let raw = std::str::from_utf8(bytes).map_err(|error| malformed(DecodeError::NotUtf8(error)))?;
    let raw = without_terminal_escapes(raw);
    match Message::decode_str(raw) {
        Ok(message) => Ok(Received { raw: raw.into(), message }),
        Err(error) => Err(malformed(error)),
    }
}

/// `line` without the terminal control sequences (`ESC [ … final`) it starts with, if any.
///
/// 1.0.112 runs `/clear` as it would on a terminal: it writes `ESC[2J ESC[3J ESC[H` (clear the
/// screen and its scrollback, cursor home) to stdout, glued to the next line, the turn's
/// `system/init`. Read as it came, that init would be malformed and lost; the sequences say
/// nothing to a host, so they are dropped and the line is read (and kept) from its `{`.
pub fn without_terminal_escapes(line: &str) -> &str {
    let mut rest = line;
    while let Some(after) = rest.strip_prefix("\u{1b}[") {
        // Parameter and intermediate bytes, then one final byte (`@` to `~`).
        let Some(end) = after.find(|c: char| ('@'..='~').contains(&c)) else { return rest };
        if !after[..end].chars().all(|c| (' '..='?').contains(&c)) {
            return rest;
        }
        rest = &after[end + 1..];
    }
    rest
}

/// Writes a message as one NDJSON line: compact JSON and a trailing `\n`.
///
/// The strict writer: serde_json escapes every control character, so the text never contains
/// a raw newline, and every line ends with exactly one `\n` (2.1.37 glues an unterminated
/// WebSocket frame to the next one and dies).
pub fn encode_line(message: &Message) -> Vec<u8> {
    let mut bytes = message.encode().into_bytes();
    bytes.push(b'\n');
    bytes
}

#[cfg(test)]
mod tests;
