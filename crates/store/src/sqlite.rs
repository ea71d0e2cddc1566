//! The SQLite store: schema migrations, a journal in front (see `journal.rs`), one writer
//! thread that commits session records and folds the journal into the database, and a small
//! pool of read connections.
//!
//! Durability: an append is in the journal before `append` returns, a session record is in
//! SQLite's WAL (`synchronous = NORMAL`) before `create_session` or `update_session` returns.
//! Both survive the process being killed at any point; only an OS crash or power loss can
//! take back the last writes. Opening the store folds into the database whatever a killed
//! process left in the journal. The database is never left corrupt.
//!
//! - **The writer** commits session records (everything queued in one transaction; an
//!   operation that fails writes nothing, the rest commit) and every [`FOLD_INTERVAL`] (or at
//!   [`journal::FOLD_EVENTS`] events or [`journal::FOLD_BYTES`] waiting) folds the journal:
//!   everything waiting in one transaction, deletes first, with the journal position it
//!   reached (the `journal` table), each session's lines as a few chunks (`chunks.rs`). Once
//!   committed, the events leave memory, and segments before the position leave the disk
//!   (a new segment starts past [`SEGMENT_BYTES`]). If the database falls behind
//!   ([`journal::MAX_UNFOLDED`] events or [`journal::MAX_UNFOLDED_BYTES`] waiting), appends
//!   wait for a fold. Opening the store folds what a killed process left after the recorded
//!   position (`recover`), then starts a new segment.
//! - **Checkpoints** have two parts (see [`CHECKPOINT_INTERVAL`]): the checkpointer thread's
//!   `PASSIVE` copy, and once the WAL holds [`WAL_RESTART_BYTES`] the writer's copy of the few
//!   frames committed meanwhile, so the WAL starts over.
//! - The writer and checkpointer threads run at a lower priority (about `nice 10`): their
//!   work comes in bursts that nothing latency-sensitive waits for.
//! - Migrations are counted by `PRAGMA user_version`. Earlier layouts of the events (a row per
//!   event clustered by session id, then a row per event in append order) are migrated on
//!   open, and the WAL is cut back after a migration.

use parking_lot::Mutex;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use rusqlite::{params, Connection, OptionalExtension};
use tokio::sync::oneshot;

use crate::chunks;
use crate::journal::{self, Appended, Entry, Journal};
use crate::{EventRecord, Launch, RecordState, SessionRecord, Store, StoreError};

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

/// One step of the schema: SQL, or SQL and then code.
enum Migration {
    Sql(&'static str),
    Code(&'static str, fn(&Connection) -> rusqlite::Result<()>),
}

/// The schema, one migration per entry; `PRAGMA user_version` counts those applied.
const MIGRATIONS: &[Migration] = &[
    Migration::Sql(
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
    ),
    // Events in the order they were appended, found by (session, seq) through an index. The
    // first layout clustered them by session (the key was the table): every append went into
    // its session's own B-tree leaf, in the middle of the table, so a commit with lines from n
    // sessions rewrote n leaves of 300-byte rows and split them often, about six WAL pages per
    // line under load, most of the writer's time. Appended in one order, lines share the
    // table's last leaf, and only the small index entries go to each session's place.
    Migration::Sql(
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
    ),
    // Sessions get a small integer key, and events carry it instead of the 36-character id:
    // the (session, seq) index entries shrink from about 50 bytes to about 8, so an append
    // touches fewer and fuller index pages (a third less writer CPU per event under load).
    Migration::Sql(
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
    ),
    // How far into the journal (segment, byte offset) the events have been folded into the
    // database; see `journal.rs`.
    Migration::Sql(
        "CREATE TABLE journal (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        segment INTEGER NOT NULL,
        offset INTEGER NOT NULL
    );
    INSERT INTO journal (id, segment, offset) VALUES (1, 0, 0);",
    ),
    // A person can put a session away (the web UI's "Archive").
    Migration::Sql("ALTER TABLE sessions ADD COLUMN archived INTEGER NOT NULL DEFAULT 0;"),
    // Notifications waiting to go out, per channel, in order (`Store::enqueue_outbox`).
    Migration::Sql(
        "CREATE TABLE outbox (
        id INTEGER PRIMARY KEY,
        channel TEXT NOT NULL,
        key TEXT NOT NULL,
        body TEXT NOT NULL,
        created_ms INTEGER NOT NULL,
        UNIQUE (channel, key)
    );",
    ),
    // The daemon that runs a session, when several share a database.
    Migration::Sql("ALTER TABLE sessions ADD COLUMN node TEXT;"),
    // Events in chunks: a session's consecutive events in one row (`chunks.rs`), so a fold
    // writes a row and an index entry per chunk instead of per event.
    Migration::Code(
        "CREATE TABLE chunks (
            id INTEGER PRIMARY KEY,
            session INTEGER NOT NULL,
            first_seq INTEGER NOT NULL,
            last_seq INTEGER NOT NULL,
            count INTEGER NOT NULL,
            codec INTEGER NOT NULL,
            size INTEGER NOT NULL,
            body BLOB NOT NULL
        );
        CREATE UNIQUE INDEX chunks_by_session ON chunks (session, first_seq);",
        chunks::from_events_table,
    ),
    // What a session spent in all, a column of its own (it was a key of `config`, and a record
    // without it read its CLI's cost instead, which may already hold the turn being counted).
    Migration::Sql(
        "ALTER TABLE sessions ADD COLUMN spent_usd REAL NOT NULL DEFAULT 0;
        UPDATE sessions SET spent_usd = COALESCE(json_extract(config, '$.spent_usd'), cost_usd),
            config = json_remove(config, '$.spent_usd')
            WHERE json_valid(config);",
    ),
    // The search index (`search::sqlite`).
    Migration::Sql(crate::search::sqlite::SCHEMA),
    // Checkpoints of sessions' views (`view_checkpoints`).
    Migration::Sql(crate::view_checkpoints::sqlite::SCHEMA),
];

