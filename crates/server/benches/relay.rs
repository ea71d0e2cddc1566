//! Relay benchmark: the agents-ui relay protocol (CLIs at `/`, frontends at `/ws`) in four load
//! shapes, each relay in a process of its own, measured side by side in one run:
//!
//! - Switchboard (every line stored in SQLite, an auto-approve policy);
//! - the store-and-forward floor: a minimal Rust forwarder that decodes each line's routing
//!   fields once and appends the line to one journal file before any frontend sees it (the
//!   least a durable, decoding relay can do);
//! - the bare forwarder, which stores and parses nothing (the practical limit);
//! - a Node `ws` relay (`benches/node-relay/relay.mjs`), the shape of the relays other Claude
//!   Code web UIs ship.
//!
//! This process is the load: simulated CLIs (they answer `initialize`, announce a session,
//! then send ~300-byte `stream_event` lines stamped with their send time, each object's `type`
//! first as the CLI writes it) and frontends that count every line. The relay's own CPU
//! (`/proc/PID/stat`) from the start signal to the last delivery, divided by the lines
//! delivered, and its peak RSS (`VmHWM`) are what is compared.
//!
//! `cargo bench -p switchboard-server --bench relay -- [--shapes abcd] [--passes 2]
//!  [--seconds 10] [--flat-lines 100000] [--relays switchboard,floor,forwarder,node] [--json]
//!  [--callgrind] [--type-last]`
//!
//! `--callgrind` counts each relay's instructions (valgrind's callgrind, switched on at the
//! start signal and dumped at the last delivery) over a fixed number of lines per shape,
//! instead of its CPU time: deterministic enough to see a 1 % step that CPU time's noise hides.
//! Each dump is kept as `target/callgrind/RELAY-SHAPE.out` for `callgrind_annotate`.
//! `--type-last` sends each object's keys sorted (as `serde_json::json!` writes them, and as
//! the bench sent them before), which puts `type` after the fields it decides; kept to compare.
//! (`npm ci --prefix crates/server/benches/node-relay` first for the Node relay.)

#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    clippy::disallowed_methods,
    clippy::result_large_err,
    missing_docs
)]

#[path = "support.rs"]
mod support;

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message as WsMessage;

/// One load shape.
#[derive(Debug, Clone, Copy)]
struct Shape {
    key: char,
    clis: usize,
    /// Lines per second per CLI; `None`: as fast as the relay takes them.
    rate: Option<f64>,
    frontends: usize,
    lines_per_cli: u64,
}

impl Shape {
    fn describe(&self) -> String {
        let rate = match self.rate {
            Some(rate) => format!("{rate} lines/s"),
            None => "flat out".into(),
        };
        let clis = if self.clis == 1 { "1 CLI".into() } else { format!("{} CLIs ×", self.clis) };
        let frontends = if self.frontends == 1 {
            "1 frontend".into()
        } else {
            format!("{} frontends", self.frontends)
        };
        format!("{}: {clis} {rate} → {frontends}", self.key)
    }

    fn expected(&self) -> u64 {
        self.clis as u64 * self.lines_per_cli * self.frontends as u64
    }
}

#[derive(Debug, Clone)]
struct Options {
    shapes: Vec<char>,
    passes: usize,
    seconds: f64,
    flat_lines: u64,
    relays: Vec<String>,
    json: bool,
    /// Count instructions under callgrind instead of CPU time, over a fixed number of lines.
    callgrind: bool,
    /// Each object's keys sorted, `type` last (`--type-last`), instead of the CLI's order.
    type_last: bool,
}

fn parse_args() -> (Option<String>, Options) {
    let mut options = Options {
        shapes: vec!['a', 'b', 'c', 'd'],
        passes: 2,
        seconds: 10.0,
        flat_lines: 100_000,
        relays: vec!["switchboard".into(), "floor".into(), "forwarder".into(), "node".into()],
        json: false,
        callgrind: false,
        type_last: false,
    };
    let mut serve = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().unwrap_or_default();
        match arg.as_str() {
            "--serve" => serve = Some(value()),
            "--shapes" => options.shapes = value().chars().collect(),
            "--passes" => options.passes = value().parse().unwrap_or(options.passes),
            "--seconds" => options.seconds = value().parse().unwrap_or(options.seconds),
            "--flat-lines" => options.flat_lines = value().parse().unwrap_or(options.flat_lines),
            "--relays" => options.relays = value().split(',').map(str::to_owned).collect(),
            "--json" => options.json = true,
            "--callgrind" => options.callgrind = true,
            "--type-last" => options.type_last = true,
            _ => {} // `--bench` and friends from cargo
        }
    }
    if options.callgrind {
        // Instruction counts hardly move from pass to pass; Node's JIT is not run under it.
        if !std::env::args().any(|arg| arg == "--passes") {
            options.passes = 1;
        }
        options.relays.retain(|relay| relay != "node");
    }
    (serve, options)
}

