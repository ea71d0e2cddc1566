//! Work that runs while nobody watches, with the real CLI and the fake API: a schedule due every
//! two seconds runs twice, in two sessions, never beside itself; a signed webhook starts a
//! session with its templated prompt, and a forged or replayed one starts nothing; a GitHub
//! check run that failed reaches the session whose worktree made the branch; a usage window
//! the CLI reports used up holds a run until its reset, and a cap pauses the run that reaches
//! it. (Real seconds: the CLI runs in real time. The planner's own cases, with any clock, are
//! its unit tests.)

use std::sync::Arc;

use serde_json::{json, Value};
use switchboard_server::schedules::signature;
use switchboard_store::{MemoryStore, Store};
use switchboard_testkit::{git, CliSandbox, FakeApi, Reply, Scenario};

use crate::{Server, Ws, WAIT};

/// The schedule at `path` once `check` holds, looked at again each time the dashboards hear
/// the book changed (within [`WAIT`]).
async fn schedule_when(
    server: &Server,
    feed: &mut Ws,
    path: &str,
    check: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (status, view) = server.get(path).await;
        assert_eq!(status, 200, "{view}");
        if check(&view) {
            return view;
        }
        let mut seen = Vec::new();
        loop {
            let frame = feed.next_by(deadline, &seen).await;
            if frame["event"] == "schedules_changed" {
                break;
            }
            seen.push(frame);
        }
    }
}

