//! The PostgreSQL store: one database shared by several daemons (docs/fleet.md).
//!
//! Everything lives in the schema `switchboard`, created and migrated when a store connects
//! (under an advisory lock, so daemons starting together migrate once). A pool of connections
//! (deadpool) serves every call; each call is one transaction.
//!
//! **Sequence numbers.** A session's last seq is a row of `heads`. An append moves it with a
//! compare-and-set (`UPDATE heads SET last_seq = new WHERE last_seq = expected`, or an insert
//! that fails if another writer created it first) in the same transaction as the events'
//! insert, and the events' primary key is `(session_id, seq)`. Two writers on different nodes
//! that append to one session can therefore never both succeed with the same seq, nor leave a
//! gap: the second one's compare-and-set finds the row moved (PostgreSQL re-reads a row
//! another transaction changed before it updates it), and its whole batch is refused as out
//! of sequence. Only the node that runs a session appends to it; this holds even when that
//! rule is broken (`tests/it/postgres.rs` races two stores on one session).
//!
//! **Durability.** `append` returns once PostgreSQL has committed (with the server's own
//! `synchronous_commit`), so an event is committed before anyone sees it, as with SQLite.
//!
//! **Payloads** are stored as `bytea`: the store keeps them opaque and exact (PostgreSQL's
//! text cannot hold a NUL).
//!
//! **No TLS** is spoken (tokio-postgres with `NoTls`): a URL that asks for it is refused,
//! never sent in the clear. It also keeps the fleet's **shared documents** ([`crate::Documents`]:
//! the named tokens, keys, push subscriptions and daily budgets as small JSON texts, each
//! with a version; a write names the version it read and loses to any other, so no node's
//! change is lost; `conformance::documents` checks it).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::NoTls;

use crate::{
    EventRecord, Launch, NewOutboxItem, OutboxItem, RecordState, SessionRecord, Store, StoreError,
};

/// Connections the pool keeps at most.
pub const POOL_SIZE: usize = 16;

/// How long the group writer waits, while the node is busy, for more appends to commit with
/// the one it holds (see [`PostgresOptions::group_wait`]).
pub const GROUP_WAIT: Duration = Duration::from_millis(5);

/// The node counts as busy for this long after a group that held two appends or more.
pub const BUSY_FOR: Duration = Duration::from_secs(1);

/// How a [`PostgresStore`] connects and writes.
#[derive(Debug, Clone, Copy)]
pub struct PostgresOptions {
    /// Connections the pool keeps at most ([`POOL_SIZE`]).
    pub pool_size: usize,
    /// While the node is busy (a group in the last second held two appends or more), how long
    /// the group writer waits after an append for others to commit with it ([`GROUP_WAIT`];
    /// zero: never). A commit costs PostgreSQL about the same whether it holds one line or
    /// twenty, so under load this trades a few milliseconds of a line's latency (a line is
    /// seen only once it is committed) for most of PostgreSQL's work per line. A node with a
    /// single busy session does not wait (once [`PostgresOptions::busy_for`] has passed since
    /// a group of two): its appends come one at a time.
    pub group_wait: Duration,
    /// How long the node counts as busy after a group of two appends or more ([`BUSY_FOR`]).
    pub busy_for: Duration,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        PostgresOptions { pool_size: POOL_SIZE, group_wait: GROUP_WAIT, busy_for: BUSY_FOR }
    }
}

/// How long a call waits for a connection (from the pool, or a new one) before it fails.
pub const CONNECT_LIMIT: Duration = Duration::from_secs(10);

/// How long a connection may stay silent (unacknowledged) before it fails.
pub const STATEMENT_LIMIT: Duration = Duration::from_secs(30);

/// Each migration, in order; `schema_version` counts those applied.
const MIGRATIONS: &[&str] = &[
    // The first layout.
    "CREATE TABLE switchboard.sessions (
        id TEXT PRIMARY KEY,
        claude_session_id TEXT,
        cwd TEXT NOT NULL,
        model TEXT,
        permission_mode TEXT,
        state TEXT NOT NULL,
        title TEXT,
        cost_usd DOUBLE PRECISION NOT NULL DEFAULT 0,
        created_ms BIGINT NOT NULL,
        updated_ms BIGINT NOT NULL,
        config TEXT NOT NULL DEFAULT '{}',
        archived BOOLEAN NOT NULL DEFAULT FALSE,
        node TEXT
    );
    CREATE INDEX sessions_by_update ON switchboard.sessions (updated_ms DESC);
    CREATE TABLE switchboard.heads (
        session_id TEXT PRIMARY KEY,
        last_seq BIGINT NOT NULL CHECK (last_seq > 0)
    );
    CREATE TABLE switchboard.events (
        session_id TEXT NOT NULL,
        seq BIGINT NOT NULL CHECK (seq > 0),
        ts_ms BIGINT NOT NULL,
        dir TEXT NOT NULL,
        kind TEXT NOT NULL,
        payload BYTEA NOT NULL,
        PRIMARY KEY (session_id, seq)
    );
    CREATE TABLE switchboard.outbox (
        id BIGSERIAL PRIMARY KEY,
        channel TEXT NOT NULL,
        key TEXT NOT NULL,
        body TEXT NOT NULL,
        created_ms BIGINT NOT NULL,
        UNIQUE (channel, key)
    );
    CREATE INDEX outbox_by_channel ON switchboard.outbox (channel, id);",
    // What the daemons of a fleet share besides sessions (`Documents`): the named tokens, the
    // link key, the push subscriptions, the daily budgets.
    "CREATE TABLE switchboard.documents (
        name TEXT PRIMARY KEY,
        text TEXT NOT NULL,
        version BIGINT NOT NULL CHECK (version > 0)
    );",
    // What a session spent in all, a column of its own (it was a key of `config`, and a record
    // without it read its CLI's cost instead, which may already hold the turn being counted).
    "ALTER TABLE switchboard.sessions ADD COLUMN spent_usd DOUBLE PRECISION NOT NULL DEFAULT 0;
    UPDATE switchboard.sessions SET
        spent_usd = COALESCE((config::jsonb ->> 'spent_usd')::double precision, cost_usd),
        config = (config::jsonb - 'spent_usd')::text;",
    // The search index (`search::postgres`).
    crate::search::postgres::SCHEMA,
    // Checkpoints of sessions' views (`view_checkpoints`).
    crate::view_checkpoints::postgres::SCHEMA,
];

