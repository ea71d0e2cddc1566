//! Opening a long session in the web UI: a stored session of `--long-turns` turns (ten events
//! each: 100,000 events by default) against one of `--short-turns` (1,000 events), in one
//! browser run (Playwright driving Debian's Chromium, `e2e/open.bench.mjs`).
//!
//! The daemon runs in this process on SQLite with both sessions stored; a daemon before it has
//! stored the checkpoints of their views beside their logs, and stopped, and the store is
//! opened again. Each round opens each
//! session from the home page and times it until its last answer is on screen. The first
//! round's long session is the serving daemon's first read of it (from the stored checkpoints;
//! none in its memory yet); the rounds after it are reported apart. Then the long session is paged back from its end, as a
//! person scrolling up would, while this process's memory (`VmRSS`) is read every few pages.
//!
//! `cargo bench -p switchboard-server --bench open -- [--rounds 5] [--long-turns 10000]
//!  [--short-turns 100] [--pages N]` (`scripts/install-browser.sh` first).

#![allow(clippy::print_stdout, clippy::print_stderr, clippy::disallowed_methods, missing_docs)]

#[path = "support.rs"]
mod support;

#[path = "../tests/it/seed.rs"]
#[allow(dead_code)]
mod seed;

use std::io::BufRead;
use std::path::PathBuf;
use std::sync::Arc;

use switchboard_server::{AuthConfig, Daemon, DaemonConfig};
use switchboard_store::{SqliteStore, Store};

struct Options {
    rounds: usize,
    long_turns: usize,
    short_turns: usize,
    pages: Option<usize>,
}

fn parse_args() -> Options {
    let mut options = Options { rounds: 5, long_turns: 10_000, short_turns: 100, pages: None };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().and_then(|value| value.parse().ok());
        match arg.as_str() {
            "--rounds" => options.rounds = value().unwrap_or(options.rounds),
            "--long-turns" => options.long_turns = value().unwrap_or(options.long_turns),
            "--short-turns" => options.short_turns = value().unwrap_or(options.short_turns),
            "--pages" => options.pages = value(),
            _ => {} // `--bench` from cargo
        }
    }
    options
}

fn main() {
    let options = parse_args();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let chromium =
        std::env::var("SWITCHBOARD_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    if !std::path::Path::new(&chromium).exists()
        || !root.join("e2e/node_modules/playwright-core").exists()
    {
        eprintln!("open: needs Chromium ({chromium}) and e2e/node_modules: run scripts/install-browser.sh");
        std::process::exit(2);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (base, token) = runtime.block_on(async {
        let sqlite = Arc::new(SqliteStore::open(dir.path().join("db")).unwrap());
        let now = 1_795_000_000_000;
        eprintln!(
            "open: storing a session of {} events and one of {} …",
            options.short_turns * 10,
            options.long_turns * 10
        );
        seed::long_session(sqlite.as_ref(), "short", options.short_turns, now).await;
        seed::long_session(sqlite.as_ref(), "long", options.long_turns, now).await;
        sqlite.flush().await.unwrap();
        let store: Arc<dyn Store> = sqlite.clone();
        // A daemon brings the checkpoints of the sessions' views stored beside their logs up to
        // them (as at any start after a version that stored none), and stops; the daemon that
        // serves the browser has then never read either session.
        let started = std::time::Instant::now();
        let first = Daemon::open(store.clone(), DaemonConfig::default()).await.unwrap();
        first.view_checkpoints_settled().await;
        eprintln!(
            "open: a daemon stored the checkpoints of their views in {} ms, and stops",
            started.elapsed().as_millis()
        );
        first.stop_all().await;
        drop((first, store));
        // The store opened again, as a restarted daemon opens it (its read connections'
        // caches empty).
        sqlite.close();
        drop(sqlite);
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("db")).unwrap());
        let daemon = Daemon::open(store, DaemonConfig::default()).await.unwrap();
        let token = switchboard_server::auth::generate_token();
        let auth = AuthConfig::with_token(&token);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            switchboard_server::serve(listener, daemon, auth, std::future::pending()).await.unwrap()
        });
        (base, token)
    });
    let mut child = std::process::Command::new("node")
        .arg(root.join("e2e/open.bench.mjs"))
        .env("SWITCHBOARD_URL", &base)
        .env("SWITCHBOARD_TOKEN", &token)
        .env("CHROMIUM", &chromium)
        .env("ROUNDS", options.rounds.to_string())
        .env("SESSIONS", format!("short:{},long:{}", options.short_turns, options.long_turns))
        .env("MAX_PAGES", options.pages.map_or("Infinity".into(), |pages| pages.to_string()))
        .env("TMPDIR", dir.path())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("node runs");
    let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let (mut short, mut long, mut first_long) = (Vec::new(), Vec::new(), None);
    let mut paging = Vec::new();
    let mut pages_end = None;
    let before_paging = std::cell::Cell::new(None);
    for line in stdout.lines() {
        let Ok(line) = line else { break };
        eprintln!("  {line}");
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["open", id, round, ms] => {
                let ms: f64 = ms.parse().unwrap_or(f64::NAN);
                match (*id, *round) {
                    ("long", "1") => first_long = Some(ms),
                    ("long", _) => long.push(ms),
                    _ => short.push(ms),
                }
                before_paging.set(Some(support::status_kib("self", "VmRSS:") as f64 / 1024.0));
            }
            ["page", pages, first_seq] => paging.push((
                pages.parse::<usize>().unwrap_or(0),
                first_seq.parse::<u64>().unwrap_or(0),
                support::status_kib("self", "VmRSS:") as f64 / 1024.0,
            )),
            ["pages", "end", pages, ms] => {
                pages_end = Some((pages.parse::<usize>().unwrap_or(0), ms.parse().unwrap_or(0.0)))
            }
            _ => {}
        }
    }
    let status = child.wait().unwrap();
    drop(runtime);
    if !status.success() {
        eprintln!("open: the browser script failed ({status})");
        std::process::exit(1);
    }
    let (short_ms, long_ms) = (support::median(&mut short), support::median(&mut long));
    println!(
        "Opening a stored session in the web UI until its last answer is on screen (median of {} rounds; Chromium):\n",
        options.rounds
    );
    println!("| session | events | open ms | against the short one |");
    println!("|---|--:|--:|--:|");
    println!("| short | {} | {short_ms:.0} | 1.00x |", options.short_turns * 10);
    if let Some(first) = first_long {
        println!(
            "| long, the daemon's first read of it (from the checkpoints stored beside its log) | {} | {first:.0} | {:.2}x |",
            options.long_turns * 10,
            first / short_ms
        );
    }
    println!(
        "| long, each open after (from checkpoints of its view in memory) | {} | {long_ms:.0} | {:.2}x |",
        options.long_turns * 10,
        long_ms / short_ms
    );
    if let Some((pages, ms)) = pages_end {
        let rss: Vec<f64> = paging.iter().map(|(_, _, rss)| *rss).collect();
        let high = rss.iter().copied().fold(0.0, f64::max);
        let low = rss.iter().copied().fold(f64::INFINITY, f64::min);
        println!(
            "\nPaging the long session back: {pages} pages in {:.1} s; the daemon's RSS {:.0} MiB before, {low:.0}–{high:.0} MiB while paging ({} readings)",
            ms / 1000.0,
            before_paging.get().unwrap_or(0.0),
            rss.len()
        );
    }
}
