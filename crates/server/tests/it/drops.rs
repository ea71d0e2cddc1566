//! `--sdk-url` links that break, with the real CLIs 2.1.120 and 2.1.37 behind a proxy that
//! cuts, stalls, blackholes and swallows: every message accepted with a 2xx reaches the model
//! exactly once or is reported `undelivered`, the session's state is right after each drop,
//! and no tool runs twice.

use super::*;
use switchboard_testkit::{Flow, Welcome, WsProxy};

/// One test per `--sdk-url` CLI line (they reconnect differently).
macro_rules! each_sdk_url_cli {
    ($($test:ident),* $(,)?) => {$(
        mod $test {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn v2_1_120() {
                super::$test(switchboard_testkit::CliVersion::V2_1_120).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn v2_1_37() {
                super::$test(switchboard_testkit::CliVersion::V2_1_37).await
            }
        }
    )*};
}

each_sdk_url_cli!(
    a_prompt_swallowed_by_a_dying_socket_goes_again_and_runs_once,
    a_prompt_the_cli_holds_but_has_not_run_runs_once,
    a_stalled_big_prompt_cut_with_its_socket_is_one_turn,
    a_lost_permission_answer_goes_again_without_asking_twice,
    a_prompt_for_a_cli_that_never_comes_back_is_reported_undelivered,
    a_line_queued_while_the_cli_is_away_is_stamped_when_sent,
);

/// A daemon whose `--sdk-url` CLIs connect through a [`WsProxy`], running one session of
/// `version` started with `prompt`, and a subscription to its events.
struct Broken {
    api: FakeApi,
    _sandbox: CliSandbox,
    server: Server,
    proxy: WsProxy,
    id: String,
    ws: Ws,
}

async fn start(version: CliVersion, scenario: Scenario, prompt: &str) -> Broken {
    start_with(version, scenario, prompt, |_| {}).await
}

async fn start_with(
    version: CliVersion,
    scenario: Scenario,
    prompt: &str,
    configure: impl FnOnce(&mut DaemonConfig),
) -> Broken {
    let api = FakeApi::start(scenario).await.unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let store: Arc<dyn Store> = Arc::new(switchboard_store::MemoryStore::new());
    let mut proxy = None;
    let server = Server::start_with(store, &api, &sandbox, |config| {
        let base = config.ingress_base.clone().unwrap();
        let started = WsProxy::start(&base).unwrap();
        config.ingress_base = Some(started.url_for(&base));
        proxy = Some(started);
        configure(config);
    })
    .await;
    let body = json!({"cwd": sandbox.workdir(), "prompt": prompt, "transport": "sdk-url", "claude": real_cli(version)});
    let (status, session) = server.post("/api/sessions", body).await;
    assert_eq!(status, 201, "{session}");
    let id = session["id"].as_str().unwrap().to_owned();
    let ws = server.ws(&format!("/api/sessions/{id}/subscribe")).await;
    Broken { api, _sandbox: sandbox, server, proxy: proxy.unwrap(), id, ws }
}

impl Broken {
    /// Posts a message; it is accepted, and named by the `uuid` the answer gives.
    async fn say(&self, text: &str) -> String {
        let (status, body) = self
            .server
            .post(&format!("/api/sessions/{}/messages", self.id), json!({"content": text}))
            .await;
        assert_eq!(status, 202, "{body}");
        body["uuid"].as_str().expect("the answer names the message").to_owned()
    }

    /// The session's log.
    async fn log(&self) -> Vec<Value> {
        let (status, events) = self.server.get(&format!("/api/sessions/{}/events", self.id)).await;
        assert_eq!(status, 200);
        events.as_array().unwrap().clone()
    }

    /// The `uuid` of the prompt whose text contains `text`, from its `to_cli` line.
    async fn uuid_of(&self, text: &str) -> String {
        let log = self.log().await;
        let line = log
            .iter()
            .map(|event| &event["event"])
            .find(|event| {
                event["direction"] == "to_cli"
                    && event["line"]["type"] == "user"
                    && event["line"]["message"]["content"]
                        .as_str()
                        .is_some_and(|c| c.contains(text))
            })
            .unwrap_or_else(|| panic!("no prompt {text:?} in the log"));
        line["line"]["uuid"].as_str().expect("every prompt has a uuid").to_owned()
    }

    /// How many conversation requests carried a prompt containing `text`.
    fn model_saw(&self, text: &str) -> usize {
        self.api
            .conversation_requests()
            .iter()
            .filter(|request| request.last_user_text().contains(text))
            .count()
    }

    async fn reconnected(&mut self) {
        self.ws.until(is_reconnect).await;
    }

    async fn idle(&mut self) {
        self.ws
            .until(|frame| frame["event"]["event"] == "state" && frame["event"]["to"] == "idle")
            .await;
        let (_, session) = self.server.get(&format!("/api/sessions/{}", self.id)).await;
        assert_eq!(session["state"], "idle", "{session}");
    }
}

fn is_reconnect(frame: &Value) -> bool {
    frame["event"]["event"] == "connected" && frame["event"]["reconnect"] == true
}

fn events_of<'a>(log: &'a [Value], kind: &str) -> Vec<&'a Value> {
    log.iter().map(|event| &event["event"]).filter(|event| event["event"] == kind).collect()
}

