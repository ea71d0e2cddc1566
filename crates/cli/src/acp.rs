//! `switchboard acp`: an Agent Client Protocol agent over stdio, for editors (Zed, Neovim,
//! JetBrains), each of its sessions a Switchboard session of the daemon.
//!
//! - **Sessions.** `session/new` starts a session through the daemon (as `switchboard new`
//!   does, with the data directory's address and token; a daemon is started there when none
//!   answers), `session/load` reopens one (its
//!   conversation replayed to the editor, its CLI resumed when it is not running);
//!   `session/prompt` sends; `session/cancel` interrupts; `session/set_mode` sets the
//!   permission mode. The daemon records the sessions as started through ACP (`x-switchboard-
//!   client: acp`), and every face shows it.
//! - **What the editor sees.** One WebSocket per session follows the daemon's view (the one
//!   projection every face reads), translated in [`updates`]: text and thinking as they stream,
//!   tool calls with their diffs, results, plans, mode changes, as `session/update`.
//! - **Permissions** go through the session's policy first, in the daemon; what it sends to a
//!   person goes to the editor (`session/request_permission`) and to every other face at once.
//!   The first answer wins: the editor's is sent to the daemon (as `editor, token NAME (acp)`);
//!   one given elsewhere (the web UI, a phone, the API) withdraws the editor's request and tells
//!   the editor who answered.
//! - **The editor's buffers.** Where the client can write files (`fs.writeTextFile`), an edit
//!   that ran is written through it too, so it lands in the editor's buffer.
//!
//! stdout carries the protocol alone; logs go to stderr.

mod updates;

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::schema::{
    AgentCapabilities, CancelNotification, ContentBlock, Implementation, InitializeRequest,
    InitializeResponse, LoadSessionRequest, LoadSessionResponse, NewSessionRequest,
    NewSessionResponse, PermissionOption, PermissionOptionKind, PromptCapabilities, PromptRequest,
    PromptResponse, RequestPermissionOutcome, RequestPermissionRequest, SessionMode,
    SessionModeState, SessionNotification, SessionUpdate, SetSessionModeRequest,
    SetSessionModeResponse, StopReason, ToolCallContent, ToolCallUpdate, ToolCallUpdateFields,
    WriteTextFileRequest,
};
use agent_client_protocol::v1::{ConnectionTo, Responder};
use agent_client_protocol::{Agent, Client as Editor, Stdio};
use clap::Args;
use futures::StreamExt;
use parking_lot::Mutex;
use serde_json::{json, Value};
use switchboard_server::frames::ViewSubscriberFrame;
use switchboard_server::view::ViewUpdate;
use switchboard_session::{DecidedBy, PendingPermission, SessionState, Update};
use tokio::sync::oneshot;
use tokio_tungstenite::tungstenite::Message as WsMessage;

use crate::client::{Client, Connection};

/// `switchboard acp`
#[derive(Debug, Args)]
pub(crate) struct AcpArgs {
    #[command(flatten)]
    connection: Connection,
}

/// The permission modes an editor may pick, with what each does.
const MODES: &[(&str, &str, &str)] = &[
    ("default", "Ask", "The policy decides; what it does not, a person does"),
    ("acceptEdits", "Accept edits", "File edits run without asking"),
    ("plan", "Plan", "Read and plan; nothing changes until the plan is approved"),
    ("dontAsk", "Don't ask", "What the policy does not allow is denied"),
];

/// What the agent keeps: the daemon, and each session an editor opened.
struct State {
    client: Client,
    /// The editor can write files: an edit that ran is written through it.
    writes_files: AtomicBool,
    sessions: Mutex<HashMap<String, Arc<Session>>>,
}

