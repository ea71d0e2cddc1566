//! The daemon as one node of a fleet: where a session runs and is placed, commands forwarded
//! to the node that runs a session, claims and take-overs, and a lost node's runs ended.
//!
//! - `Daemon::command` (messages, answers, interrupts, stops, model and mode) carries a
//!   `SessionCommand` out here when the session runs here, else forwards it as a NATS request
//!   to `switchboard.node.<node>.commands`; there `fleet::answer_commands` (started by
//!   `serve_with`) carries it out with `Daemon::command_here`, which never forwards again, and
//!   replies with the API's status and code. What only the running node has (its CLI's handle,
//!   the session's files, shell and worktree) is refused elsewhere as `OtherNode` by
//!   `Daemon::running`, `browse` and `worktree`.
//! - `Daemon::node_lost` overlays a lost node on a record (the view's `node_lost`,
//!   `running: false`); the record itself is not rewritten, since a lost node cannot say so
//!   and the survivors would race. Another node's session is resumed here only once it has
//!   stopped or its node is lost (`409 other_node` otherwise); resuming a lost node's session
//!   appends the note that its run ended, then runs it here.
//! - A node only cut off from the bus is fenced by the database's sequence check and by
//!   `Daemon::check_still_ours`, made by `Daemon::running` (the API's way to a run's handle)
//!   and by the relay before it answers or sends: `Bus::cut_off` (`503`) and the stored record
//!   naming another node (`409`, and the run here stops). So an approval is applied by one
//!   node only.

use super::*;

impl Daemon {
    /// Whether the node that runs the session is lost (no heartbeat for a while, see
    /// [`crate::bus`]): the session no longer runs anywhere, and any node may resume it.
    pub fn node_lost(&self, record: &SessionRecord) -> bool {
        self.runs_elsewhere(record)
            && !record.state.is_final()
            && record
                .node
                .as_deref()
                .is_some_and(|node| self.config.bus.as_ref().is_some_and(|bus| bus.is_lost(node)))
    }

    /// The bus between daemons, if this one has one.
    pub fn bus(&self) -> Option<&Arc<crate::bus::Bus>> {
        self.config.bus.as_ref()
    }

    /// Whether the session runs (or ran last) on another node this one reaches over the bus.
    pub fn runs_elsewhere(&self, record: &SessionRecord) -> bool {
        self.config.bus.is_some() && record.node.is_some() && record.node != self.config.node
    }

