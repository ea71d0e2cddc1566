//! The one projection of a session: what its lines and events mean, as a typed stream of
//! [`Update`]s and one [`View`] snapshot.
//!
//! The CLI's lines are interpreted here and nowhere else. The daemon's session record, the
//! HTTP/WebSocket view, the web UI and every other face read these updates; none of them looks
//! inside a line again. The [`Projector`] is sans-IO and deterministic: the same events give the
//! same updates, live (typed events from the session actor) or replayed from a stored log
//! ([`SessionEvent::from_stored`](crate::SessionEvent::from_stored)).
//!
//! What it rebuilds:
//! - text and thinking as they stream, then each finished content block;
//! - a tool call's input from its `input_json_delta` fragments, as soon as the block ends
//!   (the CLI's own final line confirms it, and wins where the two differ);
//! - each tool's result, routed to its call, with the call's tool name;
//! - each turn's usage and its own cost (the CLI reports cost per process, so a turn's cost is
//!   the difference to the turn before);
//! - the subagent tree: every update names the Task/Agent call it belongs to
//!   (`parent_tool_use_id`), and the [`View`] lists each subagent with its parent;
//! - permissions asked and decided, state, model and mode, and notices (a `rewind_files` seen
//!   sent and answered becomes a `rewound` or `rewind_failed` notice).
//!
//! The [`View`] holds the state, model, mode, cost, cwd, title, open turns, context, waiting
//! requests, the subagent tree and the files its tools changed (`touched_files`, the one place
//! that says so). [`settle`] drops streamed pieces a page of history also holds whole. In
//! transcript mode ([`Projector::set_transcript`], for an interactive CLI) the CLI's prompt
//! lines are the prompts, and ours are not shown twice.

use std::collections::{HashMap, VecDeque};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use switchboard_protocol::content::{ContentBlock, ImageSource, ToolResultBlock};
use switchboard_protocol::stream::{Delta, StreamEvent};
use switchboard_protocol::{Drift, Message, Num, SystemMessage, TextOr};

use crate::event::{DecidedBy, LineDirection, PendingPermission, SessionEvent, SessionState};
use crate::policy::Behavior;

/// The most bytes of one tool call's streamed input that are kept to rebuild it. A bigger
/// input (a long `Write`) is not rebuilt from its fragments: the CLI's final line carries it.
pub const MAX_REBUILT_INPUT_BYTES: usize = 4 * 1024 * 1024;

/// How many bytes a streamed tool input grows by, at least, between two
/// [`Update::ToolInputDelta`]s that carry it parsed.
pub const PARTIAL_INPUT_STEP: usize = 16;

/// A fingerprint of the source a session's view is projected by (this crate's, the protocol
/// crate's, and the daemon's viewer): a [`Projector`]'s state written by one build is read back
/// only by a build whose fingerprint is the same (the daemon stores it with its checkpoints of
/// a session's view, and a fix to the projection leaves no state of the old one in use).
pub const SOURCE_FINGERPRINT: &str = env!("SWITCHBOARD_PROJECTION_SOURCE");

/// How many assistant messages' streaming state is kept (older ones are finished).
const OPEN_MESSAGES: usize = 64;

/// Streaming state of one content block.
#[derive(Default, Clone, Serialize, Deserialize)]
struct OpenBlock {
    tool_use_id: Option<String>,
    name: String,
    json: String,
    overflowed: bool,
    /// A complete block was reported for it.
    done: bool,
    /// The input rebuilt from the fragments, until the CLI's line confirms it.
    rebuilt: Option<Value>,
    /// Bytes of input received (also past the rebuilding cap).
    received: u64,
    /// The length of `json` when it was last parsed as a partial input.
    parsed: usize,
}

/// Streaming state of one assistant message.
#[derive(Default, Clone, Serialize, Deserialize)]
struct OpenMessage {
    /// Blocks by index.
    blocks: HashMap<u64, OpenBlock>,
    /// Final lines seen (each carries one block, in order).
    finals: u64,
}

/// Turns a session's events into [`Update`]s and keeps its [`View`].
///
/// Its state is plain data and serialises whole ([`Serialize`], [`Deserialize`]): a projector
/// read back from what it wrote goes on exactly as the one that wrote it (the daemon stores
/// checkpoints of a session's view this way, beside its log). The written form is not a wire
/// format: it is read back only by a build of the same source ([`SOURCE_FINGERPRINT`]).
#[derive(Default, Clone, Serialize, Deserialize)]
pub struct Projector {
    view: View,
    messages: HashMap<String, OpenMessage>,
    message_order: VecDeque<String>,
    /// The message streaming now, per parent (`None`: the main conversation), for lines that
    /// do not name theirs (`stream_event` before 2.1.330 has no `api_message_id`). Written as
    /// pairs: a key may be `None`, which a JSON object cannot hold.
    #[serde(with = "pairs")]
    current: HashMap<Option<String>, String>,
    /// Tool names by call id, for results.
    tools: HashMap<String, String>,
    /// The session's cost, from the CLI's running totals.
    cost: crate::cost::CostCounter,
    /// The prompts sent while a turn ran that have not started, oldest first (at most
    /// [`MAX_WAITING_PROMPTS`]).
    waiting_prompts: VecDeque<String>,
    interrupting: bool,
    started: bool,
    /// The model of the main conversation's last message (a result names several).
    main_model: Option<String>,
    /// The drifts noticed so far (type/subtype and the part left out): each is told once, not
    /// once per line (a changed stream event would otherwise be thousands of notices a turn).
    drifts_told: std::collections::BTreeSet<(String, String)>,
    /// Leave [`Update::ToolInputDelta`]'s `partial_input` out (a projector whose updates no
    /// one reads one by one: the daemon's own, for the record).
    no_partial_inputs: bool,
    /// The lines are an interactive CLI's transcript ([`Projector::set_transcript`]).
    transcript: bool,
    /// `rewind_files` requests sent (not dry runs) whose answer has not come: request id.
    rewinds: std::collections::BTreeSet<String>,
    /// File-changing tool calls whose result has not come: call id → the file.
    touching: HashMap<String, String>,
    /// Background tasks off the list whose end has not been told yet, newest last (2.1.250
    /// lists the set without a task before it says how the task ended).
    unlisted_tasks: VecDeque<tasks::BackgroundTask>,
}

