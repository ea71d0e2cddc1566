//! Resuming a session: its CLI restarted with `--resume` and the Claude session id, the log
//! going on where it stopped. Refused while it runs (here or on a live node), while it is
//! parked and nobody has answered, for a terminal's session, while another process writes its
//! transcript, or with its budget spent; a session whose node was lost is taken over, the log
//! saying so first.

use std::sync::Arc;

use serde_json::json;
use switchboard_session::SessionConfig;
use switchboard_store::{now_ms, RecordState, SessionRecord};

use super::*;

impl Daemon {
    /// Restarts an exited session's CLI with `--resume` and its Claude session id; the event
    /// log continues where it stopped.
    pub async fn resume(self: &Arc<Self>, id: &str) -> Result<SessionRecord, DaemonError> {
        self.resume_with(id, Vec::new()).await
    }

    /// [`Daemon::resume`], its CLI told `parked`: people's answers to requests parked in the
    /// last run, which it asks about again.
    pub(super) async fn resume_with(
        self: &Arc<Self>,
        id: &str,
        parked: Vec<switchboard_session::ParkedAnswer>,
    ) -> Result<SessionRecord, DaemonError> {
        self.check_serving()?;
        self.run_ending(id).await;
        if self.live(id).is_some_and(|live| live.handle().is_some()) {
            return Err(DaemonError::AlreadyRunning(id.to_owned()));
        }
        let writing = self.record_writes.lock().await;
        // Again under the lock: two resumes asked of this node at once start one run.
        if self.live(id).is_some_and(|live| live.handle().is_some()) {
            return Err(DaemonError::AlreadyRunning(id.to_owned()));
        }
        let _admitted = self.admit_run()?;
        let mut record = self
            .store
            .get_session(id)
            .await?
            .ok_or_else(|| DaemonError::NotFound(id.to_owned()))?;
        if record.state == RecordState::Parked && parked.is_empty() {
            return Err(DaemonError::Parked(format!(
                "session {id} is parked: a request waits for a person, and answering it resumes the session (POST /api/sessions/{id}/permissions/REQUEST_ID)"
            )));
        }
        // Answers to requests the log has decided meanwhile (their wait ran out) resume nothing.
        let answered = parked.first().map(|parked| parked.pending.request_id.clone());
        let parked = self.undecided(id, parked).await?;
        if let (Some(request), true) = (answered, parked.is_empty()) {
            return Err(DaemonError::Session(switchboard_session::SessionError::Answer(
                switchboard_session::AnswerError::AlreadyAnswered(request),
            )));
        }
        // Nor does a resume take a conversation a parked session of its own holds.
        if let Some(claude) = record.claude_session_id.as_deref() {
            self.parked_holder(claude, Some(id)).await?;
        }
        let was_parked = record.state == RecordState::Parked;
        let lost = self.node_lost(&record);
        if record.node != self.config.node && !record.state.is_final() && !lost {
            let node = record.node.as_deref().unwrap_or("a daemon of its own");
            return Err(DaemonError::OtherNode(format!(
                "session {id} runs on {node}; resume it there, or once it has stopped"
            )));
        }
        if is_terminal(&record) {
            let claude = record.claude_session_id.as_deref().unwrap_or("ID");
            return Err(DaemonError::Invalid(format!(
                "session {id} ran in a person's terminal; continue it in one: switchboard claude --resume {claude}"
            )));
        }
        if is_external(&record) {
            if let Some(refusal) = self.external_refusal(id, "resume it") {
                return Err(refusal);
            }
            // Its process is gone: resumed, it is a session the daemon runs.
            record.launch.transport = None;
        }
        if let Some(claude) = record.claude_session_id.clone() {
            self.one_writer(&claude, "resume it").await?;
        }
        let claude_session_id = record.claude_session_id.clone().ok_or_else(|| {
            DaemonError::Invalid(format!(
                "session {id} never reached the CLI's first turn, so there is nothing to resume"
            ))
        })?;
        let launch = record.launch.clone();
        if let Some(max) = launch.max_budget_usd.filter(|max| record.spent_usd >= *max) {
            return Err(DaemonError::Budget(format!(
                "session {id}'s budget of {} is spent ({}); raise it first (PATCH /api/sessions/{id} with max_budget_usd)",
                crate::budget::dollars(max),
                crate::budget::dollars(record.spent_usd)
            )));
        }
        self.daily_limit(None)?;
        let (mut config, transport) =
            self.session_config(&launch, Some(claude_session_id), false, None).await?;
        // Calls the last run left unsettled are settled first, and the model is told of them:
        // the run's first prompt (the real 2.1.330 takes no new --append-system-prompt on a
        // resume, and 2.1.37 and 2.1.120 drop the cut-off call from the conversation).
        let told = self.unsettled_note(id, config.policy.on_unsettled).await?;
        config.parked_answers = parked;
        self.check_transport(&config, &transport).await?;
        // Taken from its node: of two nodes taking it at once, one wins, and the node it was
        // taken from can no longer write its record.
        let taken_from = record.node.clone();
        self.claim(&mut record, self.config.node.clone()).await?;
        let began =
            self.begin_resumed(&mut record, lost, taken_from.as_deref(), config, transport, told);
        if let Err(error) = began.await {
            // Claimed but not started (the log moved under it: the node it was taken from
            // still wrote): it is this node's now, and stopped, so that it can be resumed again
            // (or parked still: its request waits on).
            record.state = if was_parked { RecordState::Parked } else { RecordState::Exited };
            record.updated_ms = now_ms();
            if let Err(stored) = self.store.update_session(&record).await {
                tracing::error!(session = %id, error = %stored, "cannot mark a failed resume stopped");
            }
            return Err(error);
        }
        drop(writing);
        self.record(id).await?.ok_or_else(|| DaemonError::NotFound(id.to_owned()))
    }