    /// Where a new session runs, when that is another node (`None`: here). The node the
    /// request names; else the least loaded node (sessions running against its capacity)
    /// that is not lost, has room, whose roots hold the session's directory, and whose CLI
    /// is the version the request asks for, this one counted when it has the directory
    /// (within its roots, if it has any), room and the version (or has not told it yet, and
    /// no other node is known to run it); on a tie, here. When none has room (capacity only
    /// steers): here if it can run it, else the least loaded node that can. A version no node
    /// runs is refused; this node's own is checked when it runs the session.
    pub(super) fn place(&self, request: &CreateSession) -> Result<Option<String>, DaemonError> {
        let here = self.config.node.as_deref();
        let wanted = request.launch.cli_version.as_deref();
        let runs =
            |version: Option<&String>| wanted.is_none_or(|w| version.is_some_and(|v| v == w));
        let Some(bus) = &self.config.bus else {
            return match &request.node {
                Some(node) if Some(node.as_str()) != here => Err(DaemonError::Invalid(format!(
                    "node {node}: this daemon shares no bus with other nodes (serve --nats-url)"
                ))),
                _ => Ok(None),
            };
        };
        let nodes = bus.nodes();
        if request.node.is_none() && request.origin.as_ref().is_some_and(|o| o.ceiling.is_some()) {
            // Under a token's ceiling: here, where it is kept for sure (another node may be of
            // a release that drops it), unless the request names a node.
            return Ok(None);
        }
        if let Some(node) = &request.node {
            if Some(node.as_str()) == here {
                return Ok(None);
            }
            return match nodes.iter().find(|status| status.info.node == *node) {
                Some(status) if status.lost => {
                    Err(DaemonError::Busy(format!("node {node} is lost")))
                }
                Some(status) => match (&status.info.cli_version, wanted) {
                    (_, None) => Ok(Some(node.clone())),
                    (Some(version), Some(wanted)) if version == wanted => Ok(Some(node.clone())),
                    (Some(version), Some(wanted)) => Err(DaemonError::Invalid(format!(
                        "node {node} runs Claude Code {version}, not {wanted}"
                    ))),
                    (None, Some(_)) => Err(DaemonError::Busy(format!(
                        "node {node} has not said which Claude Code it runs yet; try again"
                    ))),
                },
                None => Err(DaemonError::Invalid(format!(
                    "no node {node} on the bus (GET /api/nodes lists them)"
                ))),
            };
        }
        let load = |running: usize, capacity: usize| running as f64 / capacity.max(1) as f64;
        let placement = &self.config.placement;
        let capacity = placement.capacity();
        let running = self.running_count();
        // Other nodes that could run it: (load, name, has room).
        let others: Vec<(f64, &str, bool)> = nodes
            .iter()
            .filter(|status| !status.this && !status.lost)
            .map(|status| &status.info)
            .filter(|info| {
                let roots: Vec<PathBuf> = info.roots.iter().map(PathBuf::from).collect();
                within(&request.launch.cwd, &roots) && runs(info.cli_version.as_ref())
            })
            .map(|info| {
                (
                    load(info.running, info.capacity),
                    info.node.as_str(),
                    info.running < info.capacity,
                )
            })
            .collect();
        // This node's CLI, while it has not told its version yet, is a candidate only when no
        // other node is known to run the version asked (its check then tells).
        let runs_here = match self.cli_version.get() {
            Some(version) => runs(Some(version)),
            None => wanted.is_none() || others.is_empty(),
        };
        let can_here = request.launch.cwd.is_dir()
            && (placement.roots.is_empty() || within(&request.launch.cwd, &placement.roots))
            && runs_here;
        let room_here = running < capacity;
        let least = |with_room: bool| {
            others
                .iter()
                .filter(|(_, _, room)| *room || !with_room)
                .min_by(|a, b| a.0.total_cmp(&b.0))
                .map(|(load, node, _)| (*load, node.to_string()))
        };
        match least(true) {
            Some((theirs, node))
                if !(can_here && room_here) || theirs < load(running, capacity) =>
            {
                Ok(Some(node))
            }
            Some(_) => Ok(None),
            // Nobody has room: capacity steers, it does not refuse.
            None if can_here => Ok(None),
            None => {
                match (least(false), wanted) {
                    (Some((_, node)), _) => Ok(Some(node)),
                    // Here, whose create says what is wrong with the directory.
                    (None, None) => Ok(None),
                    (None, Some(wanted)) => {
                        let anywhere = self.cli_version.get().is_some_and(|v| v == wanted)
                            || nodes.iter().any(|status| {
                                !status.this
                                    && !status.lost
                                    && runs(status.info.cli_version.as_ref())
                            });
                        Err(DaemonError::Invalid(if anywhere {
                            format!(
                            "no node that runs Claude Code {wanted} has {} within its roots (GET /api/nodes says each node's CLI and roots)",
                            request.launch.cwd.display()
                        )
                        } else {
                            format!("no node runs Claude Code {wanted} (GET /api/nodes says each node's)")
                        }))
                    }
                }
            }
        }
    }

