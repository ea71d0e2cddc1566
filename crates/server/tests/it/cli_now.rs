//! Claude Code as it is now: what the daemon pins so that the current CLI, and the person's own
//! settings for it, cannot loosen what the policy holds.

use std::sync::Arc;

use serde_json::json;
use switchboard_store::{MemoryStore, Store};
use switchboard_testkit::{CliSandbox, FakeApi, Reply, Scenario};

use crate::Server;

/// A session started in `sandbox`'s directory with `prompt`: its id, and a socket following it
/// from its first event.
async fn started(server: &Server, sandbox: &CliSandbox, prompt: &str) -> (String, crate::Ws) {
    let (status, session) =
        server.post("/api/sessions", json!({"cwd": sandbox.workdir(), "prompt": prompt})).await;
    assert_eq!(status, 201, "{session}");
    let id = session["id"].as_str().unwrap().to_owned();
    let ws = server.ws(&format!("/api/sessions/{id}/subscribe?after=0")).await;
    (id, ws)
}

/// A daemon whose sessions run the real CLI of `version`.
async fn server_running(version: &str, api: &FakeApi, sandbox: &CliSandbox) -> Server {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    Server::start_with(store, api, sandbox, |config| {
        config.claude = Some(switchboard_testkit::sandbox::real_cli_of(version));
    })
    .await
}

/// A session that names no permission mode runs in `default`, whatever the person's settings
/// say: with `permissions.defaultMode = "acceptEdits"` in their `~/.claude/settings.json`, an
/// edit the policy leaves to a person still reaches one (left to choose, the CLI would make the
/// edit unasked).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_that_names_no_mode_runs_in_default_whatever_the_settings_say() {
    let sandbox = CliSandbox::new().unwrap();
    let notes = sandbox.file("notes.txt");
    std::fs::write(&notes, "colour = 1\n").unwrap();
    let settings = sandbox.home().join(".claude");
    std::fs::create_dir_all(&settings).unwrap();
    std::fs::write(
        settings.join("settings.json"),
        json!({"permissions": {"defaultMode": "acceptEdits"}}).to_string(),
    )
    .unwrap();
    let api = FakeApi::start(
        Scenario::new()
            .reply(Reply::tool_use("Read", json!({"file_path": notes})).when_prompt("EDIT"))
            .reply(
                Reply::tool_use(
                    "Edit",
                    json!({"file_path": notes, "old_string": "colour = 1", "new_string": "color = 2"}),
                )
                .when_tool_result_contains("colour"),
            )
            .reply(Reply::text("Done.").when_tool_result()),
    )
    .await
    .unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let server = Server::start(store, &api, &sandbox).await;
    let (_, mut ws) = started(&server, &sandbox, "EDIT it").await;
    let frames = ws
        .until(|frame| {
            frame["event"]["event"] == "permission_requested"
                || crate::is_result(frame)
                || frame["event"]["line"]["subtype"] == "init"
                    && frame["event"]["line"]["permissionMode"] != "default"
        })
        .await;
    let last = frames.last().unwrap();
    assert_eq!(last["event"]["event"], "permission_requested", "a person is asked: {last}");
    assert_eq!(last["event"]["tool_name"], "Edit", "{last}");
    let init = frames
        .iter()
        .find(|frame| frame["event"]["line"]["subtype"] == "init")
        .expect("the CLI said how it started");
    assert_eq!(init["event"]["line"]["permissionMode"], "default", "{init}");
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "colour = 1\n", "nothing edited unasked");
    server.stop().await;
}

