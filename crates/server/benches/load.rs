//! Load benchmark: N simulated CLIs (`fake-claude`) stream `stream_event` lines at R lines/s
//! each; M WebSocket subscribers each follow every session. Measured side by side with a
//! minimal forwarder (tokio-tungstenite, broadcast, no persistence) in the same run, each in
//! its own process: delivered messages/s, p50/p99 latency from the CLI writing a line to a
//! subscriber reading it, loss, CPU-µs per delivered message, peak RSS. Then the daemon's
//! memory per idle session and per finished one. Prints Markdown tables. (The relay's own
//! bench, CLIs at `/` and frontends at `/ws` in four load shapes, is `benches/relay.rs`.)
//!
//! With `--faces`, the subscribers' faces instead, under the same load and in one run: the
//! WebSocket's stored events, the WebSocket's view (`?view=true`, the projection's updates) and
//! gRPC's `Subscribe` (the same updates, typed), with gRPC's CPU per message over each.
//!
//! With `--fleet`, several daemons on one PostgreSQL and one NATS (real servers, started by the
//! bench: `scripts/install-servers.sh`): `--nodes N` daemons, `--sessions` each, every session
//! followed by `--subscribers` WebSockets on the *next* node, so that every line crosses the
//! bus; against one daemon on the same PostgreSQL with its subscribers on itself. The nodes
//! share one process (the CPU per line is all of theirs); NATS's own CPU is counted apart.
//!
//! With `--stores`, one daemon under the same load on SQLite, then on PostgreSQL (a real
//! server started by the bench), with the CPU per line of each and PostgreSQL's own.
//!
//! `cargo bench -p switchboard-server --bench load -- [--sessions N] [--rate R]
//!  [--subscribers M] [--seconds S] [--idle K] [--faces] [--fleet [--nodes N]] [--stores]`
//! (build fake-claude first: `cargo build --release -p switchboard-testkit --bins`).

#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    clippy::disallowed_methods,
    clippy::result_large_err,
    missing_docs
)]

#[path = "support.rs"]
mod support;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use switchboard_server::{AuthConfig, CreateSession, Daemon, DaemonConfig};
use switchboard_store::{SqliteStore, Store};
use tokio::io::AsyncBufReadExt;
use tokio::sync::broadcast;
use tokio_tungstenite::tungstenite::Message as WsMessage;

#[derive(Debug, Clone)]
struct Params {
    sessions: usize,
    rate: f64,
    subscribers: usize,
    seconds: f64,
    idle: usize,
    nodes: usize,
    /// The PostgreSQL store's group wait in ms (`None`: its default).
    group_wait_ms: Option<u64>,
}

impl Params {
    fn lines_per_session(&self) -> u64 {
        (self.rate * self.seconds).round() as u64
    }

    fn args(&self) -> Vec<String> {
        vec![
            "--sessions".into(),
            self.sessions.to_string(),
            "--rate".into(),
            self.rate.to_string(),
            "--subscribers".into(),
            self.subscribers.to_string(),
            "--seconds".into(),
            self.seconds.to_string(),
            "--idle".into(),
            self.idle.to_string(),
            "--nodes".into(),
            self.nodes.to_string(),
        ]
        .into_iter()
        .chain(
            self.group_wait_ms
                .map(|ms| ["--group-wait".into(), ms.to_string()])
                .into_iter()
                .flatten(),
        )
        .collect()
    }
}

fn parse_args() -> (Option<String>, Params) {
    let mut params = Params {
        sessions: 100,
        rate: 50.0,
        subscribers: 10,
        seconds: 10.0,
        idle: 1000,
        nodes: 3,
        group_wait_ms: None,
    };
    let mut child = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().unwrap_or_default();
        match arg.as_str() {
            "--child" => child = Some(value()),
            "--sessions" => params.sessions = value().parse().unwrap_or(params.sessions),
            "--rate" => params.rate = value().parse().unwrap_or(params.rate),
            "--subscribers" => params.subscribers = value().parse().unwrap_or(params.subscribers),
            "--seconds" => params.seconds = value().parse().unwrap_or(params.seconds),
            "--idle" => params.idle = value().parse().unwrap_or(params.idle),
            "--nodes" => params.nodes = value().parse().unwrap_or(params.nodes).max(1),
            "--group-wait" => params.group_wait_ms = value().parse().ok(),
            _ => {} // `--bench` and friends from cargo
        }
    }
    (child, params)
}

fn fake_claude() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let mut dir = exe.parent().unwrap().to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    for candidate in [
        dir.join("fake-claude"),
        dir.join("../release/fake-claude"),
        dir.join("../debug/fake-claude"),
    ] {
        if candidate.exists() {
            return candidate;
        }
    }
    panic!("fake-claude is not built: run `cargo build --release -p switchboard-testkit --bins`");
}

