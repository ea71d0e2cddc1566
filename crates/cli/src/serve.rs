//! `switchboard serve`: its arguments, its output and its signals. The daemon, its accept loop
//! and its data directory are the server library's (`switchboard_server::{Daemon, serve,
//! DataDir}`).

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use switchboard_server::links::LinkConfig;
use switchboard_server::notify::NotifyConfig;
use switchboard_server::{AuthConfig, Daemon, DaemonConfig, DaemonInfo, DataDir, Tokens, WarmSpec};
use switchboard_session::Policy;
use switchboard_store::{Documents, PostgresOptions, PostgresStore, SqliteStore, Store};

/// Where the daemon listens unless told otherwise: loopback only.
pub(crate) const DEFAULT_LISTEN: &str = "127.0.0.1:7777";

/// Arguments of `switchboard serve`.
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// Address to listen on. Anything but loopback exposes the API to the network (the token
    /// still guards it).
    #[arg(long, value_name = "ADDR", default_value = DEFAULT_LISTEN, env = "SWITCHBOARD_LISTEN")]
    listen: SocketAddr,
    #[command(flatten)]
    data: DataDirArg,
    /// The Claude Code CLI sessions run (default: `claude` on PATH).
    #[arg(long, value_name = "PATH", env = "SWITCHBOARD_CLAUDE")]
    claude: Option<PathBuf>,
    /// Permission policy for sessions that bring none (a TOML file in Claude Code's rule
    /// syntax), or `auto-approve` to allow everything (as the agents-ui relay protocol's relays do).
    #[arg(long, value_name = "FILE|auto-approve", env = "SWITCHBOARD_POLICY")]
    policy: Option<PathBuf>,
    /// Permission policy for the Claude Code sessions Switchboard did not start, which the
    /// hooks of `switchboard hooks install` bring (default: --policy's). Without either, their
    /// tool calls are left to the CLI, as if Switchboard were not there.
    #[arg(long, value_name = "FILE", env = "SWITCHBOARD_EXTERNAL_POLICY")]
    external_policy: Option<PathBuf>,
    /// The API token (default: the one in the data directory, generated on first start). A
    /// command line is readable by every local user: prefer --token-file, or
    /// SWITCHBOARD_TOKEN.
    #[arg(long, value_name = "TOKEN", env = "SWITCHBOARD_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Read the API token from FILE (its first line), not from the command line.
    #[arg(long, value_name = "FILE", conflicts_with = "token")]
    token_file: Option<PathBuf>,
    /// Serve without a token. Refused unless listening on loopback.
    #[arg(long)]
    no_auth: bool,
    /// Also serve Prometheus metrics (`GET /metrics`, docs/observability.md) on this loopback
    /// address, with no token, for a Prometheus on this machine. The main port serves them
    /// too, to any API token (a Prometheus elsewhere uses that, with a read token): they name
    /// projects' directories, tools and models.
    #[arg(long, value_name = "ADDR", env = "SWITCHBOARD_METRICS_LISTEN")]
    metrics_listen: Option<SocketAddr>,
    /// Send OpenTelemetry traces (a span per turn, a child per tool call and per wait for a
    /// person; docs/observability.md) to this OTLP/gRPC collector: http://HOST:4317. Off by
    /// default. A collector's key goes in SWITCHBOARD_OTLP_HEADERS (name=value,...), never on
    /// the command line.
    #[arg(long, value_name = "URL", env = "SWITCHBOARD_OTLP_ENDPOINT")]
    otlp_endpoint: Option<String>,
    /// The token externally launched CLIs present at the relay endpoint `/` (as
    /// `CLAUDE_CODE_SESSION_ACCESS_TOKEN`); default: one of its own, kept in the data
    /// directory (`ingress-token`), never the API token: a CLI's environment is its tools'.
    #[arg(long, value_name = "TOKEN", env = "SWITCHBOARD_INGRESS_TOKEN", hide_env_values = true)]
    ingress_token: Option<String>,
    /// Read the relay's ingress token from FILE (its first line), not from the command line.
    #[arg(long, value_name = "FILE", conflicts_with = "ingress_token")]
    ingress_token_file: Option<PathBuf>,
    /// A browser origin (besides the daemon's own) allowed to open WebSockets.
    #[arg(long, value_name = "ORIGIN")]
    allow_origin: Vec<String>,
    /// The daemon's address as people reach it (behind a proxy or a tunnel), for the approval
    /// links notifications carry; default: the address it listens on.
    #[arg(long, value_name = "URL", env = "SWITCHBOARD_PUBLIC_URL")]
    public_url: Option<String>,
    /// A notify file: the channels (webhook, ntfy, Slack) that hear of permission requests,
    /// questions and finished or failed turns, with one-tap links (docs/notifications.md).
    #[arg(long, value_name = "FILE", env = "SWITCHBOARD_NOTIFY")]
    notify: Option<std::path::PathBuf>,
    /// What all sessions together may spend per day (UTC), in US dollars, as their CLIs report
    /// it; reached, sessions pause until it is raised (PATCH /api/budget) or the day ends.
    /// Kept in the data directory (budget.json) when given; default: what was set before.
    #[arg(long, value_name = "USD", env = "SWITCHBOARD_DAILY_BUDGET_USD")]
    daily_budget_usd: Option<f64>,
    /// A loader variable (`LD_PRELOAD`, `NODE_OPTIONS`, ...) that a session's `env` may set
    /// all the same; refused otherwise. Repeat for more.
    #[arg(long, value_name = "NAME")]
    allow_env: Vec<String>,
    /// Keep CLIs started for new sessions in DIR, so that a session there skips the CLI's
    /// cold start (its first answer comes 0.4 to 1.5 s sooner). A session takes one when it
    /// uses the daemon's policy and CLI, no flags of its own, and the --warm-model; its
    /// permission mode may be any but bypassPermissions. Each idle CLI holds about 200 MiB.
    /// Repeat for more directories.
    #[arg(long, value_name = "DIR")]
    warm: Vec<PathBuf>,
    /// How many CLIs to keep warm per --warm directory (in all at most 16).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=16))]
    warm_count: u16,
    /// The model of the warm CLIs (default: the CLI's own); a session asking for another
    /// starts cold.
    #[arg(long, value_name = "MODEL")]
    warm_model: Option<String>,
    /// Also serve the agents-ui relay protocol (`/` for CLIs, `/ws` for frontends) on the first
    /// free port of this range, on the --listen address: its frontends look for a relay on
    /// 8765-8774. A frontend there needs no token if its page's origin is one --allow-origin
    /// names; anyone else needs the token, as on the main port.
    #[arg(long, value_name = "FIRST-LAST", value_parser = parse_ports)]
    relay_ports: Option<(u16, u16)>,
    /// Keep sessions in this PostgreSQL database instead of the data directory's SQLite file,
    /// so that several daemons share one record (docs/fleet.md):
    /// postgres://USER:PASSWORD@HOST:PORT/DBNAME. The schema is created or migrated at start.
    #[arg(long, value_name = "URL", env = "SWITCHBOARD_DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
    /// With --database-url: while several sessions are writing, how long (in milliseconds) a
    /// line waits for others to be committed with it (0: never waits). A commit costs
    /// PostgreSQL about the same for one line as for twenty, so under load this saves most of
    /// PostgreSQL's work a line for a few milliseconds of latency (docs/fleet.md).
    #[arg(
        long,
        value_name = "MS",
        env = "SWITCHBOARD_DATABASE_GROUP_WAIT",
        default_value_t = 5,
        value_parser = clap::value_parser!(u64).range(0..=1000)
    )]
    database_group_wait: u64,
    /// This daemon's name among those sharing the --database-url (default: the host's name).
    /// Sessions show the node that runs them; at start a daemon ends only its own node's
    /// leftover sessions, so two daemons must never share a name.
    #[arg(long, value_name = "NAME", env = "SWITCHBOARD_NODE", value_parser = parse_node)]
    node: Option<String>,
    /// The NATS server the daemons sharing the --database-url talk through
    /// (nats://HOST:4222, tls://…): every node then serves every session live, and answers,
    /// messages and interrupts sent to any node reach the one that runs the session.
    #[arg(long, value_name = "URL", env = "SWITCHBOARD_NATS_URL", hide_env_values = true)]
    nats_url: Option<String>,
    /// A directory whose sessions this node runs, for placing sessions among the nodes: a
    /// session that names no node goes to the least loaded node whose root holds its
    /// directory. Repeat for more (in SWITCHBOARD_ROOTS, ':' between them). Without one, this
    /// node takes only sessions asked of it.
    #[arg(long = "root", value_name = "DIR", env = "SWITCHBOARD_ROOTS", value_delimiter = ':')]
    roots: Vec<PathBuf>,
    /// The most sessions this node runs at once when placed by load (default 100; each CLI
    /// takes about 200 MiB).
    #[arg(
        long,
        value_name = "N",
        env = "SWITCHBOARD_CAPACITY",
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    capacity: Option<u32>,
    /// The most sessions this daemon runs at once (default 32; each CLI takes about 200 MiB
    /// and its tools more): past it a new session, a resume or a relay CLI is refused with
    /// 503 and why, and other nodes place nothing here. Warm CLIs (`--warm`) come on top, at
    /// most as many.
    #[arg(
        long,
        value_name = "N",
        env = "SWITCHBOARD_MAX_RUNNING",
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    max_running: Option<u32>,
}