/// Claude Code's hints on a request hold in every face. 2.1.330 asks about a removal on a
/// critical path with `classifier_approvable: false` and `suppress_always_allow_rule` (only a
/// person may approve it, and never "always"): it reaches a person although the policy allows
/// every Bash call; the phone's notification has Open and no Approve or Deny; the link's page
/// offers no Approve and refuses a posted one; "allow always" is refused with 409; the request
/// still waits, and a person denies it. (`rm` refuses a path ending in `..`: nothing would be
/// removed were it run.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_only_a_person_may_approve_is_never_one_tap_or_always() {
    use switchboard_server::notify::ChannelKind;
    let command = "rm -rf /nonexistent-switchboard/..";
    let api = FakeApi::start(
        Scenario::new()
            .reply(
                Reply::tool_use("Bash", json!({"command": command, "description": "Clean up"}))
                    .when_prompt("CLEAN"),
            )
            .reply(Reply::text("Left it alone.").when_tool_result()),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let phone = crate::notify::Receiver::default();
    let phone_url = phone.start().await;
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let policy =
        switchboard_session::Policy::from_toml("[permissions]\nallow = [\"Bash\"]").unwrap();
    let server = Server::start_with(store, &api, &sandbox, |config| {
        config.default_policy = Some(policy);
        config.notify = crate::notify::fast(vec![crate::notify::channel(
            "phone",
            ChannelKind::Ntfy,
            format!("{phone_url}/agents"),
        )]);
    })
    .await;
    let (id, mut ws) = started(&server, &sandbox, "CLEAN").await;
    let frames = ws
        .until(|frame| frame["event"]["event"] == "permission_requested" || crate::is_result(frame))
        .await;
    let asked = &frames.last().unwrap()["event"];
    assert_eq!(asked["event"], "permission_requested", "a person is asked: {asked}");
    let hints = &asked["hints"];
    assert_eq!(hints["classifier_approvable"], false, "{asked}");
    assert_eq!(hints["suppress_always_allow_rule"], true, "{asked}");
    assert_eq!((&hints["person_only"], &hints["no_standing_rule"]), (&json!(true), &json!(true)));
    assert!(asked["reason"].as_str().unwrap().contains("Dangerous rm"), "{asked}");
    let request = asked["request_id"].as_str().unwrap().to_owned();

    // The phone: Open only.
    let got = phone.until(|bodies| !bodies.is_empty()).await;
    let message = &got[0].2;
    let actions = message["actions"].as_array().unwrap();
    assert_eq!(actions.len(), 1, "{message}");
    assert_eq!(actions[0]["label"], "Open", "{message}");
    // The link's page: no Approve; a posted allow is refused.
    let link = message["click"].as_str().unwrap().to_owned();
    let (status, page) = crate::links::open(&server, &link).await;
    assert_eq!(status, 200);
    assert!(!page.contains("value=allow"), "{page}");
    assert!(page.contains("a person must approve this one"), "{page}");
    let (status, page) = crate::links::post(&server, &link, "decision=allow").await;
    assert_eq!(status, 409, "{page}");
    // "Allow always" through the API: refused, and the request still waits.
    let answer = format!("/api/sessions/{id}/permissions/{request}");
    let (status, body) =
        server.post(&answer, json!({"behavior": "allow", "remember": true, "by": "test"})).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "no_standing_rule", "{body}");
    let (status, view) = server.get(&format!("/api/sessions/{id}")).await;
    assert_eq!(status, 200);
    assert_eq!(view["pending_permissions"][0]["request_id"], request.as_str(), "{view}");
    let (status, body) = server
        .post(&answer, json!({"behavior": "deny", "message": "Not that.", "by": "test"}))
        .await;
    assert_eq!(status, 200, "{body}");
    let frames = ws.until(crate::is_result).await;
    assert_eq!(frames.last().unwrap()["event"]["line"]["result"], "Left it alone.");
    server.stop().await;
}

