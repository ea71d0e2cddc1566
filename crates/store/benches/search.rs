//! The search index at two sizes, in one run: 1,000 and 100,000 indexed events (every event an
//! entry: a prompt, an answer, a tool call with its file, a decision or a turn, a hundred to a
//! session), on SQLite and, when a PostgreSQL server can be started here, on PostgreSQL.
//!
//! Each size holds the same few entries the questions find (five sessions that touched
//! `deploy.sh`, five denials of the nightly schedule's `rm`, five `rm`s in a worktree, ten
//! answers with `Fredville`), among others that do not match: an index finds them in about the
//! same time whatever else is kept; a scan would take a hundred times as long. Prints, per
//! store, the CPU time a written entry costs the process (the store's writer and the index
//! together), then each query's median time (of 21) at both sizes and their ratio (goal: at
//! most 2x). A query that adds up everything it matches (`group:`) is printed too: its work
//! follows what it adds up, not an index.
//!
//! `cargo bench -p switchboard-store --bench search -- [--small N] [--large N]`

#![allow(clippy::print_stdout, clippy::disallowed_methods, missing_docs)]

use std::time::Instant;

use switchboard_store::{
    EntryKind, GroupBy, PostgresStore, Search, SearchEntry, SearchQuery, SessionRecord,
    SqliteStore, Store, Touched,
};

mod common;
use common::{arg, process_cpu_ns};

/// Events a session holds in the made-up log.
const PER_SESSION: usize = 100;

/// The entries of `events` events: a hundred a session, the questions' few in the first
/// sessions (the same in every size), the rest matching none of them.
fn entries(events: usize, now_ms: u64) -> Vec<SearchEntry> {
    let mut all = Vec::with_capacity(events);
    for n in 0..events {
        let session = n / PER_SESSION;
        let seq = (n % PER_SESSION) as u64 + 1;
        // Spread over the last 30 days, newest last.
        let ts_ms = now_ms - 30 * 86_400_000 + (n as u64 * 30 * 86_400_000 / events as u64);
        let model = if session.is_multiple_of(2) { "claude-opus-5-5" } else { "claude-sonnet-4-5" };
        let mut entry = SearchEntry {
            session_id: format!("0198a3f2-7c1e-7d3a-9f00-{session:012}"),
            origin: Some("api".into()),
            token: Some("admin".into()),
            model: Some(model.into()),
            project: format!("/src/project-{}", session % 7),
            ..SearchEntry::new(
                EntryKind::Answer,
                seq,
                ts_ms,
                format!("Looked at module {n}; the tests pass and the change is small."),
            )
        };
        let special = session < 5 && seq <= 3;
        match (n % 10, special) {
            // The questions' few: session 0-4 touched deploy.sh, was a nightly run denied its
            // rm, ran rm in a worktree, and answered with Fredville.
            (_, true) => match seq {
                1 => {
                    entry.kind = EntryKind::ToolCall;
                    entry.tool = Some("Edit".into());
                    entry.paths =
                        vec![Touched { path: "/src/project-1/deploy.sh".into(), wrote: true }];
                    entry.text = "/src/project-1/deploy.sh".into();
                    entry.written = Some("echo deployed\n".into());
                }
                2 => {
                    entry.kind = EntryKind::Decision;
                    entry.tool = Some("Bash".into());
                    entry.command = Some("rm -rf tmp-cache".into());
                    entry.decision = Some("deny".into());
                    entry.decided_by = Some("policy".into());
                    entry.origin = Some("schedule".into());
                    entry.run = Some("schedule:nightly".into());
                    entry.text = "rm -rf tmp-cache".into();
                }
                _ => {
                    entry.kind = EntryKind::ToolCall;
                    entry.tool = Some("Bash".into());
                    entry.command = Some("rm -f build/stale.log".into());
                    entry.worktree = true;
                    entry.text = "rm -f build/stale.log The capital is Fredville".into();
                }
            },
            (0, _) => {
                entry.kind = EntryKind::Prompt;
                entry.text = format!("Please tidy module {n} and run its tests");
            }
            (1..=3, _) => {
                entry.kind = EntryKind::ToolCall;
                entry.tool = Some(["Read", "Edit", "Bash"][n % 3].into());
                let path = format!("/src/project-{}/src/module_{n}.rs", session % 7);
                entry.paths = vec![Touched { path: path.clone(), wrote: n % 3 == 1 }];
                if n % 3 == 2 {
                    entry.command = Some(format!("cargo test --lib module_{n}"));
                }
                entry.text = path;
            }
            (4..=5, _) => {
                entry.kind = EntryKind::Decision;
                entry.tool = Some("Bash".into());
                entry.decision = Some("allow".into());
                entry.decided_by = Some("policy".into());
                entry.text = "allowed by the policy default".into();
            }
            (9, _) => {
                entry.kind = EntryKind::Turn;
                entry.cost_usd = 0.0125;
                entry.text = String::new();
            }
            _ => {}
        }
        all.push(entry);
    }
    all
}

