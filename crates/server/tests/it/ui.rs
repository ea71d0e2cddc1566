//! The web UI: how it is served and signed into (plain HTTP), and the browser tests
//! (`e2e/ui.test.mjs`, Playwright driving Debian's Chromium) against a daemon running the real
//! CLI with the fake API.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{json, Value};
use switchboard_store::{MemoryStore, Store, ViewCheckpoint};
use switchboard_testkit::{real_cli, CliSandbox, CliVersion, FakeApi, Reply, Scenario};

use crate::{Server, TOKEN};

fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(crate::WAIT)
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_needs_the_token_and_trades_it_for_a_cookie() {
    let api = FakeApi::start(Scenario::new()).await.unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let server = Server::start(Arc::new(MemoryStore::new()), &api, &sandbox).await;
    let client = no_redirects();
    let base = &server.base;

    // Without a token: the login page, and no UI files.
    let response = client.get(format!("{base}/")).send().await.unwrap();
    assert_eq!(response.status(), 401);
    let body = response.text().await.unwrap();
    assert!(body.contains("<form") && !body.contains("app.js"), "{body}");
    assert_eq!(client.get(format!("{base}/ui/app.js")).send().await.unwrap().status(), 401);

    // A wrong token is refused; the right one becomes an HttpOnly, SameSite=Strict cookie and
    // leaves the address bar.
    let wrong = client.get(format!("{base}/?token=nope")).send().await.unwrap();
    assert_eq!(wrong.status(), 401);
    assert!(wrong.headers().get("set-cookie").is_none());
    let signed_in = client.get(format!("{base}/?token={TOKEN}")).send().await.unwrap();
    assert_eq!(signed_in.status(), 303);
    assert_eq!(signed_in.headers()["location"], "/");
    let cookie = signed_in.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"), "{cookie}");
    let cookie = cookie.split(';').next().unwrap().to_owned();

    // With the cookie: the app, with a strict content security policy, and its files.
    let page = client.get(format!("{base}/")).header("cookie", &cookie).send().await.unwrap();
    assert_eq!(page.status(), 200);
    let csp = page.headers()["content-security-policy"].to_str().unwrap().to_owned();
    assert!(csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"), "{csp}");
    assert!(page.text().await.unwrap().contains("/ui/app.js"));
    let script =
        client.get(format!("{base}/ui/app.js")).header("cookie", &cookie).send().await.unwrap();
    assert_eq!(script.status(), 200);
    assert!(script.headers()["content-type"].to_str().unwrap().contains("javascript"));
    let etag = script.headers()["etag"].clone();
    let again = client
        .get(format!("{base}/ui/app.js"))
        .header("cookie", &cookie)
        .header("if-none-match", etag)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 304);
    for vendored in ["vendor/marked.esm.js", "vendor/purify.es.mjs", "vendor/uPlot.esm.js"] {
        let file = client
            .get(format!("{base}/ui/{vendored}"))
            .header("cookie", &cookie)
            .send()
            .await
            .unwrap();
        assert_eq!(file.status(), 200, "{vendored}");
    }
    let gzipped = client
        .get(format!("{base}/ui/vendor/highlight.min.js"))
        .header("cookie", &cookie)
        .header("accept-encoding", "gzip")
        .send()
        .await
        .unwrap();
    assert_eq!(gzipped.headers()["content-encoding"], "gzip");
    let compressed = gzipped.bytes().await.unwrap().len();
    assert!(compressed < 60_000, "{compressed} bytes");

    // A change carried only by the cookie must come from the page's own origin (CSRF).
    let create = json!({"cwd": sandbox.workdir()});
    let forged = client
        .post(format!("{base}/api/sessions"))
        .header("cookie", &cookie)
        .json(&create)
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 403);
    let foreign = client
        .post(format!("{base}/api/sessions"))
        .header("cookie", &cookie)
        .header("origin", "http://evil.example")
        .json(&create)
        .send()
        .await
        .unwrap();
    assert_eq!(foreign.status(), 403);
    let own = client
        .post(format!("{base}/api/sessions"))
        .header("cookie", &cookie)
        .header("origin", base.as_str())
        .json(&create)
        .send()
        .await
        .unwrap();
    assert_eq!(own.status(), 201);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_page_back_from_the_end() {
    let api = FakeApi::start(Scenario::new()).await.unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    seed_long_session(&store, "long", 1000).await;
    let total = store.last_seq("long").await.unwrap();
    let server = Server::start(store, &api, &sandbox).await;
    let seqs = |page: &Value| {
        page.as_array().unwrap().iter().map(|e| e["seq"].as_u64().unwrap()).collect::<Vec<_>>()
    };
    let (status, last) =
        server.get("/api/sessions/long/events?before=9007199254740991&limit=3").await;
    assert_eq!(status, 200);
    let last = seqs(&last);
    assert_eq!(last, [total - 2, total - 1, total], "the log's last three, oldest first");
    let (_, earlier) =
        server.get(&format!("/api/sessions/long/events?before={}&limit=5", last[0])).await;
    assert_eq!(seqs(&earlier), (last[0] - 5..last[0]).collect::<Vec<_>>());
    let (status, both) = server.get("/api/sessions/long/events?before=5&after=1").await;
    assert_eq!(status, 400, "{both}");
    server.stop().await;
}

