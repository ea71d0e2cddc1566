//! Both stores pass the conformance suite; the SQLite store keeps everything across reopening
//! and is concurrent-safe.

mod postgres;
use std::sync::Arc;

use switchboard_store::{conformance, EventRecord, MemoryStore, SqliteStore, Store, CHUNK_BYTES};

#[tokio::test]
async fn memory_store_conforms() {
    conformance::run(&MemoryStore::new()).await;
    conformance::documents(&MemoryStore::new()).await;
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
    assert_eq!(
        store.get_session("a").await.unwrap().unwrap().state,
        switchboard_store::RecordState::Idle
    );
    store.close();
    drop(store);
    // Every state is kept as the text it always was; one nobody wrote is an error that names it.
    {
        let connection = rusqlite::Connection::open(&path).unwrap();
        let stored: String = connection
            .query_row("SELECT state FROM sessions WHERE id = 'a'", [], |row| row.get(0))
            .unwrap();
        assert_eq!(stored, "idle");
        connection.execute("UPDATE sessions SET state = 'napping' WHERE id = 'a'", []).unwrap();
    }
    let store = SqliteStore::open(&path).unwrap();
    let error = store.get_session("a").await.unwrap_err().to_string();
    assert!(error.contains("\"napping\" is not a session state"), "{error}");
    for state in switchboard_store::RecordState::ALL {
        assert_eq!(switchboard_store::RecordState::parse(state.as_str()), Some(state));
        assert_eq!(serde_json::to_value(state).unwrap(), state.as_str(), "the API's text");
    }
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
        let read: Vec<(u64, String)> =
            events.iter().map(|event| (event.seq, event.payload.clone())).collect();
        let written: Vec<(u64, String)> =
            (1..=50u64).map(|seq| (seq, format!("{{\"n\":{seq}}}"))).collect();
        assert_eq!(read, written, "s{session}: every event, in its order, with its own payload");
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

/// A database written by the first schema (events clustered by session) is migrated through
/// every layout since, to chunks (more than one per session): its events read back in order,
/// and appends go on from the last one.
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
        for seq in 1..=300i64 {
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
        assert_eq!(store.last_seq(session).await.unwrap(), 300);
        let events = store.events_after(session, 10, 1000).await.unwrap();
        let seqs: Vec<u64> = events.iter().map(|event| event.seq).collect();
        assert_eq!(seqs, (11..=300).collect::<Vec<_>>());
        assert_eq!(events[0].payload, format!("{{\"{session}\":11}}"));
        assert_eq!(events[289].payload, format!("{{\"{session}\":300}}"));
        let before = store.events_before(session, 5, 100).await.unwrap();
        assert_eq!(before.iter().map(|event| event.seq).collect::<Vec<_>>(), vec![1, 2, 3, 4]);
    }
    store.append(&[event("a", 301)]).await.unwrap();
    assert!(store.append(&[event("a", 301)]).await.is_err(), "a repeated seq is refused");
    assert_eq!(store.last_seq("a").await.unwrap(), 301);
    store.close();
    drop(store);
    let connection = rusqlite::Connection::open(&path).unwrap();
    let (chunks, events): (i64, i64) = connection
        .query_row("SELECT COUNT(*), SUM(count) FROM chunks", [], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })
        .unwrap();
    assert_eq!(events, 601);
    assert_eq!(chunks, 5, "a and b: 256 + 44 each, and a's last event");
    let tables: i64 = connection
        .query_row("SELECT COUNT(*) FROM sqlite_master WHERE name = 'events'", [], |row| row.get(0))
        .unwrap();
    assert_eq!(tables, 0, "the old table is gone");
}

