//! The SQLite store: WAL journal, schema migrations, one writer thread that commits whatever
//! is queued in one transaction, and a small pool of read connections.
//!
//! Durability: `synchronous = NORMAL` in WAL mode survives the process being killed at any
//! point (a committed transaction is in the WAL before `COMMIT` returns); only an OS crash or
//! power loss can take back the last commits. The database is never left corrupt.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Mutex};

use rusqlite::{params, Connection, OptionalExtension};
use tokio::sync::oneshot;

use crate::{EventRecord, SessionRecord, Store, StoreError};

/// Read connections kept open.
pub const READ_CONNECTIONS: usize = 4;

/// Operations the writer thread commits in one transaction at most.
pub const MAX_BATCH: usize = 512;

/// How often the checkpointer moves the WAL into the database.
///
/// A checkpoint has two parts. Every interval, the checkpointer thread copies the WAL into
/// the database without blocking anyone (`PASSIVE`): that is the bulk of the work. Once the
/// WAL holds [`WAL_RESTART_BYTES`], the writer then copies the few frames committed
/// meanwhile, between two of its transactions, so that the whole WAL is in the database and
/// its next transaction starts the WAL over from the beginning. Without that second part a
/// busy database never restarts its WAL: some commit always lands while the checkpointer
/// copies, so the WAL is never completely copied, and it grew by hundreds of MB a minute under
/// load (and every commit wrote to fresh file pages). The second part stalls appends for a
/// few milliseconds (it syncs the database file), so it runs only when the WAL is that large,
/// not every interval. The writer never checkpoints on its own (`wal_autocheckpoint = 0`): an
/// automatic checkpoint copies the whole WAL inside a commit and stalls every append behind
/// it.
pub const CHECKPOINT_INTERVAL: std::time::Duration = std::time::Duration::from_millis(500);

/// When the WAL holds this much, the writer finishes a checkpoint so that the WAL starts over
/// (see [`CHECKPOINT_INTERVAL`]); the WAL file is also truncated to this size when it starts
/// over after growing past it.
pub const WAL_RESTART_BYTES: u64 = 64 * 1024 * 1024;

/// How long a connection waits for a lock before failing.
const BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The schema, one migration per entry; `PRAGMA user_version` counts those applied.
const MIGRATIONS: &[&str] = &[
    "CREATE TABLE sessions (
        id TEXT PRIMARY KEY,
        claude_session_id TEXT,
        cwd TEXT NOT NULL,
        model TEXT,
        permission_mode TEXT,
        state TEXT NOT NULL,
        title TEXT,
        cost_usd REAL NOT NULL DEFAULT 0,
        created_ms INTEGER NOT NULL,
        updated_ms INTEGER NOT NULL,
        config TEXT NOT NULL DEFAULT '{}'
    );
    CREATE TABLE events (
        session_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        ts_ms INTEGER NOT NULL,
        dir TEXT NOT NULL,
        kind TEXT NOT NULL,
        payload TEXT NOT NULL,
        PRIMARY KEY (session_id, seq)
    ) WITHOUT ROWID;
    CREATE INDEX sessions_by_update ON sessions (updated_ms DESC);",
    // Events in the order they were appended, found by (session, seq) through an index. The
    // first layout clustered them by session (the key was the table): every append went into
    // its session's own B-tree leaf, in the middle of the table, so a commit with lines from n
    // sessions rewrote n leaves of 300-byte rows and split them often, about six WAL pages per
    // line under load, most of the writer's time. Appended in one order, lines share the
    // table's last leaf, and only the small index entries go to each session's place.
    "CREATE TABLE events_log (
        id INTEGER PRIMARY KEY,
        session_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        ts_ms INTEGER NOT NULL,
        dir TEXT NOT NULL,
        kind TEXT NOT NULL,
        payload TEXT NOT NULL
    );
    INSERT INTO events_log (session_id, seq, ts_ms, dir, kind, payload)
        SELECT session_id, seq, ts_ms, dir, kind, payload FROM events ORDER BY session_id, seq;
    DROP TABLE events;
    ALTER TABLE events_log RENAME TO events;
    CREATE UNIQUE INDEX events_by_session ON events (session_id, seq);",
    // Sessions get a small integer key, and events carry it instead of the 36-character id:
    // the (session, seq) index entries shrink from about 50 bytes to about 8, so an append
    // touches fewer and fuller index pages (a third less writer CPU per event under load).
    "CREATE TABLE session_keys (key INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE);
    INSERT INTO session_keys (id) SELECT DISTINCT session_id FROM events ORDER BY session_id;
    CREATE TABLE events_keyed (
        id INTEGER PRIMARY KEY,
        session INTEGER NOT NULL,
        seq INTEGER NOT NULL,
        ts_ms INTEGER NOT NULL,
        dir TEXT NOT NULL,
        kind TEXT NOT NULL,
        payload TEXT NOT NULL
    );
    INSERT INTO events_keyed (id, session, seq, ts_ms, dir, kind, payload)
        SELECT events.id, session_keys.key, seq, ts_ms, dir, kind, payload
        FROM events JOIN session_keys ON session_keys.id = events.session_id ORDER BY events.id;
    DROP TABLE events;
    ALTER TABLE events_keyed RENAME TO events;
    CREATE UNIQUE INDEX events_by_session ON events (session, seq);",
];

