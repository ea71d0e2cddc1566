//! The MCP tools: each one of the daemon's operations, its input described for a model, its
//! scope checked against the caller's token, its refusal the API's.

use std::sync::Arc;
use std::time::Duration;

use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ProgressNotificationParam};
use rmcp::service::RequestContext;
use rmcp::{tool, tool_router, ErrorData as McpError, RoleServer};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use switchboard_session::{AnswerBehavior, PermissionAnswer};
use switchboard_store::{Face, RecordState, SessionRecord};

use super::digest::{Digest, Turn};
use super::{answer, refused, Call, Switchboard};
use crate::daemon::{CreateSession, Daemon, DaemonError, Subscribed};
use crate::error::ApiError;
use crate::tokens::Scope;

/// The most sessions `list_sessions` returns.
pub const MAX_LISTED: usize = 500;

/// The longest `wait_for_session` waits.
pub const MAX_WAIT_SECS: u64 = 3600;

/// How long `wait_for_session` waits when not told.
pub const DEFAULT_WAIT_SECS: u64 = 600;

/// How long a progress notification may take to be taken by the client's stream.
const PROGRESS_SEND: Duration = Duration::from_secs(5);

/// The shortest prefix that names a session.
pub const MIN_PREFIX: usize = 8;

/// A session, in a line of a list.
#[derive(Debug, Serialize)]
pub struct Listed {
    /// Its id.
    pub id: String,
    /// Its title.
    pub title: Option<String>,
    /// Its state.
    pub state: String,
    /// Its directory.
    pub cwd: String,
    /// Its model.
    pub model: Option<String>,
    /// Who started it, through which face (`mcp` by token `reviewer`).
    pub origin: Option<switchboard_store::Origin>,
    /// What it spent, US dollars.
    pub spent_usd: f64,
    /// Its last change (Unix milliseconds).
    pub updated_ms: u64,
}

/// The sessions, newest first, those whose id, title or directory holds `query` and in
/// `state`, at most `limit`.
pub(crate) async fn listed(
    daemon: &Daemon,
    query: Option<&str>,
    state: Option<&str>,
    limit: usize,
) -> Result<Vec<Listed>, ApiError> {
    let query = query.map(str::to_lowercase);
    let mut records: Vec<SessionRecord> = daemon
        .store()
        .list_sessions()
        .await
        .map_err(DaemonError::from)?
        .into_iter()
        .map(|stored| daemon.live_record(&stored.id).unwrap_or(stored))
        .filter(|record| state.is_none_or(|state| record.state.as_str() == state))
        .filter(|record| {
            query.as_deref().is_none_or(|query| {
                record.id.starts_with(query)
                    || record.cwd.to_lowercase().contains(query)
                    || record.title.as_deref().is_some_and(|t| t.to_lowercase().contains(query))
            })
        })
        .collect();
    records.sort_by_key(|record| std::cmp::Reverse(record.updated_ms));
    records.truncate(limit);
    Ok(records
        .into_iter()
        .map(|record| Listed {
            state: record.state.as_str().to_owned(),
            origin: record.launch.origin.clone().map(|mut origin| {
                // Shown as started under a ceiling; its text is the token's business.
                origin.ceiling = origin.ceiling.map(|_| "(set)".to_owned());
                origin
            }),
            id: record.id,
            title: record.title,
            cwd: record.cwd,
            model: record.model,
            spent_usd: record.spent_usd,
            updated_ms: record.updated_ms,
        })
        .collect())
}