fn shape(key: char, options: &Options) -> Option<Shape> {
    if options.callgrind {
        return callgrind_shape(key);
    }
    let paced = |rate: f64| (rate * options.seconds).round() as u64;
    Some(match key {
        'a' => Shape { key, clis: 1, rate: None, frontends: 1, lines_per_cli: options.flat_lines },
        'b' => {
            Shape { key, clis: 100, rate: Some(50.0), frontends: 10, lines_per_cli: paced(50.0) }
        }
        'c' => Shape { key, clis: 1000, rate: Some(5.0), frontends: 1, lines_per_cli: paced(5.0) },
        'd' => Shape {
            key,
            clis: 1,
            rate: None,
            frontends: 100,
            lines_per_cli: (options.flat_lines / 5).max(1),
        },
        _ => return None,
    })
}

/// The shapes under callgrind: a fixed number of lines each, paced shapes slowed so that a
/// relay running some fifty times slower still reads them one line at a time, as it does at
/// full speed.
fn callgrind_shape(key: char) -> Option<Shape> {
    Some(match key {
        'a' => Shape { key, clis: 1, rate: None, frontends: 1, lines_per_cli: 20_000 },
        'b' => Shape { key, clis: 100, rate: Some(1.0), frontends: 10, lines_per_cli: 20 },
        'c' => Shape { key, clis: 1000, rate: Some(0.25), frontends: 1, lines_per_cli: 5 },
        'd' => Shape { key, clis: 1, rate: None, frontends: 100, lines_per_cli: 2_000 },
        _ => return None,
    })
}

/// One streamed line, stamped with its send time: a text delta in the CLI's own key order
/// (`type` first in each object, the fields after it as the CLI writes them), or with each
/// object's keys sorted (`type_last`).
fn stream_line(session: &str, index: usize, line: u64, type_last: bool) -> String {
    let text = format!("t={} {}", now_ns(), "lorem ipsum dolor sit amet ".repeat(4));
    // Shaped like the real CLI's (v4 UUIDs).
    let uuid = format!("{index:08x}-0000-4000-8000-{line:012x}");
    if type_last {
        let value = json!({"type": "stream_event", "event": {"type": "content_block_delta",
            "index": 0, "delta": {"type": "text_delta", "text": text}},
            "session_id": session, "parent_tool_use_id": null, "uuid": uuid});
        return format!("{value}\n");
    }
    let text = Value::String(text);
    format!(
        "{{\"type\":\"stream_event\",\"event\":{{\"type\":\"content_block_delta\",\"index\":0,\
         \"delta\":{{\"type\":\"text_delta\",\"text\":{text}}}}},\"session_id\":\"{session}\",\
         \"parent_tool_use_id\":null,\"uuid\":\"{uuid}\"}}\n"
    )
}

fn now_ns() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
}

/// The `t=` stamp of a streamed line, if it is one.
fn sent_at(text: &str) -> Option<u128> {
    let start = text.find("\"t=")? + 3;
    let end = text[start..].find([' ', '"'])? + start;
    text[start..end].parse().ok()
}

// ---------------------------------------------------------------------------------------------
// The relays under test, each in its own process: `--serve NAME` prints `listening ADDR`,
// answers each `cpu` line on its standard input with `cpu MICROS` (its own CPU time so far:
// `/proc`'s 10 ms ticks are too coarse for a short run), runs until its standard input closes,
// then prints a JSON line (Switchboard: the lines it stored).

fn serve_child(name: &str, options: &Options) {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let result = runtime.block_on(async {
        match name {
            "switchboard" => serve_switchboard(options.callgrind).await,
            "forwarder" => serve_forwarder(false).await,
            "floor" => serve_forwarder(true).await,
            other => json!({"error": format!("unknown relay {other}")}),
        }
    });
    println!("{result}");
}

