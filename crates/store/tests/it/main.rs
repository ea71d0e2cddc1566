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