fn script(dir: &std::path::Path, params: &Params) -> PathBuf {
    let path = dir.join("stream.json");
    let steps = json!([
        {"expect": "control_request", "subtype": "initialize"}, {"reply": {}},
        {"expect": "user"},
        // A permission request every second or so: its decision is timed as well.
        {"stream_lines": {"rate": params.rate, "count": params.lines_per_session(),
            "ask_every": params.rate.round().max(1.0) as u64}},
        {"turn": "done"},
        {"wait_eof": true},
    ]);
    std::fs::write(&path, steps.to_string()).unwrap();
    path
}

fn now_ns() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
}

/// How long each decision on a permission request took to reach a subscriber, from the CLI
/// asking (µs): the event that used to wait for a session record's write.
static DECIDED: std::sync::Mutex<Vec<u64>> = std::sync::Mutex::new(Vec::new());

/// The `t=` timestamp of a streamed line inside a frame, if it is one.
fn sent_at(text: &str) -> Option<u128> {
    let start = text.find("\"t=")? + 3;
    let end = text[start..].find('"')? + start;
    text[start..end].parse().ok()
}

/// Subscribers: each connects to every URL and records latencies until it has `expected`
/// streamed lines or the deadline passes. Returns the count, the latencies (µs), and when the
/// last line arrived (so lines that never come do not stretch the throughput window).
async fn run_subscribers(
    urls: Vec<String>,
    subscribers: usize,
    expected_per_socket: u64,
    deadline: Instant,
    connected: Arc<tokio::sync::Barrier>,
    first_frame: bool,
) -> (u64, Vec<u64>, Instant) {
    let delivered = Arc::new(AtomicU64::new(0));
    let last_arrival = Arc::new(std::sync::Mutex::new(Instant::now()));
    let mut tasks = Vec::new();
    for _ in 0..subscribers {
        for url in &urls {
            let url = url.clone();
            let delivered = delivered.clone();
            let last_arrival = last_arrival.clone();
            let connected = connected.clone();
            tasks.push(tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(expected_per_socket as usize);
                // Small read buffers for the clients (tungstenite zeroes the whole buffer per read).
                let config = tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
                    .read_buffer_size(8 * 1024);
                let (mut socket, _) =
                    tokio_tungstenite::connect_async_with_config(url.as_str(), Some(config), false)
                        .await
                        .unwrap();
                // Measure only once every socket is up (and, where the server replays history
                // first, has had its first frame): a late socket reads the first lines from
                // history, and their age would count as latency of the live path.
                if first_frame {
                    let _ = socket.next().await;
                }
                connected.wait().await;
                let mut seen = 0;
                while seen < expected_per_socket {
                    let frame = match tokio::time::timeout_at(deadline.into(), socket.next()).await
                    {
                        Ok(Some(Ok(frame))) => frame,
                        _ => break,
                    };
                    if let WsMessage::Text(text) = frame {
                        // A decision on a stamped permission request: timed on its own.
                        if text.contains("\"permission_decided\"") {
                            if let (Some(sent), Ok(mut decided)) = (sent_at(&text), DECIDED.lock())
                            {
                                decided.push(((now_ns().saturating_sub(sent)) / 1000) as u64);
                            }
                            continue;
                        }
                        // Only the streamed lines count (not the requests, nor our answers).
                        if !text.contains("text_delta") {
                            continue;
                        }
                        if let Some(sent) = sent_at(&text) {
                            latencies.push(((now_ns().saturating_sub(sent)) / 1000) as u64);
                            seen += 1;
                            delivered.fetch_add(1, Ordering::Relaxed);
                            if let Ok(mut last) = last_arrival.lock() {
                                *last = (*last).max(Instant::now());
                            }
                        }
                    }
                }
                let _ = socket.close(None).await;
                latencies
            }));
        }
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap_or_default());
    }
    let last = last_arrival.lock().map(|last| *last).unwrap_or_else(|_| Instant::now());
    (delivered.load(Ordering::Relaxed), all, last)
}

/// Connects the subscribers (with `first_frame`, waits for each one's first frame: the daemon
/// replays history before the live tail), starts the streams with `start`, and waits for
/// every line (or the deadline). Returns deliveries, latencies (µs), CPU µs and the seconds
/// from the start to the last delivery.
async fn drive(
    urls: Vec<String>,
    params: &Params,
    first_frame: bool,
    start: impl std::future::Future<Output = ()>,
) -> (u64, Vec<u64>, u64, f64) {
    let deadline = Instant::now() + Duration::from_secs_f64(params.seconds * 3.0 + 30.0);
    let connected = Arc::new(tokio::sync::Barrier::new(urls.len() * params.subscribers + 1));
    let subscribers = tokio::spawn(run_subscribers(
        urls,
        params.subscribers,
        params.lines_per_session(),
        deadline,
        connected.clone(),
        first_frame,
    ));
    // Start once every subscriber is connected.
    connected.wait().await;
    let cpu_start = support::own_cpu_micros();
    let started = Instant::now();
    start.await;
    let (delivered, latencies, last) = subscribers.await.unwrap();
    let wall = last.saturating_duration_since(started).as_secs_f64().max(0.001);
    (delivered, latencies, support::own_cpu_micros() - cpu_start, wall)
}

