//! Real servers for the fleet's tests, each test's own and stopped when dropped: a PostgreSQL
//! in a temporary directory, reached only through a Unix socket in that directory (no port,
//! nothing another user can reach), a NATS server on a free loopback port, and a Prometheus
//! (for the metrics' test) on another.
//!
//! `scripts/install-servers.sh` installs Debian's packages. Where a server is not installed,
//! [`Postgres::start`] prints why the test is skipped and returns `None`; with
//! `SWITCHBOARD_REQUIRE_SERVERS=1` (set by CI) it panics instead, so a CI without the servers
//! fails rather than passing untested.
//!
//! PostgreSQL refuses to run as root: under root the server runs as `nobody` (`setpriv`), and
//! its directory is given to that user. Either way it gets a parent-death signal, so a test
//! process killed outright takes its server along.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// How long a server may take to start.
const START_LIMIT: Duration = Duration::from_secs(60);

/// The variable that turns a skip into a failure (CI sets it).
pub const REQUIRE_SERVERS: &str = "SWITCHBOARD_REQUIRE_SERVERS";

/// Says a test is skipped because `what` is missing, or panics when servers are required.
fn skip(what: &str) {
    if std::env::var_os(REQUIRE_SERVERS).is_some_and(|value| !value.is_empty() && value != "0") {
        panic!("{what}, and {REQUIRE_SERVERS} is set (scripts/install-servers.sh installs it)");
    }
    #[allow(clippy::print_stderr)]
    {
        eprintln!("skipped: {what} (scripts/install-servers.sh installs it)");
    }
}

/// The newest of Debian's PostgreSQL installs (`/usr/lib/postgresql/N/bin`), or the directory
/// `SWITCHBOARD_PG_BIN` names, or where `initdb` is on PATH.
fn postgres_bin() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("SWITCHBOARD_PG_BIN") {
        return Some(PathBuf::from(dir));
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return Some(bin);
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .find(|dir| dir.join("initdb").is_file() && dir.join("postgres").is_file())
}

/// Whether this process is root (PostgreSQL's servers then run as `nobody`).
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|line| line.starts_with("Uid:"))?;
            line.split_whitespace().nth(2).map(|effective| effective == "0")
        })
        .unwrap_or(false)
}

/// `nobody`'s ids.
const NOBODY: u32 = 65534;

/// A command for a server's program: as `nobody` under root, with a parent-death signal.
fn server_command(program: &Path) -> std::process::Command {
    #[allow(clippy::disallowed_methods)] // a test server, not a CLI
    let mut command = std::process::Command::new("setpriv");
    command.arg("--pdeathsig=KILL");
    if is_root() {
        command.args([
            format!("--reuid={NOBODY}"),
            format!("--regid={NOBODY}"),
            "--clear-groups".to_owned(),
        ]);
    }
    command.arg("--").arg(program);
    command
}

/// A PostgreSQL server of this test's own.
pub struct Postgres {
    child: Child,
    socket_dir: PathBuf,
    /// Holds the data directory and the socket; removed last.
    _dir: tempfile::TempDir,
}

impl std::fmt::Debug for Postgres {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Postgres").finish_non_exhaustive()
    }
}