/// The view pages forward and back, and a page that starts mid-log knows what came before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_view_pages_either_way_and_keeps_its_state() {
    let api = FakeApi::start(Scenario::new()).await.unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    seed_long_session(&store, "long", 1000).await;
    let server = Server::start(store, &api, &sandbox).await;
    let kinds = |page: &Value| -> Vec<String> {
        page["updates"]
            .as_array()
            .unwrap()
            .iter()
            .map(|u| u["update"].as_str().unwrap().to_owned())
            .collect()
    };
    let turn_cost = |page: &Value| -> (f64, f64) {
        let end = page["updates"]
            .as_array()
            .unwrap()
            .iter()
            .find(|u| u["update"] == "turn_ended")
            .unwrap();
        (end["cost_usd"].as_f64().unwrap(), end["total_cost_usd"].as_f64().unwrap())
    };
    // Two whole turns: the streamed pieces give way to their blocks.
    let (status, page) = server.get("/api/sessions/long/view?after=0&limit=20").await;
    assert_eq!(status, 200, "{page}");
    let turn = ["prompt", "message_started", "block", "turn_ended"];
    assert_eq!(kinds(&page), [turn, turn].concat());
    assert_eq!(
        (page["first_seq"].as_u64(), page["last_seq"].as_u64(), page["more"].as_bool()),
        (Some(1), Some(20), Some(true))
    );
    assert_eq!(page["updates"][2]["block"]["text"], "Answer number **1**, with `code`.");
    // A page that cuts a block's stream keeps its pieces.
    let (_, page) = server.get("/api/sessions/long/view?after=0&limit=5").await;
    assert_eq!(kinds(&page), ["prompt", "message_started", "text_delta", "text_delta"]);
    // Turn 3 alone: its own cost, from the two turns before it.
    let (_, page) = server.get("/api/sessions/long/view?after=20&limit=10").await;
    let (cost, total) = turn_cost(&page);
    assert!((cost - 0.001).abs() < 1e-9 && (total - 0.003).abs() < 1e-9, "{page}");
    // Back from the end.
    let (_, page) = server.get("/api/sessions/long/view?before=9007199254740991&limit=10").await;
    assert_eq!(
        (page["first_seq"].as_u64(), page["last_seq"].as_u64(), page["more"].as_bool()),
        (Some(9991), Some(10000), Some(true))
    );
    let (cost, total) = turn_cost(&page);
    assert!((cost - 0.001).abs() < 1e-9 && (total - 1.0).abs() < 1e-9, "{page}");
    let (_, page) = server.get("/api/sessions/long/view?before=11&limit=10").await;
    assert_eq!(page["more"], false);
    assert_eq!(page["updates"][0]["text"], "Question number 1");
    for bad in ["before=5&after=1", "limit=x", "view=1"] {
        let (status, body) = server.get(&format!("/api/sessions/long/view?{bad}")).await;
        assert_eq!(status, 400, "{bad}: {body}");
        assert!(body["error"]["message"].is_string(), "{body}");
    }
    let (status, _) = server.get("/api/sessions/nope/view").await;
    assert_eq!(status, 404);
    server.stop().await;
}

/// A long session's pages start from checkpoints of its view: each is the page a replay from
/// the log's start gives, and a log that is not the one a checkpoint was taken from (the
/// session deleted, its id used again) is replayed from its start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_of_a_long_session_start_from_checkpoints_of_its_view() {
    let api = FakeApi::start(Scenario::new()).await.unwrap();
    let sandbox = CliSandbox::new().unwrap();
    // A store that keeps no checkpoints of its own (the wrapper forwards none): the daemon's
    // memory alone, here.
    let store: Arc<dyn Store> = Arc::new(crate::FailingStore::default());
    seed_long_session(&store, "long", 1000).await;
    let server = Server::start(store.clone(), &api, &sandbox).await;
    let checkpoints = server.daemon.view_checkpoints();
    assert!(checkpoints.is_empty());
    // Back from the end, 700 events a page: pages cut turns, and cross checkpoints' places.
    let mut before = 9_007_199_254_740_991u64;
    let mut pages = 0;
    loop {
        let path = format!("/api/sessions/long/view?before={before}&limit=700");
        checkpoints.forget("long");
        let (status, from_start) = server.get(&path).await;
        assert_eq!(status, 200, "{from_start}");
        if pages == 0 {
            // 9,300 events replayed to reach the last page: one checkpoint each 2,048.
            assert_eq!(checkpoints.len(), 4);
        }
        let (_, from_checkpoint) = server.get(&path).await;
        assert_eq!(from_checkpoint, from_start, "{path}");
        pages += 1;
        if from_start["more"] == false {
            break;
        }
        before = from_start["first_seq"].as_u64().unwrap();
    }
    assert_eq!(pages, 15);
    // The session's log replaced under the daemon (not through it): other events (turns that
    // cost twice as much), stored at other times, where its checkpoints were taken. A stale
    // checkpoint would count the page's turn from the old costs.
    server.get("/api/sessions/long/view?before=9007199254740991&limit=10").await;
    assert_eq!(checkpoints.len(), 4);
    store.delete_session("long").await.unwrap();
    crate::seed::long_session_costing(store.as_ref(), "long", 900, 1_796_000_000_000, 0.002).await;
    // Just past the checkpoint at 8,192: the page's turn ends before any result of the new
    // log could have set the cost right.
    let path = "/api/sessions/long/view?after=8192&limit=10";
    let (_, after_checkpoints) = server.get(path).await;
    checkpoints.forget("long");
    let (_, from_start) = server.get(path).await;
    assert_eq!(after_checkpoints, from_start);
    assert!(after_checkpoints["updates"][0]["ts"].as_u64().unwrap() > 1_796_000_000_000 + 8192);
    let ended = after_checkpoints["updates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|update| update["update"] == "turn_ended")
        .unwrap();
    assert!((ended["cost_usd"].as_f64().unwrap() - 0.002).abs() < 1e-9, "{ended}");
    server.stop().await;
}

