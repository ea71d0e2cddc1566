//! Anthropic message content: content blocks, usage, and the `message` objects that `user` and
//! `assistant` lines wrap.

use serde_json::{Number, Value};

use crate::wire::{wire_enum, wire_struct, Extra, Num, TextOr};

wire_enum! {
    /// One block of a message's `content` array.
    pub enum ContentBlock by "type" {
        /// Plain text.
        Text(TextBlock) = "text",
        /// Extended thinking, with its signature.
        Thinking(ThinkingBlock) = "thinking",
        /// Thinking the API returned encrypted.
        RedactedThinking(RedactedThinkingBlock) = "redacted_thinking",
        /// The model calling a tool.
        ToolUse(ToolUseBlock) = "tool_use",
        /// The model calling a server-side tool (web search and the like).
        ServerToolUse(ToolUseBlock) = "server_tool_use",
        /// A tool's answer, sent back to the model in a `user` message.
        ToolResult(ToolResultBlock) = "tool_result",
        /// An image, inline (base64) or by URL.
        Image(ImageBlock) = "image",
        /// A document (PDF or text).
        Document(DocumentBlock) = "document",
    }
}

wire_struct! {
    /// `{"type":"text","text":...}`
    pub struct TextBlock tags { "type" = "text" } {
        /// The text.
        req text: String = "text",
        /// Citations, when the API returned any.
        opt citations: Value = "citations",
    }
}

wire_struct! {
    /// `{"type":"thinking","thinking":...,"signature":...}`
    pub struct ThinkingBlock tags { "type" = "thinking" } {
        /// The thinking text.
        req thinking: String = "thinking",
        /// The API's signature over the thinking (needed to send it back).
        opt signature: String = "signature",
    }
}

wire_struct! {
    /// `{"type":"redacted_thinking","data":...}`
    pub struct RedactedThinkingBlock tags { "type" = "redacted_thinking" } {
        /// The encrypted thinking.
        req data: String = "data",
    }
}

wire_struct! {
    /// `{"type":"tool_use","id":...,"name":...,"input":{...}}` (also `server_tool_use`).
    pub struct ToolUseBlock {
        /// Always `tool_use` or `server_tool_use`; kept so one struct serves both.
        req kind: String = "type",
        /// The id that the matching `tool_result` names.
        req id: String = "id",
        /// The tool's name (`Bash`, `Read`, `mcp__server__tool`, ...).
        req name: String = "name",
        /// The tool's arguments, as the model wrote them.
        req input: Value = "input",
    }
}

wire_struct! {
    /// `{"type":"tool_result","tool_use_id":...,"content":...,"is_error":...}`
    pub struct ToolResultBlock tags { "type" = "tool_result" } {
        /// The `tool_use` this answers.
        req tool_use_id: String = "tool_use_id",
        /// A string, or an array of blocks (text and images).
        opt content: TextOr<ContentBlock> = "content",
        /// Whether the tool failed (or was denied).
        opt is_error: bool = "is_error",
    }
}

wire_struct! {
    /// `{"type":"image","source":{...}}`
    pub struct ImageBlock tags { "type" = "image" } {
        /// Where the image is.
        req source: ImageSource = "source",
    }
}

wire_struct! {
    /// An image or document source: `{"type":"base64","media_type":...,"data":...}` or
    /// `{"type":"url","url":...}`.
    pub struct ImageSource {
        /// `base64`, `url`, `text`, `file`.
        req kind: String = "type",
        /// The MIME type, for base64 sources.
        opt media_type: String = "media_type",
        /// The base64 payload (or text, for text documents).
        opt data: String = "data",
        /// The address, for URL sources.
        opt url: String = "url",
    }
}

wire_struct! {
    /// `{"type":"document","source":{...}}`
    pub struct DocumentBlock tags { "type" = "document" } {
        /// Where the document is.
        req source: ImageSource = "source",
        /// Optional title.
        opt title: String = "title",
    }
}

impl ContentBlock {
    /// A text block.
    pub fn text(text: impl Into<String>) -> Self {
        ContentBlock::Text(TextBlock { text: text.into(), ..TextBlock::default() })
    }

    /// An inline image block from base64 data.
    pub fn image_base64(media_type: impl Into<String>, data: impl Into<String>) -> Self {
        ContentBlock::Image(ImageBlock {
            source: ImageSource {
                kind: "base64".to_owned(),
                media_type: Some(media_type.into()),
                data: Some(data.into()),
                ..ImageSource::default()
            },
            extra: Extra::new(),
        })
    }
}

wire_struct! {
    /// Token counts of one API call, or summed over a turn.
    pub struct Usage {
        /// Uncached input tokens.
        opt input_tokens: Num = "input_tokens",
        /// Output tokens.
        opt output_tokens: Num = "output_tokens",
        /// Input tokens written to the prompt cache.
        opt cache_creation_input_tokens: Num = "cache_creation_input_tokens",
        /// Input tokens read from the prompt cache.
        opt cache_read_input_tokens: Num = "cache_read_input_tokens",
        /// `standard`, `priority`, ...
        opt service_tier: Option<String> = "service_tier",
    }
}

wire_struct! {
    /// One model's entry in a result's `modelUsage` (camelCase on the wire).
    pub struct ModelUsage {
        /// Uncached input tokens.
        opt input_tokens: Num = "inputTokens",
        /// Output tokens.
        opt output_tokens: Num = "outputTokens",
        /// Cache reads.
        opt cache_read_input_tokens: Num = "cacheReadInputTokens",
        /// Cache writes.
        opt cache_creation_input_tokens: Num = "cacheCreationInputTokens",
        /// Web searches made.
        opt web_search_requests: Num = "webSearchRequests",
        /// Cost in US dollars (a JSON number, integer or not, kept as sent).
        opt cost_usd: Number = "costUSD",
        /// The model's context window, in tokens.
        opt context_window: Num = "contextWindow",
        /// The model's output limit, in tokens.
        opt max_output_tokens: Num = "maxOutputTokens",
    }
}

wire_struct! {
    /// The Anthropic message inside an `assistant` line.
    ///
    /// The CLI writes one `assistant` line per content block, so `content` usually holds one
    /// block; lines of the same API message share `id`.
    pub struct AssistantBody {
        /// The API message id (`msg_...`).
        opt id: String = "id",
        /// Always `message`.
        opt kind: String = "type",
        /// Always `assistant`.
        opt role: String = "role",
        /// The model that answered (`<synthetic>` for CLI-made error messages).
        opt model: String = "model",
        /// The blocks.
        req content: Vec<ContentBlock> = "content",
        /// `end_turn`, `tool_use`, `stop_sequence`, ... (null while streaming).
        opt stop_reason: Option<String> = "stop_reason",
        /// The stop sequence hit, if any.
        opt stop_sequence: Option<String> = "stop_sequence",
        /// Token counts (those of `message_start` while streaming).
        opt usage: Usage = "usage",
    }
}

wire_struct! {
    /// The Anthropic message inside a `user` line.
    pub struct UserBody {
        /// Always `user`.
        req role: String = "role",
        /// A prompt string, or blocks (text, images, tool results).
        req content: TextOr<ContentBlock> = "content",
    }
}
