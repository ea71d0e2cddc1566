//! The config file: `$SWITCHBOARD_CONFIG`, else `$XDG_CONFIG_HOME/switchboard/config.toml`, else
//! `~/.config/switchboard/config.toml`. Its values are the defaults of the matching
//! `SWITCHBOARD_*` variables, so a flag overrides a variable, which overrides the file:
//!
//! ```toml
//! listen = "127.0.0.1:7777"         # SWITCHBOARD_LISTEN   (serve --listen)
//! data_dir = "/srv/switchboard"     # SWITCHBOARD_DATA_DIR (--data-dir)
//! policy = "/etc/switchboard.toml"  # SWITCHBOARD_POLICY   (serve and run --policy; or auto-approve)
//! claude = "/usr/local/bin/claude"  # SWITCHBOARD_CLAUDE   (--claude)
//! notify = "notify.toml"            # SWITCHBOARD_NOTIFY   (serve --notify)
//! public_url = "https://sb.example" # SWITCHBOARD_PUBLIC_URL (serve --public-url)
//! daily_budget_usd = 20             # SWITCHBOARD_DAILY_BUDGET_USD (serve --daily-budget-usd)
//! database_url = "postgres://sb@db.internal/switchboard" # SWITCHBOARD_DATABASE_URL (serve --database-url)
//! database_group_wait = 5          # SWITCHBOARD_DATABASE_GROUP_WAIT, ms (serve --database-group-wait)
//! node = "build-01"                 # SWITCHBOARD_NODE     (serve --node)
//! nats_url = "nats://bus.internal:4222" # SWITCHBOARD_NATS_URL (serve --nats-url)
//! roots = ["/srv/repos"]            # SWITCHBOARD_ROOTS, ':' between (serve --root)
//! capacity = 40                     # SWITCHBOARD_CAPACITY (serve --capacity)
//! max_running = 32                  # SWITCHBOARD_MAX_RUNNING (serve --max-running)
//! ```

use std::path::PathBuf;

use serde::Deserialize;

/// The largest config file read.
const MAX_CONFIG_BYTES: u64 = 64 * 1024;

/// What the file may say.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    listen: Option<String>,
    data_dir: Option<PathBuf>,
    policy: Option<PathBuf>,
    claude: Option<PathBuf>,
    notify: Option<PathBuf>,
    public_url: Option<String>,
    daily_budget_usd: Option<f64>,
    database_url: Option<String>,
    database_group_wait: Option<u64>,
    node: Option<String>,
    nats_url: Option<String>,
    roots: Option<Vec<PathBuf>>,
    capacity: Option<u32>,
    max_running: Option<u32>,
}

/// Where the config file is looked for.
pub(crate) fn path() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("SWITCHBOARD_CONFIG") {
        return Some(PathBuf::from(path));
    }
    let base = match std::env::var_os("XDG_CONFIG_HOME") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME")?).join(".config"),
    };
    Some(base.join("switchboard/config.toml"))
}

/// Reads the config file, if there is one, and sets the variables it gives defaults for.
/// Runs first thing in `main`, before any thread exists.
pub(crate) fn apply() -> Result<(), String> {
    let Some(path) = path() else { return Ok(()) };
    let explicit = std::env::var_os("SWITCHBOARD_CONFIG").is_some();
    let shown = path.display();
    let text = match read(&path) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound && !explicit => return Ok(()),
        Err(error) => return Err(format!("cannot read the config file {shown}: {error}")),
    };
    let config: Config =
        toml::from_str(&text).map_err(|error| format!("the config file {shown}: {error}"))?;
    // A relative path in the file is relative to the file, not to where a command runs.
    let base = path.parent().map(std::path::Path::to_path_buf).unwrap_or_default();
    let anchored = |value: Option<PathBuf>| value.map(|value| base.join(value));
    let policy = match config.policy {
        Some(policy) if policy.as_os_str() == "auto-approve" => Some(policy),
        other => anchored(other),
    };
    // Roots go into one variable, ':' between them (as PATH): a root with a ':' cannot.
    if let Some(root) =
        config.roots.iter().flatten().find(|root| root.to_string_lossy().contains(':'))
    {
        return Err(format!(
            "the config file {shown}: root {} has a ':', which roots cannot have",
            root.display()
        ));
    }
    let roots = config.roots.map(|roots| {
        let roots: Vec<String> =
            roots.into_iter().map(|root| base.join(root).to_string_lossy().into_owned()).collect();
        PathBuf::from(roots.join(":"))
    });
    let defaults = [
        ("SWITCHBOARD_LISTEN", config.listen.map(PathBuf::from)),
        ("SWITCHBOARD_DATA_DIR", anchored(config.data_dir)),
        ("SWITCHBOARD_POLICY", policy),
        ("SWITCHBOARD_NOTIFY", anchored(config.notify)),
        ("SWITCHBOARD_PUBLIC_URL", config.public_url.map(PathBuf::from)),
        ("SWITCHBOARD_DATABASE_URL", config.database_url.map(PathBuf::from)),
        (
            "SWITCHBOARD_DATABASE_GROUP_WAIT",
            config.database_group_wait.map(|ms| PathBuf::from(ms.to_string())),
        ),
        ("SWITCHBOARD_NODE", config.node.map(PathBuf::from)),
        ("SWITCHBOARD_NATS_URL", config.nats_url.map(PathBuf::from)),
        ("SWITCHBOARD_ROOTS", roots),
        (
            "SWITCHBOARD_CAPACITY",
            config.capacity.map(|capacity| PathBuf::from(capacity.to_string())),
        ),
        ("SWITCHBOARD_MAX_RUNNING", config.max_running.map(|max| PathBuf::from(max.to_string()))),
        (
            "SWITCHBOARD_DAILY_BUDGET_USD",
            config.daily_budget_usd.map(|usd| PathBuf::from(usd.to_string())),
        ),
        // A bare program name (`claude`) is looked up on PATH, as on the command line.
        (
            "SWITCHBOARD_CLAUDE",
            config.claude.map(|claude| {
                if claude.components().count() == 1 {
                    claude
                } else {
                    base.join(claude)
                }
            }),
        ),
    ];
    for (variable, value) in defaults {
        if let Some(value) = value {
            if std::env::var_os(variable).is_none() {
                std::env::set_var(variable, value);
            }
        }
    }
    Ok(())
}

fn read(path: &std::path::Path) -> std::io::Result<String> {
    use std::io::Read as _;
    let mut text = String::new();
    std::fs::File::open(path)?.take(MAX_CONFIG_BYTES + 1).read_to_string(&mut text)?;
    if text.len() as u64 > MAX_CONFIG_BYTES {
        return Err(std::io::Error::other("over 64 KiB"));
    }
    Ok(text)
}