/// The frame that carries a prompt is swallowed, then the socket dies: the daemon had written
/// it, and before it knew the CLI had it, the CLI was gone. On the new socket it goes again
/// with its `uuid`, and runs once.
async fn a_prompt_swallowed_by_a_dying_socket_goes_again_and_runs_once(version: CliVersion) {
    let mut b = start(
        version,
        Scenario::new()
            .reply(Reply::text("first").when_prompt("ONE"))
            .reply(Reply::text("second").when_prompt("TWO"))
            .reply(Reply::text("third").when_prompt("THREE")),
        "ONE",
    )
    .await;
    b.idle().await;
    b.proxy.swallow("TWO");
    b.say("TWO").await;
    b.proxy.until("the swallow", WAIT, |proxy| proxy.swallowed().len() == 1).await;
    b.proxy.cut();
    let frames = b.ws.until(is_result).await;
    assert_eq!(frames.last().unwrap()["event"]["line"]["result"], "second");
    // A second run of TWO would come before the next prompt's.
    b.say("THREE").await;
    b.ws.until(|frame| is_result(frame) && frame["event"]["line"]["result"] == "third").await;
    b.idle().await;
    assert_eq!(b.model_saw("TWO"), 1, "the prompt ran once");
    let uuid = b.uuid_of("TWO").await;
    let log = b.log().await;
    let resent = events_of(&log, "resent");
    assert!(resent.iter().any(|event| event["uuid"] == uuid.as_str()), "{resent:?}");
    assert!(events_of(&log, "undelivered").is_empty());
    b.server.stop().await;
}

/// A prompt the CLI received while a turn ran (it queues it, and echoes it only when it runs)
/// goes again after a drop; the CLI runs its `uuid` once.
async fn a_prompt_the_cli_holds_but_has_not_run_runs_once(version: CliVersion) {
    let mut b = start(
        version,
        Scenario::new()
            .reply(Reply::text("one two three").when_prompt("ONE").hold_after(1))
            .reply(Reply::text("second").when_prompt("TWO"))
            .reply(Reply::text("third").when_prompt("THREE")),
        "ONE",
    )
    .await;
    b.ws.until(|frame| frame["event"]["line"]["event"]["delta"]["type"] == "text_delta").await;
    b.say("TWO").await;
    b.proxy
        .until("TWO written to the CLI", WAIT, |proxy| {
            proxy.to_cli().iter().any(|frame| frame.contains("TWO"))
        })
        .await;
    b.proxy.cut();
    b.reconnected().await;
    b.api.release();
    let uuid = b.uuid_of("TWO").await;
    b.ws.until(|frame| is_result(frame) && frame["event"]["line"]["result"] == "second").await;
    // A second run of TWO would come before the next prompt's.
    b.say("THREE").await;
    b.ws.until(|frame| is_result(frame) && frame["event"]["line"]["result"] == "third").await;
    b.idle().await;
    assert_eq!(b.model_saw("TWO"), 1, "the prompt ran once");
    assert_eq!(b.model_saw("ONE"), 1);
    let log = b.log().await;
    let resent = events_of(&log, "resent");
    assert!(
        resent.iter().any(|event| event["uuid"] == uuid.as_str()),
        "TWO went again (the CLI had it, unconfirmed): {resent:?}"
    );
    b.server.stop().await;
}

