//! The in-memory store, for tests.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use crate::{EventRecord, SessionRecord, Store, StoreError};

/// Everything in a mutex. Lost when dropped.
#[derive(Debug, Default)]
pub struct MemoryStore {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    sessions: HashMap<String, SessionRecord>,
    events: HashMap<String, BTreeMap<u64, EventRecord>>,
    outbox: Vec<crate::OutboxItem>,
    next_outbox_id: u64,
    documents: HashMap<String, crate::Document>,
    search: crate::search::memory::Index,
    view_checkpoints: crate::view_checkpoints::Memory,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Inner>, StoreError> {
        self.inner
            .lock()
            .map_err(|_| StoreError::Database("the memory store's lock is poisoned".into()))
    }
}

#[async_trait::async_trait]
impl Store for MemoryStore {
    async fn create_session(&self, record: &SessionRecord) -> Result<(), StoreError> {
        let mut inner = self.lock()?;
        if inner.sessions.contains_key(&record.id) {
            return Err(StoreError::Database(format!("session {} already exists", record.id)));
        }
        inner.sessions.insert(record.id.clone(), record.clone());
        Ok(())
    }

    async fn update_session(&self, record: &SessionRecord) -> Result<(), StoreError> {
        let mut inner = self.lock()?;
        match inner.sessions.get_mut(&record.id) {
            Some(existing) if existing.node == record.node => {
                *existing = record.clone();
                Ok(())
            }
            Some(existing) => {
                Err(StoreError::Moved { id: record.id.clone(), node: existing.node.clone() })
            }
            None => Err(StoreError::NotFound(record.id.clone())),
        }
    }

    async fn claim_session(&self, claim: crate::Claim<'_>) -> Result<bool, StoreError> {
        let mut inner = self.lock()?;
        match inner.sessions.get_mut(claim.id) {
            Some(existing)
                if existing.node.as_deref() == claim.from
                    && existing.updated_ms == claim.seen_ms =>
            {
                existing.node = claim.to.map(str::to_owned);
                existing.updated_ms = claim.stamp_ms;
                Ok(true)
            }
            Some(_) => Ok(false),
            None => Err(StoreError::NotFound(claim.id.to_owned())),
        }
    }

    async fn get_session(&self, id: &str) -> Result<Option<SessionRecord>, StoreError> {
        Ok(self.lock()?.sessions.get(id).cloned())
    }

    async fn list_sessions(&self) -> Result<Vec<SessionRecord>, StoreError> {
        let mut sessions: Vec<SessionRecord> = self.lock()?.sessions.values().cloned().collect();
        sessions.sort_by(|a, b| b.updated_ms.cmp(&a.updated_ms).then_with(|| a.id.cmp(&b.id)));
        Ok(sessions)
    }

    async fn delete_session(&self, id: &str) -> Result<(), StoreError> {
        let mut inner = self.lock()?;
        inner.sessions.remove(id);
        inner.events.remove(id);
        inner.search.forget(id);
        inner.view_checkpoints.forget(id);
        Ok(())
    }

    async fn append(&self, events: &[EventRecord]) -> Result<(), StoreError> {
        let mut inner = self.lock()?;
        // Check the whole batch first: all or nothing.
        let mut next: HashMap<&str, u64> = HashMap::new();
        for event in events {
            let last = match next.get(event.session_id.as_str()) {
                Some(last) => *last,
                None => inner
                    .events
                    .get(&event.session_id)
                    .and_then(|log| log.keys().next_back().copied())
                    .unwrap_or(0),
            };
            if event.seq != last + 1 {
                return Err(StoreError::OutOfSequence {
                    session_id: event.session_id.clone(),
                    seq: event.seq,
                    last,
                });
            }
            next.insert(&event.session_id, event.seq);
        }
        for event in events {
            inner
                .events
                .entry(event.session_id.clone())
                .or_default()
                .insert(event.seq, event.clone());
        }
        Ok(())
    }