/// The session `named` (its id, or a unique prefix of at least [`MIN_PREFIX`] characters).
pub(crate) async fn resolve(daemon: &Daemon, named: &str) -> Result<SessionRecord, ApiError> {
    if let Some(record) = daemon.record(named).await? {
        return Ok(record);
    }
    if named.len() < MIN_PREFIX {
        return Err(ApiError::not_found(format!(
            "no session {named} (give its id, or at least {MIN_PREFIX} of its first characters)"
        )));
    }
    let sessions = daemon.store().list_sessions().await.map_err(DaemonError::from)?;
    let mut matching = sessions.into_iter().filter(|record| record.id.starts_with(named));
    match (matching.next(), matching.next()) {
        (Some(one), None) => Ok(daemon.live_record(&one.id).unwrap_or(one)),
        (None, _) => Err(ApiError::not_found(format!("no session {named}"))),
        (Some(_), Some(_)) => Err(ApiError::invalid(format!(
            "{named} is the start of several sessions' ids; give more of it"
        ))),
    }
}

/// The conversation of session `id` so far.
async fn digest_of(daemon: &Daemon, id: &str) -> Result<Digest, ApiError> {
    let mut digest = Digest::default();
    crate::faces::replay(daemon, id, u64::MAX, &mut |_, update| digest.apply(&update)).await?;
    Ok(digest)
}

/// What `switchboard://sessions/{id}` holds: the session as [`get_session`] shows it, and its
/// last turns.
pub(crate) async fn session_resource(daemon: &Daemon, id: &str) -> Result<Value, ApiError> {
    let record = resolve(daemon, id).await?;
    let id = record.id.clone();
    let view = crate::faces::view(daemon, record).await;
    let digest = digest_of(daemon, &id).await?;
    Ok(json!({"session": view, "turns": digest.last(5)}))
}

/// `list_sessions`' input.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListSessions {
    /// Only sessions whose id starts with, or whose title or directory contains, this text.
    #[serde(default)]
    pub query: Option<String>,
    /// Only sessions in this state: starting, idle, working, awaiting_permission, compacting,
    /// paused, parked, exited or crashed.
    #[serde(default)]
    pub state: Option<String>,
    /// At most this many, newest first (default 50, at most 500).
    #[serde(default)]
    pub limit: Option<usize>,
}

/// A session named by id.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionRef {
    /// The session's id (or the first 8 or more characters of it).
    pub session: String,
}

/// `read_session`'s input.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadSession {
    /// The session's id (or the first 8 or more characters of it).
    pub session: String,
    /// How many of the last turns to show (default 5, at most 50).
    #[serde(default)]
    pub turns: Option<usize>,
}

/// A file or folder of a session's directory.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionPath {
    /// The session's id (or the first 8 or more characters of it).
    pub session: String,
    /// The path, relative to the session's directory (default: the directory itself).
    #[serde(default)]
    pub path: Option<String>,
}

/// `start_session`'s input.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StartSession {
    /// The directory to work in: an absolute path on the daemon's machine.
    pub cwd: String,
    /// The first prompt: what the session should do.
    #[serde(default)]
    pub prompt: Option<String>,
    /// The model (`sonnet`, `opus`, a full model name); default: the CLI's.
    #[serde(default)]
    pub model: Option<String>,
    /// The permission mode: default, plan, acceptEdits, dontAsk (bypassPermissions is never
    /// allowed to a token with a ceiling).
    #[serde(default)]
    pub permission_mode: Option<String>,
    /// A policy, as TOML text (`[permissions]` with allow, deny, ask rules in Claude Code's
    /// syntax); needs a token with a ceiling, which bounds it, or the admin scope.
    #[serde(default)]
    pub policy: Option<String>,
    /// Work in a git worktree of its own, on a new branch.
    #[serde(default)]
    pub worktree: bool,
    /// What the session may spend, in US dollars; reached, it pauses.
    #[serde(default)]
    pub max_budget_usd: Option<f64>,
}

/// `send_message`'s input.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SendMessage {
    /// The session's id (or the first 8 or more characters of it).
    pub session: String,
    /// The message.
    pub text: String,
    /// Steer: deliver it into the turn under way, at the next chance, instead of after it
    /// (needs a CLI that supports it).
    #[serde(default)]
    pub steer: bool,
}