/// The questions, as queries.
fn queries(now_ms: u64) -> Vec<(&'static str, SearchQuery, Option<GroupBy>)> {
    let week = now_ms - 7 * 86_400_000;
    let month = now_ms - 31 * 86_400_000;
    let base = SearchQuery { limit: 50, ..SearchQuery::default() };
    vec![
        (
            "file:deploy.sh since:31d",
            SearchQuery { path: Some("deploy.sh".into()), since_ms: Some(month), ..base.clone() },
            None,
        ),
        (
            "decision:deny schedule:nightly",
            SearchQuery {
                decision: Some("deny".into()),
                run: Some("schedule:nightly".into()),
                ..base.clone()
            },
            None,
        ),
        (
            "command:rm worktree:yes",
            SearchQuery { command: Some("rm".into()), worktree: Some(true), ..base.clone() },
            None,
        ),
        ("Fredville", SearchQuery { words: vec!["Fredville".into()], ..base.clone() }, None),
        (
            "wrote:src/project-1/deploy.sh (blame's)",
            SearchQuery {
                kind: Some(EntryKind::ToolCall),
                path: Some("project-1/deploy.sh".into()),
                wrote: true,
                limit: 25,
                ..base.clone()
            },
            None,
        ),
        (
            "kind:call (the newest page)",
            SearchQuery { kind: Some(EntryKind::ToolCall), ..base.clone() },
            None,
        ),
        (
            "decision:deny schedule:nightly group:project (adds up the same few)",
            SearchQuery {
                decision: Some("deny".into()),
                run: Some("schedule:nightly".into()),
                ..base.clone()
            },
            Some(GroupBy::Project),
        ),
        (
            "kind:turn since:7d group:project (adds up)",
            SearchQuery { kind: Some(EntryKind::Turn), since_ms: Some(week), ..base.clone() },
            Some(GroupBy::Project),
        ),
    ]
}

/// Writes `events` entries into a fresh `store` (its sessions made first); CPU µs an entry.
async fn fill(store: &dyn Store, events: usize, now_ms: u64) -> f64 {
    for session in 0..events.div_ceil(PER_SESSION) {
        let record = SessionRecord {
            archived: false,
            node: None,
            id: format!("0198a3f2-7c1e-7d3a-9f00-{session:012}"),
            claude_session_id: None,
            cwd: "/src".into(),
            model: None,
            permission_mode: None,
            state: switchboard_store::RecordState::Exited,
            title: None,
            cost_usd: 0.0,
            spent_usd: 0.0,
            created_ms: 0,
            updated_ms: 0,
            launch: Default::default(),
        };
        store.create_session(&record).await.unwrap();
    }
    let index = store.search_index().unwrap();
    let all = entries(events, now_ms);
    let before = process_cpu_ns();
    // As the daemon's writer writes: a few hundred at a time, with their sessions' marks.
    for chunk in all.chunks(500) {
        let marks: Vec<(String, u64)> =
            chunk.iter().map(|entry| (entry.session_id.clone(), entry.seq)).collect();
        index.index(chunk, &marks).await.unwrap();
    }
    (process_cpu_ns() - before) as f64 / 1000.0 / events as f64
}