    /// A resume's start, once its record is this node's: the note that the lost node's run
    /// ended (`lost`), the `started` event, the record, the CLI.
    async fn begin_resumed(
        self: &Arc<Self>,
        record: &mut SessionRecord,
        lost: bool,
        taken_from: Option<&str>,
        config: SessionConfig,
        transport: Transport,
        told: Option<String>,
    ) -> Result<(), DaemonError> {
        let id = record.id.clone();
        let id = id.as_str();
        let mut last = self.store.last_seq(id).await?;
        if lost {
            // What the lost node stored and may never have indexed is read again here, its
            // entries naming that node.
            let theirs = SessionRecord { node: taken_from.map(str::to_owned), ..record.clone() };
            self.reindex_taken_over(theirs, last);
            // Its run ended with its node: said in the log, as a daemon's restart says it.
            let node = taken_from.unwrap_or_default();
            let here = self.config.node.as_deref().unwrap_or_default();
            let payload = json!({
                "event": "exited", "code": null, "signal": null, "requested": false,
                "description": format!("node {node} was lost while this session ran; resumed on {here}"),
            });
            let note = event_record(id, last + 1, "switchboard", "exited", payload.to_string());
            self.store.append(std::slice::from_ref(&note)).await?;
            last += 1;
            self.audit_ended(id, format!("node {node} was lost while it ran")).await;
        }
        // The answers it resumes with, before its start: a daemon killed before the CLI heard
        // them has its successor resume with them again ([`Daemon::resume_answered`]).
        let notes = super::parked::answer_notes(id, last, &config.parked_answers);
        if !notes.is_empty() {
            self.store.append(&notes).await?;
            last += notes.len() as u64;
        }
        self.note_started(id, last, true, false, false).await?;
        record.state = RecordState::Starting;
        record.updated_ms = now_ms();
        self.store.update_session(record).await?;
        let prompt = told.map(|note| {
            let by = switchboard_session::Sender::new(
                "Switchboard (calls a crash left unsettled)",
                None,
            );
            (note, Some(by))
        });
        self.start(record.clone(), config, transport, None, last + 1, prompt).await
    }
}