/// A daemon that has never read a long session pages it from the checkpoints of its view
/// stored beside its log. A daemon brings them up to the log at start (this log was stored
/// without them, as an older version stores), and the next daemon's first page starts from the
/// stored checkpoint nearest it, not from the log's start; each page is the one a replay from
/// the start gives. A stored checkpoint of another log (its event stored at another time), or
/// of another build, is passed by, and written again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_pages_a_long_session_it_never_read_from_checkpoints_stored_beside_its_log() {
    let api = FakeApi::start(Scenario::new()).await.unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let paths = [
        "/api/sessions/long/view?before=9007199254740991&limit=700",
        "/api/sessions/long/view?after=5000&limit=300",
        "/api/sessions/long/view?before=2100&limit=300",
    ];
    // The pages as a replay from the log's start gives them (a store that keeps no
    // checkpoints, and memory's forgotten before each).
    let plain: Arc<dyn Store> = Arc::new(crate::FailingStore::default());
    seed_long_session(&plain, "long", 1000).await;
    let reference = Server::start(plain, &api, &sandbox).await;
    let mut expected = Vec::new();
    for path in paths {
        reference.daemon.view_checkpoints().forget("long");
        let (status, page) = reference.get(path).await;
        assert_eq!(status, 200, "{page}");
        expected.push(page);
    }
    reference.stop().await;

    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> =
        Arc::new(switchboard_store::SqliteStore::open(dir.path().join("db")).unwrap());
    seed_long_session(&store, "long", 1000).await;
    let kept = store.view_checkpoints().unwrap();
    let format = switchboard_server::view::STATE_FORMAT;
    assert!(kept.view_checkpoint_marks(format).await.unwrap().is_empty());
    let first = Server::start(store.clone(), &api, &sandbox).await;
    tokio::time::timeout(crate::WAIT, first.daemon.view_checkpoints_settled()).await.unwrap();
    assert_eq!(kept.view_checkpoint_marks(format).await.unwrap().get("long"), Some(&8192));
    assert!(first.daemon.view_checkpoints().is_empty(), "a catch-up keeps none in memory");
    first.stop().await;

    let second = Server::start(store.clone(), &api, &sandbox).await;
    let memory = second.daemon.view_checkpoints();
    for (path, expected) in paths.iter().zip(&expected) {
        memory.forget("long");
        let (status, page) = second.get(path).await;
        assert_eq!(status, 200, "{page}");
        assert_eq!(&page, expected, "{path}");
        // The stored checkpoint it started from, now in memory too; a replay from the start
        // would have kept one at each place it passed (four, for the last page). A page before
        // the first place has none to start from.
        let starts_after = page["first_seq"].as_u64().unwrap() > 2048;
        assert_eq!(memory.len(), usize::from(starts_after), "{path}");
    }
    let format = switchboard_server::view::STATE_FORMAT;
    let real = kept.view_checkpoint("long", 8192, format).await.unwrap().unwrap();
    // Of another log (its event stored at another time): passed by, the page replayed from the
    // log's start (keeping each place it passes), and the place written again.
    let other_log = ViewCheckpoint { ts_ms: real.ts_ms + 1, ..real.clone() };
    kept.put_view_checkpoint("long", &other_log).await.unwrap();
    memory.forget("long");
    let (_, page) = second.get(paths[0]).await;
    assert_eq!(page, expected[0]);
    assert_eq!(memory.len(), 4);
    tokio::time::timeout(crate::WAIT, second.daemon.view_checkpoints_settled()).await.unwrap();
    let again = kept.view_checkpoint("long", 8192, format).await.unwrap().unwrap();
    assert_eq!(again.ts_ms, real.ts_ms);
    // Of another build (its format): not read; the page starts from the place before it (held
    // then, with 8,192 as the page passes it), and 8,192 is written again in this build's.
    let other_build = ViewCheckpoint { format: "another build".into(), ..real.clone() };
    kept.put_view_checkpoint("long", &other_build).await.unwrap();
    memory.forget("long");
    let (_, page) = second.get(paths[0]).await;
    assert_eq!(page, expected[0]);
    assert_eq!(memory.len(), 2);
    tokio::time::timeout(crate::WAIT, second.daemon.view_checkpoints_settled()).await.unwrap();
    assert_eq!(kept.view_checkpoint_marks(format).await.unwrap().get("long"), Some(&8192));
    second.stop().await;
}

