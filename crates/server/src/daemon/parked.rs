//! Approvals that wait with no process. A policy's `park_after_secs` holds an ask rule's call
//! at its `PreToolUse` hook; when nobody has answered by then, the session's core tells the
//! CLI to defer the call (Claude Code 2.1.100 on ends the turn with it deferred) and
//! announces the request again, parked. This part lets the CLI go once that turn has ended
//! ([`Parking`]), so the session is `parked`: no process, the request in its log, shown by
//! every face as any waiting request ([`Daemon::waiting`] reads a parked session's log). An
//! answer, through any face and on any node, resumes the session with it
//! ([`Daemon::answer_parked`]): the resumed CLI asks about the same call first thing, and the
//! person's answer is the hook's, so the call runs (or not) once. A daemon restart changes
//! nothing of this: the request is in the log, and the record says `parked`.
//!
//! The answers a session resumes with are in its log before its run's `started`
//! (`parked_answered`): if the daemon is killed before the resumed CLI hears one (it asks
//! about the call first thing, and the answer is then logged as the decision), its successor
//! resumes the session with it again ([`Daemon::resume_answered`]), so an answer is never lost.
//!
//! A policy's `park_expires_secs` bounds the wait: the node a parked session was last on
//! watches it ([`Daemon::watch_parked`], from when it parks and again when the daemon opens),
//! and a request still unanswered when its time comes is denied as an unanswered ask is, in
//! the log, with no process started; the session, with nothing left parked, is `exited`.

use super::*;

/// A `parked_answered` note: an answer a session resumes with, as the log keeps it.
#[derive(Serialize, Deserialize)]
struct AnswerNote {
    event: String,
    pending: PendingPermission,
    answer: switchboard_session::PermissionAnswer,
    who: String,
}

/// The log's notes of the answers `answers` that a resumed run of session `id` starts with,
/// numbered after `last`.
pub(super) fn answer_notes(
    id: &str,
    last: u64,
    answers: &[switchboard_session::ParkedAnswer],
) -> Vec<EventRecord> {
    answers
        .iter()
        .zip(last + 1..)
        .map(|(parked, seq)| {
            let note = AnswerNote {
                event: "parked_answered".to_owned(),
                pending: parked.pending.clone(),
                answer: parked.answer.clone(),
                who: parked.who.clone(),
            };
            let payload = serde_json::to_string(&note).unwrap_or_default();
            event_record(id, seq, "switchboard", "parked_answered", payload)
        })
        .collect()
}

/// The answers the last run of a log (`events`, its tail) started with that its CLI never
/// heard: the `parked_answered` notes just before its `started`, with no decision after.
fn answers_unheard(events: &[EventRecord]) -> Vec<switchboard_session::ParkedAnswer> {
    let Some(started) = events.iter().rposition(|event| event.kind == "started") else {
        return Vec::new();
    };
    let decided = decided_requests(&events[started..]);
    events[..started]
        .iter()
        .rev()
        .take_while(|event| event.kind == "parked_answered")
        .filter_map(|event| serde_json::from_str::<AnswerNote>(&event.payload).ok())
        .filter(|note| !decided.contains(&note.pending.request_id))
        .map(|note| switchboard_session::ParkedAnswer {
            pending: note.pending,
            answer: note.answer,
            who: note.who,
        })
        .collect()
}

/// The requests `events` decide.
fn decided_requests(events: &[EventRecord]) -> std::collections::HashSet<String> {
    events
        .iter()
        .filter(|event| event.kind == "permission_decided")
        .filter_map(|event| {
            let value: Value = serde_json::from_str(&event.payload).ok()?;
            Some(value.get("request_id")?.as_str()?.to_owned())
        })
        .collect()
}

/// Whether `pending` was parked.
pub(super) fn is_parked(pending: &PendingPermission) -> bool {
    pending.parked_at_ms.is_some()
}

/// Lets a session's CLI go once a turn has ended with a request parked.
pub(super) struct Parking;

impl Observer for Parking {
    fn stored<'a>(
        &'a self,
        daemon: &'a Arc<Daemon>,
        stored: &'a Stored<'a>,
    ) -> Option<Waiting<'a>> {
        if stored.turn_ends.is_empty() {
            return None;
        }
        // Let go only at rest: a request parked, nothing else waiting, no prompt queued.
        let parked = {
            let projector = stored.live.projector.lock();
            let waiting = &projector.view().pending_permissions;
            waiting.iter().any(is_parked) && waiting.iter().all(is_parked)
        };
        let handle = stored.live.handle().filter(|handle| {
            let now = handle.snapshot();
            parked && now.state == SessionState::Idle && now.queued_turns == 0
        });
        if let Some(handle) = handle {
            tracing::info!(session = %stored.id, "a request is parked: the CLI ends, and the session waits for an answer with no process");
            let daemon = daemon.clone();
            let id = stored.id.to_owned();
            tokio::spawn(async move {
                let _ = handle.shutdown(STOP_GRACE).await;
                // Parked now: its wait may be bounded.
                daemon.watch_parked(id);
            });
        }
        None
    }
}