/// A session's events in many chunks (folds of 1 to 300 events, with another session's between
/// them, and an event larger than a chunk's body) read back page by page, either way, at every
/// position, as they went in; a chunk damaged on disk is an error that says so.
#[tokio::test]
async fn pages_read_across_chunks_as_they_went_in() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let mut appended = Vec::new();
    {
        let store = SqliteStore::open(&path).unwrap();
        let mut seq = 0;
        for (round, size) in [1usize, 3, 300, 17, 256, 255, 2, 40].into_iter().enumerate() {
            let batch: Vec<EventRecord> = (0..size)
                .map(|_| {
                    seq += 1;
                    let mut event = event("s", seq);
                    if seq == 310 {
                        event.payload = "x".repeat(CHUNK_BYTES * 2);
                    }
                    if seq % 7 == 0 {
                        event = common_words(event);
                    }
                    event
                })
                .collect();
            store.append(&batch).await.unwrap();
            store.append(&[event("other", round as u64 + 1)]).await.unwrap();
            appended.extend(batch);
            store.flush().await.unwrap();
        }
        store.close();
    }
    let connection = rusqlite::Connection::open(&path).unwrap();
    let chunks: i64 = connection
        .query_row(
            "SELECT COUNT(*) FROM chunks WHERE session = (SELECT key FROM session_keys WHERE id = 's')",
            [],
            |row| row.get(0),
        )
        .unwrap();
    // 1, 3, 256 + 44, 17 (5, the large event alone, 11), 256, 255, 2, 40.
    assert_eq!(chunks, 11);
    let alone: i64 = connection
        .query_row("SELECT count FROM chunks WHERE first_seq = 310", [], |row| row.get(0))
        .unwrap();
    assert_eq!(alone, 1, "an event larger than a chunk is a chunk of its own");
    let store = SqliteStore::open(&path).unwrap();
    let total = appended.len() as u64;
    assert_eq!(store.last_seq("s").await.unwrap(), total);
    assert_eq!(store.last_seq("other").await.unwrap(), 8);
    let expect = |range: std::ops::Range<usize>| -> Vec<(u64, usize)> {
        appended[range].iter().map(|event| (event.seq, event.payload.len())).collect()
    };
    let got = |events: Vec<EventRecord>| -> Vec<(u64, usize)> {
        for event in &events {
            let words = (&*event.dir, &*event.kind);
            let put = if event.seq % 7 == 0 { ("from_cli", "line") } else { ("switchboard", "k") };
            assert_eq!(words, put, "{}", event.seq);
            if event.seq != 310 {
                assert_eq!(event.payload, format!("{{\"n\":{}}}", event.seq));
            }
        }
        events.iter().map(|event| (event.seq, event.payload.len())).collect()
    };
    for limit in [1usize, 7, 256, 1000] {
        for at in 0..=total + 1 {
            let start = (at as usize).min(appended.len());
            let after = store.events_after("s", at, limit).await.unwrap();
            assert_eq!(
                got(after),
                expect(start..(start + limit).min(appended.len())),
                "after {at}, {limit}"
            );
            let end = (at.saturating_sub(1) as usize).min(appended.len());
            let before = store.events_before("s", at, limit).await.unwrap();
            assert_eq!(got(before), expect(end.saturating_sub(limit)..end), "before {at}, {limit}");
        }
    }
    assert_eq!(store.events_after("s", 309, 1).await.unwrap()[0].payload.len(), CHUNK_BYTES * 2);
    store.close();
    drop(store);
    // The 300 events' first chunk is compressed (its lines repeat themselves).
    let of_s = "session = (SELECT key FROM session_keys WHERE id = 's')";
    let (codec, size, stored): (i64, i64, i64) = connection
        .query_row(
            &format!("SELECT codec, size, length(body) FROM chunks WHERE first_seq = 5 AND {of_s}"),
            [],
            |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
        )
        .unwrap();
    assert_eq!(codec, 1);
    assert!(stored * 2 < size, "{stored} bytes stored of {size}");
    for damage in [
        "body = x'0102' WHERE first_seq = 1",
        "body = x'FFFFFFFF' WHERE first_seq = 5",
        "size = 1 << 40 WHERE first_seq = 305",
        "size = 1 << 20 WHERE first_seq = 311",
        "codec = 7 WHERE first_seq = 322",
        "count = count + 1 WHERE first_seq = 578",
        "last_seq = last_seq - 1 WHERE first_seq = 833",
        // The newest chunk: its session's last seq is still read past its first.
        "last_seq = 1 WHERE first_seq = 835",
    ] {
        connection.execute(&format!("UPDATE chunks SET {damage} AND {of_s}"), []).unwrap();
    }
    // "other"'s first chunk rewritten, consistently (an uncompressed body of seqs 1 and 2, the
    // row to match), to overlap its second chunk, which still holds seq 2.
    let of_other = "session = (SELECT key FROM session_keys WHERE id = 'other')";
    let mut body = Vec::new();
    for seq in [1, 2] {
        let event = event("other", seq);
        body.extend_from_slice(&seq.to_le_bytes());
        body.extend_from_slice(&event.ts_ms.to_le_bytes());
        for text in [&*event.dir, &*event.kind, &*event.payload] {
            body.extend_from_slice(&(text.len() as u32).to_le_bytes());
            body.extend_from_slice(text.as_bytes());
        }
    }
    connection
        .execute(
            &format!(
                "UPDATE chunks SET last_seq = 2, count = 2, codec = 0, size = ?1, body = ?2
                 WHERE first_seq = 1 AND {of_other}"
            ),
            rusqlite::params![body.len() as i64, body],
        )
        .unwrap();
    drop(connection);
    let store = SqliteStore::open(&path).unwrap();
    for (after, first) in
        [(0, 1), (4, 5), (304, 305), (310, 311), (321, 322), (577, 578), (832, 833)]
    {
        let error = match store.events_after("s", after, 1000).await {
            Ok(events) => panic!("{} events read after {after}", events.len()),
            Err(error) => error.to_string(),
        };
        let says = format!("stored events of session s from seq {first} are damaged");
        assert!(error.contains(&says), "{error}");
    }
    assert_eq!(store.events_after("s", 1, 1).await.unwrap()[0].seq, 2, "the others still read");
    assert_eq!(store.events_before("s", 4, 2).await.unwrap().len(), 2);
    assert!(store.events_before("s", 4, 3).await.is_err(), "the third is in the damaged chunk");
    let overlap = "stored events of session other from seq 2 are damaged";
    for read in
        [store.events_after("other", 0, 10).await, store.events_before("other", 9, 10).await]
    {
        let error = read.expect_err("a page with seq 2 twice").to_string();
        assert!(error.contains(overlap), "{error}");
    }
    // Folding goes on past the damaged newest chunk, for its session and the others.
    assert_eq!(store.last_seq("s").await.unwrap(), 835);
    store.append(&[event("s", 836), event("other", 9)]).await.unwrap();
    store.flush().await.unwrap();
    assert_eq!(store.events_after("other", 8, 10).await.unwrap()[0].seq, 9);
    store.close();
}

