//! The Claude Code stream-json protocol: typed messages in both directions and a sans-IO
//! NDJSON codec. Pure data: no I/O, no async runtime.
//!
//! - [`Message`]: one line of the protocol, every type the protocol's documents describe and every
//!   type the real CLI was seen to emit (`docs/protocol.md`). Unknown types, subtypes and
//!   fields decode without error and are kept. A JSON object with a `type` is never
//!   malformed: a known type whose fields do not fit (a newer CLI changed a field's shape) is
//!   [`Message::Drift`], kept whole with the reason. Numbers the CLI may write either way are
//!   [`Num`]s.
//! - [`Received`]: a decoded line together with its exact bytes, so that an unchanged line is
//!   written back byte-for-byte.
//! - [`Envelope`]: the routing fields (`type`, `subtype`, `session_id`, `uuid`, `request_id`,
//!   `parent_tool_use_id`) without building the message.
//! - [`codec`]: bytes in, lines out, with a line limit and error items that do not end the
//!   stream.
//! - [`transcript`]: what a line of the CLI's own transcript means where it differs (a prompt
//!   the CLI wrote, a turn's end without a `result`).
//!
//! ```
//! use switchboard_protocol::{codec::Decoder, Message};
//!
//! let mut decoder = Decoder::default();
//! decoder.push(b"{\"type\":\"keep_alive\"}\n{\"type\":\"result\",\"subtype\":\"success\",");
//! decoder.push(b"\"is_error\":false,\"result\":\"hi\",\"new_field\":1}\n");
//! let first = decoder.next_item().unwrap().unwrap();
//! assert!(matches!(first.message, Message::KeepAlive(_)));
//! let second = decoder.next_item().unwrap().unwrap();
//! let Message::Result(result) = &second.message else { panic!() };
//! assert_eq!(result.result.as_deref(), Some("hi"));
//! assert_eq!(result.extra["new_field"], 1);
//! assert!(decoder.next_item().is_none()); // need more
//! ```

pub mod codec;
pub mod content;
pub mod control;
pub mod envelope;
pub mod message;
pub mod permission;
pub mod stream;
pub mod system;
pub mod transcript;
mod wire;

pub use codec::{encode_line, Decoder, LineError, LineSplitter, Received, MAX_LINE_BYTES};
pub use content::{AssistantBody, ContentBlock, ToolResultBlock, ToolUseBlock, Usage, UserBody};
pub use control::{
    ControlCancelRequest, ControlRequest, ControlRequestPayload, ControlResponse,
    ControlResponseBody, HookOutput, InitializeRequest, InitializeResponse, MatchedAskRule,
    McpServerProvenance,
};
pub use envelope::Envelope;
pub use message::{
    DecodeError, Direction, Drift, Message, MessageOrigin, MessagePriority, ResultMessage,
    UserMessage,
};
pub use permission::{PermissionMode, PermissionResult, PermissionUpdate};
pub use system::{McpServerEntry, SystemMessage};
pub use wire::{Extra, Num, RawJson, TextOr};