/// How often the writer folds the journal into the database (a fold also starts early once
/// [`journal::FOLD_EVENTS`] events wait). Longer folds are cheaper per event: each session's
/// waiting events go in as one chunk (more past [`crate::CHUNK_EVENTS`]), however few.
/// Measured with the relay benchmark (when a row per event was written): a second cost the
/// relay about 6% less CPU than half a second; two seconds, no less than one. What waits is
/// held in memory (at 5,000 events/s, about 2.5 MB).
pub const FOLD_INTERVAL: Duration = Duration::from_millis(1000);

/// A journal segment this large is closed at the next fold, and removed once folded.
pub const SEGMENT_BYTES: u64 = 64 * 1024 * 1024;

enum WriteOp {
    CreateSession(SessionRecord),
    UpdateSession(SessionRecord),
    ClaimSession {
        id: String,
        from: Option<String>,
        seen_ms: u64,
        to: Option<String>,
        stamp_ms: u64,
    },
    EnqueueOutbox(Vec<crate::NewOutboxItem>),
    OutboxDone(u64),
    OutboxForget(String),
    Index(Vec<crate::SearchEntry>, Vec<(String, u64)>),
    PutViewCheckpoint(String, crate::ViewCheckpoint),
}

struct Write {
    op: WriteOp,
    done: oneshot::Sender<Result<(), StoreError>>,
}

/// What the writer thread is asked to do.
enum Job {
    /// An operation, committed with whatever else is queued.
    Write(Write),
    /// Fold the journal now (answered when the fold is committed, if asked).
    Fold(Option<oneshot::Sender<Result<(), StoreError>>>),
    /// The second part of a checkpoint (see [`CHECKPOINT_INTERVAL`]), between transactions;
    /// answered when done.
    FinishCheckpoint(oneshot::Sender<()>),
}

/// How a [`SqliteStore`] runs.
#[derive(Debug, Clone, Copy)]
pub struct SqliteOptions {
    /// How often the WAL is checkpointed ([`CHECKPOINT_INTERVAL`] by default).
    pub checkpoint_interval: Duration,
    /// How large the WAL may grow before it starts over ([`WAL_RESTART_BYTES`] by default).
    pub wal_restart_bytes: u64,
    /// How often the journal is folded into the database ([`FOLD_INTERVAL`] by default).
    pub fold_interval: Duration,
    /// How large a journal segment grows before the next one starts ([`SEGMENT_BYTES`] by
    /// default).
    pub segment_bytes: u64,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            checkpoint_interval: CHECKPOINT_INTERVAL,
            wal_restart_bytes: WAL_RESTART_BYTES,
            fold_interval: FOLD_INTERVAL,
            segment_bytes: SEGMENT_BYTES,
        }
    }
}

/// The SQLite store.
pub struct SqliteStore {
    path: PathBuf,
    journal: Arc<Journal>,
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
    let stored: i64 = connection.pragma_query_value(None, "user_version", |row| row.get(0))?;
    // A negative version (written by something else) is as unknown as a newer one.
    let version = usize::try_from(stored).unwrap_or(usize::MAX);
    if version > MIGRATIONS.len() {
        return Err(StoreError::Database(format!(
            "the database schema is version {stored}, newer than this Switchboard knows ({}); upgrade Switchboard",
            MIGRATIONS.len()
        )));
    }
    for (index, migration) in MIGRATIONS.iter().enumerate().skip(version) {
        let transaction = connection.transaction()?;
        match migration {
            Migration::Sql(sql) => transaction.execute_batch(sql)?,
            Migration::Code(sql, code) => {
                transaction.execute_batch(sql)?;
                code(&transaction)?;
            }
        }
        transaction.pragma_update(None, "user_version", (index + 1) as i64)?;
        transaction.commit()?;
    }
    Ok(())
}