/// The store on a PostgreSQL database.
#[derive(Clone)]
pub struct PostgresStore {
    pool: Pool,
    /// Where it connects, without the password (for `Debug` and errors).
    shown: String,
    /// Appends waiting for the group writer (see [`group_writer`]).
    appends: tokio::sync::mpsc::UnboundedSender<Waiting>,
}

/// One append waiting for the group writer, and where its outcome goes.
struct Waiting {
    events: Vec<std::sync::Arc<EventRecord>>,
    done: tokio::sync::oneshot::Sender<Result<(), StoreError>>,
}

/// The most events one group transaction carries.
const MAX_GROUP_EVENTS: usize = 4096;

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore").field("database", &self.shown).finish_non_exhaustive()
    }
}

/// The group writer: appends from every session of this node, as they wait, go to the
/// database together in one statement (up to [`MAX_GROUP_EVENTS`] events or
/// [`MAX_GROUP_BYTES`], [`GROUP_APPEND`]): one round trip and one commit for all of them,
/// where an append alone paid a `BEGIN`, a compare-and-set, an insert and a `COMMIT` for its
/// few lines. Each append still returns only once its events are committed.
///
/// - **Refused** (a head that did not move, a seq stored already, a deadlock with another
///   node): each append of the group is written again on its own, in a transaction that
///   says why, so that only the one at fault is refused.
/// - **Failed** (the database unreachable, no connection, [`WRITE_LIMIT`] passed): every
///   append of the group is told, at once; none is tried again here (the caller retries).
/// - An append whose caller stopped waiting before its group was made is dropped unwritten.
/// - While the node is busy, a group waits up to `wait` from its first append for more
///   ([`PostgresOptions::group_wait`]).
async fn group_writer(
    pool: Pool,
    mut queue: tokio::sync::mpsc::UnboundedReceiver<Waiting>,
    options: PostgresOptions,
) {
    let (wait, busy_for) = (options.group_wait, options.busy_for);
    let mut busy_until: Option<tokio::time::Instant> = None;
    while let Some(first) = queue.recv().await {
        let now = tokio::time::Instant::now();
        let linger = busy_until.is_some_and(|until| now < until).then(|| now + wait);
        let mut group = Vec::new();
        let (mut count, mut bytes) = (0, 0);
        let mut next = Some(first);
        while let Some(waiting) = next.take() {
            if !waiting.done.is_closed() {
                count += waiting.events.len();
                bytes += waiting.events.iter().map(|event| event.payload.len()).sum::<usize>();
                group.push(waiting);
            }
            if count >= MAX_GROUP_EVENTS || bytes >= MAX_GROUP_BYTES {
                break;
            }
            next = match (queue.try_recv(), linger) {
                (Ok(waiting), _) => Some(waiting),
                (Err(_), Some(until)) => {
                    tokio::time::timeout_at(until, queue.recv()).await.ok().flatten()
                }
                (Err(_), None) => None,
            };
        }
        if group.len() >= 2 && !wait.is_zero() {
            busy_until = Some(tokio::time::Instant::now() + busy_for);
        }
        // A caller that stopped waiting while the group gathered: not written.
        if linger.is_some() {
            group.retain(|waiting| !waiting.done.is_closed());
        }
        if group.is_empty() {
            continue;
        }
        let all: Vec<&EventRecord> =
            group.iter().flat_map(|waiting| waiting.events.iter().map(|event| &**event)).collect();
        let outcome = limited(write_group(&pool, &all)).await;
        drop(all);
        match outcome {
            Ok(()) => {
                for waiting in group {
                    let _ = waiting.done.send(Ok(()));
                }
            }
            Err(GroupError::Refused) => {
                for waiting in group {
                    let events: Vec<&EventRecord> =
                        waiting.events.iter().map(|event| &**event).collect();
                    let outcome = tokio::time::timeout(WRITE_LIMIT, write_events(&pool, &events))
                        .await
                        .unwrap_or_else(|_| Err(too_long()));
                    let _ = waiting.done.send(outcome);
                }
            }
            Err(GroupError::Failed(error)) => {
                let said = error.to_string();
                for waiting in group {
                    let error = match &error {
                        StoreError::Closed => StoreError::Closed,
                        _ => StoreError::Database(said.clone()),
                    };
                    let _ = waiting.done.send(Err(error));
                }
            }
        }
    }
}

