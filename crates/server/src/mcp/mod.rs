//! The MCP face: the daemon as tools and resources for agents, at `/mcp` on the daemon's own
//! port (MCP's Streamable HTTP transport, built on the official Rust SDK, `rmcp`).
//!
//! - **Who calls.** `/mcp` sits behind the API's token check like every route; each tool then
//!   asks its own scope of the caller's token ([`tools`]: `read` sees, `approve` answers,
//!   `operate` starts and steers). What a tool does is recorded as the token's
//!   (`token NAME (mcp)`), and a session an agent starts keeps its origin (`mcp`, the token,
//!   its ceiling) in its record, which every face shows.
//! - **One meaning.** A tool calls the same daemon methods as the REST API and reads the same
//!   record and projection ([`digest`] folds the projection's updates into a conversation);
//!   its refusals are the API's, with the API's codes.
//! - **Bounds.** The transport refuses a body over [`crate::faces::MAX_BODY_BYTES`]; an MCP
//!   session idle for [`IDLE`] is closed, and a daemon keeps at most [`MAX_SESSIONS`] (past it
//!   an `initialize` is refused, with why); a wait lasts at most [`tools::MAX_WAIT_SECS`] and
//!   ends when the client cancels it.
//!
//! docs/mcp.md documents every tool, with the ceiling's rules.

pub mod digest;
mod limits;
pub mod tools;

use std::sync::Arc;
use std::time::Duration;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::model::{
    CallToolResult, ContentBlock, Implementation, ListResourceTemplatesResult, ListResourcesResult,
    PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResult, Resource,
    ResourceContents, ResourceTemplate, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};

use crate::daemon::Daemon;
use crate::error::ApiError;
use crate::tokens::{Caller, Scope};

/// An MCP session idle this long is closed (its client starts another).
pub const IDLE: Duration = Duration::from_secs(10 * 60);

/// The most MCP sessions a daemon keeps open at once.
pub const MAX_SESSIONS: usize = 256;

/// The MCP server one client session talks to.
#[derive(Clone)]
pub struct Switchboard {
    tools: ToolRouter<Switchboard>,
}

impl std::fmt::Debug for Switchboard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Switchboard").finish_non_exhaustive()
    }
}

impl Default for Switchboard {
    fn default() -> Self {
        Switchboard { tools: Switchboard::tool_router() }
    }
}

/// `/mcp`'s service: one per router, its MCP sessions in memory.
pub type Service = StreamableHttpService<Switchboard, limits::Bounded>;

/// The service `/mcp` routes to.
pub fn service() -> Service {
    let mut sessions = LocalSessionManager::default();
    sessions.session_config.keep_alive = Some(IDLE);
    let config = StreamableHttpServerConfig::default()
        // The API's own check has read the token, and under `--no-auth` the Host.
        .disable_allowed_hosts()
        .with_max_request_body_bytes(crate::faces::MAX_BODY_BYTES);
    StreamableHttpService::new(
        || Ok(Switchboard::default()),
        Arc::new(limits::Bounded::new(sessions, MAX_SESSIONS)),
        config,
    )
}

/// What a tool needs of its request: the daemon and who calls.
pub(crate) struct Call {
    pub(crate) daemon: Arc<Daemon>,
    pub(crate) caller: Caller,
}

impl Call {
    /// The daemon and the caller of the HTTP request that carried `ctx`'s message.
    pub(crate) fn of(ctx: &RequestContext<RoleServer>) -> Result<Call, McpError> {
        let parts = ctx.extensions.get::<axum::http::request::Parts>().ok_or_else(|| {
            McpError::internal_error("this message came by no HTTP request", None)
        })?;
        let caller = parts.extensions.get::<Caller>().cloned();
        let daemon = parts.extensions.get::<Arc<Daemon>>().cloned();
        match (caller, daemon) {
            (Some(caller), Some(daemon)) => Ok(Call { daemon, caller }),
            _ => Err(McpError::internal_error("the request was not checked by the API", None)),
        }
    }