    /// Creates the session on node `node`, over the bus.
    pub(super) async fn create_on(
        &self,
        node: &str,
        mut request: CreateSession,
    ) -> Result<SessionRecord, DaemonError> {
        // Named, so that the node it reaches runs it and places nothing further.
        request.node = Some(node.to_owned());
        let sender = request.started_by.take();
        let started_as = sender.as_ref().and_then(|sender| sender.origin.clone());
        let by = sender.map(|sender| match &self.config.node {
            Some(here) => via(&sender.who, here),
            None => sender.who,
        });
        let origin = request.origin.take();
        let ceiling = origin.as_ref().and_then(|origin| origin.ceiling.clone());
        let run = request.launch.run.take();
        let wanted_run = run.clone();
        let command = SessionCommand::Create { request, by, started_as, origin, run };
        let answer = self.forward(node, "", &command).await?;
        let record: SessionRecord = serde_json::from_value(answer).map_err(|error| {
            DaemonError::Internal(format!("node {node} answered a create unreadably: {error}"))
        })?;
        // A node of a release that does not keep a token's ceiling runs the session without
        // it: stopped there at once, and refused.
        let kept = record.launch.origin.as_ref().and_then(|origin| origin.ceiling.clone());
        if ceiling.is_some() && kept != ceiling {
            let _ = self.forward(node, &record.id, &SessionCommand::Stop).await;
            return Err(DaemonError::Forbidden(format!(
                "node {node} runs a release that does not keep a token's ceiling: the session it started ({}) was stopped; place it on another node",
                record.id
            )));
        }
        // Likewise a run: unlinked, its schedule could not tell when it ends.
        if wanted_run.is_some() && record.launch.run != wanted_run {
            let _ = self.forward(node, &record.id, &SessionCommand::Stop).await;
            return Err(DaemonError::Forbidden(format!(
                "node {node} runs a release that does not keep a schedule's run: the session it started ({}) was stopped; place it on another node",
                record.id
            )));
        }
        Ok(record)
    }

    /// Sends `command` to `node` over the bus; its answer, or its refusal as this node's.
    pub(super) async fn forward(
        &self,
        node: &str,
        id: &str,
        command: &SessionCommand,
    ) -> Result<Value, DaemonError> {
        let Some(bus) = &self.config.bus else {
            return Err(DaemonError::Internal("no bus to forward on".into()));
        };
        let command = serde_json::to_value(command)
            .map_err(|error| DaemonError::Internal(format!("a command to forward: {error}")))?;
        match bus.forward(node, id, command).await {
            Ok(answer) => Ok(answer),
            Err(crate::bus::ForwardError::Refused { status, code, message }) => {
                Err(DaemonError::Forwarded { status, code, message })
            }
            Err(crate::bus::ForwardError::Unreachable(message)) => Err(DaemonError::Busy(message)),
        }
    }

    /// The bus and the node that runs session `id`, when that is another node.
    pub(super) async fn remote_owner(&self, id: &str) -> Result<Option<String>, DaemonError> {
        if self.config.bus.is_none() {
            return Ok(None);
        }
        if self.handle(id).is_ok() {
            return Ok(None);
        }
        // A session that ended is nobody's to act on: `not_running` here, as anywhere.
        let record = self.store.get_session(id).await?.filter(|record| !record.state.is_final());
        Ok(record
            .and_then(|record| record.node)
            .filter(|node| Some(node) != self.config.node.as_ref()))
    }

    /// Carries out `command` on session `id`: here if it runs here, else on the node that
    /// runs it (over the bus), whose answer or refusal is this one's.
    pub async fn command(&self, id: &str, command: SessionCommand) -> Result<(), DaemonError> {
        let Some(node) = self.remote_owner(id).await? else {
            return self.command_session_here(id, command).await;
        };
        let here = self.config.node.as_deref().unwrap_or("another node");
        self.forward(&node, id, &command.via(here)).await.map(drop)
    }