/// The longest one write of the group writer may take (waiting for a connection, or for a
/// head another node's transaction holds): past it, the appends are told it failed, and the
/// node's other sessions are not held up behind it.
const WRITE_LIMIT: Duration = Duration::from_secs(10);

/// A group's payloads stop growing past this many bytes (and [`MAX_GROUP_EVENTS`] events).
const MAX_GROUP_BYTES: usize = 16 * 1024 * 1024;

/// Why a group's write did not commit.
enum GroupError {
    /// What was written was refused as it stands (a session out of sequence, a seq stored
    /// already, a deadlock): written again append by append, it may pass, or says whose.
    Refused,
    /// The write could not be done (the database, the connection, the time limit).
    Failed(StoreError),
}

/// `write` within [`WRITE_LIMIT`].
async fn limited(
    write: impl std::future::Future<Output = Result<(), GroupError>>,
) -> Result<(), GroupError> {
    tokio::time::timeout(WRITE_LIMIT, write)
        .await
        .unwrap_or_else(|_| Err(GroupError::Failed(too_long())))
}

fn too_long() -> StoreError {
    StoreError::Database(format!(
        "PostgreSQL did not finish an append within {} s",
        WRITE_LIMIT.as_secs()
    ))
}

/// Each session's events in a batch must follow one another; the batch then moves each
/// session's head from `first - 1` to `last`. Sessions in id order, so that two batches lock
/// heads in one order (no deadlock).
fn runs<'e>(events: &[&'e EventRecord]) -> Result<BTreeMap<&'e str, (u64, u64)>, StoreError> {
    let mut runs: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for event in events.iter().copied() {
        match runs.get_mut(event.session_id.as_str()) {
            Some((_, last)) if event.seq == *last + 1 => *last = event.seq,
            Some((_, last)) => {
                return Err(StoreError::OutOfSequence {
                    session_id: event.session_id.clone(),
                    seq: event.seq,
                    last: *last,
                })
            }
            None => {
                if event.seq == 0 {
                    return Err(StoreError::OutOfSequence {
                        session_id: event.session_id.clone(),
                        seq: 0,
                        last: 0,
                    });
                }
                runs.insert(&event.session_id, (event.seq, event.seq));
            }
        }
    }
    Ok(runs)
}

/// Events as the columns an `INSERT … SELECT * FROM UNNEST(…)` takes, one array a column, in
/// [`EVENT_COLUMNS`]' order.
struct EventColumns<'e> {
    session_ids: Vec<&'e str>,
    seqs: Vec<i64>,
    times: Vec<i64>,
    dirs: Vec<&'e str>,
    kinds: Vec<&'e str>,
    payloads: Vec<&'e [u8]>,
}