/// Reads that cross from the database's chunks into the journal's waiting events; a session
/// deleted and appended to again from seq 1 (its key perhaps given again) is read as the new one.
#[tokio::test]
async fn reads_cross_from_chunks_to_the_journal_and_a_deleted_session_starts_over() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("db")).unwrap();
    let seqs = |events: Vec<EventRecord>| events.iter().map(|event| event.seq).collect::<Vec<_>>();
    store.append(&(1..=300).map(|seq| event("s", seq)).collect::<Vec<_>>()).await.unwrap();
    store.flush().await.unwrap();
    store.append(&(301..=310).map(|seq| event("s", seq)).collect::<Vec<_>>()).await.unwrap();
    assert_eq!(
        seqs(store.events_after("s", 250, 100).await.unwrap()),
        (251..=310).collect::<Vec<_>>()
    );
    assert_eq!(
        seqs(store.events_before("s", 305, 60).await.unwrap()),
        (245..=304).collect::<Vec<_>>()
    );
    store.delete_session("s").await.unwrap();
    assert_eq!(store.last_seq("s").await.unwrap(), 0);
    assert!(store.events_after("s", 0, 10).await.unwrap().is_empty());
    let again: Vec<EventRecord> =
        (1..=5).map(|seq| EventRecord { kind: "again".into(), ..event("s", seq) }).collect();
    store.append(&again).await.unwrap();
    store.flush().await.unwrap();
    let read = store.events_after("s", 0, 10).await.unwrap();
    assert_eq!(seqs(read.clone()), vec![1, 2, 3, 4, 5]);
    assert!(read.iter().all(|event| event.kind == "again"));
    assert_eq!(store.last_seq("s").await.unwrap(), 5);
    store.close();
}

