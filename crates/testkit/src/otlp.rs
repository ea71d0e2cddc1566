//! A real OTLP trace receiver for the tests: `e2e/otlp_receiver.py`, a gRPC server built on
//! PyPI's `opentelemetry-proto` (in the virtual environment `scripts/install-python.sh` makes),
//! run as a child process. What it is sent is read back as JSON: every span, and each export's
//! headers.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::io::AsyncBufReadExt;

/// How long the receiver has to say where it listens.
const STARTING: Duration = Duration::from_secs(30);

/// The Python that `scripts/install-python.sh` set up (`$SWITCHBOARD_PYTHON_VENV`, else
/// `~/.cache/switchboard/python-grpc`), with grpcio and opentelemetry-proto.
pub fn python() -> PathBuf {
    let venv =
        std::env::var_os("SWITCHBOARD_PYTHON_VENV").map(PathBuf::from).unwrap_or_else(|| {
            let cache =
                std::env::var_os("XDG_CACHE_HOME").map(PathBuf::from).unwrap_or_else(|| {
                    PathBuf::from(std::env::var_os("HOME").expect("HOME is set")).join(".cache")
                });
            cache.join("switchboard/python-grpc")
        });
    let python = venv.join("bin/python");
    assert!(
        python.exists(),
        "the Python test packages (grpcio, opentelemetry-proto) are not in {}: run scripts/install-python.sh",
        venv.display()
    );
    python
}

/// The receiver, and what it has been sent so far.
#[derive(Debug)]
pub struct OtlpReceiver {
    endpoint: String,
    lines: Arc<Mutex<Vec<Value>>>,
    _child: tokio::process::Child,
}

impl OtlpReceiver {
    /// Starts it on 127.0.0.1, at a port of the system's choosing.
    #[allow(clippy::disallowed_methods)] // runs Python (not the Claude CLI)
    pub async fn start() -> OtlpReceiver {
        let script =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../e2e/otlp_receiver.py");
        let mut child = tokio::process::Command::new(python())
            .arg(script)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("the OTLP receiver starts");
        let mut lines = tokio::io::BufReader::new(child.stdout.take().expect("piped")).lines();
        let first = tokio::time::timeout(STARTING, lines.next_line())
            .await
            .expect("the receiver listens in time")
            .expect("the receiver's output is read")
            .expect("the receiver says where it listens");
        let port = first.strip_prefix("listening ").expect("listening PORT").to_owned();
        let heard = Arc::new(Mutex::new(Vec::new()));
        let into = heard.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                let value: Value = serde_json::from_str(&line).expect("the receiver writes JSON");
                into.lock().expect("not poisoned").push(value);
            }
        });
        OtlpReceiver { endpoint: format!("http://127.0.0.1:{port}"), lines: heard, _child: child }
    }

    /// Its address: `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Every span it was sent, as JSON (`trace_id`, `span_id`, `parent_span_id`, `name`,
    /// `start_ns`, `end_ns`, `attributes`, `events`, `status`, `resource`).
    pub fn spans(&self) -> Vec<Value> {
        let lines = self.lines.lock().expect("not poisoned");
        lines.iter().filter_map(|line| line.get("span")).cloned().collect()
    }

    /// Each export's headers (gRPC metadata), names in lower case.
    pub fn exports(&self) -> Vec<Value> {
        let lines = self.lines.lock().expect("not poisoned");
        lines.iter().filter_map(|line| line.get("export")).cloned().collect()
    }
}
