//! `switchboard serve`: the daemon, and where it keeps its state (the data directory).

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::io::Write;
use std::net::SocketAddr;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;
use serde::{Deserialize, Serialize};
use switchboard_server::{generate_token, AuthConfig, Daemon, DaemonConfig};
use switchboard_session::Policy;
use switchboard_store::{SqliteStore, Store};

/// Where the daemon listens unless told otherwise: loopback only.
pub(crate) const DEFAULT_LISTEN: &str = "127.0.0.1:7777";

/// Arguments of `switchboard serve`.
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// Address to listen on. Anything but loopback exposes the API to the network (the token
    /// still guards it).
    #[arg(long, value_name = "ADDR", default_value = DEFAULT_LISTEN)]
    listen: SocketAddr,
    #[command(flatten)]
    data: DataDirArg,
    /// The Claude Code CLI sessions run (default: `claude` on PATH).
    #[arg(long, value_name = "PATH", env = "SWITCHBOARD_CLAUDE")]
    claude: Option<PathBuf>,
    /// Permission policy for sessions that bring none (a TOML file in Claude Code's rule
    /// syntax), or `auto-approve` to allow everything (as seed 003's relays do).
    #[arg(long, value_name = "FILE|auto-approve")]
    policy: Option<PathBuf>,
    /// The API token (default: the one in the data directory, generated on first start).
    #[arg(long, value_name = "TOKEN", env = "SWITCHBOARD_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Serve without a token. Refused unless listening on loopback.
    #[arg(long)]
    no_auth: bool,
    /// The token externally launched CLIs present at the relay endpoint `/` (as
    /// `CLAUDE_CODE_SESSION_ACCESS_TOKEN`); default: one of its own, kept in the data
    /// directory (`ingress-token`), never the API token: a CLI's environment is its tools'.
    #[arg(long, value_name = "TOKEN", env = "SWITCHBOARD_INGRESS_TOKEN", hide_env_values = true)]
    ingress_token: Option<String>,
    /// A browser origin (besides the daemon's own) allowed to open WebSockets.
    #[arg(long, value_name = "ORIGIN")]
    allow_origin: Vec<String>,
    /// A loader variable (`LD_PRELOAD`, `NODE_OPTIONS`, ...) that a session's `env` may set
    /// all the same; refused otherwise. Repeat for more.
    #[arg(long, value_name = "NAME")]
    allow_env: Vec<String>,
}

/// `--data-dir`, shared by the daemon and the client commands.
#[derive(Debug, Args)]
pub(crate) struct DataDirArg {
    /// Where the database, the token and daemon.json live (default:
    /// $SWITCHBOARD_DATA_DIR, else $XDG_DATA_HOME/switchboard, else ~/.local/share/switchboard).
    #[arg(long, value_name = "DIR", global = true)]
    pub(crate) data_dir: Option<PathBuf>,
}

impl DataDirArg {
    pub(crate) fn resolve(&self) -> PathBuf {
        if let Some(dir) = &self.data_dir {
            return dir.clone();
        }
        if let Some(dir) = std::env::var_os("SWITCHBOARD_DATA_DIR") {
            return PathBuf::from(dir);
        }
        if let Some(dir) = std::env::var_os("XDG_DATA_HOME") {
            return PathBuf::from(dir).join("switchboard");
        }
        let home =
            std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("."));
        home.join(".local/share/switchboard")
    }
}

/// What a running daemon writes so that client commands find it.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct DaemonInfo {
    /// `http://ADDR`.
    pub(crate) url: String,
    /// The daemon's process id.
    pub(crate) pid: u32,
}

pub(crate) const DAEMON_FILE: &str = "daemon.json";
pub(crate) const TOKEN_FILE: &str = "token";
const INGRESS_TOKEN_FILE: &str = "ingress-token";
/// The CLIs running now (pid, start time, run id): what a daemon killed with `kill -9` left
/// behind is ended at the next start.
const RUNS_FILE: &str = "cli-runs.json";
const DATABASE_FILE: &str = "switchboard.db";

/// Creates `dir` (and missing parents) readable by the owner only. A directory that exists
/// already keeps its mode: it may be shared (a sticky `/tmp`-like directory) and is not ours
/// to change.
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)
}

/// Writes `contents` to `path`, readable by the owner only.
fn write_private(path: &Path, contents: &str) -> std::io::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(contents.as_bytes())?;
    // An older file may have had wider permissions.
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
}

/// A token: given (`flag` names it in errors), or stored in `file`, or new (and stored).
fn token(given: Option<&str>, flag: &str, data_dir: &Path, file: &str) -> Result<String, String> {
    if let Some(token) = given {
        if token.len() < 16 {
            return Err(format!("{flag} must be at least 16 characters"));
        }
        return Ok(token.to_owned());
    }
    let path = data_dir.join(file);
    if let Ok(token) = std::fs::read_to_string(&path) {
        let token = token.trim().to_owned();
        if !token.is_empty() {
            return Ok(token);
        }
    }
    let token = generate_token();
    write_private(&path, &token)
        .map_err(|error| format!("cannot write the token to {}: {error}", path.display()))?;
    Ok(token)
}