/// A session an editor has open.
struct Session {
    id: String,
    /// Its directory (an edit's file is read through the daemon, relative to it).
    cwd: String,
    /// Prompts the editor sent, by uuid, each waiting for its turn's end (or why it will not
    /// come).
    waiting: Mutex<HashMap<String, oneshot::Sender<Result<StopReason, String>>>>,
    /// The turns: the prompt whose turn runs, those queued, those the editor cancelled.
    turns: Mutex<Turns>,
    /// Requests put to the editor, by request id: told when someone else answered.
    asked: Mutex<HashMap<String, oneshot::Sender<String>>>,
    /// The editor's own prompts (not echoed back to it) and what it was told of each call.
    translator: Mutex<updates::Translator>,
    /// The task that follows it (ended when it is opened again).
    follower: Mutex<Option<tokio::task::AbortHandle>>,
    /// Its feed ended: a prompt sent now would wait for nothing.
    closed: AtomicBool,
}

/// Which prompt's turn runs, by uuid, as the session's view says.
#[derive(Default)]
struct Turns {
    running: Option<String>,
    queued: std::collections::VecDeque<Option<String>>,
    /// Prompts the editor cancelled: their turn ends `cancelled`.
    cancelled: std::collections::HashSet<String>,
}

impl Session {
    /// Marks its feed ended and ends every prompt still waiting, saying why.
    fn close(&self, why: &str) {
        self.closed.store(true, Ordering::SeqCst);
        self.end_waiting(why);
    }

    /// Ends every prompt still waiting, saying why.
    fn end_waiting(&self, why: &str) {
        for (_, waiter) in self.waiting.lock().drain() {
            let _ = waiter.send(Err(why.to_owned()));
        }
    }

    /// Ends the turn of prompt `uuid`, if the editor waits for it: with `reason`, or an error
    /// for a turn that failed (not cancelled).
    fn ended(&self, uuid: &str, reason: Result<StopReason, String>) {
        let cancelled = self.turns.lock().cancelled.remove(uuid);
        if let Some(waiter) = self.waiting.lock().remove(uuid) {
            let _ = waiter.send(if cancelled { Ok(StopReason::Cancelled) } else { reason });
        }
    }
}

/// A page of a session's view (`GET /api/sessions/{id}/view`).
#[derive(serde::Deserialize)]
struct ViewPage {
    updates: Vec<switchboard_server::view::ViewItem>,
    last_seq: u64,
    more: bool,
}

/// Runs the agent on stdin and stdout until the editor closes them.
pub(crate) async fn acp(args: AcpArgs) -> ExitCode {
    let client = match daemon(&args.connection).await {
        Ok(client) => client.named("acp"),
        Err(error) => {
            #[allow(clippy::print_stderr)]
            {
                eprintln!("switchboard acp: {error}");
            }
            return ExitCode::from(1);
        }
    };
    let state = Arc::new(State {
        client,
        writes_files: AtomicBool::new(false),
        sessions: Mutex::new(HashMap::new()),
    });
    match serve(state).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            #[allow(clippy::print_stderr)]
            {
                eprintln!("switchboard acp: {error}");
            }
            ExitCode::from(1)
        }
    }
}

/// How long a daemon started here may take to answer.
const DAEMON_START: std::time::Duration = std::time::Duration::from_secs(30);

