//! The soak: for a stated time (`SWITCHBOARD_SOAK_SECS`, `scripts/soak.sh` gives it; CI runs
//! ten minutes), sessions are started, streamed to a subscriber, approved over that socket and
//! stopped, two at a time, against a real `switchboard serve` and the real CLI. The daemon's
//! resident memory and open descriptors are sampled throughout; at the end memory is flat
//! within the stated tolerance, descriptors are back where they began, every subscriber saw
//! every event in order, and no process any session started is left.

// The soak reports its samples as it goes: that is its output.
#![allow(clippy::print_stdout)]

use std::path::Path;
use std::time::{Duration, Instant};

use futures::{SinkExt as _, StreamExt as _};
use serde_json::{json, Value};
use switchboard_testkit::{CliSandbox, FakeApi, Reply, Scenario};
use tokio_tungstenite::tungstenite::Message as WsMessage;

use crate::serve::{create_session, http, session_events, start_daemon, subscribe, wait_session};

/// How often the daemon is sampled.
const SAMPLE_EVERY: Duration = Duration::from_secs(5);

/// Memory is flat when the median of the last fifth of the samples is at most this much above
/// the median of the second fifth (the first is warm-up: caches, the allocator's arenas, the
/// store's page cache filling)...
const RSS_GROWTH_RATIO: f64 = 1.25;
/// ...plus this much, for the allocator's rounding at small sizes.
const RSS_SLACK_KIB: u64 = 8 * 1024;

/// Descriptors at the end may exceed the idle count at the start by this many (the store's
/// second connection, opened lazily, and the like); never by one per session.
const FD_SLACK: usize = 8;

/// One sample of the daemon.
#[derive(Debug, Clone, Copy)]
struct Sample {
    at: Duration,
    rss_kib: u64,
    fds: usize,
    sessions: usize,
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map(Iterator::count).unwrap_or(0)
}

/// Processes (not this one) whose working directory is under `root`: the CLIs and the tools
/// the sessions started.
fn processes_under(root: &Path) -> Vec<String> {
    let me = std::process::id().to_string();
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter(|entry| entry.file_name().to_string_lossy().chars().all(|c| c.is_ascii_digit()))
        .filter(|entry| entry.file_name().to_string_lossy() != me)
        .filter_map(|entry| {
            let cwd = std::fs::read_link(entry.path().join("cwd")).ok()?;
            if !cwd.starts_with(root) {
                return None;
            }
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            let shown = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            Some(format!("{} {shown}", entry.file_name().to_string_lossy()))
        })
        .collect()
}

fn median(values: &mut [u64]) -> u64 {
    values.sort_unstable();
    values.get(values.len() / 2).copied().unwrap_or(0)
}

