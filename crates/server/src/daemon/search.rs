//! The search index's part of the daemon (`crate::search`): the after-store observer that
//! hands what each stored batch holds to the index, the one writer a node that writes it, the
//! rebuild from the log of what the index misses, and the answers to a search and a blame.
//!
//! - **As events are stored**, the pump's finder reads their updates ([`super::pump`]), and
//!   [`Indexing`] adds the session's facts and queues the entries with the session's mark (its
//!   last event read); a run's end moves the mark to its last event ([`run_ended`]). The writer
//!   takes whatever waits, in one write. A write never holds the pump: what waits is bounded
//!   ([`MAX_WAITING`]); past that, and when a write fails, a session's entries are left to the
//!   next rebuild and its mark stays where it was. A session whose mark is behind its log (its
//!   daemon killed while it ran) is read again at the next start.
//! - **At start**, every session this node may write whose mark is behind its log is read
//!   again from the log, one at a time, in the background: entries already kept are kept once.
//!   The store's own sessions only: one another node runs is that node's to index.
//! - **A session taken over** from a lost node is read again the same way as it resumes here
//!   ([`Daemon::reindex_taken_over`]): the lost node may have stored events it never indexed.

use std::collections::HashSet;

use switchboard_store::SearchEntry;

use super::*;
use crate::search::finder::{Facts, Finder};

/// Entries waiting for the writer at most; past it a session's new entries wait for a rebuild.
const MAX_WAITING: usize = 50_000;

/// Bytes of entries waiting for the writer at most (their texts, what they wrote, their
/// commands and paths), likewise.
const MAX_WAITING_BYTES: usize = 64 * 1024 * 1024;

/// Entries one write holds at most (the rebuild's and the live writer's): a write never holds
/// the store's writer for long.
const WRITE_CHUNK: usize = 500;

/// The longest path, line or tail blame reads (bytes).
const MAX_BLAME_INPUT: usize = 4096;

/// Events a rebuild reads from the log at once: few, as a rebuild runs beside everything else
/// at start and an event may be large (an image).
const REBUILD_PAGE: usize = 100;

/// Hands each stored batch's entries to the index.
pub(super) struct Indexing;

impl Observer for Indexing {
    fn stored<'a>(&'a self, daemon: &'a Arc<Daemon>, s: &'a Stored<'a>) -> Option<Waiting<'a>> {
        // A batch with nothing to find costs nothing here (most: a text delta, a state); the
        // session's mark moves with its next entries, or when its run ends.
        if s.found.is_empty() {
            return None;
        }
        let mut entries = s.found.clone();
        Facts::of(&s.live.record.lock()).apply(&mut entries);
        daemon.indexer.add(s.id, entries, s.before + s.batch.len() as u64);
        None
    }
}

/// Session `id` was deleted: what waits of it is dropped (its entries in the index go with
/// it in the store).
pub(super) fn forget(daemon: &Daemon, id: &str) {
    daemon.indexer.forget(id);
}

/// A run's pump ended with its log read up to `last`: the session's mark moves there (its
/// index is whole, and a start need not read it again).
pub(super) fn run_ended(daemon: &Daemon, id: &str, last: u64) {
    daemon.indexer.add(id, Vec::new(), last);
}

/// What waits for the index's writer.
#[derive(Default)]
struct Pending {
    entries: Vec<SearchEntry>,
    /// The entries' bytes ([`size_of`]).
    bytes: usize,
    marks: HashMap<String, u64>,
    /// Sessions whose entries were left out (too many waited, or a write failed): their marks
    /// stay until a rebuild.
    behind: HashSet<String>,
    /// Sessions whose index is whole up to the events this node stores of them: made on this
    /// node, or read again by the rebuild here. Only their marks move as events are stored; a
    /// session resumed here before the rebuild read it (or taken over from a lost node, whose
    /// last entries may never have been written) keeps its mark where it was, for the next
    /// rebuild to read from.
    whole: HashSet<String>,
}

