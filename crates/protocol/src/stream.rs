//! Anthropic streaming events, as carried by `stream_event` lines (with
//! `--include-partial-messages`).

use serde_json::Value;

use crate::content::{AssistantBody, ContentBlock, Usage};
use crate::wire::{wire_enum, wire_struct};

wire_enum! {
    /// One Anthropic SSE event.
    pub enum StreamEvent by "type" {
        /// A new API message begins.
        MessageStart(MessageStart) = "message_start",
        /// A content block begins.
        ContentBlockStart(ContentBlockStart) = "content_block_start",
        /// A piece of a content block.
        ContentBlockDelta(ContentBlockDelta) = "content_block_delta",
        /// A content block ends.
        ContentBlockStop(ContentBlockStop) = "content_block_stop",
        /// The message's stop reason and final usage.
        MessageDelta(MessageDelta) = "message_delta",
        /// The message ends. 2.1.330 adds `abandoned_blocks` after an interrupt or a
        /// mid-stream failure.
        MessageStop(MessageStop) = "message_stop",
        /// A keep-alive from the API.
        Ping(Ping) = "ping",
        /// An error in the middle of a stream.
        Error(StreamError) = "error",
    }
}

wire_struct! {
    /// `message_start`
    pub struct MessageStart tags { "type" = "message_start" } {
        /// The message so far (empty content, initial usage).
        req message: AssistantBody = "message",
    }
}

wire_struct! {
    /// `content_block_start`
    pub struct ContentBlockStart tags { "type" = "content_block_start" } {
        /// The block's position in the message.
        req index: u64 = "index",
        /// The block, empty (`text:""`, `input:{}`).
        req content_block: ContentBlock = "content_block",
    }
}

wire_struct! {
    /// `content_block_delta`
    pub struct ContentBlockDelta tags { "type" = "content_block_delta" } {
        /// The block's position in the message.
        req index: u64 = "index",
        /// The piece.
        req delta: Delta = "delta",
    }
}

wire_struct! {
    /// `content_block_stop`
    pub struct ContentBlockStop tags { "type" = "content_block_stop" } {
        /// The block's position in the message.
        req index: u64 = "index",
    }
}

wire_struct! {
    /// `message_delta`
    pub struct MessageDelta tags { "type" = "message_delta" } {
        /// `{"stop_reason":...,"stop_sequence":...}`
        req delta: MessageDeltaBody = "delta",
        /// Final output token counts.
        opt usage: Usage = "usage",
    }
}

wire_struct! {
    /// The `delta` of a `message_delta`.
    pub struct MessageDeltaBody {
        /// Why the message stopped.
        opt stop_reason: Option<String> = "stop_reason",
        /// The stop sequence hit, if any.
        opt stop_sequence: Option<String> = "stop_sequence",
    }
}

wire_struct! {
    /// `message_stop`
    pub struct MessageStop tags { "type" = "message_stop" } {
        /// 2.1.330: which blocks were cut off (`{api_message_id, from_block_index}`).
        opt abandoned_blocks: Value = "abandoned_blocks",
    }
}

wire_struct! {
    /// `ping`
    pub struct Ping tags { "type" = "ping" } {}
}

wire_struct! {
    /// `error`
    pub struct StreamError tags { "type" = "error" } {
        /// `{"type":"overloaded_error","message":...}`
        req error: Value = "error",
    }
}

wire_enum! {
    /// The `delta` of a `content_block_delta`.
    pub enum Delta by "type" {
        /// More text.
        Text(TextDelta) = "text_delta",
        /// More of a tool's input, as a fragment of JSON text.
        InputJson(InputJsonDelta) = "input_json_delta",
        /// More thinking.
        Thinking(ThinkingDelta) = "thinking_delta",
        /// The thinking block's signature.
        Signature(SignatureDelta) = "signature_delta",
        /// A citation for the text.
        Citations(CitationsDelta) = "citations_delta",
    }
}

wire_struct! {
    /// `text_delta`
    pub struct TextDelta tags { "type" = "text_delta" } {
        /// The text.
        req text: String = "text",
    }
}

wire_struct! {
    /// `input_json_delta`
    pub struct InputJsonDelta tags { "type" = "input_json_delta" } {
        /// A fragment of the tool input's JSON text; concatenated, they parse.
        req partial_json: String = "partial_json",
    }
}

wire_struct! {
    /// `thinking_delta`
    pub struct ThinkingDelta tags { "type" = "thinking_delta" } {
        /// The thinking text.
        req thinking: String = "thinking",
    }
}

wire_struct! {
    /// `signature_delta`
    pub struct SignatureDelta tags { "type" = "signature_delta" } {
        /// The signature.
        req signature: String = "signature",
    }
}

wire_struct! {
    /// `citations_delta`
    pub struct CitationsDelta tags { "type" = "citations_delta" } {
        /// The citation.
        req citation: Value = "citation",
    }
}
