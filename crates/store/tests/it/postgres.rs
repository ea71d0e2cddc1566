//! The PostgreSQL store against a real server of the test's own (skipped, with a message,
//! where PostgreSQL is not installed).

use std::sync::Arc;
use std::time::Duration;

use switchboard_store::{
    conformance, EventRecord, PostgresOptions, PostgresStore, Store, StoreError,
};
use switchboard_testkit::servers::Postgres;

fn event(session_id: &str, seq: u64) -> EventRecord {
    EventRecord {
        session_id: session_id.to_owned(),
        seq,
        ts_ms: 1,
        dir: "from_cli".into(),
        kind: "line".into(),
        payload: format!("{{\"n\":{seq}}}"),
    }
}

#[tokio::test]
async fn postgres_store_conforms() {
    let Some(server) = Postgres::start() else { return };
    let store = PostgresStore::connect(&server.url()).await.unwrap();
    conformance::run(&store).await;
    conformance::documents(&store).await;
    // Two nodes (two pools) share them.
    let other = PostgresStore::connect(&server.url()).await.unwrap();
    use switchboard_store::Documents as _;
    assert_eq!(other.document("tokens").await.unwrap().map(|doc| doc.version), Some(4));
}

/// Two stores are two nodes: each has its own pool. Appending the same seqs to one session at
/// once, exactly one of them wins every round, and the log ends without a gap or a duplicate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_appending_to_one_session_never_both_win() {
    let Some(server) = Postgres::start() else { return };
    let url = server.url();
    let (a, b) = tokio::join!(PostgresStore::connect(&url), PostgresStore::connect(&url));
    let (a, b) = (Arc::new(a.unwrap()), Arc::new(b.unwrap()));
    let mut next = 1;
    for round in 0..60 {
        // Batches of 1 to 3 events, the same seqs from both.
        let size = 1 + round % 3;
        let batch: Vec<EventRecord> = (next..next + size).map(|seq| event("s", seq)).collect();
        let (first, second) = tokio::join!(a.append(&batch), b.append(&batch));
        let won = [&first, &second].iter().filter(|result| result.is_ok()).count();
        assert_eq!(won, 1, "round {round}: {first:?} {second:?}");
        let lost = if first.is_ok() { second } else { first };
        assert!(
            matches!(lost, Err(StoreError::OutOfSequence { .. })),
            "the loser is told it is out of sequence: {lost:?}"
        );
        next += size;
    }
    let log = a.events_after("s", 0, 10_000).await.unwrap();
    let seqs: Vec<u64> = log.iter().map(|event| event.seq).collect();
    assert_eq!(seqs, (1..next).collect::<Vec<_>>(), "gap-free, each seq once");
    assert_eq!(b.last_seq("s").await.unwrap(), next - 1);
}

/// Appends of many sessions at once go to PostgreSQL together (the group writer); one that
/// is out of sequence among them is refused alone, and every other is committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_made_together_commit_together_and_a_bad_one_is_refused_alone() {
    let Some(server) = Postgres::start() else { return };
    let store = Arc::new(PostgresStore::connect(&server.url()).await.unwrap());
    for round in 0..3u64 {
        let mut appends = Vec::new();
        for session in 0..40 {
            let store = store.clone();
            appends.push(tokio::spawn(async move {
                let id = format!("s{session}");
                let batch: Vec<EventRecord> =
                    (1..=2).map(|seq| event(&id, round * 2 + seq)).collect();
                store.append(&batch).await
            }));
        }
        // A gap in session s7's log, among the others.
        let bad = {
            let store = store.clone();
            tokio::spawn(async move { store.append(&[event("s7", 1000)]).await })
        };
        for append in appends {
            append.await.unwrap().unwrap();
        }
        let refused = bad.await.unwrap();
        assert!(matches!(refused, Err(StoreError::OutOfSequence { seq: 1000, .. })), "{refused:?}");
    }
    for session in 0..40 {
        let log = store.events_after(&format!("s{session}"), 0, 100).await.unwrap();
        let seqs: Vec<u64> = log.iter().map(|event| event.seq).collect();
        assert_eq!(seqs, (1..=6).collect::<Vec<_>>(), "session s{session}");
    }
}

/// While the node is busy, the group writer waits for more appends to commit with the one it
/// holds: two appends made apart land in one transaction (PostgreSQL's `xmin`, the
/// transaction that inserted a row, is the same for both).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_busy_the_writer_waits_to_commit_later_appends_with_the_first() {
    let Some(server) = Postgres::start() else { return };
    // Busy for a minute after the burst: a slow machine still makes the next append in time.
    let options = PostgresOptions {
        group_wait: Duration::from_secs(2),
        busy_for: Duration::from_secs(60),
        ..Default::default()
    };
    let store = Arc::new(PostgresStore::connect_with(&server.url(), options).await.unwrap());
    // Busy: forty sessions' appends at once, which the writer takes more than one at a time.
    let burst: Vec<_> = (0..40)
        .map(|n| {
            let store = store.clone();
            tokio::spawn(async move { store.append(&[event(&format!("b{n}"), 1)]).await })
        })
        .collect();
    for append in burst {
        append.await.unwrap().unwrap();
    }
    let append = |session: &'static str| {
        let store = store.clone();
        tokio::spawn(async move { store.append(&[event(session, 1)]).await })
    };
    let mut first = append("x");
    // Held for the wait: not committed yet a moment later, when the second is made.
    let early = tokio::time::timeout(Duration::from_millis(300), &mut first).await;
    assert!(early.is_err(), "committed at once: {early:?}");
    let second = append("y");
    first.await.unwrap().unwrap();
    second.await.unwrap().unwrap();
    let (client, connection) =
        tokio_postgres::connect(&server.url(), tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    let rows = client
        .query(
            "SELECT DISTINCT xmin::text FROM switchboard.events WHERE session_id IN ('x', 'y')",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 1, "one transaction for both");
}

