//! Scenarios: what the fake Anthropic API answers, turn by turn.
//!
//! A scenario is a list of replies. Each conversation request takes the first unused reply whose
//! `when` matches the request's latest user message (a reply without `when` matches anything).
//! Requests the CLI makes for itself (Bash prefix detection, output file paths, the `set_model`
//! validation ping, token counting) are answered without using a reply.
//!
//! The file format is JSON (`Scenario` derives serde):
//!
//! ```json
//! {"replies": [
//!   {"when": {"prompt_contains": "RUNBASH"},
//!    "blocks": [{"text": "Running it."},
//!               {"tool_use": {"name": "Bash", "input": {"command": "touch x && ls"}}}]},
//!   {"when": "tool_result", "blocks": [{"text": "Done."}]},
//!   {"error": {"status": 429, "type": "rate_limit_error", "message": "slow down"}, "times": 2}
//! ]}
//! ```

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The whole script.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Replies, in order of preference.
    #[serde(default)]
    pub replies: Vec<Reply>,
    /// Answer to a conversation request no reply matches; without one such a request gets a
    /// 500 naming the problem (which the test then sees as an API error).
    #[serde(default)]
    pub fallback_text: Option<String>,
    /// What the CLI's prompt-suggestion request gets (2.1.120 on ask for one after each turn
    /// but the first when `initialize` says `promptSuggestions`); without it, an empty answer,
    /// which the CLI suggests nothing from. Never uses a reply.
    #[serde(default)]
    pub prompt_suggestion: Option<String>,
}

/// One answer to one conversation request.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reply {
    /// Which requests it answers; `None` answers any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<When>,
    /// The content, streamed block by block.
    #[serde(default)]
    pub blocks: Vec<Block>,
    /// Instead of content: an HTTP error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<HttpError>,
    /// How many requests this reply answers (for errors: how many times to fail). Default 1.
    #[serde(default = "one")]
    pub times: u32,
    /// Pause between stream events, in milliseconds.
    #[serde(default)]
    pub delay_ms: u64,
    /// After this many content deltas, send an SSE `error` event and end the stream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_error_after: Option<usize>,
    /// After this many content deltas, stop and wait until the test calls
    /// [`crate::FakeApi::release`] (or the client goes away). Deterministic "slow" streams.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold_after: Option<usize>,
    /// The stop reason to end the stream with, instead of `tool_use` or `end_turn`:
    /// `refusal`, say, which newer CLIs answer by retrying on a fallback model
    /// (`system/model_refusal_fallback`) or by saying none ran (`model_refusal_no_fallback`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
    /// The `stop_details` sent beside the stop reason (a refusal's `category` and
    /// `explanation`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_details: Option<Value>,
    /// Token counts to report.
    #[serde(default)]
    pub input_tokens: Option<u64>,
    /// Token counts to report.
    #[serde(default)]
    pub output_tokens: Option<u64>,
    /// Response headers to send with it (an error or a stream): the Anthropic API's
    /// `anthropic-ratelimit-unified-*` usage-window headers, say. Each name a valid header
    /// name, each value printable ASCII; a bad one is a 500 naming it.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub headers: std::collections::BTreeMap<String, String>,
}

fn one() -> u32 {
    1
}

/// Which requests a reply answers.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case")]
pub enum When {
    /// The latest user message's text contains this.
    PromptContains(String),
    /// The latest user message carries a tool result containing this text.
    ToolResultContains(String),
    /// The latest user message carries any tool result.
    ToolResult,
    /// The requested model contains this.
    ModelContains(String),
}

/// One content block of a reply.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case")]
pub enum Block {
    /// Text, streamed a word at a time.
    Text(String),
    /// Thinking, streamed a word at a time, with a signature.
    Thinking(String),
    /// A tool call.
    ToolUse(ToolUse),
}

/// A tool call in a reply.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ToolUse {
    /// The tool.
    pub name: String,
    /// Its input.
    pub input: Value,
    /// Its id; generated when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

/// An HTTP error reply with an Anthropic error body.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HttpError {
    /// 400, 429, 500, 529, ...
    pub status: u16,
    /// `rate_limit_error`, `api_error`, `overloaded_error`, `invalid_request_error`.
    #[serde(rename = "type")]
    pub error_type: String,
    /// The message.
    pub message: String,
}

impl Scenario {
    /// An empty scenario.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a reply.
    pub fn reply(mut self, reply: Reply) -> Self {
        self.replies.push(reply);
        self
    }

    /// Sets the fallback text.
    pub fn fallback(mut self, text: impl Into<String>) -> Self {
        self.fallback_text = Some(text.into());
        self
    }

    /// Answers the CLI's prompt-suggestion requests with `text`.
    pub fn prompt_suggestion(mut self, text: impl Into<String>) -> Self {
        self.prompt_suggestion = Some(text.into());
        self
    }

