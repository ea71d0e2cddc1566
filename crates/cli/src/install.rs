//! Which Claude Code CLI a command runs, and `switchboard install-claude`: `--claude PATH`
//! (or `SWITCHBOARD_CLAUDE`), else `claude` on `PATH`, else the tested version in Switchboard's
//! own cache (`~/.cache/switchboard/claude-code/<version>`, where the tests install theirs).
//! With none, a command that needs one offers to install the tested version there from npm,
//! once, with progress; a script says `--yes`, or runs `switchboard install-claude` first.

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::io::{IsTerminal as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

use clap::Args;
use tokio::io::AsyncReadExt as _;

/// The versions Switchboard is tested against, oldest first (`scripts/cli-versions`).
pub(crate) const PINNED: &str = include_str!("../../../scripts/cli-versions");

/// The newest tested version: what Switchboard installs.
pub(crate) fn tested() -> &'static str {
    PINNED
        .lines()
        .map(str::trim)
        .rfind(|line| !line.is_empty() && !line.starts_with('#'))
        .unwrap_or("2.1.332")
}

/// Where installed versions live: `SWITCHBOARD_CLI_CACHE`, else `~/.cache/switchboard/claude-code`.
pub(crate) fn cache() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("SWITCHBOARD_CLI_CACHE").filter(|dir| !dir.is_empty()) {
        return Some(PathBuf::from(dir));
    }
    let home = std::env::var_os("HOME").filter(|home| !home.is_empty())?;
    Some(PathBuf::from(home).join(".cache/switchboard/claude-code"))
}

/// The `claude` of version `version` in the cache, if it is there.
pub(crate) fn cached(version: &str) -> Option<PathBuf> {
    let bin = cache()?.join(version).join("node_modules/.bin/claude");
    is_program(&bin).then_some(bin)
}

/// A program of this name on `PATH`.
pub(crate) fn on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| is_program(candidate))
}

fn is_program(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

/// Where a command's CLI came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// `--claude` or `SWITCHBOARD_CLAUDE`.
    Named,
    /// `claude` on `PATH`.
    Path,
    /// Switchboard's cache.
    Cache,
}

impl Source {
    pub(crate) fn words(self) -> &'static str {
        match self {
            Source::Named => "as named (--claude or SWITCHBOARD_CLAUDE)",
            Source::Path => "from PATH",
            Source::Cache => "from Switchboard's cache (no claude on PATH)",
        }
    }
}

/// The CLI to run, without installing anything: named, on `PATH`, or the tested version in
/// the cache.
pub(crate) fn find(named: Option<&Path>) -> Option<(PathBuf, Source)> {
    if let Some(named) = named {
        return Some((named.to_path_buf(), Source::Named));
    }
    if let Some(found) = on_path("claude") {
        return Some((found, Source::Path));
    }
    cached(tested()).map(|bin| (bin, Source::Cache))
}

/// What to say when there is no CLI and none may be installed now.
pub(crate) fn missing() -> String {
    format!(
        "no `claude` on PATH: run `switchboard install-claude` (installs Claude Code {}, the \
         version Switchboard is tested with, into its cache), or `npm install -g \
         @anthropic-ai/claude-code`, or point at one with --claude PATH",
        tested()
    )
}

/// The CLI a command runs ([`find`]); with none, offers to install the tested version (asked
/// at a terminal, or at once with `yes`), else says how to get one.
pub(crate) async fn resolve(named: Option<&Path>, yes: bool) -> Result<PathBuf, String> {
    if let Some((program, source)) = find(named) {
        if source == Source::Cache {
            eprintln!("switchboard: using Claude Code {} {}", tested(), source.words());
        }
        return Ok(program);
    }
    let version = tested();
    let asking = std::io::stdin().is_terminal() && std::io::stderr().is_terminal();
    if !yes {
        if !asking {
            return Err(missing());
        }
        eprint!(
            "switchboard: there is no `claude` on PATH. Install Claude Code {version} (the version \
             Switchboard is tested with) from npm into {}? [Y/n] ",
            cache().map_or_else(|| "~/.cache/switchboard".to_owned(), |dir| dir.display().to_string())
        );
        let _ = std::io::stderr().flush();
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map_err(|error| error.to_string())?;
        if !matches!(line.trim().to_ascii_lowercase().as_str(), "" | "y" | "yes") {
            return Err(missing());
        }
    }
    install(version, true).await
}