fn report(
    name: &str,
    params: &Params,
    delivered: u64,
    mut latencies: Vec<u64>,
    cpu: u64,
    wall: f64,
) -> Value {
    latencies.sort_unstable();
    let percentile = |p: f64| {
        latencies
            .get(((latencies.len() as f64 * p) as usize).min(latencies.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0)
    };
    let expected = params.lines_per_session() * params.sessions as u64 * params.subscribers as u64;
    let mut decided = DECIDED.lock().map(|decided| decided.clone()).unwrap_or_default();
    decided.sort_unstable();
    let decided_p99 = decided
        .get(((decided.len() as f64 * 0.99) as usize).min(decided.len().saturating_sub(1)))
        .map(|&us| us as f64 / 1000.0);
    json!({
        "decisions": decided.len(),
        "decided_p99_ms": decided_p99,
        "name": name,
        "delivered": delivered,
        "expected": expected,
        "lost": expected.saturating_sub(delivered),
        "per_second": delivered as f64 / wall,
        "p50_ms": percentile(0.50) as f64 / 1000.0,
        "p99_ms": percentile(0.99) as f64 / 1000.0,
        "cpu_us_per_message": cpu as f64 / delivered.max(1) as f64,
        "peak_rss_mib": support::status_kib("self", "VmHWM:") as f64 / 1024.0,
    })
}

/// The daemon: sessions started in-process, subscribers over its WebSocket API. With
/// `memory`, on the in-memory store (what persistence costs, by difference).
async fn child_daemon(params: Params, memory: bool) -> Value {
    child_face(params, memory, Face::Events).await
}

/// How the subscribers follow the sessions.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Face {
    /// The WebSocket, stored events.
    Events,
    /// The WebSocket, the view's updates.
    View,
    /// gRPC `Subscribe`.
    Grpc,
}

/// gRPC subscribers: as [`run_subscribers`], each a connection of its own calling `Subscribe`
/// on every session.
async fn run_grpc_subscribers(
    address: std::net::SocketAddr,
    ids: Vec<String>,
    subscribers: usize,
    expected_per_stream: u64,
    deadline: Instant,
    connected: Arc<tokio::sync::Barrier>,
) -> (u64, Vec<u64>, Instant) {
    use switchboard_server::grpc::pb;
    use switchboard_server::grpc::pb::session_event::Event;
    let delivered = Arc::new(AtomicU64::new(0));
    let last_arrival = Arc::new(std::sync::Mutex::new(Instant::now()));
    let mut tasks = Vec::new();
    for _ in 0..subscribers {
        for id in &ids {
            let id = id.clone();
            let delivered = delivered.clone();
            let last_arrival = last_arrival.clone();
            let connected = connected.clone();
            tasks.push(tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(expected_per_stream as usize);
                let channel = tonic::transport::Endpoint::from_shared(format!("http://{address}"))
                    .unwrap()
                    .connect()
                    .await
                    .unwrap();
                let mut client = pb::switchboard_client::SwitchboardClient::new(channel);
                let mut stream = client
                    .subscribe(pb::SubscribeRequest { id, after_seq: 0 })
                    .await
                    .unwrap()
                    .into_inner();
                // Its first event: history is replayed before the live tail.
                let _ = stream.message().await;
                connected.wait().await;
                let mut seen = 0;
                while seen < expected_per_stream {
                    let event =
                        match tokio::time::timeout_at(deadline.into(), stream.message()).await {
                            Ok(Ok(Some(event))) => event,
                            _ => break,
                        };
                    let stamp =
                        |text: &str| text.strip_prefix("t=").and_then(|ns| ns.parse::<u128>().ok());
                    match event.event {
                        Some(Event::PermissionDecision(decision)) => {
                            if let (Some(sent), Ok(mut decided)) =
                                (stamp(&decision.request_id), DECIDED.lock())
                            {
                                decided.push(((now_ns().saturating_sub(sent)) / 1000) as u64);
                            }
                        }
                        Some(Event::TextDelta(delta)) => {
                            if let Some(sent) = stamp(&delta.text) {
                                latencies.push(((now_ns().saturating_sub(sent)) / 1000) as u64);
                                seen += 1;
                                delivered.fetch_add(1, Ordering::Relaxed);
                                if let Ok(mut last) = last_arrival.lock() {
                                    *last = (*last).max(Instant::now());
                                }
                            }
                        }
                        _ => {}
                    }
                }
                latencies
            }));
        }
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap_or_default());
    }
    let last = last_arrival.lock().map(|last| *last).unwrap_or_else(|_| Instant::now());
    (delivered.load(Ordering::Relaxed), all, last)
}