enum WriteOp {
    CreateSession(SessionRecord),
    UpdateSession(SessionRecord),
    DeleteSession(String),
    Append(Vec<EventRecord>),
}

struct Write {
    op: WriteOp,
    done: oneshot::Sender<Result<(), StoreError>>,
}

/// What the writer thread is asked to do.
enum Job {
    /// An operation, committed with whatever else is queued.
    Write(Write),
    /// The second part of a checkpoint (see [`CHECKPOINT_INTERVAL`]), between transactions;
    /// answered when done.
    FinishCheckpoint(oneshot::Sender<()>),
}

/// How a [`SqliteStore`] runs.
#[derive(Debug, Clone, Copy)]
pub struct SqliteOptions {
    /// How often the WAL is checkpointed ([`CHECKPOINT_INTERVAL`] by default).
    pub checkpoint_interval: std::time::Duration,
    /// How large the WAL may grow before it starts over ([`WAL_RESTART_BYTES`] by default).
    pub wal_restart_bytes: u64,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            checkpoint_interval: CHECKPOINT_INTERVAL,
            wal_restart_bytes: WAL_RESTART_BYTES,
        }
    }
}

/// The SQLite store.
pub struct SqliteStore {
    path: PathBuf,
    writer: Mutex<Option<mpsc::Sender<Job>>>,
    readers: Arc<Vec<Mutex<Connection>>>,
    next_reader: std::sync::atomic::AtomicUsize,
    writer_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Dropping it stops the checkpointer.
    checkpointer_stop: Mutex<Option<mpsc::Sender<()>>>,
    checkpointer_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore").field("path", &self.path).finish()
    }
}

fn open(path: &Path) -> Result<Connection, StoreError> {
    let connection = Connection::open(path)?;
    connection.busy_timeout(BUSY_TIMEOUT)?;
    connection.pragma_update(None, "journal_mode", "WAL")?;
    connection.pragma_update(None, "synchronous", "NORMAL")?;
    connection.pragma_update(None, "foreign_keys", "ON")?;
    Ok(connection)
}

fn migrate(connection: &mut Connection) -> Result<(), StoreError> {
    let version: usize = connection.pragma_query_value(None, "user_version", |row| row.get(0))?;
    if version > MIGRATIONS.len() {
        return Err(StoreError::Database(format!(
            "the database schema is version {version}, newer than this Switchboard knows ({}); upgrade Switchboard",
            MIGRATIONS.len()
        )));
    }
    for (index, migration) in MIGRATIONS.iter().enumerate().skip(version) {
        let transaction = connection.transaction()?;
        transaction.execute_batch(migration)?;
        transaction.pragma_update(None, "user_version", index + 1)?;
        transaction.commit()?;
    }
    Ok(())
}