/// A node's name: 1 to 64 letters, digits, `.`, `_` or `-`.
fn parse_node(text: &str) -> Result<String, String> {
    let valid = !text.is_empty()
        && text.len() <= 64
        && text.bytes().all(|byte| byte.is_ascii_alphanumeric() || b"._-".contains(&byte));
    if valid {
        Ok(text.to_owned())
    } else {
        Err(format!("{text:?} is not a node name (1 to 64 letters, digits, '.', '_' or '-')"))
    }
}

/// The host's name, as a node's default name (`node` when it is not one).
fn host_name() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|name| name.into_string().ok())
        .and_then(|name| parse_node(name.as_str()).ok())
        .unwrap_or_else(|| "node".to_owned())
}

/// `8765-8774` (or one port).
fn parse_ports(text: &str) -> Result<(u16, u16), String> {
    let (first, last) = text.split_once('-').unwrap_or((text, text));
    let port = |part: &str| {
        part.trim().parse::<u16>().map_err(|_| format!("{part:?} is not a port (1-65535)"))
    };
    let (first, last) = (port(first)?, port(last)?);
    if first == 0 || first > last {
        return Err(format!("{text:?} is not a range of ports like 8765-8774"));
    }
    Ok((first, last))
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
    if args.no_auth && args.public_url.is_some() {
        // Behind a proxy every request looks local: without auth that is everyone.
        return Err((
            2,
            "--no-auth cannot be used with --public-url: behind a proxy or a tunnel every request would look local".to_owned(),
        ));
    }
    let traces = match &args.otlp_endpoint {
        Some(endpoint) => {
            let mut options = switchboard_server::traces::TraceOptions::new(endpoint.clone());
            if let Some(headers) = std::env::var_os("SWITCHBOARD_OTLP_HEADERS") {
                let headers = headers
                    .into_string()
                    .map_err(|_| (2, "SWITCHBOARD_OTLP_HEADERS is not UTF-8".to_owned()))?;
                options.headers = switchboard_server::traces::TraceOptions::parse_headers(&headers)
                    .map_err(|error| (2, format!("SWITCHBOARD_OTLP_HEADERS: {error}")))?;
            }
            options.check().map_err(|error| (2, error))?;
            Some(options)
        }
        None => None,
    };
    let data_dir = DataDir::new(args.data.resolve());
    data_dir
        .create()
        .map_err(|error| (1, format!("cannot create {}: {error}", data_dir.path().display())))?;
    let given_token = match &args.token_file {
        Some(file) => Some(secret_from_file(file, "--token-file").map_err(|message| (2, message))?),
        None => args.token.clone(),
    };
    let given_ingress = match &args.ingress_token_file {
        Some(file) => {
            Some(secret_from_file(file, "--ingress-token-file").map_err(|message| (2, message))?)
        }
        None => args.ingress_token.clone(),
    };
    let (token, ingress_token) = if args.no_auth {
        (None, given_ingress)
    } else {
        let api = data_dir.api_token(given_token.as_deref()).map_err(|message| (1, message))?;
        let ingress = data_dir
            .ingress_token(given_ingress.as_deref(), &api)
            .map_err(|message| (2, message))?;
        (Some(api), Some(ingress))
    };
    let default_policy = match &args.policy {
        Some(path) if path.as_os_str() == "auto-approve" => Some(Policy::allow_all()),
        Some(path) => Some(Policy::from_file(path).map_err(|error| (2, error.to_string()))?),
        None => None,
    };
    let external_policy = match &args.external_policy {
        Some(path) => Some(Policy::from_file(path).map_err(|error| (2, error.to_string()))?),
        None => None,
    };
    // The data directory's SQLite file, or a PostgreSQL shared with other daemons.
    let (store, node): (OpenStore, Option<String>) = match &args.database_url {
        Some(url) => {
            let options = PostgresOptions {
                group_wait: Duration::from_millis(args.database_group_wait),
                ..PostgresOptions::default()
            };
            let postgres = PostgresStore::connect_with(url, options)
                .await
                .map_err(|error| (1, format!("cannot open the database: {error}")))?;
            let node = args.node.clone().unwrap_or_else(host_name);
            tracing::info!(database = postgres.database(), %node, "sessions are kept in PostgreSQL");
            (OpenStore::Postgres(Arc::new(postgres)), Some(node))
        }
        None if args.nats_url.is_some() => {
            return Err((
                2,
                "--nats-url joins daemons that share a --database-url; give one".to_owned(),
            ))
        }
        None if args.node.is_some() => {
            return Err((
                2,
                "--node names a daemon among several sharing a --database-url; give one".to_owned(),
            ))
        }
        None => (
            OpenStore::Sqlite(Arc::new(
                SqliteStore::open(data_dir.database())
                    .map_err(|error| (1, format!("cannot open the database: {error}")))?,
            )),
            None,
        ),
    };
    // What the nodes of a fleet share besides sessions (named tokens, keys, budgets, push
    // subscriptions), kept in the shared database; a daemon of its own keeps them in files.
    let documents: Option<Arc<dyn Documents>> = match &store {
        OpenStore::Postgres(postgres) => Some(postgres.clone()),
        OpenStore::Sqlite(_) => None,
    };
    // The named tokens are read before anything starts: a daemon does not run with tokens it
    // cannot account for.
    let auth = match (&token, &documents) {
        (Some(token), Some(documents)) => AuthConfig::new(
            Tokens::shared(token, documents.clone(), data_dir.tokens_file())
                .await
                .map_err(|error| (1, error.to_string()))?,
        ),
        (Some(token), None) => AuthConfig::new(
            Tokens::load(token, data_dir.tokens_file()).map_err(|error| (1, error.to_string()))?,
        ),
        (None, _) => AuthConfig::no_auth(),
    }
    .allowing(args.allow_origin.clone());
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|error| (1, format!("cannot listen on {}: {error}", args.listen)))?;
    let address = listener.local_addr().map_err(|error| (1, error.to_string()))?;
    let shared: Arc<dyn Store> = match &store {
        OpenStore::Sqlite(sqlite) => sqlite.clone(),
        OpenStore::Postgres(postgres) => postgres.clone(),
    };
    // With a bus, what this node stores is published to the others once committed.
    let bus = match (&args.nats_url, &node) {
        (Some(url), Some(node)) => Some(
            switchboard_server::bus::Bus::connect(url, node).await.map_err(|error| (1, error))?,
        ),
        _ => None,
    };
    let shared: Arc<dyn Store> = match &bus {
        Some(bus) => Arc::new(switchboard_server::bus::BusStore::new(shared, bus.clone())),
        None => shared,
    };
    // Named, on PATH, or the tested version in Switchboard's cache (`switchboard install-claude`).
    let claude = match crate::install::find(args.claude.as_deref()) {
        Some((program, source)) => {
            if source == crate::install::Source::Cache {
                tracing::info!(program = %program.display(), "sessions run Claude Code from Switchboard's cache (no claude on PATH)");
            }
            Some(program)
        }
        None => {
            tracing::warn!("{}", crate::install::missing());
            None
        }
    };
    let config = DaemonConfig {
        claude,
        default_policy,
        external_policy,
        env: Vec::new(),
        clear_env: false,
        transcripts: None,
        ingress_base: Some(format!("ws://{address}/v1/sessions/ws/")),
        ingress_token,
        ping_interval: None,
        allowed_env: args.allow_env.clone(),
        runs_file: Some(data_dir.runs_file()),
        data_dir: Some(data_dir.path().to_path_buf()),
        store_retry_limit: None,
        stall_limit: None,
        warm: warm_specs(&args)?,
        links: LinkConfig {
            key: Some(data_dir.link_key(documents.clone()).await.map_err(|message| (1, message))?),
            public_url: Some(public_url(args.public_url.as_deref(), address)?),
        },
        budget: switchboard_server::budget::BudgetConfig {
            file: Some(data_dir.budget_file()),
            shared: documents.clone(),
            daily_usd: args.daily_budget_usd,
        },
        notify: NotifyConfig {
            vapid_key: Some(
                data_dir.vapid_key(documents.clone()).await.map_err(|message| (1, message))?,
            ),
            push_file: Some(data_dir.push_file()),
            shared: documents.clone(),
            ..match &args.notify {
                Some(path) => NotifyConfig::from_file(path).map_err(|message| (2, message))?,
                None => NotifyConfig::default(),
            }
        },
        node,
        traces,
        bus,
        placement: switchboard_server::daemon::Placement {
            roots: args
                .roots
                .iter()
                .map(|root| std::path::absolute(root).unwrap_or_else(|_| root.clone()))
                .collect(),
            capacity: args.capacity.map(|capacity| capacity as usize),
            max_running: args.max_running.map(|max| max as usize),
            relay_sessions_per_minute: None,
        },
        clock: Default::default(),
    };
    // From here on a SIGINT or SIGTERM stops the daemon gracefully: the daemon starts its
    // sessions' recovery and its senders as it opens, and a signal that came before the accept
    // loop began would otherwise end the process with the default action, mid-write.
    let signalled = shutdown_signal();
    let daemon = Daemon::open(shared, config).await.map_err(|error| {
        let code = if matches!(error, switchboard_server::DaemonError::Invalid(_)) { 2 } else { 1 };
        (code, error.to_string())
    })?;
    let url = format!("http://{address}");
    data_dir
        .write_info(&DaemonInfo { url: url.clone(), pid: std::process::id() })
        .map_err(|message| (1, message))?;
    tracing::info!(%address, data_dir = %data_dir.path().display(), "switchboard is listening");
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
    // One signal stops both ports.
    let (stop, stopped) = tokio::sync::watch::channel(false);
    if let Some(address) = args.metrics_listen {
        if !address.ip().is_loopback() {
            return Err((
                2,
                format!(
                    "--metrics-listen serves without a token, so only on a loopback address, not {address}; a Prometheus elsewhere scrapes the main port with a read token (docs/observability.md)"
                ),
            ));
        }
        let listener = tokio::net::TcpListener::bind(address)
            .await
            .map_err(|error| (1, format!("cannot listen for metrics on {address}: {error}")))?;
        let bound = listener.local_addr().map_err(|error| (1, error.to_string()))?;
        println!("  metrics: http://{bound}/metrics (no token)");
        let _ = std::io::stdout().flush();
        let mut stopped = stopped.clone();
        let daemon = daemon.clone();
        tokio::spawn(async move {
            let shutdown = async move {
                let _ = stopped.wait_for(|stopped| *stopped).await;
            };
            if let Err(error) = switchboard_server::serve_metrics(listener, daemon, shutdown).await
            {
                tracing::error!(%error, "the metrics port failed");
            }
        });
    }
    if let Some((first, last)) = args.relay_ports {
        let mut relay = None;
        for port in first..=last {
            if let Ok(listener) = tokio::net::TcpListener::bind((args.listen.ip(), port)).await {
                relay = Some(listener);
                break;
            }
        }
        let Some(listener) = relay else {
            return Err((1, format!("no port of {first}-{last} is free for the relay")));
        };
        let relay_address = listener.local_addr().map_err(|error| (1, error.to_string()))?;
        println!(
            "  relay: ws://{relay_address}/ for CLIs (--sdk-url), ws://{relay_address}/ws for frontends"
        );
        let _ = std::io::stdout().flush();
        let mut stopped = stopped.clone();
        let (daemon, auth) = (daemon.clone(), auth.clone());
        tokio::spawn(async move {
            let shutdown = async move {
                let _ = stopped.wait_for(|stopped| *stopped).await;
            };
            if let Err(error) =
                switchboard_server::serve_relay(listener, daemon, auth, shutdown).await
            {
                tracing::error!(%error, "the relay port failed");
            }
        });
    }
    let shutdown = async move {
        signalled.await;
        let _ = stop.send(true);
    };
    let served = switchboard_server::serve(listener, daemon, auth, shutdown).await;
    // Fold the journal into the database and release the data directory (or close the
    // PostgreSQL pool).
    match store {
        OpenStore::Sqlite(sqlite) => sqlite.close(),
        OpenStore::Postgres(postgres) => postgres.close(),
    }
    data_dir.remove_info();
    served.map_err(|error| (1, format!("the server failed: {error}")))
}