impl<'e> EventColumns<'e> {
    fn of(events: &[&'e EventRecord]) -> Result<EventColumns<'e>, StoreError> {
        let mut columns = EventColumns {
            session_ids: Vec::with_capacity(events.len()),
            seqs: Vec::with_capacity(events.len()),
            times: Vec::with_capacity(events.len()),
            dirs: Vec::with_capacity(events.len()),
            kinds: Vec::with_capacity(events.len()),
            payloads: Vec::with_capacity(events.len()),
        };
        for event in events.iter().copied() {
            columns.session_ids.push(event.session_id.as_str());
            columns.seqs.push(big(event.seq, "seq")?);
            columns.times.push(big(event.ts_ms, "ts_ms")?);
            columns.dirs.push(&*event.dir);
            columns.kinds.push(&*event.kind);
            columns.payloads.push(event.payload.as_bytes());
        }
        Ok(columns)
    }

    fn params(&self) -> [&(dyn tokio_postgres::types::ToSql + Sync); 6] {
        [&self.session_ids, &self.seqs, &self.times, &self.dirs, &self.kinds, &self.payloads]
    }
}

/// A whole group in one statement (so one round trip, and a transaction of its own without
/// `BEGIN` and `COMMIT`): the heads of new sessions inserted, the others moved by
/// compare-and-set, every event inserted; if any head did not move, a division by zero
/// aborts the statement and nothing of it is written.
const GROUP_APPEND: &str = "WITH v AS (
    SELECT * FROM UNNEST($1::TEXT[], $2::BIGINT[], $3::BIGINT[]) AS v(session_id, expected, last)
), started AS (
    INSERT INTO switchboard.heads (session_id, last_seq)
    SELECT session_id, last FROM v WHERE expected = 0 ORDER BY session_id
    ON CONFLICT (session_id) DO NOTHING RETURNING 1
), advanced AS (
    UPDATE switchboard.heads AS h SET last_seq = v.last FROM v
    WHERE v.expected > 0 AND h.session_id = v.session_id AND h.last_seq = v.expected
    RETURNING 1
), inserted AS (
    INSERT INTO switchboard.events (session_id, seq, ts_ms, dir, kind, payload)
    SELECT * FROM UNNEST($4::TEXT[], $5::BIGINT[], $6::BIGINT[], $7::TEXT[], $8::TEXT[], $9::BYTEA[])
)
SELECT 1 / (CASE WHEN (SELECT count(*) FROM started) + (SELECT count(*) FROM advanced)
    = cardinality($1::TEXT[]) THEN 1 ELSE 0 END)";

/// Writes `events` with [`GROUP_APPEND`]. Any refusal comes back without saying whose: the
/// group writer then writes each append on its own ([`write_events`]), which says.
async fn write_group(pool: &Pool, events: &[&EventRecord]) -> Result<(), GroupError> {
    // A group whose own events do not follow one another (two appends of a session out of
    // order) is written append by append, which says which.
    let runs = runs(events).map_err(|_| GroupError::Refused)?;
    if pool.is_closed() {
        return Err(GroupError::Failed(StoreError::Closed));
    }
    let client = pool.get().await.map_err(|error| GroupError::Failed(pool_error(error)))?;
    let mut heads = Vec::with_capacity(runs.len());
    let mut expected = Vec::with_capacity(runs.len());
    let mut lasts = Vec::with_capacity(runs.len());
    for (session_id, (first, last)) in &runs {
        heads.push(*session_id);
        expected.push(big(first - 1, "seq").map_err(GroupError::Failed)?);
        lasts.push(big(*last, "seq").map_err(GroupError::Failed)?);
    }
    let columns = EventColumns::of(events).map_err(GroupError::Failed)?;
    // `$1`–`$3` the heads, `$4`–`$9` the events.
    let moves: [&(dyn tokio_postgres::types::ToSql + Sync); 3] = [&heads, &expected, &lasts];
    let params: Vec<_> = moves.into_iter().chain(columns.params()).collect();
    let statement =
        client.prepare_cached(GROUP_APPEND).await.map_err(|error| GroupError::Failed(db(error)))?;
    client.execute(&statement, &params).await.map_err(|error| {
        use tokio_postgres::error::SqlState;
        let refused = [
            SqlState::DIVISION_BY_ZERO,
            SqlState::UNIQUE_VIOLATION,
            SqlState::T_R_DEADLOCK_DETECTED,
            SqlState::T_R_SERIALIZATION_FAILURE,
        ];
        match error.code() {
            Some(code) if refused.contains(code) => GroupError::Refused,
            _ => GroupError::Failed(db(error)),
        }
    })?;
    Ok(())
}

/// Writes `events` (each session's continuing its sequence) in one transaction: each
/// session's head moved by compare-and-set, then every event in one `INSERT … UNNEST`.
async fn write_events(pool: &Pool, events: &[&EventRecord]) -> Result<(), StoreError> {
    let runs = runs(events)?;
    if pool.is_closed() {
        return Err(StoreError::Closed);
    }
    let mut client = pool.get().await.map_err(pool_error)?;
    let transaction = client.transaction().await.map_err(db)?;
    let advance = transaction
        .prepare_cached(
            "UPDATE switchboard.heads SET last_seq = $3 WHERE session_id = $1 AND last_seq = $2",
        )
        .await
        .map_err(db)?;
    let start = transaction
        .prepare_cached(
            "INSERT INTO switchboard.heads (session_id, last_seq) VALUES ($1, $2) ON CONFLICT (session_id) DO NOTHING",
        )
        .await
        .map_err(db)?;
    let head = transaction
        .prepare_cached("SELECT last_seq FROM switchboard.heads WHERE session_id = $1")
        .await
        .map_err(db)?;
    // Every session's head moved at once: the statements go out together on the connection
    // (tokio-postgres pipelines what is awaited together), one round trip for the lot.
    let moves = runs.iter().map(|(session_id, (first, last))| {
        let (transaction, start, advance) = (&transaction, &start, &advance);
        async move {
            let expected = first - 1;
            let moved = if expected == 0 {
                transaction.execute(start, &[session_id, &big(*last, "seq")?]).await
            } else {
                transaction
                    .execute(advance, &[session_id, &big(expected, "seq")?, &big(*last, "seq")?])
                    .await
            }
            .map_err(db)?;
            Ok::<_, StoreError>((*session_id, *first, moved))
        }
    });
    for (session_id, first, moved) in futures::future::try_join_all(moves).await? {
        if moved == 0 {
            let stored = transaction
                .query_opt(&head, &[&session_id])
                .await
                .map_err(db)?
                .map(|row| unsigned(row.get(0)))
                .unwrap_or(0);
            // Dropping the transaction rolls it back: nothing of the batch is written.
            return Err(StoreError::OutOfSequence {
                session_id: session_id.to_owned(),
                seq: first,
                last: stored,
            });
        }
    }
    let columns = EventColumns::of(events)?;
    let insert = transaction
        .prepare_cached(&format!(
            "INSERT INTO switchboard.events ({EVENT_COLUMNS})
             SELECT * FROM UNNEST($1::TEXT[], $2::BIGINT[], $3::BIGINT[], $4::TEXT[], $5::TEXT[], $6::BYTEA[])"
        ))
        .await
        .map_err(db)?;
    transaction.execute(&insert, &columns.params()).await.map_err(db)?;
    transaction.commit().await.map_err(db)
}

/// A tokio-postgres error as one readable line: the server's message (and its detail) when it
/// sent one, the client's otherwise. Neither carries the connection's password.
pub(crate) fn db(error: tokio_postgres::Error) -> StoreError {
    match error.as_db_error() {
        Some(server) => StoreError::Database(match server.detail() {
            Some(detail) => format!("{} ({detail})", server.message()),
            None => server.message().to_owned(),
        }),
        None => StoreError::Database(error.to_string()),
    }
}

fn pool_error(error: deadpool_postgres::PoolError) -> StoreError {
    match error {
        deadpool_postgres::PoolError::Backend(error) => db(error),
        other => StoreError::Database(format!("no database connection: {other}")),
    }
}

/// A seq or a time as PostgreSQL's `BIGINT`; beyond it is refused, not wrapped.
pub(crate) fn big(value: u64, what: &str) -> Result<i64, StoreError> {
    i64::try_from(value)
        .map_err(|_| StoreError::Database(format!("{what} {value} is beyond PostgreSQL's BIGINT")))
}

/// A `BIGINT` read back; a negative one (written by something else) reads as 0.
pub(crate) fn unsigned(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

/// What a connection URL names, without its password: `user@host:port/dbname`.
fn shown(config: &tokio_postgres::Config) -> String {
    let user = config.get_user().unwrap_or("");
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(host)) => host.clone(),
        Some(tokio_postgres::config::Host::Unix(path)) => path.display().to_string(),
        None => "localhost".to_owned(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let dbname = config.get_dbname().unwrap_or(user);
    format!("{user}@{host}:{port}/{dbname}")
}

impl PostgresStore {
    /// Connects to the database `url` names (`postgres://user:password@host:port/dbname`, or
    /// libpq's `key=value` form; a host that is a directory is a Unix socket's) and migrates
    /// its schema. Fails with a message that names what is wrong, never the password.
    ///
    /// TLS is not spoken: a URL that requires it (`sslmode=require`) is refused at connect. Run
    /// the database on loopback, a Unix socket or a private network (docs/fleet.md).
    pub async fn connect(url: &str) -> Result<PostgresStore, StoreError> {
        PostgresStore::connect_with(url, PostgresOptions::default()).await
    }

    /// [`PostgresStore::connect`] with `options`.
    pub async fn connect_with(
        url: &str,
        options: PostgresOptions,
    ) -> Result<PostgresStore, StoreError> {
        // The parser's own message may quote the URL (and so a password): not shown.
        let mut config = tokio_postgres::Config::from_str(url).map_err(|_| {
            StoreError::Database(
                "the database URL is not one PostgreSQL reads (postgres://user:password@host:port/dbname)"
                    .to_owned(),
            )
        })?;
        if config.get_application_name().is_none() {
            config.application_name("switchboard");
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_LIMIT);
        }
        // A connection that goes silent (a failover, a dropped route) fails in about half a
        // minute rather than hanging a session's appends for hours (TCP's own checks: nothing
        // a pooler such as PgBouncer would refuse is sent to the server). A URL's
        // `tcp_user_timeout` wins.
        if config.get_tcp_user_timeout().is_none() {
            config.tcp_user_timeout(STATEMENT_LIMIT);
        }
        config.keepalives_idle(Duration::from_secs(10));
        let shown = shown(&config);
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig { recycling_method: RecyclingMethod::Fast },
        );
        let pool = Pool::builder(manager)
            .max_size(options.pool_size.max(1))
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(CONNECT_LIMIT))
            .create_timeout(Some(CONNECT_LIMIT))
            .recycle_timeout(Some(CONNECT_LIMIT))
            .build()
            .map_err(|error| StoreError::Database(error.to_string()))?;
        let (appends, queue) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(group_writer(pool.clone(), queue, options));
        let store = PostgresStore { pool, shown, appends };
        store.migrate().await.map_err(|error| match error {
            StoreError::Database(message) => {
                StoreError::Database(format!("PostgreSQL at {}: {message}", store.shown))
            }
            other => other,
        })?;
        Ok(store)
    }

    /// Where the store connects, without the password: `user@host:port/dbname`.
    pub fn database(&self) -> &str {
        &self.shown
    }

    /// Closes the pool: calls from now on fail with [`StoreError::Closed`].
    pub fn close(&self) {
        self.pool.close();
    }

    /// Why a session's row was not written: it is gone, or another node's.
    async fn not_written(
        &self,
        client: &deadpool_postgres::Object,
        id: &str,
    ) -> Result<StoreError, StoreError> {
        let row = client
            .query_opt("SELECT node FROM switchboard.sessions WHERE id = $1", &[&id])
            .await
            .map_err(db)?;
        Ok(match row {
            Some(row) => StoreError::Moved { id: id.to_owned(), node: row.get(0) },
            None => StoreError::NotFound(id.to_owned()),
        })
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        if self.pool.is_closed() {
            return Err(StoreError::Closed);
        }
        self.pool.get().await.map_err(pool_error)
    }

    async fn migrate(&self) -> Result<(), StoreError> {
        let mut client = self.client().await?;
        let encoding: String =
            client.query_one("SHOW server_encoding", &[]).await.map_err(db)?.get(0);
        if encoding != "UTF8" {
            return Err(StoreError::Database(format!(
                "the database's encoding is {encoding}; Switchboard needs UTF8 (CREATE DATABASE … ENCODING 'UTF8')"
            )));
        }
        let transaction = client.transaction().await.map_err(db)?;
        // One migrating daemon at a time; the others wait here, then find nothing to do.
        transaction
            .execute("SELECT pg_advisory_xact_lock(hashtext('switchboard.migrate'))", &[])
            .await
            .map_err(db)?;
        transaction
            .batch_execute(
                "CREATE SCHEMA IF NOT EXISTS switchboard;
                 CREATE TABLE IF NOT EXISTS switchboard.schema_version (
                     one BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (one),
                     version INTEGER NOT NULL
                 );
                 INSERT INTO switchboard.schema_version (version) VALUES (0) ON CONFLICT DO NOTHING;",
            )
            .await
            .map_err(db)?;
        let stored: i32 = transaction
            .query_one("SELECT version FROM switchboard.schema_version", &[])
            .await
            .map_err(db)?
            .get(0);
        // A negative version (written by something else) is as unknown as a newer one.
        let version = usize::try_from(stored).unwrap_or(usize::MAX);
        if version > MIGRATIONS.len() {
            return Err(StoreError::Database(format!(
                "the database schema is version {stored}, newer than this Switchboard knows ({}); upgrade Switchboard",
                MIGRATIONS.len()
            )));
        }
        for migration in &MIGRATIONS[version..] {
            transaction.batch_execute(migration).await.map_err(db)?;
        }
        transaction
            .execute(
                "UPDATE switchboard.schema_version SET version = $1",
                &[&(MIGRATIONS.len() as i32)],
            )
            .await
            .map_err(db)?;
        transaction.commit().await.map_err(db)
    }
}