/// Installs Claude Code `version` into the cache (a fresh folder swapped in whole, so an
/// interrupted install leaves no half copy); its `claude`. With `progress`, a line on stderr
/// says how long it has taken, and npm's own errors are shown when it fails.
pub(crate) async fn install(version: &str, progress: bool) -> Result<PathBuf, String> {
    if !is_version(version) {
        return Err(format!("{version:?} is not a version number (like {})", tested()));
    }
    if let Some(bin) = cached(version) {
        return Ok(bin);
    }
    let npm = on_path("npm").ok_or_else(|| {
        "npm is not installed: install Node.js 20 or newer (with npm) first, then run this again"
            .to_owned()
    })?;
    let cache = cache().ok_or("HOME is not set, so there is no cache to install into")?;
    std::fs::create_dir_all(&cache)
        .map_err(|error| format!("cannot create {}: {error}", cache.display()))?;
    let staging = tempfile::Builder::new()
        .prefix(&format!(".install-{version}."))
        .tempdir_in(&cache)
        .map_err(|error| format!("cannot create a folder in {}: {error}", cache.display()))?;
    #[allow(clippy::disallowed_methods)] // npm, not the CLI
    let mut child = tokio::process::Command::new(npm)
        .arg("install")
        .arg("--prefix")
        .arg(staging.path())
        .args(["--no-audit", "--no-fund", "--loglevel=error"])
        .arg(format!("@anthropic-ai/claude-code@{version}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|error| format!("cannot run npm: {error}"))?;
    let mut stderr = child.stderr.take().ok_or("npm's output is unreadable")?;
    // npm's complaints, kept (bounded) for when it fails.
    let said = tokio::spawn(async move {
        let mut text = Vec::new();
        let _ = (&mut stderr).take(64 * 1024).read_to_end(&mut text).await;
        String::from_utf8_lossy(&text).into_owned()
    });
    let started = Instant::now();
    let status = loop {
        tokio::select! {
            status = child.wait() => break status.map_err(|error| format!("npm failed: {error}"))?,
            () = tokio::time::sleep(Duration::from_secs(1)), if progress => {
                eprint!("\rswitchboard: installing Claude Code {version} from npm… {} s", started.elapsed().as_secs());
                let _ = std::io::stderr().flush();
            }
        }
    };
    let said = said.await.unwrap_or_default();
    if progress {
        eprintln!(
            "\rswitchboard: installing Claude Code {version} from npm… {} s",
            started.elapsed().as_secs()
        );
    }
    if !status.success() {
        return Err(format!(
            "npm could not install @anthropic-ai/claude-code@{version} ({status}): {}",
            said.trim()
        ));
    }
    let dir = cache.join(version);
    let _ = std::fs::remove_dir_all(&dir);
    let staged = staging.keep();
    std::fs::rename(&staged, &dir)
        .map_err(|error| format!("cannot move the install into {}: {error}", dir.display()))?;
    cached(version).ok_or_else(|| format!("npm installed no `claude` into {}", dir.display()))
}

/// `2.1.332`: digits and dots.
pub(crate) fn is_version(text: &str) -> bool {
    let parts: Vec<&str> = text.split('.').collect();
    parts.len() == 3
        && parts.iter().all(|part| {
            !part.is_empty() && part.len() <= 6 && part.bytes().all(|b| b.is_ascii_digit())
        })
}

/// `switchboard install-claude`
#[derive(Debug, Args)]
pub(crate) struct InstallArgs {
    /// The version to install (default: the newest Switchboard is tested with).
    #[arg(long, value_name = "VERSION")]
    version: Option<String>,
    /// Print where it is as JSON (`{"version", "path"}`).
    #[arg(long)]
    json: bool,
}

/// `switchboard install-claude`: installs Claude Code into Switchboard's cache (nothing when it
/// is there already) and prints where.
pub(crate) async fn install_claude(args: InstallArgs) -> ExitCode {
    let version = args.version.unwrap_or_else(|| tested().to_owned());
    let already = cached(&version).is_some();
    match install(&version, !args.json).await {
        Ok(bin) => {
            if args.json {
                println!(
                    "{}",
                    serde_json::json!({"version": version, "path": bin, "installed": !already})
                );
            } else if already {
                println!("Claude Code {version} is already installed: {}", bin.display());
            } else {
                println!("Claude Code {version} installed: {}", bin.display());
            }
            if on_path("claude").is_none() && !args.json {
                println!(
                    "Switchboard uses it when there is no `claude` on PATH. Log in once: run {} \
                     and type /login (or set ANTHROPIC_API_KEY).",
                    bin.display()
                );
            }
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("switchboard install-claude: {error}");
            ExitCode::from(1)
        }
    }
}
