//! The durable event log. Every event of every session gets a per-session sequence number and
//! is appended here **before** anyone sees it; session records are projections of it.
//!
//! [`Store`] is the trait; [`SqliteStore`] is the embedded default (WAL, migrations, batched
//! writes on a dedicated writer thread); [`PostgresStore`] is one database shared by several
//! daemons; [`MemoryStore`] serves tests. All three pass `conformance::run` (the `conformance`
//! feature, for tests).
//!
//! The store treats payloads as opaque text: it never parses them.
//!
//! - A [`SessionRecord`]'s state is a [`RecordState`] (the CLI's states and `paused`; text in
//!   the database, read back checked); what it spent over all its runs, `spent_usd`, is a
//!   column of its own.
//! - `append` enforces each session's sequence (`last + 1`, atomically per batch);
//!   `append_shared` takes records the caller keeps (the daemon's pump hands the same `Arc`s
//!   to its live tail).
//! - The search index ([`search`]) is kept beside the log: entries the daemon made from the
//!   events it stored, found by what they did (a tool, a file, a decision, words).
//! - The notifications' outbox (`enqueue_outbox`, `outbox`, `outbox_done`: per channel, in
//!   order, a key queued once while it waits) is a plain table, written as records are.
//! - **Nodes.** A record carries the `node` that runs it (`None` on a daemon of its own). Only
//!   `claim_session` (a compare-and-set on `node` and `updated_ms` as the claimer read them:
//!   [`Claim::of`]) moves a session to another node, or re-takes it on its own, and
//!   `update_session` writes only while the stored record's node is the record's
//!   ([`StoreError::Moved`] otherwise): of two nodes taking a session over one wins, and a node
//!   that lost a session never writes it back. The conformance suite checks both.

use std::borrow::Cow;
use std::fmt;

use serde::{Deserialize, Serialize};

mod chunks;
#[cfg(feature = "conformance")]
pub mod conformance;
mod encoding;
mod journal;
mod launch;
mod memory;
mod postgres;
pub mod search;
mod sqlite;
mod view_checkpoints;

pub use chunks::{CHUNK_BYTES, CHUNK_EVENTS};
pub use journal::{FOLD_BYTES, FOLD_EVENTS, MAX_UNFOLDED, MAX_UNFOLDED_BYTES};
pub use launch::{Face, Launch, Origin, RunKind, RunOf, TransportKind, Worktree, HIDDEN};
pub use memory::MemoryStore;
pub use postgres::{
    PostgresOptions, PostgresStore, BUSY_FOR, CONNECT_LIMIT, GROUP_WAIT, POOL_SIZE, STATEMENT_LIMIT,
};
pub use search::{
    Cursor, EntryKind, GroupBy, Search, SearchEntry, SearchGroup, SearchHit, SearchQuery, Touched,
};
pub use sqlite::{
    SqliteOptions, SqliteStore, CHECKPOINT_INTERVAL, FOLD_INTERVAL, MAX_BATCH, READ_CONNECTIONS,
    SEGMENT_BYTES, WAL_RESTART_BYTES,
};
pub use view_checkpoints::{ViewCheckpoint, ViewCheckpoints};

/// The `dir` and `kind` most events carry, read back without an allocation each.
const COMMON_WORDS: &[&str] = &[
    "from_cli",
    "to_cli",
    "switchboard",
    "line",
    "state",
    "sent",
    "permission_requested",
    "permission_decided",
    "connected",
    "disconnected",
];

/// A `dir` or `kind` read back: one of [`COMMON_WORDS`] borrowed, anything else owned.
pub(crate) fn word(text: &str) -> Cow<'static, str> {
    match COMMON_WORDS.iter().find(|common| **common == text) {
        Some(common) => Cow::Borrowed(common),
        None => Cow::Owned(text.to_owned()),
    }
}