/// `wait_for_session`'s input.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WaitForSession {
    /// The session's id (or the first 8 or more characters of it).
    pub session: String,
    /// The longest to wait, in seconds (default 600, at most 3600).
    #[serde(default)]
    pub timeout_secs: Option<u64>,
    /// Wait for this message's answer: the `uuid` send_message gave (default: until every
    /// prompt the session has seen has its answer).
    #[serde(default)]
    pub message: Option<String>,
}

/// A file of a session's directory.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionFile {
    /// The session's id (or the first 8 or more characters of it).
    pub session: String,
    /// The file's path, relative to the session's directory.
    pub path: String,
}

/// `list_permissions`' input.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListPermissions {
    /// Only this session's (default: every session's).
    #[serde(default)]
    pub session: Option<String>,
}

/// An answer: run the call, or refuse it.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Behavior {
    /// Run it.
    Allow,
    /// Refuse it.
    Deny,
}

/// `answer_permission`'s input.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AnswerPermission {
    /// The session's id (or the first 8 or more characters of it).
    pub session: String,
    /// The request's `request_id`, as list_permissions gives it.
    pub request_id: String,
    /// `allow` or `deny`.
    pub behavior: Behavior,
    /// On deny, what the session's model is told (why, what to do instead).
    #[serde(default)]
    pub message: Option<String>,
}

