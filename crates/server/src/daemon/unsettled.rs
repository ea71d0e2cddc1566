//! Tool calls a crash cannot re-run ([`switchboard_session::unsettled`]): the calls the last
//! run of a stopped session started and never answered, found in its log from the run's
//! `started` event on; each settled by a person (`POST /api/sessions/{id}/unsettled/{call}`) or
//! by the policy's `on_unsettled`, as a `call_settled` note in the log, before the session may
//! run again. The resumed run's first prompt tells the model how each was settled
//! ([`Daemon::unsettled_note`]).

use switchboard_session::unsettled::{note_for_model, OpenCalls, Settle, UnsettledCall};
use switchboard_session::OnUnsettled;

use super::*;

/// Events read per page.
const PAGE: usize = 2000;

/// The longest note a person gives a settled call.
const MAX_NOTE_CHARS: usize = 2000;

/// A `call_settled` note, as the log keeps it.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct SettledNote {
    event: String,
    tool_use_id: String,
    tool_name: String,
    input: Value,
    settle: Settle,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    note: Option<String>,
    by: String,
}

impl Daemon {
    /// The seq of the last run's `started` event (0 when the log has none).
    async fn last_start(&self, id: &str) -> Result<u64, DaemonError> {
        let mut before = self.store.last_seq(id).await? + 1;
        loop {
            let page = self.store.events_before(id, before, PAGE).await?;
            let Some(first) = page.first() else { return Ok(0) };
            if let Some(started) = page.iter().rev().find(|event| event.kind == "started") {
                return Ok(started.seq);
            }
            before = first.seq;
        }
    }

    /// The last run's calls, open (not yet settled) and settled, with their notes.
    async fn run_calls(
        &self,
        id: &str,
    ) -> Result<(Vec<UnsettledCall>, Vec<(UnsettledCall, Settle, Option<String>)>), DaemonError>
    {
        let mut after = self.last_start(id).await?.saturating_sub(1);
        let mut open = OpenCalls::new();
        let mut settled = Vec::new();
        loop {
            let page = self.store.events_after(id, after, PAGE).await?;
            let Some(last) = page.last() else { break };
            after = last.seq;
            for stored in &page {
                if stored.kind == "call_settled" {
                    if let Ok(note) = serde_json::from_str::<SettledNote>(&stored.payload) {
                        open.settled(&note.tool_use_id);
                        let call = UnsettledCall {
                            tool_use_id: note.tool_use_id,
                            tool_name: note.tool_name,
                            input: note.input,
                            seq: stored.seq,
                        };
                        settled.push((call, note.settle, note.note));
                    }
                    continue;
                }
                if let Ok(event) = SessionEvent::from_stored(&stored.kind, &stored.payload) {
                    open.read(stored.seq, &event);
                }
            }
            if page.len() < PAGE {
                break;
            }
        }
        Ok((open.open(), settled))
    }

    /// The calls session `id`'s last run started and never answered, not yet settled; none
    /// while it runs (its calls are in flight, not cut off).
    pub async fn unsettled(&self, id: &str) -> Result<Vec<UnsettledCall>, DaemonError> {
        self.run_ending(id).await;
        self.unsettled_now(id).await
    }

    /// [`Daemon::unsettled`] as things are, with no wait for a run that is ending: for callers
    /// holding `record_writes`, which that run's end takes.
    async fn unsettled_now(&self, id: &str) -> Result<Vec<UnsettledCall>, DaemonError> {
        if self.handle(id).is_ok() {
            return Ok(Vec::new());
        }
        let record = self
            .store
            .get_session(id)
            .await?
            .ok_or_else(|| DaemonError::NotFound(id.to_owned()))?;
        // Running somewhere (another node, a terminal's or a followed session's own process):
        // its calls are in flight, not cut off.
        if !record.state.is_final() && !self.node_lost(&record) {
            return Ok(Vec::new());
        }
        Ok(self.run_calls(id).await?.0)
    }

    /// Settles call `tool_use_id` of stopped session `id` as `settle` (with `note`), by `by`;
    /// the calls still unsettled.
    pub async fn settle_call(
        &self,
        id: &str,
        tool_use_id: &str,
        settle: Settle,
        note: Option<String>,
        by: &str,
    ) -> Result<Vec<UnsettledCall>, DaemonError> {
        self.run_ending(id).await;
        if self.handle(id).is_ok() {
            return Err(DaemonError::AlreadyRunning(id.to_owned()));
        }
        if note.as_ref().is_some_and(|note| note.chars().count() > MAX_NOTE_CHARS) {
            return Err(DaemonError::Invalid(format!("note: at most {MAX_NOTE_CHARS} characters")));
        }
        let _writing = self.record_writes.lock().await;
        let open = self.unsettled_now(id).await?;
        let Some(call) = open.iter().find(|call| call.tool_use_id == tool_use_id) else {
            return Err(DaemonError::NotFound(format!(
                "session {id} has no unsettled call {tool_use_id}"
            )));
        };
        self.note_settled(id, call, settle, note, by).await?;
        Ok(open.into_iter().filter(|call| call.tool_use_id != tool_use_id).collect())
    }

    async fn note_settled(
        &self,
        id: &str,
        call: &UnsettledCall,
        settle: Settle,
        note: Option<String>,
        by: &str,
    ) -> Result<(), DaemonError> {
        let payload = SettledNote {
            event: "call_settled".to_owned(),
            tool_use_id: call.tool_use_id.clone(),
            tool_name: call.tool_name.clone(),
            input: call.input.clone(),
            settle,
            note,
            by: by.to_owned(),
        };
        let payload = serde_json::to_string(&payload)
            .map_err(|error| DaemonError::Internal(error.to_string()))?;
        let seq = self.store.last_seq(id).await? + 1;
        let note = event_record(id, seq, "switchboard", "call_settled", payload);
        self.store.append(std::slice::from_ref(&note)).await?;
        tracing::info!(session = %id, call = %call.tool_use_id, ?settle, by, "an unsettled call settled");
        Ok(())
    }

    /// Before a resume: the last run's unsettled calls settled as `policy` says (`ask`: refused
    /// while any is open, naming them), and what the resumed CLI is told of them all.
    pub(super) async fn unsettled_note(
        &self,
        id: &str,
        policy: OnUnsettled,
    ) -> Result<Option<String>, DaemonError> {
        let (open, mut settled) = self.run_calls(id).await?;
        if !open.is_empty() {
            let settle = match policy {
                OnUnsettled::Ask => {
                    let calls: Vec<String> = open
                        .iter()
                        .map(|call| {
                            format!(
                                "{} {} `{}`",
                                call.tool_use_id,
                                call.tool_name,
                                switchboard_session::policy::trial::summary(
                                    &call.tool_name,
                                    &call.input
                                )
                            )
                        })
                        .collect();
                    return Err(DaemonError::Unsettled(format!(
                        "session {id}'s last run ended while {} tool call{} ran, whose outcome is unknown: {}; settle each first (POST /api/sessions/{id}/unsettled/CALL with \"settle\": \"interrupted\" or \"done\"), or give its policy on_unsettled",
                        open.len(),
                        if open.len() == 1 { "" } else { "s" },
                        calls.join("; ")
                    )));
                }
                OnUnsettled::Interrupted => Settle::Interrupted,
                OnUnsettled::Done => Settle::Done,
            };
            for call in open {
                self.note_settled(id, &call, settle, None, "the policy (on_unsettled)").await?;
                settled.push((call, settle, None));
            }
        }
        Ok(note_for_model(&settled))
    }
}