fn session_row(row: &tokio_postgres::Row) -> Result<SessionRecord, StoreError> {
    let config: String = row.get("config");
    Ok(SessionRecord {
        id: row.get("id"),
        claude_session_id: row.get("claude_session_id"),
        cwd: row.get("cwd"),
        model: row.get("model"),
        permission_mode: row.get("permission_mode"),
        state: {
            let text: String = row.get("state");
            RecordState::parse(&text).ok_or_else(|| {
                StoreError::Database(format!(
                    "session {}: {text:?} is not a session state",
                    row.get::<_, String>("id")
                ))
            })?
        },
        title: row.get("title"),
        cost_usd: row.get("cost_usd"),
        created_ms: unsigned(row.get("created_ms")),
        updated_ms: unsigned(row.get("updated_ms")),
        launch: Launch::from_stored(&config).map_err(|error| {
            StoreError::Database(format!("session {}: {error}", row.get::<_, String>("id")))
        })?,
        archived: row.get("archived"),
        node: row.get("node"),
        spent_usd: row.get("spent_usd"),
    })
}

fn event_row(row: &tokio_postgres::Row) -> Result<EventRecord, StoreError> {
    let session_id: String = row.get(0);
    let seq: i64 = row.get(1);
    let payload: Vec<u8> = row.get(5);
    let payload = String::from_utf8(payload).map_err(|_| {
        StoreError::Database(format!("event {seq} of session {session_id} is not UTF-8"))
    })?;
    Ok(EventRecord {
        session_id,
        seq: unsigned(seq),
        ts_ms: unsigned(row.get(2)),
        dir: crate::word(row.get(3)),
        kind: crate::word(row.get(4)),
        payload,
    })
}