    /// Carries out `command` on session `id` if it runs on this node (`NotRunning`
    /// otherwise): what a command forwarded from another node gets. Its answer: the new
    /// session's record for a create, `null` otherwise.
    pub async fn command_here(
        self: &Arc<Self>,
        id: &str,
        command: SessionCommand,
    ) -> Result<Value, DaemonError> {
        if let SessionCommand::Create { mut request, by, started_as, origin, run } = command {
            // Here, whatever it names: a forwarded create is never placed or forwarded again.
            request.node = self.config.node.clone();
            request.started_by = by.map(|by| switchboard_session::Sender::new(by, started_as));
            request.origin = origin;
            request.launch.run = run;
            let record = self.create(request).await?;
            return serde_json::to_value(public_record(record))
                .map_err(|error| DaemonError::Internal(error.to_string()));
        }
        if let SessionCommand::Ask { control } = command {
            return self.ask_cli_here(id, &control).await;
        }
        self.command_session_here(id, command).await.map(|()| Value::Null)
    }

    pub(super) async fn command_session_here(
        &self,
        id: &str,
        command: SessionCommand,
    ) -> Result<(), DaemonError> {
        match command {
            SessionCommand::Create { .. } => {
                Err(DaemonError::Invalid("a create names no session".into()))
            }
            SessionCommand::Message { message, by, origin } => {
                self.message_here(id, message, switchboard_session::Sender::new(by, origin)).await
            }
            SessionCommand::Answer { request_id, answer, by } => {
                Ok(self.running(id).await?.respond_permission(&request_id, answer, &by).await?)
            }
            SessionCommand::Interrupt { cancel_queued: false } => {
                Ok(self.running(id).await?.interrupt().await?)
            }
            SessionCommand::Interrupt { cancel_queued: true } => {
                let handle = self.running(id).await?;
                // Queued prompts are dropped one by one (`cancel_async_message`) where the CLI
                // cannot drop them with the interrupt itself.
                let version = handle.snapshot().cli_version;
                switchboard_session::CliControl::CancelMessage { uuid: String::new() }
                    .supported_by(version.as_deref())
                    .map_err(DaemonError::CliTooOld)?;
                Ok(handle.interrupt_all().await?)
            }
            SessionCommand::SetModel { model } => {
                Ok(self.running(id).await?.set_model(model).await?)
            }
            SessionCommand::SetMode { mode } => {
                Ok(self.running(id).await?.set_permission_mode(mode).await?)
            }
            SessionCommand::Stop => self.stop_here(id, false).await,
            SessionCommand::Ask { control } => self.ask_cli_here(id, &control).await.map(drop),
        }
    }

    pub(super) async fn message_here(
        &self,
        id: &str,
        message: switchboard_protocol::UserMessage,
        by: switchboard_session::Sender,
    ) -> Result<(), DaemonError> {
        let handle = self.running(id).await?;
        self.may_send(id, &by.who)?;
        if let Some(refusal) = self.external_refusal(id, "type into it") {
            return Err(refusal);
        }
        let terminal = self.live(id).is_some_and(|live| is_terminal(&live.record.lock()));
        if terminal {
            switchboard_transport::terminal::prompt_text(&message).map_err(DaemonError::Invalid)?;
            if message.priority.is_some() {
                return Err(DaemonError::Invalid(
                    "a terminal's session takes its prompts as typed, with no priority".into(),
                ));
            }
        }
        if let Some(priority) = &message.priority {
            let version = handle.snapshot().cli_version;
            switchboard_session::priority_supported_by(priority, version.as_deref())
                .map_err(DaemonError::CliTooOld)?;
        }
        handle.send_message_from(message, Some(by)).await?;
        Ok(())
    }

    /// Claims `record`, as it was read, for node `to` ([`Store::claim_session`]): then its
    /// node and stamp are the claim's. Of two claims from one reading one wins; the other is
    /// `OtherNode`.
    pub(super) async fn claim(
        &self,
        record: &mut SessionRecord,
        to: Option<String>,
    ) -> Result<(), DaemonError> {
        let claim = Claim::of(record, to.as_deref());
        let stamp = claim.stamp_ms;
        if !self.store.claim_session(claim).await? {
            return Err(DaemonError::OtherNode(format!(
                "session {} was just taken over by another node, or resumed or stopped by its own",
                record.id
            )));
        }
        record.updated_ms = stamp;
        record.node = to;
        Ok(())
    }

