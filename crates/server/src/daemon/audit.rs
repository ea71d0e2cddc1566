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
                        why: None,
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
        let max_budget_usd = record.as_ref().and_then(|record| record.launch.max_budget_usd);
        let relayed = record
            .as_ref()
            .is_some_and(|record| record.launch.transport == Some(TransportKind::Relay));
        let started_by = match record.and_then(|record| record.launch.origin) {
            Some(origin) => Some(format!("token {} ({})", origin.token, origin.face.as_str())),
            // A CLI that connected to the relay endpoint on its own, with the ingress token.
            None if relayed => Some("relay CLI (ingress token)".to_owned()),
            None => None,
        };
        let entry = AuditEntry::SessionStarted {
            session: id.to_owned(),
            cwd,
            started_by,
            resumed,
            max_budget_usd,
        };
        self.audit(entry).await;
    }

    /// Records that session `id` ended for `why`, where no `exited` or `crashed` state of its
    /// CLI says so (the daemon stopped, its node was lost, a relay CLI moved on).
    pub(super) async fn audit_ended(&self, id: &str, why: String) {
        let entry = AuditEntry::SessionEnded {
            session: id.to_owned(),
            state: "exited".into(),
            why: Some(why),
        };
        self.audit(entry).await;
    }

    /// Writes `entry` at the end of the trail, chained to the record before, and returns once
    /// it is written (or could not be: that is logged; the action it records went on). The
    /// trail's one writer ([`write_audit`]) does the writing, so a caller that goes away (a
    /// client that hung up) does not take the record with it.
    pub async fn audit(&self, entry: AuditEntry) {
        let (done, written) = tokio::sync::oneshot::channel();
        if self.audit_queue.send(AuditWaiting { entry, done }).is_ok() {
            let _ = written.await;
        }
    }

    /// Writes `batch` at the end of the trail, in one append, after `head` (the last record
    /// this node wrote, or read when `None`). A place another node took first is read again.
    async fn write_audit_batch(&self, head: &mut Option<(u64, String)>, batch: &[AuditEntry]) {
        for _ in 0..AUDIT_RETRIES {
            let (seq, prev) = match head.clone() {
                Some(known) => known,
                None => self.audit_tail().await,
            };
            let (mut at, mut prev_hash) = (seq, prev);
            let mut records = Vec::with_capacity(batch.len());
            for entry in batch {
                at += 1;
                let record = AuditRecord::new(
                    at,
                    self.clock_ms(),
                    self.config.node.clone(),
                    entry.clone(),
                    prev_hash,
                );
                prev_hash = record.hash.clone();
                let Ok(payload) = serde_json::to_string(&record) else {
                    tracing::error!(kind = entry.kind(), "cannot write an audit record");
                    return;
                };
                records.push(pump::event_record(AUDIT_LOG, at, "switchboard", "audit", payload));
            }
            match self.store.append(&records).await {
                Ok(()) => {
                    *head = Some((at, prev_hash));
                    return;
                }
                // Another node wrote first: read the end again.
                Err(StoreError::OutOfSequence { .. }) => *head = None,
                Err(error) => {
                    *head = None;
                    tracing::error!(%error, records = batch.len(), "cannot write audit records; they are lost");
                    return;
                }
            }
        }
        tracing::error!(records = batch.len(), "the audit trail's end kept moving; records lost");
    }

    /// The trail's last record's place and hash (`0` and [`GENESIS`] when it is empty). A
    /// last record that cannot be read (removed, or not a record) is followed by the next
    /// record with a `prev` that names the problem (`broken:…`), so the break shows where it
    /// is and the trail goes on.
    async fn audit_tail(&self) -> (u64, String) {
        let last = match self.store.last_seq(AUDIT_LOG).await {
            Ok(last) => last,
            Err(error) => {
                tracing::error!(%error, "cannot read the audit trail's end");
                return (0, GENESIS.to_owned());
            }
        };
        if last == 0 {
            return (0, GENESIS.to_owned());
        }
        match self.audit_page(last - 1, 1).await {
            Ok(mut page) if page.last().is_some_and(|record| record.seq == last) => {
                let record = page.pop().unwrap_or_else(|| unreachable!());
                (record.seq, record.hash)
            }
            other => {
                let problem = match other {
                    Err(error) => error.to_string(),
                    Ok(_) => format!("record {last} is not in the store"),
                };
                tracing::error!(%problem, "the audit trail's last record cannot be read");
                (last, format!("broken:{problem}"))
            }
        }
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

    /// Checks the whole trail as the store holds it, page by page: from record 1 (records
    /// removed from the start show), to the last place the store has given (records removed
    /// from the end show, where the store keeps its sequences' heads apart from their events,
    /// as PostgreSQL does).
    pub async fn audit_verify(&self) -> Result<Result<Verified, Broken>, DaemonError> {
        const PAGE: usize = 1000;
        let last = self.store.last_seq(AUDIT_LOG).await?;
        let mut chain = crate::audit::Chain::whole();
        let mut after = 0;
        loop {
            let page = self.audit_page(after, PAGE).await?;
            for record in &page {
                if let Err(broken) = chain.follow(record) {
                    return Ok(Err(broken));
                }
            }
            match page.last() {
                Some(end) if page.len() == PAGE => after = end.seq,
                _ => break,
            }
        }
        let verified = chain.verified();
        if verified.head_seq < last {
            return Ok(Err(Broken {
                seq: verified.head_seq + 1,
                problem: format!(
                    "records {} to {last} are missing (the store has given places up to {last})",
                    verified.head_seq + 1
                ),
            }));
        }
        Ok(Ok(verified))
    }
}

/// One record waiting for the trail's writer, and who waits for it.
pub(super) struct AuditWaiting {
    entry: AuditEntry,
    done: tokio::sync::oneshot::Sender<()>,
}

/// The most records one append of the trail carries.
const AUDIT_BATCH: usize = 256;

/// The trail's one writer a node: whatever waits goes in one append, in order.
pub(super) async fn write_audit(
    daemon: std::sync::Weak<Daemon>,
    mut queue: mpsc::UnboundedReceiver<AuditWaiting>,
) {
    let mut head = None;
    while let Some(first) = queue.recv().await {
        let mut batch = vec![first];
        while batch.len() < AUDIT_BATCH {
            match queue.try_recv() {
                Ok(next) => batch.push(next),
                Err(_) => break,
            }
        }
        let Some(daemon) = daemon.upgrade() else { return };
        let entries: Vec<AuditEntry> = batch.iter().map(|waiting| waiting.entry.clone()).collect();
        daemon.write_audit_batch(&mut head, &entries).await;
        drop(daemon);
        for waiting in batch {
            let _ = waiting.done.send(());
        }
    }
}