    /// Refused unless the caller's token has `scope`.
    pub(crate) fn require(&self, scope: Scope) -> Result<(), ApiError> {
        self.caller.require(scope).map_err(ApiError::from)
    }

    /// A tool's result: `work`'s answer, or its refusal, once the caller is found to have
    /// `scope` (else that refusal, and `work` never runs).
    pub(crate) async fn answer<T: serde::Serialize>(
        &self,
        scope: Scope,
        work: impl std::future::Future<Output = Result<T, ApiError>>,
    ) -> Result<CallToolResult, McpError> {
        if let Err(refusal) = self.require(scope) {
            return Ok(refused(refusal));
        }
        Ok(work.await.map_or_else(refused, answer))
    }

    /// The session `named` (its id or a unique prefix), which the caller may operate
    /// ([`crate::faces::check_within`]).
    pub(crate) async fn operated(
        &self,
        named: &str,
    ) -> Result<switchboard_store::SessionRecord, ApiError> {
        let record = tools::resolve(&self.daemon, named).await?;
        crate::faces::check_within(&self.daemon, &self.caller, &record.id).await?;
        Ok(record)
    }
}

/// A refusal as a tool's result: its API code, then the sentence.
pub(crate) fn refused(error: impl Into<ApiError>) -> CallToolResult {
    let error: ApiError = error.into();
    CallToolResult::error(vec![ContentBlock::text(format!("{}: {}", error.code, error.message))])
}

/// A tool's answer: JSON, as structured content and as text.
pub(crate) fn answer(value: impl serde::Serialize) -> CallToolResult {
    match serde_json::to_value(value) {
        Ok(value) => CallToolResult::structured(value),
        Err(error) => refused(ApiError::internal(error.to_string())),
    }
}

const INSTRUCTIONS: &str = "Switchboard runs Claude Code sessions. Start one with start_session \
(a directory and a prompt), then wait_for_session until its turn ends, and read_session for \
what it did and answered. Permission requests the session's policy sends to a person are listed \
by list_permissions; answer_permission answers one when your token may. Session ids may be given \
as any unique prefix of 8 or more characters.";

/// A session's view as a resource: `switchboard://sessions/{id}`.
const RESOURCE_PREFIX: &str = "switchboard://sessions/";

#[rmcp::tool_handler(router = self.tools)]
impl ServerHandler for Switchboard {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().enable_resources().build())
            .with_server_info(Implementation::new("switchboard", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let call = Call::of(&context)?;
        let sessions = tools::listed(&call.daemon, None, None, tools::MAX_LISTED)
            .await
            .map_err(|error| McpError::internal_error(error.message, None))?;
        let resources = sessions
            .into_iter()
            .map(|session| {
                let name = session.title.clone().unwrap_or_else(|| session.id.clone());
                Resource::new(format!("{RESOURCE_PREFIX}{}", session.id), name)
                    .with_description(format!("{} session in {}", session.state, session.cwd))
                    .with_mime_type("application/json")
            })
            .collect();
        Ok(ListResourcesResult::with_all_items(resources))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        let template = ResourceTemplate::new(format!("{RESOURCE_PREFIX}{{id}}"), "session")
            .with_description("A session: its record, what waits, and its last turns")
            .with_mime_type("application/json");
        Ok(ListResourceTemplatesResult::with_all_items(vec![template]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ReadResourceResponse, McpError> {
        let call = Call::of(&context)?;
        let Some(id) = request.uri.strip_prefix(RESOURCE_PREFIX) else {
            return Err(McpError::resource_not_found(
                format!(
                    "no resource {}: session resources are {RESOURCE_PREFIX}{{id}}",
                    request.uri
                ),
                None,
            ));
        };
        let read = tools::session_resource(&call.daemon, id).await.map_err(|error| {
            if error.code == "not_found" {
                McpError::resource_not_found(error.message, None)
            } else {
                McpError::internal_error(error.message, None)
            }
        })?;
        let text = ResourceContents::TextResourceContents {
            uri: request.uri.clone(),
            mime_type: Some("application/json".into()),
            text: read.to_string(),
            meta: None,
        };
        Ok(ReadResourceResult::new(vec![text]).into())
    }
}