/// Folds into the database what the journal holds past the position the database records
/// (what a stopped or killed process left), removes the segments, and returns the number of
/// the segment to start.
fn recover(connection: &mut Connection, database: &Path) -> Result<u64, StoreError> {
    let (segment, offset): (i64, i64) =
        connection.query_row("SELECT segment, offset FROM journal WHERE id = 1", [], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })?;
    let (segment, offset) = (segment.max(0) as u64, offset.max(0) as u64);
    let found = journal::segments(database)?;
    let transaction = connection.transaction()?;
    let mut keys = chunks::Keys::default();
    let mut recovered = 0usize;
    // Appends gathered and inserted together (each session's in full chunks), before a
    // delete and every `journal::FOLD_EVENTS`.
    let mut waiting: Vec<EventRecord> = Vec::new();
    for &number in found.iter().filter(|number| **number >= segment) {
        let from = if number == segment { offset } else { 0 };
        journal::read_segment(&journal::segment_path(database, number), from, |entry| {
            match entry {
                Entry::Append(events) => {
                    recovered += events.len();
                    waiting.extend(events);
                    if waiting.len() >= journal::FOLD_EVENTS {
                        chunks::insert(&transaction, &mut keys, &waiting)?;
                        waiting.clear();
                    }
                }
                Entry::Delete(id) => {
                    chunks::insert(&transaction, &mut keys, &waiting)?;
                    waiting.clear();
                    delete_session_rows(&transaction, &id)?;
                    keys.remove(&id);
                }
            }
            Ok(())
        })?;
    }
    chunks::insert(&transaction, &mut keys, &waiting)?;
    let next = found.last().copied().unwrap_or(0).max(segment) + 1;
    transaction.execute(
        "UPDATE journal SET segment = ?1, offset = 0 WHERE id = 1",
        params![next as i64],
    )?;
    transaction.commit()?;
    for number in found {
        journal::remove_segment(database, number);
    }
    if recovered > 0 {
        tracing::info!(
            events = recovered,
            "folded into the database the journal a stopped Switchboard left"
        );
    }
    Ok(next)
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
        if let Some(parent) = path.parent().filter(|parent| !parent.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|error| {
                StoreError::Database(format!("cannot create {}: {error}", parent.display()))
            })?;
        }
        let lock = journal::lock_database(&path)?;
        // Made private before SQLite opens it: SQLite gives its WAL and shared-memory files
        // the database file's mode.
        {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .mode(journal::PRIVATE)
                .open(&path)
                .map_err(|error| {
                    StoreError::Database(format!("cannot create {}: {error}", path.display()))
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
        // A migration's whole transaction went through the WAL: copied in and cut back to
        // nothing now, not left at that size until the next restart of the WAL.
        if let Err(error) =
            writer_connection.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        {
            tracing::warn!(%error, "cutting back the WAL at start failed; it is cut back later");
        }
        let segment = recover(&mut writer_connection, &path)?;
        let journal = Arc::new(Journal::create(&path, segment, lock)?);
        let checkpoint_connection = open(&path)?;
        let readers = (0..READ_CONNECTIONS)
            .map(|_| open(&path).map(Mutex::new))
            .collect::<Result<Vec<_>, _>>()?;
        let (writer, queue) = mpsc::channel::<Job>();
        let writer_journal = journal.clone();
        let writer_thread = std::thread::Builder::new()
            .name("switchboard-store-writer".into())
            .spawn(move || write_loop(writer_connection, queue, &writer_journal, options))
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
            journal,
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

    /// Stops the writer after it has committed everything queued and folded the journal
    /// (and copied the WAL into the database). Appends after this fail; the database can be
    /// opened again (by this process or another) once this returns.
    pub fn close(&self) {
        // The checkpointer first: it holds a handle on the writer's queue.
        self.checkpointer_stop.lock().take();
        if let Some(thread) = self.checkpointer_thread.lock().take() {
            let _ = thread.join();
        }
        self.journal.close();
        self.writer.lock().take();
        if let Some(thread) = self.writer_thread.lock().take() {
            let _ = thread.join();
        }
        self.journal.release();
    }

    fn send(&self, job: Job) -> Result<(), StoreError> {
        let writer = self.writer.lock();
        writer.as_ref().ok_or(StoreError::Closed)?.send(job).map_err(|_| StoreError::Closed)
    }

    async fn write(&self, op: WriteOp) -> Result<(), StoreError> {
        let (done, result) = oneshot::channel();
        self.send(Job::Write(Write { op, done }))?;
        result.await.map_err(|_| StoreError::Closed)?
    }

    /// Folds what the journal holds into the database now, and returns once that is
    /// committed (the database file alone then has every event appended so far: before a
    /// backup, say). The writer does this on its own every [`SqliteOptions::fold_interval`].
    pub async fn flush(&self) -> Result<(), StoreError> {
        let (done, result) = oneshot::channel();
        self.send(Job::Fold(Some(done)))?;
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
            let connection = readers[index].lock();
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
    background_priority();
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

/// Lowers the calling thread's priority (to about `nice 10`). The writer and the checkpointer
/// do background work in bursts (a fold commits a second of events at once): at normal
/// priority, on a machine whose cores are busy, such a burst took a core from the tasks that
/// carry lines to subscribers for a few milliseconds, which showed in the daemon's p99 latency.
/// Nothing waits on a fold but a delete and an append over [`journal::MAX_UNFOLDED`], and a
/// lower priority still gets its share of a busy CPU.
fn background_priority() {
    let priority = thread_priority::ThreadPriorityValue::try_from(BACKGROUND_PRIORITY)
        .map(thread_priority::ThreadPriority::Crossplatform);
    if let Err(error) = priority.map(thread_priority::set_current_thread_priority) {
        tracing::debug!(?error, "cannot lower the store thread's priority");
    }
}

/// On thread-priority's 0..=99 scale, where 49 is a normal thread's (nice 0); 25 is about
/// nice 10.
const BACKGROUND_PRIORITY: u8 = 25;

/// The writer thread: take everything queued (up to [`MAX_BATCH`]), commit it in one
/// transaction, answer each operation; fold the journal every fold interval, or when asked.
fn write_loop(
    mut connection: Connection,
    queue: mpsc::Receiver<Job>,
    journal: &Journal,
    options: SqliteOptions,
) {
    // Each session's key, instead of asking the database on every fold.
    let mut keys = chunks::Keys::default();
    let mut checkpoints = Vec::new();
    let mut folds = Vec::new();
    let mut last_fold = Instant::now();
    // Folds made, for forgetting `keys` every `journal::SWEEP_EVERY` of them.
    let mut folded: u64 = 0;
    background_priority();
    loop {
        let first =
            match queue.recv_timeout(options.fold_interval.saturating_sub(last_fold.elapsed())) {
                Ok(job) => Some(job),
                Err(mpsc::RecvTimeoutError::Timeout) => None,
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            };
        let mut fold_now = false;
        // Everything queued meanwhile shares the transaction (group commit without waiting).
        let mut batch = Vec::new();
        for job in first.into_iter().chain(std::iter::from_fn(|| queue.try_recv().ok())) {
            match job {
                Job::Write(write) => batch.push(write),
                Job::Fold(done) => {
                    fold_now = true;
                    folds.extend(done);
                }
                Job::FinishCheckpoint(done) => checkpoints.push(done),
            }
            if batch.len() >= MAX_BATCH {
                break;
            }
        }
        commit(&mut connection, batch);
        if fold_now || last_fold.elapsed() >= options.fold_interval {
            folded += 1;
            if folded.is_multiple_of(journal::SWEEP_EVERY) {
                // What the writer knows of each session is forgotten now and then (as the
                // journal forgets idle sessions): a daemon that runs for months keeps no entry
                // per session it ever wrote, and an active one is looked up again once.
                keys = chunks::Keys::default();
            }
            let result = fold(&mut connection, journal, &mut keys, options.segment_bytes);
            last_fold = Instant::now();
            for done in folds.drain(..) {
                let _ = done.send(
                    result
                        .as_ref()
                        .map(|_| ())
                        .map_err(|error| StoreError::Database(error.to_string())),
                );
            }
        }
        // After the batch's answers are out, so no append waits for it.
        for done in checkpoints.drain(..) {
            if let Err(error) = checkpoint(&connection) {
                tracing::warn!(%error, "finishing a WAL checkpoint failed");
            }
            let _ = done.send(());
        }
    }
    // Closing: the journal into the database, everything into the database file, and an
    // empty WAL left behind.
    if let Err(error) = fold(&mut connection, journal, &mut keys, u64::MAX) {
        tracing::error!(%error, "the last fold of the journal failed; the next start folds it");
    }
    if let Err(error) = connection.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(())) {
        tracing::warn!(%error, "the final WAL checkpoint failed");
    }
}

/// Folds what waits in the journal into the database in one transaction, with the journal
/// position it reached.
fn fold(
    connection: &mut Connection,
    journal: &Journal,
    keys: &mut chunks::Keys,
    segment_bytes: u64,
) -> Result<(), StoreError> {
    let Some(fold) = journal.take(segment_bytes)? else { return Ok(()) };
    let result = (|| -> Result<(), rusqlite::Error> {
        let transaction = connection.transaction()?;
        for id in &fold.deletes {
            delete_session_rows(&transaction, id)?;
            keys.remove(id);
        }
        chunks::insert(&transaction, keys, &fold.events)?;
        transaction.execute(
            "UPDATE journal SET segment = ?1, offset = ?2 WHERE id = 1",
            params![fold.position.0 as i64, fold.position.1 as i64],
        )?;
        transaction.commit()
    })();
    match result {
        Ok(()) => {
            journal.folded(fold);
            Ok(())
        }
        Err(error) => {
            // Rolled back: keys it created are gone again.
            keys.clear();
            tracing::error!(%error, events = fold.events.len(), "folding the journal into the database failed; it is retried");
            journal.restore(fold);
            Err(StoreError::from(error))
        }
    }
}

/// Deletes a session's record, key and events.
fn delete_session_rows(connection: &Connection, session_id: &str) -> rusqlite::Result<()> {
    crate::search::sqlite::forget(connection, session_id)?;
    crate::view_checkpoints::sqlite::forget(connection, session_id)?;
    for statement in [
        "DELETE FROM chunks WHERE session = (SELECT key FROM session_keys WHERE id = ?1)",
        "DELETE FROM session_keys WHERE id = ?1",
        "DELETE FROM sessions WHERE id = ?1",
    ] {
        connection.prepare_cached(statement)?.execute(params![session_id])?;
    }
    Ok(())
}

/// Commits a batch in one transaction and answers each operation. Each operation is a single
/// statement that SQLite rolls back on its own when it fails, so a failed operation reports
/// its error and the rest still commit.
fn commit(connection: &mut Connection, batch: Vec<Write>) {
    if batch.is_empty() {
        return;
    }
    let results: Vec<Result<(), StoreError>> = match connection.transaction() {
        Ok(transaction) => {
            let results: Vec<_> =
                batch.iter().map(|write| apply(&transaction, &write.op)).collect();
            match transaction.commit() {
                Ok(()) => results,
                Err(error) => {
                    batch.iter().map(|_| Err(StoreError::Database(error.to_string()))).collect()
                }
            }
        }
        Err(error) => batch.iter().map(|_| Err(StoreError::Database(error.to_string()))).collect(),
    };
    for (write, result) in batch.into_iter().zip(results) {
        let _ = write.done.send(result);
    }
}

fn apply(connection: &Connection, op: &WriteOp) -> Result<(), StoreError> {
    match op {
        WriteOp::CreateSession(record) => {
            connection.execute(
                "INSERT INTO sessions (id, claude_session_id, cwd, model, permission_mode, state, title, cost_usd, created_ms, updated_ms, config, archived, node, spent_usd)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
                params![
                    record.id, record.claude_session_id, record.cwd, record.model, record.permission_mode, record.state.as_str(),
                    record.title, record.cost_usd, record.created_ms as i64, record.updated_ms as i64, record.launch.to_stored(),
                    record.archived, record.node, record.spent_usd
                ],
            )?;
        }
        WriteOp::UpdateSession(record) => {
            let changed = connection.execute(
                "UPDATE sessions SET claude_session_id = ?2, cwd = ?3, model = ?4, permission_mode = ?5, state = ?6,
                 title = ?7, cost_usd = ?8, created_ms = ?9, updated_ms = ?10, config = ?11, archived = ?12, spent_usd = ?14
                 WHERE id = ?1 AND node IS ?13",
                params![
                    record.id, record.claude_session_id, record.cwd, record.model, record.permission_mode, record.state.as_str(),
                    record.title, record.cost_usd, record.created_ms as i64, record.updated_ms as i64, record.launch.to_stored(),
                    record.archived, record.node, record.spent_usd
                ],
            )?;
            if changed == 0 {
                return Err(not_written(connection, &record.id)?);
            }
        }
        WriteOp::ClaimSession { id, from, seen_ms, to, stamp_ms } => {
            let changed = connection.execute(
                "UPDATE sessions SET node = ?3, updated_ms = ?5 WHERE id = ?1 AND node IS ?2 AND updated_ms = ?4",
                params![id, from, to, *seen_ms as i64, *stamp_ms as i64],
            )?;
            if changed == 0 {
                return Err(not_written(connection, id)?);
            }
        }
        WriteOp::EnqueueOutbox(items) => {
            // Several rows in one operation: all or none (a savepoint within the writer's
            // transaction, which other operations share).
            connection.execute_batch("SAVEPOINT enqueue_outbox")?;
            let inserted = (|| -> Result<(), StoreError> {
                let mut statement = connection.prepare_cached(
                    "INSERT OR IGNORE INTO outbox (channel, key, body, created_ms) VALUES (?1, ?2, ?3, ?4)",
                )?;
                let now = crate::now_ms() as i64;
                for item in items {
                    statement.execute(params![item.channel, item.key, item.body, now])?;
                }
                Ok(())
            })();
            if inserted.is_err() {
                connection.execute_batch("ROLLBACK TO enqueue_outbox")?;
            }
            connection.execute_batch("RELEASE enqueue_outbox")?;
            inserted?;
        }
        WriteOp::OutboxDone(id) => {
            connection.execute("DELETE FROM outbox WHERE id = ?1", params![*id as i64])?;
        }
        WriteOp::OutboxForget(channel) => {
            connection.execute("DELETE FROM outbox WHERE channel = ?1", params![channel])?;
        }
        WriteOp::Index(entries, marks) => crate::search::sqlite::write(connection, entries, marks)?,
        WriteOp::PutViewCheckpoint(id, checkpoint) => {
            crate::view_checkpoints::sqlite::put(connection, id, checkpoint)?
        }
    }
    Ok(())
}

/// Why a session's row was not written: it is gone, or another node's.
fn not_written(connection: &Connection, id: &str) -> Result<StoreError, StoreError> {
    let node: Option<Option<String>> = connection
        .query_row("SELECT node FROM sessions WHERE id = ?1", params![id], |row| row.get(0))
        .optional()?;
    Ok(match node {
        Some(node) => StoreError::Moved { id: id.to_owned(), node },
        None => StoreError::NotFound(id.to_owned()),
    })
}

fn last_seq(connection: &Connection, session_id: &str) -> Result<u64, StoreError> {
    Ok(chunks::last_seq_of(connection, session_id)?)
}

fn session_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<SessionRecord> {
    let config: String = row.get(10)?;
    Ok(SessionRecord {
        id: row.get(0)?,
        claude_session_id: row.get(1)?,
        cwd: row.get(2)?,
        model: row.get(3)?,
        permission_mode: row.get(4)?,
        state: {
            let text: String = row.get(5)?;
            RecordState::parse(&text).ok_or_else(|| {
                rusqlite::Error::FromSqlConversionFailure(
                    5,
                    rusqlite::types::Type::Text,
                    format!("{text:?} is not a session state").into(),
                )
            })?
        },
        title: row.get(6)?,
        cost_usd: row.get(7)?,
        created_ms: row.get::<_, i64>(8)? as u64,
        updated_ms: row.get::<_, i64>(9)? as u64,
        launch: Launch::from_stored(&config).map_err(|error| {
            let id: String = row.get(0).unwrap_or_default();
            let error = format!("session {id}: {error}");
            rusqlite::Error::FromSqlConversionFailure(10, rusqlite::types::Type::Text, error.into())
        })?,
        archived: row.get(11)?,
        node: row.get(12)?,
        spent_usd: row.get(13)?,
    })
}

const SESSION_COLUMNS: &str =
    "id, claude_session_id, cwd, model, permission_mode, state, title, cost_usd, created_ms, updated_ms, config, archived, node, spent_usd";

#[async_trait::async_trait]
impl Store for SqliteStore {
    async fn create_session(&self, record: &SessionRecord) -> Result<(), StoreError> {
        self.write(WriteOp::CreateSession(record.clone())).await
    }

    async fn update_session(&self, record: &SessionRecord) -> Result<(), StoreError> {
        self.write(WriteOp::UpdateSession(record.clone())).await
    }

    async fn claim_session(&self, claim: crate::Claim<'_>) -> Result<bool, StoreError> {
        let claim = WriteOp::ClaimSession {
            id: claim.id.to_owned(),
            from: claim.from.map(str::to_owned),
            seen_ms: claim.seen_ms,
            to: claim.to.map(str::to_owned),
            stamp_ms: claim.stamp_ms,
        };
        match self.write(claim).await {
            Ok(()) => Ok(true),
            Err(StoreError::Moved { .. }) => Ok(false),
            Err(error) => Err(error),
        }
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
            let mut sessions = Vec::new();
            for row in statement.query_map([], session_from_row)? {
                match row {
                    Ok(record) => sessions.push(record),
                    // A row that cannot be read as a record (its state or launch config):
                    // left out of the list, and said, rather than hiding every other session.
                    // Asked for by id, it is the error.
                    Err(rusqlite::Error::FromSqlConversionFailure(_, _, error)) => {
                        tracing::error!("a session is left out of the list: {error}");
                    }
                    Err(error) => return Err(error.into()),
                }
            }
            Ok(sessions)
        })
        .await
    }

    async fn delete_session(&self, id: &str) -> Result<(), StoreError> {
        // Journaled first (a restart finishes it), then deleted from the database by a fold.
        self.journal.delete(id)?;
        self.flush().await
    }

    async fn append(&self, events: &[EventRecord]) -> Result<(), StoreError> {
        let shared: Vec<Arc<EventRecord>> = events.iter().cloned().map(Arc::new).collect();
        self.append_shared(&shared).await
    }

    async fn append_shared(&self, events: &[Arc<EventRecord>]) -> Result<(), StoreError> {
        if events.is_empty() {
            return Ok(());
        }
        loop {
            match self.journal.append(events)? {
                // The database has fallen far behind: wait for a fold to make room.
                Appended::Full => self.flush().await?,
                Appended::Written { fold_now } => {
                    if fold_now {
                        self.send(Job::Fold(None))?;
                    }
                    return Ok(());
                }
                Appended::Unknown(sessions, generation) => {
                    for session_id in sessions {
                        let id = session_id.clone();
                        let last = self.read(move |connection| last_seq(connection, &id)).await?;
                        self.journal.learn(&session_id, last, generation)?;
                    }
                }
            }
        }
    }

    async fn events_after(
        &self,
        session_id: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<EventRecord>, StoreError> {
        // SQLite integers are signed, and no seq is past i64::MAX: nothing comes after that
        // (cast as it was, a larger `after` wrapped to a negative number and read everything).
        if i64::try_from(after).is_err() {
            return Ok(Vec::new());
        }
        // The journal first (see `journal.rs`): what is folded meanwhile is then in the
        // database, so nothing falls between the two reads.
        let pending = self.journal.pending_after(session_id, after, limit)?;
        if pending.first().is_some_and(|event| event.seq == after + 1) {
            return Ok(pending);
        }
        let id = session_id.to_owned();
        let mut events = self
            .read(move |connection| chunks::events_after(connection, &id, after, limit))
            .await?;
        let mut next = events.last().map_or(after, |event| event.seq) + 1;
        for event in pending {
            if events.len() >= limit || event.seq > next {
                break;
            }
            if event.seq == next {
                events.push(event);
                next += 1;
            }
        }
        Ok(events)
    }

    async fn events_before(
        &self,
        session_id: &str,
        before: u64,
        limit: usize,
    ) -> Result<Vec<EventRecord>, StoreError> {
        let pending = self.journal.pending_before(session_id, before, limit)?;
        if pending.len() >= limit {
            return Ok(pending);
        }
        // The rest is older than what the journal holds.
        let id = session_id.to_owned();
        let below = pending.first().map_or(before, |event| event.seq);
        let wanted = limit - pending.len();
        let mut page = self
            .read(move |connection| chunks::events_before(connection, &id, below, wanted))
            .await?;
        page.extend(pending);
        Ok(page)
    }

    async fn last_seq(&self, session_id: &str) -> Result<u64, StoreError> {
        if let Some(last) = self.journal.last(session_id)? {
            return Ok(last);
        }
        let session_id = session_id.to_owned();
        self.read(move |connection| last_seq(connection, &session_id)).await
    }

    async fn enqueue_outbox(&self, items: &[crate::NewOutboxItem]) -> Result<(), StoreError> {
        if items.is_empty() {
            return Ok(());
        }
        self.write(WriteOp::EnqueueOutbox(items.to_vec())).await
    }

    async fn outbox(
        &self,
        channel: &str,
        limit: usize,
    ) -> Result<Vec<crate::OutboxItem>, StoreError> {
        let channel = channel.to_owned();
        self.read(move |connection| {
            let mut statement = connection.prepare_cached(
                "SELECT id, channel, key, body, created_ms FROM outbox WHERE channel = ?1 ORDER BY id LIMIT ?2",
            )?;
            let rows = statement.query_map(params![channel, limit as i64], |row| {
                Ok(crate::OutboxItem {
                    id: row.get::<_, i64>(0)? as u64,
                    channel: row.get(1)?,
                    key: row.get(2)?,
                    body: row.get(3)?,
                    created_ms: row.get::<_, i64>(4)? as u64,
                })
            })?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
        .await
    }

    async fn outbox_done(&self, id: u64) -> Result<(), StoreError> {
        self.write(WriteOp::OutboxDone(id)).await
    }

    async fn outbox_forget(&self, channel: &str) -> Result<(), StoreError> {
        self.write(WriteOp::OutboxForget(channel.to_owned())).await
    }

    async fn outbox_channels(&self) -> Result<Vec<String>, StoreError> {
        self.read(|connection| {
            let mut statement = connection
                .prepare_cached("SELECT DISTINCT channel FROM outbox ORDER BY channel")?;
            let rows = statement.query_map([], |row| row.get(0))?;
            Ok(rows.collect::<Result<Vec<String>, _>>()?)
        })
        .await
    }

    fn search_index(&self) -> Option<&dyn crate::Search> {
        Some(self)
    }

    fn view_checkpoints(&self) -> Option<&dyn crate::ViewCheckpoints> {
        Some(self)
    }
}

#[async_trait::async_trait]
impl crate::ViewCheckpoints for SqliteStore {
    async fn put_view_checkpoint(
        &self,
        session_id: &str,
        checkpoint: &crate::ViewCheckpoint,
    ) -> Result<(), StoreError> {
        self.write(WriteOp::PutViewCheckpoint(session_id.to_owned(), checkpoint.clone())).await
    }

    async fn view_checkpoint(
        &self,
        session_id: &str,
        at: u64,
        format: &str,
    ) -> Result<Option<crate::ViewCheckpoint>, StoreError> {
        let (session_id, format) = (session_id.to_owned(), format.to_owned());
        self.read(move |connection| {
            crate::view_checkpoints::sqlite::nearest(connection, &session_id, at, &format)
        })
        .await
    }

    async fn view_checkpoint_marks(
        &self,
        format: &str,
    ) -> Result<std::collections::HashMap<String, u64>, StoreError> {
        let format = format.to_owned();
        self.read(move |connection| crate::view_checkpoints::sqlite::marks(connection, &format))
            .await
    }
}

#[async_trait::async_trait]
impl crate::Search for SqliteStore {
    async fn index(
        &self,
        entries: &[crate::SearchEntry],
        marks: &[(String, u64)],
    ) -> Result<(), StoreError> {
        self.write(WriteOp::Index(entries.to_vec(), marks.to_vec())).await
    }

    async fn marks(&self) -> Result<std::collections::HashMap<String, u64>, StoreError> {
        self.read(crate::search::sqlite::marks).await
    }

    async fn search(
        &self,
        query: &crate::SearchQuery,
    ) -> Result<Vec<crate::SearchHit>, StoreError> {
        let query = query.clone();
        self.read(move |connection| crate::search::sqlite::search(connection, &query)).await
    }

    async fn group(
        &self,
        query: &crate::SearchQuery,
        by: crate::GroupBy,
    ) -> Result<Vec<crate::SearchGroup>, StoreError> {
        let query = query.clone();
        self.read(move |connection| crate::search::sqlite::group(connection, &query, by)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(session_id: &str, seq: u64) -> EventRecord {
        EventRecord {
            session_id: session_id.into(),
            seq,
            ts_ms: 7,
            dir: "from_cli".into(),
            kind: "line".into(),
            payload: format!("{{\"n\":{seq}}}"),
        }
    }

    /// What a process killed after journaling a delete (and more appends) but before folding
    /// them leaves: the next open finishes the delete and keeps the appends.
    #[tokio::test]
    async fn a_journaled_delete_and_append_are_finished_on_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        {
            let store = SqliteStore::open(&path).unwrap();
            let record = SessionRecord {
                archived: false,
                node: None,
                id: "x".into(),
                claude_session_id: None,
                cwd: "/".into(),
                model: None,
                permission_mode: None,
                state: RecordState::Idle,
                title: None,
                cost_usd: 0.0,
                spent_usd: 0.0,
                created_ms: 1,
                updated_ms: 1,
                launch: Launch::default(),
            };
            store.create_session(&record).await.unwrap();
            store.append(&[event("x", 1), event("x", 2)]).await.unwrap();
            store.close();
        }
        let next = journal::segments(&path).unwrap().last().copied().unwrap() + 1;
        let mut bytes = journal::MAGIC.to_vec();
        journal::encode_delete(&mut bytes, "x").unwrap();
        journal::encode_append(&mut bytes, &[Arc::new(event("y", 1)), Arc::new(event("y", 2))])
            .unwrap();
        std::fs::write(journal::segment_path(&path, next), bytes).unwrap();

        let store = SqliteStore::open(&path).unwrap();
        assert_eq!(store.get_session("x").await.unwrap(), None);
        assert!(store.events_after("x", 0, 10).await.unwrap().is_empty());
        let y = store.events_after("y", 0, 10).await.unwrap();
        assert_eq!(y, vec![event("y", 1), event("y", 2)]);
    }

    /// A record whose checksum does not match (a torn or damaged write) ends the segment: what
    /// came before it is read, it and what follows are not.
    #[test]
    fn a_damaged_record_ends_the_segment() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("segment");
        let mut bytes = journal::MAGIC.to_vec();
        journal::encode_append(&mut bytes, &[Arc::new(event("a", 1))]).unwrap();
        let good_end = bytes.len() as u64;
        journal::encode_append(&mut bytes, &[Arc::new(event("a", 2))]).unwrap();
        let last = bytes.len() - 3;
        bytes[last] ^= 0xFF;
        // And zeros after it, as a file system may leave where a write never landed.
        bytes.extend_from_slice(&[0; 64]);
        std::fs::write(&path, &bytes).unwrap();
        let mut read = Vec::new();
        let end = journal::read_segment(&path, 0, |entry| {
            if let Entry::Append(events) = entry {
                read.extend(events);
            }
            Ok(())
        })
        .unwrap();
        assert_eq!(read, vec![event("a", 1)]);
        assert_eq!(end, good_end);
        // Zeros right after good records end the segment too (no record is empty).
        let mut zeros = bytes[..good_end as usize].to_vec();
        zeros.extend_from_slice(&[0; 64]);
        std::fs::write(&path, &zeros).unwrap();
        assert_eq!(journal::read_segment(&path, 0, |_| Ok(())).unwrap(), good_end);
        // Not a journal at all: a clear error, nothing read.
        std::fs::write(&path, b"SQLite format 3\0 and more").unwrap();
        let error = journal::read_segment(&path, 0, |_| Ok(())).unwrap_err().to_string();
        assert!(error.contains("is not a Switchboard journal segment"), "{error}");
    }
}