/// A map written as a list of pairs, in its keys' order (its keys need not be strings).
mod pairs {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use std::collections::HashMap;
    use std::hash::Hash;

    pub(super) fn serialize<K: Serialize + Ord, V: Serialize, S: Serializer>(
        map: &HashMap<K, V>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        let mut pairs: Vec<(&K, &V)> = map.iter().collect();
        pairs.sort_by(|a, b| a.0.cmp(b.0));
        serializer.collect_seq(pairs)
    }

    pub(super) fn deserialize<'de, K, V, D>(deserializer: D) -> Result<HashMap<K, V>, D::Error>
    where
        K: Deserialize<'de> + Eq + Hash,
        V: Deserialize<'de>,
        D: Deserializer<'de>,
    {
        Ok(Vec::<(K, V)>::deserialize(deserializer)?.into_iter().collect())
    }
}

impl std::fmt::Debug for Projector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Projector").finish_non_exhaustive()
    }
}

/// The most files a view lists as touched, and the most file-changing calls awaited at once.
pub const MAX_TOUCHED_FILES: usize = 1000;

/// The tools that change a file, and the input field that names it.
fn touched_by(name: &str, input: &Value) -> Option<String> {
    let field = match name {
        "Write" | "Edit" | "MultiEdit" => "file_path",
        "NotebookEdit" => "notebook_path",
        _ => return None,
    };
    let path = input.get(field)?.as_str()?;
    (!path.is_empty() && path.len() <= 4096 && !path.contains('\0')).then(|| path.to_owned())
}

/// The most `rewind_files` requests waiting for their answer that a projector remembers.
const MAX_OPEN_REWINDS: usize = 64;

impl Projector {
    /// A projector for a new session.
    pub fn new() -> Self {
        Self::default()
    }

    /// A projector that leaves [`Update::ToolInputDelta`]'s `partial_input` out: for one whose
    /// updates feed only the [`View`].
    pub fn without_partial_inputs() -> Self {
        Projector { no_partial_inputs: true, ..Self::default() }
    }

    /// Goes on from a session whose reported cost so far is `total_usd` (a record's, when the
    /// daemon takes a stored session up again): the next result's cost is its step from there.
    ///
    /// A CLI that carries its saved running total into the resumed process (2.1.330) after a
    /// `/clear` reports less than `total_usd` at first: that first step is then counted whole,
    /// the earlier conversation's cost again (an over-count: a budget pauses early, never late).
    pub fn continue_from_cost(&mut self, total_usd: f64) {
        self.cost = crate::cost::CostCounter::continuing(total_usd);
        self.view.cost_usd = total_usd;
    }

    /// The cost as counted so far (to hand to the projector of the same CLI's next session).
    pub fn cost(&self) -> crate::cost::CostCounter {
        self.cost
    }

    /// Goes on counting with `cost`, the counter of the session the same CLI ran before (a
    /// relay CLI that moved on to another Claude session: its running total goes on, or
    /// started again at a `/clear` the counter heard of).
    pub fn continue_with_cost(&mut self, cost: crate::cost::CostCounter) {
        self.cost = cost;
        self.view.cost_usd = cost.sum();
    }

    /// The session's lines are an interactive CLI's transcript
    /// ([`switchboard_protocol::transcript`]): its prompts are the CLI's own `user` lines (ours,
    /// typed into its terminal, show when the CLI writes them), and a turn ends at
    /// `turn_duration` or an interruption, with no cost (a transcript tells none).
    pub fn set_transcript(&mut self) {
        self.transcript = true;
    }

    /// The session's CLI is gone: forgets what only a running CLI continues (messages still
    /// streaming, tool names by call id, the drifts already told) and keeps the view. A
    /// finished session then holds no more than its view; a resume's CLI starts these afresh.
    pub fn end_run(&mut self) {
        self.messages = HashMap::new();
        self.message_order = VecDeque::new();
        self.current = HashMap::new();
        self.tools = HashMap::new();
        self.drifts_told = std::collections::BTreeSet::new();
        self.interrupting = false;
        // What a CLI that is gone was asked never gets its answer.
        self.rewinds = std::collections::BTreeSet::new();
        self.touching = HashMap::new();
    }