/// A record's columns as a statement's parameters, in [`SESSION_COLUMNS`]' order (`$1` the
/// id, `$13` the node, `$14` what it spent).
struct Columns<'a> {
    record: &'a SessionRecord,
    state: &'static str,
    created_ms: i64,
    updated_ms: i64,
    config: String,
}

impl<'a> Columns<'a> {
    fn of(record: &'a SessionRecord) -> Result<Columns<'a>, StoreError> {
        Ok(Columns {
            record,
            state: record.state.as_str(),
            created_ms: big(record.created_ms, "created_ms")?,
            updated_ms: big(record.updated_ms, "updated_ms")?,
            config: record.launch.to_stored(),
        })
    }

    fn params(&self) -> [&(dyn tokio_postgres::types::ToSql + Sync); 14] {
        let record = self.record;
        [
            &record.id,
            &record.claude_session_id,
            &record.cwd,
            &record.model,
            &record.permission_mode,
            &self.state,
            &record.title,
            &record.cost_usd,
            &self.created_ms,
            &self.updated_ms,
            &self.config,
            &record.archived,
            &record.node,
            &record.spent_usd,
        ]
    }
}

const SESSION_COLUMNS: &str = "id, claude_session_id, cwd, model, permission_mode, state, title, cost_usd, created_ms, updated_ms, config, archived, node, spent_usd";

const EVENT_COLUMNS: &str = "session_id, seq, ts_ms, dir, kind, payload";

#[async_trait::async_trait]
impl Store for PostgresStore {
    async fn create_session(&self, record: &SessionRecord) -> Result<(), StoreError> {
        let client = self.client().await?;
        let statement = client
            .prepare_cached(&format!(
                "INSERT INTO switchboard.sessions ({SESSION_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) ON CONFLICT (id) DO NOTHING"
            ))
            .await
            .map_err(db)?;
        let inserted =
            client.execute(&statement, &Columns::of(record)?.params()).await.map_err(db)?;
        if inserted == 0 {
            return Err(StoreError::Database(format!("session {} already exists", record.id)));
        }
        Ok(())
    }

    async fn update_session(&self, record: &SessionRecord) -> Result<(), StoreError> {
        let client = self.client().await?;
        let statement = client
            .prepare_cached(
                "UPDATE switchboard.sessions SET claude_session_id = $2, cwd = $3, model = $4, permission_mode = $5, state = $6, title = $7, cost_usd = $8, created_ms = $9, updated_ms = $10, config = $11, archived = $12, spent_usd = $14 WHERE id = $1 AND node IS NOT DISTINCT FROM $13",
            )
            .await
            .map_err(db)?;
        let updated =
            client.execute(&statement, &Columns::of(record)?.params()).await.map_err(db)?;
        if updated == 0 {
            return Err(self.not_written(&client, &record.id).await?);
        }
        Ok(())
    }