/// The usage of a whole session, whatever page the UI holds: every turn, from the log; a call
/// after more turns goes on from the last one, and a log replaced is read from its start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_counts_every_turn_of_the_log() {
    let api = FakeApi::start(Scenario::new()).await.unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    seed_long_session(&store, "long", 1000).await;
    let server = Server::start(store.clone(), &api, &sandbox).await;
    let (status, usage) = server.get("/api/sessions/long/usage").await;
    assert_eq!(status, 200, "{usage}");
    assert_eq!(usage["turn_count"], 1000);
    let turns = usage["turns"].as_array().unwrap();
    assert_eq!(turns.len(), 1000);
    assert_eq!((turns[0]["turn"].as_u64(), turns[0]["seq"].as_u64()), (Some(1), Some(10)));
    assert!(turns.iter().all(|t| (t["cost_usd"].as_f64().unwrap() - 0.001).abs() < 1e-9));
    assert_eq!(turns[999]["context_tokens"], 1100);
    assert!((usage["total_cost_usd"].as_f64().unwrap() - 1.0).abs() < 1e-9, "{usage}");
    // The lines name no model; the result's only window is the one.
    assert_eq!(usage["context_window"], 200_000);
    assert_eq!(usage["models"][0]["model"], "claude-opus-5-5");
    assert_eq!(server.get("/api/sessions/nope/usage").await.0, 404);
    // A hundred turns more: the next call goes on from where the last one stopped.
    crate::seed::add_turns(store.as_ref(), "long", 1001..=1100, 1_795_000_000_000, 0.001).await;
    let (_, usage) = server.get("/api/sessions/long/usage").await;
    assert_eq!(usage["turn_count"], 1100);
    let turns = usage["turns"].as_array().unwrap();
    assert_eq!(turns.len(), 1100);
    assert_eq!(
        (turns[1099]["turn"].as_u64(), turns[1099]["seq"].as_u64()),
        (Some(1100), Some(11_000))
    );
    assert!(turns.iter().all(|t| (t["cost_usd"].as_f64().unwrap() - 0.001).abs() < 1e-9));
    assert!((usage["total_cost_usd"].as_f64().unwrap() - 1.1).abs() < 1e-9, "{usage}");
    let (_, again) = server.get("/api/sessions/long/usage").await;
    assert_eq!(again, usage, "nothing new, the same answer");
    // The log replaced under the daemon (turns that cost twice as much, stored at other
    // times): read from its start, not from where the last call stopped.
    store.delete_session("long").await.unwrap();
    crate::seed::long_session_costing(store.as_ref(), "long", 1200, 1_796_000_000_000, 0.002).await;
    let (_, usage) = server.get("/api/sessions/long/usage").await;
    assert_eq!(usage["turn_count"], 1200);
    let turns = usage["turns"].as_array().unwrap();
    assert!(turns.iter().all(|t| (t["cost_usd"].as_f64().unwrap() - 0.002).abs() < 1e-9));
    assert!((usage["total_cost_usd"].as_f64().unwrap() - 2.4).abs() < 1e-9, "{usage}");
    server.stop().await;
}

/// A person renames a session and puts it away; the store keeps both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_is_renamed_and_archived() {
    let api = FakeApi::start(Scenario::new()).await.unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    seed_long_session(&store, "long", 1).await;
    let server = Server::start(store.clone(), &api, &sandbox).await;
    let mut dashboard = server.ws("/api/events").await;
    let (status, session) =
        server.patch("/api/sessions/long", json!({"title": "  Renamed  "})).await;
    assert_eq!(status, 200, "{session}");
    assert_eq!(
        (session["title"].as_str(), session["archived"].as_bool()),
        (Some("Renamed"), Some(false))
    );
    let change = dashboard.next().await;
    assert_eq!(
        (change["event"].as_str(), change["title"].as_str()),
        (Some("session_changed"), Some("Renamed"))
    );
    let (status, session) = server.patch("/api/sessions/long", json!({"archived": true})).await;
    assert_eq!(status, 200, "{session}");
    assert_eq!(session["archived"], true);
    assert_eq!(dashboard.next().await["archived"], true);
    let stored = store.get_session("long").await.unwrap().unwrap();
    assert_eq!((stored.title.as_deref(), stored.archived), (Some("Renamed"), true));
    let (_, list) = server.get("/api/sessions").await;
    assert_eq!(list[0]["archived"], true);
    let long = "x".repeat(201);
    for bad in [
        json!({}),
        json!({"title": " "}),
        json!({"title": long}),
        json!({"title": "a\nb"}),
        json!({"colour": 1}),
    ] {
        let (status, body) = server.patch("/api/sessions/long", bad.clone()).await;
        assert_eq!(status, 400, "{bad}: {body}");
        assert!(body["error"]["message"].is_string(), "{body}");
    }
    assert_eq!(server.patch("/api/sessions/nope", json!({"archived": true})).await.0, 404);
    server.stop().await;
}

