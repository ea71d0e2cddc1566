//! A scripted fake of the Anthropic Messages API that the real Claude Code CLI accepts.
//!
//! `POST /v1/messages` (streaming SSE and not), `POST /v1/messages/count_tokens`, and `200 {}`
//! for anything else. Every request is recorded so tests can assert what the CLI sent
//! (`GET /_fake/requests` from another process); `POST /_fake/release` lets held streams go
//! on. Binds 127.0.0.1 on port 0 unless given an address.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, OriginalUri, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::Router;
use serde_json::{json, Value};
use tokio::sync::{mpsc, watch};

use crate::scenario::{Block, Reply, Scenario, When};

/// The longest [`FakeApi::wait_for`] waits.
pub const WAIT_FOR: Duration = Duration::from_secs(120);

/// One request the CLI made.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    /// 1-based arrival order.
    pub index: usize,
    /// The path with query.
    pub path: String,
    /// The JSON body (`Null` when not JSON).
    pub body: Value,
    /// What the fake took it for.
    pub kind: RequestKind,
}

/// What the fake took a request for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestKind {
    /// Part of the conversation: answered from the scenario.
    Conversation,
    /// 2.1.37 asks a small model for a Bash command's prefix before asking permission.
    BashPrefix,
    /// 2.1.37 asks which files a Bash command touched.
    OutputFilePaths,
    /// 2.1.330 pings a new model after `set_model` (`max_tokens: 1`).
    ModelValidation,
    /// `count_tokens`.
    CountTokens,
    /// 2.1.120 on: "what might the person type next" (`[SUGGESTION MODE: …]`), after a turn.
    PromptSuggestion,
    /// The interactive 2.1.250 asks for a title for the session (`<session>…</session>` and
    /// "Write the title"), beside the conversation's first request: answered with a title,
    /// never with a scripted reply (whose `when` its prompt would match).
    SessionTitle,
    /// Any other path.
    Other,
}

impl RequestKind {
    /// `conversation`, `bash_prefix`, `output_file_paths`, `model_validation`,
    /// `count_tokens`, `prompt_suggestion`, `session_title`, `other`.
    pub fn as_str(&self) -> &'static str {
        match self {
            RequestKind::Conversation => "conversation",
            RequestKind::BashPrefix => "bash_prefix",
            RequestKind::OutputFilePaths => "output_file_paths",
            RequestKind::ModelValidation => "model_validation",
            RequestKind::CountTokens => "count_tokens",
            RequestKind::Other => "other",
            RequestKind::PromptSuggestion => "prompt_suggestion",
            RequestKind::SessionTitle => "session_title",
        }
    }
}

impl RecordedRequest {
    /// The requested model.
    pub fn model(&self) -> &str {
        self.body.get("model").and_then(Value::as_str).unwrap_or("")
    }

    /// The text of the latest user message (text blocks joined).
    pub fn last_user_text(&self) -> String {
        last_user_message(&self.body)
            .map(|message| text_of(message.get("content")))
            .unwrap_or_default()
    }

    /// The tool results in the latest user message: `(tool_use_id, text, is_error)`.
    pub fn tool_results(&self) -> Vec<(String, String, bool)> {
        tool_results(&self.body)
    }
}

struct Shared {
    /// Replies not yet used up, with their remaining count.
    replies: Vec<(Reply, u32)>,
    fallback_text: Option<String>,
    prompt_suggestion: Option<String>,
    requests: Vec<RecordedRequest>,
    next_id: u64,
}

/// The running fake. Dropping it stops the server.
pub struct FakeApi {
    addr: SocketAddr,
    shared: Arc<Mutex<Shared>>,
    /// Counts requests, so tests can wait for one without polling.
    request_count: watch::Receiver<usize>,
    /// Opens held streams (`Reply::hold_after`).
    release: Arc<watch::Sender<u64>>,
    server: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for FakeApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeApi").finish_non_exhaustive()
    }
}