    /// This node's own CLI, as its sessions run it (without what a request adds): the one
    /// whose version the node tells, and the program and environment every session's CLI (and
    /// the web UI's shell) starts from.
    pub(super) fn node_cli(&self) -> switchboard_transport::stdio::CliOptions {
        let mut options = switchboard_transport::stdio::CliOptions {
            program: self.config.claude.clone(),
            clear_env: self.config.clear_env,
            ..Default::default()
        };
        options.env.extend(self.config.env.iter().cloned());
        options
    }

    /// On a node of a fleet, that its run of session `id` is still the session's run before
    /// anything is carried out by it: a node cut off from the bus (which the others may soon
    /// call lost, and take its sessions over) carries out nothing, and a run whose session
    /// another node took over (this node was called lost) ends. So an answer is never applied
    /// here once another node may have resumed the session and may ask it again. The bus is
    /// checked after the store's answer, so a slow database does not use up the margin.
    pub(crate) async fn check_still_ours(&self, id: &str) -> Result<(), DaemonError> {
        let Some(here) = &self.config.node else { return Ok(()) };
        let record = self.store.get_session(id).await?;
        if self.config.bus.as_ref().is_some_and(|bus| bus.cut_off()) {
            return Err(DaemonError::Busy(
                "this node is cut off from the bus, and the other nodes may take its sessions over: it carries out nothing for them until it is back".into(),
            ));
        }
        let Some(record) = record else { return Ok(()) };
        if record.node.as_ref() == Some(here) {
            return Ok(());
        }
        tracing::warn!(session = %id, node = ?record.node, "taken over by another node; its run here stops");
        if let Ok(handle) = self.handle(id) {
            tokio::spawn(async move {
                let _ = handle.shutdown(STOP_GRACE).await;
            });
        }
        Err(DaemonError::OtherNode(format!(
            "session {id} was taken over by node {}; its run on this node ends",
            record.node.as_deref().unwrap_or("(none)")
        )))
    }

    /// The refusal of what only the node that runs a session can do (its process, its files).
    pub(super) fn elsewhere(&self, record: &SessionRecord) -> DaemonError {
        let node = record.node.as_deref().unwrap_or_default();
        DaemonError::OtherNode(format!(
            "session {} runs on node {node}, whose machine has its files and its CLI: do this there",
            record.id
        ))
    }

    /// Whether the session is (or was last) another node's, bus or not.
    pub(super) fn owned_elsewhere(&self, record: &SessionRecord) -> bool {
        record.node.is_some() && record.node != self.config.node
    }

    /// Notes in a lost node's session that its run ended with the node (`then`: what happens
    /// next, said after it), and marks it exited. The record stays that node's (its worktree
    /// is on that node's machine), claimed for it first, so that of two nodes stopping or
    /// resuming it at once one does, and the other is told.
    pub(super) async fn end_lost_run(
        &self,
        record: &mut SessionRecord,
        then: &str,
    ) -> Result<(), DaemonError> {
        self.claim(record, record.node.clone()).await?;
        let node = record.node.clone().unwrap_or_default();
        let last = self.store.last_seq(&record.id).await?;
        let payload = json!({
            "event": "exited", "code": null, "signal": null, "requested": false,
            "description": format!("node {node} was lost while this session ran; {then}"),
        });
        let note = event_record(&record.id, last + 1, "switchboard", "exited", payload.to_string());
        self.store.append(std::slice::from_ref(&note)).await?;
        record.state = RecordState::Exited;
        record.updated_ms = now_ms();
        self.store.update_session(record).await?;
        self.announce(record);
        self.audit_ended(&record.id, format!("node {node} was lost while it ran")).await;
        Ok(())
    }
}
