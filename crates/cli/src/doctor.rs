//! `switchboard doctor`: checks what sessions need on this machine, and says how to fix what is
//! missing. Nothing here needs the network.

#![allow(clippy::print_stdout)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use serde::Serialize;
use serde_json::json;
use switchboard_transport::stdio::{cli_version, CliOptions};

use crate::serve::{DataDirArg, DEFAULT_LISTEN};

use crate::install::PINNED;

/// The last CLI that connects to a `--sdk-url` host other than Anthropic's.
const LAST_SDK_URL: (u32, u32, u32) = (2, 1, 120);

/// Arguments of `switchboard doctor`.
#[derive(Debug, Args)]
pub(crate) struct DoctorArgs {
    /// The Claude Code CLI to check (default: `claude` on PATH).
    #[arg(long, value_name = "PATH", env = "SWITCHBOARD_CLAUDE")]
    claude: Option<PathBuf>,
    /// The address `switchboard serve` would listen on.
    #[arg(long, value_name = "ADDR", default_value = DEFAULT_LISTEN, env = "SWITCHBOARD_LISTEN")]
    listen: SocketAddr,
    #[command(flatten)]
    data: DataDirArg,
    /// Print the results as one JSON object.
    #[arg(long)]
    json: bool,
}

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Status {
    /// Fine.
    Ok,
    /// Worth knowing; nothing to fix.
    Note,
    /// Works, but not as well as it could.
    Warn,
    /// Sessions will not work until it is fixed.
    Fail,
}

impl Status {
    fn mark(self) -> &'static str {
        match self {
            Status::Ok => "✓",
            Status::Note => "•",
            Status::Warn => "!",
            Status::Fail => "✗",
        }
    }
}

/// One check's result.
#[derive(Debug, Serialize)]
struct Check {
    name: &'static str,
    status: Status,
    detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    fix: Option<String>,
}

fn check(name: &'static str, status: Status, detail: String, fix: Option<&str>) -> Check {
    Check { name, status, detail, fix: fix.map(str::to_owned) }
}

pub(crate) async fn doctor(args: DoctorArgs) -> ExitCode {
    let mut checks = Vec::new();
    let version = check_claude(&args, &mut checks).await;
    if let Some(version) = version {
        checks.extend(check_version(&version));
    }
    checks.push(check_login());
    checks.push(check_data_dir(&args.data.resolve()));
    checks.push(check_port(args.listen));
    let failed = checks.iter().any(|check| check.status == Status::Fail);
    if args.json {
        let report = json!({"ok": !failed, "checks": checks});
        println!("{}", serde_json::to_string_pretty(&report).unwrap_or_default());
    } else {
        for check in &checks {
            println!("{} {:<9} {}", check.status.mark(), check.name, check.detail);
            if let Some(fix) = &check.fix {
                println!("  {:<9} fix: {fix}", "");
            }
        }
    }
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// Finds the CLI and asks it its version.
async fn check_claude(args: &DoctorArgs, checks: &mut Vec<Check>) -> Option<String> {
    let install = "run `switchboard install-claude` (the tested version, into Switchboard's \
                   cache), or `npm install -g @anthropic-ai/claude-code`, or point Switchboard \
                   at one with --claude PATH or SWITCHBOARD_CLAUDE";
    let Some((program, source)) = crate::install::find(args.claude.as_deref()) else {
        checks.push(check("claude", Status::Fail, "no `claude` on PATH".to_owned(), Some(install)));
        return None;
    };
    let mut options = CliOptions::new(".");
    options.program = Some(program.clone());
    match cli_version(&options).await {
        Ok(version) if parse(&version).is_some() => {
            checks.push(check(
                "claude",
                Status::Ok,
                format!("{} ({version}), {}", program.display(), source.words()),
                None,
            ));
            Some(version)
        }
        Ok(other) => {
            checks.push(check(
                "claude",
                Status::Fail,
                format!("{} does not say which version it is ({other:?})", program.display()),
                Some(install),
            ));
            None
        }
        Err(error) => {
            checks.push(check("claude", Status::Fail, error.to_string(), Some(install)));
            None
        }
    }
}

/// `program` in a directory of `PATH`, as the shell would find it.
fn parse(version: &str) -> Option<(u32, u32, u32)> {
    let mut parts = version.split('.').map(|part| part.parse::<u32>().ok());
    let triple = (parts.next()??, parts.next()??, parts.next()??);
    parts.next().is_none().then_some(triple)
}

/// The tested range, oldest and newest.
fn tested_range() -> Option<(&'static str, &'static str)> {
    let versions: Vec<&str> = PINNED
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .collect();
    Some((versions.first()?, versions.last()?))
}

fn check_version(version: &str) -> Vec<Check> {
    let mut checks = Vec::new();
    let Some(number) = parse(version) else { return checks };
    if let Some((oldest, newest)) = tested_range() {
        let range = format!("{oldest} – {newest}");
        let (status, detail, fix) = if parse(oldest).is_some_and(|oldest| number < oldest) {
            (
                Status::Fail,
                format!("{version} is older than the oldest supported CLI ({range})"),
                Some("update it: `npm install -g @anthropic-ai/claude-code@latest`"),
            )
        } else if parse(newest).is_some_and(|newest| number > newest) {
            (
                Status::Note,
                format!(
                    "{version} is newer than the newest tested ({range}); lines it changed are \
                     kept and read as far as they fit"
                ),
                None,
            )
        } else {
            (Status::Ok, format!("{version} is within the tested range ({range})"), None)
        };
        checks.push(check("version", status, detail, fix));
    }
    let sdk_url = if number <= LAST_SDK_URL {
        check(
            "sdk-url",
            Status::Ok,
            format!("{version} can connect to this host with --sdk-url (the relay, `transport: sdk-url`)"),
            None,
        )
    } else {
        check(
            "sdk-url",
            Status::Note,
            format!(
                "{version} refuses --sdk-url to hosts other than Anthropic's (2.1.121 and later): \
                 sessions run over stdio, the default; the relay at / needs a CLI up to 2.1.120"
            ),
            None,
        )
    };
    checks.push(sdk_url);
    checks
}

/// Whether the CLI looks logged in, from what it keeps on disk and the environment.
fn check_login() -> Check {
    let fix = "run `claude` and type /login, or set ANTHROPIC_API_KEY";
    for variable in ["ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_AUTH_TOKEN"] {
        if std::env::var_os(variable).is_some_and(|value| !value.is_empty()) {
            return check("login", Status::Ok, format!("{variable} is set"), None);
        }
    }
    let config = match std::env::var_os("CLAUDE_CONFIG_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => match std::env::var_os("HOME") {
            Some(home) => PathBuf::from(home).join(".claude"),
            None => return check("login", Status::Warn, "no HOME".to_owned(), Some(fix)),
        },
    };
    let credentials = config.join(".credentials.json");
    if credentials.is_file() {
        return check(
            "login",
            Status::Ok,
            format!("logged in ({} exists)", credentials.display()),
            None,
        );
    }
    check(
        "login",
        Status::Warn,
        format!(
            "no ANTHROPIC_API_KEY and no {}: the CLI will ask to log in",
            credentials.display()
        ),
        Some(fix),
    )
}

