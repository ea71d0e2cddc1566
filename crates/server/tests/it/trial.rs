//! Dry runs of a policy over recorded sessions, with the real CLI and the fake API: 50
//! sessions are recorded (ten tool calls, each started five ways: the daemon's token, a person
//! at the web UI, a token of its own, a trigger, and in another directory), then a candidate
//! policy (`tests/fixtures/policy-trial/candidate.toml`) is replayed over them through
//! `POST /api/policy/test`, and every call's count and cell is held against the replay done by
//! hand (`tests/fixtures/policy-trial/expected.tsv`); then the same in the web UI's dry-run
//! page, in a browser (`e2e/policy.test.mjs`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{json, Value};
use switchboard_server::schedules::signature;
use switchboard_session::Policy;
use switchboard_store::{MemoryStore, Store};
use switchboard_testkit::{CliSandbox, FakeApi, Reply, Scenario};

use crate::{Server, TOKEN};

/// The policy the sessions are recorded under.
const RECORDING: &str = r#"
[permissions]
allow = ["Bash(echo:*)", "Read"]
deny = ["Bash(rm:*)"]
ask = ["Bash(touch:*)", "Bash(git push:*)"]
default = "ask"
"#;

const VARIANTS: [&str; 5] = ["admin", "person", "ci", "trigger", "sub"];

/// One row of the replay done by hand.
#[derive(Debug, Clone)]
struct Expected {
    command: String,
    tool: String,
    summary: String,
    outcome: String,
    /// For variants but `trigger`, and for `trigger`.
    candidate: [(String, String); 2],
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/policy-trial").join(name)
}

fn expected() -> Vec<Expected> {
    let text = std::fs::read_to_string(fixture("expected.tsv")).unwrap();
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .map(|line| {
            let cells: Vec<&str> = line.split('\t').collect();
            let plain = (cells[4].to_owned(), cells[5].to_owned());
            let trigger = match (cells.get(6), cells.get(7)) {
                (Some(behavior), Some(rule)) => ((*behavior).to_owned(), (*rule).to_owned()),
                _ => plain.clone(),
            };
            Expected {
                command: cells[0].to_owned(),
                tool: cells[1].to_owned(),
                summary: cells[2].to_owned(),
                outcome: cells[3].to_owned(),
                candidate: [plain, trigger],
            }
        })
        .collect()
}

/// The tool call command `row` makes in a session whose directory is `cwd`.
fn call_of(row: &Expected, cwd: &Path) -> (String, Value) {
    match row.tool.as_str() {
        "Read" => ("Read".into(), json!({"file_path": cwd.join(&row.summary)})),
        _ => ("Bash".into(), json!({"command": row.summary, "description": "step"})),
    }
}

fn prompt(command: &str, variant: &str) -> String {
    format!("RUN {command} {variant} now")
}

