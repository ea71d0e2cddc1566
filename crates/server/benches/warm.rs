//! Warm-pool benchmark: how long a new session takes from the request to its CLI's
//! `system/init`, cold (the daemon spawns the CLI) and warm (`serve --warm`: a CLI started
//! ahead takes the session), per CLI version, in one run, against the scripted fake API. Also
//! counts the API requests beyond the sessions' prompts, which warm CLIs would have made while
//! they started and waited (there must be none). Prints a
//! Markdown table.
//!
//! `cargo bench -p switchboard-server --bench warm -- [--samples N] [--versions 2.1.330,2.1.37]
//!  [--json]` (install the CLIs first: `scripts/install-clis.sh`).

#![allow(clippy::print_stdout, clippy::print_stderr, clippy::disallowed_methods, missing_docs)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use switchboard_server::{CreateSession, Daemon, DaemonConfig, Subscribed, WarmSpec};
use switchboard_store::{MemoryStore, Store};
use switchboard_testkit::{real_cli_of, CliSandbox, FakeApi, Scenario};

const WAIT: Duration = Duration::from_secs(120);

struct Args {
    samples: usize,
    versions: Vec<String>,
    json: bool,
}

fn parse_args() -> Args {
    let mut args =
        Args { samples: 8, versions: vec!["2.1.330".into(), "2.1.37".into()], json: false };
    let mut given = std::env::args().skip(1);
    while let Some(arg) = given.next() {
        match arg.as_str() {
            "--samples" => {
                args.samples = given.next().and_then(|n| n.parse().ok()).expect("--samples N")
            }
            "--versions" => {
                args.versions =
                    given.next().expect("--versions A,B").split(',').map(str::to_owned).collect()
            }
            "--json" => args.json = true,
            // `cargo bench` passes `--bench`.
            "--bench" => {}
            other => panic!("unknown argument {other} (--samples N, --versions A,B, --json)"),
        }
    }
    args
}

/// What one mode of one version measured.
struct Measured {
    /// Request to `system/init`, per session.
    ready: Vec<Duration>,
    /// Requests to the API beyond the sessions' prompts (made by CLIs before their first).
    idle_requests: usize,
}

/// Starts a daemon (`warm`: one CLI kept warm) and times `samples` sessions.
async fn measure(version: &str, samples: usize, warm: bool) -> Measured {
    let api = FakeApi::start(Scenario::new().fallback("ready.")).await.unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let config = DaemonConfig {
        claude: Some(real_cli_of(version)),
        env: sandbox.env(&api.base_url()).into_iter().collect(),
        clear_env: true,
        warm: if warm {
            vec![WarmSpec { cwd: sandbox.workdir(), model: None, count: 1 }]
        } else {
            Vec::new()
        },
        ..DaemonConfig::default()
    };
    let daemon = Daemon::open(store, config).await.unwrap();
    let mut pool = daemon.watch_warm();
    let mut ready = Vec::new();
    for _ in 0..samples {
        if warm {
            tokio::time::timeout(WAIT, pool.wait_for(|list| list[0].ready == 1))
                .await
                .expect("the pool warms up")
                .unwrap();
        }
        let request =
            CreateSession { prompt: Some("hello".into()), ..CreateSession::new(sandbox.workdir()) };
        let asked = Instant::now();
        let record = daemon.create(request).await.unwrap();
        let mut events = daemon.subscribe(&record.id, 0);
        let mut took = None;
        let mut was_warm = None;
        loop {
            let event = tokio::time::timeout(WAIT, events.next())
                .await
                .expect("the session goes on")
                .expect("the session's events")
                .unwrap();
            let Subscribed::Event(event) = event else { continue };
            let payload: Value = serde_json::from_str(&event.payload).unwrap();
            if payload["event"] == "started" {
                was_warm = payload["warm"].as_bool();
            }
            let line = &payload["line"];
            if took.is_none() && line["type"] == "system" && line["subtype"] == "init" {
                took = Some(asked.elapsed());
            }
            if line["type"] == "result" {
                break;
            }
        }
        assert_eq!(was_warm, Some(warm), "the session's CLI came from where it should");
        ready.push(took.expect("system/init before the result"));
        daemon.stop(&record.id, false).await.unwrap();
    }
    daemon.stop_all().await;
    // Each session asked the API one thing, its prompt: anything more came from CLIs while
    // they started and waited in the pool.
    let idle_requests = api.requests().len().saturating_sub(samples);
    Measured { ready, idle_requests }
}

fn median(samples: &[Duration]) -> Duration {
    let mut sorted = samples.to_vec();
    sorted.sort();
    sorted[sorted.len() / 2]
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = parse_args();
    let mut rows = Vec::new();
    for version in &args.versions {
        eprintln!(
            "claude {version}: {} cold sessions, then {} warm ones",
            args.samples, args.samples
        );
        let cold = measure(version, args.samples, false).await;
        let warm = measure(version, args.samples, true).await;
        rows.push(json!({
            "version": version,
            "cold_ms": ms(median(&cold.ready)),
            "warm_ms": ms(median(&warm.ready)),
            "warm_max_ms": ms(*warm.ready.iter().max().unwrap()),
            "ratio": median(&cold.ready).as_secs_f64() / median(&warm.ready).as_secs_f64(),
            "idle_requests": warm.idle_requests,
        }));
    }
    if args.json {
        println!("{}", Value::Array(rows));
        return;
    }
    println!(
        "\nRequest to `system/init`, median of {} sessions each (one run, 2 worker threads):\n",
        args.samples
    );
    println!(
        "| CLI | cold | warm | warm, slowest | cold / warm | API requests beyond the prompts |"
    );
    println!("|---|--:|--:|--:|--:|--:|");
    for row in rows {
        println!(
            "| {} | {:.0} ms | {:.0} ms | {:.0} ms | {:.1}x | {} |",
            row["version"].as_str().unwrap_or_default(),
            row["cold_ms"].as_f64().unwrap_or_default(),
            row["warm_ms"].as_f64().unwrap_or_default(),
            row["warm_max_ms"].as_f64().unwrap_or_default(),
            row["ratio"].as_f64().unwrap_or_default(),
            row["idle_requests"],
        );
    }
}