/// What an entry holds, about.
fn size_of(entry: &SearchEntry) -> usize {
    256 + entry.text.len()
        + entry.written.as_ref().map_or(0, String::len)
        + entry.command.as_ref().map_or(0, String::len)
        + entry.paths.iter().map(|touched| touched.path.len()).sum::<usize>()
}

/// The index's queue and its state (one a daemon).
pub(super) struct Indexer {
    pending: Mutex<Pending>,
    wake: Arc<Notify>,
    /// Sessions the rebuild at start has still to read.
    rebuilding: std::sync::atomic::AtomicUsize,
    /// Sessions taken over from a lost node being read again ([`Daemon::reindex_taken_over`]).
    rereading: std::sync::atomic::AtomicUsize,
    /// Whether the rebuild is done and nothing waits or is being written: the index holds
    /// every stored event's entries (but those left behind). Changed under `pending`'s lock.
    settled: watch::Sender<bool>,
}

impl Default for Indexer {
    fn default() -> Self {
        Indexer {
            pending: Mutex::default(),
            wake: Arc::new(Notify::new()),
            // The rebuild at start has not counted its sessions yet.
            rebuilding: std::sync::atomic::AtomicUsize::new(1),
            rereading: std::sync::atomic::AtomicUsize::new(0),
            settled: watch::channel(false).0,
        }
    }
}

impl Indexer {
    /// Queues a batch's entries and (for a session whose index is whole) its session's mark.
    fn add(&self, id: &str, entries: Vec<SearchEntry>, mark: u64) {
        let mut pending = self.pending.lock();
        if pending.behind.contains(id) {
            return;
        }
        let bytes: usize = entries.iter().map(size_of).sum();
        if pending.entries.len() + entries.len() > MAX_WAITING
            || pending.bytes + bytes > MAX_WAITING_BYTES
        {
            tracing::warn!(session = %id, "the search index falls behind; this session's entries wait for a rebuild at the next start");
            pending.left_behind(id);
            return;
        }
        pending.entries.extend(entries);
        pending.bytes += bytes;
        if pending.whole.contains(id) {
            pending.marks.insert(id.to_owned(), mark);
        }
        self.settled.send_if_modified(|settled| std::mem::replace(settled, false));
        drop(pending);
        self.wake.notify_one();
    }

    /// Session `id` was made on this node: its index is whole from its first event.
    pub(super) fn made(&self, id: &str) {
        self.pending.lock().whole.insert(id.to_owned());
    }

    /// Session `id` was deleted: nothing of it is written any more.
    pub(super) fn forget(&self, id: &str) {
        let mut pending = self.pending.lock();
        pending.entries.retain(|entry| entry.session_id != id);
        pending.bytes = pending.entries.iter().map(size_of).sum();
        pending.marks.remove(id);
        pending.whole.remove(id);
        pending.behind.remove(id);
    }

    /// How many sessions the index misses a part of now: the rebuild's still to read, and
    /// those left behind since.
    pub(super) fn behind(&self) -> usize {
        self.rebuilding.load(std::sync::atomic::Ordering::Relaxed)
            + self.rereading.load(std::sync::atomic::Ordering::Relaxed)
            + self.pending.lock().behind.len()
    }
}

impl Pending {
    /// Session `id` misses entries now: its mark stays where it was, for the next rebuild.
    fn left_behind(&mut self, id: &str) {
        self.behind.insert(id.to_owned());
        self.marks.remove(id);
        self.whole.remove(id);
    }
}