    /// About how many bytes this projector holds (what it remembers grows with a run's tool
    /// calls and open messages): for a cache of projectors that keeps its memory bounded.
    pub fn approximate_bytes(&self) -> usize {
        const ENTRY: usize = 64;
        let strings =
            |set: &mut dyn Iterator<Item = usize>| set.map(|len| len + ENTRY).sum::<usize>();
        let open_messages: usize = self
            .messages
            .values()
            .flat_map(|message| message.blocks.values())
            // Its input's text, and as much again while it is rebuilt as a value.
            .map(|block| 2 * block.json.len() + block.name.len() + 4 * ENTRY)
            .sum();
        std::mem::size_of::<Self>()
            + strings(&mut self.tools.iter().map(|(id, name)| id.len() + name.len()))
            + strings(&mut self.touching.iter().map(|(id, file)| id.len() + file.len()))
            + strings(&mut self.view.touched_files.iter().map(String::len))
            + strings(&mut self.waiting_prompts.iter().map(String::len))
            + strings(&mut self.message_order.iter().map(String::len))
            + open_messages
            // A request's input can be large (a file to write): counted as written.
            + self
                .view
                .pending_permissions
                .iter()
                .map(|pending| serde_json::to_string(&pending.input).map_or(0, |text| text.len()))
                .sum::<usize>()
            + (self.view.pending_permissions.len()
                + self.view.subagents.len()
                + self.view.background_tasks.len()
                + self.unlisted_tasks.len()
                + self.drifts_told.len()
                + self.rewinds.len())
                * 4
                * ENTRY
    }

    /// The session as the updates so far leave it.
    pub fn view(&self) -> &View {
        &self.view
    }

    /// Projects one event; its updates go to `emit`, in order.
    pub fn apply(&mut self, event: &SessionEvent, emit: &mut impl FnMut(Update)) {
        match event {
            SessionEvent::Line(line) if self.transcript => {
                self.transcript_line(line.direction, &line.message, emit)
            }
            SessionEvent::Line(line) => match line.direction {
                LineDirection::FromCli => self.cli_line(&line.message, emit),
                LineDirection::ToCli => self.our_line(&line.message, emit),
            },
            SessionEvent::BadLine(error) => emit(notice(
                Level::Error,
                NoticeKind::BadLine,
                format!("An unreadable line from the CLI: {}", error.kind),
            )),
            SessionEvent::Stderr(text) => emit(notice(Level::Info, NoticeKind::Stderr, text.clone())),
            SessionEvent::State { from, to } => {
                self.view.state = Some(*to);
                if to.is_final() {
                    self.new_run();
                }
                emit(Update::State { from: *from, to: *to });
            }
            SessionEvent::ClaudeSessionId(id) => {
                self.view.claude_session_id = Some(id.clone());
                emit(Update::ClaudeSession { claude_session_id: id.clone() });
            }
            SessionEvent::ModelChanged(model) => {
                self.view.model = Some(model.clone());
                emit(Update::Model { model: model.clone() });
            }
            SessionEvent::ModeChanged(mode) => {
                self.view.permission_mode = Some(mode.clone());
                emit(Update::Mode { mode: mode.clone() });
            }
            // The view's cost is the sum of the results' steps (`cost`), which a reset of the
            // CLI's running total does not lower; the core's figure is its own run's.
            SessionEvent::CostChanged(_) => {}
            SessionEvent::PermissionRequested(pending) => {
                // Told again when it is parked: the same request, waiting on with no process.
                let waiting = &mut self.view.pending_permissions;
                match waiting.iter_mut().find(|p| p.request_id == pending.request_id) {
                    Some(known) => *known = pending.clone(),
                    None => waiting.push(pending.clone()),
                }
                emit(Update::PermissionAsked(pending.clone()));
            }
            SessionEvent::PermissionDecided {
                request_id,
                tool_name,
                behavior,
                by,
                message,
                decided_at_ms,
                tool_use_id,
                origin,
                ..
            } => {
                self.view.pending_permissions.retain(|p| &p.request_id != request_id);
                emit(Update::PermissionDecided {
                    request_id: request_id.clone(),
                    tool_name: tool_name.clone(),
                    behavior: *behavior,
                    by: by.clone(),
                    message: message.clone(),
                    tool_use_id: tool_use_id.clone(),
                    decided_at_ms: *decided_at_ms,
                    origin: origin.clone(),
                });
            }
            SessionEvent::ControlTimedOut { subtype, .. } => emit(notice(
                Level::Error,
                NoticeKind::ControlTimedOut,
                format!("The CLI did not answer {subtype} in time."),
            )),
            SessionEvent::UnsupportedControlRequest { subtype, .. } => emit(notice(
                Level::Warn,
                NoticeKind::UnsupportedControlRequest,
                format!("The CLI asked for {subtype}, which Switchboard does not serve; it was told so."),
            )),
            SessionEvent::Disconnected => emit(notice(
                Level::Warn,
                NoticeKind::Disconnected,
                "The CLI's connection dropped; it reconnects by itself (2.1.37 tries for about 5 s, 2.1.120 for 10 minutes).".into(),
            )),
            SessionEvent::Resent { line_type, .. } => emit(notice(
                Level::Info,
                NoticeKind::Resent,
                if line_type == "user" {
                    "A message the CLI had not confirmed went again on its new connection (it runs once).".into()
                } else if line_type.starts_with("control_response") {
                    "An answer lost with the CLI's connection went again.".into()
                } else {
                    format!("A {line_type} line went again on the CLI's new connection.")
                },
            )),
            SessionEvent::Undelivered { line_type, prompt, .. } => {
                // A lost prompt is no turn: the prompts after it do not wait for it.
                if *prompt && self.view.open_turns > 0 {
                    self.view.open_turns -= 1;
                }
                emit(notice(
                    Level::Error,
                    NoticeKind::Undelivered,
                    if line_type == "user" {
                        "The CLI never confirmed a message before it ended or stopped listening, so it may not have run: if the transcript lacks it, send it again.".into()
                    } else {
                        format!("A {line_type} line may not have reached the CLI (its connection or input closed first).")
                    },
                ))
            }
            SessionEvent::Exited { code, requested, description, .. } => {
                self.rewinds.clear();
                self.touching.clear();
                // The description says "the CLI …" already: only its first letter changes.
                let mut text = description.clone();
                if let Some(first) = text.get(..1) {
                    text.replace_range(..1, &first.to_uppercase());
                }
                let level =
                    if *requested || *code == Some(0) { Level::Info } else { Level::Error };
                emit(notice(level, NoticeKind::Exited, text))
            }
            SessionEvent::HookRequested(_)
            | SessionEvent::HookAnswered { .. }
            | SessionEvent::Sent { .. }
            | SessionEvent::Connected { .. } => {}
        }
    }