pub(crate) async fn serve(args: ServeArgs) -> ExitCode {
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err((code, message)) => {
            eprintln!("switchboard serve: {message}");
            ExitCode::from(code)
        }
    }
}

async fn run(args: ServeArgs) -> Result<(), (u8, String)> {
    if args.no_auth && !args.listen.ip().is_loopback() {
        return Err((
            2,
            format!("--no-auth is only allowed on a loopback address, not {}", args.listen),
        ));
    }
    let data_dir = args.data.resolve();
    create_private_dir(&data_dir)
        .map_err(|error| (1, format!("cannot create {}: {error}", data_dir.display())))?;
    let (token, ingress_token) = if args.no_auth {
        (None, args.ingress_token.clone())
    } else {
        let api = token(args.token.as_deref(), "--token", &data_dir, TOKEN_FILE)
            .map_err(|message| (1, message))?;
        let ingress =
            token(args.ingress_token.as_deref(), "--ingress-token", &data_dir, INGRESS_TOKEN_FILE)
                .map_err(|message| (1, message))?;
        if ingress == api {
            return Err((2, "--ingress-token must differ from the API token: a CLI's environment is visible to its tools".into()));
        }
        (Some(api), Some(ingress))
    };
    let default_policy = match &args.policy {
        Some(path) if path.as_os_str() == "auto-approve" => Some(Policy::allow_all()),
        Some(path) => Some(Policy::from_file(path).map_err(|error| (2, error.to_string()))?),
        None => None,
    };
    let sqlite = Arc::new(
        SqliteStore::open(data_dir.join(DATABASE_FILE))
            .map_err(|error| (1, format!("cannot open the database: {error}")))?,
    );
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|error| (1, format!("cannot listen on {}: {error}", args.listen)))?;
    let address = listener.local_addr().map_err(|error| (1, error.to_string()))?;
    let store: Arc<dyn Store> = sqlite.clone();
    let config = DaemonConfig {
        claude: args.claude.clone(),
        default_policy,
        env: Vec::new(),
        clear_env: false,
        transcripts: None,
        ingress_base: Some(format!("ws://{address}/v1/sessions/ws/")),
        ingress_token,
        ping_interval: None,
        allowed_env: args.allow_env.clone(),
        runs_file: Some(data_dir.join(RUNS_FILE)),
        store_retry_limit: None,
    };
    let daemon = Daemon::open(store, config).await.map_err(|error| (1, error.to_string()))?;
    let auth = AuthConfig {
        token: token.as_deref().map(Arc::from),
        allowed_origins: args.allow_origin.clone(),
    };
    let url = format!("http://{address}");
    let info = DaemonInfo { url: url.clone(), pid: std::process::id() };
    let info_path = data_dir.join(DAEMON_FILE);
    write_private(&info_path, &serde_json::to_string(&info).unwrap_or_default())
        .map_err(|error| (1, format!("cannot write {}: {error}", info_path.display())))?;
    tracing::info!(%address, data_dir = %data_dir.display(), "switchboard is listening");
    // The token goes to the terminal that started the daemon, never to the logs.
    match &token {
        Some(token) => println!(
            "Switchboard is listening on {url}\n  token: {token}\n  open:  {url}/?token={token}"
        ),
        None => println!("Switchboard is listening on {url} (no auth: loopback only)"),
    }
    let _ = std::io::stdout().flush();

    // Stops accepting on the first SIGINT or SIGTERM, then stops every session (interrupt,
    // close stdin, SIGTERM, SIGKILL), so no CLI outlives us, and waits until their last
    // events are stored; a second signal ends the daemon at once.
    let served = switchboard_server::serve(listener, daemon, auth, shutdown_signal()).await;
    // Fold the journal into the database and release the data directory.
    sqlite.close();
    let _ = std::fs::remove_file(&info_path);
    served.map_err(|error| (1, format!("the server failed: {error}")))
}

/// Resolves on the first SIGINT or SIGTERM; from then on, another one exits at once.
async fn shutdown_signal() {
    let (mut interrupt, mut terminate) = match signals() {
        Ok(signals) => signals,
        Err(error) => {
            tracing::warn!(%error, "cannot listen for signals; only Ctrl-C stops the daemon");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = interrupt.recv() => {}
        _ = terminate.recv() => {}
    }
    tracing::info!("shutting down: stopping every session (signal again to exit at once)");
    eprintln!("switchboard serve: shutting down; signal again to exit at once");
    tokio::spawn(async move {
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
        }
        eprintln!("switchboard serve: second signal; exiting now");
        std::process::exit(130);
    });
}

fn signals() -> std::io::Result<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)> {
    use tokio::signal::unix::{signal, SignalKind};
    Ok((signal(SignalKind::interrupt())?, signal(SignalKind::terminate())?))
}