fn runs_of<'a>(view: &'a Value, outcome: &str) -> Vec<&'a Value> {
    view["state"]["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|run| run["outcome"] == outcome)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_runs_twice_in_two_sessions_and_never_beside_itself() {
    // The first run's answer is held mid-stream: its session goes on past the next due times.
    let api = FakeApi::start(
        Scenario::new()
            .reply(Reply::text("first run, still going").when_prompt("TIDY").hold_after(1).times(1))
            .reply(Reply::text("second run done").when_prompt("TIDY")),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let server = Server::start(store, &api, &sandbox).await;
    let mut feed = server.ws("/api/events").await;

    // Refusals name the problem.
    let task = json!({"cwd": sandbox.workdir(), "prompt": "TIDY"});
    for (body, why) in [
        (json!({"name": "Bad Name", "cron": "* * * * *", "task": task}), "is not one"),
        (json!({"name": "x", "cron": "61 * * * *", "task": task}), "is not one"),
        (
            json!({"name": "x", "cron": "* * * * *", "time_zone": "Mars/Olympus", "task": task}),
            "Mars/Olympus",
        ),
        (json!({"name": "x", "task": task}), "needs cron"),
        (
            json!({"name": "x", "cron": "* * * * *", "task": {"cwd": sandbox.workdir()}}),
            "needs a prompt",
        ),
        (json!({"name": "x", "cron": "* * * * *", "task": task, "overlaps": "skip"}), "overlaps"),
        (
            json!({"name": "x", "cron": "* * * * *", "task": task, "max_window_utilization": 2}),
            "max_window_utilization",
        ),
    ] {
        let (status, refused) = server.post("/api/schedules", body).await;
        assert_eq!(status, 400, "{refused}");
        let message = refused["error"]["message"].as_str().unwrap();
        assert!(message.contains(why), "{message}");
    }

    let (status, made) = server
        .post("/api/schedules", json!({"name": "tidy", "cron": "*/2 * * * * *", "task": task}))
        .await;
    assert_eq!(status, 201, "{made}");
    let next: Vec<u64> =
        made["next_ms"].as_array().unwrap().iter().map(|ms| ms.as_u64().unwrap()).collect();
    assert_eq!(next.len(), 5);
    assert!(next.windows(2).all(|pair| pair[1] - pair[0] == 2000), "{next:?}");
    assert_eq!(made["schedule"]["origin"]["face"], "schedule");
    let (status, taken) = server
        .post("/api/schedules", json!({"name": "tidy", "cron": "* * * * *", "task": task}))
        .await;
    assert_eq!((status, taken["error"]["code"].as_str()), (409, Some("exists")), "{taken}");

    // The first run starts, and its session is the schedule's.
    let first = schedule_when(&server, &mut feed, "/api/schedules/tidy", |view| {
        !runs_of(view, "started").is_empty()
    })
    .await;
    let s1 = runs_of(&first, "started")[0]["session"].as_str().unwrap().to_owned();
    let (_, record) = server.get(&format!("/api/sessions/{s1}")).await;
    assert_eq!(record["config"]["run"]["kind"], "schedule", "{record}");
    assert_eq!(record["config"]["run"]["name"], "tidy");
    assert_eq!(record["config"]["origin"]["face"], "schedule");

    // While it goes, the next due runs are passed by, never started beside it.
    let skipped = schedule_when(&server, &mut feed, "/api/schedules/tidy", |view| {
        runs_of(view, "skipped").iter().any(|run| run["why"] == "overlap")
    })
    .await;
    assert_eq!(runs_of(&skipped, "started").len(), 1, "{skipped}");

    // It ends; the next due run starts a second session, which answers and ends.
    api.release();
    let second = schedule_when(&server, &mut feed, "/api/schedules/tidy", |view| {
        runs_of(view, "started").len() >= 2
    })
    .await;
    let started = runs_of(&second, "started");
    let s2 = started[1]["session"].as_str().unwrap().to_owned();
    assert_ne!(s1, s2, "a fresh session per run");
    let (_, one) = server.get(&format!("/api/sessions/{s1}")).await;
    assert_eq!(one["state"], "exited", "the first run's CLI ended with its turn: {one}");
    let (_, two) = server.get(&format!("/api/sessions/{s2}")).await;
    let (ended, began) = (one["updated_ms"].as_u64().unwrap(), two["created_ms"].as_u64().unwrap());
    assert!(ended <= began, "no overlap: the first ended at {ended}, the second began at {began}");
    // Between them, only passed-by runs.
    let dues: Vec<u64> = started.iter().map(|run| run["due_ms"].as_u64().unwrap()).collect();
    assert!(dues[1] > dues[0] + 2000, "{second}");
    let mut ws = server.ws(&format!("/api/sessions/{s2}/subscribe?after=0")).await;
    let frames = ws.until(crate::is_result).await;
    assert_eq!(frames.last().unwrap()["event"]["line"]["result"], "second run done");

    // Paused, it runs nothing; removed, it is gone.
    let (status, paused) = server.patch("/api/schedules/tidy", json!({"paused": true})).await;
    assert_eq!((status, paused["schedule"]["paused"].as_bool()), (200, Some(true)), "{paused}");
    assert_eq!(paused["next_ms"], json!([]));
    let (status, _) = server.send(reqwest::Method::DELETE, "/api/schedules/tidy", json!({})).await;
    assert_eq!(status, 204);
    let (status, _) = server.get("/api/schedules/tidy").await;
    assert_eq!(status, 404);
    server.stop().await;
}

/// A request to `/hooks/{name}` with `body`, signed with `secret` (none: unsigned), and a
/// delivery id.
async fn deliver(
    server: &Server,
    name: &str,
    body: &str,
    secret: Option<&str>,
    delivery: &str,
    event: &str,
) -> (u16, Value) {
    let mut request = server
        .client()
        .post(format!("{}/hooks/{name}", server.base))
        .header("content-type", "application/json")
        .header("x-github-delivery", delivery)
        .header("x-github-event", event)
        .body(body.to_owned());
    if let Some(secret) = secret {
        request = request.header("x-hub-signature-256", signature::sign(secret, body.as_bytes()));
    }
    let response = request.send().await.unwrap();
    (response.status().as_u16(), response.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_webhook_starts_its_task_and_a_forged_or_replayed_one_does_not() {
    let api = FakeApi::start(
        Scenario::new().reply(Reply::text("on it").when_prompt("Fix issue #42: Crash on start")),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let server = Server::start(store, &api, &sandbox).await;
    let (status, made) = server
        .post(
            "/api/triggers",
            json!({"name": "issues", "events": ["issues"], "task": {
                "cwd": sandbox.workdir(),
                "prompt": "Fix issue #{{issue.number}}: {{issue.title}}\n{{issue.body?}}",
            }}),
        )
        .await;
    assert_eq!(status, 201, "{made}");
    let secret = made["secret"].as_str().unwrap().to_owned();
    assert!(secret.len() >= 32, "a secret is made: {made}");
    assert_eq!(made["path"], "/hooks/issues");
    let (_, listed) = server.get("/api/triggers").await;
    assert_eq!(listed[0]["trigger"]["secret"], "", "never shown again: {listed}");
    for (body, why) in [
        (
            json!({"name": "claude", "task": {"cwd": sandbox.workdir(), "prompt": "p"}}),
            "the daemon's own",
        ),
        (
            json!({"name": "t2", "task": {"cwd": sandbox.workdir(), "prompt": "{{a b}}"}}),
            "is not a field",
        ),
        (json!({"name": "t3"}), "give task or feedback"),
    ] {
        let (status, refused) = server.post("/api/triggers", body).await;
        assert_eq!(status, 400, "{refused}");
        assert!(refused["error"]["message"].as_str().unwrap().contains(why), "{refused}");
    }

    let payload = json!({"action": "labeled", "issue": {"number": 42, "title": "Crash on start", "body": null}}).to_string();
    // Unsigned, forged (another secret), or signed for another body: refused, nothing runs.
    let (status, refused) = deliver(&server, "issues", &payload, None, "d0", "issues").await;
    assert_eq!(status, 403, "{refused}");
    assert!(refused["error"]["message"].as_str().unwrap().contains("no x-hub-signature-256"));
    let (status, refused) =
        deliver(&server, "issues", &payload, Some("not-the-secret-at-all"), "d0", "issues").await;
    assert_eq!(status, 403, "{refused}");
    assert!(refused["error"]["message"].as_str().unwrap().contains("does not match"));
    let (status, _) = deliver(&server, "nobody", &payload, Some(&secret), "d0", "issues").await;
    assert_eq!(status, 404);
    // A body past 4 MiB is refused before it is read whole, signed or not.
    let huge = format!("{{\"pad\": \"{}\"}}", "x".repeat(4 * 1024 * 1024));
    let (status, refused) = deliver(&server, "issues", &huge, Some(&secret), "d0", "issues").await;
    assert_eq!((status, refused["error"]["code"].as_str()), (413, Some("too_large")), "{refused}");

    // Signed: a session with the templated prompt.
    let mut feed = server.ws("/api/events").await;
    let (status, delivered) =
        deliver(&server, "issues", &payload, Some(&secret), "d1", "issues").await;
    assert_eq!(status, 201, "{delivered}");
    assert_eq!(delivered["outcome"], "started");
    let id = delivered["session"].as_str().unwrap().to_owned();
    let mut ws = server.ws(&format!("/api/sessions/{id}/subscribe?after=0")).await;
    let frames = ws.until(crate::is_result).await;
    assert_eq!(frames.last().unwrap()["event"]["line"]["result"], "on it");
    let (_, record) = server.get(&format!("/api/sessions/{id}")).await;
    assert_eq!(
        record["config"]["run"],
        json!({"kind": "trigger", "name": "issues", "delivery": "d1"})
    );
    assert_eq!(record["config"]["origin"]["face"], "trigger");

    // Replayed: the same delivery id, or the same signed body under a new id, runs nothing.
    for id in ["d1", "d2"] {
        let (status, again) =
            deliver(&server, "issues", &payload, Some(&secret), id, "issues").await;
        assert_eq!((status, again["outcome"].as_str()), (200, Some("duplicate")), "{again}");
    }
    // A payload that does not fit the template: 400, naming the field; an event the trigger
    // does not take: nothing.
    let unfit = json!({"issue": {"title": "no number"}}).to_string();
    let (status, refused) = deliver(&server, "issues", &unfit, Some(&secret), "d3", "issues").await;
    assert_eq!(status, 400, "{refused}");
    assert!(refused["error"]["message"].as_str().unwrap().contains("no issue.number"), "{refused}");
    let push = json!({"ref": "x"}).to_string();
    let (status, ignored) = deliver(&server, "issues", &push, Some(&secret), "d4", "push").await;
    assert_eq!((status, ignored["outcome"].as_str()), (200, Some("ignored")), "{ignored}");
    // A signed body that is not JSON: 400, saying so, and noted as refused.
    let (status, refused) =
        deliver(&server, "issues", "{not json", Some(&secret), "d5", "issues").await;
    assert_eq!(status, 400, "{refused}");
    assert!(refused["error"]["message"].as_str().unwrap().contains("not JSON"), "{refused}");
    let (_, listed) = server.get("/api/triggers").await;
    let outcomes: Vec<&str> = listed[0]["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|run| run["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["refused", "ignored", "refused", "started"], "{listed}");
    // Exactly one session was made.
    let frames = feed.until(|frame| frame["event"] == "session_created").await;
    assert_eq!(frames.iter().filter(|f| f["event"] == "session_created").count(), 1);
    let (_, sessions) = server.get("/api/sessions").await;
    assert_eq!(sessions.as_array().map(Vec::len), Some(1), "{sessions}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_check_run_reaches_the_session_that_made_the_branch() {
    let api = FakeApi::start(
        Scenario::new()
            .reply(Reply::text("made the change").when_prompt("MAKE"))
            .reply(Reply::text("fixed the failing test").when_prompt("2 tests failed")),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let repo = sandbox.workdir();
    std::fs::write(repo.join("a.txt"), "a\n").unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    git(&repo, &["config", "user.name", "Test Person"]);
    git(&repo, &["config", "user.email", "person@example.com"]);
    git(&repo, &["add", "a.txt"]);
    git(&repo, &["commit", "-q", "-m", "base"]);
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let server = Server::start(store, &api, &sandbox).await;
    let (id, mut ws) =
        server.open_session(json!({"cwd": repo, "prompt": "MAKE", "worktree": true})).await;
    ws.until(crate::is_result).await;
    let (_, record) = server.get(&format!("/api/sessions/{id}")).await;
    let branch = record["config"]["worktree"]["branch"].as_str().unwrap().to_owned();
    // The session ends: feedback resumes it.
    let (status, _) =
        server.send(reqwest::Method::DELETE, &format!("/api/sessions/{id}"), json!({})).await;
    assert_eq!(status, 200);

    let (status, made) =
        server.post("/api/triggers", json!({"name": "ci", "feedback": true})).await;
    assert_eq!(status, 201, "{made}");
    let secret = made["secret"].as_str().unwrap().to_owned();
    let head = git(&repo, &["rev-parse", &branch]).trim().to_owned();
    let check_at = |conclusion: &str, branch: &str, sha: &str| {
        json!({
            "action": "completed",
            "check_run": {
                "name": "test", "status": "completed", "conclusion": conclusion, "head_sha": sha,
                "html_url": "https://github.example/o/r/runs/7",
                "output": {"title": "2 tests failed", "summary": "adds::two failed", "text": null},
                "check_suite": {"head_branch": branch}, "pull_requests": [],
            },
        })
        .to_string()
    };
    let check = |conclusion: &str, branch: &str| check_at(conclusion, branch, &head);
    // A check that passed, or a branch no session made: nothing is sent.
    let (status, ignored) =
        deliver(&server, "ci", &check("success", &branch), Some(&secret), "c1", "check_run").await;
    assert_eq!((status, ignored["outcome"].as_str()), (200, Some("ignored")), "{ignored}");
    let (status, ignored) =
        deliver(&server, "ci", &check("failure", "elsewhere"), Some(&secret), "c2", "check_run")
            .await;
    assert_eq!(
        (status, ignored["detail"].as_str()),
        (200, Some("no session made branch elsewhere"))
    );
    // A fork's branch of the same name (its commit is not on the session's branch): nothing.
    let fork = check_at("failure", &branch, &"f".repeat(40));
    let (status, ignored) = deliver(&server, "ci", &fork, Some(&secret), "c0", "check_run").await;
    assert_eq!((status, ignored["outcome"].as_str()), (200, Some("ignored")), "{ignored}");
    assert!(ignored["detail"].as_str().unwrap().contains("is not on branch"), "{ignored}");
    // A failure on its branch: the session is resumed and told, with the failure's text.
    let (status, sent) =
        deliver(&server, "ci", &check("failure", &branch), Some(&secret), "c3", "check_run").await;
    assert_eq!((status, sent["outcome"].as_str()), (200, Some("feedback")), "{sent}");
    assert_eq!(sent["session"], id.as_str(), "the session that made the branch, not a stranger");
    let mut ws = server.ws(&format!("/api/sessions/{id}/subscribe?after=0")).await;
    let frames = ws
        .until(|frame| {
            crate::is_result(frame) && frame["event"]["line"]["result"] == "fixed the failing test"
        })
        .await;
    let told = frames
        .iter()
        .find_map(|frame| {
            let line = &frame["event"]["line"];
            (line["type"] == "user"
                && line["message"]["content"].to_string().contains("2 tests failed"))
            .then(|| line["message"]["content"].to_string())
        })
        .expect("the feedback reached the CLI");
    assert!(told.contains(&format!("failed on branch {branch} (failure)")), "{told}");
    assert!(told.contains("adds::two failed"), "{told}");
    let (_, sessions) = server.get("/api/sessions").await;
    assert_eq!(sessions.as_array().map(Vec::len), Some(1), "no stranger started");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_used_up_window_holds_a_run_until_its_reset_and_the_cap_pauses_the_next() {
    let now_s = switchboard_store::now_ms() / 1000;
    // The reset is two minutes away; once the run is seen held, the daemon's clock is moved
    // past it (the scheduler's clock: the test's, so that no one waits two minutes).
    let resets = now_s + 120;
    let ahead = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let window = |reply: Reply, status: &str, used: &str, resets: u64| {
        reply
            .header("anthropic-ratelimit-unified-status", status)
            .header("anthropic-ratelimit-unified-representative-claim", "five_hour")
            .header("anthropic-ratelimit-unified-reset", resets.to_string())
            .header("anthropic-ratelimit-unified-5h-utilization", used)
            .header("anthropic-ratelimit-unified-5h-reset", resets.to_string())
            .header("anthropic-ratelimit-unified-5h-status", status)
    };
    let api = FakeApi::start(
        Scenario::new()
            // A person's session is told the window is used up.
            .reply(
                window(Reply::text("rate limited"), "rejected", "1.0", resets).when_prompt("HUMAN"),
            )
            // After the reset, the schedule's run: the window is at 62% by its end.
            .reply(
                window(Reply::text("nightly done"), "allowed", "0.62", resets + 18_000)
                    .when_prompt("NIGHTLY"),
            )
            .reply(Reply::text("looking at issue 7").when_prompt("Look at issue #7")),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let clock = {
        let ahead = ahead.clone();
        switchboard_server::schedules::Clock::new(move || {
            switchboard_store::now_ms() + ahead.load(std::sync::atomic::Ordering::SeqCst)
        })
    };
    let server = Server::start_with(store, &api, &sandbox, |config| {
        config.env = sandbox.subscriber_env(&api.base_url()).into_iter().collect();
        config.clock = clock;
    })
    .await;
    let (_, mut ws) =
        server.open_session(json!({"cwd": sandbox.workdir(), "prompt": "HUMAN"})).await;
    ws.until(crate::is_result).await;
    let (_, usage) = server.get("/api/usage").await;
    assert_eq!(usage["windows"][0]["status"], "rejected", "{usage}");

    let mut feed = server.ws("/api/events").await;
    let (status, made) = server
        .post(
            "/api/schedules",
            json!({"name": "nightly", "cron": "* * * * * *", "max_window_utilization": 0.5,
                "task": {"cwd": sandbox.workdir(), "prompt": "NIGHTLY"}}),
        )
        .await;
    assert_eq!(status, 201, "{made}");
    // Held, in the queue, with the time it will start.
    let (_, listed) = {
        let held = schedule_when(&server, &mut feed, "/api/schedules/nightly", |view| {
            view["waiting"].is_object()
        })
        .await;
        assert!(runs_of(&held, "started").is_empty(), "{held}");
        assert_eq!(held["waiting"]["starts_ms"], resets * 1000, "{held}");
        assert!(held["waiting"]["why"].as_str().unwrap().contains("five_hour is used up"));
        server.get("/api/schedules").await
    };
    assert_eq!(listed["queue"][0]["name"], "nightly", "{listed}");
    assert_eq!(listed["queue"][0]["starts_ms"], resets * 1000);
    // A trigger's delivery waits in the queue too.
    let (status, made) = server
        .post(
            "/api/triggers",
            json!({"name": "issues", "task": {"cwd": sandbox.workdir(),
            "prompt": "Look at issue #{{issue.number}}"}}),
        )
        .await;
    assert_eq!(status, 201, "{made}");
    let secret = made["secret"].as_str().unwrap().to_owned();
    let payload = json!({"issue": {"number": 7}}).to_string();
    let (status, queued) =
        deliver(&server, "issues", &payload, Some(&secret), "q1", "issues").await;
    assert_eq!((status, queued["outcome"].as_str()), (200, Some("queued")), "{queued}");
    assert!(queued["detail"].as_str().unwrap().contains("five_hour is used up; it starts at"));
    let (_, listed) = server.get("/api/schedules").await;
    let kinds: Vec<&str> = listed["queue"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| entry["kind"].as_str().unwrap())
        .collect();
    assert!(kinds.contains(&"trigger") && kinds.contains(&"schedule"), "{listed}");
    // The reset comes.
    let to_reset = (resets * 1000 + 1000).saturating_sub(switchboard_store::now_ms());
    ahead.store(to_reset, std::sync::atomic::Ordering::SeqCst);

    // At the reset it runs; its window passes the cap: the run pauses, and the next runs wait
    // for it.
    let started = schedule_when(&server, &mut feed, "/api/schedules/nightly", |view| {
        !runs_of(view, "started").is_empty()
    })
    .await;
    let run = runs_of(&started, "started")[0];
    assert!(run["at_ms"].as_u64().unwrap() >= resets * 1000, "not before the reset: {run}");
    let id = run["session"].as_str().unwrap().to_owned();
    let mut ws = server.ws(&format!("/api/sessions/{id}/subscribe?after=0")).await;
    ws.until(crate::is_result).await;
    let deadline = tokio::time::Instant::now() + WAIT;
    let paused = loop {
        let (_, record) = server.get(&format!("/api/sessions/{id}")).await;
        if record["state"] == "paused" {
            break record;
        }
        let _ = feed.next_by(deadline, &[]).await;
    };
    assert!(
        paused["paused"].as_str().unwrap_or_default().contains("at 62%, at or past the cap of 50%"),
        "{paused}"
    );
    // It waits for a person: the next due runs are passed by, none started beside it.
    let held = schedule_when(&server, &mut feed, "/api/schedules/nightly", |view| {
        runs_of(view, "skipped").iter().any(|run| run["why"] == "overlap")
    })
    .await;
    assert_eq!(runs_of(&held, "started").len(), 1, "the paused run holds the next: {held}");
    // The trigger's run started at the reset too, and answered.
    let deadline = tokio::time::Instant::now() + WAIT;
    let trigger_run = loop {
        let (_, triggers) = server.get("/api/triggers").await;
        let run = triggers[0]["runs"].as_array().unwrap().first().cloned();
        if let Some(run) = run.filter(|run| run["outcome"] == "started") {
            break run;
        }
        let _ = feed.next_by(deadline, &[]).await;
    };
    assert_eq!(trigger_run["detail"], "queued until the usage window allowed it", "{trigger_run}");
    assert!(trigger_run["at_ms"].as_u64().unwrap() >= resets * 1000);
    let id = trigger_run["session"].as_str().unwrap();
    let mut ws = server.ws(&format!("/api/sessions/{id}/subscribe?after=0")).await;
    let frames = ws.until(crate::is_result).await;
    assert_eq!(frames.last().unwrap()["event"]["line"]["result"], "looking at issue 7");
    server.stop().await;
}

/// gRPC speaks schedules as REST does: added (its origin the token's), listed, paused, run now
/// and removed; a read token may list and not add; a bad word is named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_adds_lists_runs_and_removes_schedules() {
    use switchboard_server::grpc::pb;
    let api = FakeApi::start(Scenario::new().reply(Reply::text("ran").when_prompt("GRPC")))
        .await
        .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let server = Server::start(store, &api, &sandbox).await;
    let mut grpc = crate::grpc::client(&server).await;
    let task = pb::CreateSessionRequest {
        cwd: sandbox.workdir().display().to_string(),
        prompt: Some("GRPC".into()),
        ..Default::default()
    };
    let request = pb::AddScheduleRequest {
        name: "hourly".into(),
        cron: Some("0 0 1 1 *".into()),
        task: Some(task.clone()),
        overlap: Some("queue".into()),
        ..Default::default()
    };
    let made = grpc.add_schedule(request.clone()).await.unwrap().into_inner();
    assert_eq!((made.name.as_str(), made.overlap.as_str()), ("hourly", "queue"));
    assert_eq!(made.next_ms.len(), 5);
    assert!(made.created_by.contains("(grpc)"), "{}", made.created_by);
    let taken = grpc.add_schedule(request.clone()).await.unwrap_err();
    assert_eq!(taken.code(), tonic::Code::AlreadyExists, "{taken:?}");
    let bad = pb::AddScheduleRequest { name: "x".into(), overlap: Some("twice".into()), ..request };
    let refused = grpc.add_schedule(bad).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    assert!(refused.message().contains("overlap \"twice\""), "{}", refused.message());

    let session = grpc
        .run_schedule(pb::RunScheduleRequest { name: "hourly".into() })
        .await
        .unwrap()
        .into_inner();
    let listed = grpc.list_schedules(pb::ListSchedulesRequest {}).await.unwrap().into_inner();
    assert_eq!(listed.schedules.len(), 1);
    assert_eq!(listed.schedules[0].runs[0].session.as_deref(), Some(session.id.as_str()));
    let paused = grpc
        .pause_schedule(pb::PauseScheduleRequest { name: "hourly".into(), paused: true })
        .await
        .unwrap()
        .into_inner();
    assert!(paused.paused && paused.next_ms.is_empty());

    let (status, reader) =
        server.post("/api/tokens", json!({"name": "watcher", "scope": "read"})).await;
    assert_eq!(status, 201, "{reader}");
    let mut watcher =
        crate::grpc::client_with(&server, Some(reader["token"].as_str().unwrap())).await;
    assert_eq!(
        watcher
            .list_schedules(pb::ListSchedulesRequest {})
            .await
            .unwrap()
            .into_inner()
            .schedules
            .len(),
        1
    );
    let denied = watcher
        .remove_schedule(pb::RemoveScheduleRequest { name: "hourly".into() })
        .await
        .unwrap_err();
    assert_eq!(denied.code(), tonic::Code::PermissionDenied);
    grpc.remove_schedule(pb::RemoveScheduleRequest { name: "hourly".into() }).await.unwrap();
    let gone =
        grpc.run_schedule(pb::RunScheduleRequest { name: "hourly".into() }).await.unwrap_err();
    assert_eq!(gone.code(), tonic::Code::NotFound, "{gone:?}");
    server.stop().await;
}

/// The Schedules page in a browser (`e2e/schedules.test.mjs`): next runs, the queue with the
/// time a held run starts, each run's outcome linked to its session, pause and resume, the add
/// form; its screenshot is `schedules.png`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_schedules_page_shows_next_runs_the_queue_and_each_runs_outcome() {
    let resets = switchboard_store::now_ms() / 1000 + 3600;
    let api = FakeApi::start(
        Scenario::new()
            .reply(
                Reply::text("rate limited")
                    .when_prompt("HUMAN")
                    .header("anthropic-ratelimit-unified-status", "rejected")
                    .header("anthropic-ratelimit-unified-representative-claim", "five_hour")
                    .header("anthropic-ratelimit-unified-reset", resets.to_string())
                    .header("anthropic-ratelimit-unified-5h-utilization", "1.0")
                    .header("anthropic-ratelimit-unified-5h-reset", resets.to_string())
                    .header("anthropic-ratelimit-unified-5h-status", "rejected"),
            )
            .reply(Reply::text("Tidied the imports.").when_prompt("Tidy")),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let server = Server::start_with(store, &api, &sandbox, |config| {
        config.env = sandbox.subscriber_env(&api.base_url()).into_iter().collect();
    })
    .await;
    let work = sandbox.workdir();
    for body in [
        json!({"name": "tidy", "cron": "0 0 1 1 *", "task": {"cwd": work, "prompt": "Tidy the imports"}}),
        json!({"name": "nightly", "cron": "0 3 * * *", "time_zone": "Europe/Paris", "max_window_utilization": 0.5,
            "task": {"cwd": work, "prompt": "Update the dependencies and run the tests"}}),
    ] {
        let (status, made) = server.post("/api/schedules", body).await;
        assert_eq!(status, 201, "{made}");
    }
    // A run of tidy, now: it answers, and its CLI ends with its turn.
    let (status, run) = server.post("/api/schedules/tidy/run", json!({})).await;
    assert_eq!(status, 201, "{run}");
    let id = run["id"].as_str().unwrap().to_owned();
    let mut ws = server.ws(&format!("/api/sessions/{id}/subscribe?after=0")).await;
    ws.until(crate::is_result).await;
    // A person's session hears the window is used up: the next run of watch waits.
    let (_, mut human) = server.open_session(json!({"cwd": work, "prompt": "HUMAN"})).await;
    human.until(crate::is_result).await;
    let mut feed = server.ws("/api/events").await;
    let (status, made) = server
        .post(
            "/api/schedules",
            json!({"name": "watch", "cron": "*/2 * * * * *",
            "task": {"cwd": work, "prompt": "Watch the logs"}}),
        )
        .await;
    assert_eq!(status, 201, "{made}");
    schedule_when(&server, &mut feed, "/api/schedules/watch", |view| view["waiting"].is_object())
        .await;
    schedule_when(&server, &mut feed, "/api/schedules/tidy", |view| {
        view["sessions"][0]["state"] == "exited"
    })
    .await;
    let (status, _) = server.post("/api/triggers", json!({"name": "ci", "feedback": true})).await;
    assert_eq!(status, 201);

    let (ok, log) = crate::ui::run_script("e2e/schedules.test.mjs", &server.base, &[]).await;
    server.stop().await;
    assert!(ok, "the browser test failed:\n{log}");
}

/// The scheduler by its own clock (paused time: no CLI is needed, the runs' sessions cannot
/// start, and each failure is noted as its run): a schedule every minute is dealt with once a
/// minute, on the minute; after three and a half hours down, an hourly schedule runs its last
/// missed run once (`missed = "run_once"`), another passes it by (`missed = "skip"`), and the
/// book outlives the daemon (its data directory's `schedules.json`).
#[tokio::test(start_paused = true)]
async fn by_its_clock_the_scheduler_runs_each_due_run_once_and_a_missed_run_as_told() {
    use switchboard_server::schedules::{Clock, Missed, Schedule};
    // 2026-11-30T05:59:50Z.
    const T0: u64 = 1_796_018_390_000;
    const HOUR: u64 = 3_600_000;
    let data = tempfile::tempdir().unwrap();
    let open = |start_ms: u64| {
        let config = switchboard_server::DaemonConfig {
            claude: Some("/nonexistent/claude".into()),
            data_dir: Some(data.path().to_owned()),
            clock: Clock::tokio(start_ms),
            ..Default::default()
        };
        switchboard_server::Daemon::open(Arc::new(MemoryStore::new()), config)
    };
    let daemon = open(T0).await.unwrap();
    let schedule = |name: &str, cron: &str, missed: Missed| {
        let mut task = switchboard_server::CreateSession::new("/tmp");
        task.prompt = Some("never runs".into());
        let value = json!({"name": name, "cron": cron, "task": task});
        let mut schedule: Schedule = serde_json::from_value(value).unwrap();
        schedule.missed = missed;
        schedule.created_ms = T0;
        schedule.created_by = "test".into();
        schedule
    };
    for (name, cron, missed) in [
        ("minutely", "0 * * * * *", Missed::RunOnce),
        ("hourly-once", "0 0 * * * *", Missed::RunOnce),
        ("hourly-skip", "0 0 * * * *", Missed::Skip),
    ] {
        daemon.books().add_schedule(schedule(name, cron, missed), daemon.clock_ms()).await.unwrap();
    }
    // A one-time schedule, by the daemon's clock (the machine's is hours past it): a moment
    // before the clock's is refused, one after it runs once.
    let at = |name: &str, at: &str| {
        let mut schedule = schedule(name, "* * * * *", Missed::Skip);
        schedule.cron = None;
        schedule.at = Some(at.parse().unwrap());
        schedule
    };
    let passed = daemon.books().add_schedule(at("once", "2026-11-30T05:59:00Z"), daemon.clock_ms());
    assert!(passed.await.unwrap_err().contains("has passed"));
    daemon
        .books()
        .add_schedule(at("once", "2026-11-30T06:01:05Z"), daemon.clock_ms())
        .await
        .unwrap();
    // Two minutes and a half go by.
    tokio::time::sleep(std::time::Duration::from_millis(150_000)).await;
    let book = daemon.books().get();
    let dues = |name: &str| -> Vec<u64> {
        book.schedules[name].state.runs.iter().map(|run| run.due_ms).collect()
    };
    let minute = 60_000;
    assert_eq!(dues("minutely"), [T0 + 10_000, T0 + 10_000 + minute, T0 + 10_000 + 2 * minute]);
    assert_eq!(dues("hourly-once"), [T0 + 10_000]);
    assert_eq!(dues("once"), [T0 + 75_000]);
    let run = &book.schedules["minutely"].state.runs[0];
    let json = serde_json::to_value(run).unwrap();
    assert_eq!(json["outcome"], "failed", "{json}");
    assert!(json["error"].as_str().unwrap().contains("/nonexistent/claude"), "{json}");
    daemon.stop_all().await;
    drop(daemon);

    // Back three and a half hours later.
    let back = T0 + 10_000 + 3 * HOUR + HOUR / 2;
    let daemon = open(back).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(2_000)).await;
    let book = daemon.books().get();
    let last = T0 + 10_000 + 3 * HOUR;
    let once = &book.schedules["hourly-once"].state.runs;
    assert_eq!(once.iter().map(|run| run.due_ms).collect::<Vec<_>>(), [T0 + 10_000, last]);
    let skip = &book.schedules["hourly-skip"].state.runs;
    assert_eq!(skip.len(), 2, "{skip:?}");
    let skipped = serde_json::to_value(&skip[1]).unwrap();
    assert_eq!(
        (skipped["due_ms"].as_u64(), skipped["outcome"].as_str(), skipped["why"].as_str()),
        (Some(last), Some("skipped"), Some("missed")),
        "{skipped}"
    );
    assert_eq!(book.schedules["once"].state.runs.len(), 1, "a one-time schedule ran once");
    // The minutely schedule's last minute was on time: it ran, once.
    let minutely = &book.schedules["minutely"].state.runs;
    assert_eq!(minutely.len(), 4, "three before, one on return: {minutely:?}");
    daemon.stop_all().await;
}

/// Who may change what: a token with a ceiling changes only the schedules and triggers made
/// under its ceiling (a run starts as its maker, with the maker's reach), and a revoked token's
/// schedules and triggers are paused (they would start sessions as it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ceiling_token_changes_only_its_own_and_a_revoked_tokens_work_is_paused() {
    let api = FakeApi::start(Scenario::new()).await.unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let server = Server::start(store, &api, &sandbox).await;
    let ceiling = "[permissions]\nallow = [\"Read\"]\ndefault = \"ask\"\n";
    let (status, agent) = server
        .post("/api/tokens", json!({"name": "agent", "scope": "operate", "ceiling": ceiling}))
        .await;
    assert_eq!(status, 201, "{agent}");
    let agent = agent["token"].as_str().unwrap().to_owned();
    let (status, ci) = server.post("/api/tokens", json!({"name": "ci", "scope": "operate"})).await;
    assert_eq!(status, 201, "{ci}");
    let ci = ci["token"].as_str().unwrap().to_owned();
    let task = json!({"cwd": sandbox.workdir(), "prompt": "p"});
    let add = |name: &str| json!({"name": name, "cron": "0 0 1 1 *", "task": task});
    assert_eq!(server.post("/api/schedules", add("admins")).await.0, 201);
    let (status, _) = server
        .request_as(&agent, reqwest::Method::POST, "/api/schedules", Some(add("agents")))
        .await;
    assert_eq!(status, 201);
    let (status, made) = server
        .request_as(
            &ci,
            reqwest::Method::POST,
            "/api/triggers",
            Some(json!({"name": "ci-hook", "feedback": true})),
        )
        .await;
    assert_eq!(status, 201, "{made}");
    // The agent's token: its own schedule, yes; the admin's, no, on every route.
    let pause = Some(json!({"paused": true}));
    let (status, _) = server
        .request_as(&agent, reqwest::Method::PATCH, "/api/schedules/agents", pause.clone())
        .await;
    assert_eq!(status, 200);
    for (method, path, body) in [
        (reqwest::Method::PATCH, "/api/schedules/admins", pause.clone()),
        (reqwest::Method::DELETE, "/api/schedules/admins", None),
        (reqwest::Method::POST, "/api/schedules/admins/run", Some(json!({}))),
        (reqwest::Method::DELETE, "/api/triggers/ci-hook", None),
    ] {
        let (status, refused) = server.request_as(&agent, method.clone(), path, body).await;
        assert_eq!(status, 403, "{method} {path}: {refused}");
        let message = refused["error"]["message"].as_str().unwrap();
        assert!(message.contains("made under its ceiling"), "{message}");
    }
    // Revoked: ci's trigger is paused.
    let (status, _) = server.send(reqwest::Method::DELETE, "/api/tokens/ci", json!({})).await;
    assert_eq!(status, 200);
    let (_, triggers) = server.get("/api/triggers").await;
    assert_eq!(triggers[0]["trigger"]["paused"], true, "{triggers}");
    let (_, admins) = server.get("/api/schedules/admins").await;
    assert_eq!(admins["schedule"]["paused"], false, "the others' are not");
    server.stop().await;
}

/// A node lost between starting a run's session and noting it in the book leaves a claim that
/// lapses: the node that takes the run over finds the session the lost node started for that
/// due time and notes it as the run's, rather than starting the run again. (Paused time; two
/// nodes' book in one store; no CLI is needed, as nothing is started.)
#[tokio::test(start_paused = true)]
async fn a_run_a_lost_node_started_is_adopted_not_run_again() {
    use switchboard_server::schedules::{Claim, Clock, Schedule};
    // 2026-11-30T05:59:50Z: the hourly run is due at 06:00.
    const T0: u64 = 1_796_018_390_000;
    let due = T0 + 10_000;
    let shared = Arc::new(MemoryStore::new());
    let store: Arc<dyn Store> = shared.clone();
    let config = switchboard_server::DaemonConfig {
        claude: Some("/nonexistent/claude".into()),
        node: Some("a".into()),
        budget: switchboard_server::budget::BudgetConfig {
            shared: Some(shared.clone()),
            ..Default::default()
        },
        clock: Clock::tokio(T0),
        ..Default::default()
    };
    let daemon = switchboard_server::Daemon::open(store.clone(), config).await.unwrap();
    let mut task = switchboard_server::CreateSession::new("/tmp");
    task.prompt = Some("hourly".into());
    let value = json!({"name": "hourly", "cron": "0 0 * * * *", "task": task});
    let mut schedule: Schedule = serde_json::from_value(value).unwrap();
    schedule.created_ms = T0 - 3_600_000;
    schedule.created_by = "test".into();
    daemon.books().add_schedule(schedule, daemon.clock_ms()).await.unwrap();
    // Node b claimed the 06:00 run, started its session, and was lost before it noted it.
    daemon
        .books()
        .change_schedule("hourly", |entry| {
            entry.state.last_due_ms = Some(due - 3_600_000);
            entry.state.claim = Some(Claim { due_ms: due, node: "b".into(), until_ms: due + 1000 });
            Ok(())
        })
        .await
        .unwrap();
    let launch = switchboard_store::Launch {
        cwd: "/tmp".into(),
        run: Some(switchboard_store::RunOf {
            kind: switchboard_store::RunKind::Schedule,
            name: "hourly".into(),
            due_ms: Some(due),
            delivery: None,
        }),
        ..Default::default()
    };
    store
        .create_session(&switchboard_store::SessionRecord {
            archived: false,
            node: Some("b".into()),
            id: "started-by-b".into(),
            claude_session_id: None,
            cwd: "/tmp".into(),
            model: None,
            permission_mode: None,
            state: switchboard_store::RecordState::Exited,
            title: None,
            cost_usd: 0.0,
            spent_usd: 0.0,
            created_ms: due,
            updated_ms: due,
            launch,
        })
        .await
        .unwrap();
    // Until b's claim lapses, node a waits; then it takes the run over, and adopts b's session.
    tokio::time::sleep(std::time::Duration::from_millis(9_000)).await;
    assert!(daemon.books().get().schedules["hourly"].state.runs.is_empty(), "b's claim holds");
    tokio::time::sleep(std::time::Duration::from_millis(4_000)).await;
    let state = daemon.books().get().schedules["hourly"].state.clone();
    assert_eq!(state.runs.len(), 1, "{state:?}");
    let run = serde_json::to_value(&state.runs[0]).unwrap();
    assert_eq!(
        (run["outcome"].as_str(), run["session"].as_str()),
        (Some("started"), Some("started-by-b")),
        "{run}"
    );
    assert_eq!(run["due_ms"], due);
    assert_eq!(state.last_session(), Some("started-by-b"));
    daemon.stop_all().await;
}