/// A small document that every daemon on one database shares (the named tokens, the link key,
/// the daily budgets, ...), with its version: how many times it was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Document {
    /// Its text (JSON, opaque to the store).
    pub text: String,
    /// 1 after the first write, 2 after the second, ...
    pub version: u64,
}

/// Documents shared by the daemons of a fleet, each changed only from the version its writer
/// read (compare and set), so that two nodes changing one at once never lose either change:
/// the one that finds it moved on reads it again and redoes its change. A store shared by
/// several daemons has them ([`PostgresStore`]); [`MemoryStore`] too, for tests.
#[async_trait::async_trait]
pub trait Documents: Send + Sync + fmt::Debug {
    /// Document `name`, if it was ever written.
    async fn document(&self, name: &str) -> Result<Option<Document>, StoreError>;
    /// Writes `text` as document `name` if it is still at `version` (0: never written);
    /// whether it was (`false`: another writer got there first).
    async fn put_document(&self, name: &str, text: &str, version: u64) -> Result<bool, StoreError>;
}

/// One event as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventRecord {
    /// The Switchboard session.
    pub session_id: String,
    /// 1, 2, 3, ... per session, without gaps.
    pub seq: u64,
    /// When it was appended (Unix milliseconds).
    pub ts_ms: u64,
    /// `from_cli`, `to_cli`, or `switchboard` (our own events). A few fixed words: held as
    /// `'static` text where the writer knows it (no allocation per event), owned when read.
    pub dir: Cow<'static, str>,
    /// The event's kind (`line`, `state`, `permission_decided`, ...), held like `dir`.
    pub kind: Cow<'static, str>,
    /// The event as JSON text, opaque to the store.
    pub payload: String,
}

/// A session's state as its record keeps it: its CLI's state, or `paused` (a budget holds it).
/// Text in the database (`starting`, `idle`, ...), as in every client's JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordState {
    /// The CLI is starting.
    Starting,
    /// Waiting for a prompt.
    Idle,
    /// A turn is running.
    Working,
    /// A turn waits for a person to answer a permission request.
    AwaitingPermission,
    /// The CLI is compacting the conversation.
    Compacting,
    /// A budget it reached holds it: it takes no message until a person raises the budget.
    Paused,
    /// A permission request waits for a person with no CLI running (the policy parked it): an
    /// answer resumes the session.
    Parked,
    /// The CLI exited normally (or was ended).
    Exited,
    /// The CLI died unexpectedly (or its log could not be written).
    Crashed,
}

impl RecordState {
    /// Every state.
    pub const ALL: [RecordState; 9] = [
        RecordState::Starting,
        RecordState::Idle,
        RecordState::Working,
        RecordState::AwaitingPermission,
        RecordState::Compacting,
        RecordState::Paused,
        RecordState::Parked,
        RecordState::Exited,
        RecordState::Crashed,
    ];

    /// Its text (`awaiting_permission`).
    pub fn as_str(self) -> &'static str {
        match self {
            RecordState::Starting => "starting",
            RecordState::Idle => "idle",
            RecordState::Working => "working",
            RecordState::AwaitingPermission => "awaiting_permission",
            RecordState::Compacting => "compacting",
            RecordState::Paused => "paused",
            RecordState::Parked => "parked",
            RecordState::Exited => "exited",
            RecordState::Crashed => "crashed",
        }
    }

    /// The state `text` names, if any.
    pub fn parse(text: &str) -> Option<RecordState> {
        RecordState::ALL.into_iter().find(|state| state.as_str() == text)
    }

    /// Whether the session ended (exited, crashed, or parked): it runs nowhere until resumed.
    pub fn is_final(self) -> bool {
        matches!(self, RecordState::Exited | RecordState::Crashed | RecordState::Parked)
    }
}