/// The store a daemon opened, kept to be closed at the end.
enum OpenStore {
    Sqlite(Arc<SqliteStore>),
    Postgres(Arc<PostgresStore>),
}

/// The `--warm` directories, made absolute against the current one.
fn warm_specs(args: &ServeArgs) -> Result<Vec<WarmSpec>, (u8, String)> {
    args.warm
        .iter()
        .map(|dir| {
            let cwd = std::path::absolute(dir)
                .map_err(|error| (2, format!("--warm {}: {error}", dir.display())))?;
            Ok(WarmSpec {
                cwd,
                model: args.warm_model.clone(),
                count: usize::from(args.warm_count),
            })
        })
        .collect()
}

/// Listens for SIGINT and SIGTERM from the call on (not from the first poll: a signal that
/// comes before the returned future is awaited is kept, not met by the default action). The
/// future resolves on the first; a second one, at any time after, exits at once, even while
/// the daemon is still opening.
pub(crate) fn shutdown_signal() -> impl std::future::Future<Output = ()> + Send + 'static {
    let (signalled, mut first) = tokio::sync::watch::channel(false);
    match signals() {
        Ok((mut interrupt, mut terminate)) => {
            tokio::spawn(async move {
                tokio::select! {
                    _ = interrupt.recv() => {}
                    _ = terminate.recv() => {}
                }
                tracing::info!(
                    "shutting down: stopping every session (signal again to exit at once)"
                );
                eprintln!("switchboard serve: shutting down; signal again to exit at once");
                let _ = signalled.send(true);
                tokio::select! {
                    _ = interrupt.recv() => {}
                    _ = terminate.recv() => {}
                }
                eprintln!("switchboard serve: second signal; exiting now");
                std::process::exit(130);
            });
        }
        Err(error) => {
            tracing::warn!(%error, "cannot listen for signals; only Ctrl-C stops the daemon");
            tokio::spawn(async move {
                let _ = tokio::signal::ctrl_c().await;
                let _ = signalled.send(true);
            });
        }
    }
    async move {
        let _ = first.wait_for(|signalled| *signalled).await;
    }
}

