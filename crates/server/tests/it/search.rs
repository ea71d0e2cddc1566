//! Search and blame with the real CLI over fifty sessions recorded here: notes written, a deploy
//! script edited and read, worktree sessions that ran `rm`, files written by shell redirects,
//! a nightly schedule whose `rm` the policy denies, calls a person denies, and questions
//! answered, in two projects and two models. Each of the questions docs/search.md starts with
//! is asked and answered; blame finds the session of a line written by Edit, by Write and by a
//! shell redirect (in a worktree too); the web UI's Search page finds and opens hits in a
//! browser, and Review says who wrote a line; then the index is removed under the daemon, rebuilt from the log at the next start,
//! and answers the same.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use serde_json::{json, Value};
use switchboard_store::{SqliteStore, Store};
use switchboard_testkit::{git, CliSandbox, FakeApi, Reply, Scenario};

use crate::{Server, WAIT};

const ALLOW_ALL: &str = "[permissions]\ndefault = \"allow\"\nallow = [\"*\"]";
const NO_RM: &str = "[permissions]\ndefault = \"allow\"\nallow = [\"*\"]\ndeny = [\"Bash(rm:*)\"]";
const ASK_BASH: &str = "[permissions]\ndefault = \"allow\"\nask = [\"Bash\"]";

/// The fake model's script: one reply per session's prompt, the edits' following their reads.
fn scenario(alpha: &Path) -> Scenario {
    let alpha = alpha.display();
    let mut scenario = Scenario::new().fallback("Done.");
    for n in 0..10 {
        scenario = scenario.reply(
            Reply::tool_use(
                "Write",
                json!({"file_path": format!("{alpha}/notes/n{n}.md"),
                       "content": format!("# Note {n}\nthe release train {n} leaves on Tuesday\n")}),
            )
            .when_prompt(format!("NOTE-{n} ")),
        );
    }
    for n in 1..=5 {
        scenario = scenario
            .reply(
                Reply::tool_use("Read", json!({"file_path": format!("{alpha}/deploy.sh")}))
                    .when_prompt(format!("DEPLOY-{n} ")),
            )
            .reply(
                Reply::tool_use(
                    "Edit",
                    json!({"file_path": format!("{alpha}/deploy.sh"),
                           "old_string": format!("# v{}", n - 1),
                           "new_string": format!("# v{n}\necho deployed by edit {n}")}),
                )
                .when_tool_result_contains(format!("# v{}", n - 1)),
            );
    }
    for n in 0..5 {
        scenario = scenario
            .reply(
                Reply::tool_use("Bash", json!({"command": format!("cat {alpha}/deploy.sh")}))
                    .when_prompt(format!("SHOW-{n} ")),
            )
            .reply(
                Reply::tool_use(
                    "Bash",
                    json!({"command": format!("mkdir -p build && rm -f build/stale-{n}.log && printf 'cleaned by run {n}\\n' > CLEANED-{n}.txt")}),
                )
                .when_prompt(format!("CLEAN-{n} ")),
            )
            .reply(
                Reply::tool_use(
                    "Bash",
                    json!({"command": format!("mkdir -p gen && printf 'generated line {n}\\n' > gen/g{n}.txt")}),
                )
                .when_prompt(format!("GEN-{n} ")),
            )
            .reply(
                Reply::tool_use("Bash", json!({"command": format!("git push origin main --tags-{n}")}))
                    .when_prompt(format!("ASK-{n} ")),
            );
    }
    for n in 0..10 {
        scenario = scenario.reply(
            Reply::text(format!("The capital of Freedonia-{n} is Fredville, on the river."))
                .when_prompt(format!("QUESTION-{n} ")),
        );
    }
    scenario.reply(
        Reply::tool_use("Bash", json!({"command": "rm -rf tmp-cache"}))
            .when_prompt("NIGHTLY")
            .times(5),
    )
}

/// Runs a session to the end of its first turn, then stops it; its id.
async fn run_one(server: &Server, body: Value) -> String {
    let (id, mut ws) = server.open_session(body).await;
    ws.until(crate::is_result).await;
    stop(server, &id).await;
    id
}

async fn stop(server: &Server, id: &str) {
    let (status, stopped) =
        server.send(reqwest::Method::DELETE, &format!("/api/sessions/{id}"), json!({})).await;
    assert!((200..300).contains(&status), "{stopped}");
}