/// Answers the benchmark's questions until it closes our standard input: `cpu` (this
/// process's CPU time so far) and `fold` (the store's journal folded into its database now,
/// where there is a store; answered `folded`).
async fn until_stdin_closes(store: Option<Arc<switchboard_store::SqliteStore>>) {
    let runtime = tokio::runtime::Handle::current();
    let _ = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        while std::io::stdin().read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
            match line.trim() {
                "cpu" => println!("cpu {}", support::own_cpu_micros()),
                "fold" => {
                    if let Some(store) = &store {
                        let _ = runtime.block_on(store.flush());
                    }
                    println!("folded");
                }
                _ => {}
            }
            let _ = std::io::stdout().flush();
            line.clear();
        }
    })
    .await;
}

/// Switchboard's daemon on SQLite. Under callgrind its store folds only when the bench asks
/// (once, before the count is read), as it would fold a second of lines at full speed.
async fn serve_switchboard(callgrind: bool) -> Value {
    use switchboard_server::{AuthConfig, Daemon, DaemonConfig};
    use switchboard_store::{SqliteOptions, SqliteStore, Store};
    let dir = tempfile::tempdir().unwrap();
    let mut store_options = SqliteOptions::default();
    if callgrind {
        store_options.fold_interval = Duration::from_secs(3600);
        store_options.checkpoint_interval = Duration::from_secs(3600);
    }
    let sqlite = Arc::new(SqliteStore::open_with(dir.path().join("db"), store_options).unwrap());
    let store: Arc<dyn Store> = sqlite.clone();
    let policy = switchboard_session::Policy::allow_all();
    let config = DaemonConfig {
        default_policy: Some(policy),
        placement: unlimited(),
        clock: Default::default(),
        ..DaemonConfig::default()
    };
    let daemon = Daemon::open(store.clone(), config).await.unwrap();
    let auth = AuthConfig::no_auth();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    println!("listening {}", listener.local_addr().unwrap());
    let served = daemon.clone();
    tokio::spawn(async move {
        switchboard_server::serve(listener, served, auth, std::future::pending()).await.unwrap()
    });
    until_stdin_closes(Some(sqlite)).await;
    let mut stored = 0u64;
    for session in store.list_sessions().await.unwrap() {
        stored += store
            .events_after(&session.id, 0, 10_000_000)
            .await
            .unwrap()
            .iter()
            .filter(|event| event.payload.contains("\"t="))
            .count() as u64;
    }
    json!({"stored": stored})
}

/// The routing fields the store-and-forward floor reads from each line, borrowed where the text
/// has no escapes.
#[derive(serde::Deserialize)]
#[allow(dead_code)]
struct Routing<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow)]
    subtype: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow)]
    session_id: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow)]
    uuid: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow)]
    request_id: Option<std::borrow::Cow<'a, str>>,
}

/// The store-and-forward floor's journal: one append-only file for every session, a record
/// (length, sequence, session id, bytes) a line, one `write(2)` a batch; `fdatasync` once a
/// second on a thread of its own, off the lines' path.
struct Journal {
    file: std::sync::Mutex<(std::fs::File, u64)>,
}

impl Journal {
    fn open(path: &std::path::Path) -> Arc<Journal> {
        let file = std::fs::OpenOptions::new().create(true).append(true).open(path).unwrap();
        let syncing = file.try_clone().unwrap();
        std::thread::spawn(move || loop {
            std::thread::sleep(Duration::from_secs(1));
            if syncing.sync_data().is_err() {
                return;
            }
        });
        Arc::new(Journal { file: std::sync::Mutex::new((file, 0)) })
    }

    /// Decodes each line's routing fields and appends the batch with one write (a line that is
    /// not JSON is stored with no session).
    fn append(&self, lines: &[&str], record: &mut Vec<u8>) {
        record.clear();
        let mut guard = self.file.lock().unwrap();
        let (file, sequence) = &mut *guard;
        for line in lines {
            let routing = serde_json::from_str::<Routing<'_>>(line).ok();
            let session = routing.as_ref().and_then(|r| r.session_id.as_deref()).unwrap_or("");
            *sequence += 1;
            record.extend_from_slice(&(line.len() as u32).to_le_bytes());
            record.extend_from_slice(&sequence.to_le_bytes());
            record.extend_from_slice(&(session.len() as u16).to_le_bytes());
            record.extend_from_slice(session.as_bytes());
            record.extend_from_slice(line.as_bytes());
        }
        std::io::Write::write_all(file, record).unwrap();
    }
}