    /// A new run of the session's CLI begins (a resume): nothing of the old process is still
    /// open, and its first `init` is news again. A final state does the same; a log whose
    /// daemon died mid-run has none, only the next run's start.
    pub fn new_run(&mut self) {
        self.started = false;
        self.view.open_turns = 0;
        // A parked request outlives its CLI: it waits until a person answers.
        self.view.pending_permissions.retain(|pending| pending.parked_at_ms.is_some());
        self.interrupting = false;
    }

    /// The main conversation's model, from one of its messages. The CLI's own messages (an API
    /// error it reports as an answer) name `<synthetic>`, which no result counts.
    fn note_main_model(&mut self, model: Option<&str>) {
        if let Some(model) = model.filter(|model| !model.starts_with('<')) {
            self.main_model = Some(model.to_owned());
        }
    }

    /// Projects one event into a list.
    pub fn updates(&mut self, event: &SessionEvent) -> Vec<Update> {
        let mut updates = Vec::new();
        self.apply(event, &mut |update| updates.push(update));
        updates
    }

    fn our_line(&mut self, message: &Message, emit: &mut impl FnMut(Update)) {
        match message.readable() {
            Message::User(user) if user.parent_tool_use_id.is_none() => {
                let (text, images) = match &user.message.content {
                    TextOr::Text(text) => (text.clone(), Vec::new()),
                    TextOr::Items(blocks) => {
                        if blocks.iter().all(|b| matches!(b, ContentBlock::ToolResult(_))) {
                            return;
                        }
                        let texts: Vec<&str> = blocks
                            .iter()
                            .filter_map(|b| match b {
                                ContentBlock::Text(text) => Some(text.text.as_str()),
                                _ => None,
                            })
                            .collect();
                        let images = blocks
                            .iter()
                            .filter_map(|b| match b {
                                ContentBlock::Image(image) => Some(image_of(&image.source)),
                                _ => None,
                            })
                            .collect();
                        (texts.join("\n\n"), images)
                    }
                };
                if self.view.title.is_none() && !text.trim().is_empty() {
                    self.view.title = Some(title_of(&text));
                }
                let queued = self.view.open_turns > 0;
                self.view.open_turns += 1;
                if let (true, Some(uuid)) = (queued, &user.uuid) {
                    if self.waiting_prompts.len() >= MAX_WAITING_PROMPTS {
                        self.waiting_prompts.pop_front();
                    }
                    self.waiting_prompts.push_back(uuid.clone());
                }
                // A prompt answers what was suggested.
                self.view.prompt_suggestion = None;
                emit(Update::Prompt { text, images, uuid: user.uuid.clone(), queued });
            }
            Message::ControlRequest(request) if request.subtype() == Some("interrupt") => {
                self.interrupting = true;
            }
            Message::ControlRequest(request) => {
                use switchboard_protocol::control::ControlRequestPayload;
                if let ControlRequestPayload::RewindFiles(rewind) = &request.request {
                    if rewind.dry_run != Some(true) && self.rewinds.len() < MAX_OPEN_REWINDS {
                        self.rewinds.insert(request.request_id.clone());
                    }
                }
            }
            _ => {}
        }
    }

    fn transcript_line(
        &mut self,
        direction: LineDirection,
        message: &Message,
        emit: &mut impl FnMut(Update),
    ) {
        use switchboard_protocol::transcript;
        match direction {
            // What we typed: the prompt shows when the CLI takes it (its transcript line).
            LineDirection::ToCli if matches!(message.readable(), Message::User(_)) => {}
            LineDirection::ToCli => self.our_line(message, emit),
            LineDirection::FromCli if transcript::prompt(message).is_some() => {
                self.our_line(message, emit)
            }
            LineDirection::FromCli => match transcript::turn_end(message) {
                Some(end) => {
                    self.interrupting = false;
                    self.view.turns += 1;
                    if self.view.open_turns > 0 {
                        self.view.open_turns -= 1;
                        if self.view.open_turns > 0 {
                            // The oldest waiting prompt runs now.
                            self.waiting_prompts.pop_front();
                            emit(Update::Dequeued);
                        }
                    }
                    emit(Update::TurnEnded {
                        parent_tool_use_id: None,
                        subtype: if end.interrupted { "interrupted" } else { "turn_duration" }
                            .to_owned(),
                        interrupted: end.interrupted,
                        failed: false,
                        result: None,
                        duration_ms: end.duration_ms.unwrap_or(0),
                        input_tokens: 0,
                        output_tokens: 0,
                        cost_usd: 0.0,
                        total_cost_usd: self.view.cost_usd,
                        models: Vec::new(),
                        context_tokens: self.view.context_tokens,
                        context_window: self.view.context_window,
                    });
                }
                None => self.cli_line(message, emit),
            },
        }
    }