/// The writer forgets what it knows of each session every 64 folds and reads it again: across
/// several of those, a session's chunks go on after its last, and a session that was idle
/// meanwhile too.
#[tokio::test]
async fn sessions_written_across_the_writers_sweeps_go_on_where_they_were() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let store = SqliteStore::open(&path).unwrap();
    store.append(&[event("idle", 1), event("idle", 2)]).await.unwrap();
    for seq in 1..=200 {
        store.append(&[event("busy", seq)]).await.unwrap();
        store.flush().await.unwrap();
    }
    store.append(&[event("idle", 3)]).await.unwrap();
    store.flush().await.unwrap();
    let seqs = |events: Vec<EventRecord>| events.iter().map(|event| event.seq).collect::<Vec<_>>();
    assert_eq!(
        seqs(store.events_after("busy", 0, 1000).await.unwrap()),
        (1..=200).collect::<Vec<_>>()
    );
    assert_eq!(seqs(store.events_after("idle", 0, 10).await.unwrap()), vec![1, 2, 3]);
    store.close();
    let connection = rusqlite::Connection::open(&path).unwrap();
    let (chunks, events): (i64, i64) = connection
        .query_row("SELECT COUNT(*), SUM(count) FROM chunks", [], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })
        .unwrap();
    assert_eq!((chunks, events), (202, 203), "a chunk a fold for busy, two for idle");
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
    // Write until the WAL has started over three times, or (on the old behaviour) until 500
    // times the limit went by without it. (Folds of the journal commit several MB at once, so
    // a restart takes tens of MB of events here.)
    let mut ticks = tokio::time::interval(interval);
    while restarts(&wal_path) < 3
        && written.load(std::sync::atomic::Ordering::Relaxed) < 500 * limit
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

fn journal_files(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| name.contains(".log-"))
        .collect();
    names.sort();
    names
}

/// Not a test on its own: the child process of
/// `appends_survive_a_kill_before_they_reach_the_database`, which runs it with
/// `SWITCHBOARD_JOURNAL_CHILD` set to a database path.
#[tokio::test]
#[ignore = "run as a child process by appends_survive_a_kill_before_they_reach_the_database"]
#[allow(clippy::print_stdout, reason = "tells the parent it got this far")]
async fn journal_child_appends_then_is_killed() {
    let Ok(path) = std::env::var("SWITCHBOARD_JOURNAL_CHILD") else { return };
    // No fold on its own before the kill.
    let options = switchboard_store::SqliteOptions {
        fold_interval: std::time::Duration::from_secs(3600),
        ..Default::default()
    };
    let store = SqliteStore::open_with(&path, options).unwrap();
    // A deleted session: its deletion is folded at once (delete waits for it).
    store.append(&[event("gone", 1), event("gone", 2)]).await.unwrap();
    store.delete_session("gone").await.unwrap();
    // 300 events in appends of 1 to 7, two sessions interleaved: in the journal only.
    let mut seq = 0;
    for size in (1..=7).cycle() {
        if seq >= 300 {
            break;
        }
        let batch: Vec<EventRecord> = (seq + 1..=(seq + size).min(300))
            .flat_map(|seq| [event("kept", seq), common_words(event("other", seq))])
            .collect();
        store.append(&batch).await.unwrap();
        seq = (seq + size).min(300);
    }
    println!("appended");
    nix::sys::signal::kill(nix::unistd::getpid(), nix::sys::signal::Signal::SIGKILL).unwrap();
    unreachable!("killed");
}