/// The minimal forwarder: each CLI's lines go out on one broadcast whose sender waits for room
/// (a frontend that lags holds the CLIs back, so nothing is lost), each frontend writes what
/// waits in one flush. Nothing is parsed or stored.
///
/// With `store`, the store-and-forward floor: the least a durable, decoding relay can do. Each
/// batch of lines a CLI's socket has ready is decoded (its routing fields, once) and appended
/// to one journal file with one `write(2)` **before** any of it is broadcast, so a `SIGKILL`
/// loses nothing a frontend saw.
async fn serve_forwarder(store: bool) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let journal = store.then(|| Journal::open(&dir.path().join("journal")));
    let (mut sender, receiver) = async_broadcast::broadcast::<Arc<str>>(1024);
    sender.set_await_active(false);
    // Keeps the channel open while no frontend listens.
    let frontends = receiver.deactivate();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    println!("listening {}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let _ = stream.set_nodelay(true);
            let (frontends, sender, journal) = (frontends.clone(), sender.clone(), journal.clone());
            tokio::spawn(async move {
                let mut path = String::new();
                let callback = |request: &tokio_tungstenite::tungstenite::handshake::server::Request,
                                response: tokio_tungstenite::tungstenite::handshake::server::Response| {
                    path = request.uri().path().to_owned();
                    Ok(response)
                };
                let config = tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
                    .read_buffer_size(4 * 1024);
                let Ok(socket) =
                    tokio_tungstenite::accept_hdr_async_with_config(stream, callback, Some(config))
                        .await
                else {
                    return;
                };
                let (mut sink, mut incoming) = socket.split();
                if path == "/ws" {
                    let mut lines = frontends.activate_cloned();
                    while let Ok(line) = lines.recv_direct().await {
                        let mut ok = sink.feed(WsMessage::Text(line.as_ref().into())).await.is_ok();
                        let mut queued = 1;
                        while ok && queued < 64 {
                            let Ok(line) = lines.try_recv() else { break };
                            ok = sink.feed(WsMessage::Text(line.as_ref().into())).await.is_ok();
                            queued += 1;
                        }
                        if !ok || sink.flush().await.is_err() {
                            break;
                        }
                    }
                } else {
                    let init = json!({"type": "control_request", "request_id": "i", "request": {"subtype": "initialize"}});
                    let _ = sink.send(WsMessage::Text(format!("{init}\n").into())).await;
                    let mut record = Vec::new();
                    while let Some(Ok(frame)) = incoming.next().await {
                        let WsMessage::Text(text) = frame else { continue };
                        let Some(journal) = &journal else {
                            for line in text.split('\n').filter(|line| !line.is_empty()) {
                                let _ = sender.broadcast_direct(Arc::from(line)).await;
                            }
                            continue;
                        };
                        // The batch: this frame and every frame the socket already holds.
                        let mut frames = vec![text];
                        while frames.len() < 64 {
                            match futures::FutureExt::now_or_never(incoming.next()) {
                                Some(Some(Ok(WsMessage::Text(text)))) => frames.push(text),
                                Some(Some(Ok(_))) => {}
                                _ => break,
                            }
                        }
                        let lines: Vec<&str> = frames
                            .iter()
                            .flat_map(|text| text.split('\n'))
                            .filter(|line| !line.is_empty())
                            .collect();
                        journal.append(&lines, &mut record);
                        for line in lines {
                            let _ = sender.broadcast_direct(Arc::from(line)).await;
                        }
                    }
                }
            });
        }
    });
    until_stdin_closes(None).await;
    json!({})
}

/// A relay under test, running.
struct Relay {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: std::io::BufReader<std::process::ChildStdout>,
    address: String,
    /// Under callgrind: the directory its dumps go to (kept until the relay ends).
    callgrind: Option<tempfile::TempDir>,
    /// Where a callgrind dump is copied to.
    keep_as: Option<PathBuf>,
}

impl Relay {
    /// The relay's own CPU time so far, in µs.
    fn cpu_micros(&mut self) -> u64 {
        let _ = writeln!(self.stdin, "cpu");
        let _ = self.stdin.flush();
        let mut line = String::new();
        let _ = self.stdout.read_line(&mut line);
        line.trim().strip_prefix("cpu ").and_then(|n| n.parse().ok()).unwrap_or(0)
    }

    /// Under callgrind, starts counting (`callgrind_control -i on`); else the CPU time so far.
    fn start_measuring(&mut self) -> Result<u64, String> {
        if self.callgrind.is_none() {
            return Ok(self.cpu_micros());
        }
        callgrind_control(self.child.id(), "-i", "on")?;
        Ok(0)
    }