    fn cli_line(&mut self, message: &Message, emit: &mut impl FnMut(Update)) {
        if let Message::Drift(drift) = message {
            let kind =
                format!("{}/{}", drift.field("type").unwrap_or("?"), drift.subtype().unwrap_or(""));
            if self.drifts_told.insert((kind, drift.left_out.clone())) {
                emit(notice(Level::Info, NoticeKind::Drift, drift_note(drift)));
            }
        }
        match message.readable() {
            Message::System(system) => match &**system {
                SystemMessage::Init(init) => {
                    if init.cwd.is_some() {
                        self.view.cwd = init.cwd.clone();
                    }
                    if init.mcp_servers.is_some() {
                        let cut = |text: String| text.chars().take(200).collect::<String>();
                        self.view.mcp_servers = init
                            .mcp_server_list()
                            .into_iter()
                            .take(MAX_MCP_SERVERS)
                            .map(|server| McpServerInfo {
                                name: cut(server.name),
                                status: server.status.map(cut),
                                source: server.source.map(cut),
                            })
                            .collect();
                    }
                    self.view.cli_version =
                        init.claude_code_version.clone().or(self.view.cli_version.take());
                    if !self.started {
                        self.started = true;
                        emit(Update::Started {
                            cwd: init.cwd.clone(),
                            model: init.model.clone(),
                            permission_mode: init
                                .permission_mode
                                .as_ref()
                                .map(|m| m.as_str().to_owned()),
                            cli_version: init.claude_code_version.clone(),
                        });
                    }
                }
                SystemMessage::ApiRetry(retry) => {
                    let status =
                        retry.error_status.flatten().map(|s| format!(" {s}")).unwrap_or_default();
                    let error = retry.error.as_deref().unwrap_or("error");
                    let seconds = retry.retry_delay_ms.as_ref().map_or(0.0, Num::as_f64) / 1000.0;
                    emit(notice(
                        Level::Warn,
                        NoticeKind::ApiRetry,
                        format!(
                            "API error{status} ({error}): retry {} of {} in {seconds:.0} s",
                            Num::or_zero(&retry.attempt),
                            Num::or_zero(&retry.max_retries),
                        ),
                    ));
                }
                SystemMessage::CompactBoundary(_) => emit(notice(
                    Level::Info,
                    NoticeKind::Compacted,
                    "The conversation was compacted.".into(),
                )),
                other => self.newer_system(other, emit),
            },
            other @ (Message::CommandLifecycle(_)
            | Message::ConversationReset(_)
            | Message::RateLimitEvent(_)
            | Message::PromptSuggestion(_)) => self.newer_line(other, emit),
            Message::ControlResponse(response) => {
                use switchboard_protocol::control::ControlResponseBody;
                let failure = match &response.response {
                    ControlResponseBody::Success(success)
                        if self.rewinds.remove(&success.request_id) =>
                    {
                        // A success may still say it could not (`canRewind: false`).
                        let answer: switchboard_protocol::control::RewindFilesResponse =
                            success.payload().and_then(Result::ok).unwrap_or_default();
                        (!answer.can()).then(|| {
                            answer.error.unwrap_or_else(|| "the CLI says it cannot".to_owned())
                        })
                    }
                    ControlResponseBody::Error(error) if self.rewinds.remove(&error.request_id) => {
                        Some(error.error.clone())
                    }
                    _ => return,
                };
                emit(match failure {
                    None => notice(
                        Level::Info,
                        NoticeKind::Rewound,
                        "The files were put back as they were before that message.".into(),
                    ),
                    Some(why) => notice(
                        Level::Warn,
                        NoticeKind::RewindFailed,
                        format!("The files could not be put back: {why}"),
                    ),
                });
            }
            Message::StreamEvent(line) => {
                let parent = line.parent_tool_use_id.clone();
                let named = line.extra.get("api_message_id").and_then(Value::as_str);
                self.stream_event(&line.event, named, parent, emit);
            }
            Message::Assistant(line) => {
                let parent = line.parent_tool_use_id.clone();
                self.count_subagent_message(parent.as_deref());
                for block in &line.message.content {
                    if let ContentBlock::ToolUse(tool) = block {
                        if let Some(path) = touched_by(&tool.name, &tool.input) {
                            if self.touching.len() < MAX_TOUCHED_FILES {
                                self.touching.insert(tool.id.clone(), path);
                            }
                        }
                    }
                }
                let Some(id) = line.message.id.clone().or_else(|| line.uuid.clone()) else {
                    return;
                };
                if parent.is_none() {
                    self.note_main_model(line.message.model.as_deref());
                }
                if !self.messages.contains_key(&id) {
                    self.open_message(&id);
                    emit(Update::MessageStarted {
                        message_id: id.clone(),
                        parent_tool_use_id: parent.clone(),
                        model: line.message.model.clone(),
                        context_tokens: line.message.usage.as_ref().map(context_of),
                    });
                }
                for block in &line.message.content {
                    let Some(message) = self.messages.get_mut(&id) else { return };
                    let index = message.finals;
                    message.finals += 1;
                    let open = message.blocks.entry(index).or_default();
                    let finished =
                        finish_block(&mut self.view, &mut self.tools, block, open, &parent);
                    let Some(block) = finished else { continue };
                    emit(Update::Block {
                        message_id: id.clone(),
                        index,
                        parent_tool_use_id: parent.clone(),
                        uuid: line.uuid.clone(),
                        block,
                    });
                }
            }
            Message::User(user) => {
                let parent = user.parent_tool_use_id.clone();
                self.count_subagent_message(parent.as_deref());
                for result in user.tool_results() {
                    emit(self.tool_result(result, user.tool_use_result.as_ref(), &parent));
                }
            }
            Message::Result(result) => {
                let parent = result.extra.get("parent_tool_use_id").and_then(Value::as_str);
                // The step from the CLI's last running total ([`crate::cost`]): a resumed
                // process or a reset conversation counts from zero again.
                let cost = result.cost_usd().map_or(0.0, |total| self.cost.on_result(total));
                let total = self.cost.sum();
                // A subagent's result counts too (the record follows the view).
                self.view.cost_usd = total;
                if parent.is_none() {
                    self.view.turns += 1;
                    if self.view.open_turns > 0 {
                        self.view.open_turns -= 1;
                        if self.view.open_turns > 0 {
                            // The oldest waiting prompt runs now.
                            self.waiting_prompts.pop_front();
                            emit(Update::Dequeued);
                        }
                    }
                }
                let interrupted = std::mem::take(&mut self.interrupting)
                    && result.subtype == "error_during_execution";
                let failed = !interrupted && (result.is_error || result.subtype != "success");
                let usage = result.usage.clone().unwrap_or_default();
                let errors = result.errors.clone().unwrap_or_default();
                let text = match (&result.result, errors.is_empty()) {
                    (Some(text), _) => Some(text.clone()),
                    (None, false) => Some(errors.join("\n")),
                    (None, true) => None,
                };
                let models: Vec<ModelTotals> = result
                    .model_usage
                    .iter()
                    .flatten()
                    .map(|(model, usage)| ModelTotals {
                        model: model.clone(),
                        input_tokens: Num::or_zero(&usage.input_tokens)
                            .saturating_add(Num::or_zero(&usage.cache_read_input_tokens)),
                        output_tokens: Num::or_zero(&usage.output_tokens),
                        cost_usd: usage.cost_usd.as_ref().and_then(|c| c.as_f64()).unwrap_or(0.0),
                        context_window: usage.context_window.as_ref().map(Num::get),
                    })
                    .collect();
                let context_window = context_window_of(&models, self.main_model.as_deref());
                if parent.is_none() && context_window.is_some() {
                    self.view.context_window = context_window;
                }
                emit(Update::TurnEnded {
                    parent_tool_use_id: parent.map(str::to_owned),
                    subtype: result.subtype.clone(),
                    interrupted,
                    failed,
                    result: text,
                    duration_ms: Num::or_zero(&result.duration_ms),
                    input_tokens: context_of(&usage),
                    output_tokens: Num::or_zero(&usage.output_tokens),
                    cost_usd: cost,
                    total_cost_usd: total,
                    models,
                    context_tokens: if parent.is_none() { self.view.context_tokens } else { None },
                    context_window: if parent.is_none() { context_window } else { None },
                });
            }
            _ => {}
        }
    }

