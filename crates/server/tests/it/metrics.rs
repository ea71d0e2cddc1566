//! Prometheus metrics against a real Prometheus (Debian's `prometheus`): a session with the
//! real CLI asks twice, a person allows one call and denies the other, and `/metrics` counts
//! the turns, the tool calls, the decisions and the wait, the cost by model and project, the
//! store's appends and the live session's state; a Prometheus scrapes both the main port (with
//! the token) and the token-less metrics port, and its queries give the same figures.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use switchboard_store::{MemoryStore, Store};
use switchboard_testkit::servers::Prometheus;
use switchboard_testkit::{CliSandbox, FakeApi, Reply, Scenario};

use crate::{Server, Ws, TOKEN, WAIT};

const ASKING: &str = "[permissions]\nask = [\"Bash\"]\n";

/// One sample's value in `text` (the OpenMetrics exposition): the line that starts with
/// `series` and a space.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|value| value.split(' ').next()?.parse().ok())
}

/// Asks `prometheus` for `query` until it answers `expected` (within a billionth), or
/// [`WAIT`] passes (a scrape may fail, or not have come yet).
async fn scraped(prometheus: &Prometheus, query: &str, expected: f64) {
    let client = reqwest::Client::builder().timeout(WAIT).build().unwrap();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let url = reqwest::Url::parse_with_params(
            &format!("{}/api/v1/query", prometheus.url()),
            [("query", query)],
        )
        .unwrap();
        let answer: Value = client.get(url).send().await.unwrap().json().await.unwrap();
        let value: Option<f64> =
            answer["data"]["result"][0]["value"][1].as_str().and_then(|v| v.parse().ok());
        if value.is_some_and(|value| (value - expected).abs() < 1e-9) {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "{query} is not {expected}: {answer}");
        // Prometheus scrapes once a second.
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Claude Code asking twice to run Bash, under a policy that asks: see [`allowed_then_denied`].
pub(crate) fn allow_then_deny() -> Scenario {
    Scenario::new()
        .reply(Reply::tool_use("Bash", json!({"command": "echo metered"})).when_prompt("RUN"))
        .reply(Reply::text("ran it").when_tool_result_contains("metered"))
        .reply(Reply::tool_use("Bash", json!({"command": "echo refused"})).when_prompt("DENY"))
        .reply(Reply::text("not then").when_tool_result_contains("not today"))
}

/// A session (against [`allow_then_deny`]) in which a person allows the first Bash call and,
/// in a second turn, denies the next; its id and its feed, once both turns ended.
pub(crate) async fn allowed_then_denied(server: &Server, sandbox: &CliSandbox) -> (String, Ws) {
    allowed_then_denied_under(server, sandbox, ASKING).await
}

/// [`allowed_then_denied`] under `policy`, against a scenario whose first turn ends `ran it`
/// and whose second (`DENY it`) ends `not then` once denied with `not today`.
pub(crate) async fn allowed_then_denied_under(
    server: &Server,
    sandbox: &CliSandbox,
    policy: &str,
) -> (String, Ws) {
    let (id, mut ws) = server
        .open_session(json!({"cwd": sandbox.workdir(), "prompt": "RUN it", "policy": policy}))
        .await;
    for (answer, result) in [
        (json!({"behavior": "allow"}), "ran it"),
        (json!({"behavior": "deny", "message": "not today"}), "not then"),
    ] {
        let frames = ws.until(|frame| frame["event"]["event"] == "permission_requested").await;
        let request = frames.last().unwrap()["event"]["request_id"].as_str().unwrap().to_owned();
        let path = format!("/api/sessions/{id}/permissions/{request}");
        let (status, answered) = server.post(&path, answer).await;
        assert_eq!(status, 200, "{answered}");
        let frames = ws.until(crate::is_result).await;
        assert_eq!(frames.last().unwrap()["event"]["line"]["result"], result);
        if result == "ran it" {
            let path = format!("/api/sessions/{id}/messages");
            let (status, sent) = server.post(&path, json!({"content": "DENY it"})).await;
            assert_eq!(status, 202, "{sent}");
        }
    }
    (id, ws)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_prometheus_scrapes_what_sessions_did() {
    let api = FakeApi::start(allow_then_deny()).await.unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let server = Server::start(store, &api, &sandbox).await;
    let metrics_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let metrics_address = metrics_listener.local_addr().unwrap();
    let daemon = server.daemon.clone();
    tokio::spawn(async move {
        switchboard_server::serve_metrics(metrics_listener, daemon, std::future::pending())
            .await
            .unwrap();
    });

    let (id, _) = allowed_then_denied(&server, &sandbox).await;

    // The main port: the token, or nothing.
    let client = reqwest::Client::builder().timeout(WAIT).build().unwrap();
    let refused = client.get(format!("{}/metrics", server.base)).send().await.unwrap();
    assert_eq!(refused.status().as_u16(), 401);
    let response =
        client.get(format!("{}/metrics", server.base)).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert!(response.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("application/openmetrics-text"));
    let text = response.text().await.unwrap();
    let value =
        |series: &str| sample(&text, series).unwrap_or_else(|| panic!("no {series} in\n{text}"));
    assert_eq!(value("switchboard_turns_total{outcome=\"success\"}"), 2.0);
    assert_eq!(value("switchboard_tool_calls_total{tool=\"Bash\"}"), 2.0);
    let decided = |decision: &str| {
        value(&format!(
            "switchboard_permission_decisions_total{{tool=\"Bash\",decision=\"{decision}\",by=\"person\"}}"
        ))
    };
    assert_eq!((decided("allow"), decided("deny")), (1.0, 1.0));
    assert_eq!(value("switchboard_approval_wait_seconds_count"), 2.0);
    let project = sandbox.workdir().display().to_string();
    let model = server.daemon.store().get_session(&id).await.unwrap().unwrap().model.unwrap();
    let cost =
        value(&format!("switchboard_cost_usd_total{{model=\"{model}\",project=\"{project}\"}}"));
    let recorded = server.daemon.store().get_session(&id).await.unwrap().unwrap().cost_usd;
    assert!(cost > 0.0 && (cost - recorded).abs() < 1e-9, "{cost} against {recorded}");
    assert!(value("switchboard_store_append_seconds_count") > 0.0);
    assert_eq!(value("switchboard_sessions{state=\"idle\"}"), 1.0);
    assert!(text.ends_with("# EOF\n"));

    // A real Prometheus, scraping the main port with the token and the metrics port without.
    let Some(prometheus) = Prometheus::start(&format!(
        "  - job_name: main\n    authorization:\n      credentials: {TOKEN}\n    static_configs:\n      - targets: ['{}']\n  - job_name: metrics-port\n    static_configs:\n      - targets: ['{metrics_address}']\n",
        server.base.trim_start_matches("http://"),
    )) else {
        return;
    };
    for job in ["main", "metrics-port"] {
        scraped(&prometheus, &format!("up{{job=\"{job}\"}}"), 1.0).await;
        let turns = format!("switchboard_turns_total{{job=\"{job}\",outcome=\"success\"}}");
        scraped(&prometheus, &turns, 2.0).await;
        let denied = format!(
            "switchboard_permission_decisions_total{{job=\"{job}\",decision=\"deny\",by=\"person\"}}"
        );
        scraped(&prometheus, &denied, 1.0).await;
        let spent = format!("sum(switchboard_cost_usd_total{{job=\"{job}\"}})");
        scraped(&prometheus, &spent, cost).await;
        let idle = format!("switchboard_sessions{{job=\"{job}\",state=\"idle\"}}");
        scraped(&prometheus, &idle, 1.0).await;
    }
    server.stop().await;
}