impl fmt::Display for RecordState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A session's record: what a list of sessions shows, and what resuming one needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionRecord {
    /// Switchboard's id.
    pub id: String,
    /// The CLI's session id, once known (needed to `--resume`).
    pub claude_session_id: Option<String>,
    /// Working directory.
    pub cwd: String,
    /// Model in use.
    pub model: Option<String>,
    /// Permission mode in force.
    pub permission_mode: Option<String>,
    /// Its state (text in the database).
    pub state: RecordState,
    /// A title (the first prompt, shortened).
    pub title: Option<String>,
    /// Cost so far, US dollars, as its CLI reports it (a CLI's own total, which may start
    /// again from zero when a session is resumed).
    pub cost_usd: f64,
    /// What the session spent in all, over every run and CLI (US dollars): the sum of its
    /// turns' costs, as the projection read each; 0 for a session that has run no turn. Its
    /// own budget counts this.
    #[serde(default)]
    pub spent_usd: f64,
    /// Created (Unix milliseconds).
    pub created_ms: u64,
    /// Last change (Unix milliseconds).
    pub updated_ms: u64,
    /// How its CLI is launched, for resuming it (`config` in the database and on the wire).
    #[serde(rename = "config", default)]
    pub launch: Launch,
    /// Put away by a person (`PATCH /api/sessions/{id}`): the API lists it, marked; the web
    /// UI hides it until asked.
    #[serde(default)]
    pub archived: bool,
    /// The daemon that runs it, or ran it last, when several share one database (`serve
    /// --node`); `None` on a daemon of its own.
    #[serde(default)]
    pub node: Option<String>,
}

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database failed.
    #[error("database error: {0}")]
    Database(String),
    /// An append did not continue the session's sequence.
    #[error("event {seq} of session {session_id} is out of sequence (last stored is {last})")]
    OutOfSequence {
        /// The session.
        session_id: String,
        /// The seq offered.
        seq: u64,
        /// The last stored.
        last: u64,
    },
    /// No such session.
    #[error("no session {0}")]
    NotFound(String),
    /// The session's record belongs to another node now (several daemons on one database):
    /// this one may no longer write it.
    #[error("session {id} is run by {} now", node.as_deref().unwrap_or("no node"))]
    Moved {
        /// The session.
        id: String,
        /// The node whose it is.
        node: Option<String>,
    },
    /// The store is shut down.
    #[error("the store is closed")]
    Closed,
}

impl From<rusqlite::Error> for StoreError {
    fn from(error: rusqlite::Error) -> Self {
        StoreError::Database(error.to_string())
    }
}