/// The daemon with subscribers on `face`.
async fn child_face(params: Params, memory: bool, face: Face) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let script = script(dir.path(), &params);
    let store: Arc<dyn Store> = if memory {
        Arc::new(switchboard_store::MemoryStore::default())
    } else {
        Arc::new(SqliteStore::open(dir.path().join("db")).unwrap())
    };
    let config = DaemonConfig {
        claude: Some(fake_claude()),
        env: vec![("FAKE_CLAUDE_SCRIPT".into(), script.display().to_string())],
        // Every permission request allowed, as in the real-CLI runs of issue 17.
        default_policy: Some(switchboard_session::Policy::allow_all()),
        placement: unlimited(),
        clock: Default::default(),
        ..DaemonConfig::default()
    };
    let daemon = Daemon::open(store, config).await.unwrap();
    let auth = AuthConfig::no_auth();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let served = daemon.clone();
    tokio::spawn(async move {
        switchboard_server::serve(listener, served, auth, std::future::pending()).await.unwrap()
    });
    let mut ids = Vec::new();
    for _ in 0..params.sessions {
        let record = daemon.create(CreateSession::new(dir.path())).await.unwrap();
        ids.push(record.id);
    }
    let start = async {
        for id in &ids {
            daemon.handle(id).unwrap().send_text("go").await.unwrap();
        }
    };
    let (delivered, latencies, cpu, wall) = if face == Face::Grpc {
        let deadline = Instant::now() + Duration::from_secs_f64(params.seconds * 3.0 + 30.0);
        let connected = Arc::new(tokio::sync::Barrier::new(ids.len() * params.subscribers + 1));
        let subscribers = tokio::spawn(run_grpc_subscribers(
            address,
            ids.clone(),
            params.subscribers,
            params.lines_per_session(),
            deadline,
            connected.clone(),
        ));
        connected.wait().await;
        let cpu_start = support::own_cpu_micros();
        let started = Instant::now();
        start.await;
        let (delivered, latencies, last) = subscribers.await.unwrap();
        let wall = last.saturating_duration_since(started).as_secs_f64().max(0.001);
        (delivered, latencies, support::own_cpu_micros() - cpu_start, wall)
    } else {
        let query = if face == Face::View { "&view=true" } else { "" };
        let urls: Vec<String> = ids
            .iter()
            .map(|id| format!("ws://{address}/api/sessions/{id}/subscribe?after=0{query}"))
            .collect();
        drive(urls, &params, true, start).await
    };
    let name = match (face, memory) {
        (Face::Grpc, _) => "gRPC Subscribe (typed updates)",
        (Face::View, _) => "WebSocket, the view's updates",
        (Face::Events, true) => "switchboard daemon (memory store)",
        (Face::Events, false) => "switchboard daemon (SQLite, every line stored)",
    };
    let mut result = report(name, &params, delivered, latencies, cpu, wall);
    // Every line persisted?
    let mut stored = 0;
    for id in &ids {
        stored += daemon
            .store()
            .events_after(id, 0, 1_000_000)
            .await
            .unwrap()
            .iter()
            .filter(|e| e.payload.contains("\"t=") && e.payload.contains("text_delta"))
            .count();
    }
    result["stored_lines"] = json!(stored);
    daemon.stop_all().await;
    result
}

/// The CPU time of process `pid`, of its children now running and of those that ended, in
/// µs (PostgreSQL's: the postmaster and its backends).
fn tree_cpu_micros(pid: u32) -> u64 {
    let mut total = process_cpu_micros(pid) + ended_children_cpu_micros(pid);
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(child) = entry.file_name().to_str().and_then(|name| name.parse::<u32>().ok())
        else {
            continue;
        };
        let stat = std::fs::read_to_string(format!("/proc/{child}/stat")).unwrap_or_default();
        let parent = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
        if parent == Some(pid) {
            total += process_cpu_micros(child);
        }
    }
    total
}

/// The CPU time of `pid`'s children that ended and were waited for (`cutime` + `cstime`).
fn ended_children_cpu_micros(pid: u32) -> u64 {
    stat_micros(pid, [13, 14])
}

/// A process's CPU time so far (µs), from `/proc` (for a server the bench started).
fn process_cpu_micros(pid: u32) -> u64 {
    stat_micros(pid, [11, 12])
}

/// The sum of `/proc/PID/stat`'s clock-tick fields `fields` (counted after the command's
/// `(...)`: state is 0, utime 11, stime 12, cutime 13, cstime 14), in µs.
fn stat_micros(pid: u32, fields_wanted: [usize; 2]) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks: u64 = fields_wanted.iter().filter_map(|&i| fields.get(i)?.parse::<u64>().ok()).sum();
    let per_second =
        nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK).ok().flatten().unwrap_or(100) as u64;
    ticks * 1_000_000 / per_second.max(1)
}