/// `auto` is a mode a person may choose, and the policy holds under it: its deny is a deny
/// (the call never runs) and its ask reaches a person (whose allow runs it). Against the fake
/// API, 2.1.330's classifier is not served, so what the policy leaves to it is refused; the
/// policy's own verdicts come first either way (its `PreToolUse` hook).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_auto_the_policy_still_denies_and_asks() {
    let api = FakeApi::start(
        Scenario::new()
            .reply(
                Reply::tool_use("Bash", json!({"command": "touch denied.txt", "description": "a"}))
                    .when_prompt("DENYIT"),
            )
            .reply(Reply::text("Not allowed, then.").when_tool_result_contains("denied"))
            .reply(
                Reply::tool_use("Bash", json!({"command": "touch asked.txt", "description": "b"}))
                    .when_prompt("ASKIT"),
            )
            .reply(Reply::text("Made it.").when_tool_result()),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let policy = switchboard_session::Policy::from_toml(
        "[permissions]\ndeny = [\"Bash(touch denied.txt)\"]\nask = [\"Bash(touch asked.txt)\"]\ndefault = \"allow\"",
    )
    .unwrap();
    let server =
        Server::start_with(store, &api, &sandbox, |config| config.default_policy = Some(policy))
            .await;
    let create = json!({"cwd": sandbox.workdir(), "prompt": "DENYIT", "permission_mode": "auto"});
    let (status, session) = server.post("/api/sessions", create).await;
    assert_eq!(status, 201, "{session}");
    let id = session["id"].as_str().unwrap().to_owned();
    let mut ws = server.ws(&format!("/api/sessions/{id}/subscribe?after=0")).await;
    let frames = ws.until(crate::is_result).await;
    let init = frames
        .iter()
        .find(|frame| frame["event"]["line"]["subtype"] == "init")
        .expect("the CLI said how it started");
    assert_eq!(init["event"]["line"]["permissionMode"], "auto", "{init}");
    let decided = frames
        .iter()
        .find(|frame| frame["event"]["event"] == "permission_decided")
        .expect("the policy decided");
    assert_eq!(decided["event"]["behavior"], "deny", "{decided}");
    assert_eq!(decided["event"]["by"]["kind"], "policy", "{decided}");
    assert!(!sandbox.file("denied.txt").exists(), "a deny is a deny");

    ws.send(json!({"type": "user_message", "content": "ASKIT"})).await;
    let frames = ws
        .until(|frame| frame["event"]["event"] == "permission_requested" || crate::is_result(frame))
        .await;
    let prompt = frames
        .iter()
        .find(|frame| {
            frame["event"]["direction"] == "to_cli" && frame["event"]["line"]["type"] == "user"
        })
        .expect("the prompt is in the log")
        .clone();
    let asked = &frames.last().unwrap()["event"];
    assert_eq!(asked["event"], "permission_requested", "an ask is an ask: {asked}");
    assert_eq!(asked["rule"], "Bash(touch asked.txt)", "{asked}");
    let request = asked["request_id"].as_str().unwrap();
    let (status, body) = server
        .post(
            &format!("/api/sessions/{id}/permissions/{request}"),
            json!({"behavior": "allow", "by": "test"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let frames = ws.until(crate::is_result).await;
    let result = &frames.last().unwrap()["event"]["line"];
    assert_eq!(result["result"], "Made it.");
    assert!(sandbox.file("asked.txt").exists(), "the person's allow ran it");
    // The prompt went as a person's, and the CLI says so on the turn's result.
    assert_eq!(prompt["event"]["line"]["origin"], json!({"kind": "human"}), "{prompt}");
    assert_eq!(result["origin"], json!({"kind": "human"}), "{result}");
    server.stop().await;
}

/// The usage windows a claude.ai login's CLI reports (`rate_limit_event`, from the API's
/// `anthropic-ratelimit-unified-*` headers) reach `GET /api/usage`; a `/clear` resets the
/// CLI's running cost, and the session's goes on adding up (a turn after it counted whole);
/// the session follows the new conversation's id; the CLI states its turns
/// (`session_state_changed`, asked for by the daemon). With the real 2.1.330 and 2.1.250 (the
/// oldest pinned CLI that reports every window and resets the conversation on `/clear`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_windows_reach_the_api_and_a_clear_never_lowers_the_cost() {
    for version in ["2.1.330", "2.1.250"] {
        usage_and_clear_with(version).await;
    }
}

async fn usage_and_clear_with(version: &str) {
    let resets = switchboard_store::now_ms() / 1000 + 3600;
    let api = FakeApi::start(
        Scenario::new()
            .reply(
                Reply::text("First.")
                    .when_prompt("ONE")
                    .header("anthropic-ratelimit-unified-status", "allowed")
                    .header("anthropic-ratelimit-unified-representative-claim", "five_hour")
                    .header("anthropic-ratelimit-unified-reset", resets.to_string())
                    .header("anthropic-ratelimit-unified-5h-utilization", "0.82")
                    .header("anthropic-ratelimit-unified-5h-reset", resets.to_string())
                    .header("anthropic-ratelimit-unified-5h-status", "allowed_warning")
                    .header("anthropic-ratelimit-unified-7d-utilization", "0.4")
                    .header("anthropic-ratelimit-unified-7d-reset", (resets + 86_400).to_string())
                    .header("anthropic-ratelimit-unified-7d-status", "allowed"),
            )
            // After the clear: dearer than everything before it.
            .reply(Reply {
                input_tokens: Some(200_000),
                ..Reply::text("Second.").when_prompt("TWO")
            }),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let server = Server::start_with(store, &api, &sandbox, |config| {
        config.env = sandbox.subscriber_env(&api.base_url()).into_iter().collect();
        config.claude = Some(switchboard_testkit::sandbox::real_cli_of(version));
    })
    .await;
    let (id, mut ws) = started(&server, &sandbox, "ONE").await;
    let frames = ws.until(crate::is_result).await;
    assert!(
        frames.iter().any(|frame| frame["event"]["line"]["subtype"] == "session_state_changed"),
        "the CLI states its turns"
    );
    let (status, usage) = server.get("/api/usage").await;
    assert_eq!(status, 200);
    let windows = usage["windows"].as_array().unwrap();
    let five = windows.iter().find(|w| w["window"] == "five_hour").expect("five_hour");
    assert_eq!(five["utilization"], 0.82, "{version}: {usage}");
    // 2.1.250 gives no window a status of its own: the event's (`allowed`) stands for its window.
    let status = if version == "2.1.250" { "allowed" } else { "allowed_warning" };
    assert_eq!(five["status"], status, "{version}: {usage}");
    assert_eq!(five["resets_at"], resets, "{usage}");
    assert!(windows.iter().any(|w| w["window"] == "seven_day" && w["utilization"] == 0.4));
    assert_eq!(usage["reported_by"], id.as_str());
    let (_, before) = server.get(&format!("/api/sessions/{id}")).await;
    let cost_before = before["cost_usd"].as_f64().unwrap();
    assert!(cost_before > 0.0, "{before}");

    ws.send(json!({"type": "user_message", "content": "/clear"})).await;
    let frames = ws.until(crate::is_result).await;
    assert!(frames.iter().any(|frame| frame["event"]["line"]["type"] == "conversation_reset"));
    ws.send(json!({"type": "user_message", "content": "TWO"})).await;
    let frames = ws.until(crate::is_result).await;
    let result = &frames.last().unwrap()["event"]["line"];
    assert_eq!(result["result"], "Second.", "{version}");
    let cli_total = result["total_cost_usd"].as_f64().unwrap();
    assert!(cli_total > cost_before, "the turn after the clear is dearer: {cli_total}");
    let (_, after) = server.get(&format!("/api/sessions/{id}")).await;
    let cost_after = after["cost_usd"].as_f64().unwrap();
    assert!(
        (cost_after - (cost_before + cli_total)).abs() < 1e-9,
        "the session's cost adds up: {cost_before} + {cli_total} = {cost_after}"
    );
    assert_ne!(after["claude_session_id"], before["claude_session_id"], "the new conversation");
    assert_eq!(after["claude_session_id"], result["session_id"]);
    server.stop().await;
}

/// What a person may ask a session's CLI beyond a prompt, with the real 2.1.330: its context,
/// usage, permission rules and hooks; a queued prompt dropped (one that is not queued: the CLI
/// says it cancelled nothing); a title passed on. 2.1.250 and 2.1.100 answer what their
/// versions know (usage from 2.1.250, context from 2.1.100). 2.1.37 answers none of these: it
/// is refused before anything is sent, with the version that would answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_answers_what_it_knows_and_an_older_one_is_refused_by_version() {
    let api =
        FakeApi::start(Scenario::new().reply(Reply::text("Hello.").when_prompt("HI").times(4)))
            .await
            .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let server = Server::start(store, &api, &sandbox).await;
    let (id, mut ws) = started(&server, &sandbox, "HI").await;
    ws.until(crate::is_result).await;
    let ask = |question: &str| format!("/api/sessions/{id}/cli/{question}");
    let (status, context) = server.get(&ask("context")).await;
    assert_eq!(status, 200, "{context}");
    assert!(context["categories"].as_array().is_some_and(|rows| !rows.is_empty()), "{context}");
    let (status, usage) = server.get(&ask("usage")).await;
    assert_eq!(status, 200, "{usage}");
    assert!(usage["session"]["total_cost_usd"].is_number(), "{usage}");
    let (status, rules) = server.get(&ask("permission-rules")).await;
    assert_eq!(status, 200, "{rules}");
    assert!(rules["state"]["rules"].is_array(), "{rules}");
    let (status, hooks) = server.get(&ask("hooks")).await;
    assert_eq!(status, 200, "{hooks}");
    assert!(hooks["eventCatalog"].is_array(), "{hooks}");
    let (status, unknown) = server.get(&ask("secrets")).await;
    assert_eq!(status, 404, "{unknown}");
    let gone = "00000000-0000-4000-8000-000000000000";
    let (status, cancelled) = server
        .request_as(
            crate::TOKEN,
            reqwest::Method::DELETE,
            &format!("/api/sessions/{id}/queue/{gone}"),
            None,
        )
        .await;
    assert_eq!(status, 200, "{cancelled}");
    assert_eq!(cancelled, json!({"cancelled": false}));
    let (status, renamed) =
        server.patch(&format!("/api/sessions/{id}"), json!({"title": "Greeting"})).await;
    assert_eq!(status, 200, "{renamed}");
    let frames = ws
        .until(|frame| {
            frame["event"]["direction"] == "to_cli"
                && frame["event"]["line"]["request"]["subtype"] == "rename_session"
        })
        .await;
    assert_eq!(frames.last().unwrap()["event"]["line"]["request"]["title"], "Greeting");
    server.stop().await;

    // The oldest pinned CLIs that answer some: each answers what its version knows, and is
    // refused the rest by version.
    for (version, answered, refused) in [
        ("2.1.250", &["usage", "context"][..], "permission-rules"),
        ("2.1.100", &["context"], "usage"),
    ] {
        let server = server_running(version, &api, &sandbox).await;
        let (id, mut ws) = started(&server, &sandbox, "HI").await;
        ws.until(crate::is_result).await;
        for question in answered {
            let (status, answer) = server.get(&format!("/api/sessions/{id}/cli/{question}")).await;
            assert_eq!(status, 200, "{version} {question}: {answer}");
            assert!(answer.as_object().is_some_and(|fields| !fields.is_empty()), "{answer}");
        }
        let (status, answer) = server.get(&format!("/api/sessions/{id}/cli/{refused}")).await;
        assert_eq!(status, 409, "{version} {refused}: {answer}");
        assert!(
            answer["error"]["message"]
                .as_str()
                .unwrap()
                .ends_with(&format!("this session runs {version}")),
            "{answer}"
        );
        server.stop().await;
    }

    // 2.1.37: refused by version, nothing sent.
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let server = Server::start_with(store, &api, &sandbox, |config| {
        config.claude =
            Some(switchboard_testkit::real_cli(switchboard_testkit::CliVersion::V2_1_37));
    })
    .await;
    let (id, mut ws) = started(&server, &sandbox, "HI").await;
    ws.until(crate::is_result).await;
    let (status, refused) = server.get(&format!("/api/sessions/{id}/cli/hooks")).await;
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["error"]["code"], "cli_too_old");
    assert_eq!(
        refused["error"]["message"],
        "get_hooks_listing needs Claude Code 2.1.330 or newer; this session runs 2.1.37"
    );
    server.stop().await;
}

/// Steering and a stop that drops the queue, with the real 2.1.330 and 2.1.120 (the oldest
/// pinned CLI that steers): a prompt sent with `priority: now` stops the running turn (its
/// answer still held by the fake API) and runs at once; a prompt queued `later` is dropped by
/// an interrupt with `cancel_queued` (the CLI says it cancelled it) and never reaches the model;
/// the session ends idle each time. An unknown priority is a 400, and 2.1.37 (which ignores the
/// field) is refused with the version that steers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steered_prompt_stops_the_turn_and_a_stop_can_drop_the_queue() {
    let sandbox = CliSandbox::new().unwrap();
    for version in ["2.1.330", "2.1.120"] {
        let api = FakeApi::start(
            Scenario::new()
                .reply(
                    Reply::text("one two three four five")
                        .when_prompt("SLOW")
                        .hold_after(1)
                        .times(4),
                )
                .reply(Reply::text("Steered.").when_prompt("STEER"))
                .reply(Reply::text("Never asked for.").when_prompt("LATER")),
        )
        .await
        .unwrap();
        let server = server_running(version, &api, &sandbox).await;
        let (status, session) = server
            .post("/api/sessions", json!({"cwd": sandbox.workdir(), "prompt": "SLOW one"}))
            .await;
        assert_eq!(status, 201, "{session}");
        let id = session["id"].as_str().unwrap().to_owned();
        let messages = format!("/api/sessions/{id}/messages");
        let mut ws = server.ws(&format!("/api/sessions/{id}/subscribe?after=0")).await;
        // Steered once the held answer streams, as a person sees it: sent sooner, 2.1.120 now
        // and then asks the API with the held turn's prompt last again (seen in a loaded run),
        // and that request is held too.
        ws.until(|frame| frame["event"]["line"]["event"]["delta"]["type"] == "text_delta").await;

        let (status, refused) =
            server.post(&messages, json!({"content": "x", "priority": "soon"})).await;
        assert_eq!(status, 400, "{refused}");
        assert!(refused["error"]["message"].as_str().unwrap().contains("now, next or later"));

        let (status, sent) =
            server.post(&messages, json!({"content": "STEER this way", "priority": "now"})).await;
        assert_eq!(status, 202, "{version}: {sent}");
        let frames = ws
            .until(|frame| {
                crate::is_result(frame) && frame["event"]["line"]["result"] == "Steered."
            })
            .await;
        let results: Vec<_> = frames.iter().filter(|frame| crate::is_result(frame)).collect();
        assert_eq!(results.len(), 2, "{version}: the held turn ended, then the steered one ran");
        assert_ne!(
            results[0]["event"]["line"]["result"], "one two three four five",
            "{version}: stopped early"
        );
        ws.until(|frame| frame["event"]["event"] == "state" && frame["event"]["to"] == "idle")
            .await;

        let (status, _) = server.post(&messages, json!({"content": "SLOW two"})).await;
        assert_eq!(status, 202);
        api.wait_for(|request| request.last_user_text().contains("SLOW two")).await;
        let (status, later) =
            server.post(&messages, json!({"content": "LATER, please", "priority": "later"})).await;
        assert_eq!(status, 202, "{version}: {later}");
        let (status, stopped) = server
            .post(&format!("/api/sessions/{id}/interrupt"), json!({"cancel_queued": true}))
            .await;
        assert_eq!(status, 200, "{version}: {stopped}");
        // The CLI's own word that the queued prompt is gone: 2.1.330 lists
        // `interrupt_cancel_queued_v1` and is sent the interrupt with `cancel_queued`, which
        // answers with what it cancelled; an older CLI is sent `cancel_async_message` for the
        // prompt first, which answers `cancelled: true`.
        let uuid = later["uuid"].as_str().unwrap().to_owned();
        let frames = ws
            .until(|frame| {
                let cancelled = &frame["event"]["line"]["response"]["response"]["cancelled"];
                frame["event"]["line"]["type"] == "control_response"
                    && (*cancelled == true
                        || cancelled.as_array().is_some_and(|all| all.contains(&json!(uuid))))
            })
            .await;
        let interrupt = frames
            .iter()
            .map(|frame| &frame["event"]["line"])
            .find(|line| line["request"]["subtype"] == "interrupt")
            .expect("the interrupt was sent");
        let cancelled: Vec<&serde_json::Value> = frames
            .iter()
            .map(|frame| &frame["event"]["line"]["request"])
            .filter(|request| request["subtype"] == "cancel_async_message")
            .map(|request| &request["message_uuid"])
            .collect();
        if version == "2.1.330" {
            assert_eq!(interrupt["request"]["cancel_queued"], true, "{interrupt}");
            assert!(cancelled.is_empty(), "{cancelled:?}");
        } else {
            // 2.1.120 never says which prompt runs: the running one is asked too, and the
            // CLI answers that it cancelled nothing.
            assert!(interrupt["request"]["cancel_queued"].is_null(), "{interrupt}");
            assert!(cancelled.contains(&&json!(uuid)), "{cancelled:?}");
        }
        ws.until(|frame| frame["event"]["event"] == "state" && frame["event"]["to"] == "idle")
            .await;
        assert!(
            !api.conversation_requests()
                .iter()
                .any(|request| request.last_user_text().contains("LATER")),
            "{version}: the dropped prompt never reached the model"
        );
        server.stop().await;
    }

    // 2.1.37 ignores a priority: refused by version, nothing sent.
    let api = FakeApi::start(Scenario::new().reply(Reply::text("Hi.").when_prompt("STEER")))
        .await
        .unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let server = Server::start_with(store, &api, &sandbox, |config| {
        config.claude =
            Some(switchboard_testkit::real_cli(switchboard_testkit::CliVersion::V2_1_37));
    })
    .await;
    let (id, mut ws) = started(&server, &sandbox, "STEER hi").await;
    ws.until(crate::is_result).await;
    let (status, refused) = server
        .post(&format!("/api/sessions/{id}/messages"), json!({"content": "x", "priority": "now"}))
        .await;
    assert_eq!(status, 409, "{refused}");
    assert_eq!(
        refused["error"]["message"],
        "priority now needs Claude Code 2.1.120 or newer; this session runs 2.1.37"
    );
    server.stop().await;
}