/// A query's median time (of 21), in milliseconds; and how many it found.
async fn time(index: &dyn Search, query: &SearchQuery, group: Option<GroupBy>) -> (f64, usize) {
    let mut times = Vec::new();
    let mut found = 0;
    for _ in 0..21 {
        let started = Instant::now();
        found = match group {
            Some(by) => {
                index.group(query, by).await.unwrap().iter().map(|g| g.entries as usize).sum()
            }
            None => index.search(query).await.unwrap().len(),
        };
        times.push(started.elapsed());
    }
    times.sort();
    (times[10].as_secs_f64() * 1000.0, found)
}

async fn measure(
    name: &str,
    small: (&dyn Store, f64),
    large: (&dyn Store, f64),
    sizes: (usize, usize),
    now_ms: u64,
) {
    // The small fill is over before the clock's tick (10 ms) sees it: the large one's cost.
    println!(
        "\n**{name}**: a written entry costs {:.1} µs of CPU (over the {} of the larger size).\n",
        large.1, sizes.1
    );
    println!("| query | found | {} events, ms | {} events, ms | ratio |", sizes.0, sizes.1);
    println!("|---|---:|---:|---:|---:|");
    for (label, query, group) in queries(now_ms) {
        let (small_ms, small_found) = time(small.0.search_index().unwrap(), &query, group).await;
        let (large_ms, large_found) = time(large.0.search_index().unwrap(), &query, group).await;
        let found = if small_found == large_found {
            small_found.to_string()
        } else {
            format!("{small_found} / {large_found}")
        };
        println!(
            "| `{label}` | {found} | {small_ms:.2} | {large_ms:.2} | {:.2}x |",
            large_ms / small_ms.max(1e-6)
        );
    }
}

fn main() {
    let small = arg("--small", 1_000);
    let large = arg("--large", 100_000);
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async move {
        let now_ms = switchboard_store::now_ms();
        println!("The search index at {small} and {large} events (every event an entry), medians of 21 runs.");
        let dir = tempfile::tempdir().unwrap();
        let one = SqliteStore::open(dir.path().join("small.db")).unwrap();
        let two = SqliteStore::open(dir.path().join("large.db")).unwrap();
        let small_cost = fill(&one, small, now_ms).await;
        let large_cost = fill(&two, large, now_ms).await;
        measure("SQLite", (&one, small_cost), (&two, large_cost), (small, large), now_ms).await;
        one.close();
        two.close();
        match switchboard_testkit::servers::Postgres::start() {
            Some(server) => {
                let (admin, connection) =
                    tokio_postgres::connect(&server.url(), tokio_postgres::NoTls).await.unwrap();
                tokio::spawn(connection);
                for database in ["small", "large"] {
                    let create = format!("CREATE DATABASE {database} ENCODING 'UTF8'");
                    admin.batch_execute(&create).await.unwrap();
                }
                let one = PostgresStore::connect(&server.url_of("small")).await;
                let two = PostgresStore::connect(&server.url_of("large")).await;
                match (one, two) {
                    (Ok(one), Ok(two)) => {
                        let small_cost = fill(&one, small, now_ms).await;
                        let large_cost = fill(&two, large, now_ms).await;
                        // Fresh tables: their statistics gathered, as autovacuum would.
                        for database in ["small", "large"] {
                            let url = server.url_of(database);
                            let (client, connection) =
                                tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
                            tokio::spawn(connection);
                            client.batch_execute("ANALYZE").await.unwrap();
                        }
                        // Fresh tables: their statistics gathered, as autovacuum would.
                        for database in ["small", "large"] {
                            let (client, connection) = tokio_postgres::connect(&server.url_of(database), tokio_postgres::NoTls).await.unwrap();
                            tokio::spawn(connection);
                            client.batch_execute("ANALYZE").await.unwrap();
                        }
                        measure("PostgreSQL (this process's CPU; the server's own is not counted)", (&one, small_cost), (&two, large_cost), (small, large), now_ms).await;
                    }
                    (Err(error), _) | (_, Err(error)) => println!("\nPostgreSQL: {error}"),
                }
            }
            None => println!("\nPostgreSQL: no server could be started here (scripts/install-servers.sh installs one)."),
        }
    });
}