/// The event log and session records.
#[async_trait::async_trait]
pub trait Store: Send + Sync + fmt::Debug {
    /// Creates a session record (its id must be new).
    async fn create_session(&self, record: &SessionRecord) -> Result<(), StoreError>;
    /// Replaces a session record, if the stored one is still of the record's `node`
    /// ([`StoreError::Moved`] otherwise: a node that lost a session to another never writes it
    /// back). Only [`Store::claim_session`] changes a record's node.
    async fn update_session(&self, record: &SessionRecord) -> Result<(), StoreError>;
    /// Takes a session over ([`Claim`]): whether its record was still as the claim read it
    /// (several daemons on one database: of two nodes taking over one session, even its own
    /// node resuming it, one wins).
    async fn claim_session(&self, claim: Claim<'_>) -> Result<bool, StoreError>;
    /// One session.
    async fn get_session(&self, id: &str) -> Result<Option<SessionRecord>, StoreError>;
    /// All sessions, most recently updated first.
    async fn list_sessions(&self) -> Result<Vec<SessionRecord>, StoreError>;
    /// Deletes a session and its events.
    async fn delete_session(&self, id: &str) -> Result<(), StoreError>;
    /// Appends events, atomically. Each session's events must continue its sequence
    /// (`last_seq + 1`, `+2`, ...); otherwise nothing is written.
    async fn append(&self, events: &[EventRecord]) -> Result<(), StoreError>;
    /// [`Store::append`] for events the caller keeps shared (the daemon hands the same
    /// records to its live subscribers): a store that keeps them in memory can keep these
    /// instead of copies.
    async fn append_shared(
        &self,
        events: &[std::sync::Arc<EventRecord>],
    ) -> Result<(), StoreError> {
        let owned: Vec<EventRecord> =
            events.iter().map(|event| EventRecord::clone(event)).collect();
        self.append(&owned).await
    }
    /// Events of a session with `seq > after`, in order, at most `limit`.
    async fn events_after(
        &self,
        session_id: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<EventRecord>, StoreError>;
    /// The last `limit` events of a session with `seq < before`, in order (paging back).
    async fn events_before(
        &self,
        session_id: &str,
        before: u64,
        limit: usize,
    ) -> Result<Vec<EventRecord>, StoreError>;
    /// The last seq of a session (0 when it has none).
    async fn last_seq(&self, session_id: &str) -> Result<u64, StoreError>;
    /// Queues notifications for delivery, atomically; one whose `(channel, key)` waits
    /// already is not queued twice.
    async fn enqueue_outbox(&self, items: &[NewOutboxItem]) -> Result<(), StoreError>;
    /// The oldest notifications waiting for `channel`, in the order they were queued, at most
    /// `limit`.
    async fn outbox(&self, channel: &str, limit: usize) -> Result<Vec<OutboxItem>, StoreError>;
    /// A notification went out: it waits no more.
    async fn outbox_done(&self, id: u64) -> Result<(), StoreError>;
    /// Forgets everything waiting for `channel` (a channel that is gone, such as a browser's
    /// push subscription that ended).
    async fn outbox_forget(&self, channel: &str) -> Result<(), StoreError>;
    /// The channels that have notifications waiting.
    async fn outbox_channels(&self) -> Result<Vec<String>, StoreError>;
    /// Its search index, if it keeps one. Every store here does; a wrapper forwards
    /// its inner store's.
    fn search_index(&self) -> Option<&dyn Search> {
        None
    }
    /// Its checkpoints of sessions' views, if it keeps them. Every store here does; a wrapper
    /// forwards its inner store's.
    fn view_checkpoints(&self) -> Option<&dyn ViewCheckpoints> {
        None
    }
}

/// A session taken over by a node ([`Store::claim_session`]): it moves to `to` and is stamped
/// `stamp_ms` only if its record is still `from`'s and unchanged since it was read (its
/// `updated_ms` still `seen_ms`), so that any other claim made from the same reading fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claim<'a> {
    /// The session.
    pub id: &'a str,
    /// The node it is taken from, as read.
    pub from: Option<&'a str>,
    /// Its `updated_ms`, as read.
    pub seen_ms: u64,
    /// The node taking it (it may be `from`: a node resuming its own session claims too).
    pub to: Option<&'a str>,
    /// Its new `updated_ms`: later than `seen_ms`.
    pub stamp_ms: u64,
}

impl<'a> Claim<'a> {
    /// A claim of `record` by node `to`, stamped now (or just after what was read).
    pub fn of(record: &'a SessionRecord, to: Option<&'a str>) -> Self {
        Claim {
            id: &record.id,
            from: record.node.as_deref(),
            seen_ms: record.updated_ms,
            to,
            stamp_ms: now_ms().max(record.updated_ms + 1),
        }
    }
}

/// A notification to queue ([`Store::enqueue_outbox`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewOutboxItem {
    /// The channel it goes out on.
    pub channel: String,
    /// What it is about, unique per channel (its idempotency key).
    pub key: String,
    /// What is sent (JSON).
    pub body: String,
}

/// A notification waiting to go out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxItem {
    /// Its place in the outbox (increasing in queue order).
    pub id: u64,
    /// The channel.
    pub channel: String,
    /// Its idempotency key.
    pub key: String,
    /// What is sent.
    pub body: String,
    /// When it was queued (Unix milliseconds).
    pub created_ms: u64,
}

/// Now, in Unix milliseconds.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis() as u64)
        .unwrap_or(0)
}