impl Daemon {
    /// On opening: resumes each session of `ended` (those a killed predecessor left running)
    /// whose last run began with answers to parked requests that its CLI never heard, with
    /// those answers.
    pub(super) async fn resume_answered(self: &Arc<Self>, ended: Vec<String>) {
        for id in ended {
            let events = match self.store.events_before(&id, u64::MAX, HISTORY_PAGE).await {
                Ok(events) => events,
                Err(error) => {
                    tracing::warn!(session = %id, %error, "cannot read a session's log for answers its CLI never heard");
                    continue;
                }
            };
            let answers = answers_unheard(&events);
            if answers.is_empty() {
                continue;
            }
            let daemon = self.clone();
            tokio::spawn(async move {
                match daemon.resume_with(&id, answers).await {
                    Ok(_) => {
                        tracing::info!(session = %id, "resumed with the answers its last CLI never heard")
                    }
                    Err(error) => {
                        // Its requests wait on, parked, for an answer that resumes it.
                        tracing::warn!(session = %id, %error, "cannot resume a session with the answers its last CLI never heard; it is parked again");
                        daemon.park_again(&id).await;
                    }
                }
            });
        }
    }

    /// Marks session `id` parked again (a resume with its answers could not start): its
    /// requests, still undecided in its log, wait for an answer.
    async fn park_again(self: &Arc<Self>, id: &str) {
        {
            let _writing = self.record_writes.lock().await;
            let Ok(Some(mut record)) = self.store.get_session(id).await else { return };
            if !record.state.is_final() || self.live(id).is_some_and(|live| live.handle().is_some())
            {
                return;
            }
            record.state = RecordState::Parked;
            record.updated_ms = now_ms();
            if self.store.update_session(&record).await.is_err() {
                return;
            }
            self.announce(&record);
        }
        self.watch_parked(id.to_owned());
    }

    /// The answers of `answers` whose requests session `id`'s log has not decided since they
    /// were given (a parked request's wait may run out meanwhile: `park_expires_secs`).
    pub(super) async fn undecided(
        &self,
        id: &str,
        answers: Vec<switchboard_session::ParkedAnswer>,
    ) -> Result<Vec<switchboard_session::ParkedAnswer>, DaemonError> {
        if answers.is_empty() {
            return Ok(answers);
        }
        let events = self.store.events_before(id, u64::MAX, HISTORY_PAGE).await?;
        let decided = decided_requests(&events);
        Ok(answers
            .into_iter()
            .filter(|parked| !decided.contains(&parked.pending.request_id))
            .collect())
    }

    /// Watches, on opening, the parked sessions of this node whose requests' wait is bounded.
    pub(super) async fn watch_parked_sessions(self: &Arc<Self>) -> Result<(), DaemonError> {
        for record in self.store.list_sessions().await? {
            if record.state == RecordState::Parked && record.node == self.config.node {
                self.watch_parked(record.id);
            }
        }
        Ok(())
    }

    /// Denies each parked request of session `id` whose policy's `park_expires_secs` has
    /// passed, when it passes (a task that ends once nothing parked there is bounded, or the
    /// daemon drains).
    pub(super) fn watch_parked(self: &Arc<Self>, id: String) {
        let daemon = Arc::downgrade(self);
        let mut phase = self.phase();
        tokio::spawn(async move {
            loop {
                let Some(due) = (match daemon.upgrade() {
                    Some(daemon) => daemon.parked_due(&id).await,
                    None => None,
                }) else {
                    return;
                };
                let wait = Duration::from_millis(due.saturating_sub(now_ms()));
                tokio::select! {
                    () = tokio::time::sleep(wait) => {}
                    _ = phase.changed() => return,
                }
                let Some(strong) = daemon.upgrade() else { return };
                let pause = match strong.expire_parked(&id).await {
                    Ok(true) => continue,
                    // Not parked for good yet (its record is still being written), or running
                    // again: looked at again shortly.
                    Ok(false) => Duration::from_secs(5),
                    Err(error) => {
                        tracing::warn!(session = %id, %error, "cannot end a parked request whose wait is over; trying again in a minute");
                        Duration::from_secs(60)
                    }
                };
                drop(strong);
                tokio::select! {
                    () = tokio::time::sleep(pause) => {}
                    _ = phase.changed() => return,
                }
            }
        });
    }

