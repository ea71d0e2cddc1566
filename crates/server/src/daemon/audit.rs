//! The audit trail's part of the daemon (`crate::audit`): writing a record at the end of the
//! trail, reading it back, checking it whole, and the after-store observer that records each
//! decision and each session's start and end as they are stored.

use super::*;
use crate::audit::{AuditEntry, AuditRecord, Broken, Verified, AUDIT_LOG, GENESIS};

/// How many times a record is placed again when another node took its place first.
const AUDIT_RETRIES: usize = 16;

/// Records each stored decision, and a session's end (a run's start is recorded as its
/// `started` event is written: `Daemon::note_started`).
pub(super) struct Audits;

impl Observer for Audits {
    fn stored<'a>(&'a self, daemon: &'a Arc<Daemon>, s: &'a Stored<'a>) -> Option<Waiting<'a>> {
        let mut entries = Vec::new();
        for event in s.batch {
            match event {
                SessionEvent::PermissionDecided {
                    request_id,
                    tool_name,
                    behavior,
                    by,
                    origin,
                    tool_use_id,
                    ..
                } => {
                    entries.push(AuditEntry::Decision {
                        session: s.id.to_owned(),
                        origin: origin.as_ref().map(ToString::to_string),
                        tool: tool_name.clone(),
                        tool_use_id: tool_use_id.clone(),
                        decision: behavior.as_str().to_owned(),
                        by: by.clone(),
                        request_id: request_id.clone(),
                    });
                }
                SessionEvent::State { to, .. }
                    if matches!(to, SessionState::Exited | SessionState::Crashed) =>
                {
                    entries.push(AuditEntry::SessionEnded {
                        session: s.id.to_owned(),
                        state: to.as_str().to_owned(),
                    });
                }
                _ => {}
            }
        }
        if entries.is_empty() {
            return None;
        }
        Some(Box::pin(async move {
            for entry in entries {
                daemon.audit(entry).await;
            }
        }))
    }
}

impl Daemon {
    /// Records the start of a run of session `id`'s CLI (`resumed`: not its first).
    pub(super) async fn audit_started(&self, id: &str, resumed: bool) {
        // The record is in the store before the run's `started` event is written.
        let record = self.store.get_session(id).await.ok().flatten();
        let cwd = record.as_ref().map(|record| record.cwd.clone()).unwrap_or_default();
        let started_by = record
            .and_then(|record| record.launch.origin)
            .map(|origin| format!("token {} ({})", origin.token, origin.face.as_str()));
        let entry = AuditEntry::SessionStarted { session: id.to_owned(), cwd, started_by, resumed };
        self.audit(entry).await;
    }

    /// Writes `entry` at the end of the trail, chained to the record before. One at a time on
    /// this node; a place another node took first is read again and the record placed after
    /// it. A trail the store cannot take is logged (the action it records went on).
    pub async fn audit(&self, entry: AuditEntry) {
        let mut head = self.audit_head.lock().await;
        for _ in 0..AUDIT_RETRIES {
            let (seq, prev) = match head.clone() {
                Some(known) => known,
                None => match self.audit_tail().await {
                    Ok(tail) => tail,
                    Err(error) => {
                        tracing::error!(%error, kind = entry.kind(), "cannot read the audit trail's end; the record is not written");
                        return;
                    }
                },
            };
            let record = AuditRecord::new(
                seq + 1,
                self.clock_ms(),
                self.config.node.clone(),
                entry.clone(),
                prev,
            );
            let payload = match serde_json::to_string(&record) {
                Ok(payload) => payload,
                Err(error) => {
                    tracing::error!(%error, "cannot write an audit record");
                    return;
                }
            };
            let event = pump::event_record(AUDIT_LOG, record.seq, "switchboard", "audit", payload);
            match self.store.append(std::slice::from_ref(&event)).await {
                Ok(()) => {
                    *head = Some((record.seq, record.hash));
                    return;
                }
                // Another node wrote first: read the end again.
                Err(StoreError::OutOfSequence { .. }) => *head = None,
                Err(error) => {
                    *head = None;
                    tracing::error!(%error, kind = entry.kind(), "cannot write an audit record");
                    return;
                }
            }
        }
        tracing::error!(
            kind = entry.kind(),
            "the audit trail's end kept moving; the record is not written"
        );
    }

    /// The trail's last record's place and hash (`0` and [`GENESIS`] when it is empty).
    async fn audit_tail(&self) -> Result<(u64, String), DaemonError> {
        let last = self.store.last_seq(AUDIT_LOG).await?;
        if last == 0 {
            return Ok((0, GENESIS.to_owned()));
        }
        let record = self.audit_page(last - 1, 1).await?.pop().ok_or_else(|| {
            DaemonError::Internal(format!("audit record {last} is not in the store"))
        })?;
        Ok((record.seq, record.hash))
    }

    /// Up to `limit` records of the trail after record `after`, in order.
    pub async fn audit_page(
        &self,
        after: u64,
        limit: usize,
    ) -> Result<Vec<AuditRecord>, DaemonError> {
        let events = self.store.events_after(AUDIT_LOG, after, limit).await?;
        events
            .iter()
            .map(|event| {
                let mut record: AuditRecord =
                    serde_json::from_str(&event.payload).map_err(|error| {
                        DaemonError::Internal(format!(
                            "audit record {} cannot be read: {error}",
                            event.seq
                        ))
                    })?;
                // Its place is the store's: a record moved shows as not following.
                record.seq = event.seq;
                Ok(record)
            })
            .collect()
    }

    /// Checks the whole trail as the store holds it, page by page.
    pub async fn audit_verify(&self) -> Result<Result<Verified, Broken>, DaemonError> {
        const PAGE: usize = 1000;
        let mut chain = crate::audit::Chain::default();
        let mut after = 0;
        loop {
            let page = self.audit_page(after, PAGE).await?;
            for record in &page {
                if let Err(broken) = chain.follow(record) {
                    return Ok(Err(broken));
                }
            }
            match page.last() {
                Some(last) if page.len() == PAGE => after = last.seq,
                _ => return Ok(Ok(chain.verified())),
            }
        }
    }
}