/// The working directory completes from the daemon's file system.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directories_complete_a_prefix() {
    let api = FakeApi::start(Scenario::new()).await.unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let root = sandbox.workdir();
    for dir in ["alpha", "alps", ".alpaca", "beta"] {
        std::fs::create_dir(root.join(dir)).unwrap();
    }
    std::fs::write(root.join("alpine.txt"), "a file").unwrap();
    let server = Server::start(Arc::new(MemoryStore::new()), &api, &sandbox).await;
    let list = |prefix: String| {
        let server = &server;
        async move {
            let query = form_urlencoded::Serializer::new(String::new())
                .append_pair("prefix", &prefix)
                .finish();
            server.get(&format!("/api/directories?{query}")).await
        }
    };
    let root_text = root.to_str().unwrap();
    let (status, found) = list(format!("{root_text}/al")).await;
    assert_eq!(status, 200, "{found}");
    assert_eq!(found, json!([format!("{root_text}/alpha"), format!("{root_text}/alps")]));
    let (_, found) = list(format!("{root_text}/")).await;
    let names: Vec<&str> = found.as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert!(
        names.contains(&format!("{root_text}/beta").as_str())
            && !names.iter().any(|n| n.contains(".alpaca")),
        "{found}"
    );
    let (_, found) = list(format!("{root_text}/.al")).await;
    assert_eq!(found, json!([format!("{root_text}/.alpaca")]));
    assert_eq!(list(format!("{root_text}/nothing/here")).await.1, json!([]));
    for bad in ["relative/path", ""] {
        let (status, body) = list(bad.to_owned()).await;
        assert_eq!(status, 400, "{bad}: {body}");
    }
    server.stop().await;
}

/// A finished session of `turns` turns (prompt, streamed answer, result): 10 events a turn.
async fn seed_long_session(store: &Arc<dyn Store>, id: &str, turns: usize) {
    crate::seed::long_session(store.as_ref(), id, turns, 1_795_000_000_000).await;
}

/// A session an agent started through MCP, with a token that has a ceiling.
async fn seed_agent_session(store: &Arc<dyn Store>) {
    seed_long_session(store, "agent-session", 1).await;
    let mut record = store.get_session("agent-session").await.unwrap().unwrap();
    record.title = Some("Started by the reviewer agent".into());
    // Its own directory: the list's search for "long" finds the long session alone.
    record.cwd = "/tmp/agent-project".into();
    record.launch.cwd = "/tmp/agent-project".into();
    record.launch.origin = Some(switchboard_store::Origin {
        face: switchboard_store::Face::Mcp,
        token: "reviewer".into(),
        ceiling: Some("[permissions]\nallow = [\"Read\"]\n".into()),
    });
    store.update_session(&record).await.unwrap();
}

/// What the browser test's MARKDOWN prompt gets back.
const MARKDOWN_REPLY: &str = "Here is the **summary**, with `inline code`.\n\n\
    | File | Lines |\n|---|---|\n| calc.py | 42 |\n| test.py | 7 |\n\n\
    > A quoted note.\n\n\
    ```rust\nfn main() {\n    println!(\"hi\");\n}\n```\n\nDone with the markdown.";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// Runs a browser test script (`e2e/*.test.mjs`: Playwright driving Debian's Chromium) against