/// `GET /api/search?q=` (escaped), answered 200.
async fn search(server: &Server, query: &str) -> Value {
    let mut escaped = String::new();
    for byte in query.bytes() {
        if byte.is_ascii_alphanumeric() {
            escaped.push(byte as char);
        } else {
            escaped.push_str(&format!("%{byte:02X}"));
        }
    }
    let (status, answer) = server.get(&format!("/api/search?q={escaped}&limit=1000")).await;
    assert_eq!(status, 200, "{query}: {answer}");
    answer
}

/// The sessions of a search's hits.
async fn sessions_of(server: &Server, query: &str) -> BTreeSet<String> {
    let answer = search(server, query).await;
    answer["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|hit| hit["session_id"].as_str().unwrap().to_owned())
        .collect()
}

fn set(ids: &[String]) -> BTreeSet<String> {
    ids.iter().cloned().collect()
}

/// `GET /api/blame` for `line` of `path` (absolute), with the file's `tail` in its repository.
async fn blame(server: &Server, path: &Path, line: &str, tail: &str) -> Value {
    let escape = |text: &str| {
        text.bytes()
            .map(|byte| {
                if byte.is_ascii_alphanumeric() {
                    (byte as char).to_string()
                } else {
                    format!("%{byte:02X}")
                }
            })
            .collect::<String>()
    };
    let (status, answer) = server
        .get(&format!(
            "/api/blame?path={}&line={}&tail={}",
            escape(&path.display().to_string()),
            escape(line),
            escape(tail)
        ))
        .await;
    assert_eq!(status, 200, "{answer}");
    answer["found"].clone()
}

/// The answers the questions get, to compare before and after a rebuild.
async fn answers(server: &Server) -> Vec<Value> {
    let mut answers = Vec::new();
    for query in [
        "file:deploy.sh since:7d group:session",
        "decision:deny schedule:nightly group:session",
        "command:rm worktree:yes group:session",
        "kind:turn since:30d group:project",
        "Fredville group:session",
        "by:person decision:deny group:session",
    ] {
        let mut answer = search(server, query).await;
        answer.as_object_mut().unwrap().remove("behind");
        answers.push(answer);
    }
    answers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_answers_the_questions_over_fifty_real_sessions_and_blame_finds_the_writer() {
    let sandbox = CliSandbox::new().unwrap();
    let alpha = sandbox.workdir().join("alpha");
    let beta = sandbox.workdir().join("beta");
    std::fs::create_dir_all(&alpha).unwrap();
    std::fs::create_dir_all(&beta).unwrap();
    std::fs::write(alpha.join("deploy.sh"), "#!/bin/sh\n# v0\necho deploy\n").unwrap();
    git(&alpha, &["init", "-q", "-b", "main"]);
    git(&alpha, &["add", "."]);
    git(&alpha, &["commit", "-q", "-m", "first"]);
    let api = FakeApi::start(scenario(&alpha)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let database = dir.path().join("db");
    let sqlite = Arc::new(SqliteStore::open(&database).unwrap());
    let store: Arc<dyn Store> = sqlite.clone();
    let server = Server::start(store, &api, &sandbox).await;
    let session = |cwd: &Path, prompt: String, policy: &str| json!({"cwd": cwd, "prompt": prompt, "policy": policy});

    // Notes written, shell redirects and questions: five sessions at a time.
    let mut notes = vec![String::new(); 10];
    let mut generated = Vec::new();
    let mut questions = Vec::new();
    let mut sonnets = Vec::new();
    for n in 0..5 {
        let batch = futures::future::join_all([
            run_one(&server, session(&alpha, format!("NOTE-{n} please"), ALLOW_ALL)),
            run_one(&server, session(&alpha, format!("NOTE-{} please", n + 5), ALLOW_ALL)),
            run_one(&server, session(&alpha, format!("GEN-{n} please"), ALLOW_ALL)),
            run_one(&server, session(&beta, format!("QUESTION-{n} please"), ALLOW_ALL)),
            run_one(
                &server,
                json!({"cwd": beta, "prompt": format!("QUESTION-{} please", n + 5),
                       "policy": ALLOW_ALL, "model": "claude-sonnet-4-5"}),
            ),
        ])
        .await;
        notes[n].clone_from(&batch[0]);
        notes[n + 5].clone_from(&batch[1]);
        generated.push(batch[2].clone());
        questions.extend([batch[3].clone(), batch[4].clone()]);
        sonnets.push(batch[4].clone());
    }
    // The deploy script edited five times in turn (each edit follows the read of the one
    // before: no other session's tool result may hold its marker meanwhile), beside worktree
    // sessions that remove a file and write one.
    let mut edits = Vec::new();
    let mut cleans = Vec::new();
    for n in 1..=5 {
        let batch = futures::future::join_all([
            run_one(&server, session(&alpha, format!("DEPLOY-{n} please"), ALLOW_ALL)),
            run_one(
                &server,
                json!({"cwd": alpha, "prompt": format!("CLEAN-{} please", n - 1),
                       "policy": ALLOW_ALL, "worktree": true}),
            ),
        ])
        .await;
        edits.push(batch[0].clone());
        cleans.push(batch[1].clone());
    }
    let deploy = std::fs::read_to_string(alpha.join("deploy.sh")).unwrap();
    assert!(deploy.contains("echo deployed by edit 5"), "{deploy}");
    // Then the script read from the other project (after the edits: what it shows holds an
    // edit's marker).
    let reads = futures::future::join_all(
        (0..5).map(|n| run_one(&server, session(&beta, format!("SHOW-{n} please"), ALLOW_ALL))),
    )
    .await;
    // A person denies a push, five times.
    let mut asked = Vec::new();
    for n in 0..5 {
        let (id, mut ws) =
            server.open_session(session(&alpha, format!("ASK-{n} please"), ASK_BASH)).await;
        let frames = ws.until(|frame| frame["event"]["event"] == "permission_requested").await;
        let request = frames.last().unwrap()["event"]["request_id"].as_str().unwrap().to_owned();
        let (status, answered) = server
            .post(
                &format!("/api/sessions/{id}/permissions/{request}"),
                json!({"behavior": "deny", "message": "not from here"}),
            )
            .await;
        assert_eq!(status, 200, "{answered}");
        ws.until(crate::is_result).await;
        stop(&server, &id).await;
        asked.push(id);
    }
    // The nightly schedule's five runs, whose `rm` the policy denies.
    let (status, made) = server
        .post(
            "/api/schedules",
            json!({"name": "nightly", "cron": "0 3 * * *",
                   "task": {"cwd": alpha, "prompt": "NIGHTLY tidy", "policy": NO_RM}}),
        )
        .await;
    assert_eq!(status, 201, "{made}");
    let mut nightly = Vec::new();
    for _ in 0..5 {
        let (status, run) = server.post("/api/schedules/nightly/run", json!({})).await;
        assert_eq!(status, 201, "{run}");
        let id = run["id"].as_str().unwrap().to_owned();
        let mut ws = server.ws(&format!("/api/sessions/{id}/subscribe?after=0")).await;
        ws.until(crate::is_result).await;
        stop(&server, &id).await;
        nightly.push(id);
    }
    let all: Vec<String> =
        [&notes, &generated, &questions, &edits, &reads, &cleans, &asked, &nightly]
            .into_iter()
            .flatten()
            .cloned()
            .collect();
    assert_eq!(set(&all).len(), 50, "fifty sessions");
    tokio::time::timeout(WAIT, server.daemon.search_settled()).await.expect("the index settles");

    // Which session touched deploy.sh last week: the edits and the reads; which wrote it: the
    // edits, the last one first.
    let touched = sessions_of(&server, "file:deploy.sh since:7d").await;
    assert_eq!(touched, set(&[edits.clone(), reads.clone()].concat()));
    let wrote = search(&server, "wrote:deploy.sh").await;
    assert_eq!(wrote["hits"][0]["session_id"], edits[4].as_str(), "{wrote}");
    assert_eq!(wrote["hits"][0]["tool"], "Edit");
    assert_eq!(sessions_of(&server, "wrote:alpha/deploy.sh").await, set(&edits));
    // Which denied calls came from the nightly schedule: its five runs' rm, by the policy.
    let denied = search(&server, "decision:deny schedule:nightly").await;
    let hits = denied["hits"].as_array().unwrap();
    assert_eq!(hits.len(), 5, "{denied}");
    assert!(
        hits.iter().all(|hit| hit["decided_by"] == "policy"
            && hit["command"] == "rm -rf tmp-cache"
            && hit["origin"] == "schedule"
            && hit["run"] == "schedule:nightly"),
        "{denied}"
    );
    assert_eq!(sessions_of(&server, "decision:deny run:schedule").await, set(&nightly));
    // What ran rm in a worktree: the cleaning sessions (the nightly rm ran in none).
    assert_eq!(sessions_of(&server, "command:rm worktree:yes").await, set(&cleans));
    assert_eq!(
        sessions_of(&server, "command:rm kind:call").await,
        set(&[cleans.clone(), nightly.clone()].concat())
    );
    // What the agents cost per project: each project's turns add up to what its sessions spent.
    let groups = search(&server, "kind:turn since:30d group:project").await;
    let groups = groups["groups"].as_array().unwrap().clone();
    assert_eq!(groups.len(), 2, "{groups:?}");
    let (_, listed) = server.get("/api/sessions").await;
    for group in &groups {
        let project = group["key"].as_str().unwrap();
        let spent: f64 = listed
            .as_array()
            .unwrap_or_else(|| panic!("{listed}"))
            .iter()
            .filter(|record| {
                let repo = record["config"]["worktree"]["repo"].as_str();
                repo.unwrap_or(record["cwd"].as_str().unwrap()) == project
            })
            .map(|record| record["spent_usd"].as_f64().unwrap())
            .sum();
        assert!(spent > 0.0, "{project}");
        assert!(
            (group["cost_usd"].as_f64().unwrap() - spent).abs() < 1e-9,
            "{group} against {spent}"
        );
    }
    let alpha_turns =
        groups.iter().find(|group| group["key"] == alpha.display().to_string()).unwrap();
    assert_eq!(alpha_turns["entries"], 35, "{groups:?}");
    // Who denied what, words in answers, a model, a prompt, pages.
    assert_eq!(sessions_of(&server, "decision:ask").await, set(&asked), "a person was asked");
    let by_person = search(&server, "by:person who:admin decision:denied").await;
    assert_eq!(by_person["hits"].as_array().unwrap().len(), 5, "{by_person}");
    assert!(by_person["hits"][0]["text"].as_str().unwrap().contains("not from here"));
    assert_eq!(sessions_of(&server, "Fredville kind:answer").await, set(&questions));
    assert_eq!(sessions_of(&server, "\"capital of Freedonia-3\"").await.len(), 1);
    let models = search(&server, "kind:turn group:model").await;
    let sonnet = models["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|group| group["key"].as_str().is_some_and(|key| key.contains("sonnet")))
        .unwrap_or_else(|| panic!("{models}"))
        .clone();
    assert_eq!(sonnet["entries"], 5, "{models}");
    let query = format!("model:{} kind:turn", sonnet["key"].as_str().unwrap());
    assert_eq!(sessions_of(&server, &query).await, set(&sonnets));
    assert_eq!(
        sessions_of(&server, &format!("project:{} kind:prompt", beta.display())).await.len(),
        15
    );
    let mut seen = BTreeSet::new();
    let mut before = String::new();
    loop {
        let (status, page) =
            server.get(&format!("/api/search?q=kind%3Acall&limit=7&before={before}")).await;
        assert_eq!(status, 200, "{page}");
        for hit in page["hits"].as_array().unwrap() {
            assert!(seen.insert(hit["id"].as_u64().unwrap()), "a hit twice: {hit}");
        }
        match page["next"].as_str() {
            Some(next) => before = next.to_owned(),
            None => break,
        }
    }
    // Every session's calls: 10 writes, 5 reads and 5 edits, 25 shell commands, 5 pushes asked.
    assert_eq!(seen.len(), 10 + 10 + 5 + 5 + 5 + 5 + 5, "{seen:?}");
    // The same over gRPC.
    let mut grpc = crate::grpc::client(&server).await;
    let found = grpc
        .search(switchboard_server::grpc::pb::SearchRequest {
            query: "decision:deny schedule:nightly".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(found.hits.len(), 5);
    assert!(found.hits.iter().all(|hit| hit.origin.as_deref() == Some("schedule")));
    // A query that does not read is a 400 that names the problem; no token, no search.
    let (status, refused) = server.get("/api/search?q=colour%3Ared").await;
    assert_eq!(status, 400, "{refused}");
    assert!(refused["error"]["message"].as_str().unwrap().contains("colour:"), "{refused}");
    let (status, _) =
        server.request_as("nobody", reqwest::Method::GET, "/api/search?q=x", None).await;
    assert_eq!(status, 401);

    // Blame: a line an Edit wrote, a line a Write wrote, a line a shell redirect wrote, a line
    // a worktree session wrote (found by its path in the repository), and one nobody wrote.
    let found =
        blame(&server, &alpha.join("deploy.sh"), "echo deployed by edit 3", "deploy.sh").await;
    assert_eq!(found["call"]["session_id"], edits[2].as_str(), "{found}");
    assert_eq!(found["call"]["tool"], "Edit");
    assert!(found["prompt"]["text"].as_str().unwrap().contains("DEPLOY-3"), "{found}");
    let found =
        blame(&server, &alpha.join("notes/n7.md"), "the release train 7 leaves on Tuesday", "")
            .await;
    assert_eq!(
        (found["call"]["session_id"].as_str(), found["call"]["tool"].as_str()),
        (Some(notes[7].as_str()), Some("Write")),
        "{found}"
    );
    let found = blame(&server, &alpha.join("gen/g2.txt"), "generated line 2", "gen/g2.txt").await;
    assert_eq!(
        (found["call"]["session_id"].as_str(), found["call"]["tool"].as_str()),
        (Some(generated[2].as_str()), Some("Bash")),
        "{found}"
    );
    let found =
        blame(&server, &alpha.join("CLEANED-1.txt"), "cleaned by run 1", "CLEANED-1.txt").await;
    assert_eq!(found["call"]["session_id"], cleans[1].as_str(), "{found}");
    assert_eq!(
        blame(&server, &alpha.join("deploy.sh"), "echo deploy", "deploy.sh").await,
        Value::Null,
        "a line no session wrote"
    );
    // A clone elsewhere: the file at the top of its repository, found in the call's own
    // project by its name; a line of a file no session wrote in that project finds nothing.
    let found =
        blame(&server, Path::new("/elsewhere/deploy.sh"), "echo deployed by edit 3", "deploy.sh")
            .await;
    assert_eq!(found["call"]["session_id"], edits[2].as_str(), "{found}");
    assert_eq!(
        blame(
            &server,
            Path::new("/elsewhere/n7.md"),
            "the release train 7 leaves on Tuesday",
            "n7.md"
        )
        .await,
        Value::Null,
        "notes/n7.md is not the top-level n7.md"
    );
    let (status, long) = server.get(&format!("/api/blame?path=/{}&line=x", "a".repeat(5000))).await;
    assert_eq!(status, 400, "{long}");
    let (status, blank) = server
        .get(&format!("/api/blame?path={}&line=%20", alpha.join("deploy.sh").display()))
        .await;
    assert_eq!(status, 400, "{blank}");

    // The web UI's Search page, in a browser.
    let (ok, log) = crate::ui::run_script(
        "e2e/search.test.mjs",
        &server.base,
        &[("REVIEW_SESSION", edits[4].clone())],
    )
    .await;
    assert!(ok, "the Search page's browser test failed:\n{log}");

    // The index removed under the daemon: the next start reads it again from the log.
    let before = answers(&server).await;
    server.stop().await;
    // As the old process's exit would: its store is closed (the journal folded, the lock let
    // go).
    sqlite.close();
    {
        let connection = rusqlite::Connection::open(&database).unwrap();
        connection
            .execute_batch(
                "DELETE FROM search_words; DELETE FROM search_paths; DELETE FROM search_entries;
                 DELETE FROM search_marks;",
            )
            .unwrap();
    }
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&database).unwrap());
    let server = Server::start(store, &api, &sandbox).await;
    tokio::time::timeout(WAIT, server.daemon.search_settled()).await.expect("the rebuild ends");
    assert_eq!(answers(&server).await, before);
    assert_eq!(search(&server, "Fredville").await["behind"], 0);
    server.stop().await;
}