fn check_data_dir(dir: &Path) -> Check {
    let shown = dir.display();
    if dir.exists() {
        if !dir.is_dir() {
            return check(
                "data dir",
                Status::Fail,
                format!("{shown} is not a directory"),
                Some("choose another with --data-dir or SWITCHBOARD_DATA_DIR"),
            );
        }
        return match tempfile::tempfile_in(dir) {
            Ok(_) => check("data dir", Status::Ok, format!("{shown} is writable"), None),
            Err(error) => check(
                "data dir",
                Status::Fail,
                format!("{shown} is not writable: {error}"),
                Some("fix its permissions, or choose another with --data-dir"),
            ),
        };
    }
    // It will be created: the nearest folder that exists must take it.
    let mut parent = dir.parent();
    while let Some(folder) = parent {
        if folder.exists() {
            return match tempfile::tempfile_in(folder) {
                Ok(_) => check(
                    "data dir",
                    Status::Ok,
                    format!("{shown} will be created on first start"),
                    None,
                ),
                Err(error) => check(
                    "data dir",
                    Status::Fail,
                    format!(
                        "{shown} cannot be created ({} is not writable: {error})",
                        folder.display()
                    ),
                    Some("choose another with --data-dir or SWITCHBOARD_DATA_DIR"),
                ),
            };
        }
        parent = folder.parent();
    }
    check("data dir", Status::Fail, format!("{shown} has no existing parent"), None)
}

fn check_port(listen: SocketAddr) -> Check {
    match std::net::TcpListener::bind(listen) {
        Ok(_) => check("port", Status::Ok, format!("{listen} is free"), None),
        Err(error) if error.kind() == std::io::ErrorKind::AddrInUse => check(
            "port",
            Status::Warn,
            format!("{listen} is in use (a daemon already running there?)"),
            Some("stop what holds it, or choose another address with --listen"),
        ),
        Err(error) => check(
            "port",
            Status::Fail,
            format!("cannot listen on {listen}: {error}"),
            Some("choose another address with --listen"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_compare_by_number() {
        assert_eq!(parse("2.1.37"), Some((2, 1, 37)));
        assert!(parse("2.1.100") > parse("2.1.37"));
        assert_eq!(parse("2.1"), None);
        assert_eq!(parse("2.1.x"), None);
        assert_eq!(parse("2.1.3.4"), None);
    }

    #[test]
    fn the_tested_range_comes_from_the_pinned_list() {
        let (oldest, newest) = tested_range().unwrap();
        assert!(parse(oldest).unwrap() < parse(newest).unwrap());
    }

    #[test]
    fn a_version_is_placed_against_the_range_and_the_sdk_url_cutoff() {
        let (oldest, _) = tested_range().unwrap();
        let checks = check_version(oldest);
        assert_eq!(checks[0].status, Status::Ok, "{checks:?}");
        let checks = check_version("0.0.1");
        assert_eq!(checks[0].status, Status::Fail);
        assert_eq!(checks[1].status, Status::Ok, "an old CLI still takes --sdk-url");
        let checks = check_version("99.0.0");
        assert_eq!(checks[0].status, Status::Note);
        assert_eq!(checks[1].status, Status::Note);
        assert_eq!(check_version("2.1.120")[1].status, Status::Ok);
        assert_eq!(check_version("2.1.121")[1].status, Status::Note);
    }

    #[test]
    fn a_data_dir_that_is_a_file_fails() {
        let file = tempfile::NamedTempFile::new().unwrap();
        assert_eq!(check_data_dir(file.path()).status, Status::Fail);
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(check_data_dir(dir.path()).status, Status::Ok);
        assert_eq!(check_data_dir(&dir.path().join("a/b")).status, Status::Ok);
    }

    #[test]
    fn a_port_in_use_is_reported() {
        let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = held.local_addr().unwrap();
        assert_eq!(check_port(address).status, Status::Warn);
        drop(held);
        assert_eq!(check_port("127.0.0.1:0".parse().unwrap()).status, Status::Ok);
    }
}