/// Writers racing on many sessions from two nodes, each retrying from the head it reads:
/// every session's log is 1..=N, each seq once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_writers_leave_every_log_gap_free() {
    let Some(server) = Postgres::start() else { return };
    let nodes = [
        Arc::new(PostgresStore::connect(&server.url()).await.unwrap()),
        Arc::new(PostgresStore::connect(&server.url()).await.unwrap()),
    ];
    const PER_WRITER: u64 = 40;
    let mut writers = Vec::new();
    for writer in 0..8 {
        let store = nodes[writer % 2].clone();
        let session = format!("s{}", writer % 4);
        writers.push(tokio::spawn(async move {
            let mut written = 0;
            let mut refused = 0;
            while written < PER_WRITER {
                let last = store.last_seq(&session).await.unwrap();
                match store.append(&[event(&session, last + 1)]).await {
                    Ok(()) => written += 1,
                    Err(StoreError::OutOfSequence { .. }) => refused += 1,
                    Err(other) => panic!("{other}"),
                }
            }
            refused
        }));
    }
    for writer in writers {
        writer.await.unwrap();
    }
    for session in 0..4 {
        let log = nodes[0].events_after(&format!("s{session}"), 0, 10_000).await.unwrap();
        let seqs: Vec<u64> = log.iter().map(|event| event.seq).collect();
        assert_eq!(seqs, (1..=2 * PER_WRITER).collect::<Vec<_>>());
    }
}

/// Daemons starting together on a fresh database migrate it once; a store connecting later
/// finds everything; a schema newer than this build is refused with a message that says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrations_run_once_and_a_newer_schema_is_refused() {
    let Some(server) = Postgres::start() else { return };
    let url = server.url();
    let stores = futures::future::join_all((0..4).map(|_| PostgresStore::connect(&url))).await;
    for store in &stores {
        assert!(store.is_ok(), "{store:?}");
    }
    let store = stores.into_iter().next().unwrap().unwrap();
    store.append(&[event("kept", 1)]).await.unwrap();
    store.close();
    assert!(matches!(store.last_seq("kept").await, Err(StoreError::Closed)));
    let again = PostgresStore::connect(&url).await.unwrap();
    assert_eq!(again.last_seq("kept").await.unwrap(), 1);
    // A payload PostgreSQL's text could not hold comes back exactly.
    let mut odd = event("odd", 1);
    odd.payload = "nul \u{0} and é".to_owned();
    again.append(std::slice::from_ref(&odd)).await.unwrap();
    assert_eq!(again.events_after("odd", 0, 1).await.unwrap(), [odd]);

    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    client.execute("UPDATE switchboard.schema_version SET version = 99", &[]).await.unwrap();
    let error = PostgresStore::connect(&url).await.unwrap_err().to_string();
    assert!(error.contains("version 99, newer than this Switchboard knows"), "{error}");
}

/// What a person gets wrong in the URL is named; the password never shows.
#[tokio::test]
async fn bad_urls_are_named_without_the_password() {
    let error = PostgresStore::connect("postgres://me:s3cret@[::1/db").await.unwrap_err();
    let text = error.to_string();
    assert!(text.contains("not one PostgreSQL reads"), "{text}");
    assert!(!text.contains("s3cret"), "{text}");
    // Nothing listens there: the error names where, not the password, and comes quickly.
    let dir = tempfile::tempdir().unwrap();
    let host: String = dir.path().to_string_lossy().replace('/', "%2F");
    let error = PostgresStore::connect(&format!("postgres://me:s3cret@{host}/db"))
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains(&format!("me@{}:5432/db", dir.path().display())), "{error}");
    assert!(!error.contains("s3cret"), "{error}");
    // TLS is not spoken, so a URL that requires it is refused, not sent in the clear.
    let Some(server) = Postgres::start() else { return };
    let error = PostgresStore::connect(&format!("{}?sslmode=require", server.url()))
        .await
        .unwrap_err()
        .to_string();
    assert!(error.to_lowercase().contains("tls"), "{error}");
}

/// A PostgreSQL database written by the release of 2026-11-28 (its `pg_dump`, in
/// `tests/fixtures`) is migrated when a store connects, and reads as the SQLite one does.
#[tokio::test]
async fn a_postgres_database_from_the_last_release_is_migrated() {
    let Some(server) = Postgres::start() else { return };
    let dump = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/release-2026-11-28.pg.sql"),
    )
    .unwrap();
    let (client, connection) =
        tokio_postgres::connect(&server.url(), tokio_postgres::NoTls).await.unwrap();
    let connection = tokio::spawn(connection);
    client.batch_execute(&dump).await.unwrap();
    drop(client);
    let _ = connection.await;
    let store = PostgresStore::connect(&server.url()).await.unwrap();
    crate::check_release_fixture(&store).await;
}