/// An append is durable once `append` returns, before the writer folds it into SQLite: a
/// process killed with SIGKILL leaves it in the journal, the next open folds it in, and a
/// record cut short at the journal's end is dropped whole.
#[tokio::test]
#[allow(clippy::disallowed_methods, reason = "runs this test binary again, not the CLI")]
async fn appends_survive_a_kill_before_they_reach_the_database() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", "journal_child_appends_then_is_killed", "--nocapture"])
        .env("SWITCHBOARD_JOURNAL_CHILD", &path)
        .stdout(std::process::Stdio::piped())
        .output()
        .unwrap();
    let output = String::from_utf8_lossy(&status.stdout);
    assert!(output.contains("appended"), "the child ran: {output}");
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status.status),
        Some(9),
        "the child was killed"
    );
    // The database itself has none of them: they were only in the journal.
    {
        let connection = rusqlite::Connection::open(&path).unwrap();
        let count: i64 = connection
            .query_row("SELECT COALESCE(SUM(count), 0) FROM chunks", [], |row| row.get(0))
            .unwrap();
        assert_eq!(count, 0);
    }
    // A write cut short: the start of a record whose body never arrived, right after the
    // last record (before the zeros of the space reserved for more, if the file has some).
    let segments = journal_files(dir.path());
    assert_eq!(segments.len(), 1, "{segments:?}");
    let segment = dir.path().join(&segments[0]);
    let records_end = records_end(&std::fs::read(&segment).unwrap());
    let mut torn = 100u32.to_le_bytes().to_vec();
    torn.extend_from_slice(&[0xAB; 20]);
    let mut file = std::fs::OpenOptions::new().write(true).open(&segment).unwrap();
    file.seek(std::io::SeekFrom::Start(records_end as u64)).unwrap();
    file.write_all(&torn).unwrap();
    drop(file);

    let store = SqliteStore::open(&path).unwrap();
    for session in ["kept", "other"] {
        let events = store.events_after(session, 0, 1000).await.unwrap();
        assert_eq!(events.len(), 300, "{session}");
        assert!(events.iter().enumerate().all(|(i, e)| e.seq == i as u64 + 1));
        assert_eq!(events[299].payload, "{\"n\":300}");
    }
    let other = store.events_after("other", 0, 1000).await.unwrap();
    assert!(other.iter().all(|e| *e == common_words(event("other", e.seq))), "as they went in");
    assert!(store.events_after("gone", 0, 10).await.unwrap().is_empty(), "deleted stays deleted");
    assert_eq!(store.last_seq("kept").await.unwrap(), 300);
    store.append(&[event("kept", 301)]).await.unwrap();
    assert!(store.append(&[event("kept", 301)]).await.is_err());
    // The old segment was folded and removed; a new one took its place.
    let now = journal_files(dir.path());
    assert_eq!(now.len(), 1);
    assert_ne!(now, segments);
}

use std::io::{Seek as _, Write as _};

/// Where a journal segment's records end: after its 8 magic bytes, each record is a `u32`
/// body length, a CRC-32 and the body; zeros (space reserved for more) or the file's end
/// follow the last.
fn records_end(bytes: &[u8]) -> usize {
    let mut at = 8;
    while let Some(header) = bytes.get(at..at + 8) {
        let length = u32::from_le_bytes(header[..4].try_into().unwrap()) as usize;
        if length == 0 {
            break;
        }
        at += 8 + length;
    }
    at.min(bytes.len())
}

/// `event` with the `dir` and `kind` of a CLI's line, which a store reads back as words it
/// keeps (`event`'s own `kind` it reads back as owned text): both read back as they went in.
fn common_words(mut event: EventRecord) -> EventRecord {
    event.dir = "from_cli".into();
    event.kind = "line".into();
    event
}

/// A second store on the same database (another daemon, say) is refused while the first is
/// open: it would fold and remove the journal the first writes to.
#[tokio::test]
async fn a_database_in_use_is_refused_until_closed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let first = SqliteStore::open(&path).unwrap();
    first.append(&[event("s", 1)]).await.unwrap();
    let error = SqliteStore::open(&path).unwrap_err().to_string();
    assert!(error.contains("in use by another Switchboard"), "{error}");
    first.close();
    assert!(first.append(&[event("s", 2)]).await.is_err(), "closed");
    let second = SqliteStore::open(&path).unwrap();
    assert_eq!(second.last_seq("s").await.unwrap(), 1);
}