/// Background work, with the real 2.1.330 and 2.1.250 (the oldest pinned CLI that lists it):
/// a subagent started to run in the background is
/// listed on the session (REST and the view); Stop in the head (an interrupt) ends the running
/// turn and leaves it running, since Switchboard declares that every face stops a task alone
/// (`perTaskStopAffordance`: without it, 2.1.330 kills background agents on an interrupt);
/// then the task's own Stop ends it, and the transcript says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_task_outlives_an_interrupt_and_stops_alone() {
    for version in ["2.1.330", "2.1.250"] {
        background_with(version).await;
    }
}

async fn background_with(version: &str) {
    let api = FakeApi::start(
        Scenario::new()
            .reply(Reply::text("still working on it").when_prompt("SUBWORK").hold_after(1))
            .reply(Reply::text("one two three").when_prompt("SLOW").hold_after(1))
            .reply(
                Reply::tool_use(
                    "Agent|Task",
                    json!({"description": "Background helper", "prompt": "SUBWORK please",
                           "subagent_type": "general-purpose", "run_in_background": true}),
                )
                .when_prompt("BG"),
            )
            .reply(Reply::text("Started it.").when_tool_result()),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let server = server_running(version, &api, &sandbox).await;
    let (id, mut ws) = started(&server, &sandbox, "BG go").await;
    let frames = ws.until(crate::is_result).await;
    let init = frames
        .iter()
        .find(|frame| frame["event"]["line"]["request"]["subtype"] == "initialize")
        .expect("initialize was sent");
    assert_eq!(init["event"]["line"]["request"]["perTaskStopAffordance"], true, "{init}");
    api.wait_for(|request| request.last_user_text().contains("SUBWORK")).await;
    let listed = |session: &serde_json::Value| {
        session["background_tasks"].as_array().cloned().unwrap_or_default()
    };
    // 2.1.330 lists it before the turn's result (and the pump projects a batch before it
    // publishes it).
    assert!(frames
        .iter()
        .any(|frame| frame["event"]["line"]["subtype"] == "background_tasks_changed"));
    let tasks = listed(&server.get(&format!("/api/sessions/{id}")).await.1);
    assert_eq!(tasks.len(), 1, "{tasks:?}");
    assert_eq!(tasks[0]["description"], "Background helper");
    assert_eq!(tasks[0]["task_type"], "local_agent");
    let task_id = tasks[0]["task_id"].as_str().unwrap().to_owned();

    // A turn runs; Stop ends it, and the background task goes on.
    let (status, _) =
        server.post(&format!("/api/sessions/{id}/messages"), json!({"content": "SLOW now"})).await;
    assert_eq!(status, 202);
    api.wait_for(|request| request.last_user_text().contains("SLOW now")).await;
    let (status, _) = server.post(&format!("/api/sessions/{id}/interrupt"), json!({})).await;
    assert_eq!(status, 200);
    let frames = ws.until(crate::is_result).await;
    assert!(
        !frames.iter().any(|frame| frame["event"]["line"]["subtype"] == "task_notification"),
        "the interrupt stopped no background task"
    );
    assert_eq!(listed(&server.get(&format!("/api/sessions/{id}")).await.1).len(), 1);

    let (status, stopped) =
        server.post(&format!("/api/sessions/{id}/tasks/{task_id}/stop"), json!({})).await;
    assert_eq!(status, 200, "{stopped}");
    ws.until(|frame| {
        frame["event"]["line"]["subtype"] == "task_notification"
            && frame["event"]["line"]["task_id"] == task_id.as_str()
    })
    .await;
    let (_, view) = server.get(&format!("/api/sessions/{id}/view?after=0")).await;
    let told: Vec<&serde_json::Value> = view["updates"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|update| update["update"] == "notice" && update["kind"] == "background_task")
        .collect();
    assert_eq!(told.len(), 1, "{version}: the transcript says it was stopped: {told:?}");
    assert!(
        told[0]["text"].as_str().unwrap().contains("“Background helper” was stopped"),
        "{version}: {}",
        told[0]
    );
    assert!(listed(&server.get(&format!("/api/sessions/{id}")).await.1).is_empty());
    server.stop().await;
}

/// An MCP server's question, with the real 2.1.330 and 2.1.100 (the oldest pinned CLI that
/// passes one on) and the tests' MCP server
/// (`e2e/mcp-echo.mjs`, its `ask` tool): it reaches a person although the policy allows every
/// call, as a question only a person may answer (no link approval, no "always"); an answer
/// that does not fit its form is a 400 and it still waits; the answer that fits reaches the
/// server, which hands it to the model.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_servers_question_reaches_a_person_and_the_answer_the_server() {
    for version in ["2.1.330", "2.1.100"] {
        elicitation_with(version).await;
    }
}