/// The first repro: a stalled socket, a big prompt, the socket cut. The prompt is one
/// turn (it runs once, after the reconnect) and the session is idle after it, and after the
/// next one. (300 KiB, not the repro's 6 MB: a prompt past the model's context makes the CLI
/// compact first, which the fake API does not script. The slot's handling of a send that
/// fails outright is tested in the transport.)
async fn a_stalled_big_prompt_cut_with_its_socket_is_one_turn(version: CliVersion) {
    let mut b = start(
        version,
        Scenario::new()
            .reply(Reply::text("first").when_prompt("ONE"))
            .reply(Reply::text("big one").when_prompt("BIG"))
            .reply(Reply::text("after").when_prompt("AFTER")),
        "ONE",
    )
    .await;
    b.idle().await;
    b.proxy.set_flow(Flow::Stall);
    let big = format!("BIG {}", "x".repeat(300 * 1024));
    b.say(&big).await;
    b.ws.until(|frame| {
        frame["event"]["event"] == "line"
            && frame["event"]["line"]["type"] == "user"
            && frame["event"]["direction"] == "to_cli"
    })
    .await;
    b.proxy.cut();
    b.ws.until(|frame| is_result(frame) && frame["event"]["line"]["result"] == "big one").await;
    b.idle().await;
    b.say("AFTER").await;
    b.ws.until(|frame| is_result(frame) && frame["event"]["line"]["result"] == "after").await;
    b.idle().await;
    assert_eq!(b.model_saw("BIG"), 1, "the big prompt ran once");
    b.server.stop().await;
}