    async fn events_after(
        &self,
        session_id: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<EventRecord>, StoreError> {
        let inner = self.lock()?;
        let Some(from) = after.checked_add(1) else { return Ok(Vec::new()) };
        Ok(inner
            .events
            .get(session_id)
            .map(|log| log.range(from..).take(limit).map(|(_, event)| event.clone()).collect())
            .unwrap_or_default())
    }

    async fn events_before(
        &self,
        session_id: &str,
        before: u64,
        limit: usize,
    ) -> Result<Vec<EventRecord>, StoreError> {
        let inner = self.lock()?;
        let Some(log) = inner.events.get(session_id) else { return Ok(Vec::new()) };
        let mut page: Vec<EventRecord> =
            log.range(..before).rev().take(limit).map(|(_, event)| event.clone()).collect();
        page.reverse();
        Ok(page)
    }

    async fn last_seq(&self, session_id: &str) -> Result<u64, StoreError> {
        Ok(self
            .lock()?
            .events
            .get(session_id)
            .and_then(|log| log.keys().next_back().copied())
            .unwrap_or(0))
    }

    async fn enqueue_outbox(&self, items: &[crate::NewOutboxItem]) -> Result<(), StoreError> {
        let mut inner = self.lock()?;
        for item in items {
            let waiting = inner
                .outbox
                .iter()
                .any(|queued| queued.channel == item.channel && queued.key == item.key);
            if !waiting {
                inner.next_outbox_id += 1;
                let id = inner.next_outbox_id;
                inner.outbox.push(crate::OutboxItem {
                    id,
                    channel: item.channel.clone(),
                    key: item.key.clone(),
                    body: item.body.clone(),
                    created_ms: crate::now_ms(),
                });
            }
        }
        Ok(())
    }

    async fn outbox(
        &self,
        channel: &str,
        limit: usize,
    ) -> Result<Vec<crate::OutboxItem>, StoreError> {
        Ok(self
            .lock()?
            .outbox
            .iter()
            .filter(|item| item.channel == channel)
            .take(limit)
            .cloned()
            .collect())
    }

    async fn outbox_done(&self, id: u64) -> Result<(), StoreError> {
        self.lock()?.outbox.retain(|item| item.id != id);
        Ok(())
    }

    async fn outbox_forget(&self, channel: &str) -> Result<(), StoreError> {
        self.lock()?.outbox.retain(|item| item.channel != channel);
        Ok(())
    }

    async fn outbox_channels(&self) -> Result<Vec<String>, StoreError> {
        let channels: std::collections::BTreeSet<String> =
            self.lock()?.outbox.iter().map(|item| item.channel.clone()).collect();
        Ok(channels.into_iter().collect())
    }

    fn search_index(&self) -> Option<&dyn crate::Search> {
        Some(self)
    }

    fn view_checkpoints(&self) -> Option<&dyn crate::ViewCheckpoints> {
        Some(self)
    }
}

#[async_trait::async_trait]
impl crate::ViewCheckpoints for MemoryStore {
    async fn put_view_checkpoint(
        &self,
        session_id: &str,
        checkpoint: &crate::ViewCheckpoint,
    ) -> Result<(), StoreError> {
        let mut inner = self.lock()?;
        if inner.sessions.contains_key(session_id) {
            inner.view_checkpoints.put(session_id, checkpoint);
        }
        Ok(())
    }

    async fn view_checkpoint(
        &self,
        session_id: &str,
        at: u64,
        format: &str,
    ) -> Result<Option<crate::ViewCheckpoint>, StoreError> {
        Ok(self.lock()?.view_checkpoints.nearest(session_id, at, format))
    }

    async fn view_checkpoint_marks(
        &self,
        format: &str,
    ) -> Result<HashMap<String, u64>, StoreError> {
        Ok(self.lock()?.view_checkpoints.marks(format))
    }
}

#[async_trait::async_trait]
impl crate::Documents for MemoryStore {
    async fn document(&self, name: &str) -> Result<Option<crate::Document>, StoreError> {
        Ok(self.lock()?.documents.get(name).cloned())
    }

    async fn put_document(&self, name: &str, text: &str, version: u64) -> Result<bool, StoreError> {
        let mut inner = self.lock()?;
        let current = inner.documents.get(name).map_or(0, |document| document.version);
        if current != version {
            return Ok(false);
        }
        let document = crate::Document { text: text.to_owned(), version: version + 1 };
        inner.documents.insert(name.to_owned(), document);
        Ok(true)
    }
}

#[async_trait::async_trait]
impl crate::Search for MemoryStore {
    async fn index(
        &self,
        entries: &[crate::SearchEntry],
        marks: &[(String, u64)],
    ) -> Result<(), StoreError> {
        self.lock()?.search.write(entries, marks);
        Ok(())
    }

    async fn marks(&self) -> Result<HashMap<String, u64>, StoreError> {
        Ok(self.lock()?.search.marks())
    }

    async fn search(
        &self,
        query: &crate::SearchQuery,
    ) -> Result<Vec<crate::SearchHit>, StoreError> {
        Ok(self.lock()?.search.search(query))
    }

    async fn group(
        &self,
        query: &crate::SearchQuery,
        by: crate::GroupBy,
    ) -> Result<Vec<crate::SearchGroup>, StoreError> {
        Ok(self.lock()?.search.group(query, by))
    }
}
