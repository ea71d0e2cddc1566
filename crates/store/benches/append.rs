//! The SQLite store's writer under a paced load like the daemon's: N sessions each appending
//! one ~300-byte line R times a second, every append awaited as the daemon's pump awaits it.
//! Prints the process's CPU per event (the store's work; the appending tasks themselves cost
//! little), the append round trip (p50 / p99 / max) and the WAL left at the end, as a Markdown
//! table; then the CPU of the store's own threads (the writer's folds and the checkpointer)
//! per event, which the appending tasks' noise does not reach.
//!
//! `cargo bench -p switchboard-store --bench append -- [--sessions N] [--rate R] [--seconds S]`

#![allow(clippy::print_stdout, clippy::disallowed_methods, missing_docs)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use switchboard_store::{EventRecord, MemoryStore, SessionRecord, SqliteStore, Store};

mod common;
use common::{arg, process_cpu_ns, stat_cpu_ns};

/// CPU time (ns) of this process's threads whose name starts with `prefix` (the kernel keeps
/// the first 15 bytes of a name: the store's writer and checkpointer both show as
/// `switchboard-sto`).
fn threads_cpu_ns(prefix: &str) -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return 0 };
    let mut total = 0;
    for task in tasks.flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if !comm.starts_with(prefix) {
            continue;
        }
        total += stat_cpu_ns(&task.path().join("stat"));
    }
    total
}

/// One row: the appends' CPU and round trips on `store`.
struct Row {
    events: usize,
    cpu_us_per_event: f64,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
}

async fn run(store: Arc<dyn Store>, sessions: usize, rate: f64, seconds: f64) -> Row {
    let ids: Vec<String> =
        (0..sessions).map(|index| format!("0198a3f2-7c1e-7d3a-9f00-{index:012}")).collect();
    for id in &ids {
        let record = SessionRecord {
            archived: false,
            node: None,
            id: id.clone(),
            claude_session_id: None,
            cwd: "/".into(),
            model: None,
            permission_mode: None,
            state: switchboard_store::RecordState::Working,
            title: None,
            cost_usd: 0.0,
            spent_usd: 0.0,
            created_ms: 0,
            updated_ms: 0,
            launch: Default::default(),
        };
        store.create_session(&record).await.unwrap();
    }
    let count = (rate * seconds).round() as u64;
    let interval = Duration::from_secs_f64(1.0 / rate);
    let latencies = Arc::new(Mutex::new(Vec::with_capacity(sessions * count as usize)));
    let cpu_before = process_cpu_ns();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for id in ids {
        let store = store.clone();
        let latencies = latencies.clone();
        tasks.push(tokio::spawn(async move {
            let mut ticks = tokio::time::interval(interval);
            for seq in 1..=count {
                ticks.tick().await;
                let payload = format!(
                    r#"{{"type":"stream_event","event":{{"type":"content_block_delta","index":0,"delta":{{"type":"text_delta","text":"t={}"}}}},"session_id":"{id}","parent_tool_use_id":null,"uuid":"0198a3f2-7c1e-7d3a-9f00-{seq:012}"}}"#,
                    started.elapsed().as_nanos()
                );
                let record = EventRecord {
                    session_id: id.clone(),
                    seq,
                    ts_ms: 0,
                    dir: "from_cli".into(),
                    kind: "line".into(),
                    payload,
                };
                let sent = Instant::now();
                store.append(&[record]).await.unwrap();
                let took = sent.elapsed().as_micros() as u64;
                latencies.lock().unwrap().push(took);
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let cpu = process_cpu_ns() - cpu_before;
    let mut latencies = latencies.lock().unwrap().clone();
    latencies.sort_unstable();
    let events = latencies.len().max(1);
    let at = |p: f64| latencies[((events as f64 * p) as usize).min(events - 1)] as f64 / 1000.0;
    Row {
        events,
        cpu_us_per_event: cpu as f64 / 1000.0 / events as f64,
        p50_ms: at(0.5),
        p99_ms: at(0.99),
        max_ms: at(1.0),
    }
}

fn main() {
    let sessions = arg("--sessions", 100.0) as usize;
    let rate = arg("--rate", 50.0);
    let seconds = arg("--seconds", 10.0);
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async move {
        println!(
            "{sessions} sessions × {rate} appends/s for {seconds} s ({} events/s), one event per append\n",
            sessions as f64 * rate
        );
        println!("| store | events | CPU µs/event | append p50 ms | p99 ms | max ms | WAL file MiB |");
        println!("|---|---:|---:|---:|---:|---:|---:|");
        // The appending tasks' own cost (ticks, formatting, wake-ups), for comparison.
        let memory = run(Arc::new(MemoryStore::new()), sessions, rate, seconds).await;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bench.db");
        let store = Arc::new(SqliteStore::open(&path).unwrap());
        let threads_before = threads_cpu_ns("switchboard-sto");
        let sqlite = run(store.clone(), sessions, rate, seconds).await;
        // What still waits is folded, so the threads' CPU covers every event.
        store.flush().await.unwrap();
        let threads = threads_cpu_ns("switchboard-sto") - threads_before;
        let events = sqlite.events;
        let wal_mib = std::fs::metadata(dir.path().join("bench.db-wal"))
            .map(|meta| meta.len() as f64 / 1048576.0)
            .unwrap_or(0.0);
        for (name, row, wal) in
            [("memory (the appending tasks alone)", memory, "-".to_owned()), ("SQLite", sqlite, format!("{wal_mib:.0}"))]
        {
            println!(
                "| {name} | {} | {:.1} | {:.2} | {:.2} | {:.2} | {wal} |",
                row.events, row.cpu_us_per_event, row.p50_ms, row.p99_ms, row.max_ms,
            );
        }
        println!(
            "\nThe store's writer and checkpointer threads: {:.2} µs of CPU per event ({} ms in all).",
            threads as f64 / 1000.0 / events.max(1) as f64,
            threads / 1_000_000
        );
        store.close();
    });
}