    /// Under callgrind, the instructions counted since `start_measuring` (a dump, read back);
    /// else the CPU time so far.
    fn measured(&mut self) -> Result<u64, String> {
        let Some(dir) = &self.callgrind else { return Ok(self.cpu_micros()) };
        // The lines' fold into the database is counted, as at full speed.
        let _ = writeln!(self.stdin, "fold");
        let _ = self.stdin.flush();
        let mut line = String::new();
        let _ = self.stdout.read_line(&mut line);
        callgrind_control(self.child.id(), "-d", "")?;
        let dump = dir.path().join("callgrind.1");
        let text = std::fs::read_to_string(&dump)
            .map_err(|error| format!("no callgrind dump at {}: {error}", dump.display()))?;
        // Kept for `callgrind_annotate`, named by relay and shape.
        if let Some(keep) = &self.keep_as {
            let _ = std::fs::create_dir_all(keep.parent().unwrap());
            let _ = std::fs::copy(&dump, keep);
            eprint!("[{}] ", keep.display());
        }
        text.lines()
            .find_map(|line| line.strip_prefix("totals: "))
            .and_then(|totals| totals.split_whitespace().next()?.parse().ok())
            .ok_or_else(|| format!("no totals in {}", dump.display()))
    }
}

fn callgrind_control(pid: u32, option: &str, value: &str) -> Result<(), String> {
    let mut command = std::process::Command::new("callgrind_control");
    command.arg(option);
    if !value.is_empty() {
        command.arg(value);
    }
    let output = command
        .arg(pid.to_string())
        .output()
        .map_err(|error| format!("cannot run callgrind_control (valgrind's): {error}"))?;
    if !output.status.success() {
        return Err(format!(
            "callgrind_control {option} {value} {pid}: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    Ok(())
}

fn start_relay(name: &str, options: &Options) -> Result<Relay, String> {
    let callgrind = if options.callgrind {
        if name == "node" {
            return Err("not under callgrind (Node's JIT)".into());
        }
        Some(tempfile::tempdir().map_err(|error| error.to_string())?)
    } else {
        None
    };
    let mut command = if let Some(dir) = &callgrind {
        let mut command = std::process::Command::new("valgrind");
        command
            .arg("--tool=callgrind")
            .arg("--instr-atstart=no")
            .arg(format!("--callgrind-out-file={}", dir.path().join("callgrind").display()))
            .arg("--log-file=/dev/null")
            .arg(std::env::current_exe().unwrap())
            .arg("--serve")
            .arg(name)
            .arg("--callgrind");
        command
    } else if name == "node" {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("benches/node-relay/relay.mjs");
        let modules = script.with_file_name("node_modules").join("ws");
        if !modules.exists() {
            return Err("run `npm ci --prefix crates/server/benches/node-relay` first".into());
        }
        let mut command = std::process::Command::new("node");
        command.arg(script);
        command
    } else {
        let mut command = match std::env::var("BENCH_WRAP") {
            Ok(wrap) if name == "switchboard" => {
                let mut command = std::process::Command::new(wrap);
                command.arg(std::env::current_exe().unwrap());
                command
            }
            _ => std::process::Command::new(std::env::current_exe().unwrap()),
        };
        command.arg("--serve").arg(name);
        command
    };
    let mut child = command
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .map_err(|error| format!("cannot start the {name} relay: {error}"))?;
    let stdin = child.stdin.take().unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).map_err(|error| error.to_string())?;
    let address = line
        .trim()
        .strip_prefix("listening ")
        .ok_or_else(|| format!("the {name} relay said {line:?}"))?
        .to_owned();
    Ok(Relay { child, stdin, stdout, address, callgrind, keep_as: None })
}

/// Ends a relay and reads what it printed last.
fn stop_relay(relay: Relay) -> Value {
    let Relay { mut child, stdin, mut stdout, .. } = relay;
    drop(stdin);
    let mut text = String::new();
    let _ = std::io::Read::read_to_string(&mut stdout, &mut text);
    let _ = child.wait();
    text.lines().last().and_then(|line| serde_json::from_str(line).ok()).unwrap_or(json!({}))
}

// ---------------------------------------------------------------------------------------------
// The load.

/// A simulated external CLI: answers `initialize`, announces its session, waits for `go`, then
/// streams its lines (paced, or as fast as the socket takes them) and holds the connection
/// until `done`.
async fn simulated_cli(
    url: String,
    shape: Shape,
    type_last: bool,
    index: usize,
    ready: Arc<tokio::sync::Barrier>,
    go: Arc<tokio::sync::Notify>,
    done: Arc<tokio::sync::Notify>,
) {
    let (socket, _) = tokio_tungstenite::connect_async(url.as_str()).await.unwrap();
    let (mut sink, mut incoming) = socket.split();
    let (init_tx, mut init_rx) = tokio::sync::mpsc::channel::<String>(4);
    // Keep reading (answers pings, takes initialize) on its own task.
    let reader = tokio::spawn(async move {
        while let Some(Ok(frame)) = incoming.next().await {
            if let WsMessage::Text(text) = frame {
                if text.contains("\"initialize\"") {
                    let value: Value = serde_json::from_str(text.trim()).unwrap_or(Value::Null);
                    let id = value["request_id"].as_str().unwrap_or("").to_owned();
                    let _ = init_tx.send(id).await;
                }
            }
        }
    });
    let session = format!("00000000-0000-4000-8000-{index:012x}");
    if let Ok(Some(request_id)) =
        tokio::time::timeout(Duration::from_secs(120), init_rx.recv()).await
    {
        let reply = json!({"type": "control_response", "response": {"subtype": "success", "request_id": request_id, "response": {}}});
        sink.send(WsMessage::Text(format!("{reply}\n").into())).await.unwrap();
    }
    let init = json!({"type": "system", "subtype": "init", "session_id": session, "cwd": "/", "model": "sim"});
    sink.send(WsMessage::Text(format!("{init}\n").into())).await.unwrap();
    let started = go.notified();
    ready.wait().await;
    started.await;
    let start = Instant::now();
    for line in 0..shape.lines_per_cli {
        let frame = WsMessage::Text(stream_line(&session, index, line, type_last).into());
        let sent = match shape.rate {
            Some(rate) => {
                let due = start + Duration::from_secs_f64(line as f64 / rate);
                tokio::time::sleep_until(due.into()).await;
                sink.send(frame).await
            }
            // Flat out: a flush every 32 lines (the relay still gets one line per frame).
            None if line % 32 == 31 => sink.send(frame).await,
            None => sink.feed(frame).await,
        };
        if sent.is_err() {
            return;
        }
    }
    let _ = sink.flush().await;
    done.notified().await;
    let _ = sink.close().await;
    reader.abort();
}

/// What one relay did in one shape.
#[derive(Debug, Clone, Default)]
struct Measured {
    delivered: u64,
    expected: u64,
    seconds: f64,
    cpu_micros: u64,
    peak_rss_kib: u64,
    p50_ms: f64,
    p99_ms: f64,
    stored: Option<u64>,
    error: Option<String>,
}

impl Measured {
    fn cpu_per_line(&self) -> f64 {
        self.cpu_micros as f64 / self.delivered.max(1) as f64
    }

    fn to_json(&self) -> Value {
        json!({
            "delivered": self.delivered, "expected": self.expected,
            "lost": self.expected.saturating_sub(self.delivered), "seconds": self.seconds,
            "lines_per_second": self.delivered as f64 / self.seconds.max(0.001),
            "cpu_us_per_line": self.cpu_per_line(), "peak_rss_mib": self.peak_rss_kib as f64 / 1024.0,
            "p50_ms": self.p50_ms, "p99_ms": self.p99_ms, "stored": self.stored, "error": self.error,
        })
    }
}

async fn run_shape(relay_name: &str, shape: Shape, options: &Options) -> Measured {
    let relay = match start_relay(relay_name, options) {
        Ok(relay) => relay,
        Err(error) => return Measured { error: Some(error), ..Measured::default() },
    };
    let mut relay = relay;
    if options.callgrind {
        let target = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/callgrind");
        relay.keep_as = Some(target.join(format!("{relay_name}-{}.out", shape.key)));
    }
    let pid = relay.child.id();
    let patience = if options.callgrind { 600.0 } else { options.seconds * 3.0 + 60.0 };
    let deadline = Instant::now() + Duration::from_secs_f64(patience);
    let expected_per_frontend = shape.clis as u64 * shape.lines_per_cli;
    let delivered = Arc::new(AtomicU64::new(0));
    let last_arrival = Arc::new(std::sync::Mutex::new(Instant::now()));
    let frontends_up = Arc::new(tokio::sync::Barrier::new(shape.frontends + 1));
    let mut frontends = Vec::new();
    for _ in 0..shape.frontends {
        let url = format!("ws://{}/ws", relay.address);
        let (delivered, last_arrival, up) =
            (delivered.clone(), last_arrival.clone(), frontends_up.clone());
        let paced = shape.rate.is_some();
        frontends.push(tokio::spawn(async move {
            let config = tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
                .read_buffer_size(64 * 1024);
            let (mut socket, _) =
                tokio_tungstenite::connect_async_with_config(url.as_str(), Some(config), true)
                    .await
                    .unwrap();
            up.wait().await;
            let mut latencies = Vec::new();
            let mut seen = 0;
            while seen < expected_per_frontend {
                let frame = match tokio::time::timeout_at(deadline.into(), socket.next()).await {
                    Ok(Some(Ok(frame))) => frame,
                    _ => break,
                };
                let WsMessage::Text(text) = frame else { continue };
                for line in text.split('\n') {
                    let Some(sent) = sent_at(line) else { continue };
                    if paced {
                        latencies.push((now_ns().saturating_sub(sent) / 1000) as u64);
                    }
                    seen += 1;
                }
            }
            delivered.fetch_add(seen, Ordering::Relaxed);
            if let Ok(mut last) = last_arrival.lock() {
                *last = (*last).max(Instant::now());
            }
            let _ = socket.close(None).await;
            latencies
        }));
    }
    frontends_up.wait().await;
    let ready = Arc::new(tokio::sync::Barrier::new(shape.clis + 1));
    let go = Arc::new(tokio::sync::Notify::new());
    let done = Arc::new(tokio::sync::Notify::new());
    let mut clis = Vec::new();
    for index in 0..shape.clis {
        let url = format!("ws://{}/", relay.address);
        clis.push(tokio::spawn(simulated_cli(
            url,
            shape,
            options.type_last,
            index,
            ready.clone(),
            go.clone(),
            done.clone(),
        )));
    }
    ready.wait().await;
    // Let the relay settle what the connections started (session records, first lines).
    let settle = if options.callgrind { 5_000 } else { 500 };
    tokio::time::sleep(Duration::from_millis(settle)).await;
    // Said, so that a profiler can be started on the relay now (`perf record -p PID`).
    eprint!("[measuring pid {pid}] ");
    let cpu_start = match relay.start_measuring() {
        Ok(start) => start,
        Err(error) => {
            stop_relay(relay);
            return Measured { error: Some(error), ..Measured::default() };
        }
    };
    let started = Instant::now();
    go.notify_waiters();
    let mut latencies = Vec::new();
    for frontend in frontends {
        latencies.extend(frontend.await.unwrap_or_default());
    }
    let (cpu_micros, measure_error) = match relay.measured() {
        Ok(total) => (total.saturating_sub(cpu_start), None),
        Err(error) => (0, Some(error)),
    };
    let last = last_arrival.lock().map(|last| *last).unwrap_or_else(|_| Instant::now());
    let peak_rss_kib = support::status_kib(&pid.to_string(), "VmHWM:");
    done.notify_waiters();
    for cli in clis {
        let _ = cli.await;
    }
    latencies.sort_unstable();
    let percentile = |p: f64| {
        let at = ((latencies.len() as f64 * p) as usize).min(latencies.len().saturating_sub(1));
        latencies.get(at).map_or(0.0, |&us| us as f64 / 1000.0)
    };
    let finished = stop_relay(relay);
    Measured {
        delivered: delivered.load(Ordering::Relaxed),
        expected: shape.expected(),
        seconds: last.saturating_duration_since(started).as_secs_f64(),
        cpu_micros,
        peak_rss_kib,
        p50_ms: percentile(0.5),
        p99_ms: percentile(0.99),
        stored: finished["stored"].as_u64(),
        error: measure_error.or_else(|| finished["error"].as_str().map(str::to_owned)),
    }
}

fn main() {
    let (serve, options) = parse_args();
    if let Some(name) = serve {
        serve_child(&name, &options);
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let mut report = Vec::new();
    let mut rows = Vec::new();
    for key in &options.shapes {
        let Some(shape) = shape(*key, &options) else {
            eprintln!("relay: no shape {key:?} (a, b, c, d)");
            std::process::exit(2);
        };
        // Passes alternate the relays, so that a slow minute of the machine hits each alike.
        let mut runs: Vec<(String, Vec<Measured>)> =
            options.relays.iter().map(|name| (name.clone(), Vec::new())).collect();
        for pass in 0..options.passes {
            for (name, measured) in &mut runs {
                eprint!("{} pass {}/{}: {name} … ", shape.describe(), pass + 1, options.passes);
                let _ = std::io::stderr().flush();
                let result = runtime.block_on(run_shape(name, shape, &options));
                eprintln!(
                    "{:.2} {}/line, {} lost, {:.0} MiB{}",
                    result.cpu_per_line(),
                    if options.callgrind { "instructions" } else { "µs" },
                    result.expected.saturating_sub(result.delivered),
                    result.peak_rss_kib as f64 / 1024.0,
                    result.error.as_deref().map(|e| format!(" ({e})")).unwrap_or_default()
                );
                measured.push(result);
            }
        }
        let cpu = |name: &str| -> Option<f64> {
            let (_, measured) = runs.iter().find(|(relay, _)| relay == name)?;
            if measured.is_empty() || measured.iter().any(|m| m.error.is_some()) {
                return None;
            }
            Some(support::median(
                &mut measured.iter().map(Measured::cpu_per_line).collect::<Vec<_>>(),
            ))
        };
        let rss = |name: &str| -> Option<f64> {
            let (_, measured) = runs.iter().find(|(relay, _)| relay == name)?;
            if options.callgrind {
                return None; // valgrind's own
            }
            measured.iter().map(|m| m.peak_rss_kib as f64 / 1024.0).reduce(f64::max)
        };
        let lost: u64 = runs
            .iter()
            .flat_map(|(_, measured)| measured)
            .filter(|m| m.error.is_none())
            .map(|m| m.expected.saturating_sub(m.delivered))
            .sum();
        rows.push(Row { shape, cpu: RELAYS.map(cpu), rss: RELAYS.map(rss), lost });
        report.push(json!({
            "shape": shape.describe(),
            "unit": if options.callgrind { "instructions per line" } else { "cpu µs per line" },
            "runs": runs.iter().map(|(name, measured)| json!({
                "relay": name, "passes": measured.iter().map(Measured::to_json).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        }));
    }
    if options.json {
        println!("{}", Value::Array(report));
        return;
    }
    print_table(&rows, &options);
}

/// The relays a table has a column for, in its order.
const RELAYS: [&str; 4] = ["forwarder", "floor", "switchboard", "node"];

/// One shape's medians, per relay in `RELAYS`' order.
struct Row {
    shape: Shape,
    cpu: [Option<f64>; 4],
    rss: [Option<f64>; 4],
    lost: u64,
}

fn print_table(rows: &[Row], options: &Options) {
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}x", a / b),
        _ => "–".into(),
    };
    let digits = if options.callgrind { 0 } else { 2 };
    let show = |value: Option<f64>| match value {
        Some(value) => format!("{value:.digits$}"),
        None => "–".into(),
    };
    if options.callgrind {
        println!(
            "Instructions per delivered line under callgrind, a fixed number of lines (median of {} passes; Node is not run under it):\n",
            options.passes
        );
    } else {
        println!(
            "CPU µs per delivered line, median of {} passes (each relay in its own process; lines of ~300 bytes):\n",
            options.passes
        );
    }
    println!("| load shape | bare forwarder | store-and-forward floor | Switchboard | Node `ws` | Switchboard / floor | Switchboard / forwarder | Node / Switchboard | peak RSS MiB (f / floor / S / N) | lost |");
    println!("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|");
    for row in rows {
        let [forwarder, floor, switchboard, node] = row.cpu;
        let rss: Vec<String> =
            row.rss.iter().map(|value| value.map_or("–".into(), |v| format!("{v:.0}"))).collect();
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            row.shape.describe(),
            show(forwarder),
            show(floor),
            show(switchboard),
            show(node),
            ratio(switchboard, floor),
            ratio(switchboard, forwarder),
            ratio(node, switchboard),
            rss.join(" / "),
            row.lost,
        );
    }
}

/// A bench daemon runs as many sessions as the bench asks (no `--max-running`).
fn unlimited() -> switchboard_server::daemon::Placement {
    // The relay's own limits are for a tool holding the ingress token; here every CLI is ours
    // (shape b starts 100 at once, over the 60 a minute a daemon takes by default).
    switchboard_server::daemon::Placement {
        max_running: Some(usize::MAX),
        relay_sessions_per_minute: Some(usize::MAX),
        ..Default::default()
    }
}