/// Starts one session of `variant` that asks for `command`; its id.
async fn start(
    server: &Server,
    variant: &str,
    command: &str,
    cwd: &Path,
    ci: &str,
    secret: &str,
) -> String {
    let body = json!({"cwd": cwd, "prompt": prompt(command, variant)});
    let answer: Value = match variant {
        "person" => server
            .client()
            .post(format!("{}/api/sessions", server.base))
            .header("cookie", format!("switchboard_token={TOKEN}"))
            .header("origin", &server.base)
            .json(&body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap(),
        "ci" => server.request_as(ci, reqwest::Method::POST, "/api/sessions", Some(body)).await.1,
        "trigger" => {
            let payload = json!({"command": command}).to_string();
            server
                .client()
                .post(format!("{}/hooks/runs", server.base))
                .header("content-type", "application/json")
                .header("x-github-delivery", format!("d-{command}"))
                .header("x-github-event", "workflow_dispatch")
                .header("x-hub-signature-256", signature::sign(secret, payload.as_bytes()))
                .body(payload)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap()
        }
        _ => server.post("/api/sessions", body).await.1,
    };
    answer["id"]
        .as_str()
        .or_else(|| answer["session"].as_str())
        .unwrap_or_else(|| panic!("{variant} {command}: {answer}"))
        .to_owned()
}

/// Follows session `id` to its result, answering what it asks: a `touch` allowed, anything
/// else denied.
async fn finish(server: &Server, id: &str) {
    let mut ws = server.ws(&format!("/api/sessions/{id}/subscribe?after=0")).await;
    loop {
        let frames = ws
            .until(|frame| {
                crate::is_result(frame) || frame["event"]["event"] == "permission_requested"
            })
            .await;
        let last = &frames.last().unwrap()["event"];
        if last["event"] != "permission_requested" {
            // Its CLI stopped: the daemon runs at most so many at once.
            let (status, _) = server
                .send(reqwest::Method::DELETE, &format!("/api/sessions/{id}"), json!({}))
                .await;
            assert!(status < 300, "stopped: {status}");
            return;
        }
        let allow = last["input"]["command"].as_str().is_some_and(|c| c.starts_with("touch"));
        let request = last["request_id"].as_str().unwrap();
        let (status, answered) = server
            .post(
                &format!("/api/sessions/{id}/permissions/{request}"),
                json!({"behavior": if allow { "allow" } else { "deny" }}),
            )
            .await;
        assert_eq!(status, 200, "{answered}");
    }
}

/// Runs a dry run; its progress lines and its report.
async fn dry_run(server: &Server, body: Value) -> (u16, Vec<Value>) {
    let response = server
        .client()
        .post(format!("{}/api/policy/test", server.base))
        .bearer_auth(TOKEN)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (status, text.lines().map(|line| serde_json::from_str(line).unwrap()).collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_agrees_call_by_call_with_the_replay_done_by_hand() {
    let rows = expected();
    assert_eq!(rows.len(), 10);
    let sandbox = CliSandbox::new().unwrap();
    let sub = sandbox.workdir().join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    for dir in [sandbox.workdir(), sub.clone()] {
        std::fs::write(dir.join("notes.txt"), "notes\n").unwrap();
        std::fs::write(dir.join("secret.txt"), "secret\n").unwrap();
    }
    let cwd_of = |variant: &str| if variant == "sub" { sub.clone() } else { sandbox.workdir() };
    let mut scenario = Scenario::new().fallback("done");
    for variant in VARIANTS {
        for row in &rows {
            let (tool, input) = call_of(row, &cwd_of(variant));
            scenario = scenario
                .reply(Reply::tool_use(tool, input).when_prompt(prompt(&row.command, variant)));
        }
    }
    let api = FakeApi::start(scenario).await.unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let server = Server::start_with(store, &api, &sandbox, |config| {
        config.default_policy = Some(Policy::from_toml(RECORDING).unwrap());
    })
    .await;
    let (status, made) =
        server.post("/api/tokens", json!({"name": "ci", "scope": "operate"})).await;
    assert_eq!(status, 201, "{made}");
    let ci = made["token"].as_str().unwrap().to_owned();
    let (status, made) = server
        .post(
            "/api/triggers",
            json!({"name": "runs", "task": {"cwd": sandbox.workdir(), "prompt": "RUN {{command}} trigger now"}}),
        )
        .await;
    assert_eq!(status, 201, "{made}");
    let secret = made["secret"].as_str().unwrap().to_owned();

    // Record: 50 sessions, each to its end.
    let mut sessions: HashMap<String, (String, Expected)> = HashMap::new();
    for variant in VARIANTS {
        for row in &rows {
            let id = start(&server, variant, &row.command, &cwd_of(variant), &ci, &secret).await;
            finish(&server, &id).await;
            sessions.insert(id, (variant.to_owned(), row.clone()));
        }
    }
    assert_eq!(sessions.len(), 50);

    // The dry run over all of them.
    let candidate = std::fs::read_to_string(fixture("candidate.toml")).unwrap();
    let (status, lines) = dry_run(&server, json!({"policy": candidate})).await;
    assert_eq!(status, 200, "{lines:?}");
    let progress: Vec<&Value> = lines.iter().filter_map(|line| line.get("progress")).collect();
    assert!(!progress.is_empty(), "progress is told");
    assert!(progress
        .windows(2)
        .all(|w| w[0]["sessions_read"].as_u64() <= w[1]["sessions_read"].as_u64()));
    let report = lines.last().unwrap()["report"].clone();
    assert!(report.is_object(), "{lines:?}");

    // Every call in the cell the hand replay puts it in, each cell's count the hand's.
    let mut by_hand: HashMap<(String, String, String), Vec<String>> = HashMap::new();
    for (id, (variant, row)) in &sessions {
        let (behavior, rule) = &row.candidate[usize::from(variant == "trigger")];
        by_hand
            .entry((rule.clone(), behavior.clone(), row.outcome.clone()))
            .or_default()
            .push(format!("{id} {} {}", row.tool, row.summary));
    }
    let mut found: HashMap<(String, String, String), Vec<String>> = HashMap::new();
    for rule in report["rules"].as_array().unwrap() {
        for (outcome, cell) in rule["outcomes"].as_object().unwrap() {
            let key = (
                rule["rule"].as_str().unwrap().to_owned(),
                rule["behavior"].as_str().unwrap_or("mixed").to_owned(),
                outcome.clone(),
            );
            let calls = cell["calls"].as_array().unwrap();
            assert_eq!(
                cell["count"].as_u64(),
                Some(calls.len() as u64),
                "every call shown: {cell}"
            );
            found.entry(key).or_default().extend(calls.iter().map(|call| {
                let tool = call["tool"].as_str().unwrap();
                let summary = call["summary"].as_str().unwrap();
                // A Read's summary is its absolute path: the hand names the file.
                let summary = match tool {
                    "Read" => summary.rsplit('/').next().unwrap(),
                    _ => summary,
                };
                format!("{} {tool} {summary}", call["session"].as_str().unwrap())
            }));
        }
    }
    for cell in by_hand.values_mut().chain(found.values_mut()) {
        cell.sort();
    }
    let mut keys: Vec<_> = by_hand.keys().chain(found.keys()).cloned().collect();
    keys.sort();
    keys.dedup();
    for key in keys {
        assert_eq!(found.get(&key), by_hand.get(&key), "cell {key:?}");
    }
    assert_eq!(
        report["headline"],
        json!({"calls": 50, "sessions": 50, "would_allow": 4, "would_deny_ran": 10,
               "would_ask_ran_unasked": 5, "same": 31}),
        "the hand's headline (expected.tsv's notes)"
    );

    // Filters: a directory, a token, a trigger's runs, a time.
    for (sessions, calls) in [
        (format!("cwd={}", sub.display()), 10),
        ("token=ci".to_owned(), 10),
        ("trigger=runs".to_owned(), 10),
    ] {
        let (status, lines) =
            dry_run(&server, json!({"policy": candidate, "sessions": sessions})).await;
        assert_eq!(status, 200, "{lines:?}");
        let headline = &lines.last().unwrap()["report"]["headline"];
        assert_eq!(headline["calls"], calls, "{sessions}: {headline}");
    }
    let (_, lines) =
        dry_run(&server, json!({"policy": candidate, "since": "2999-01-01T00:00:00Z"})).await;
    assert_eq!(lines.last().unwrap()["report"]["headline"]["calls"], 0);
    // What cannot run is refused before anything is read.
    for (body, why) in [
        (json!({"policy": "[permissions]\nallow = [\"Bash(\"]"}), "policy:"),
        (json!({"policy": "", "sessions": "owner=me"}), "is no filter"),
        (json!({"policy": "", "since": "soon"}), "neither a time"),
    ] {
        let (status, lines) = dry_run(&server, body).await;
        assert_eq!(status, 400, "{lines:?}");
        assert!(lines[0]["error"]["message"].as_str().unwrap().contains(why), "{lines:?}");
    }
    // The page: the same report in a browser, a call a link to its session.
    let (ok, log) = crate::ui::run_script(
        "e2e/policy.test.mjs",
        &server.base,
        &[("CANDIDATE", candidate.clone())],
    )
    .await;
    assert!(ok, "the dry-run page's browser test failed:\n{log}");
    let held = server.daemon.trial_slot().unwrap();
    let (status, lines) = dry_run(&server, json!({"policy": ""})).await;
    assert_eq!(status, 409, "one dry run at a time: {lines:?}");
    drop(held);
    server.stop().await;
}