/// The index's one writer a node: whatever waits goes in, [`WRITE_CHUNK`] entries a write, the
/// marks with the last.
pub(super) async fn write_index(daemon: std::sync::Weak<Daemon>) {
    loop {
        let Some(me) = daemon.upgrade() else { return };
        let (entries, marks) = {
            let mut pending = me.indexer.pending.lock();
            pending.bytes = 0;
            let taken = (std::mem::take(&mut pending.entries), std::mem::take(&mut pending.marks));
            if taken.0.is_empty()
                && taken.1.is_empty()
                && me.indexer.rebuilding.load(std::sync::atomic::Ordering::Relaxed) == 0
                && me.indexer.rereading.load(std::sync::atomic::Ordering::Relaxed) == 0
            {
                me.indexer.settled.send_if_modified(|settled| !std::mem::replace(settled, true));
            }
            taken
        };
        if entries.is_empty() && marks.is_empty() {
            let wake = me.indexer.wake.clone();
            drop(me);
            // Woken by the next batch (a wake given meanwhile is kept for this wait), or looks
            // again now and then to see the daemon gone.
            let _ = tokio::time::timeout(Duration::from_secs(5), wake.notified()).await;
            continue;
        }
        let Some(index) = me.store.search_index() else { return };
        let marks: Vec<(String, u64)> = marks.into_iter().collect();
        let mut chunks: Vec<&[SearchEntry]> = entries.chunks(WRITE_CHUNK).collect();
        if chunks.is_empty() {
            // Marks alone.
            chunks.push(&[]);
        }
        let last = chunks.len() - 1;
        for (number, chunk) in chunks.iter().enumerate() {
            let with = if number == last { &marks[..] } else { &[] };
            if let Err(error) = index.index(chunk, with).await {
                tracing::warn!(%error, "the search index could not be written; its sessions wait for a rebuild at the next start");
                let mut pending = me.indexer.pending.lock();
                let missed = chunks[number..]
                    .iter()
                    .flat_map(|chunk| chunk.iter())
                    .map(|entry| entry.session_id.as_str());
                for id in
                    missed.chain(marks.iter().map(|(id, _)| id.as_str())).collect::<HashSet<_>>()
                {
                    pending.left_behind(id);
                }
                break;
            }
        }
    }
}

