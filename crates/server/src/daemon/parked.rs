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

use super::*;

/// Whether `pending` was parked.
pub(super) fn is_parked(pending: &PendingPermission) -> bool {
    pending.parked_at_ms.is_some()
}

/// Lets a session's CLI go once a turn has ended with a request parked.
pub(super) struct Parking;

impl Observer for Parking {
    fn stored<'a>(
        &'a self,
        _daemon: &'a Arc<Daemon>,
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
            tokio::spawn(async move {
                let _ = handle.shutdown(STOP_GRACE).await;
            });
        }
        None
    }
}

impl Daemon {
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