    fn stream_event(
        &mut self,
        event: &StreamEvent,
        named: Option<&str>,
        parent: Option<String>,
        emit: &mut impl FnMut(Update),
    ) {
        let partial_inputs = !self.no_partial_inputs;
        if let StreamEvent::MessageStart(start) = event {
            let Some(id) = named.map(str::to_owned).or_else(|| start.message.id.clone()) else {
                return;
            };
            self.current.insert(parent.clone(), id.clone());
            let context = start.message.usage.as_ref().map(context_of);
            if context.is_some() && parent.is_none() {
                self.view.context_tokens = context;
            }
            if parent.is_none() {
                self.note_main_model(start.message.model.as_deref());
            }
            if !self.messages.contains_key(&id) {
                self.open_message(&id);
                emit(Update::MessageStarted {
                    message_id: id,
                    parent_tool_use_id: parent,
                    model: start.message.model.clone(),
                    context_tokens: context,
                });
            }
            return;
        }
        let id = match named {
            Some(id) => id.to_owned(),
            None => match self.current.get(&parent) {
                Some(id) => id.clone(),
                None => return,
            },
        };
        let Some(message) = self.messages.get_mut(&id) else { return };
        match event {
            StreamEvent::ContentBlockStart(start) => {
                let open = message.blocks.entry(start.index).or_default();
                if let ContentBlock::ToolUse(tool) | ContentBlock::ServerToolUse(tool) =
                    &start.content_block
                {
                    open.tool_use_id = Some(tool.id.clone());
                    open.name = tool.name.clone();
                    self.tools.insert(tool.id.clone(), tool.name.clone());
                    emit(Update::ToolUseStarted {
                        message_id: id,
                        index: start.index,
                        parent_tool_use_id: parent,
                        tool_use_id: tool.id.clone(),
                        name: tool.name.clone(),
                    });
                }
            }
            StreamEvent::ContentBlockDelta(delta) => {
                let index = delta.index;
                match &delta.delta {
                    Delta::Text(text) => emit(Update::TextDelta {
                        message_id: id,
                        index,
                        parent_tool_use_id: parent,
                        text: text.text.clone(),
                    }),
                    Delta::Thinking(thinking) => emit(Update::ThinkingDelta {
                        message_id: id,
                        index,
                        parent_tool_use_id: parent,
                        thinking: thinking.thinking.clone(),
                    }),
                    Delta::InputJson(json) => {
                        let Some(open) = message.blocks.get_mut(&index) else { return };
                        let Some(tool_use_id) = open.tool_use_id.clone() else { return };
                        open.received += json.partial_json.len() as u64;
                        if open.json.len() + json.partial_json.len() > MAX_REBUILT_INPUT_BYTES {
                            open.overflowed = true;
                            open.json = String::new();
                        } else if !open.overflowed {
                            open.json.push_str(&json.partial_json);
                        }
                        let grown = open.json.len() - open.parsed.min(open.json.len());
                        let partial_input = if !open.overflowed
                            && partial_inputs
                            && (open.parsed == 0
                                || grown >= PARTIAL_INPUT_STEP.max(open.parsed / 8))
                        {
                            // Counted as tried, parsed or not: text that stopped parsing is
                            // not read again at every fragment.
                            open.parsed = open.json.len();
                            partial_input(&open.json)
                        } else {
                            None
                        };
                        emit(Update::ToolInputDelta {
                            tool_use_id,
                            partial_json: json.partial_json.clone(),
                            received_bytes: open.received,
                            partial_input,
                        });
                    }
                    _ => {}
                }
            }
            StreamEvent::ContentBlockStop(stop) => {
                let Some(open) = message.blocks.get_mut(&stop.index) else { return };
                if open.done || open.overflowed {
                    return;
                }
                let Some(tool_use_id) = open.tool_use_id.clone() else { return };
                // An empty input streams no fragment at all: `{}`.
                let text = if open.json.trim().is_empty() { "{}" } else { open.json.as_str() };
                let Ok(input) = serde_json::from_str::<Value>(text) else { return };
                open.done = true;
                open.json = String::new();
                open.rebuilt = Some(input.clone());
                let block =
                    Block::ToolUse { tool_use_id, name: open.name.clone(), input, rebuilt: true };
                emit(Update::Block {
                    message_id: id,
                    index: stop.index,
                    parent_tool_use_id: parent,
                    uuid: None,
                    block,
                });
            }
            _ => {}
        }
    }