impl Postgres {
    /// Starts a server: `initdb` (superuser `switchboard`, trust on its socket, UTF8), then
    /// `postgres` listening only on a Unix socket in its directory. `None` (with a message)
    /// when PostgreSQL is not installed.
    pub fn start() -> Option<Postgres> {
        let Some(bin) = postgres_bin() else {
            skip("PostgreSQL is not installed");
            return None;
        };
        let dir =
            tempfile::Builder::new().prefix("sb-pg").tempdir().expect("a temporary directory");
        if is_root() {
            std::os::unix::fs::chown(dir.path(), Some(NOBODY), Some(NOBODY))
                .expect("the server's directory given to nobody");
        }
        let data = dir.path().join("data");
        let initdb = server_command(&bin.join("initdb"))
            .arg("--pgdata")
            .arg(&data)
            .args([
                "--username=switchboard",
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
                "--no-sync",
                "--no-instructions",
            ])
            .stdin(Stdio::null())
            .output()
            .expect("initdb runs");
        assert!(
            initdb.status.success(),
            "initdb failed: {}{}",
            String::from_utf8_lossy(&initdb.stdout),
            String::from_utf8_lossy(&initdb.stderr)
        );
        let socket_dir = dir.path().to_path_buf();
        let mut child = server_command(&bin.join("postgres"))
            .arg("-D")
            .arg(&data)
            .arg("-k")
            .arg(&socket_dir)
            .args([
                "-c",
                "listen_addresses=",
                "-c",
                "fsync=off",
                "-c",
                "full_page_writes=off",
                "-c",
                "max_connections=200",
                "-c",
                "shared_buffers=32MB",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("postgres starts");
        // Ready when it says so; its log then keeps draining in a thread of its own.
        let mut log = BufReader::new(child.stderr.take().expect("postgres's stderr"));
        let deadline = Instant::now() + START_LIMIT;
        let mut seen = String::new();
        loop {
            let mut line = String::new();
            let read = log.read_line(&mut line).unwrap_or(0);
            if read == 0 || Instant::now() > deadline {
                let _ = child.kill();
                panic!("postgres did not start:\n{seen}");
            }
            seen.push_str(&line);
            if line.contains("ready to accept connections") {
                break;
            }
        }
        std::thread::spawn(move || {
            let mut line = String::new();
            while log.read_line(&mut line).unwrap_or(0) > 0 {
                line.clear();
            }
        });
        Some(Postgres { child, socket_dir, _dir: dir })
    }

    /// The server's (the postmaster's) process id; its backends are its children.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The URL of database `postgres` as superuser `switchboard`, through the socket.
    pub fn url(&self) -> String {
        self.url_of("postgres")
    }

    /// The URL of `database` on this server.
    pub fn url_of(&self, database: &str) -> String {
        let host: String = self
            .socket_dir
            .to_string_lossy()
            .chars()
            .map(|c| if c == '/' { "%2F".to_owned() } else { c.to_string() })
            .collect();
        format!("postgres://switchboard@{host}/{database}")
    }

    /// The directory of its socket.
    pub fn socket_dir(&self) -> &Path {
        &self.socket_dir
    }

    /// Ends the server at once (SIGKILL), as a crashed database host would.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        // `setpriv` exec'd the server, so this is the postmaster. A fast shutdown (SIGINT)
        // returns its shared memory; SIGKILL if it takes too long. Its directory goes with
        // `_dir`.
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGINT,
            );
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill();
    }
}

/// Where `nats-server` is: `SWITCHBOARD_NATS_SERVER`, else on PATH or in `/usr/sbin` (where
/// Debian puts it).
fn nats_server() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("SWITCHBOARD_NATS_SERVER") {
        return Some(PathBuf::from(path));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/bin")])
        .map(|dir| dir.join("nats-server"))
        .find(|candidate| candidate.is_file())
}

/// A NATS server of this test's own, on a free loopback port.
pub struct Nats {
    child: Child,
    url: String,
}

impl std::fmt::Debug for Nats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nats").finish_non_exhaustive()
    }
}