fn signals() -> std::io::Result<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)> {
    use tokio::signal::unix::{signal, SignalKind};
    Ok((signal(SignalKind::interrupt())?, signal(SignalKind::terminate())?))
}

/// `--public-url` (an `http://` or `https://` address, without a trailing `/`), or the address
/// the daemon listens on.
fn public_url(given: Option<&str>, address: std::net::SocketAddr) -> Result<String, (u8, String)> {
    let Some(url) = given else { return Ok(format!("http://{address}")) };
    let url = url.trim_end_matches('/');
    let rest = url.strip_prefix("https://").or_else(|| url.strip_prefix("http://"));
    match rest {
        Some(host) if !host.is_empty() && !host.contains(char::is_whitespace) => Ok(url.to_owned()),
        _ => Err((2, format!("--public-url must be an http:// or https:// address, not {url:?}"))),
    }
}

/// The largest token file read.
const MAX_TOKEN_FILE_BYTES: u64 = 4096;

/// A token from `file` (`flag` names where it came from): its first line, trimmed; a file that
/// is not a regular file, is larger than [`MAX_TOKEN_FILE_BYTES`] or holds no token is refused
/// with why, never with what it holds.
fn secret_from_file(file: &std::path::Path, flag: &str) -> Result<String, String> {
    use std::io::Read;
    let shown = file.display();
    let opened = std::fs::File::open(file).map_err(|error| format!("{flag} {shown}: {error}"))?;
    let meta = opened.metadata().map_err(|error| format!("{flag} {shown}: {error}"))?;
    if !meta.is_file() {
        return Err(format!("{flag} {shown}: not a regular file"));
    }
    if meta.len() > MAX_TOKEN_FILE_BYTES {
        return Err(format!("{flag} {shown}: larger than {MAX_TOKEN_FILE_BYTES} bytes"));
    }
    let mut text = String::new();
    opened
        .take(MAX_TOKEN_FILE_BYTES)
        .read_to_string(&mut text)
        .map_err(|error| format!("{flag} {shown}: {error}"))?;
    let token = text.lines().next().unwrap_or_default().trim().to_owned();
    if token.is_empty() {
        return Err(format!("{flag} {shown}: the file holds no token (its first line is empty)"));
    }
    Ok(token)
}