/// `nodes` daemons on one PostgreSQL (and, past one, one NATS), each running
/// `params.sessions` sessions, each session followed by `params.subscribers` WebSockets on the
/// next node (on itself, for one node).
async fn child_fleet(params: Params, nodes: usize) -> Value {
    use switchboard_server::bus::{Bus, BusStore};
    use switchboard_testkit::servers::{Nats, Postgres};
    let database = Postgres::start().expect("PostgreSQL is needed: scripts/install-servers.sh");
    let nats = (nodes > 1)
        .then(|| Nats::start().expect("nats-server is needed: scripts/install-servers.sh"));
    let dir = tempfile::tempdir().unwrap();
    let script = script(dir.path(), &params);
    let mut daemons = Vec::new();
    let mut addresses = Vec::new();
    for index in 0..nodes {
        let node = format!("n{index}");
        let mut options = switchboard_store::PostgresOptions::default();
        if let Some(ms) = params.group_wait_ms {
            options.group_wait = Duration::from_millis(ms);
        }
        let store: Arc<dyn Store> = Arc::new(
            switchboard_store::PostgresStore::connect_with(&database.url(), options).await.unwrap(),
        );
        let (store, bus): (Arc<dyn Store>, _) = match &nats {
            Some(nats) => {
                let bus = Bus::connect(nats.url(), &node).await.unwrap();
                (Arc::new(BusStore::new(store, bus.clone())), Some(bus))
            }
            None => (store, None),
        };
        let config = DaemonConfig {
            claude: Some(fake_claude()),
            env: vec![("FAKE_CLAUDE_SCRIPT".into(), script.display().to_string())],
            default_policy: Some(switchboard_session::Policy::allow_all()),
            node: Some(node),
            bus,
            placement: unlimited(),
            clock: Default::default(),
            ..DaemonConfig::default()
        };
        let daemon = Daemon::open(store, config).await.unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        addresses.push(listener.local_addr().unwrap());
        let served = daemon.clone();
        tokio::spawn(async move {
            let auth = AuthConfig::no_auth();
            switchboard_server::serve(listener, served, auth, std::future::pending()).await.unwrap()
        });
        daemons.push(daemon);
    }
    let mut ids = Vec::new();
    for (index, daemon) in daemons.iter().enumerate() {
        for _ in 0..params.sessions {
            let record = daemon.create(CreateSession::new(dir.path())).await.unwrap();
            ids.push((index, record.id));
        }
    }
    let urls: Vec<String> = ids
        .iter()
        .map(|(index, id)| {
            let address = addresses[(index + 1) % nodes];
            format!("ws://{address}/api/sessions/{id}/subscribe?after=0")
        })
        .collect();
    let start = async {
        for (index, id) in &ids {
            daemons[*index].handle(id).unwrap().send_text("go").await.unwrap();
        }
    };
    let nats_before = nats.as_ref().map(|nats| process_cpu_micros(nats.pid()));
    let postgres_before = tree_cpu_micros(database.pid());
    let all = Params { sessions: ids.len(), ..params.clone() };
    let (delivered, latencies, cpu, wall) = drive(urls, &all, true, start).await;
    let name = if nodes == 1 {
        "1 node on PostgreSQL, subscribers on it".to_owned()
    } else {
        format!("{nodes} nodes on PostgreSQL + NATS, subscribers on the next node")
    };
    let mut result = report(&name, &all, delivered, latencies, cpu, wall);
    result["postgres_cpu_us_per_message"] = json!(
        tree_cpu_micros(database.pid()).saturating_sub(postgres_before) as f64
            / delivered.max(1) as f64
    );
    if let (Some(nats), Some(before)) = (&nats, nats_before) {
        let used = process_cpu_micros(nats.pid()).saturating_sub(before);
        result["nats_cpu_us_per_message"] = json!(used as f64 / delivered.max(1) as f64);
    }
    let mut stored = 0;
    for (index, id) in &ids {
        stored += daemons[*index]
            .store()
            .events_after(id, 0, 1_000_000)
            .await
            .unwrap()
            .iter()
            .filter(|e| e.payload.contains("\"t=") && e.payload.contains("text_delta"))
            .count();
    }
    result["stored_lines"] = json!(stored);
    for daemon in &daemons {
        daemon.stop_all().await;
    }
    result
}

