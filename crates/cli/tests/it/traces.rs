//! `switchboard serve --otlp-endpoint` against a real OTLP receiver (`e2e/otlp_receiver.py`):
//! a turn's spans arrive, sent on when the daemon stops; the collector's key comes from
//! `SWITCHBOARD_OTLP_HEADERS` and the OpenTelemetry variables meant for another collector (the
//! headers, a sampler that keeps nothing) change nothing.

use serde_json::Value;
use switchboard_testkit::otlp::OtlpReceiver;
use switchboard_testkit::{CliSandbox, FakeApi, Reply, Scenario};

use crate::serve::{create_session, start_daemon_with_env, wait_session};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_sends_a_turns_spans_with_its_own_key_and_no_other() {
    let receiver = OtlpReceiver::start().await;
    let api = FakeApi::start(Scenario::new().reply(Reply::text("traced").when_prompt("HELLO")))
        .await
        .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let data = tempfile::tempdir().unwrap();
    let env = [
        ("SWITCHBOARD_OTLP_HEADERS", "x-collector-key=k%2B1"),
        // Claude Code's own telemetry's settings, for another collector.
        ("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer other-vendor"),
        ("OTEL_TRACES_SAMPLER", "always_off"),
    ];
    let daemon = start_daemon_with_env(
        data.path(),
        &api,
        &sandbox,
        &["--otlp-endpoint", receiver.endpoint()],
        &env,
    )
    .await;
    let token = std::fs::read_to_string(data.path().join("token")).unwrap().trim().to_owned();
    let id = create_session(&daemon.url, &token, &sandbox, "HELLO").await;
    wait_session(&daemon.url, &token, &id, |session| session["state"] == "idle").await;
    // Stopping the daemon sends what waits (the interval is 5 s).
    crate::schedule::sigterm(daemon).await;
    let spans: Vec<Value> = receiver
        .spans()
        .into_iter()
        .filter(|span| span["attributes"]["session.id"] == id.as_str())
        .collect();
    let turns: Vec<&Value> = spans.iter().filter(|span| span["name"] == "turn").collect();
    assert_eq!(turns.len(), 1, "{spans:#?}");
    assert_eq!(turns[0]["status"]["code"], 1, "{spans:#?}");
    let exports = receiver.exports();
    assert!(!exports.is_empty());
    for export in &exports {
        let headers = &export["headers"];
        assert_eq!(headers["x-collector-key"], "k+1", "{export}");
        assert!(headers.get("authorization").is_none(), "another collector's key: {export}");
    }
}