    /// Reads a scenario file (JSON).
    pub fn from_json(text: &str) -> anyhow::Result<Self> {
        Ok(serde_json::from_str(text)?)
    }
}

impl Reply {
    /// A text reply.
    pub fn text(text: impl Into<String>) -> Self {
        Reply { blocks: vec![Block::Text(text.into())], times: 1, ..Reply::default() }
    }

    /// A reply that calls one tool.
    pub fn tool_use(name: impl Into<String>, input: Value) -> Self {
        Reply::default().then_tool(name, input)
    }

    /// A reply that fails with an HTTP error `times` times.
    pub fn http_error(status: u16, error_type: &str, message: &str, times: u32) -> Self {
        Reply {
            error: Some(HttpError {
                status,
                error_type: error_type.into(),
                message: message.into(),
            }),
            times,
            ..Reply::default()
        }
    }

    /// Adds a text block.
    pub fn then_text(mut self, text: impl Into<String>) -> Self {
        self.blocks.push(Block::Text(text.into()));
        self.times = self.times.max(1);
        self
    }

    /// Adds a thinking block.
    pub fn then_thinking(mut self, text: impl Into<String>) -> Self {
        self.blocks.push(Block::Thinking(text.into()));
        self.times = self.times.max(1);
        self
    }

    /// Adds a tool call.
    pub fn then_tool(mut self, name: impl Into<String>, input: Value) -> Self {
        self.blocks.push(Block::ToolUse(ToolUse { name: name.into(), input, id: None }));
        self.times = self.times.max(1);
        self
    }

    /// Answers only when the latest prompt contains `text`.
    pub fn when_prompt(mut self, text: impl Into<String>) -> Self {
        self.when = Some(When::PromptContains(text.into()));
        self
    }

    /// Answers only requests for a model whose name contains `text`.
    pub fn when_model(mut self, text: impl Into<String>) -> Self {
        self.when = Some(When::ModelContains(text.into()));
        self
    }

    /// Ends the stream with `stop_reason: refusal` and these `stop_details` (a `category` and
    /// an `explanation`), as the API does when the model's safeguards stop an answer.
    pub fn refused(mut self, category: &str, explanation: &str) -> Self {
        self.stop_reason = Some("refusal".into());
        self.stop_details =
            Some(serde_json::json!({"category": category, "explanation": explanation}));
        self
    }

    /// Answers only a request carrying a tool result.
    pub fn when_tool_result(mut self) -> Self {
        self.when = Some(When::ToolResult);
        self
    }

    /// Answers only a request carrying a tool result that contains `text`.
    pub fn when_tool_result_contains(mut self, text: impl Into<String>) -> Self {
        self.when = Some(When::ToolResultContains(text.into()));
        self
    }

    /// Pauses `ms` between stream events.
    pub fn delay_ms(mut self, ms: u64) -> Self {
        self.delay_ms = ms;
        self
    }

    /// Holds the stream after `deltas` content deltas until released.
    pub fn hold_after(mut self, deltas: usize) -> Self {
        self.hold_after = Some(deltas);
        self
    }

    /// Sends an SSE error event after `deltas` content deltas.
    pub fn stream_error_after(mut self, deltas: usize) -> Self {
        self.stream_error_after = Some(deltas);
        self
    }

    /// Answers this many requests.
    pub fn times(mut self, times: u32) -> Self {
        self.times = times;
        self
    }

    /// Sends this response header with the reply.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.insert(name.into(), value.into());
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_file_format_reads() {
        let text = r#"{"replies": [
          {"when": {"prompt_contains": "RUNBASH"},
           "blocks": [{"text": "Running it."},
                      {"tool_use": {"name": "Bash", "input": {"command": "touch x && ls"}}}]},
          {"when": "tool_result", "blocks": [{"text": "Done."}], "delay_ms": 5},
          {"error": {"status": 429, "type": "rate_limit_error", "message": "slow down"}, "times": 2}
        ], "fallback_text": "nothing scripted"}"#;
        let scenario = Scenario::from_json(text).unwrap();
        assert_eq!(scenario.replies.len(), 3);
        assert_eq!(scenario.replies[0].when, Some(When::PromptContains("RUNBASH".into())));
        assert!(
            matches!(&scenario.replies[0].blocks[1], Block::ToolUse(tool) if tool.name == "Bash")
        );
        assert_eq!(scenario.replies[1].when, Some(When::ToolResult));
        assert_eq!(scenario.replies[1].times, 1, "times defaults to one");
        assert_eq!(scenario.replies[2].error.as_ref().map(|e| e.status), Some(429));
        assert_eq!(scenario.replies[2].times, 2);
        assert!(Scenario::from_json(r#"{"replies": [{"when": {"no_such": 1}}]}"#).is_err());
        let typo = Scenario::from_json(r#"{"replies": [{"blocks": [], "time": 2}]}"#).unwrap_err();
        assert!(typo.to_string().contains("time"), "names the field: {typo}");
    }
}
