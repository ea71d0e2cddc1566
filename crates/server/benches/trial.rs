//! A policy's dry run over stored sessions (`Daemon::trial`, `POST /api/policy/test`): its run
//! time and memory at 10,000 and 100,000 stored tool calls, in one run, to show that its time
//! grows with the calls it replays and its memory does not.
//!
//! Each size is a SQLite store of sessions of 100 calls each, written first (not timed): a
//! session's `init`, then per call the assistant's `tool_use` line, its decision (a rule, a
//! person, the CLI on its own, in turn) and the tool's result, the calls a mix of shell
//! commands (some with words a `Read` rule holds), reads and edits. The candidate policy has
//! allow, deny and ask rules, a `Read(.env)` deny and a rule on origin. What is timed is the
//! daemon's dry run over every session: reading the logs in pages, replaying them through the
//! projection, deciding each call again and counting it.
//!
//! `cargo bench -p switchboard-server --bench trial -- [--calls 10000,100000] [--json]`

#![allow(clippy::print_stdout, clippy::print_stderr, clippy::disallowed_methods, missing_docs)]

#[path = "support.rs"]
mod support;

use std::sync::Arc;
use std::time::Instant;

use serde_json::json;
use switchboard_server::daemon::TrialFilter;
use switchboard_server::{Daemon, DaemonConfig};
use switchboard_session::{Behavior, DecidedBy, SessionEvent};
use switchboard_store::{EventRecord, Launch, RecordState, SessionRecord, SqliteStore, Store};

const PER_SESSION: usize = 100;

const CANDIDATE: &str = r#"
[permissions]
allow = ["Bash(cargo:*)", "Bash(git status:*)", "Read", "Edit(src/**)"]
deny = ["Bash(rm:*)", "Read(.env)"]
ask = ["Bash(git push:*)"]
default = "ask"

[[permissions.when]]
origin = ["agent", "trigger"]
ask = ["Bash"]
"#;

fn line(session: &str, seq: u64, value: serde_json::Value) -> EventRecord {
    EventRecord {
        session_id: session.to_owned(),
        seq,
        ts_ms: 1_790_000_000_000 + seq,
        dir: "from_cli".into(),
        kind: "line".into(),
        payload: json!({"direction": "from_cli", "line": value, "event": "line"}).to_string(),
    }
}

/// One session's log: `init`, then each call's block, decision and result.
fn session_log(session: &str) -> Vec<EventRecord> {
    let mut events = Vec::with_capacity(PER_SESSION * 3 + 1);
    let mut seq = 1;
    events.push(line(
        session,
        seq,
        json!({"type": "system", "subtype": "init", "session_id": "c", "cwd": "/work/app", "tools": ["Bash"]}),
    ));
    for n in 0..PER_SESSION {
        let id = format!("toolu_{session}_{n}");
        let (tool, input) = match n % 6 {
            0 => ("Bash", json!({"command": format!("cargo test -p crate{n}")})),
            1 => ("Bash", json!({"command": "cat .env | grep KEY"})),
            2 => ("Read", json!({"file_path": format!("/work/app/src/m{n}.rs")})),
            3 => (
                "Edit",
                json!({"file_path": "/work/app/src/lib.rs", "old_string": "a", "new_string": "b"}),
            ),
            4 => ("Bash", json!({"command": "git push origin main"})),
            _ => ("Bash", json!({"command": format!("rm -rf target/t{n} && ls")})),
        };
        seq += 1;
        events.push(line(
            session,
            seq,
            json!({"type": "assistant", "message": {"id": format!("m{n}"), "type": "message", "role": "assistant",
                "model": "m", "content": [{"type": "tool_use", "id": id, "name": tool, "input": input}]},
                "parent_tool_use_id": null, "session_id": "c", "uuid": format!("a{n}")}),
        ));
        let by = match n % 3 {
            0 => DecidedBy::Cli,
            1 => DecidedBy::Policy { rule: Some("Bash".into()) },
            _ => DecidedBy::Person { who: "alice, token admin (web UI)".into() },
        };
        let decided =
            SessionEvent::decided(&format!("r{n}"), tool, Behavior::Allow, by, String::new())
                .with_tool_use_id(Some(id.clone()))
                .with_origin(Some(switchboard_session::TurnOrigin::Person));
        seq += 1;
        events.push(EventRecord {
            session_id: session.to_owned(),
            seq,
            ts_ms: 1_790_000_000_000 + seq,
            dir: "switchboard".into(),
            kind: decided.kind().into(),
            payload: decided.to_json_text(),
        });
        seq += 1;
        events.push(line(
            session,
            seq,
            json!({"type": "user", "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": "ok"}]},
                "parent_tool_use_id": null, "session_id": "c", "uuid": format!("u{n}")}),
        ));
    }
    events
}