/// The minimal forwarder: read each CLI's stdout lines, broadcast them, serve them over
/// tokio-tungstenite. No persistence, no parsing.
async fn child_baseline(params: Params) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let script = script(dir.path(), &params);
    let mut senders = Vec::new();
    let mut stdins = Vec::new();
    let mut children = Vec::new();
    for _ in 0..params.sessions {
        let mut child = tokio::process::Command::new(fake_claude())
            .env("FAKE_CLAUDE_SCRIPT", &script)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let (tx, _) = broadcast::channel::<Arc<str>>(1024);
        let stdout = child.stdout.take().unwrap();
        let sender = tx.clone();
        tokio::spawn(async move {
            let mut lines = tokio::io::BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let _ = sender.send(Arc::from(line));
            }
        });
        senders.push(tx);
        stdins.push(child.stdin.take().unwrap());
        children.push(child);
    }
    let senders = Arc::new(senders);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let accept_senders = senders.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let senders = accept_senders.clone();
            tokio::spawn(async move {
                let mut index = None;
                let callback = |request: &tokio_tungstenite::tungstenite::handshake::server::Request,
                                response: tokio_tungstenite::tungstenite::handshake::server::Response| {
                    index = request.uri().path().trim_start_matches("/s/").parse::<usize>().ok();
                    Ok(response)
                };
                let config = tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
                    .read_buffer_size(4 * 1024);
                let Ok(mut socket) =
                    tokio_tungstenite::accept_hdr_async_with_config(stream, callback, Some(config))
                        .await
                else {
                    return;
                };
                let Some(mut rx) = index.and_then(|i| senders.get(i)).map(|tx| tx.subscribe())
                else {
                    return;
                };
                loop {
                    let line = match rx.recv().await {
                        Ok(line) => line,
                        // A slow socket skips what it missed (that is the loss column).
                        Err(broadcast::error::RecvError::Lagged(_)) => continue,
                        Err(broadcast::error::RecvError::Closed) => break,
                    };
                    if socket.send(WsMessage::Text(line.to_string().into())).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    let urls: Vec<String> = (0..params.sessions).map(|i| format!("ws://{address}/s/{i}")).collect();
    let (delivered, latencies, cpu, wall) = drive(urls, &params, false, async {
        use tokio::io::AsyncWriteExt;
        for stdin in &mut stdins {
            stdin.write_all(b"{\"type\":\"control_request\",\"request_id\":\"i\",\"request\":{\"subtype\":\"initialize\"}}\n{\"type\":\"user\",\"message\":{\"role\":\"user\",\"content\":\"go\"},\"parent_tool_use_id\":null,\"session_id\":\"\"}\n").await.unwrap();
        }
    })
    .await;
    drop(stdins);
    let mut result =
        report("minimal forwarder (no persistence)", &params, delivered, latencies, cpu, wall);
    result["stored_lines"] = json!(0);
    result
}

/// Memory per idle session: K sessions of fake-claude's echo mode, started and left idle.
async fn child_idle(params: Params) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("db")).unwrap());
    let config = DaemonConfig {
        claude: Some(fake_claude()),
        placement: unlimited(),
        clock: Default::default(),
        ..DaemonConfig::default()
    };
    let daemon = Daemon::open(store, config).await.unwrap();
    // Warm up allocator and runtime with one session first.
    let warm = daemon.create(CreateSession::new(dir.path())).await.unwrap();
    wait_idle(&daemon, &warm.id).await;
    let before = support::status_kib("self", "VmRSS:");
    let started = Instant::now();
    let mut ids = Vec::new();
    for _ in 0..params.idle {
        let record = daemon.create(CreateSession::new(dir.path())).await.unwrap();
        ids.push(record.id);
    }
    for id in &ids {
        wait_idle(&daemon, id).await;
    }
    let after = support::status_kib("self", "VmRSS:");
    let result = json!({
        "idle_sessions": params.idle,
        "start_seconds": started.elapsed().as_secs_f64(),
        "rss_before_mib": before as f64 / 1024.0,
        "rss_after_mib": after as f64 / 1024.0,
        "kib_per_session": (after.saturating_sub(before)) as f64 / params.idle.max(1) as f64,
    });
    daemon.stop_all().await;
    result
}

/// What a finished session costs: sessions of fake-claude that stream 100 lines to a
/// subscriber each and exit, in waves of 50, after a first wave that warms the allocator up;
/// the daemon's RSS before and after K of them (none purged).
async fn child_finished(params: Params) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("finish.json");
    let steps = json!([
        {"expect": "control_request", "subtype": "initialize"}, {"reply": {}},
        {"expect": "user"},
        {"stream_lines": {"rate": 10_000.0, "count": 100}},
        {"turn": "done"},
        {"exit": 0},
    ]);
    std::fs::write(&script, steps.to_string()).unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("db")).unwrap());
    let config = DaemonConfig {
        claude: Some(fake_claude()),
        env: vec![("FAKE_CLAUDE_SCRIPT".into(), script.display().to_string())],
        placement: unlimited(),
        clock: Default::default(),
        ..DaemonConfig::default()
    };
    let daemon = Daemon::open(store, config).await.unwrap();
    let wave = |count: usize| {
        let daemon = daemon.clone();
        let cwd = dir.path().to_owned();
        async move {
            let mut followers = Vec::new();
            for _ in 0..count {
                let record = daemon
                    .create(CreateSession {
                        prompt: Some("go".into()),
                        ..CreateSession::new(cwd.clone())
                    })
                    .await
                    .unwrap();
                let mut subscription = daemon.subscribe(&record.id, 0);
                followers.push(tokio::spawn(async move {
                    while let Some(Ok(item)) = subscription.next().await {
                        if let switchboard_server::Subscribed::Event(event) = item {
                            if event.kind == "exited" {
                                break;
                            }
                        }
                    }
                }));
            }
            for follower in followers {
                follower.await.unwrap();
            }
        }
    };
    wave(50).await;
    let before = support::status_kib("self", "VmRSS:");
    let started = Instant::now();
    let mut done = 0;
    while done < params.idle {
        let count = (params.idle - done).min(50);
        wave(count).await;
        done += count;
    }
    // Let the store fold what waits (its memory is the journal's, not the sessions').
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = support::status_kib("self", "VmRSS:");
    json!({
        "finished_sessions": done,
        "seconds": started.elapsed().as_secs_f64(),
        "rss_before_mib": before as f64 / 1024.0,
        "rss_after_mib": after as f64 / 1024.0,
        "kib_per_session": (after.saturating_sub(before)) as f64 / done.max(1) as f64,
    })
}

