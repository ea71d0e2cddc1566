//! Both stores pass the conformance suite; the SQLite store keeps everything across reopening
//! and is concurrent-safe.

use std::sync::Arc;

use switchboard_store::{conformance, EventRecord, MemoryStore, SqliteStore, Store};

#[tokio::test]
async fn memory_store_conforms() {
    conformance::run(&MemoryStore::new()).await;
}

#[tokio::test]
async fn sqlite_store_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("switchboard.db")).unwrap();
    conformance::run(&store).await;
}

#[tokio::test]
async fn sqlite_keeps_everything_across_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested/dir/switchboard.db");
    {
        let store = SqliteStore::open(&path).unwrap();
        conformance::run(&store).await;
        store.close();
    }
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(store.last_seq("a").await.unwrap(), 100);
    assert_eq!(store.get_session("a").await.unwrap().unwrap().state, "idle");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_appends_to_many_sessions_are_batched_and_ordered() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(dir.path().join("db")).unwrap());
    let mut tasks = Vec::new();
    for session in 0..20 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let id = format!("s{session}");
            for seq in 1..=50u64 {
                let event = EventRecord {
                    session_id: id.clone(),
                    seq,
                    ts_ms: 0,
                    dir: "switchboard".into(),
                    kind: "k".into(),
                    payload: format!("{{\"n\":{seq}}}"),
                };
                store.append(&[event]).await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    for session in 0..20 {
        let events = store.events_after(&format!("s{session}"), 0, 100).await.unwrap();
        assert_eq!(events.len(), 50);
        assert_eq!(events[49].payload, "{\"n\":50}");
    }
}

#[test]
fn a_newer_schema_is_refused_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    drop(SqliteStore::open(&path).unwrap());
    let connection = rusqlite::Connection::open(&path).unwrap();
    connection.pragma_update(None, "user_version", 99).unwrap();
    drop(connection);
    let error = SqliteStore::open(&path).unwrap_err().to_string();
    assert!(error.contains("newer than this Switchboard knows"), "{error}");
}

/// A database written by the first schema (events clustered by session) is migrated: its
/// events read back in order, and appends go on from the last one.
#[tokio::test]
async fn a_first_schema_database_is_migrated_with_its_events() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    {
        let connection = rusqlite::Connection::open(&path).unwrap();
        connection
            .execute_batch(
                "CREATE TABLE sessions (id TEXT PRIMARY KEY, claude_session_id TEXT, cwd TEXT NOT NULL,
                    model TEXT, permission_mode TEXT, state TEXT NOT NULL, title TEXT,
                    cost_usd REAL NOT NULL DEFAULT 0, created_ms INTEGER NOT NULL,
                    updated_ms INTEGER NOT NULL, config TEXT NOT NULL DEFAULT '{}');
                 CREATE TABLE events (session_id TEXT NOT NULL, seq INTEGER NOT NULL,
                    ts_ms INTEGER NOT NULL, dir TEXT NOT NULL, kind TEXT NOT NULL,
                    payload TEXT NOT NULL, PRIMARY KEY (session_id, seq)) WITHOUT ROWID;
                 CREATE INDEX sessions_by_update ON sessions (updated_ms DESC);
                 PRAGMA user_version = 1;",
            )
            .unwrap();
        // Interleaved, as a busy daemon writes them.
        for seq in 1..=30i64 {
            for session in ["a", "b"] {
                connection
                    .execute(
                        "INSERT INTO events VALUES (?1, ?2, 0, 'from_cli', 'line', ?3)",
                        rusqlite::params![session, seq, format!("{{\"{session}\":{seq}}}")],
                    )
                    .unwrap();
            }
        }
    }
    let store = SqliteStore::open(&path).unwrap();
    for session in ["a", "b"] {
        assert_eq!(store.last_seq(session).await.unwrap(), 30);
        let events = store.events_after(session, 10, 100).await.unwrap();
        let seqs: Vec<u64> = events.iter().map(|event| event.seq).collect();
        assert_eq!(seqs, (11..=30).collect::<Vec<_>>());
        assert_eq!(events[0].payload, format!("{{\"{session}\":11}}"));
        let before = store.events_before(session, 5, 100).await.unwrap();
        assert_eq!(before.iter().map(|event| event.seq).collect::<Vec<_>>(), vec![1, 2, 3, 4]);
    }
    store.append(&[event("a", 31)]).await.unwrap();
    assert!(store.append(&[event("a", 31)]).await.is_err(), "a repeated seq is refused");
    assert_eq!(store.last_seq("a").await.unwrap(), 31);
}

fn event(session: &str, seq: u64) -> EventRecord {
    EventRecord {
        session_id: session.into(),
        seq,
        ts_ms: 0,
        dir: "switchboard".into(),
        kind: "k".into(),
        payload: format!("{{\"n\":{seq}}}"),
    }
}

/// Under appends that never pause, checkpoints still let the WAL start over again and again.
/// (Before, some commit always landed while the checkpointer copied, the WAL was never
/// completely copied, and it grew without end.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wal_starts_over_under_continuous_appends() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let wal_path = dir.path().join("db-wal");
    // Frequent checkpoints and a WAL that starts over at 1 MB, so the run sees many of them.
    let limit = 1u64 << 20;
    let interval = std::time::Duration::from_millis(20);
    let options = switchboard_store::SqliteOptions {
        checkpoint_interval: interval,
        wal_restart_bytes: limit,
        fold_interval: interval,
        ..Default::default()
    };
    let store = Arc::new(SqliteStore::open_with(&path, options).unwrap());
    // Bytes 12..16 of the WAL header count the times the WAL started over.
    let restarts = |path: &std::path::Path| {
        std::fs::read(path)
            .ok()
            .and_then(|bytes| {
                bytes.get(12..16).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
            })
            .unwrap_or(0)
    };
    let payload = "x".repeat(2000);
    let written = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tasks = Vec::new();
    for writer in 0..8 {
        let (store, payload, written, stop) =
            (store.clone(), payload.clone(), written.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let session = format!("s{writer}");
            let mut seq = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                seq += 1;
                let mut record = event(&session, seq);
                record.payload = format!("{{\"text\":\"{payload}\"}}");
                written
                    .fetch_add(record.payload.len() as u64, std::sync::atomic::Ordering::Relaxed);
                store.append(&[record]).await.unwrap();
            }
            seq
        }));
    }
    // Write until the WAL has started over three times, or (on the old behaviour) until 100
    // times the limit went by without it.
    let mut ticks = tokio::time::interval(interval);
    while restarts(&wal_path) < 3
        && written.load(std::sync::atomic::Ordering::Relaxed) < 100 * limit
    {
        ticks.tick().await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut counts = Vec::new();
    for task in tasks {
        counts.push(task.await.unwrap());
    }
    let written = written.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        restarts(&wal_path) >= 3,
        "after {written} bytes of events the WAL started over {} times",
        restarts(&wal_path)
    );
    // Nothing was lost on the way.
    for (writer, count) in counts.iter().enumerate() {
        assert_eq!(store.last_seq(&format!("s{writer}")).await.unwrap(), *count);
    }
}