#[derive(Clone)]
struct AppState {
    shared: Arc<Mutex<Shared>>,
    request_count: Arc<watch::Sender<usize>>,
    release: Arc<watch::Sender<u64>>,
}

impl FakeApi {
    /// Starts a fake serving `scenario` on 127.0.0.1, port 0.
    pub async fn start(scenario: Scenario) -> anyhow::Result<FakeApi> {
        Self::start_on("127.0.0.1:0".parse()?, scenario).await
    }

    /// Starts a fake serving `scenario` on `addr`.
    pub async fn start_on(addr: SocketAddr, scenario: Scenario) -> anyhow::Result<FakeApi> {
        let shared = Arc::new(Mutex::new(Shared {
            replies: scenario
                .replies
                .into_iter()
                .map(|reply| {
                    let times = reply.times.max(1);
                    (reply, times)
                })
                .collect(),
            fallback_text: scenario.fallback_text,
            prompt_suggestion: scenario.prompt_suggestion,
            requests: Vec::new(),
            next_id: 0,
        }));
        let (count_tx, request_count) = watch::channel(0);
        // Each release lets go of the streams whose requests had arrived by then; later holds
        // wait for the next one.
        let release = Arc::new(watch::channel(0u64).0);
        let state = AppState {
            shared: shared.clone(),
            request_count: Arc::new(count_tx),
            release: release.clone(),
        };
        // The CLI sends the whole conversation every time: megabytes once a big tool call is in
        // it. No body limit (axum's default of 2 MB answers 413).
        let app = Router::new()
            // For tests that drive the fake from another process (the browser tests).
            .route("/_fake/release", axum::routing::post(release_held))
            .route("/_fake/requests", axum::routing::get(recorded))
            .fallback(any(handle))
            .layer(DefaultBodyLimit::disable())
            .with_state(state);
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(FakeApi { addr, shared, request_count, release, server })
    }

    /// `http://127.0.0.1:PORT`, for `ANTHROPIC_BASE_URL`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.lock().map(|shared| shared.requests.clone()).unwrap_or_default()
    }

    /// The conversation requests so far.
    pub fn conversation_requests(&self) -> Vec<RecordedRequest> {
        self.requests()
            .into_iter()
            .filter(|request| request.kind == RequestKind::Conversation)
            .collect()
    }

    /// Waits until a recorded request satisfies `predicate`, at most [`WAIT_FOR`] (then it
    /// panics, saying so: a test waiting on it fails rather than hangs).
    pub async fn wait_for(&self, predicate: impl Fn(&RecordedRequest) -> bool) -> RecordedRequest {
        let mut count = self.request_count.clone();
        let deadline = tokio::time::Instant::now() + WAIT_FOR;
        loop {
            if let Some(found) = self.requests().into_iter().find(|request| predicate(request)) {
                return found;
            }
            match tokio::time::timeout_at(deadline, count.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => panic!("the fake API stopped before the expected request arrived"),
                Err(_) => panic!(
                    "the expected request did not arrive within {} s ({} requests came)",
                    WAIT_FOR.as_secs(),
                    self.requests().len()
                ),
            }
        }
    }

    /// Lets the held streams (of requests that have arrived) continue. Also
    /// `POST /_fake/release`.
    pub fn release(&self) {
        self.release.send_modify(|generation| *generation += 1);
    }

    /// Replies not used up yet (to check a scenario ran to its end).
    pub fn unused_replies(&self) -> usize {
        self.shared.lock().map(|shared| shared.replies.len()).unwrap_or(0)
    }
}