async fn wait_idle(daemon: &Daemon, id: &str) {
    let handle = daemon.handle(id).unwrap();
    let mut watch = handle.watch();
    let _ = watch
        .wait_for(|snapshot| snapshot.state == switchboard_session::SessionState::Idle)
        .await
        .map(|_| ());
}

/// Prints the baseline, the measured run and `others` as a Markdown table; returns the CPU per
/// message of `measured` over `baseline`.
fn print_table(baseline: &Value, measured: &Value, others: &[&Value]) -> f64 {
    println!("| | delivered/s | p50 ms | p99 ms | decisions p99 ms | lost | stored | CPU µs/msg | peak RSS MiB |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for result in [baseline, measured].into_iter().chain(others.iter().copied()) {
        println!(
            "| {} | {:.0} | {:.2} | {:.2} | {} | {} | {} | {:.1} | {:.0} |",
            result["name"].as_str().unwrap_or("?"),
            result["per_second"].as_f64().unwrap_or(0.0),
            result["p50_ms"].as_f64().unwrap_or(0.0),
            result["p99_ms"].as_f64().unwrap_or(0.0),
            match result["decided_p99_ms"].as_f64() {
                Some(ms) => format!("{ms:.2} ({})", result["decisions"]),
                None => "–".into(),
            },
            result["lost"],
            result["stored_lines"],
            result["cpu_us_per_message"].as_f64().unwrap_or(0.0),
            result["peak_rss_mib"].as_f64().unwrap_or(0.0),
        );
    }
    measured["cpu_us_per_message"].as_f64().unwrap_or(0.0)
        / baseline["cpu_us_per_message"].as_f64().unwrap_or(1.0).max(0.001)
}

fn run_child(mode: &str, params: &Params) -> Value {
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .arg("--child")
        .arg(mode)
        .args(params.args())
        .stderr(std::process::Stdio::inherit())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    text.lines()
        .last()
        .and_then(|line| serde_json::from_str(line).ok())
        .unwrap_or_else(|| json!({"name": mode, "error": "no result"}))
}