#[tool_router(vis = "pub(crate)")]
impl Switchboard {
    #[tool(
        description = "List Claude Code sessions, newest first: id, title, state, directory, model, who started them and what they spent. Filter by text or state.",
        annotations(read_only_hint = true)
    )]
    async fn list_sessions(
        &self,
        Parameters(input): Parameters<ListSessions>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let call = Call::of(&ctx)?;
        call.answer(Scope::Read, async {
            let limit = input.limit.unwrap_or(50).clamp(1, MAX_LISTED);
            let (query, state) = (input.query.as_deref(), input.state.as_deref());
            let sessions = listed(&call.daemon, query, state, limit).await?;
            Ok(json!({ "sessions": sessions }))
        })
        .await
    }

    #[tool(
        description = "A session's record: state, directory, model, permission mode, cost, origin, whether its CLI runs, and the permission requests waiting in it.",
        annotations(read_only_hint = true)
    )]
    async fn get_session(
        &self,
        Parameters(input): Parameters<SessionRef>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let call = Call::of(&ctx)?;
        call.answer(Scope::Read, async {
            let record = resolve(&call.daemon, &input.session).await?;
            Ok(crate::faces::view(&call.daemon, record).await)
        })
        .await
    }

    #[tool(
        description = "What a session did: its last turns, each with the prompt, the tool calls it made (one line each) and its final answer.",
        annotations(read_only_hint = true)
    )]
    async fn read_session(
        &self,
        Parameters(input): Parameters<ReadSession>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let call = Call::of(&ctx)?;
        call.answer(Scope::Read, async {
            let record = resolve(&call.daemon, &input.session).await?;
            let digest = digest_of(&call.daemon, &record.id).await?;
            let count = input.turns.unwrap_or(5).clamp(1, super::digest::MAX_TURNS);
            Ok(json!({
                "session": record.id,
                "state": record.state.as_str(),
                "turns": digest.last(count),
            }))
        })
        .await
    }

    #[tool(
        description = "The changes in a session's directory (its git diff against where it started), file by file.",
        annotations(read_only_hint = true)
    )]
    async fn session_diff(
        &self,
        Parameters(input): Parameters<SessionRef>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let call = Call::of(&ctx)?;
        call.answer(Scope::Read, async {
            let record = resolve(&call.daemon, &input.session).await?;
            let files = call.caller.scope >= Scope::Operate;
            Ok(call.daemon.diff(&record.id, files).await?)
        })
        .await
    }

    #[tool(
        description = "List a folder of a session's directory (names, kinds, sizes). Needs the operate scope.",
        annotations(read_only_hint = true)
    )]
    async fn list_files(
        &self,
        Parameters(input): Parameters<SessionPath>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let call = Call::of(&ctx)?;
        call.answer(Scope::Operate, async {
            let record = call.operated(&input.session).await?;
            let path = input.path.unwrap_or_default();
            let found = call.daemon.browse(&record.id, move |root, touched, refuse| {
                crate::browse::list(root, &path, touched, refuse)
            });
            found.await?.map_err(crate::faces::browse_error)
        })
        .await
    }

    #[tool(
        description = "Read a file of a session's directory (text, bounded in size). Needs the operate scope.",
        annotations(read_only_hint = true)
    )]
    async fn read_file(
        &self,
        Parameters(input): Parameters<SessionFile>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let call = Call::of(&ctx)?;
        call.answer(Scope::Operate, async {
            let record = call.operated(&input.session).await?;
            let path = input.path;
            let found = call.daemon.browse(&record.id, move |root, touched, refuse| {
                crate::browse::read(root, &path, touched, refuse)
            });
            found.await?.map_err(crate::faces::browse_error)
        })
        .await
    }

    #[tool(
        description = "Start a Claude Code session in a directory, with a first prompt. Returns its id at once; then call wait_for_session to wait for its answer. The session runs under the daemon's permission policy (and your token's ceiling, if it has one). Needs the operate scope."
    )]
    async fn start_session(
        &self,
        Parameters(input): Parameters<StartSession>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let call = Call::of(&ctx)?;
        // Boxed: a create is a large future.
        call.answer(
            Scope::Operate,
            Box::pin(async {
                let mut request = CreateSession::new(input.cwd);
                request.prompt = input.prompt;
                request.launch.model = input.model;
                request.launch.permission_mode = input.permission_mode;
                request.launch.policy = input.policy;
                request.launch.max_budget_usd = input.max_budget_usd;
                request.worktree = input.worktree;
                crate::tokens::check_create(&call.caller, &request)?;
                request.started_by = Some(call.caller.sender("mcp", None));
                request.origin = Some(call.caller.origin(Face::Mcp));
                let record = call.daemon.create(request).await?;
                Ok(json!({"session": record.id, "state": record.state.as_str(), "cwd": record.cwd}))
            }),
        )
        .await
    }

    #[tool(
        description = "Send a message to a session: it runs after the turn under way, or, with steer, within it. Returns its uuid: give it to wait_for_session as message to wait for this message's answer. Needs the operate scope."
    )]
    async fn send_message(
        &self,
        Parameters(input): Parameters<SendMessage>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let call = Call::of(&ctx)?;
        call.answer(Scope::Operate, async {
            let record = call.operated(&input.session).await?;
            let priority = input.steer.then_some(switchboard_protocol::MessagePriority::Now);
            let message = crate::faces::user_message(Value::String(input.text))?;
            let mut message =
                crate::prompt::with_priority(message, priority).map_err(ApiError::invalid)?;
            let uuid = uuid::Uuid::new_v4().to_string();
            message.uuid = Some(uuid.clone());
            call.daemon.send_message(&record.id, message, call.caller.sender("mcp", None)).await?;
            Ok(json!({"session": record.id, "queued": true, "uuid": uuid}))
        })
        .await
    }

    #[tool(
        description = "Interrupt the turn a session is running (it stays open for another message). Needs the operate scope."
    )]
    async fn interrupt(
        &self,
        Parameters(input): Parameters<SessionRef>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let call = Call::of(&ctx)?;
        call.answer(Scope::Operate, async {
            let record = call.operated(&input.session).await?;
            call.daemon.interrupt(&record.id, false).await?;
            Ok(json!({"session": record.id, "interrupted": true}))
        })
        .await
    }

    #[tool(
        description = "Stop a session: its CLI ends (it can be resumed later). Needs the operate scope."
    )]
    async fn stop_session(
        &self,
        Parameters(input): Parameters<SessionRef>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let call = Call::of(&ctx)?;
        call.answer(Scope::Operate, async {
            let record = call.operated(&input.session).await?;
            call.daemon.stop(&record.id, false).await?;
            Ok(json!({"session": record.id, "stopped": true}))
        })
        .await
    }

    #[tool(
        description = "Wait until a session's last prompt has its answer, a permission request waits in it, or it ends; returns its state, its last answer and what waits. Reports progress while it waits. If the time runs out first, it says so: call it again.",
        annotations(read_only_hint = true)
    )]
    async fn wait_for_session(
        &self,
        Parameters(input): Parameters<WaitForSession>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let call = Call::of(&ctx)?;
        if let Err(refusal) = call.require(Scope::Read) {
            return Ok(refused(refusal));
        }
        let secs = input.timeout_secs.unwrap_or(DEFAULT_WAIT_SECS).clamp(1, MAX_WAIT_SECS);
        let record = match resolve(&call.daemon, &input.session).await {
            Ok(record) => record,
            Err(error) => return Ok(refused(error)),
        };
        let waited = tokio::select! {
            waited = wait(&call.daemon, &record.id, input.message.clone(), &ctx) => waited,
            () = tokio::time::sleep(Duration::from_secs(secs)) => Ok(Waited::TimedOut),
            () = ctx.ct.cancelled() => return Err(McpError::internal_error("cancelled", None)),
        };
        let waited = match waited {
            Ok(waited) => waited,
            Err(error) => return Ok(refused(error)),
        };
        let settled = async {
            let record = call
                .daemon
                .record(&record.id)
                .await?
                .ok_or_else(|| ApiError::not_found(format!("no session {}", record.id)))?;
            let waiting = call.daemon.waiting(&record).await;
            let digest = digest_of(&call.daemon, &record.id).await?;
            let last: Option<Turn> = digest.last(1).pop();
            Ok::<_, ApiError>(json!({
                "session": record.id,
                "done": !matches!(waited, Waited::TimedOut),
                "why": waited.as_str(),
                "state": record.state.as_str(),
                "answer": digest.last_result(),
                "last_turn": last,
                "pending_permissions": waiting,
                "spent_usd": record.spent_usd,
            }))
        };
        Ok(settled.await.map_or_else(refused, answer))
    }

    #[tool(
        description = "The permission requests waiting for an answer: in one session, or in every session. Each has its session, request_id, tool, input, and why it is asked.",
        annotations(read_only_hint = true)
    )]
    async fn list_permissions(
        &self,
        Parameters(input): Parameters<ListPermissions>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let call = Call::of(&ctx)?;
        call.answer(Scope::Read, async {
            let records = match &input.session {
                Some(named) => vec![resolve(&call.daemon, named).await?],
                None => call.daemon.store().list_sessions().await.map_err(DaemonError::from)?,
            };
            let mut waiting = Vec::new();
            for record in records.into_iter().filter(|record| !record.state.is_final()) {
                for pending in call.daemon.waiting(&record).await {
                    waiting.push(json!({"session": record.id, "request": pending}));
                }
            }
            Ok(json!({ "permissions": waiting }))
        })
        .await
    }

    #[tool(
        description = "Answer a waiting permission request: allow runs the call, deny refuses it (with a message the session's model reads). A token with a ceiling may allow only what its ceiling allows; a person answers the rest. Needs the approve scope."
    )]
    async fn answer_permission(
        &self,
        Parameters(input): Parameters<AnswerPermission>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let call = Call::of(&ctx)?;
        // Boxed: an answer (a parked one resumes its session) is a large future.
        call.answer(
            Scope::Approve,
            Box::pin(async {
                let record = resolve(&call.daemon, &input.session).await?;
                let behavior = match input.behavior {
                    Behavior::Allow => AnswerBehavior::Allow,
                    Behavior::Deny => AnswerBehavior::Deny,
                };
                let answer = PermissionAnswer {
                    behavior,
                    message: input.message,
                    ..PermissionAnswer::default()
                };
                let (id, request_id) = (&record.id, &input.request_id);
                crate::faces::check_answer_to(&call.daemon, &call.caller, id, request_id, &answer)
                    .await?;
                let who = call.caller.who("mcp", None);
                call.daemon.respond_permission(id, request_id, answer, &who).await?;
                Ok(json!({"session": id, "request_id": request_id, "behavior": input.behavior}))
            }),
        )
        .await
    }

    #[tool(
        description = "What has been spent: today's spending and budgets (per token and in all), and the Claude usage windows as the sessions last reported them.",
        annotations(read_only_hint = true)
    )]
    async fn usage(&self, ctx: RequestContext<RoleServer>) -> Result<CallToolResult, McpError> {
        let call = Call::of(&ctx)?;
        call.answer(Scope::Read, async {
            Ok(json!({"budget": call.daemon.budget(), "usage": call.daemon.usage()}))
        })
        .await
    }
}