/// the daemon at `base`, with `env` besides that address, the test token, Chromium's path and
/// where its screenshots go. Its steps are printed; returns whether it passed, and what it said.
#[allow(clippy::disallowed_methods, clippy::print_stdout)] // runs node (not the Claude CLI) and shows its steps
pub(crate) async fn run_script(script: &str, base: &str, env: &[(&str, String)]) -> (bool, String) {
    let root = repo_root();
    let chromium =
        std::env::var("SWITCHBOARD_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    assert!(
        Path::new(&chromium).exists() && root.join("e2e/node_modules/playwright-core").exists(),
        "the browser tests need Chromium ({chromium}) and playwright-core in e2e/node_modules: \
         run scripts/install-browser.sh"
    );
    let screenshots = std::env::var("SWITCHBOARD_SCREENSHOTS")
        .map(PathBuf::from)
        .unwrap_or_else(|_| root.join("target/screenshots"));
    std::fs::create_dir_all(&screenshots).unwrap();
    let mut command = tokio::process::Command::new("node");
    command
        .arg(root.join(script))
        .env("SWITCHBOARD_URL", base)
        .env("SWITCHBOARD_TOKEN", TOKEN)
        .env("API_TOKEN", TOKEN)
        .env("CHROMIUM", &chromium)
        .env("SCREENSHOTS", &screenshots)
        // Chromium's profile and shared memory under the build directory, not a /tmp that
        // may be a small tmpfs.
        .env("TMPDIR", env!("CARGO_TARGET_TMPDIR"))
        .kill_on_drop(true);
    for (name, value) in env {
        command.env(name, value);
    }
    // A browser test that hangs fails here, in minutes, naming the script.
    let output = tokio::time::timeout(std::time::Duration::from_secs(20 * 60), command.output())
        .await
        .unwrap_or_else(|_| panic!("{script} ran past 20 minutes"))
        .expect("node runs");
    let log = format!(
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    println!("{log}");
    (output.status.success(), log)
}

/// The browser tests: Playwright (`e2e/node_modules`, from `scripts/install-browser.sh`)
/// driving Debian's Chromium through `e2e/ui.test.mjs`, against this daemon.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::disallowed_methods, clippy::print_stdout)] // runs node (not the Claude CLI) and shows its steps
async fn browser() {
    let sandbox = CliSandbox::new().unwrap();
    let notes = sandbox.file("notes.txt");
    std::fs::write(&notes, "colour = 1\n").unwrap();
    let sub = sandbox.file("sub.txt");
    std::fs::write(&sub, "SUBFILE_CONTENT\n").unwrap();
    // A directory for the working-directory completion to find.
    std::fs::create_dir(sandbox.workdir().join("src")).unwrap();
    let picture = sandbox.file("picture.png");
    std::fs::write(&picture, RED_PNG).unwrap();
    let api = FakeApi::start(
        Scenario::new()
            // A Write the browser test rewinds (first: its tool result is answered here, not by
            // a later step's reply).
            .reply(
                Reply::tool_use(
                    "Write",
                    json!({"file_path": sandbox.file("rewind.txt"), "content": "after\n"}),
                )
                .when_prompt("REWRITEME"),
            )
            .reply(Reply::text("Rewrote it.").when_tool_result_contains("rewind.txt"))
            // A plan (2.1.37 carries it in ExitPlanMode's input), sent back, then approved.
            .reply(
                Reply::tool_use(
                    "ExitPlanMode",
                    json!({"plan": "## Rename\n\n1. Rename `util` to `helpers`\n2. Fix the callers"}),
                )
                .when_prompt("PLANME"),
            )
            .reply(
                Reply::tool_use(
                    "ExitPlanMode",
                    json!({"plan": "## Rename\n\n1. Rename `util` to `helpers`\n2. Fix the callers\n3. Keep `util` as an alias"}),
                )
                .when_tool_result_contains("ALIAS_PLEASE"),
            )
            .reply(Reply::text("Carrying out the plan.").when_tool_result_contains("User has approved"))
            // Streamed text, held after three words until the test releases it.
            .reply(
                Reply::text("## Plan\n\nStreaming **progressively** word by word until the very end.")
                    .when_prompt("STREAM")
                    .hold_after(3),
            )
            // A call that fails, then one that works: the failed card stays open.
            .reply(
                Reply::tool_use(
                    "Bash",
                    json!({"command": "touch /nonexistent-switchboard/x", "description": "fail"}),
                )
                .when_prompt("FAILME"),
            )
            .reply(
                Reply::tool_use(
                    "Bash",
                    json!({"command": "touch after.txt && ls", "description": "after"}),
                )
                .when_tool_result_contains("nonexistent-switchboard"),
            )
            .reply(Reply::text("After the failure.").when_tool_result_contains("after.txt"))
            // Markdown the UI styles: a table, a quote, inline code, a fenced block.
            .reply(
                Reply::text(MARKDOWN_REPLY).when_prompt("MARKDOWN"),
            )
            .reply(
                Reply::tool_use(
                    "Bash",
                    json!({"command": "touch approved.txt && ls", "description": "make a file"}),
                )
                .when_prompt("RUNBASH"),
            )
            .reply(Reply::text("The file is there.").when_tool_result_contains("approved.txt"))
            .reply(
                Reply::tool_use(
                    "Bash",
                    json!({"command": "touch denied.txt && ls", "description": "another file"}),
                )
                .when_prompt("DENYBASH"),
            )
            .reply(Reply::text("Understood, I will not.").when_tool_result_contains("not today"))
            .reply(
                Reply::tool_use(
                    "AskUserQuestion",
                    json!({"questions": [{"question": "Which color?", "header": "Color",
                        "multiSelect": false, "options": [
                            {"label": "Blue", "description": "calm"},
                            {"label": "Green", "description": "fresh"}]}]}),
                )
                .when_prompt("ASKME"),
            )
            .reply(Reply::text("Green it is.").when_tool_result_contains("Green"))
            // Claude Code edits only files it has read.
            .reply(Reply::tool_use("Read", json!({"file_path": notes})).when_prompt("EDITME"))
            .reply(
                Reply::tool_use(
                    "Edit",
                    json!({"file_path": notes, "old_string": "colour = 1",
                        "new_string": "color = 2"}),
                )
                .when_tool_result_contains("colour"),
            )
            .reply(
                Reply::text("This stream will be interrupted before it ends, surely.")
                    .when_prompt("SLOW")
                    .hold_after(2),
            )
            .reply(
                Reply::text("Reloading keeps every word exactly once here.")
                    .when_prompt("RELOAD")
                    .hold_after(3),
            )
            // Allowed with an edited input.
            .reply(
                Reply::tool_use(
                    "Bash",
                    json!({"command": "touch original.txt && ls", "description": "edit me"}),
                )
                .when_prompt("EDITINPUT"),
            )
            .reply(Reply::text("Ran the edited command.").when_tool_result_contains("edited.txt"))
            // "Always allow": the same command a second time is not asked about.
            .reply(
                Reply::tool_use(
                    "Bash",
                    json!({"command": "touch always.txt && ls", "description": "first"}),
                )
                .when_prompt("ALWAYS"),
            )
            .reply(
                Reply::tool_use(
                    "Bash",
                    json!({"command": "touch always.txt && ls", "description": "second"}),
                )
                .when_tool_result_contains("always.txt"),
            )
            .reply(Reply::text("Twice, asked once.").when_tool_result_contains("always.txt"))
            // Approved with the keyboard.
            .reply(
                Reply::tool_use(
                    "Bash",
                    json!({"command": "touch keyed.txt && ls", "description": "keys"}),
                )
                .when_prompt("KEYS")
                .times(2),
            )
            .reply(Reply::text("Keyed in.").when_tool_result_contains("keyed.txt").times(2))
            // A subagent whose messages nest under its card.
            .reply(
                Reply::tool_use(
                    "Agent",
                    json!({"description": "Read the sub file", "subagent_type": "general-purpose",
                        "prompt": "SUBAGENT_PROMPT: read the sub file", "run_in_background": false}),
                )
                .when_prompt("SUBAGENT"),
            )
            .reply(Reply::tool_use("Read", json!({"file_path": sub})).when_prompt("SUBAGENT_PROMPT"))
            .reply(Reply::text("The sub file says hello.").when_tool_result_contains("SUBFILE_CONTENT"))
            .reply(Reply::text("Main agent done.").when_tool_result_contains("sub file says"))
            // An image from a tool result.
            .reply(Reply::tool_use("Read", json!({"file_path": picture})).when_prompt("READIMG"))
            // API errors are retried, visibly.
            .reply(Reply::http_error(429, "rate_limit_error", "slow down", 2).when_prompt("RETRYME"))
            .reply(Reply::text("Recovered after retries.").when_prompt("RETRYME"))
            // Held while the browser goes offline.
            .reply(
                Reply::text("Offline and back without losing a word.")
                    .when_prompt("OFFLINE")
                    .hold_after(2),
            )
            .reply(thinking_then("Weighing the options carefully.", "Thought it through.").when_prompt("THINK"))
            // Answered on a phone signed in with an approve token.
            .reply(
                Reply::tool_use(
                    "Bash",
                    json!({"command": "touch phone.txt && echo PHONE_MARK", "description": "from a phone"}),
                )
                .when_prompt("PHONEAPPROVE"),
            )
            .reply(Reply::text("Phone approved.").when_tool_result_contains("PHONE_MARK"))
            // Answered through a one-tap link, on a phone.
            .reply(
                Reply::tool_use(
                    "Bash",
                    json!({"command": "touch from-link.txt && echo LINK_MARK", "description": "by a link"}),
                )
                .when_prompt("LINKAPPROVE"),
            )
            .reply(Reply::text("Approved from a link.").when_tool_result_contains("LINK_MARK"))
            // Pushed to a phone (Web Push), answered through the pushed link.
            .reply(
                Reply::tool_use(
                    "Bash",
                    json!({"command": "touch from-push.txt && echo PUSH_MARK", "description": "by a push"}),
                )
                .when_prompt("PUSHAPPROVE"),
            )
            .reply(Reply::text("Approved from a push.").when_tool_result_contains("PUSH_MARK"))
            // A worktree session's change, reviewed.
            .reply(
                Reply::tool_use(
                    "Bash",
                    json!({"command": "echo reviewed >> notes.txt && echo REVIEW_MARK", "description": "change the notes"}),
                )
                .when_prompt("REVIEWME"),
            )
            .reply(Reply::text("Changed notes.").when_tool_result_contains("REVIEW_MARK"))
            .reply(Reply::text("A green square.").when_prompt("PICTURE"))
            .reply(
                Reply::tool_use(
                    "Write",
                    json!({"file_path": sandbox.file("new.rs"), "content": "fn main() {\n    println!(\"hi\");\n}\n"}),
                )
                .when_prompt("WRITEME")
                // Held after its input's first two pieces: the card fills in as it streams.
                .hold_after(2),
            )
            .reply(Reply::text("Wrote it.").when_tool_result_contains("new.rs"))
            // A second prompt while the first still runs: queued, then answered.
            .reply(Reply::text("First in line, finishing now.").when_prompt("QUEUE1").hold_after(2))
            .reply(Reply::text("Second in line.").when_prompt("QUEUE2"))
            .reply(Reply::text("Third in line.").when_prompt("QUEUE3"))
            .reply(
                Reply::text("Taking the long way round, never finished.")
                    .when_prompt("WANDER")
                    .hold_after(2),
            )
            .reply(Reply::text("Steered onto the short way.").when_prompt("STEER"))
            // After each turn but the first, what the person might type next.
            .prompt_suggestion("now run the whole test suite")
            // An MCP server's question (e2e/mcp-echo.mjs's `ask`), answered from its form.
            .reply(Reply::tool_use("mcp__probe__ask", json!({})).when_prompt("ELICIT"))
            .reply(Reply::text("Blue it is.").when_tool_result_contains("accept"))
            // A subagent run in the background (its own request held), stopped alone.
            .reply(
                Reply::tool_use(
                    "Agent|Task",
                    json!({"description": "Index the docs", "prompt": "SUBTASK work",
                           "subagent_type": "general-purpose", "run_in_background": true}),
                )
                .when_prompt("BGTASK"),
            )
            .reply(Reply::text("working away").when_prompt("SUBTASK").hold_after(1))
            .reply(
                Reply::text("It runs in the background.")
                    .when_tool_result_contains("Async agent launched"),
            )
            // An MCP tool (e2e/mcp-echo.mjs, configured from the form).
            .reply(
                Reply::tool_use("mcp__probe__echo", json!({"text": "hello mcp"}))
                    .when_prompt("MCPCALL"),
            )
            .reply(Reply::text("MCP answered.").when_tool_result_contains("echo: hello mcp"))
            .reply(Reply::text("Edited.").when_tool_result())
            .fallback("OK."),
    )
    .await
    .unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    seed_long_session(&store, "long-session", 1000).await;
    seed_agent_session(&store).await;
    // The browser test's push service listens on 127.0.0.1.
    let server = Server::start_with(store, &api, &sandbox, |config| {
        config.notify.push.hosts = vec!["127.0.0.1".into()];
    })
    .await;

    let (ok, log) = run_script(
        "e2e/ui.test.mjs",
        &server.base,
        &[
            ("FAKE_API_URL", api.base_url()),
            ("WORKDIR", sandbox.workdir().display().to_string()),
            ("CLI_2_1_37", real_cli(CliVersion::V2_1_37).display().to_string()),
        ],
    )
    .await;
    server.stop().await;
    assert!(ok, "the browser tests failed:\n{log}");
    assert!(sandbox.file("approved.txt").exists(), "the approved command ran");
    assert!(!sandbox.file("denied.txt").exists(), "the denied command never ran");
    assert_eq!(std::fs::read_to_string(sandbox.file("notes.txt")).unwrap(), "color = 2\n");
    assert!(sandbox.file("edited.txt").exists() && !sandbox.file("original.txt").exists());
    assert!(sandbox.file("keyed.txt").exists());
    assert!(std::fs::read_to_string(sandbox.file("new.rs")).unwrap().contains("println!"));
    // The fork went on from the first answer: the model saw the conversation up to there only.
    let forked = api
        .conversation_requests()
        .into_iter()
        .map(|request| request.body.to_string())
        .find(|body| body.contains("AFTER FORK"))
        .expect("the forked session asked the model");
    assert!(forked.contains("STREAM please") && forked.contains("Streaming"), "{forked}");
    assert!(!forked.contains("RUNBASH"), "the fork does not see what came after: {forked}");
}

/// A reply that thinks before it answers.
fn thinking_then(thinking: &str, text: &str) -> Reply {
    let mut reply = Reply::text(text);
    reply.blocks.insert(0, switchboard_testkit::Block::Thinking(thinking.into()));
    reply
}

/// An 8×8 red PNG.
const RED_PNG: &[u8] = &[
    137, 80, 78, 71, 13, 10, 26, 10, 0, 0, 0, 13, 73, 72, 68, 82, 0, 0, 0, 8, 0, 0, 0, 8, 8, 2, 0,
    0, 0, 75, 109, 41, 220, 0, 0, 0, 17, 73, 68, 65, 84, 120, 156, 99, 56, 97, 99, 131, 21, 49, 12,
    45, 9, 0, 101, 153, 80, 1, 82, 15, 175, 83, 0, 0, 0, 0, 73, 69, 78, 68, 174, 66, 96, 130,
];

/// `--no-auth` (loopback only): browsers on other sites get nothing — neither through a
/// rebound host name nor with a cross-site request that changes something.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_auth_only_loopback_pages_get_in() {
    let daemon = switchboard_server::Daemon::open(
        Arc::new(MemoryStore::new()),
        switchboard_server::DaemonConfig::default(),
    )
    .await
    .unwrap();
    let auth = switchboard_server::AuthConfig::no_auth();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(async move {
        switchboard_server::serve(listener, daemon, auth, std::future::pending()).await.unwrap()
    });
    let client = no_redirects();
    let status = |response: reqwest::Response| response.status().as_u16();

    assert_eq!(status(client.get(format!("{base}/api/health")).send().await.unwrap()), 200);
    let rebound = client
        .get(format!("{base}/api/sessions"))
        .header("host", "evil.example:7777")
        .send()
        .await
        .unwrap();
    assert_eq!(status(rebound), 403);
    let interrupt = format!("{base}/api/sessions/nope/interrupt");
    let cross_site =
        client.post(&interrupt).header("origin", "http://evil.example").send().await.unwrap();
    assert_eq!(status(cross_site), 403);
    // The daemon's own page and programs (no Origin) pass (and find no such session).
    let own = client.post(&interrupt).header("origin", &base).send().await.unwrap();
    assert_eq!(status(own), 404);
    assert_eq!(status(client.post(&interrupt).send().await.unwrap()), 404);
    server.abort();
}