    /// The soonest time one of session `id`'s parked requests stops waiting, if one does.
    async fn parked_due(&self, id: &str) -> Option<u64> {
        let record = self.record(id).await.ok()??;
        // Another node's now (taken over): its to watch.
        if record.node != self.config.node {
            return None;
        }
        let waiting = self.waiting(&record).await;
        waiting
            .iter()
            .filter(|pending| is_parked(pending))
            .filter_map(|p| p.park_expires_at_ms)
            .min()
    }

    /// Denies session `id`'s parked requests whose wait is over, in its log (as an
    /// unanswered ask's timeout is logged), and with nothing left parked marks it `exited`.
    /// Whether it could (the session is parked, with no process).
    async fn expire_parked(&self, id: &str) -> Result<bool, DaemonError> {
        let _writing = self.record_writes.lock().await;
        let Some(mut record) = self.store.get_session(id).await? else { return Ok(true) };
        // Parked, with no process, and no run of it held here (whose projection would not see
        // what is written to the log directly).
        if record.state != RecordState::Parked || self.live(id).is_some() {
            return Ok(false);
        }
        let now = now_ms();
        let waiting: Vec<PendingPermission> =
            self.waiting(&record).await.into_iter().filter(is_parked).collect();
        let (over, left): (Vec<_>, Vec<_>) = waiting
            .into_iter()
            .partition(|pending| pending.park_expires_at_ms.is_some_and(|at| at <= now));
        if over.is_empty() {
            return Ok(true);
        }
        let last = self.store.last_seq(id).await?;
        let notes: Vec<EventRecord> = over
            .iter()
            .zip(last + 1..)
            .map(|(pending, seq)| {
                let waited = pending.park_expires_at_ms.unwrap_or(now).saturating_sub(pending.parked_at_ms.unwrap_or(now)) / 1000;
                let message = format!(
                    "Nobody answered this parked request within {waited} s (the policy's park_expires_secs), so it was denied (Switchboard permissions fail closed)."
                );
                let event = SessionEvent::decided(
                    &pending.request_id,
                    &pending.tool_name,
                    switchboard_session::Behavior::Deny,
                    switchboard_session::DecidedBy::Timeout,
                    message,
                )
                .with_tool_use_id(pending.tool_use_id.clone());
                event_record(id, seq, "switchboard", event.kind(), event.to_json_text())
            })
            .collect();
        self.store.append(&notes).await?;
        for pending in &over {
            self.audit(crate::audit::AuditEntry::Decision {
                session: id.to_owned(),
                origin: None,
                tool: pending.tool_name.clone(),
                tool_use_id: pending.tool_use_id.clone(),
                decision: "deny".into(),
                by: switchboard_session::DecidedBy::Timeout,
                request_id: pending.request_id.clone(),
            })
            .await;
        }
        for pending in &over {
            let decision = crate::decisions::Decision {
                behavior: switchboard_session::Behavior::Deny,
                by: switchboard_session::DecidedBy::Timeout,
            };
            self.decisions.note(id, &pending.request_id, decision);
            tracing::info!(session = %id, request = %pending.request_id, "a parked request waited its policy's longest: denied");
        }
        if left.is_empty() {
            record.state = RecordState::Exited;
            record.updated_ms = now_ms();
            self.store.update_session(&record).await?;
            self.announce(&record);
        }
        Ok(true)
    }

    /// Refuses a new session that would resume the Claude session `claude` while a parked
    /// session holds it: the parked one's answer resumes that conversation, and two sessions
    /// would go on with it. (A fork is a conversation of its own.)
    pub(super) async fn parked_holder(
        &self,
        claude: &str,
        except: Option<&str>,
    ) -> Result<(), DaemonError> {
        let sessions = self.store.list_sessions().await?;
        let holder = sessions.iter().find(|record| {
            record.state == RecordState::Parked
                && record.claude_session_id.as_deref() == Some(claude)
                && Some(record.id.as_str()) != except
        });
        match holder {
            Some(record) => Err(DaemonError::Parked(format!(
                "Claude session {claude} is parked in session {id}: a request waits for a person there, and its answer resumes that session (POST /api/sessions/{id}/permissions/REQUEST_ID); or fork the conversation instead (\"fork\": true)",
                id = record.id
            ))),
            None => Ok(()),
        }
    }