/// One session's life: started, followed on its own subscriber socket, its permission
/// request approved over that socket, its turn finished, stopped. Checks that the subscriber
/// saw every stored event, in order, once.
async fn one_session(url: &str, token: &str, sandbox: &CliSandbox) -> String {
    let id = create_session(url, token, sandbox, "SOAK").await;
    let mut socket = subscribe(url, token, &id, 0).await;
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut seqs = Vec::new();
    let mut kinds = Vec::new();
    let mut approved = false;
    let mut stopped = false;
    let mut last_stored = None;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            let session =
                http(url, token, reqwest::Method::GET, &format!("/api/sessions/{id}"), None).await;
            panic!("session {id}: no end in 120 s; saw events {seqs:?} ({kinds:?}); now {session}");
        }
        let frame = match tokio::time::timeout(Duration::from_millis(500), socket.next()).await {
            Ok(Some(frame)) => Some(frame.unwrap()),
            Ok(None) => panic!("session {id}: the subscriber's socket closed early"),
            Err(_) => None,
        };
        if let Some(WsMessage::Text(text)) = frame {
            let frame: Value = serde_json::from_str(&text).unwrap();
            match frame["type"].as_str() {
                Some("event") => {
                    seqs.push(frame["seq"].as_u64().unwrap());
                    let event = &frame["event"];
                    kinds.push(event["event"].as_str().unwrap_or_default().to_owned());
                    if event["event"] == "permission_requested" && !approved {
                        let answer = json!({
                            "type": "permission_response",
                            "request_id": event["request_id"],
                            "behavior": "allow",
                            "by": "soak",
                        });
                        socket.send(WsMessage::Text(answer.to_string().into())).await.unwrap();
                        approved = true;
                    }
                }
                // Answers, and the daemon's word on the subscription (a lagged subscriber
                // catches up from the log; the seq check below still proves no gap).
                Some("ack" | "lagged" | "store_failing" | "store_recovered") => {}
                other => panic!("session {id}: unexpected frame {other:?}: {frame}"),
            }
        }
        if approved && !stopped {
            let session =
                http(url, token, reqwest::Method::GET, &format!("/api/sessions/{id}"), None).await;
            if session["state"] == "idle" {
                http(url, token, reqwest::Method::DELETE, &format!("/api/sessions/{id}"), None)
                    .await;
                wait_session(url, token, &id, |s| s["running"] == false).await;
                stopped = true;
            }
        }
        if stopped {
            let stored = match last_stored {
                Some(stored) => stored,
                None => {
                    let events = session_events(url, token, &id).await;
                    let last = events.as_array().unwrap().last().unwrap()["seq"].as_u64().unwrap();
                    last_stored = Some(last);
                    last
                }
            };
            if seqs.last() == Some(&stored) {
                break;
            }
        }
    }
    let expected: Vec<u64> = (1..=last_stored.unwrap()).collect();
    assert_eq!(seqs, expected, "session {id}: the subscriber saw every event, in order, once");
    let _ = socket.close(None).await;
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the soak: scripts/soak.sh runs it for a stated time (CI: ten minutes)"]
async fn sessions_for_minutes_leave_memory_and_descriptors_flat_and_no_process() {
    let seconds: u64 = std::env::var("SWITCHBOARD_SOAK_SECS")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(60);
    let api = FakeApi::start(
        Scenario::new()
            .reply(
                Reply::tool_use(
                    "Bash",
                    json!({"command": "touch soak.txt && ls", "description": "x"}),
                )
                .when_prompt("SOAK")
                .times(u32::MAX),
            )
            .reply(Reply::text("soak turn done").when_tool_result().times(u32::MAX)),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let data = tempfile::tempdir().unwrap();
    let daemon = start_daemon(data.path(), &api, &sandbox, &[]).await;
    let pid = daemon.child.id().unwrap();
    let token = std::fs::read_to_string(data.path().join("token")).unwrap();
    let url = daemon.url.clone();
    let idle_fds = open_fds(pid);

    let started = Instant::now();
    let samples = std::sync::Arc::new(std::sync::Mutex::new(Vec::<Sample>::new()));
    let done = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let sampler = {
        let samples = samples.clone();
        let done = done.clone();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(SAMPLE_EVERY);
            loop {
                every.tick().await;
                let sample = Sample {
                    at: started.elapsed(),
                    rss_kib: rss_kib(pid),
                    fds: open_fds(pid),
                    sessions: done.load(std::sync::atomic::Ordering::Relaxed),
                };
                println!(
                    "soak {:>4}s: {:>4} sessions, daemon RSS {:>6} KiB, {:>3} descriptors",
                    sample.at.as_secs(),
                    sample.sessions,
                    sample.rss_kib,
                    sample.fds
                );
                samples.lock().unwrap().push(sample);
            }
        })
    };

    let end = started + Duration::from_secs(seconds);
    while Instant::now() < end {
        let (first, second) =
            tokio::join!(one_session(&url, &token, &sandbox), one_session(&url, &token, &sandbox));
        assert_ne!(first, second);
        done.fetch_add(2, std::sync::atomic::Ordering::Relaxed);
    }
    sampler.abort();
    let sessions = done.load(std::sync::atomic::Ordering::Relaxed);

    // Nothing a session started is left: no CLI, no tool.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = processes_under(&sandbox.workdir());
        if left.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "processes left after every session stopped: {left:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let listed = http(&url, &token, reqwest::Method::GET, "/api/sessions", None).await;
    let all = listed.as_array().expect("the session list");
    assert_eq!(all.len(), sessions, "every session is listed");
    let running = all.iter().filter(|s| s["running"] == true).count();
    assert_eq!(running, 0, "no session runs after the soak: {listed}");

    // Descriptors come back to where they were (a subscriber's socket, a CLI's pipes: none is
    // kept), within a few.
    let deadline = Instant::now() + Duration::from_secs(30);
    let fds = loop {
        let fds = open_fds(pid);
        if fds <= idle_fds + FD_SLACK || Instant::now() >= deadline {
            break fds;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let samples = samples.lock().unwrap().clone();
    let peak_fds = samples.iter().map(|s| s.fds).max().unwrap_or(0);
    println!(
        "soak: {sessions} sessions in {}s; descriptors idle {idle_fds}, peak {peak_fds}, end {fds}",
        started.elapsed().as_secs()
    );
    assert!(fds <= idle_fds + FD_SLACK, "descriptors grew from {idle_fds} to {fds}");

    // Memory: the last fifth's median against the second fifth's.
    assert!(samples.len() >= 10, "too short a soak to judge memory: {} samples", samples.len());
    let fifth = samples.len() / 5;
    let mut early: Vec<u64> = samples[fifth..2 * fifth].iter().map(|s| s.rss_kib).collect();
    let mut late: Vec<u64> = samples[samples.len() - fifth..].iter().map(|s| s.rss_kib).collect();
    let (early, late) = (median(&mut early), median(&mut late));
    let limit = (early as f64 * RSS_GROWTH_RATIO) as u64 + RSS_SLACK_KIB;
    println!(
        "soak: daemon RSS median {early} KiB after warm-up, {late} KiB at the end (limit {limit})"
    );
    assert!(late <= limit, "the daemon's memory grew from {early} KiB to {late} KiB over the soak");
    assert!(sessions >= 2, "the soak ran no session");
}