impl Drop for FakeApi {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// `GET /_fake/requests`: every request so far, for tests in another process.
async fn recorded(State(state): State<AppState>) -> axum::Json<Value> {
    let requests = state.shared.lock().map(|shared| shared.requests.clone()).unwrap_or_default();
    axum::Json(Value::Array(
        requests
            .iter()
            .map(|request| {
                json!({"index": request.index, "path": request.path, "kind": request.kind.as_str(), "body": request.body})
            })
            .collect(),
    ))
}

async fn release_held(State(state): State<AppState>) -> StatusCode {
    state.release.send_modify(|generation| *generation += 1);
    StatusCode::NO_CONTENT
}

async fn handle(
    State(state): State<AppState>,
    OriginalUri(uri): OriginalUri,
    _headers: HeaderMap,
    body: Bytes,
) -> Response {
    // Released by any release once the request is seen as arrived: the generation is read
    // before the request is recorded, so a test that saw it recorded and then released it
    // lets it go.
    let release = state.release.subscribe();
    let arrived = *release.borrow();
    let path = uri.to_string();
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let kind = classify(&path, &body);
    let (reply, id_base) = {
        let Ok(mut shared) = state.shared.lock() else {
            return (StatusCode::INTERNAL_SERVER_ERROR, "fake state poisoned").into_response();
        };
        let index = shared.requests.len() + 1;
        shared.requests.push(RecordedRequest {
            index,
            path: path.clone(),
            body: body.clone(),
            kind: kind.clone(),
        });
        shared.next_id += 1;
        let id_base = shared.next_id;
        let reply = match kind {
            RequestKind::Conversation => take_reply(&mut shared, &body),
            // Costs nothing: a test's figures stay those of its turns.
            RequestKind::PromptSuggestion => Some(Reply {
                input_tokens: Some(0),
                output_tokens: Some(0),
                ..Reply::text(shared.prompt_suggestion.clone().unwrap_or_default())
            }),
            _ => None,
        };
        (reply, id_base)
    };
    state.request_count.send_modify(|count| *count += 1);

    let model = body.get("model").and_then(Value::as_str).unwrap_or("claude-fake").to_owned();
    let stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let reply = match kind {
        RequestKind::CountTokens => return json_response(StatusCode::OK, json!({"input_tokens": 100})),
        RequestKind::Other => return json_response(StatusCode::OK, json!({})),
        RequestKind::ModelValidation => Reply::text("Hi"),
        RequestKind::BashPrefix => Reply::text(bash_prefix(&last_user_text(&body))),
        RequestKind::OutputFilePaths => {
            Reply::text("<is_displaying_contents>\nfalse\n</is_displaying_contents>\n\n<filepaths>\n</filepaths>")
        }
        RequestKind::PromptSuggestion => reply.unwrap_or_default(),
        // Costs nothing, as a suggestion does.
        RequestKind::SessionTitle => {
            Reply { input_tokens: Some(0), output_tokens: Some(0), ..Reply::text("A session") }
        }
        RequestKind::Conversation => match reply {
            Some(reply) => reply,
            None => {
                let message = format!(
                    "fake API: no scripted reply matches this request (latest user text: {:?})",
                    truncate(&last_user_text(&body), 200)
                );
                return json_response(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    json!({"type": "error", "error": {"type": "api_error", "message": message}}),
                );
            }
        },
    };
    let mut headers = axum::http::HeaderMap::new();
    for (name, value) in &reply.headers {
        let parsed = axum::http::HeaderName::from_bytes(name.as_bytes())
            .ok()
            .zip(axum::http::HeaderValue::from_str(value).ok());
        let Some((name, value)) = parsed else {
            let message = format!("fake API: the reply's header {name:?} is not a valid header");
            return json_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                json!({"type": "error", "error": {"type": "api_error", "message": message}}),
            );
        };
        headers.insert(name, value);
    }
    let mut response = if let Some(error) = &reply.error {
        let status =
            StatusCode::from_u16(error.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = json_response(
            status,
            json!({"type": "error", "error": {"type": error.error_type, "message": error.message}}),
        );
        response.headers_mut().insert("retry-after", "0".parse().expect("static header"));
        response
    } else {
        let message = Rendered::new(&reply, &model, id_base, &offered_tools(&body));
        if stream {
            sse_response(message, reply, release, arrived)
        } else {
            json_response(StatusCode::OK, message.full_message())
        }
    };
    response.headers_mut().extend(headers);
    response
}

fn json_response(status: StatusCode, body: Value) -> Response {
    (status, [("content-type", "application/json")], body.to_string()).into_response()
}

fn classify(path: &str, body: &Value) -> RequestKind {
    if path.starts_with("/v1/messages/count_tokens") {
        return RequestKind::CountTokens;
    }
    if !path.starts_with("/v1/messages") {
        return RequestKind::Other;
    }
    if body.get("max_tokens").and_then(Value::as_u64) == Some(1) {
        return RequestKind::ModelValidation;
    }
    if last_user_text(body).contains("<policy_spec>") {
        return RequestKind::BashPrefix;
    }
    if system_text(body).contains("Extract any file paths that this command reads or modifies") {
        return RequestKind::OutputFilePaths;
    }
    let text = last_user_text(body);
    if text.trim_start().starts_with("[SUGGESTION MODE:") {
        return RequestKind::PromptSuggestion;
    }
    if text.trim_start().starts_with("<session>") && text.contains("Write the title") {
        return RequestKind::SessionTitle;
    }
    RequestKind::Conversation
}

fn take_reply(shared: &mut Shared, body: &Value) -> Option<Reply> {
    match shared.replies.iter().position(|(reply, _)| matches(reply.when.as_ref(), body)) {
        Some(position) => {
            let (reply, remaining) = &mut shared.replies[position];
            let mut taken = reply.clone();
            fill_from_results(&mut taken, body);
            *remaining -= 1;
            if *remaining == 0 {
                shared.replies.remove(position);
            }
            Some(taken)
        }
        None => shared.fallback_text.clone().map(Reply::text),
    }
}

/// A tool call's input string `{{result.KEY}}` becomes KEY of the latest tool result that is
/// a JSON object holding it: a script calls a tool with what an earlier call answered (the id
/// of the session a tool started, say).
fn fill_from_results(reply: &mut Reply, body: &Value) {
    fn fill(value: &mut Value, results: &[Value]) {
        match value {
            Value::String(text) => {
                let Some(key) = text.strip_prefix("{{result.").and_then(|k| k.strip_suffix("}}"))
                else {
                    return;
                };
                if let Some(found) = results.iter().rev().find_map(|result| result.get(key)) {
                    *value = found.clone();
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|item| fill(item, results)),
            Value::Object(map) => map.values_mut().for_each(|item| fill(item, results)),
            _ => {}
        }
    }
    let results: Vec<Value> = tool_results(body)
        .into_iter()
        .filter_map(|(_, content, _)| serde_json::from_str::<Value>(&content).ok())
        .filter(Value::is_object)
        .collect();
    if results.is_empty() {
        return;
    }
    for block in &mut reply.blocks {
        if let Block::ToolUse(tool) = block {
            fill(&mut tool.input, &results);
        }
    }
}

fn matches(when: Option<&When>, body: &Value) -> bool {
    match when {
        None => true,
        Some(When::PromptContains(text)) => {
            tool_results(body).is_empty() && last_user_text(body).contains(text.as_str())
        }
        Some(When::ToolResult) => !tool_results(body).is_empty(),
        Some(When::ToolResultContains(text)) => {
            tool_results(body).iter().any(|(_, content, _)| content.contains(text.as_str()))
        }
        Some(When::ModelContains(text)) => body
            .get("model")
            .and_then(Value::as_str)
            .is_some_and(|model| model.contains(text.as_str())),
    }
}

fn last_user_message(body: &Value) -> Option<&Value> {
    body.get("messages")?
        .as_array()?
        .iter()
        .rev()
        .find(|message| message.get("role") == Some(&json!("user")))
}

fn last_user_text(body: &Value) -> String {
    last_user_message(body).map(|message| text_of(message.get("content"))).unwrap_or_default()
}

fn system_text(body: &Value) -> String {
    text_of(body.get("system"))
}

/// Text of a `content` value: a string, or the text blocks of an array joined by newlines.
fn text_of(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter_map(|block| match block.get("type").and_then(Value::as_str) {
                Some("text") => block.get("text").and_then(Value::as_str).map(str::to_owned),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

fn tool_results(body: &Value) -> Vec<(String, String, bool)> {
    let Some(Value::Array(blocks)) =
        last_user_message(body).and_then(|message| message.get("content"))
    else {
        return Vec::new();
    };
    blocks
        .iter()
        .filter(|block| block.get("type") == Some(&json!("tool_result")))
        .map(|block| {
            let id = block.get("tool_use_id").and_then(Value::as_str).unwrap_or("").to_owned();
            let is_error = block.get("is_error").and_then(Value::as_bool).unwrap_or(false);
            (id, text_of(block.get("content")), is_error)
        })
        .collect()
}

/// The answer 2.1.37's prefix detection expects: the first word, or `none` for anything with
/// shell operators (which makes the CLI offer no prefix rule).
fn bash_prefix(prompt: &str) -> String {
    let command = prompt.rsplit("Command:").next().unwrap_or("").trim();
    if command.is_empty()
        || ["$", "`", ";", "&&", "||", "|", ">", "<"].iter().any(|op| command.contains(op))
    {
        return "none".to_owned();
    }
    command.split_whitespace().next().unwrap_or("none").to_owned()
}

fn truncate(text: &str, chars: usize) -> String {
    text.chars().take(chars).collect()
}

/// The names of the tools a request offers the model.
fn offered_tools(body: &Value) -> Vec<&str> {
    body.get("tools")
        .and_then(Value::as_array)
        .map(|tools| tools.iter().filter_map(|tool| tool.get("name")?.as_str()).collect())
        .unwrap_or_default()
}

/// A scripted tool name, or alternatives `A|B` (a tool renamed between CLI versions: `Agent`
/// was `Task`): the first alternative the request offers, else the first.
fn pick_tool_name(name: &str, offered: &[&str]) -> String {
    let mut alternatives = name.split('|');
    let first = alternatives.next().unwrap_or(name);
    std::iter::once(first)
        .chain(alternatives)
        .find(|alternative| offered.contains(alternative))
        .unwrap_or(first)
        .to_owned()
}

/// A reply turned into Anthropic content with ids.
struct Rendered {
    id: String,
    model: String,
    blocks: Vec<(Block, String)>,
    stop_reason: Option<String>,
    stop_details: Option<Value>,
    input_tokens: u64,
    output_tokens: u64,
}

impl Rendered {
    fn new(reply: &Reply, model: &str, id_base: u64, offered: &[&str]) -> Self {
        let blocks = reply
            .blocks
            .iter()
            .enumerate()
            .map(|(index, block)| match block {
                Block::ToolUse(tool) => {
                    let id =
                        tool.id.clone().unwrap_or_else(|| format!("toolu_fake_{id_base}_{index}"));
                    let mut tool = tool.clone();
                    tool.name = pick_tool_name(&tool.name, offered);
                    (Block::ToolUse(tool), id)
                }
                other => (other.clone(), String::new()),
            })
            .collect();
        Rendered {
            id: format!("msg_fake_{id_base}"),
            model: model.to_owned(),
            blocks,
            stop_reason: reply.stop_reason.clone(),
            stop_details: reply.stop_details.clone(),
            input_tokens: reply.input_tokens.unwrap_or(10),
            output_tokens: reply.output_tokens.unwrap_or(5),
        }
    }

    fn stop_reason(&self) -> &str {
        if let Some(reason) = &self.stop_reason {
            reason
        } else if self.blocks.iter().any(|(block, _)| matches!(block, Block::ToolUse(_))) {
            "tool_use"
        } else {
            "end_turn"
        }
    }

    fn usage(&self, output_tokens: u64) -> Value {
        json!({
            "input_tokens": self.input_tokens,
            "output_tokens": output_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        })
    }

    fn block_json(block: &Block, id: &str) -> Value {
        match block {
            Block::Text(text) => json!({"type": "text", "text": text}),
            Block::Thinking(text) => {
                json!({"type": "thinking", "thinking": text, "signature": "fake-signature"})
            }
            Block::ToolUse(tool) => {
                json!({"type": "tool_use", "id": id, "name": tool.name, "input": tool.input})
            }
        }
    }

    fn full_message(&self) -> Value {
        let message = json!({
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": self.blocks.iter().map(|(block, id)| Self::block_json(block, id)).collect::<Vec<_>>(),
            "stop_reason": self.stop_reason(),
            "stop_sequence": null,
            "usage": self.usage(self.output_tokens),
        });
        self.with_details(message)
    }

    /// `value` with `stop_details` beside its stop reason, when the reply has any (without,
    /// the key is left out, as before the API had it).
    fn with_details(&self, mut value: Value) -> Value {
        if let (Some(details), Some(object)) = (&self.stop_details, value.as_object_mut()) {
            object.insert("stop_details".into(), details.clone());
        }
        value
    }

    /// The SSE events, each tagged with whether it is a content delta (holds and injected
    /// errors count deltas).
    fn events(&self) -> Vec<(bool, Value)> {
        let mut events = vec![(
            false,
            json!({"type": "message_start", "message": {
                "id": self.id, "type": "message", "role": "assistant", "model": self.model,
                "content": [], "stop_reason": null, "stop_sequence": null, "usage": self.usage(1),
            }}),
        )];
        for (index, (block, id)) in self.blocks.iter().enumerate() {
            let start = match block {
                Block::Text(_) => json!({"type": "text", "text": ""}),
                Block::Thinking(_) => json!({"type": "thinking", "thinking": ""}),
                Block::ToolUse(tool) => {
                    json!({"type": "tool_use", "id": id, "name": tool.name, "input": {}})
                }
            };
            events.push((
                false,
                json!({"type": "content_block_start", "index": index, "content_block": start}),
            ));
            match block {
                Block::Text(text) => {
                    for piece in words(text) {
                        events.push((true, json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": piece}})));
                    }
                }
                Block::Thinking(text) => {
                    for piece in words(text) {
                        events.push((true, json!({"type": "content_block_delta", "index": index, "delta": {"type": "thinking_delta", "thinking": piece}})));
                    }
                    events.push((false, json!({"type": "content_block_delta", "index": index, "delta": {"type": "signature_delta", "signature": "fake-signature"}})));
                }
                Block::ToolUse(tool) => {
                    // In pieces, as the API streams a tool's input: a client sees it grow.
                    for piece in words(&tool.input.to_string()) {
                        events.push((true, json!({"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": piece}})));
                    }
                }
            }
            events.push((false, json!({"type": "content_block_stop", "index": index})));
        }
        events.push((
            false,
            json!({"type": "message_delta", "delta": self.with_details(json!({"stop_reason": self.stop_reason(), "stop_sequence": null})), "usage": {"output_tokens": self.output_tokens}}),
        ));
        events.push((false, json!({"type": "message_stop"})));
        events
    }
}

/// Splits text into word-sized deltas that concatenate back to it.
fn words(text: &str) -> Vec<String> {
    let mut pieces = Vec::new();
    let mut current = String::new();
    for ch in text.chars() {
        current.push(ch);
        if ch == ' ' {
            pieces.push(std::mem::take(&mut current));
        }
    }
    if !current.is_empty() || pieces.is_empty() {
        pieces.push(current);
    }
    pieces
}

fn sse_response(
    message: Rendered,
    reply: Reply,
    mut release: watch::Receiver<u64>,
    arrived: u64,
) -> Response {
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(16);
    tokio::spawn(async move {
        let mut deltas = 0usize;
        for (is_delta, event) in message.events() {
            if is_delta {
                if reply.stream_error_after == Some(deltas) {
                    let error = json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded (injected mid-stream)"}});
                    let _ = tx.send(Ok(sse("error", &error))).await;
                    return;
                }
                if reply.hold_after == Some(deltas) {
                    // Wait for the test, or for the client to hang up.
                    tokio::select! {
                        _ = release.wait_for(|generation| *generation > arrived) => {}
                        _ = tx.closed() => return,
                    }
                }
                deltas += 1;
            }
            if reply.delay_ms > 0 {
                tokio::time::sleep(Duration::from_millis(reply.delay_ms)).await;
            }
            let name = event.get("type").and_then(Value::as_str).unwrap_or("message").to_owned();
            if tx.send(Ok(sse(&name, &event))).await.is_err() {
                return;
            }
        }
    });
    let body = Body::from_stream(tokio_stream_from(rx));
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .body(body)
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

fn sse(name: &str, data: &Value) -> Bytes {
    Bytes::from(format!("event: {name}\ndata: {data}\n\n"))
}

fn tokio_stream_from(
    mut rx: mpsc::Receiver<Result<Bytes, std::io::Error>>,
) -> impl futures::Stream<Item = Result<Bytes, std::io::Error>> {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_concatenate_back() {
        assert_eq!(words("a bc d").concat(), "a bc d");
        assert_eq!(words("a bc d"), ["a ", "bc ", "d"]);
        assert_eq!(words(""), [""]);
    }

    #[test]
    fn bash_prefix_answers_like_the_small_model() {
        assert_eq!(bash_prefix("<policy_spec>...</policy_spec>\nCommand: touch x.txt"), "touch");
        assert_eq!(bash_prefix("Command: touch x && ls"), "none");
        assert_eq!(bash_prefix("Command: echo $HOME"), "none");
    }

    #[test]
    fn a_renamed_tool_takes_the_name_the_request_offers() {
        assert_eq!(pick_tool_name("Agent|Task", &["Read", "Task"]), "Task");
        assert_eq!(pick_tool_name("Agent|Task", &["Agent", "Task"]), "Agent");
        assert_eq!(pick_tool_name("Agent|Task", &[]), "Agent", "none offered: the first");
        assert_eq!(pick_tool_name("Bash", &["Read"]), "Bash");
        let body = json!({"tools": [{"name": "Read"}, {"name": "Task"}, {"type": "web_search"}]});
        assert_eq!(offered_tools(&body), ["Read", "Task"]);
    }

    #[test]
    fn a_refused_reply_ends_with_its_stop_reason_and_details() {
        let rendered = |reply: &Reply| Rendered::new(reply, "claude-opus-5-5", 1, &[]);
        let refused = rendered(&Reply::text("No.").refused("cyber", "Looks like malware."));
        let events = refused.events();
        let delta = &events.iter().rev().nth(1).unwrap().1;
        assert_eq!(delta["type"], "message_delta");
        assert_eq!(delta["delta"]["stop_reason"], "refusal");
        assert_eq!(delta["delta"]["stop_details"]["category"], "cyber");
        assert_eq!(refused.full_message()["stop_reason"], "refusal");
        assert_eq!(refused.full_message()["stop_details"]["explanation"], "Looks like malware.");
        let plain = rendered(&Reply::text("Yes."));
        assert_eq!(plain.full_message()["stop_reason"], "end_turn");
        assert!(plain.full_message().get("stop_details").is_none());
        let tool = rendered(&Reply::tool_use("Bash", json!({})));
        assert_eq!(
            tool.events().iter().rev().nth(1).unwrap().1["delta"]["stop_reason"],
            "tool_use"
        );
    }
}