/// The daemon this agent talks to: the one the data directory names, started there when none
/// answers (an editor starts `switchboard acp` on its own), unless one was named by hand
/// (`--url`, `--token`), which is then the only one tried.
async fn daemon(connection: &Connection) -> Result<Client, String> {
    let answers = async |client: &Client| {
        let health = client.request(reqwest::Method::GET, "/api/health", None);
        matches!(tokio::time::timeout(std::time::Duration::from_secs(5), health).await, Ok(Ok(_)))
    };
    if let Ok(client) = connection.client() {
        if answers(&client).await {
            return Ok(client);
        }
    }
    let Some(dir) = connection.own_data_dir() else {
        return connection
            .client()
            .and_then(|client| Err(format!("no daemon answers at {}", client.base)));
    };
    let mut serve = start_serve(&dir)?;
    let deadline = tokio::time::Instant::now() + DAEMON_START;
    loop {
        if let Ok(client) = connection.client() {
            if answers(&client).await {
                tracing::info!(data_dir = %dir.display(), "started the daemon");
                return Ok(client);
            }
        }
        if tokio::time::Instant::now() >= deadline {
            // Exited (another editor's may be the one starting), or slow: said either way.
            let exited = match serve.try_wait() {
                Ok(Some(status)) => format!(" (it exited, {status}; run it yourself to see why)"),
                _ => String::new(),
            };
            return Err(format!(
                "no daemon was running, and none started in {} answered within {} s{exited}",
                dir.display(),
                DAEMON_START.as_secs()
            ));
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Starts `switchboard serve` on the data directory `dir`, on its own: it outlives this agent
/// (the editor's sessions go on), with this process's environment but the token and address
/// a client is given (a token meant for this agent never becomes the daemon's own).
fn start_serve(dir: &std::path::Path) -> Result<tokio::process::Child, String> {
    let program = std::env::current_exe().map_err(|error| {
        format!("cannot tell where this program is to start the daemon: {error}")
    })?;
    #[allow(clippy::disallowed_methods)] // the daemon, this same program; not the Claude CLI
    let mut command = tokio::process::Command::new(program);
    command
        .arg("serve")
        .arg("--data-dir")
        .arg(dir)
        .env_remove("SWITCHBOARD_TOKEN")
        .env_remove("SWITCHBOARD_URL")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        // Not in the editor's project: a daemon holds no directory of its own.
        .current_dir("/")
        // Its own process group: the editor's signals to this agent do not reach it.
        .process_group(0);
    command.spawn().map_err(|error| format!("cannot start the daemon: {error}"))
}

async fn serve(state: Arc<State>) -> agent_client_protocol::Result<()> {
    let (init, new, load, prompt, mode, cancel) =
        (state.clone(), state.clone(), state.clone(), state.clone(), state.clone(), state);
    Agent
        .v1()
        .name("switchboard")
        .on_receive_request(
            async move |request: InitializeRequest,
                        responder: Responder<InitializeResponse>,
                        _cx: ConnectionTo<Editor>| {
                init.writes_files
                    .store(request.client_capabilities.fs.write_text_file, Ordering::Relaxed);
                responder.respond(
                    InitializeResponse::new(ProtocolVersion::V1)
                        .agent_capabilities(
                            AgentCapabilities::new()
                                .load_session(true)
                                .prompt_capabilities(PromptCapabilities::new()),
                        )
                        .agent_info(Implementation::new("switchboard", env!("CARGO_PKG_VERSION"))),
                )
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: NewSessionRequest,
                        responder: Responder<NewSessionResponse>,
                        cx: ConnectionTo<Editor>| {
                let (state, editor) = (new.clone(), cx.clone());
                cx.spawn(async move {
                    let made = state.new_session(&editor, &request).await;
                    responder.respond_with_result(made.map_err(refusal))
                })
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: LoadSessionRequest,
                        responder: Responder<LoadSessionResponse>,
                        cx: ConnectionTo<Editor>| {
                let (state, editor) = (load.clone(), cx.clone());
                cx.spawn(async move {
                    let loaded = state.load_session(&editor, &request).await;
                    responder.respond_with_result(loaded.map_err(refusal))
                })
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: PromptRequest,
                        responder: Responder<PromptResponse>,
                        cx: ConnectionTo<Editor>| {
                let state = prompt.clone();
                cx.spawn(async move {
                    let ended = state.prompt(&request).await;
                    responder.respond_with_result(ended.map(PromptResponse::new).map_err(refusal))
                })
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: SetSessionModeRequest,
                        responder: Responder<SetSessionModeResponse>,
                        cx: ConnectionTo<Editor>| {
                let state = mode.clone();
                cx.spawn(async move {
                    let set = state.set_mode(&request).await;
                    responder.respond_with_result(
                        set.map(|()| SetSessionModeResponse::new()).map_err(refusal),
                    )
                })
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_notification(
            async move |notification: CancelNotification, cx: ConnectionTo<Editor>| {
                let state = cancel.clone();
                cx.spawn(async move {
                    if let Err(error) = state.cancel(&notification.session_id.to_string()).await {
                        tracing::warn!("session/cancel: {error}");
                    }
                    Ok(())
                })
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .connect_to(Stdio::new())
        .await
}

/// A refusal the editor is shown: the daemon's sentence.
fn refusal(message: String) -> agent_client_protocol::Error {
    agent_client_protocol::Error::internal_error().data(json!(message))
}

/// The modes an editor is offered, `current` chosen.
fn modes(current: &str) -> SessionModeState {
    let available = MODES
        .iter()
        .map(|(id, name, description)| SessionMode::new(*id, *name).description(*description))
        .collect();
    SessionModeState::new(current.to_owned(), available)
}

impl State {
    fn session(&self, id: &str) -> Result<Arc<Session>, String> {
        self.sessions
            .lock()
            .get(id)
            .cloned()
            .ok_or_else(|| format!("no session {id} is open here (session/new or session/load it)"))
    }

    async fn new_session(
        self: &Arc<Self>,
        editor: &ConnectionTo<Editor>,
        request: &NewSessionRequest,
    ) -> Result<NewSessionResponse, String> {
        let body = json!({"cwd": request.cwd});
        let made = match mcp_config(&request.mcp_servers) {
            Some(servers) => {
                let mut with = body.clone();
                with["mcp_config"] = json!([servers.to_string()]);
                match self.client.request(reqwest::Method::POST, "/api/sessions", Some(with)).await
                {
                    // MCP servers start programs: only an admin token gives them. Without one
                    // the session starts without the editor's servers, and the log says so.
                    Err(error) if error.contains("needs a token with the admin scope") => {
                        tracing::warn!("the editor's MCP servers are left out: {error}");
                        self.client
                            .request(reqwest::Method::POST, "/api/sessions", Some(body))
                            .await?
                    }
                    other => other?,
                }
            }
            None => self.client.request(reqwest::Method::POST, "/api/sessions", Some(body)).await?,
        };
        let id = made["id"].as_str().ok_or("the daemon answered without an id")?.to_owned();
        self.open(editor, &id, &request.cwd.display().to_string(), false).await?;
        let mode = made["permission_mode"].as_str().unwrap_or("default");
        Ok(NewSessionResponse::new(id).modes(modes(mode)))
    }

    async fn load_session(
        self: &Arc<Self>,
        editor: &ConnectionTo<Editor>,
        request: &LoadSessionRequest,
    ) -> Result<LoadSessionResponse, String> {
        let id = request.session_id.to_string();
        let path = format!("/api/sessions/{id}");
        let session = self.client.request(reqwest::Method::GET, &path, None).await?;
        // A parked session waits for an answer with no process: the answer resumes it.
        if session["running"] != json!(true) && session["state"] != "parked" {
            self.client
                .request(reqwest::Method::POST, &format!("{path}/resume"), Some(json!({})))
                .await?;
        }
        // The conversation so far, replayed as updates before the answer (as ACP asks), then
        // what waits for an answer, put to the editor.
        let cwd = session["cwd"].as_str().unwrap_or_default().to_owned();
        self.open(editor, &id, &cwd, true).await?;
        let opened = self.session(&id)?;
        let waiting =
            self.client.request(reqwest::Method::GET, &format!("{path}/permissions"), None).await?;
        let waiting: Vec<PendingPermission> = serde_json::from_value(waiting)
            .map_err(|error| format!("the daemon's waiting requests are unreadable: {error}"))?;
        for pending in waiting {
            self.ask_editor(editor, &opened, pending);
        }
        let mode = session["permission_mode"].as_str().unwrap_or("default");
        Ok(LoadSessionResponse::new().modes(modes(mode)))
    }

    /// Follows session `id`: its updates go to the editor, from the start of its log when
    /// `history` (replayed, page by page, before this returns), else from now (a new session,
    /// whose log is all to come).
    async fn open(
        self: &Arc<Self>,
        editor: &ConnectionTo<Editor>,
        id: &str,
        cwd: &str,
        history: bool,
    ) -> Result<(), String> {
        let session = Arc::new(Session {
            id: id.to_owned(),
            cwd: cwd.to_owned(),
            waiting: Mutex::new(HashMap::new()),
            turns: Mutex::new(Turns::default()),
            asked: Mutex::new(HashMap::new()),
            translator: Mutex::new(updates::Translator::default()),
            follower: Mutex::new(None),
            closed: AtomicBool::new(false),
        });
        let after = if history { self.replay(editor, &session).await? } else { 0 };
        let socket = crate::client::subscribe(&self.client, id, after, true).await?;
        if let Some(old) = self.sessions.lock().insert(id.to_owned(), session.clone()) {
            // Opened again: the old feed stops (nothing is told twice), its prompts end.
            if let Some(follower) = old.follower.lock().take() {
                follower.abort();
            }
            old.close("the session was opened again");
        }
        let (state, editor, followed) = (self.clone(), editor.clone(), session.clone());
        let follower = tokio::spawn(async move {
            state.clone().follow(&editor, &followed, socket).await;
            followed.close("the daemon's feed of the session ended; session/load it again");
            // Gone from here: a prompt now says the session is not open.
            let mut sessions = state.sessions.lock();
            if sessions.get(&followed.id).is_some_and(|open| Arc::ptr_eq(open, &followed)) {
                sessions.remove(&followed.id);
            }
        });
        *session.follower.lock() = Some(follower.abort_handle());
        Ok(())
    }

    /// Tells the editor the conversation of `session` so far, page by page; the log's position
    /// it reached.
    async fn replay(
        &self,
        editor: &ConnectionTo<Editor>,
        session: &Session,
    ) -> Result<u64, String> {
        let id = &session.id;
        let mut after = 0;
        loop {
            let path = format!("/api/sessions/{id}/view?after={after}");
            let page = self.client.request(reqwest::Method::GET, &path, None).await?;
            let page: ViewPage = serde_json::from_value(page)
                .map_err(|error| format!("session {id}'s view is unreadable: {error}"))?;
            for item in &page.updates {
                let told = session.translator.lock().replay(&item.update);
                for update in told {
                    editor
                        .send_notification(SessionNotification::new(id.clone(), update))
                        .map_err(|error| format!("the editor went away: {error:?}"))?;
                }
            }
            after = page.last_seq.max(after);
            if !page.more {
                return Ok(after);
            }
        }
    }

    /// Tells the editor what session `session` does, until the socket ends.
    async fn follow(
        self: Arc<Self>,
        editor: &ConnectionTo<Editor>,
        session: &Arc<Session>,
        mut socket: crate::client::Socket,
    ) {
        while let Some(Ok(message)) = socket.next().await {
            let WsMessage::Text(text) = message else { continue };
            let Ok(ViewSubscriberFrame::View(frame)) = serde_json::from_str(&text) else {
                continue;
            };
            for update in &frame.updates {
                let told = session.translator.lock().translate(update);
                for update in told {
                    let note = SessionNotification::new(session.id.clone(), update);
                    if editor.send_notification(note).is_err() {
                        return;
                    }
                }
                let ViewUpdate::Session(update) = update else { continue };
                match update {
                    Update::Prompt { uuid, queued: false, .. } => {
                        session.turns.lock().running = uuid.clone();
                    }
                    Update::Prompt { uuid, queued: true, .. } => {
                        session.turns.lock().queued.push_back(uuid.clone());
                    }
                    Update::Dequeued => {
                        let mut turns = session.turns.lock();
                        turns.running = turns.queued.pop_front().flatten();
                    }
                    Update::PromptCancelled { uuid } => {
                        session.turns.lock().queued.retain(|queued| queued.as_ref() != Some(uuid));
                        session.ended(uuid, Ok(StopReason::Cancelled));
                    }
                    Update::TurnEnded {
                        parent_tool_use_id: None,
                        subtype,
                        interrupted,
                        failed,
                        result,
                        ..
                    } => {
                        let ended = session.turns.lock().running.take();
                        if let Some(uuid) = ended {
                            let reason = if *failed && !*interrupted {
                                Err(format!(
                                    "the turn failed ({subtype}): {}",
                                    result.as_deref().unwrap_or("no reason given")
                                ))
                            } else {
                                Ok(stop_reason(subtype, *interrupted))
                            };
                            session.ended(&uuid, reason);
                        }
                    }
                    Update::State { to: SessionState::Exited | SessionState::Crashed, .. } => {
                        session.end_waiting("the session's CLI ended");
                    }
                    Update::PermissionAsked(pending) => {
                        self.ask_editor(editor, session, pending.clone());
                    }
                    Update::PermissionDecided { request_id, by, behavior, .. } => {
                        if let Some(elsewhere) = session.asked.lock().remove(request_id) {
                            let said = format!(
                                "{} by {}",
                                if behavior.as_str() == "allow" { "Allowed" } else { "Denied" },
                                decided_by(by)
                            );
                            let _ = elsewhere.send(said);
                        }
                    }
                    Update::ToolResult {
                        tool_use_id,
                        tool_name: Some(tool),
                        parent_tool_use_id: None,
                        is_error: false,
                        ..
                    } if self.writes_files.load(Ordering::Relaxed)
                        && matches!(tool.as_str(), "Edit" | "MultiEdit" | "Write") =>
                    {
                        self.write_through(editor, session, tool_use_id);
                    }
                    _ => {}
                }
            }
        }
    }

    /// Puts `pending` to the editor, and answers it in the daemon with the editor's choice,
    /// unless someone answers first elsewhere: then the editor's request is withdrawn and the
    /// editor told who answered.
    fn ask_editor(
        self: &Arc<Self>,
        editor: &ConnectionTo<Editor>,
        session: &Arc<Session>,
        pending: PendingPermission,
    ) {
        let (told, elsewhere) = oneshot::channel();
        session.asked.lock().insert(pending.request_id.clone(), told);
        let (state, editor, session) = (self.clone(), editor.clone(), session.clone());
        tokio::spawn(async move {
            let call_id = pending.tool_use_id.clone().unwrap_or_else(|| pending.request_id.clone());
            let fields = ToolCallUpdateFields::new()
                .title(updates::title_of(&pending.tool_name, &pending.input))
                .kind(updates::kind_of(&pending.tool_name))
                .raw_input(pending.input.clone());
            let mut options = vec![
                PermissionOption::new("allow", "Allow", PermissionOptionKind::AllowOnce),
                PermissionOption::new("deny", "Deny", PermissionOptionKind::RejectOnce),
            ];
            if !pending.always_allows.is_empty() {
                let always = format!("Always allow {}", pending.always_allows);
                options.insert(
                    1,
                    PermissionOption::new("always", always, PermissionOptionKind::AllowAlways),
                );
            }
            let request = RequestPermissionRequest::new(
                session.id.clone(),
                ToolCallUpdate::new(call_id.clone(), fields),
                options,
            );
            let asked = editor.send_request(request).block_task();
            let outcome = tokio::select! {
                answered = asked => answered,
                said = elsewhere => {
                    // Dropping the editor's request withdraws it ($/cancel_request).
                    if let Ok(said) = said {
                        let note = ToolCallUpdate::new(
                            call_id,
                            ToolCallUpdateFields::new().content(vec![ToolCallContent::from(
                                ContentBlock::from(format!("{said}, elsewhere: the question here is withdrawn")),
                            )]),
                        );
                        let _ = editor.send_notification(SessionNotification::new(
                            session.id.clone(),
                            SessionUpdate::ToolCallUpdate(note),
                        ));
                    }
                    return;
                }
            };
            session.asked.lock().remove(&pending.request_id);
            let body = match outcome.map(|response| response.outcome) {
                Ok(RequestPermissionOutcome::Selected(selected)) => {
                    match &*selected.option_id.to_string() {
                        "allow" => json!({"behavior": "allow", "by": "editor"}),
                        "always" => json!({"behavior": "allow", "remember": true, "by": "editor"}),
                        _ => {
                            json!({"behavior": "deny", "by": "editor", "message": "The person in the editor refused this."})
                        }
                    }
                }
                // The turn was cancelled: its interrupt ends the request.
                Ok(_) => return,
                Err(error) => {
                    tracing::warn!("the editor did not answer a permission request: {error:?}");
                    return;
                }
            };
            let path = format!("/api/sessions/{}/permissions/{}", session.id, pending.request_id);
            if let Err(error) = state.client.request(reqwest::Method::POST, &path, Some(body)).await
            {
                // Answered elsewhere a moment before (the first answer stands), or refused (a
                // token's ceiling): the editor is told, and the request waits for a person.
                tracing::info!("the editor's answer was not taken: {error}");
                let note = ToolCallUpdate::new(
                    call_id,
                    ToolCallUpdateFields::new().content(vec![ToolCallContent::from(
                        ContentBlock::from(format!("Your answer was not taken: {error}")),
                    )]),
                );
                let _ = editor.send_notification(SessionNotification::new(
                    session.id.clone(),
                    SessionUpdate::ToolCallUpdate(note),
                ));
            }
        });
    }

    /// Writes the file an edit changed through the editor, so its buffer has the change: the
    /// file as the daemon reads it (the Files view, wherever the daemon runs), whole text only.
    fn write_through(
        self: &Arc<Self>,
        editor: &ConnectionTo<Editor>,
        session: &Arc<Session>,
        tool_use_id: &str,
    ) {
        let Some(path) = session.translator.lock().take_path(tool_use_id) else { return };
        let Ok(relative) = path.strip_prefix(&session.cwd) else { return };
        let relative = relative.display().to_string();
        let (state, editor, session) = (self.clone(), editor.clone(), session.clone());
        tokio::spawn(async move {
            let query = crate::client::query_escape(&relative);
            let file = format!("/api/sessions/{}/file?path={query}", session.id);
            let view = match state.client.request(reqwest::Method::GET, &file, None).await {
                Ok(view) => view,
                Err(error) => {
                    tracing::info!("the edit of {relative} is not written through: {error}");
                    return;
                }
            };
            let (Some(text), false) = (view["text"].as_str(), view["truncated"] == true) else {
                return;
            };
            let request = WriteTextFileRequest::new(session.id.clone(), path.clone(), text);
            if let Err(error) = editor.send_request(request).block_task().await {
                tracing::info!("the editor did not take the edit of {}: {error:?}", path.display());
            }
        });
    }

    async fn prompt(&self, request: &PromptRequest) -> Result<StopReason, String> {
        let id = request.session_id.to_string();
        let session = self.session(&id)?;
        let text = prompt_text(&request.prompt);
        if text.trim().is_empty() {
            return Err("the prompt has no text".to_owned());
        }
        let uuid = uuid::Uuid::new_v4().to_string();
        let (done, ended) = oneshot::channel();
        session.waiting.lock().insert(uuid.clone(), done);
        if session.closed.load(Ordering::SeqCst) {
            session.waiting.lock().remove(&uuid);
            return Err(format!("session {id}'s feed ended; session/load it again"));
        }
        session.translator.lock().sent(&uuid);
        let body = json!({"content": text, "uuid": uuid});
        let path = format!("/api/sessions/{id}/messages");
        if let Err(error) = self.client.request(reqwest::Method::POST, &path, Some(body)).await {
            session.waiting.lock().remove(&uuid);
            return Err(error);
        }
        ended.await.map_err(|_| format!("session {id}'s feed ended before its turn did"))?
    }

    async fn set_mode(&self, request: &SetSessionModeRequest) -> Result<(), String> {
        let path = format!("/api/sessions/{}/permission-mode", request.session_id);
        let body = json!({"mode": request.mode_id.to_string()});
        self.client.request(reqwest::Method::POST, &path, Some(body)).await.map(drop)
    }

    /// Cancels the editor's prompts: the one whose turn runs is interrupted, those queued are
    /// taken out of the queue; each answers `cancelled`. Another face's turn runs on.
    async fn cancel(&self, id: &str) -> Result<(), String> {
        let session = self.session(id)?;
        let mine: Vec<String> = session.waiting.lock().keys().cloned().collect();
        let running = session.turns.lock().running.clone();
        for uuid in mine {
            session.turns.lock().cancelled.insert(uuid.clone());
            if running.as_ref() == Some(&uuid) {
                let path = format!("/api/sessions/{id}/interrupt");
                self.client.request(reqwest::Method::POST, &path, Some(json!({}))).await?;
            } else {
                let path = format!("/api/sessions/{id}/queue/{uuid}");
                let dropped = self.client.request(reqwest::Method::DELETE, &path, None).await;
                if !matches!(&dropped, Ok(answer) if answer["cancelled"] == true) {
                    // Taken into a turn meanwhile (or never queued): that turn is interrupted.
                    tracing::info!("a queued prompt was not dropped ({dropped:?}); interrupting");
                    let path = format!("/api/sessions/{id}/interrupt");
                    self.client.request(reqwest::Method::POST, &path, Some(json!({}))).await?;
                }
            }
        }
        Ok(())
    }
}

/// Why a turn ended, in ACP's words.
fn stop_reason(subtype: &str, interrupted: bool) -> StopReason {
    if interrupted {
        return StopReason::Cancelled;
    }
    match subtype {
        "error_max_turns" => StopReason::MaxTurnRequests,
        "refusal" => StopReason::Refusal,
        _ => StopReason::EndTurn,
    }
}

/// A prompt's text: its text blocks, and each linked or embedded resource named (`@path`).
fn prompt_text(blocks: &[ContentBlock]) -> String {
    blocks
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text(text) => Some(text.text.clone()),
            ContentBlock::ResourceLink(link) => {
                Some(format!("@{}", link.uri.trim_start_matches("file://")))
            }
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// The editor's MCP servers as an `--mcp-config` document, if it gave any.
fn mcp_config(servers: &[agent_client_protocol::v1::schema::McpServer]) -> Option<Value> {
    use agent_client_protocol::v1::schema::McpServer;
    let mut config = serde_json::Map::new();
    for server in servers {
        let (name, entry) = match server {
            McpServer::Stdio(stdio) => (
                stdio.name.clone(),
                json!({
                    "command": stdio.command,
                    "args": stdio.args,
                    "env": stdio.env.iter().map(|v| (v.name.clone(), Value::from(v.value.clone()))).collect::<serde_json::Map<_, _>>(),
                }),
            ),
            McpServer::Http(http) => (
                http.name.clone(),
                json!({
                    "type": "http",
                    "url": http.url,
                    "headers": http.headers.iter().map(|h| (h.name.clone(), Value::from(h.value.clone()))).collect::<serde_json::Map<_, _>>(),
                }),
            ),
            McpServer::Sse(sse) => (
                sse.name.clone(),
                json!({
                    "type": "sse",
                    "url": sse.url,
                    "headers": sse.headers.iter().map(|h| (h.name.clone(), Value::from(h.value.clone()))).collect::<serde_json::Map<_, _>>(),
                }),
            ),
            _ => continue,
        };
        config.insert(name, entry);
    }
    (!config.is_empty()).then(|| json!({ "mcpServers": config }))
}

/// Who decided, in words.
fn decided_by(by: &DecidedBy) -> String {
    match by {
        DecidedBy::Person { who } => who.clone(),
        DecidedBy::Policy { rule: Some(rule) } => format!("policy rule {rule}"),
        DecidedBy::Policy { rule: None } => "the policy's default".to_owned(),
        DecidedBy::Terminal => "the terminal".to_owned(),
        DecidedBy::Cli => "Claude Code's own settings".to_owned(),
        DecidedBy::Timeout => "nobody in time".to_owned(),
        _ => "Claude Code".to_owned(),
    }
}
