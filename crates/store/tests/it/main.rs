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

/// Under appends that never pause, checkpoints still let the WAL start over: it stays a
/// fraction of what was written. (Before, some commit always landed while the checkpointer
/// copied, the WAL was never completely copied, and it grew without end.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wal_starts_over_under_continuous_appends() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    // Frequent checkpoints, so the run sees many of them whatever the machine's speed.
    let interval = std::time::Duration::from_millis(50);
    let options = switchboard_store::SqliteOptions { checkpoint_interval: interval };
    let store = Arc::new(SqliteStore::open_with(&path, options).unwrap());
    let payload = "x".repeat(2000);
    let until = std::time::Instant::now() + interval * 40;
    let mut tasks = Vec::new();
    for writer in 0..8 {
        let store = store.clone();
        let payload = payload.clone();
        tasks.push(tokio::spawn(async move {
            let session = format!("s{writer}");
            let mut seq = 0u64;
            let mut bytes = 0u64;
            while std::time::Instant::now() < until {
                seq += 1;
                let mut record = event(&session, seq);
                record.payload = format!("{{\"text\":\"{payload}\"}}");
                bytes += record.payload.len() as u64;
                store.append(&[record]).await.unwrap();
            }
            (seq, bytes)
        }));
    }
    let mut written = 0;
    let mut counts = Vec::new();
    for task in tasks {
        let (count, bytes) = task.await.unwrap();
        written += bytes;
        counts.push(count);
    }
    // The frames in the WAL now (since it last started over), as a second connection sees it.
    // (A checkpoint of the store's own may be running: then this one reports busy; ask again.)
    let connection = rusqlite::Connection::open(&path).unwrap();
    let page_size: i64 =
        connection.pragma_query_value(None, "page_size", |row| row.get(0)).unwrap();
    let frames = loop {
        let (busy, frames): (i64, i64) = connection
            .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| Ok((row.get(0)?, row.get(1)?)))
            .unwrap();
        if busy == 0 && frames >= 0 {
            break frames;
        }
        std::thread::yield_now();
    };
    let wal = (frames * page_size) as u64;
    assert!(
        wal < written / 2,
        "the WAL holds {wal} bytes after {written} bytes of events: it never started over"
    );
    // Nothing was lost on the way.
    for (writer, count) in counts.iter().enumerate() {
        assert_eq!(store.last_seq(&format!("s{writer}")).await.unwrap(), *count);
    }
}