    fn count_subagent_message(&mut self, parent: Option<&str>) {
        let Some(parent) = parent else { return };
        if let Some(node) = self.view.subagents.iter_mut().find(|s| s.tool_use_id == parent) {
            node.messages += 1;
        }
    }

    fn open_message(&mut self, id: &str) {
        if self.message_order.len() >= OPEN_MESSAGES {
            if let Some(oldest) = self.message_order.pop_front() {
                self.messages.remove(&oldest);
            }
        }
        self.messages.insert(id.to_owned(), OpenMessage::default());
        self.message_order.push_back(id.to_owned());
    }

    fn tool_result(
        &mut self,
        result: &ToolResultBlock,
        structured: Option<&Value>,
        parent: &Option<String>,
    ) -> Update {
        let tool_name = self.tools.get(&result.tool_use_id).cloned();
        if let Some(path) = self.touching.remove(&result.tool_use_id) {
            let touched = &mut self.view.touched_files;
            if result.is_error != Some(true)
                && touched.len() < MAX_TOUCHED_FILES
                && !touched.contains(&path)
            {
                touched.push(path);
            }
        }
        if let Some(node) =
            self.view.subagents.iter_mut().find(|s| s.tool_use_id == result.tool_use_id)
        {
            node.finished = true;
        }
        let mut texts = Vec::new();
        let mut images = Vec::new();
        match &result.content {
            Some(TextOr::Text(text)) => texts.push(text.clone()),
            Some(TextOr::Items(items)) => {
                for item in items {
                    match item {
                        ContentBlock::Text(text) => texts.push(text.text.clone()),
                        ContentBlock::Image(image) => images.push(image_of(&image.source)),
                        _ => {}
                    }
                }
            }
            None => {}
        }
        let mut text = texts.join("\n");
        let mut interrupted = false;
        // Bash's structured result keeps stdout and stderr apart; the text joins them.
        if tool_name.as_deref() == Some("Bash") {
            if let Some(Value::Object(fields)) = structured {
                if fields.contains_key("stdout") {
                    let part = |key: &str| fields.get(key).and_then(Value::as_str).unwrap_or("");
                    text = [part("stdout"), part("stderr")]
                        .into_iter()
                        .filter(|p| !p.is_empty())
                        .collect::<Vec<_>>()
                        .join("\n");
                    interrupted = fields.get("interrupted").and_then(Value::as_bool) == Some(true);
                }
            }
        }
        Update::ToolResult {
            tool_use_id: result.tool_use_id.clone(),
            tool_name,
            parent_tool_use_id: parent.clone(),
            is_error: result.is_error == Some(true),
            text,
            images,
            interrupted,
        }
    }
}

/// A tool input's JSON text so far, read as far as it goes: an unfinished string ends where it
/// stands, open arrays and objects are closed, and a key without its value yet is left out.
/// `None` unless that reads as an object.
pub fn partial_input(text: &str) -> Option<Value> {
    let parsed = jiter::JsonValue::parse_with_config(
        text.as_bytes(),
        false,
        jiter::PartialMode::TrailingStrings,
    )
    .ok()?;
    let value = from_jiter(parsed);
    value.is_object().then_some(value)
}

fn from_jiter(value: jiter::JsonValue<'_>) -> Value {
    use jiter::JsonValue as J;
    match value {
        J::Null => Value::Null,
        J::Bool(bool) => Value::Bool(bool),
        J::Int(int) => Value::from(int),
        J::BigInt(big) => {
            serde_json::from_str(&big.to_string()).unwrap_or_else(|_| Value::from(big.to_string()))
        }
        J::Float(float) => serde_json::Number::from_f64(float).map_or(Value::Null, Value::Number),
        J::Str(text) => Value::String(text.into_owned()),
        J::Array(items) => Value::Array(
            std::sync::Arc::unwrap_or_clone(items).into_iter().map(from_jiter).collect(),
        ),
        J::Object(fields) => Value::Object(
            std::sync::Arc::unwrap_or_clone(fields)
                .into_iter()
                .map(|(key, value)| (key.into_owned(), from_jiter(value)))
                .collect(),
        ),
    }
}