    /// The parked request `request_id` of session `id`, if it is one.
    pub(super) async fn parked(
        &self,
        id: &str,
        request_id: &str,
    ) -> Result<Option<PendingPermission>, DaemonError> {
        let Some(record) = self.record(id).await? else { return Ok(None) };
        let parked = record.state == RecordState::Parked
            || self.live(id).is_some_and(|live| {
                live.projector.lock().view().pending_permissions.iter().any(is_parked)
            });
        if !parked {
            return Ok(None);
        }
        let waiting = self.waiting(&record).await;
        Ok(waiting
            .into_iter()
            .find(|pending| pending.request_id == request_id && is_parked(pending)))
    }

    /// Waits (bounded) until the CLI of session `id`, which parked a request, has ended.
    pub(super) async fn parked_cli_ended(&self, id: &str) -> Result<(), DaemonError> {
        let Some(live) = self.live(id) else { return Ok(()) };
        let mut finished = live.finished.subscribe();
        if live.handle().is_some()
            && tokio::time::timeout(STOP_GRACE * 2, ended(&mut finished)).await.is_err()
        {
            return Err(DaemonError::Busy(format!(
                "session {id}'s CLI is still ending after its request was parked; answer again in a moment"
            )));
        }
        Ok(())
    }

    /// Answers the parked request `pending` of session `id`: the session resumes, and its CLI
    /// hears the answer when it asks about the call again. A second answer finds the session
    /// running and is refused as already answered.
    pub(super) async fn answer_parked(
        self: &Arc<Self>,
        id: &str,
        pending: PendingPermission,
        answer: switchboard_session::PermissionAnswer,
        by: &str,
    ) -> Result<(), DaemonError> {
        // Its CLI may still be ending (it is let go once the parked turn has ended).
        self.parked_cli_ended(id).await?;
        let request_id = pending.request_id.clone();
        let parked = switchboard_session::ParkedAnswer { pending, answer, who: by.to_owned() };
        match self.resume_with(id, vec![parked]).await {
            Ok(_) => {
                tracing::info!(session = %id, request = %request_id, "a parked request was answered: the session resumes");
                Ok(())
            }
            // Another answer resumed it first.
            Err(DaemonError::AlreadyRunning(_)) => {
                Err(DaemonError::Session(switchboard_session::SessionError::Answer(
                    switchboard_session::AnswerError::AlreadyAnswered(request_id),
                )))
            }
            Err(error) => Err(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(seq: u64, kind: &'static str, payload: Value) -> EventRecord {
        event_record("s", seq, "switchboard", kind, payload.to_string())
    }

    fn answered(seq: u64, request_id: &str) -> EventRecord {
        let pending = PendingPermission {
            request_id: request_id.to_owned(),
            tool_name: "Bash".to_owned(),
            input: json!({"command": "ls"}),
            tool_use_id: Some(format!("toolu-{request_id}")),
            suggestions: Vec::new(),
            reason: String::new(),
            agent_id: None,
            timeout_secs: 60,
            asked_at_ms: 1,
            always_allows: String::new(),
            started_by: None,
            origin: None,
            rule: None,
            cli_reason: None,
            hints: Default::default(),
            parked_at_ms: Some(2),
            park_expires_at_ms: None,
        };
        let parked = switchboard_session::ParkedAnswer {
            pending,
            answer: switchboard_session::PermissionAnswer::allow(),
            who: "ana".to_owned(),
        };
        let mut notes = answer_notes("s", seq - 1, std::slice::from_ref(&parked));
        notes.remove(0)
    }

    #[test]
    fn the_answers_a_run_never_heard_are_those_just_before_its_start_and_undecided() {
        let started = |seq| note(seq, "started", json!({"event": "started", "resumed": true}));
        let decided = |seq, request: &str| {
            note(
                seq,
                "permission_decided",
                json!({"event": "permission_decided", "request_id": request}),
            )
        };
        // An older run's answer is not this run's; of this run's two, one was heard.
        let log = vec![
            answered(1, "old"),
            started(2),
            answered(3, "a"),
            answered(4, "b"),
            started(5),
            decided(6, "a"),
        ];
        let unheard: Vec<String> =
            answers_unheard(&log).into_iter().map(|parked| parked.pending.request_id).collect();
        assert_eq!(unheard, ["b"]);
        assert!(answers_unheard(&log[..2]).iter().any(|parked| parked.pending.request_id == "old"));
        assert!(answers_unheard(&[answered(1, "x")]).is_empty(), "no run started with it");
        assert_eq!(decided_requests(&log), ["a".to_owned()].into_iter().collect());
    }
}