struct Row {
    calls: u64,
    sessions: usize,
    seconds: f64,
    cpu_us_per_call: f64,
    rss_growth_mib: f64,
}

async fn measure(calls: usize) -> Row {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(dir.path().join("db")).unwrap());
    let sessions = calls.div_ceil(PER_SESSION);
    for s in 0..sessions {
        let id = format!("s{s:06}");
        let record = SessionRecord {
            id: id.clone(),
            claude_session_id: None,
            cwd: "/work/app".into(),
            model: None,
            permission_mode: None,
            state: RecordState::Exited,
            title: None,
            cost_usd: 0.0,
            spent_usd: 0.0,
            created_ms: 1_790_000_000_000 + s as u64,
            updated_ms: 1_790_000_000_000 + s as u64,
            launch: Launch { cwd: "/work/app".into(), ..Launch::default() },
            archived: false,
            node: None,
        };
        store.create_session(&record).await.unwrap();
        store.append(&session_log(&id)).await.unwrap();
    }
    let store: Arc<dyn Store> = store;
    let daemon = Daemon::open(store, DaemonConfig::default()).await.unwrap();
    let (progress, mut told) = tokio::sync::mpsc::channel(16);
    tokio::spawn(async move { while told.recv().await.is_some() {} });
    let rss_before = support::status_kib("self", "VmRSS:");
    // The most the process holds while the dry run goes, sampled every 5 ms.
    let peak = Arc::new(std::sync::atomic::AtomicU64::new(rss_before));
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let (peak, done) = (peak.clone(), done.clone());
        std::thread::spawn(move || {
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                peak.fetch_max(
                    support::status_kib("self", "VmRSS:"),
                    std::sync::atomic::Ordering::Relaxed,
                );
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        })
    };
    let cpu = support::own_cpu_micros();
    let started = Instant::now();
    let slot = daemon.trial_slot().unwrap();
    let report = daemon.trial(slot, CANDIDATE, &TrialFilter::default(), &progress).await.unwrap();
    let seconds = started.elapsed().as_secs_f64();
    let cpu = support::own_cpu_micros() - cpu;
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    sampler.join().unwrap();
    let rss_after = peak.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(report.headline.calls, calls as u64, "every call replayed");
    Row {
        calls: report.headline.calls,
        sessions,
        seconds,
        cpu_us_per_call: cpu as f64 / calls as f64,
        rss_growth_mib: rss_after.saturating_sub(rss_before) as f64 / 1024.0,
    }
}

fn main() {
    let mut sizes = vec![10_000usize, 100_000];
    let mut json_out = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--calls" => {
                sizes = args
                    .next()
                    .expect("--calls A,B")
                    .split(',')
                    .map(|n| n.parse().expect("a number of calls"))
                    .collect()
            }
            "--json" => json_out = true,
            "--bench" => {}
            other => panic!("unknown argument {other}"),
        }
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let rows: Vec<Row> = sizes.iter().map(|&calls| runtime.block_on(measure(calls))).collect();
    let first = rows[0].cpu_us_per_call;
    if json_out {
        let rows: Vec<_> = rows
            .iter()
            .map(|row| {
                json!({"calls": row.calls, "sessions": row.sessions, "seconds": row.seconds,
                "cpu_us_per_call": row.cpu_us_per_call, "ratio": row.cpu_us_per_call / first,
                "rss_growth_mib": row.rss_growth_mib})
            })
            .collect();
        println!("{}", json!(rows));
        return;
    }
    println!("| stored calls | sessions | wall s | CPU µs/call | µs/call vs the first | RSS growth during the run, MiB |");
    println!("|---:|---:|---:|---:|---:|---:|");
    for row in &rows {
        println!(
            "| {} | {} | {:.2} | {:.1} | {:.2}x | {:.1} |",
            row.calls,
            row.sessions,
            row.seconds,
            row.cpu_us_per_call,
            row.cpu_us_per_call / first,
            row.rss_growth_mib
        );
    }
}