/// Folds that happen all the time and folds that never happen: both conform.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_conforms_whenever_the_journal_is_folded() {
    for interval in [std::time::Duration::from_millis(1), std::time::Duration::from_secs(3600)] {
        let dir = tempfile::tempdir().unwrap();
        let options =
            switchboard_store::SqliteOptions { fold_interval: interval, ..Default::default() };
        let store = SqliteStore::open_with(dir.path().join("db"), options).unwrap();
        conformance::run(&store).await;
    }
}

/// Reads merge the database and the journal without a gap or a repeat while folds run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_during_folds_see_every_event_once() {
    let dir = tempfile::tempdir().unwrap();
    let options = switchboard_store::SqliteOptions {
        fold_interval: std::time::Duration::from_millis(1),
        ..Default::default()
    };
    let store = Arc::new(SqliteStore::open_with(dir.path().join("db"), options).unwrap());
    let writer = {
        let store = store.clone();
        tokio::spawn(async move {
            for seq in 1..=2000 {
                store.append(&[event("s", seq)]).await.unwrap();
                if seq % 50 == 0 {
                    tokio::task::yield_now().await;
                }
            }
        })
    };
    let mut checks = 0;
    while !writer.is_finished() || checks == 0 {
        let last = store.last_seq("s").await.unwrap();
        let events = store.events_after("s", 0, 100_000).await.unwrap();
        assert!(
            events.len() as u64 >= last,
            "{} events read, {last} appended before",
            events.len()
        );
        assert!(events.iter().enumerate().all(|(i, e)| e.seq == i as u64 + 1), "no gap, no repeat");
        let page = store.events_before("s", last + 1, 10).await.unwrap();
        let expected: Vec<u64> = (last.saturating_sub(9).max(1)..=last).collect();
        assert_eq!(page.iter().map(|e| e.seq).collect::<Vec<_>>(), expected);
        checks += 1;
    }
    writer.await.unwrap();
    assert_eq!(store.events_after("s", 1990, 100).await.unwrap().len(), 10);
}

/// Segments start over at the size limit and the folded ones are removed; the database then
/// holds everything by itself.
#[tokio::test]
async fn folded_segments_are_removed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let options = switchboard_store::SqliteOptions {
        fold_interval: std::time::Duration::from_secs(3600),
        segment_bytes: 4096,
        ..Default::default()
    };
    let store = SqliteStore::open_with(&path, options).unwrap();
    for round in 0..5u64 {
        let batch: Vec<EventRecord> = (1..=20)
            .map(|n| {
                let mut record = event("s", round * 20 + n);
                record.payload = format!("{{\"text\":\"{}\"}}", "x".repeat(500));
                record
            })
            .collect();
        store.append(&batch).await.unwrap();
        store.flush().await.unwrap();
        assert_eq!(journal_files(dir.path()).len(), 1, "round {round}");
    }
    let connection = rusqlite::Connection::open(&path).unwrap();
    let count: i64 = connection
        .query_row("SELECT COALESCE(SUM(count), 0) FROM chunks", [], |row| row.get(0))
        .unwrap();
    assert_eq!(count, 100);
    drop(connection);
    assert_eq!(store.events_after("s", 0, 1000).await.unwrap().len(), 100);
}

#[tokio::test]
async fn every_file_of_the_store_is_its_owners_alone() {
    use std::os::unix::fs::PermissionsExt;
    // A directory anyone may read (as a data directory made with a plain `mkdir` is).
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let store = SqliteStore::open(dir.path().join("switchboard.db")).unwrap();
    let event = EventRecord {
        session_id: "s".into(),
        seq: 1,
        ts_ms: 1,
        dir: "from_cli".into(),
        kind: "line".into(),
        payload: "{\"secret\":\"prompt\"}".into(),
    };
    store.append(&[event]).await.unwrap();
    store.flush().await.unwrap();
    let files: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().collect();
    assert!(files.len() >= 3, "the database, its journal and its lock: {files:?}");
    for file in files {
        let mode = file.metadata().unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{} is readable by others", file.path().display());
    }
}