/// Reads again from the log what the index misses of each session this node may write (see
/// the module's notes), one session at a time.
pub(super) async fn rebuild_index(daemon: std::sync::Weak<Daemon>) {
    // However it ends, the writer looks again: with nothing left, the index is settled.
    let _wake = WakeOnDrop(daemon.clone());
    let Some(me) = daemon.upgrade() else { return };
    let Some(index) = me.store.search_index() else { return };
    let (marks, sessions) = match (index.marks().await, me.store.list_sessions().await) {
        (Ok(marks), Ok(sessions)) => (marks, sessions),
        (Err(error), _) | (_, Err(error)) => {
            tracing::warn!(%error, "the search index's rebuild could not start");
            return;
        }
    };
    let mine: Vec<SessionRecord> = sessions
        .into_iter()
        .filter(|record| record.node.is_none() || record.node == me.config.node)
        .collect();
    me.indexer.rebuilding.store(mine.len(), std::sync::atomic::Ordering::Relaxed);
    drop(me);
    let mut read = 0;
    for record in mine {
        let Some(me) = daemon.upgrade() else { return };
        let mark = marks.get(&record.id).copied().unwrap_or(0);
        match me.rebuild_session(&record, mark, None).await {
            Ok(events) => {
                read += events;
                me.indexer.pending.lock().whole.insert(record.id.clone());
            }
            Err(error) => {
                tracing::warn!(session = %record.id, %error, "the search index of a session could not be rebuilt");
                me.indexer.pending.lock().left_behind(&record.id);
            }
        }
        me.indexer.rebuilding.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
    if read > 0 {
        tracing::info!(events = read, "the search index was rebuilt from the log");
    }
}

/// Counts a session taken over as read once dropped (read, or failed), and wakes the writer.
struct Reread(std::sync::Weak<Daemon>);

impl Drop for Reread {
    fn drop(&mut self) {
        if let Some(daemon) = self.0.upgrade() {
            daemon.indexer.rereading.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
            daemon.indexer.wake.notify_one();
        }
    }
}

/// Wakes the index's writer when dropped (the rebuild ends, or fails).
struct WakeOnDrop(std::sync::Weak<Daemon>);

impl Drop for WakeOnDrop {
    fn drop(&mut self) {
        if let Some(daemon) = self.0.upgrade() {
            daemon.indexer.rebuilding.store(0, std::sync::atomic::Ordering::Relaxed);
            daemon.indexer.wake.notify_one();
        }
    }
}

impl Daemon {
    /// Reads again, in the background, what the index misses of session `record`, taken over
    /// from a lost node as it resumes here, up to `last`, the last event that node stored (its
    /// entries name that node); its index is whole on this node after.
    pub(super) fn reindex_taken_over(self: &Arc<Self>, record: SessionRecord, last: u64) {
        {
            // Not settled again until it is read (the writer says when, under this lock).
            let _pending = self.indexer.pending.lock();
            self.indexer.rereading.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            self.indexer.settled.send_replace(false);
        }
        let daemon = Arc::downgrade(self);
        tokio::spawn(async move {
            let _done = Reread(daemon.clone());
            let Some(me) = daemon.upgrade() else { return };
            let Some(index) = me.store.search_index() else { return };
            let read = match index.marks().await {
                Ok(marks) => {
                    let mark = marks.get(&record.id).copied().unwrap_or(0);
                    me.rebuild_session(&record, mark, Some(last)).await
                }
                Err(error) => Err(error.into()),
            };
            match read {
                Ok(events) => {
                    me.indexer.pending.lock().whole.insert(record.id.clone());
                    if events > 0 {
                        tracing::info!(session = %record.id, events, "a session taken over was indexed again from its log");
                    }
                }
                Err(error) => {
                    tracing::warn!(session = %record.id, %error, "the search index of a session taken over could not be read again");
                    me.indexer.pending.lock().left_behind(&record.id);
                }
            }
        });
    }

    /// Returns once the index is settled: the rebuild at start is done, and every stored
    /// event's entries are written (but those left behind; see the module's notes).
    pub async fn search_settled(&self) {
        let mut settled = self.indexer.settled.subscribe();
        let _ = settled.wait_for(|settled| *settled).await;
    }

    /// Reads session `record`'s log again from its start, indexing what follows `mark` up to
    /// `last` (`None`: its last event now); how many events it read (0: its index was whole).
    async fn rebuild_session(
        &self,
        record: &SessionRecord,
        mark: u64,
        last: Option<u64>,
    ) -> Result<u64, DaemonError> {
        let last = match last {
            Some(last) => last,
            None => self.store.last_seq(&record.id).await?,
        };
        if last <= mark {
            return Ok(0);
        }
        let Some(index) = self.store.search_index() else { return Ok(0) };
        let facts = Facts::of(record);
        let mut finder = Finder::new(record.launch.model.clone());
        let mut viewer = crate::view::Viewer::new();
        let mut entries = Vec::new();
        let mut position = 0;
        while position < last {
            let page = self.store.events_after(&record.id, position, REBUILD_PAGE).await?;
            let Some(end) = page.last().map(|record| record.seq) else { break };
            for event in page.iter().filter(|event| event.seq <= last) {
                viewer.apply(event, &mut |update| {
                    if let crate::view::ViewUpdate::Session(update) = update {
                        if event.seq > mark {
                            finder.note(event.seq, event.ts_ms, &update, &mut entries);
                        }
                    }
                });
            }
            position = end;
            if entries.len() >= WRITE_CHUNK || position >= last {
                facts.apply(&mut entries);
                let read_to = position.min(last);
                index.index(&entries, &[(record.id.clone(), read_to)]).await?;
                entries.clear();
            }
        }
        Ok(last - mark)
    }

    /// Answers query `text` (see [`crate::search::query`]): a page of `limit` hits before
    /// `before` (an [`Answer::next`](crate::search::Answer::next)), or its groups. Hits of
    /// sessions deleted since they were indexed are left out. What every face answers.
    pub async fn search_answer(
        &self,
        text: &str,
        limit: Option<usize>,
        before: Option<&str>,
    ) -> Result<crate::search::Answer, DaemonError> {
        use crate::search::{query, Answer, Hit, DEFAULT_HITS};
        let query::Asked { mut query, group } = query::parse(text).map_err(DaemonError::Invalid)?;
        query.limit = limit.unwrap_or(DEFAULT_HITS).clamp(1, switchboard_store::search::MAX_HITS);
        query.before = match before.filter(|before| !before.is_empty()) {
            Some(before) => Some(switchboard_store::Cursor::parse(before).ok_or_else(|| {
                DaemonError::Invalid(format!("before: {before:?} is not a page's `next`"))
            })?),
            None => None,
        };
        let behind = self.search_behind();
        if let Some(by) = group {
            let groups = self.search_index()?.group(&query, by).await?;
            return Ok(Answer { hits: Vec::new(), next: None, groups: Some(groups), behind });
        }
        let found = self.search_index()?.search(&query).await?;
        let next =
            found.last().filter(|_| found.len() == query.limit).map(|hit| hit.cursor().to_text());
        let mut titles: HashMap<String, Option<Option<String>>> = HashMap::new();
        let mut hits = Vec::with_capacity(found.len());
        for hit in found {
            let id = hit.entry.session_id.clone();
            let title = match titles.get(&id) {
                Some(known) => known.clone(),
                None => {
                    let known = self.record(&id).await?.map(|record| record.title);
                    titles.insert(id, known.clone());
                    known
                }
            };
            // `None`: the session is gone.
            if let Some(title) = title {
                hits.push(Hit { hit, title });
            }
        }
        Ok(Answer { hits, next, groups: None, behind })
    }

    /// The last tool call that wrote `line` into `path` ([`crate::search::blame`]).
    pub async fn blame(
        &self,
        path: &str,
        line: &str,
    ) -> Result<Option<crate::search::Blamed>, DaemonError> {
        if line.trim().is_empty() {
            return Err(DaemonError::Invalid(
                "the line is blank: blame names who wrote a line with something on it".into(),
            ));
        }
        Ok(crate::search::blame(self.search_index()?, path, line).await?)
    }

    /// What blame answers for `line` of file `path` (absolute), trying `tail` (the file's
    /// path in its repository) when no call wrote `path` itself.
    pub async fn blame_answer(
        &self,
        path: &str,
        line: &str,
        tail: Option<&str>,
    ) -> Result<crate::search::BlameAnswer, DaemonError> {
        for (name, text) in [("path", path), ("line", line), ("tail", tail.unwrap_or_default())] {
            if text.len() > MAX_BLAME_INPUT {
                return Err(DaemonError::Invalid(format!(
                    "{name} is {} bytes; at most {MAX_BLAME_INPUT}",
                    text.len()
                )));
            }
            if text.chars().any(|c| c.is_control() && c != '\t') {
                return Err(DaemonError::Invalid(format!("{name} holds a control character")));
            }
        }
        if !path.starts_with('/') {
            return Err(DaemonError::Invalid(format!("path: {path:?} is not an absolute path")));
        }
        let mut found = self.blame(path, line).await?;
        if let (None, Some(tail)) = (&found, tail.filter(|tail| !tail.trim_matches('/').is_empty()))
        {
            found = self.blame(tail, line).await?;
        }
        if let Some(found) = found.as_mut() {
            found.title =
                self.record(&found.call.entry.session_id).await?.and_then(|record| record.title);
        }
        Ok(crate::search::BlameAnswer { found })
    }

    /// How many sessions the index misses a part of now (being rebuilt, or left behind).
    pub fn search_behind(&self) -> usize {
        self.indexer.behind()
    }

    fn search_index(&self) -> Result<&dyn switchboard_store::Search, DaemonError> {
        self.store
            .search_index()
            .ok_or_else(|| DaemonError::Invalid("this store keeps no search index".into()))
    }
}