impl SqliteStore {
    /// Opens (creating and migrating if needed) the database at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<SqliteStore, StoreError> {
        SqliteStore::open_with(path, SqliteOptions::default())
    }

    /// [`SqliteStore::open`] with options.
    pub fn open_with(
        path: impl AsRef<Path>,
        options: SqliteOptions,
    ) -> Result<SqliteStore, StoreError> {
        let path = path.as_ref().to_owned();
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|error| {
                StoreError::Database(format!("cannot create {}: {error}", parent.display()))
            })?;
        }
        let mut writer_connection = open(&path)?;
        migrate(&mut writer_connection)?;
        writer_connection.pragma_update(None, "wal_autocheckpoint", 0)?;
        writer_connection.pragma_update(
            None,
            "journal_size_limit",
            i64::try_from(options.wal_restart_bytes).unwrap_or(i64::MAX),
        )?;
        let checkpoint_connection = open(&path)?;
        let readers = (0..READ_CONNECTIONS)
            .map(|_| open(&path).map(Mutex::new))
            .collect::<Result<Vec<_>, _>>()?;
        let (writer, queue) = mpsc::channel::<Job>();
        let writer_thread = std::thread::Builder::new()
            .name("switchboard-store-writer".into())
            .spawn(move || write_loop(writer_connection, queue))
            .map_err(|error| {
                StoreError::Database(format!("cannot start the writer thread: {error}"))
            })?;
        let (checkpointer_stop, stop) = mpsc::channel::<()>();
        let checkpointer_writer = writer.clone();
        let checkpointer_thread = std::thread::Builder::new()
            .name("switchboard-store-checkpointer".into())
            .spawn(move || {
                checkpoint_loop(checkpoint_connection, checkpointer_writer, stop, options)
            })
            .map_err(|error| {
                StoreError::Database(format!("cannot start the checkpointer thread: {error}"))
            })?;
        Ok(SqliteStore {
            path,
            writer: Mutex::new(Some(writer)),
            readers: Arc::new(readers),
            next_reader: std::sync::atomic::AtomicUsize::new(0),
            writer_thread: Mutex::new(Some(writer_thread)),
            checkpointer_stop: Mutex::new(Some(checkpointer_stop)),
            checkpointer_thread: Mutex::new(Some(checkpointer_thread)),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Stops the writer after it has committed everything queued (and copied the WAL into the
    /// database).
    pub fn close(&self) {
        // The checkpointer first: it holds a handle on the writer's queue.
        if let Ok(mut stop) = self.checkpointer_stop.lock() {
            stop.take();
        }
        if let Some(thread) =
            self.checkpointer_thread.lock().ok().and_then(|mut thread| thread.take())
        {
            let _ = thread.join();
        }
        if let Ok(mut writer) = self.writer.lock() {
            writer.take();
        }
        if let Some(thread) = self.writer_thread.lock().ok().and_then(|mut thread| thread.take()) {
            let _ = thread.join();
        }
    }

    async fn write(&self, op: WriteOp) -> Result<(), StoreError> {
        let (done, result) = oneshot::channel();
        {
            let writer = self.writer.lock().map_err(|_| StoreError::Closed)?;
            writer
                .as_ref()
                .ok_or(StoreError::Closed)?
                .send(Job::Write(Write { op, done }))
                .map_err(|_| StoreError::Closed)?;
        }
        result.await.map_err(|_| StoreError::Closed)?
    }

    async fn read<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let readers = self.readers.clone();
        let index =
            self.next_reader.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % readers.len();
        tokio::task::spawn_blocking(move || {
            let connection = readers[index]
                .lock()
                .map_err(|_| StoreError::Database("a read connection's lock is poisoned".into()))?;
            work(&connection)
        })
        .await
        .map_err(|error| StoreError::Database(format!("read task failed: {error}")))?
    }
}

impl Drop for SqliteStore {
    fn drop(&mut self) {
        self.close();
    }
}

/// Every checkpoint interval ([`CHECKPOINT_INTERVAL`] by default), copies the WAL into the
/// database without blocking the writer (`PASSIVE`); once the WAL is large, has the writer
/// copy what was committed meanwhile, so that the WAL starts over.
fn checkpoint_loop(
    connection: Connection,
    writer: mpsc::Sender<Job>,
    stop: mpsc::Receiver<()>,
    options: SqliteOptions,
) {
    let page_size: u64 = connection
        .pragma_query_value(None, "page_size", |row| row.get::<_, i64>(0))
        .map(|size| size.max(512) as u64)
        .unwrap_or(4096);
    while let Err(mpsc::RecvTimeoutError::Timeout) = stop.recv_timeout(options.checkpoint_interval)
    {
        match checkpoint(&connection) {
            // Small enough to go on. (A WAL that this checkpoint copied completely may still
            // need the writer: the count is as of the checkpoint's start, and the writer may
            // have committed since.)
            Ok(frames)
                if (frames.max(0) as u64).saturating_mul(page_size) < options.wal_restart_bytes =>
            {
                continue
            }
            Ok(_) => {}
            Err(error) => {
                tracing::warn!(%error, "WAL checkpoint failed");
                continue;
            }
        }
        let (done, finished) = oneshot::channel();
        if writer.send(Job::FinishCheckpoint(done)).is_err() {
            break;
        }
        // Waits, so that the two never checkpoint at the same time.
        let _ = finished.blocking_recv();
    }
}

/// A `PASSIVE` checkpoint: copies what it can without waiting for anyone. Returns the frames
/// the WAL held when it started.
fn checkpoint(connection: &Connection) -> Result<i64, rusqlite::Error> {
    connection.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| row.get(1))
}