    async fn claim_session(&self, claim: crate::Claim<'_>) -> Result<bool, StoreError> {
        let client = self.client().await?;
        let (seen, stamp) = (big(claim.seen_ms, "updated_ms")?, big(claim.stamp_ms, "updated_ms")?);
        let claimed = client
            .execute(
                "UPDATE switchboard.sessions SET node = $3, updated_ms = $5 WHERE id = $1 AND node IS NOT DISTINCT FROM $2 AND updated_ms = $4",
                &[&claim.id, &claim.from, &claim.to, &seen, &stamp],
            )
            .await
            .map_err(db)?;
        match claimed {
            0 => match self.not_written(&client, claim.id).await? {
                StoreError::Moved { .. } => Ok(false),
                other => Err(other),
            },
            _ => Ok(true),
        }
    }

    async fn get_session(&self, id: &str) -> Result<Option<SessionRecord>, StoreError> {
        let client = self.client().await?;
        let statement = client
            .prepare_cached(&format!(
                "SELECT {SESSION_COLUMNS} FROM switchboard.sessions WHERE id = $1"
            ))
            .await
            .map_err(db)?;
        client
            .query_opt(&statement, &[&id])
            .await
            .map_err(db)?
            .as_ref()
            .map(session_row)
            .transpose()
    }

    async fn list_sessions(&self) -> Result<Vec<SessionRecord>, StoreError> {
        let client = self.client().await?;
        let statement = client
            .prepare_cached(&format!(
                "SELECT {SESSION_COLUMNS} FROM switchboard.sessions ORDER BY updated_ms DESC, id COLLATE \"C\""
            ))
            .await
            .map_err(db)?;
        let rows = client.query(&statement, &[]).await.map_err(db)?;
        // A row that cannot be read as a record (its state or launch config) is left out of
        // the list, and said, rather than hiding every other session; asked for by id, it is
        // the error.
        Ok(rows
            .iter()
            .filter_map(|row| {
                session_row(row)
                    .inspect_err(|error| {
                        tracing::error!("a session is left out of the list: {error}");
                    })
                    .ok()
            })
            .collect())
    }

    async fn delete_session(&self, id: &str) -> Result<(), StoreError> {
        let mut client = self.client().await?;
        let transaction = client.transaction().await.map_err(db)?;
        for table in ["events", "heads"] {
            transaction
                .execute(&format!("DELETE FROM switchboard.{table} WHERE session_id = $1"), &[&id])
                .await
                .map_err(db)?;
        }
        crate::search::postgres::forget(&transaction, id).await?;
        crate::view_checkpoints::postgres::forget(&transaction, id).await?;
        transaction
            .execute("DELETE FROM switchboard.sessions WHERE id = $1", &[&id])
            .await
            .map_err(db)?;
        transaction.commit().await.map_err(db)
    }

    async fn append(&self, events: &[EventRecord]) -> Result<(), StoreError> {
        let shared: Vec<_> = events.iter().cloned().map(std::sync::Arc::new).collect();
        self.append_shared(&shared).await
    }

    async fn append_shared(
        &self,
        events: &[std::sync::Arc<EventRecord>],
    ) -> Result<(), StoreError> {
        if events.is_empty() {
            return Ok(());
        }
        if self.pool.is_closed() {
            return Err(StoreError::Closed);
        }
        let (done, outcome) = tokio::sync::oneshot::channel();
        self.appends
            .send(Waiting { events: events.to_vec(), done })
            .map_err(|_| StoreError::Closed)?;
        outcome.await.map_err(|_| StoreError::Closed)?
    }

    async fn events_after(
        &self,
        session_id: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<EventRecord>, StoreError> {
        // Nothing is stored past BIGINT's range, so nothing follows a seq beyond it.
        let Ok(after) = i64::try_from(after) else { return Ok(Vec::new()) };
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let client = self.client().await?;
        let statement = client
            .prepare_cached(&format!(
                "SELECT {EVENT_COLUMNS} FROM switchboard.events WHERE session_id = $1 AND seq > $2 ORDER BY seq LIMIT $3"
            ))
            .await
            .map_err(db)?;
        client
            .query(&statement, &[&session_id, &after, &limit])
            .await
            .map_err(db)?
            .iter()
            .map(event_row)
            .collect()
    }

    async fn events_before(
        &self,
        session_id: &str,
        before: u64,
        limit: usize,
    ) -> Result<Vec<EventRecord>, StoreError> {
        let before = i64::try_from(before).unwrap_or(i64::MAX);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let client = self.client().await?;
        let statement = client
            .prepare_cached(&format!(
                "SELECT {EVENT_COLUMNS} FROM switchboard.events WHERE session_id = $1 AND seq < $2 ORDER BY seq DESC LIMIT $3"
            ))
            .await
            .map_err(db)?;
        let mut page: Vec<EventRecord> = client
            .query(&statement, &[&session_id, &before, &limit])
            .await
            .map_err(db)?
            .iter()
            .map(event_row)
            .collect::<Result<_, _>>()?;
        page.reverse();
        Ok(page)
    }

    async fn last_seq(&self, session_id: &str) -> Result<u64, StoreError> {
        let client = self.client().await?;
        let statement = client
            .prepare_cached("SELECT last_seq FROM switchboard.heads WHERE session_id = $1")
            .await
            .map_err(db)?;
        Ok(client
            .query_opt(&statement, &[&session_id])
            .await
            .map_err(db)?
            .map(|row| unsigned(row.get(0)))
            .unwrap_or(0))
    }

    async fn enqueue_outbox(&self, items: &[NewOutboxItem]) -> Result<(), StoreError> {
        if items.is_empty() {
            return Ok(());
        }
        let mut client = self.client().await?;
        let transaction = client.transaction().await.map_err(db)?;
        let statement = transaction
            .prepare_cached(
                "INSERT INTO switchboard.outbox (channel, key, body, created_ms) VALUES ($1, $2, $3, $4) ON CONFLICT (channel, key) DO NOTHING",
            )
            .await
            .map_err(db)?;
        let now = big(crate::now_ms(), "created_ms")?;
        for item in items {
            transaction
                .execute(&statement, &[&item.channel, &item.key, &item.body, &now])
                .await
                .map_err(db)?;
        }
        transaction.commit().await.map_err(db)
    }

    async fn outbox(&self, channel: &str, limit: usize) -> Result<Vec<OutboxItem>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let client = self.client().await?;
        let statement = client
            .prepare_cached(
                "SELECT id, channel, key, body, created_ms FROM switchboard.outbox WHERE channel = $1 ORDER BY id LIMIT $2",
            )
            .await
            .map_err(db)?;
        Ok(client
            .query(&statement, &[&channel, &limit])
            .await
            .map_err(db)?
            .iter()
            .map(|row| OutboxItem {
                id: unsigned(row.get(0)),
                channel: row.get(1),
                key: row.get(2),
                body: row.get(3),
                created_ms: unsigned(row.get(4)),
            })
            .collect())
    }