/// The person's answer to a permission request is swallowed, then the socket dies. The CLI
/// still waits for it (re-`initialize` lists it): the recorded answer goes again, nobody is
/// asked twice, and the tool runs once.
async fn a_lost_permission_answer_goes_again_without_asking_twice(version: CliVersion) {
    let mut b = start(
        version,
        Scenario::new()
            .reply(Reply::tool_use("Bash", touch_and_ls("answered-once.txt")).when_prompt("RUN"))
            .reply(Reply::text("Done.").when_tool_result()),
        "RUN it",
    )
    .await;
    let frames = b.ws.until(|frame| frame["event"]["event"] == "permission_requested").await;
    let request_id = frames.last().unwrap()["event"]["request_id"].as_str().unwrap().to_owned();
    b.proxy.swallow(&format!("\"request_id\":\"{request_id}\""));
    let (status, answer) = b
        .server
        .post(
            &format!("/api/sessions/{}/permissions/{request_id}", b.id),
            json!({"behavior": "allow"}),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    b.proxy.until("the swallow", WAIT, |proxy| proxy.swallowed().len() == 1).await;
    b.proxy.cut();
    let frames = b.ws.until(is_result).await;
    assert_eq!(frames.last().unwrap()["event"]["line"]["result"], "Done.");
    b.idle().await;
    let log = b.log().await;
    let asked = events_of(&log, "permission_requested");
    assert_eq!(asked.len(), 1, "asked once: {asked:?}");
    let resent = events_of(&log, "resent");
    assert!(resent.iter().any(|event| event["request_id"] == request_id.as_str()), "{resent:?}");
    let tool_results = b
        .api
        .conversation_requests()
        .iter()
        .filter(|request| {
            request.body.to_string().contains("answered-once.txt")
                && request.body.to_string().contains("tool_result")
        })
        .count();
    assert_eq!(tool_results, 1, "the tool ran once");
    b.server.stop().await;
}

/// The CLI loses its socket and every reconnect is refused: a message accepted meanwhile never
/// reaches it. When the CLI gives up, the log says so (`undelivered`, a prompt), and the
/// session ends with the real reason.
async fn a_prompt_for_a_cli_that_never_comes_back_is_reported_undelivered(version: CliVersion) {
    let mut b =
        start(version, Scenario::new().reply(Reply::text("first").when_prompt("ONE")), "ONE").await;
    b.idle().await;
    // 2.1.120 stops at a 404 (close code 1002); 2.1.37 after two failed attempts.
    b.proxy.set_welcome(Welcome::NotFound);
    b.proxy.cut();
    b.ws.until(|frame| frame["event"]["event"] == "disconnected").await;
    let uuid = b.say("LOST").await;
    let frames = b.ws.until(|frame| frame["event"]["event"] == "exited").await;
    assert_eq!(b.uuid_of("LOST").await, uuid, "the line carries the uuid the API answered with");
    let undelivered: Vec<&Value> = frames
        .iter()
        .map(|frame| &frame["event"])
        .filter(|event| event["event"] == "undelivered")
        .collect();
    assert_eq!(undelivered.len(), 1, "{undelivered:?}");
    assert_eq!(undelivered[0]["uuid"], uuid.as_str());
    assert_eq!(undelivered[0]["prompt"], true);
    let exited = &frames.last().unwrap()["event"];
    assert!(
        exited["description"].as_str().unwrap().contains("connection to the daemon was lost"),
        "{exited}"
    );
    let (_, session) = b.server.get(&format!("/api/sessions/{}", b.id)).await;
    assert_eq!(session["state"], "crashed", "{session}");
    assert_eq!(b.model_saw("LOST"), 0);
    assert!(b.proxy.refused() >= 1);
    b.server.stop().await;
}

/// A message posted while the CLI is away waits for it: the log has its `to_cli` line when it
/// was accepted, and a `sent` for it after the CLI is back.
async fn a_line_queued_while_the_cli_is_away_is_stamped_when_sent(version: CliVersion) {
    let mut b = start(
        version,
        Scenario::new()
            .reply(Reply::text("first").when_prompt("ONE"))
            .reply(Reply::text("late").when_prompt("LATE")),
        "ONE",
    )
    .await;
    b.idle().await;
    // A refused attempt (closed before the handshake), which both versions try again.
    b.proxy.set_welcome(Welcome::Close);
    b.proxy.cut();
    b.proxy.until("a refused attempt", WAIT, |proxy| proxy.refused() >= 1).await;
    b.say("LATE").await;
    b.proxy.set_welcome(Welcome::Forward);
    b.ws.until(|frame| is_result(frame) && frame["event"]["line"]["result"] == "late").await;
    let uuid = b.uuid_of("LATE").await;
    let log = b.log().await;
    let position = |check: &dyn Fn(&Value) -> bool| {
        log.iter().position(|event| check(&event["event"])).expect("in the log")
    };
    let queued =
        position(&|event| event["direction"] == "to_cli" && event["line"]["uuid"] == uuid.as_str());
    let back = position(&|event| event["event"] == "connected" && event["reconnect"] == true);
    let sent = position(&|event| event["event"] == "sent" && event["uuid"] == uuid.as_str());
    assert!(queued < back && back < sent, "queued {queued}, reconnected {back}, sent {sent}");
    assert_eq!(b.model_saw("LATE"), 1);
    b.server.stop().await;
}

/// A link that dies without a word (nothing passes, nothing closes) holds no slot: 2.1.120
/// notices the missing pongs and reconnects, and is served at once. The daemon's own ping is
/// set far off, so only the takeover can serve it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blackholed_socket_gives_way_to_the_clis_reconnect() {
    let mut b = start_with(
        CliVersion::V2_1_120,
        Scenario::new()
            .reply(Reply::text("first").when_prompt("ONE"))
            .reply(Reply::text("after the blackhole").when_prompt("TWO")),
        "ONE",
        |config| config.ping_interval = Some(Duration::from_secs(3600)),
    )
    .await;
    b.idle().await;
    b.proxy.blackhole();
    b.reconnected().await;
    b.say("TWO").await;
    b.ws.until(|frame| {
        is_result(frame) && frame["event"]["line"]["result"] == "after the blackhole"
    })
    .await;
    b.idle().await;
    assert_eq!(b.model_saw("TWO"), 1);
    b.server.stop().await;
}