/// The writer thread: take everything queued (up to [`MAX_BATCH`]), commit it in one
/// transaction, answer each operation.
fn write_loop(mut connection: Connection, queue: mpsc::Receiver<Job>) {
    // Each session's key and last seq, instead of asking the database on every append.
    let mut known: HashMap<String, Known> = HashMap::new();
    let mut checkpoints = Vec::new();
    while let Ok(first) = queue.recv() {
        // Everything queued meanwhile shares the transaction (group commit without waiting).
        let mut batch = Vec::with_capacity(16);
        for job in std::iter::once(first).chain(std::iter::from_fn(|| queue.try_recv().ok())) {
            match job {
                Job::Write(write) => batch.push(write),
                Job::FinishCheckpoint(done) => checkpoints.push(done),
            }
            if batch.len() >= MAX_BATCH {
                break;
            }
        }
        commit(&mut connection, batch, &mut known);
        // After the batch's answers are out, so no append waits for it.
        for done in checkpoints.drain(..) {
            if let Err(error) = checkpoint(&connection) {
                tracing::warn!(%error, "finishing a WAL checkpoint failed");
            }
            let _ = done.send(());
        }
    }
    // Closing: everything into the database, and an empty WAL left behind.
    if let Err(error) = connection.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(())) {
        tracing::warn!(%error, "the final WAL checkpoint failed");
    }
}

/// Commits a batch in one transaction and answers each operation.
fn commit(connection: &mut Connection, batch: Vec<Write>, known: &mut HashMap<String, Known>) {
    if batch.is_empty() {
        return;
    }
    // One transaction for the batch. Each operation either fails before it writes (a
    // sequence check, a missing row) or is a single statement that SQLite rolls back on its
    // own, so a failed operation reports its error and the rest still commit.
    let results: Vec<Result<(), StoreError>> = match connection.transaction() {
        Ok(transaction) => {
            let mut results = Vec::with_capacity(batch.len());
            let mut broken = None;
            for write in &batch {
                match apply(&transaction, &write.op, known) {
                    Ok(()) => results.push(Ok(())),
                    Err(Failure::Rejected(error)) => results.push(Err(error)),
                    Err(Failure::Broken(error)) => {
                        broken = Some(error.to_string());
                        break;
                    }
                }
            }
            let outcome = match broken {
                // Dropping the transaction rolls it back.
                Some(error) => Err(error),
                None => transaction.commit().map_err(|error| error.to_string()),
            };
            match outcome {
                Ok(()) => results,
                Err(error) => {
                    known.clear();
                    batch.iter().map(|_| Err(StoreError::Database(error.clone()))).collect()
                }
            }
        }
        Err(error) => batch.iter().map(|_| Err(StoreError::Database(error.to_string()))).collect(),
    };
    for (write, result) in batch.into_iter().zip(results) {
        let _ = write.done.send(result);
    }
}

/// How an operation failed.
enum Failure {
    /// Nothing was written; the other operations may commit.
    Rejected(StoreError),
    /// Something may have been written: the whole transaction must roll back.
    Broken(StoreError),
}

impl From<rusqlite::Error> for Failure {
    fn from(error: rusqlite::Error) -> Self {
        Failure::Rejected(StoreError::from(error))
    }
}

impl From<StoreError> for Failure {
    fn from(error: StoreError) -> Self {
        Failure::Rejected(error)
    }
}