    async fn outbox_done(&self, id: u64) -> Result<(), StoreError> {
        let Ok(id) = i64::try_from(id) else { return Ok(()) };
        let client = self.client().await?;
        client.execute("DELETE FROM switchboard.outbox WHERE id = $1", &[&id]).await.map_err(db)?;
        Ok(())
    }

    async fn outbox_forget(&self, channel: &str) -> Result<(), StoreError> {
        let client = self.client().await?;
        client
            .execute("DELETE FROM switchboard.outbox WHERE channel = $1", &[&channel])
            .await
            .map_err(db)?;
        Ok(())
    }

    async fn outbox_channels(&self) -> Result<Vec<String>, StoreError> {
        let client = self.client().await?;
        Ok(client
            .query("SELECT channel FROM switchboard.outbox GROUP BY channel ORDER BY channel COLLATE \"C\"", &[])
            .await
            .map_err(db)?
            .iter()
            .map(|row| row.get(0))
            .collect())
    }

    fn search_index(&self) -> Option<&dyn crate::Search> {
        Some(self)
    }

    fn view_checkpoints(&self) -> Option<&dyn crate::ViewCheckpoints> {
        Some(self)
    }
}

#[async_trait::async_trait]
impl crate::ViewCheckpoints for PostgresStore {
    async fn put_view_checkpoint(
        &self,
        session_id: &str,
        checkpoint: &crate::ViewCheckpoint,
    ) -> Result<(), StoreError> {
        crate::view_checkpoints::postgres::put(&*self.client().await?, session_id, checkpoint).await
    }

    async fn view_checkpoint(
        &self,
        session_id: &str,
        at: u64,
        format: &str,
    ) -> Result<Option<crate::ViewCheckpoint>, StoreError> {
        let client = self.client().await?;
        crate::view_checkpoints::postgres::nearest(&client, session_id, at, format).await
    }

    async fn view_checkpoint_marks(
        &self,
        format: &str,
    ) -> Result<std::collections::HashMap<String, u64>, StoreError> {
        crate::view_checkpoints::postgres::marks(&*self.client().await?, format).await
    }
}

#[async_trait::async_trait]
impl crate::Documents for PostgresStore {
    async fn document(&self, name: &str) -> Result<Option<crate::Document>, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_opt("SELECT text, version FROM switchboard.documents WHERE name = $1", &[&name])
            .await
            .map_err(db)?;
        Ok(row.map(|row| crate::Document { text: row.get(0), version: unsigned(row.get(1)) }))
    }

    async fn put_document(&self, name: &str, text: &str, version: u64) -> Result<bool, StoreError> {
        let client = self.client().await?;
        let written = if version == 0 {
            client
                .execute(
                    "INSERT INTO switchboard.documents (name, text, version) VALUES ($1, $2, 1) ON CONFLICT (name) DO NOTHING",
                    &[&name, &text],
                )
                .await
        } else {
            let version = big(version, "version")?;
            client
                .execute(
                    "UPDATE switchboard.documents SET text = $2, version = version + 1 WHERE name = $1 AND version = $3",
                    &[&name, &text, &version],
                )
                .await
        };
        Ok(written.map_err(db)? == 1)
    }
}

#[async_trait::async_trait]
impl crate::Search for PostgresStore {
    async fn index(
        &self,
        entries: &[crate::SearchEntry],
        marks: &[(String, u64)],
    ) -> Result<(), StoreError> {
        let mut client = self.client().await?;
        crate::search::postgres::write(&mut client, entries, marks).await
    }

    async fn marks(&self) -> Result<std::collections::HashMap<String, u64>, StoreError> {
        crate::search::postgres::marks(&self.client().await?).await
    }

    async fn search(
        &self,
        query: &crate::SearchQuery,
    ) -> Result<Vec<crate::SearchHit>, StoreError> {
        crate::search::postgres::search(&self.client().await?, query).await
    }

    async fn group(
        &self,
        query: &crate::SearchQuery,
        by: crate::GroupBy,
    ) -> Result<Vec<crate::SearchGroup>, StoreError> {
        crate::search::postgres::group(&self.client().await?, query, by).await
    }
}