async fn elicitation_with(version: &str) {
    let api = FakeApi::start(
        Scenario::new()
            .reply(Reply::tool_use("mcp__probe__ask", json!({})).when_prompt("ELICIT"))
            .reply(Reply::text("Blue it is.").when_tool_result_contains("accept")),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let server = server_running(version, &api, &sandbox).await;
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../e2e/mcp-echo.mjs");
    let mcp = json!({"mcpServers": {"probe": {"command": "node", "args": [script]}}}).to_string();
    let (status, session) = server
        .post(
            "/api/sessions",
            json!({"cwd": sandbox.workdir(), "prompt": "ELICIT a colour", "mcp_config": [mcp],
                   "policy": "[permissions]\ndefault = \"allow\"\nallow = [\"*\"]"}),
        )
        .await;
    assert_eq!(status, 201, "{session}");
    let id = session["id"].as_str().unwrap().to_owned();
    let mut ws = server.ws(&format!("/api/sessions/{id}/subscribe?after=0")).await;
    let frames = ws.until(|frame| frame["event"]["event"] == "permission_requested").await;
    let asked = &frames.last().unwrap()["event"];
    assert_eq!(asked["tool_name"], "McpElicitation", "{version}: {asked}");
    assert_eq!(asked["input"]["server"], "probe");
    assert_eq!(asked["input"]["message"], "Which colour should the button be?");
    // 2.1.330 says in which order to ask (older CLIs leave it to the schema's own).
    if version == "2.1.330" {
        assert_eq!(asked["input"]["property_order"], json!(["colour", "note"]));
    } else {
        assert!(asked["input"]["property_order"].is_null(), "{asked}");
    }
    assert_eq!(asked["hints"]["person_only"], true);
    let request_id = asked["request_id"].as_str().unwrap().to_owned();
    let answer = format!("/api/sessions/{id}/permissions/{request_id}");

    let (status, refused) = server
        .post(&answer, json!({"behavior": "allow", "updated_input": {"colour": "green"}}))
        .await;
    assert_eq!(status, 400, "{refused}");
    assert!(refused["error"]["message"].as_str().unwrap().contains("colour must be one of"));
    let (status, refused) =
        server.post(&answer, json!({"behavior": "allow", "remember": true})).await;
    assert_eq!(status, 409, "{refused}");
    let (status, answered) = server
        .post(
            &answer,
            json!({"behavior": "allow", "updated_input": {"colour": "blue", "note": "please"}}),
        )
        .await;
    assert_eq!(status, 200, "{version}: {answered}");
    let frames = ws.until(crate::is_result).await;
    let result = frames
        .iter()
        .find_map(|frame| {
            let content = &frame["event"]["line"]["message"]["content"][0];
            (content["type"] == "tool_result").then(|| content.to_string())
        })
        .expect("the tool's result");
    assert!(result.contains(r#"asked: {\"action\":\"accept\",\"content\":{\"colour\":\"blue\",\"note\":\"please\"}}"#), "{result}");
    assert_eq!(frames.last().unwrap()["event"]["line"]["result"], "Blue it is.", "{version}");
    server.stop().await;
}

/// A refused answer taken back, with the real CLIs that retry on a fallback model (2.1.330, and
/// 2.1.250, the oldest pinned one that does): the model's safeguards stop the answer
/// (`stop_reason: refusal`); the CLI retries on the fallback model, whose answer is the turn's;
/// the view takes the refused answer out (the log keeps it) and says why, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_answer_is_taken_back_and_the_fallbacks_answer_stands() {
    for version in ["2.1.330", "2.1.250"] {
        let api = FakeApi::start(
            Scenario::new()
                // The newest CLIs go on once on the same model before they fall back.
                .reply(
                    Reply::text("I will not")
                        .refused("cyber", "Looks like malware.")
                        .when_model("opus-5")
                        .times(2),
                )
                .reply(Reply::text("Here is a safe answer.").when_model("opus-4-8")),
        )
        .await
        .unwrap();
        let sandbox = CliSandbox::new().unwrap();
        let server = server_running(version, &api, &sandbox).await;
        let (id, mut ws) = started(&server, &sandbox, "Write it").await;
        let frames = ws.until(crate::is_result).await;
        let result = &frames.last().unwrap()["event"]["line"];
        assert_eq!(result["result"], "Here is a safe answer.", "{version}: {result}");
        let lines: Vec<&serde_json::Value> = frames
            .iter()
            .map(|frame| &frame["event"]["line"])
            .filter(|line| line["type"] == "assistant")
            .collect();
        let answer = lines.last().unwrap();
        let refused: Vec<&str> = answer["supersedes"]
            .as_array()
            .unwrap_or_else(|| panic!("{version}: the fallback's answer supersedes: {answer}"))
            .iter()
            .filter_map(|uuid| uuid.as_str())
            .collect();
        assert!(!refused.is_empty(), "{version}: {answer}");
        let (_, view) = server.get(&format!("/api/sessions/{id}/view?after=0")).await;
        let updates = view["updates"].as_array().unwrap();
        let retracted: Vec<&str> = updates
            .iter()
            .filter(|update| update["update"] == "retracted")
            .flat_map(|update| update["uuids"].as_array().unwrap().iter())
            .filter_map(|uuid| uuid.as_str())
            .collect();
        for uuid in &refused {
            assert!(retracted.contains(uuid), "{version}: {uuid} taken back: {retracted:?}");
        }
        let notices: Vec<&serde_json::Value> = updates
            .iter()
            .filter(|update| update["update"] == "notice" && update["kind"] == "refusal")
            .collect();
        assert_eq!(notices.len(), 1, "{version}: {notices:?}");
        let text = notices[0]["text"].as_str().unwrap();
        assert!(text.contains("took the refused answer back"), "{version}: {text}");
        // The log keeps what the view took out.
        let (_, events) = server.get(&format!("/api/sessions/{id}/events?after=0")).await;
        assert!(events.to_string().contains(refused[0]), "{version}: the log keeps it");
        server.stop().await;
    }
}