/// A block from the CLI's final line; `None` when it only confirms what was reported.
fn finish_block(
    view: &mut View,
    tools: &mut HashMap<String, String>,
    block: &ContentBlock,
    open: &mut OpenBlock,
    parent: &Option<String>,
) -> Option<Block> {
    let finished = match block {
        ContentBlock::Text(text) => Block::Text { text: text.text.clone() },
        ContentBlock::Thinking(thinking) => {
            Block::Thinking { thinking: thinking.thinking.clone(), redacted: false }
        }
        ContentBlock::RedactedThinking(_) => {
            Block::Thinking { thinking: String::new(), redacted: true }
        }
        ContentBlock::ToolUse(tool) | ContentBlock::ServerToolUse(tool) => {
            tools.insert(tool.id.clone(), tool.name.clone());
            if matches!(tool.name.as_str(), "Task" | "Agent")
                && !view.subagents.iter().any(|s| s.tool_use_id == tool.id)
            {
                let text =
                    |key: &str| tool.input.get(key).and_then(Value::as_str).map(str::to_owned);
                view.subagents.push(SubagentNode {
                    tool_use_id: tool.id.clone(),
                    parent_tool_use_id: parent.clone(),
                    description: text("description"),
                    subagent_type: text("subagent_type"),
                    messages: 0,
                    finished: false,
                });
            }
            // The CLI's line comes before the stream's stop on 2.1.330, and after it on older
            // CLIs: whichever is first reports the call. The line always reports it (again, on
            // older CLIs): its input wins, and it carries the line's uuid (a fork point).
            open.rebuilt = None;
            Block::ToolUse {
                tool_use_id: tool.id.clone(),
                name: tool.name.clone(),
                input: tool.input.clone(),
                rebuilt: false,
            }
        }
        other => Block::Other { value: serde_json::to_value(other).unwrap_or(Value::Null) },
    };
    open.done = true;
    open.json = String::new();
    Some(finished)
}

/// What a person is told about a line that did not fit the model (see [`Drift`]).
fn drift_note(drift: &Drift) -> String {
    let kind = drift.field("type").unwrap_or("?");
    let kind = match drift.subtype() {
        Some(subtype) => format!("{kind}/{subtype}"),
        None => kind.to_owned(),
    };
    let read = if drift.salvaged.is_some() {
        format!("read without `{}`", drift.left_out)
    } else {
        "kept as it came".to_owned()
    };
    format!(
        "A {kind} line from this CLI version does not fit Switchboard's model ({}); {read}.",
        drift.reason
    )
}

fn notice(level: Level, kind: NoticeKind, text: String) -> Update {
    Update::Notice { level, kind, text }
}

/// Tokens of context: input plus cache reads and writes.
fn context_of(usage: &switchboard_protocol::Usage) -> u64 {
    Num::or_zero(&usage.input_tokens)
        .saturating_add(Num::or_zero(&usage.cache_read_input_tokens))
        .saturating_add(Num::or_zero(&usage.cache_creation_input_tokens))
}

fn image_of(source: &ImageSource) -> Image {
    Image {
        source: source.kind.clone(),
        media_type: source.media_type.clone(),
        data: source.data.clone(),
        url: source.url.clone(),
    }
}

/// The context window of the model that answered, from a result's per-model totals.
///
/// The CLI reports the model of a message as the API named it (`claude-opus-5-5`) and keys
/// its totals the same way, sometimes with a date or a `[1m]` suffix, or without the date the
/// message has: a key that starts with the model's name, or that the name starts with, counts.
/// With no model known, a result with a single model's window is unambiguous; several are not.
fn context_window_of(models: &[ModelTotals], main: Option<&str>) -> Option<u64> {
    if let Some(main) = main {
        let exact = models.iter().find(|m| m.model == main).and_then(|m| m.context_window);
        let prefixed = || {
            models
                .iter()
                .find(|m| m.model.starts_with(main) || main.starts_with(&m.model))
                .and_then(|m| m.context_window)
        };
        if let Some(window) = exact.or_else(prefixed) {
            return Some(window);
        }
    }
    let mut windows = models.iter().filter_map(|m| m.context_window);
    match (windows.next(), windows.next()) {
        (Some(only), None) => Some(only),
        _ => None,
    }
}

/// A title from a prompt: its first line, at most 80 characters.
pub fn title_of(prompt: &str) -> String {
    let line = prompt.lines().map(str::trim).find(|line| !line.is_empty()).unwrap_or("");
    cut(line, 80)
}

/// `text`'s first `most` characters, and `…` when that left any out.
fn cut(text: &str, most: usize) -> String {
    let mut chars = text.chars();
    let mut kept: String = chars.by_ref().take(most).collect();
    if chars.next().is_some() {
        kept.push('…');
    }
    kept
}

mod newer;
mod tasks;
#[cfg(test)]
mod tests;
mod update;

pub use newer::usage_windows;
pub use tasks::BackgroundTask;
pub use update::*;

/// The most waiting prompts a projector remembers.
const MAX_WAITING_PROMPTS: usize = 64;