impl Nats {
    /// Starts `nats-server` on 127.0.0.1 with a port it picks. `None` (with a message) when it
    /// is not installed.
    pub fn start() -> Option<Nats> {
        let Some(program) = nats_server() else {
            skip("nats-server is not installed");
            return None;
        };
        let mut child = server_command(&program)
            .args(["-a", "127.0.0.1", "-p", "-1"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("nats-server starts");
        let mut log = BufReader::new(child.stderr.take().expect("nats-server's stderr"));
        let deadline = Instant::now() + START_LIMIT;
        let mut seen = String::new();
        let mut url = None;
        loop {
            let mut line = String::new();
            let read = log.read_line(&mut line).unwrap_or(0);
            if read == 0 || Instant::now() > deadline {
                let _ = child.kill();
                panic!("nats-server did not start:\n{seen}");
            }
            seen.push_str(&line);
            if let Some(address) = line.split("Listening for client connections on ").nth(1) {
                url = Some(format!("nats://{}", address.trim()));
            }
            if line.contains("Server is ready") {
                break;
            }
        }
        std::thread::spawn(move || {
            let mut line = String::new();
            while log.read_line(&mut line).unwrap_or(0) > 0 {
                line.clear();
            }
        });
        let url = url.unwrap_or_else(|| panic!("nats-server did not say its port:\n{seen}"));
        Some(Nats { child, url })
    }

    /// `nats://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The server's process id (a benchmark reads its CPU time).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Freezes the server (SIGSTOP; its connections stay open, nothing passes), or lets it go
    /// on (SIGCONT): a bus that a node is cut off from, without a reconnect.
    pub fn freeze(&self, frozen: bool) {
        use nix::sys::signal::Signal::{SIGCONT, SIGSTOP};
        let signal = if frozen { SIGSTOP } else { SIGCONT };
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, signal).expect("nats-server takes the signal");
    }
}

impl Drop for Nats {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Where `prometheus` is: `SWITCHBOARD_PROMETHEUS`, else on PATH or in `/usr/bin`.
fn prometheus_program() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("SWITCHBOARD_PROMETHEUS") {
        return Some(PathBuf::from(path));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/bin")])
        .map(|dir| dir.join("prometheus"))
        .find(|candidate| candidate.is_file())
}

/// A Prometheus server of this test's own (Debian's `prometheus`), on a free loopback port,
/// its data in a temporary directory.
pub struct Prometheus {
    child: Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl std::fmt::Debug for Prometheus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prometheus").field("url", &self.url).finish_non_exhaustive()
    }
}

impl Prometheus {
    /// Starts `prometheus` with `scrape_configs` (YAML, the list under that key), scraping
    /// every second. `None` (with a message) when it is not installed.
    pub fn start(scrape_configs: &str) -> Option<Prometheus> {
        let Some(program) = prometheus_program() else {
            skip("prometheus is not installed");
            return None;
        };
        let dir = tempfile::tempdir().expect("a temporary directory");
        if is_root() {
            std::os::unix::fs::chown(dir.path(), Some(NOBODY), Some(NOBODY))
                .expect("the directory given to nobody");
        }
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n{scrape_configs}\n"
            ),
        )
        .expect("the config written");
        if is_root() {
            std::os::unix::fs::chown(&config, Some(NOBODY), Some(NOBODY))
                .expect("the config given to nobody");
        }
        let mut child = server_command(&program)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
            .arg("--web.listen-address=127.0.0.1:0")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("prometheus starts");
        // Its log is read on a thread of its own, so that a server that says nothing fails the
        // test at the deadline rather than blocking it.
        let log = BufReader::new(child.stderr.take().expect("prometheus's stderr"));
        let (lines, said) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in log.lines() {
                let Ok(line) = line else { return };
                // After it is ready nobody listens: the rest is drained.
                let _ = lines.send(line);
            }
        });
        let deadline = Instant::now() + START_LIMIT;
        let mut seen = String::new();
        let mut url = None;
        let mut ready = false;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok(line) = said.recv_timeout(left) else {
                let _ = child.kill();
                panic!("prometheus did not start:\n{seen}");
            };
            seen.push_str(&line);
            seen.push('\n');
            // `msg="Listening on" address=127.0.0.1:PORT`: the port it picked.
            if line.contains("msg=\"Listening on\"") {
                if let Some(address) = line.split("address=").nth(1) {
                    url = Some(format!("http://{}", address.trim()));
                }
            }
            // Ready, and the port said: its web listener logs the port from a goroutine of
            // its own, sometimes after the ready line.
            if line.contains("Server is ready to receive web requests") {
                ready = true;
            }
            if ready && url.is_some() {
                break;
            }
        }
        let url = url.unwrap_or_else(|| panic!("prometheus did not say its port:\n{seen}"));
        Some(Prometheus { child, url, _dir: dir })
    }

    /// `http://127.0.0.1:PORT`: its web UI and HTTP API.
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
