//! The audit trail on PostgreSQL with the real CLI: a person's allow and deny, a session
//! started and ended, a token made and revoked, the daily and a session's budget changed, each
//! recorded in order with who did it and chained; then the store altered under the daemon (the
//! last record deleted, a record's field changed, a record deleted, the first deleted):
//! `GET /api/audit/verify` names the record each time.

use std::sync::Arc;

use serde_json::json;
use switchboard_store::{PostgresStore, Store};
use switchboard_testkit::servers::Postgres;
use switchboard_testkit::{CliSandbox, FakeApi};

use crate::Server;

/// Checks that `GET /api/audit/verify` finds the trail broken at record `seq`, saying `says`.
async fn broken_at(server: &Server, seq: u64, says: &str) {
    let (_, verified) = server.get("/api/audit/verify").await;
    assert_eq!(
        (verified["ok"].as_bool(), verified["seq"].as_u64()),
        (Some(false), Some(seq)),
        "{verified}"
    );
    assert!(verified["problem"].as_str().unwrap().contains(says), "{verified}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_trail_records_who_did_what_in_order_and_shows_an_altered_or_deleted_record() {
    let Some(database) = Postgres::start() else { return };
    let api = FakeApi::start(crate::metrics::allow_then_deny()).await.unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let store: Arc<dyn Store> = Arc::new(PostgresStore::connect(&database.url()).await.unwrap());
    let server = Server::start(store, &api, &sandbox).await;

    let (id, mut ws) = crate::metrics::allowed_then_denied(&server, &sandbox).await;
    let (status, made) =
        server.post("/api/tokens", json!({"name": "ops", "scope": "operate"})).await;
    assert_eq!(status, 201, "{made}");
    let (status, _) = server.send(reqwest::Method::DELETE, "/api/tokens/ops", json!({})).await;
    assert_eq!(status, 200);
    let (status, budget) = server.patch("/api/budget", json!({"daily_usd": 12.5})).await;
    assert_eq!(status, 200, "{budget}");
    let (status, amended) =
        server.patch(&format!("/api/sessions/{id}"), json!({"max_budget_usd": 3.0})).await;
    assert_eq!(status, 200, "{amended}");
    let (status, _) =
        server.send(reqwest::Method::DELETE, &format!("/api/sessions/{id}"), json!({})).await;
    assert!((200..300).contains(&status), "{status}");
    ws.until(|frame| frame["event"]["event"] == "state" && frame["event"]["to"] == "exited").await;

    // No token, no trail (the route asks for an admin token).
    let (status, _) = server.request_as("nobody", reqwest::Method::GET, "/api/audit", None).await;
    assert_eq!(status, 401);
    let (status, page) = server.get("/api/audit").await;
    assert_eq!(status, 200, "{page}");
    let records = page["records"].as_array().unwrap().clone();
    let kinds: Vec<&str> =
        records.iter().map(|record| record["entry"]["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "session_started",
            "decision",
            "decision",
            "token_created",
            "token_revoked",
            "budget_changed",
            "budget_changed",
            "session_ended",
        ],
        "{page}"
    );
    let entry = |n: usize| &records[n]["entry"];
    assert_eq!(
        (&entry(1)["decision"], &entry(1)["by"]["kind"], &entry(1)["tool"]),
        (&json!("allow"), &json!("person"), &json!("Bash"))
    );
    assert_eq!((&entry(2)["decision"], &entry(2)["session"]), (&json!("deny"), &json!(id)));
    assert!(entry(2)["by"]["who"].as_str().unwrap().contains("token admin"), "{}", entry(2));
    assert_eq!(entry(3)["by"], "token admin (rest)");
    assert_eq!((&entry(5)["limit"], &entry(5)["usd"]), (&json!("daily_usd"), &json!(12.5)));
    assert_eq!(
        (&entry(6)["limit"], &entry(6)["usd"], &entry(6)["session"]),
        (&json!("max_budget_usd"), &json!(3.0), &json!(id))
    );
    assert_eq!(entry(7)["state"], "exited");
    let seqs: Vec<u64> = records.iter().map(|record| record["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=8).collect::<Vec<_>>());
    let (_, verified) = server.get("/api/audit/verify").await;
    assert_eq!(verified["ok"], true, "{verified}");
    assert_eq!((verified["records"].as_u64(), verified["head_seq"].as_u64()), (Some(8), Some(8)));
    assert_eq!(verified["head_hash"], records[7]["hash"]);
    // A page from later, and since a time.
    let (_, later) = server.get("/api/audit?after=6&limit=1").await;
    assert_eq!(
        (later["records"][0]["seq"].as_u64(), later["more"].as_bool()),
        (Some(7), Some(true))
    );
    let (_, recent) = server.get("/api/audit?since=1h").await;
    assert_eq!(recent["records"].as_array().map(Vec::len), Some(8), "{recent}");
    let (_, none) = server.get("/api/audit?since=2100-01-01T00:00:00Z").await;
    assert_eq!((&none["records"], &none["more"]), (&json!([]), &json!(false)), "{none}");
    let (status, refused) = server.get("/api/audit?since=yesterday").await;
    assert_eq!(status, 400, "{refused}");

    // Someone with the database's password cuts the last record off.
    let (client, connection) =
        tokio_postgres::connect(&database.url(), tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    let delete = |seq: i64| {
        let client = &client;
        async move {
            client
                .execute(
                    "DELETE FROM switchboard.events WHERE session_id = 'audit' AND seq = $1",
                    &[&seq],
                )
                .await
                .unwrap()
        }
    };
    assert_eq!(delete(8).await, 1);
    broken_at(&server, 8, "records 8 to 8 are missing").await;
    // Changes the deny to an allow.
    let changed = client
        .execute(
            "UPDATE switchboard.events SET payload = convert_to(replace(convert_from(payload, 'UTF8'),
                 '\"decision\":\"deny\"', '\"decision\":\"allow\"'), 'UTF8')
             WHERE session_id = 'audit' AND seq = 3",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(changed, 1);
    broken_at(&server, 3, "altered").await;
    // Deletes record 2 outright.
    assert_eq!(delete(2).await, 1);
    broken_at(&server, 2, "missing").await;
    // And the first: the trail now starts at record 3, which a whole trail may not.
    assert_eq!(delete(1).await, 1);
    broken_at(&server, 1, "records 1 to 2 are missing").await;
    server.stop().await;
}