/// Why a wait ended.
enum Waited {
    /// The last prompt has its answer, and nothing runs.
    Answered,
    /// A permission request waits.
    Asking,
    /// The session ended (or is parked, or paused at its budget).
    Stopped,
    /// The time ran out.
    TimedOut,
}

impl Waited {
    fn as_str(&self) -> &'static str {
        match self {
            Waited::Answered => "answered",
            Waited::Asking => "permission_requested",
            Waited::Stopped => "stopped",
            Waited::TimedOut => "timed_out",
        }
    }
}

/// Follows session `id`'s log until it settles ([`Waited`]), telling the client's progress
/// token of each call and change of state on the way.
async fn wait(
    daemon: &Arc<Daemon>,
    id: &str,
    awaited: Option<String>,
    ctx: &RequestContext<RoleServer>,
) -> Result<Waited, ApiError> {
    let end = daemon.store().last_seq(id).await.map_err(DaemonError::from)?;
    let mut subscription = daemon.subscribe(id, 0);
    let mut viewer = crate::view::Viewer::new();
    let mut digest = Digest::awaiting(awaited);
    let mut progress = ctx.meta.get_progress_token();
    let mut told = (0u64, 0usize);
    let mut seen = 0u64;
    loop {
        if seen >= end {
            if let Some(waited) = settled(daemon, id, &digest).await? {
                return Ok(waited);
            }
        }
        let Some(next) = subscription.next().await else {
            // The log ends: the session ended.
            return Ok(Waited::Stopped);
        };
        let Subscribed::Event(record) = next? else { continue };
        seen = record.seq;
        viewer.apply(&record, &mut |update| digest.apply(&update));
        let calls = digest.last(1).first().map_or(0, |turn| turn.call_count);
        if let Some(token) = progress.clone().filter(|_| (record.seq, calls) != told && seen >= end)
        {
            told = (record.seq, calls);
            let state = digest.state.map_or("starting", |state| state.as_str());
            let message = format!("{state}, {calls} tool calls this turn");
            let note =
                ProgressNotificationParam::new(token, record.seq as f64).with_message(message);
            // A client that takes no more (its stream full or gone) is told no more: the wait
            // goes on, and ends by its time or the client's cancel.
            let sent = tokio::time::timeout(PROGRESS_SEND, ctx.peer.notify_progress(note)).await;
            if !matches!(sent, Ok(Ok(()))) {
                progress = None;
            }
        }
    }
}

/// Whether session `id` has settled, as its record and what waits in it say now.
async fn settled(daemon: &Daemon, id: &str, digest: &Digest) -> Result<Option<Waited>, ApiError> {
    let Some(record) = daemon.record(id).await? else {
        return Err(ApiError::not_found(format!("no session {id}")));
    };
    if record.state.is_final() || matches!(record.state, RecordState::Parked | RecordState::Paused)
    {
        return Ok(Some(Waited::Stopped));
    }
    if !daemon.waiting(&record).await.is_empty() {
        return Ok(Some(Waited::Asking));
    }
    Ok(digest.settled().then_some(Waited::Answered))
}