fn main() {
    let (child, params) = parse_args();
    if let Some(mode) = child {
        let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
        let result = runtime.block_on(async {
            match mode.as_str() {
                "daemon" => child_daemon(params, false).await,
                "daemon-memory" => child_daemon(params, true).await,
                "face-view" => child_face(params, false, Face::View).await,
                "face-grpc" => child_face(params, false, Face::Grpc).await,
                "baseline" => child_baseline(params).await,
                "idle" => child_idle(params).await,
                "finished" => child_finished(params).await,
                "fleet-1" => child_fleet(params, 1).await,
                "fleet" => {
                    let nodes = params.nodes;
                    child_fleet(params, nodes).await
                }
                other => json!({"error": format!("unknown mode {other}")}),
            }
        });
        println!("{result}");
        return;
    }
    eprintln!("load: {params:?}");
    if std::env::args().any(|arg| arg == "--fleet") {
        let single = run_child("fleet-1", &params);
        let fleet = run_child("fleet", &params);
        println!(
            "{} sessions × {} lines/s for {} s per node, {} subscriber(s) per session on another node (every line stored in PostgreSQL)\n",
            params.sessions, params.rate, params.seconds, params.subscribers
        );
        let ratio = print_table(&single, &fleet, &[]);
        println!(
            "\nCPU per delivered line, {} nodes / 1 node: {ratio:.2}x (the nodes' process; NATS's own: {:.1} µs a line; PostgreSQL's own: {:.1} µs a line on one node, {:.1} on {})",
            params.nodes,
            fleet["nats_cpu_us_per_message"].as_f64().unwrap_or(0.0),
            single["postgres_cpu_us_per_message"].as_f64().unwrap_or(0.0),
            fleet["postgres_cpu_us_per_message"].as_f64().unwrap_or(0.0),
            params.nodes,
        );
        let p99 = |result: &Value| result["p99_ms"].as_f64().unwrap_or(0.0);
        println!(
            "Latency p99, across nodes / one node: {:.2}x ({:.2} ms / {:.2} ms)",
            p99(&fleet) / p99(&single).max(0.001),
            p99(&fleet),
            p99(&single)
        );
        return;
    }
    if std::env::args().any(|arg| arg == "--stores") {
        let sqlite = run_child("daemon", &params);
        let no_wait = Params { group_wait_ms: Some(0), ..params.clone() };
        let mut unwaited = run_child("fleet-1", &no_wait);
        unwaited["name"] = json!("1 node on PostgreSQL, no group wait");
        let mut postgres = run_child("fleet-1", &params);
        let wait =
            params.group_wait_ms.map_or(switchboard_store::GROUP_WAIT, Duration::from_millis);
        postgres["name"] =
            json!(format!("1 node on PostgreSQL, group wait {} ms", wait.as_millis()));
        println!(
            "{} sessions × {} lines/s for {} s, {} subscriber(s) per session, one daemon: on SQLite, then on PostgreSQL without and with the group wait\n",
            params.sessions, params.rate, params.seconds, params.subscribers
        );
        print_table(&sqlite, &unwaited, &[&postgres]);
        let cpu = |result: &Value| result["cpu_us_per_message"].as_f64().unwrap_or(0.0);
        let server = |result: &Value| result["postgres_cpu_us_per_message"].as_f64().unwrap_or(0.0);
        println!("\n| CPU µs a line | the daemon | PostgreSQL's own | both | / SQLite, the daemon | / SQLite, both |");
        println!("|---|--:|--:|--:|--:|--:|");
        println!("| SQLite | {:.1} | | {:.1} | 1.00x | 1.00x |", cpu(&sqlite), cpu(&sqlite));
        for result in [&unwaited, &postgres] {
            let both = cpu(result) + server(result);
            println!(
                "| {} | {:.1} | {:.1} | {:.1} | {:.2}x | {:.2}x |",
                result["name"].as_str().unwrap_or("?"),
                cpu(result),
                server(result),
                both,
                cpu(result) / cpu(&sqlite).max(0.001),
                both / cpu(&sqlite).max(0.001),
            );
        }
        return;
    }
    if std::env::args().any(|arg| arg == "--faces") {
        let events = run_child("daemon", &params);
        let view = run_child("face-view", &params);
        let grpc = run_child("face-grpc", &params);
        println!(
            "{} sessions × {} lines/s for {} s, {} subscribers each following every session ({} streams per face; every line stored)\n",
            params.sessions,
            params.rate,
            params.seconds,
            params.subscribers,
            params.sessions * params.subscribers
        );
        let over_events = print_table(&events, &grpc, &[&view]);
        let cpu = |result: &Value| result["cpu_us_per_message"].as_f64().unwrap_or(0.0);
        println!(
            "\nCPU per delivered message, gRPC / WebSocket events: {over_events:.2}x; gRPC / WebSocket view: {:.2}x",
            cpu(&grpc) / cpu(&view).max(0.001)
        );
        return;
    }
    let baseline = run_child("baseline", &params);
    let daemon = run_child("daemon", &params);
    let daemon_memory = run_child("daemon-memory", &params);
    println!(
        "{} sessions × {} lines/s for {} s, {} subscribers each following every session ({} WebSockets)\n",
        params.sessions,
        params.rate,
        params.seconds,
        params.subscribers,
        params.sessions * params.subscribers
    );
    let ratio = print_table(&baseline, &daemon, &[&daemon_memory]);
    println!("\nCPU per delivered message, daemon / forwarder: {ratio:.2}x");
    if params.idle > 0 {
        let idle = run_child("idle", &params);
        println!(
            "\n{} idle sessions: daemon RSS {:.1} → {:.1} MiB, {:.1} KiB per session (started in {:.1} s)",
            idle["idle_sessions"],
            idle["rss_before_mib"].as_f64().unwrap_or(0.0),
            idle["rss_after_mib"].as_f64().unwrap_or(0.0),
            idle["kib_per_session"].as_f64().unwrap_or(0.0),
            idle["start_seconds"].as_f64().unwrap_or(0.0),
        );
        let finished = run_child("finished", &params);
        println!(
            "{} sessions run and finished (100 lines each, a subscriber each, none purged): daemon RSS {:.1} → {:.1} MiB, {:.1} KiB per finished session",
            finished["finished_sessions"],
            finished["rss_before_mib"].as_f64().unwrap_or(0.0),
            finished["rss_after_mib"].as_f64().unwrap_or(0.0),
            finished["kib_per_session"].as_f64().unwrap_or(0.0),
        );
    }
}

/// A bench daemon runs as many sessions as the bench asks (no `--max-running`).
fn unlimited() -> switchboard_server::daemon::Placement {
    switchboard_server::daemon::Placement { max_running: Some(usize::MAX), ..Default::default() }
}