fn apply(
    connection: &Connection,
    op: &WriteOp,
    known: &mut HashMap<String, Known>,
) -> Result<(), Failure> {
    match op {
        WriteOp::CreateSession(record) => {
            connection.execute(
                "INSERT INTO sessions (id, claude_session_id, cwd, model, permission_mode, state, title, cost_usd, created_ms, updated_ms, config)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
                params![
                    record.id, record.claude_session_id, record.cwd, record.model, record.permission_mode, record.state,
                    record.title, record.cost_usd, record.created_ms as i64, record.updated_ms as i64, record.config.to_string()
                ],
            )?;
        }
        WriteOp::UpdateSession(record) => {
            let changed = connection.execute(
                "UPDATE sessions SET claude_session_id = ?2, cwd = ?3, model = ?4, permission_mode = ?5, state = ?6,
                 title = ?7, cost_usd = ?8, created_ms = ?9, updated_ms = ?10, config = ?11 WHERE id = ?1",
                params![
                    record.id, record.claude_session_id, record.cwd, record.model, record.permission_mode, record.state,
                    record.title, record.cost_usd, record.created_ms as i64, record.updated_ms as i64, record.config.to_string()
                ],
            )?;
            if changed == 0 {
                return Err(Failure::Rejected(StoreError::NotFound(record.id.clone())));
            }
        }
        WriteOp::DeleteSession(id) => {
            known.remove(id);
            connection.execute(
                "DELETE FROM events WHERE session = (SELECT key FROM session_keys WHERE id = ?1)",
                params![id],
            )?;
            for statement in
                ["DELETE FROM session_keys WHERE id = ?1", "DELETE FROM sessions WHERE id = ?1"]
            {
                connection
                    .execute(statement, params![id])
                    .map_err(|error| Failure::Broken(StoreError::from(error)))?;
            }
        }
        WriteOp::Append(events) => {
            // Check the whole batch against the known sequence before writing anything, so a
            // bad batch writes nothing.
            let mut next = HashMap::<&str, Known>::new();
            for event in events {
                let session = match next.get(event.session_id.as_str()) {
                    Some(session) => *session,
                    None => match known.get(&event.session_id) {
                        Some(session) => *session,
                        None => Known::read(connection, &event.session_id)?,
                    },
                };
                if event.seq != session.last + 1 {
                    let error = StoreError::OutOfSequence {
                        session_id: event.session_id.clone(),
                        seq: event.seq,
                        last: session.last,
                    };
                    return Err(Failure::Rejected(error));
                }
                next.insert(&event.session_id, Known { last: event.seq, ..session });
            }
            // From here on something may be written: a failure rolls the transaction back.
            let broken = |error: rusqlite::Error| Failure::Broken(StoreError::from(error));
            for (session_id, session) in next.iter_mut() {
                if session.key.is_none() {
                    connection
                        .prepare_cached("INSERT INTO session_keys (id) VALUES (?1)")
                        .and_then(|mut statement| statement.execute(params![session_id]))
                        .map_err(broken)?;
                    session.key = Some(connection.last_insert_rowid());
                }
            }
            let mut statement = connection
                .prepare_cached(
                    "INSERT INTO events (session, seq, ts_ms, dir, kind, payload) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                )
                .map_err(broken)?;
            for event in events {
                let key = next.get(event.session_id.as_str()).and_then(|session| session.key);
                statement
                    .execute(params![
                        key,
                        event.seq as i64,
                        event.ts_ms as i64,
                        event.dir,
                        event.kind,
                        event.payload
                    ])
                    .map_err(broken)?;
            }
            for (session_id, session) in next {
                known.insert(session_id.to_owned(), session);
            }
        }
    }
    Ok(())
}

/// What the writer knows about a session it appended to: its key (none before its first
/// event) and its last seq. The writer is the only writer, so this stays true; entries are
/// dropped on delete and rebuilt from the database whenever a transaction fails.
#[derive(Debug, Clone, Copy)]
struct Known {
    key: Option<i64>,
    last: u64,
}

impl Known {
    fn read(connection: &Connection, session_id: &str) -> Result<Known, StoreError> {
        let key: Option<i64> = connection
            .prepare_cached("SELECT key FROM session_keys WHERE id = ?1")?
            .query_row(params![session_id], |row| row.get(0))
            .optional()?;
        let last = match key {
            Some(_) => last_seq(connection, session_id)?,
            None => 0,
        };
        Ok(Known { key, last })
    }
}

fn last_seq(connection: &Connection, session_id: &str) -> Result<u64, StoreError> {
    let seq: Option<i64> = connection
        .prepare_cached(
            "SELECT MAX(seq) FROM events WHERE session = (SELECT key FROM session_keys WHERE id = ?1)",
        )?
        .query_row(params![session_id], |row| row.get(0))
        .optional()?
        .flatten();
    Ok(seq.unwrap_or(0) as u64)
}

fn event_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<EventRecord> {
    Ok(EventRecord {
        session_id: row.get(0)?,
        seq: row.get::<_, i64>(1)? as u64,
        ts_ms: row.get::<_, i64>(2)? as u64,
        dir: row.get(3)?,
        kind: row.get(4)?,
        payload: row.get(5)?,
    })
}

fn session_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<SessionRecord> {
    let config: String = row.get(10)?;
    Ok(SessionRecord {
        id: row.get(0)?,
        claude_session_id: row.get(1)?,
        cwd: row.get(2)?,
        model: row.get(3)?,
        permission_mode: row.get(4)?,
        state: row.get(5)?,
        title: row.get(6)?,
        cost_usd: row.get(7)?,
        created_ms: row.get::<_, i64>(8)? as u64,
        updated_ms: row.get::<_, i64>(9)? as u64,
        config: serde_json::from_str(&config).unwrap_or(serde_json::Value::Null),
    })
}

const SESSION_COLUMNS: &str =
    "id, claude_session_id, cwd, model, permission_mode, state, title, cost_usd, created_ms, updated_ms, config";

#[async_trait::async_trait]
impl Store for SqliteStore {
    async fn create_session(&self, record: &SessionRecord) -> Result<(), StoreError> {
        self.write(WriteOp::CreateSession(record.clone())).await
    }

    async fn update_session(&self, record: &SessionRecord) -> Result<(), StoreError> {
        self.write(WriteOp::UpdateSession(record.clone())).await
    }

    async fn get_session(&self, id: &str) -> Result<Option<SessionRecord>, StoreError> {
        let id = id.to_owned();
        self.read(move |connection| {
            Ok(connection
                .query_row(
                    &format!("SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?1"),
                    params![id],
                    session_from_row,
                )
                .optional()?)
        })
        .await
    }

    async fn list_sessions(&self) -> Result<Vec<SessionRecord>, StoreError> {
        self.read(|connection| {
            let mut statement = connection.prepare_cached(&format!(
                "SELECT {SESSION_COLUMNS} FROM sessions ORDER BY updated_ms DESC, id"
            ))?;
            let rows = statement.query_map([], session_from_row)?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
        .await
    }

    async fn delete_session(&self, id: &str) -> Result<(), StoreError> {
        self.write(WriteOp::DeleteSession(id.to_owned())).await
    }

    async fn append(&self, events: &[EventRecord]) -> Result<(), StoreError> {
        if events.is_empty() {
            return Ok(());
        }
        self.write(WriteOp::Append(events.to_vec())).await
    }

    async fn events_after(
        &self,
        session_id: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<EventRecord>, StoreError> {
        let session_id = session_id.to_owned();
        self.read(move |connection| {
            let mut statement = connection.prepare_cached(
                "SELECT ?1, seq, ts_ms, dir, kind, payload FROM events
                 WHERE session = (SELECT key FROM session_keys WHERE id = ?1) AND seq > ?2 ORDER BY seq LIMIT ?3",
            )?;
            let rows = statement
                .query_map(params![session_id, after as i64, limit as i64], event_from_row)?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
        .await
    }

    async fn events_before(
        &self,
        session_id: &str,
        before: u64,
        limit: usize,
    ) -> Result<Vec<EventRecord>, StoreError> {
        let session_id = session_id.to_owned();
        // SQLite integers are signed: a `before` past i64::MAX means "the end".
        let before = i64::try_from(before).unwrap_or(i64::MAX);
        self.read(move |connection| {
            let mut statement = connection.prepare_cached(
                "SELECT ?1, seq, ts_ms, dir, kind, payload FROM events
                 WHERE session = (SELECT key FROM session_keys WHERE id = ?1) AND seq < ?2 ORDER BY seq DESC LIMIT ?3",
            )?;
            let rows = statement.query_map(params![session_id, before, limit as i64], event_from_row)?;
            let mut page = rows.collect::<Result<Vec<_>, _>>()?;
            page.reverse();
            Ok(page)
        })
        .await
    }

    async fn last_seq(&self, session_id: &str) -> Result<u64, StoreError> {
        let session_id = session_id.to_owned();
        self.read(move |connection| last_seq(connection, &session_id)).await
    }
}