/// What the sessions of the release fixtures (`tests/fixtures/release-2026-11-28.*`, written
/// by the release of that day) read as once migrated: each one's `spent_usd` a field of its
/// own (taken from its config, else its cost), its config without it, the rest as it was.
pub(crate) async fn check_release_fixture(store: &dyn Store) {
    use switchboard_store::RecordState;
    let read = |id: &'static str| async move { store.get_session(id).await.unwrap().unwrap() };
    let a = read("a").await;
    assert_eq!((a.state, a.cost_usd, a.spent_usd), (RecordState::Idle, 0.5, 1.25), "{a:?}");
    assert_eq!(
        a.launch,
        switchboard_store::Launch {
            cwd: "/work/app".into(),
            max_budget_usd: Some(2.0),
            model: Some("claude-sonnet-4-5".into()),
            ..Default::default()
        }
    );
    let b = read("b").await;
    assert_eq!((b.state, b.spent_usd, b.archived), (RecordState::Exited, 0.75, true), "{b:?}");
    assert_eq!(
        b.launch,
        switchboard_store::Launch { cwd: "/work/app".into(), relay: true, ..Default::default() }
    );
    let c = read("c").await;
    assert_eq!((c.state, c.spent_usd), (RecordState::Paused, 3.0), "{c:?}");
    let tree = c.launch.worktree.as_ref().expect("its worktree");
    assert_eq!(tree.branch, "switchboard/cccccccc");
    // Written without its git folder: read as git names it.
    assert_eq!(tree.git_dir, std::path::Path::new("/work/app/.git/worktrees/cccccccc"));
    assert_eq!(c.launch.max_budget_usd, Some(3.0));
    for id in ["a", "b", "c"] {
        let events = store.events_after(id, 0, 10).await.unwrap();
        assert_eq!(events.iter().map(|event| event.seq).collect::<Vec<_>>(), [1, 2, 3], "{id}");
    }
    assert_eq!(store.list_sessions().await.unwrap().len(), 3);
}

#[tokio::test]
async fn a_database_from_the_last_release_is_migrated() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("switchboard.db");
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/release-2026-11-28.db");
    std::fs::copy(fixture, &path).unwrap();
    let store = SqliteStore::open(&path).unwrap();
    check_release_fixture(&store).await;
    // What a later write keeps is read back as written, and again after reopening.
    let mut a = store.get_session("a").await.unwrap().unwrap();
    a.spent_usd += 0.5;
    store.update_session(&a).await.unwrap();
    store.close();
    drop(store);
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(store.get_session("a").await.unwrap().unwrap().spent_usd, 1.75);
}

/// A record whose launch config cannot be read (hand-edited, or written wrong) is an error that
/// names the session, not a session that would resume with defaults.
#[tokio::test]
async fn an_unreadable_launch_config_is_an_error_naming_the_session() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let store = SqliteStore::open(&path).unwrap();
    let record = switchboard_store::SessionRecord {
        id: "broken".into(),
        claude_session_id: None,
        cwd: "/work".into(),
        model: None,
        permission_mode: None,
        state: switchboard_store::RecordState::Exited,
        title: None,
        cost_usd: 0.0,
        spent_usd: 0.0,
        created_ms: 1,
        updated_ms: 1,
        launch: switchboard_store::Launch { cwd: "/work".into(), ..Default::default() },
        archived: false,
        node: None,
    };
    store.create_session(&record).await.unwrap();
    assert_eq!(store.get_session("broken").await.unwrap().unwrap().launch, record.launch);
    store.flush().await.unwrap();
    drop(store);
    let connection = rusqlite::Connection::open(&path).unwrap();
    connection
        .execute("UPDATE sessions SET config = '{\"max_turns\": \"many\"}' WHERE id = 'broken'", [])
        .unwrap();
    drop(connection);
    let store = SqliteStore::open(&path).unwrap();
    let error = store.get_session("broken").await.unwrap_err().to_string();
    assert!(error.contains("session broken") && error.contains("launch config"), "{error}");
    // The list leaves it out (and says so), rather than hiding every other session with it.
    let fine = switchboard_store::SessionRecord { id: "fine".into(), ..record.clone() };
    store.create_session(&fine).await.unwrap();
    let listed: Vec<String> =
        store.list_sessions().await.unwrap().into_iter().map(|record| record.id).collect();
    assert_eq!(listed, ["fine"]);
}
