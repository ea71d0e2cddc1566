//! `switchboard hooks install|uninstall|status`: Switchboard's hooks in the person's Claude Code
//! settings, so that every Claude Code session on the machine (a terminal's, an editor's, one a
//! script starts) shows in Switchboard as it starts and puts its tool calls to the daemon's
//! policy ([`crate::hook`] is the command they run).
//!
//! - **Where.** The person's own settings (`$CLAUDE_CONFIG_DIR/settings.json`, else
//!   `~/.claude/settings.json`), or with `--project DIR` that project's personal settings
//!   (`DIR/.claude/settings.local.json`, which Claude Code keeps out of git): the hook command
//!   names this machine's paths.
//! - **Shown first.** The change is printed as a diff and written only when the person says
//!   so (`--yes` for scripts; `--dry-run` only shows it).
//! - **Idempotent.** Installing again changes nothing (or only Switchboard's own entries, when
//!   their options changed); the person's other hooks and settings are kept as they are.
//! - **Reversible, byte for byte.** The file as it was before is kept in the data directory;
//!   `uninstall` puts it back exactly (or removes the file, if there was none) when nothing
//!   else changed it since. If something did, only Switchboard's entries are taken out.

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::io::{IsTerminal as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use sha2::Digest as _;

use crate::serve::DataDirArg;

/// The largest settings file read.
const MAX_SETTINGS_BYTES: u64 = 1024 * 1024;

/// How long a `PreToolUse` hook may wait for a person, in seconds (a week); the CLI ends the
/// hook then.
pub(crate) const PRE_TOOL_USE_TIMEOUT_SECS: u64 = 7 * 24 * 3600;

/// How long the session's start and end hooks may take, in seconds.
const SESSION_HOOK_TIMEOUT_SECS: u64 = 30;

/// The hooks Switchboard installs, with the matcher each takes.
const EVENTS: [(&str, Option<&str>); 3] =
    [("SessionStart", None), ("PreToolUse", Some("*")), ("SessionEnd", None)];

/// `switchboard hooks …`
#[derive(Debug, Args)]
pub(crate) struct HooksArgs {
    #[command(subcommand)]
    command: HooksCommand,
}

#[derive(Debug, Subcommand)]
enum HooksCommand {
    /// Write Switchboard's hooks into your Claude Code settings (shows the change first).
    ///
    /// From then on every Claude Code session (a terminal's, an editor's, `claude -p` in a
    /// script) shows in Switchboard as it starts, its transcript followed; its tool calls go
    /// to the daemon's policy (`serve --external-policy`, else `--policy`), and those it asks
    /// about wait for a person in the web UI, the API, a notification's link.
    Install(InstallArgs),
    /// Take Switchboard's hooks out again (the settings file as it was, byte for byte, when
    /// nothing else changed it since).
    Uninstall(Target),
    /// Say whether Switchboard's hooks are installed, where, and how they fail.
    Status(Target),
}

#[derive(Debug, Args)]
struct Target {
    /// One project's personal settings (DIR/.claude/settings.local.json) instead of your own
    /// (~/.claude/settings.json).
    #[arg(long, value_name = "DIR")]
    project: Option<PathBuf>,
    /// Write without asking.
    #[arg(long, short = 'y')]
    yes: bool,
    /// Show the change, write nothing.
    #[arg(long)]
    dry_run: bool,
    /// Print JSON: {"path", "changed", "installed", "fail_open", "diff"}.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    data: DataDirArg,
}

#[derive(Debug, Args)]
struct InstallArgs {
    #[command(flatten)]
    target: Target,
    /// When the daemon is not running (or cannot decide), let each tool call go on as it
    /// would without Switchboard: the CLI asks in its own terminal. By default it is blocked
    /// (fail closed), with the reason.
    #[arg(long)]
    fail_open: bool,
}

/// What the data directory keeps of a settings file before Switchboard's hooks went in.
#[derive(Debug, Serialize, Deserialize)]
struct Saved {
    /// The settings file.
    path: PathBuf,
    /// Its bytes before the install (`None`: there was no file).
    before: Option<String>,
    /// The SHA-256 of the bytes the install wrote.
    written: String,
}

pub(crate) async fn hooks(args: HooksArgs) -> ExitCode {
    let result = match args.command {
        HooksCommand::Install(install) => install_hooks(&install.target, install.fail_open),
        HooksCommand::Uninstall(target) => uninstall_hooks(&target),
        HooksCommand::Status(target) => status(&target),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("switchboard: {message}");
            ExitCode::from(2)
        }
    }
}

/// The settings file `target` names.
fn settings_path(target: &Target) -> Result<PathBuf, String> {
    match &target.project {
        Some(dir) => {
            let dir = std::path::absolute(dir)
                .map_err(|error| format!("cannot read {}: {error}", dir.display()))?;
            if !dir.is_dir() {
                return Err(format!("{} is not a directory", dir.display()));
            }
            let claude = dir.join(".claude");
            if std::fs::symlink_metadata(&claude).is_ok_and(|metadata| !metadata.is_dir()) {
                return Err(format!(
                    "{} is not a directory (a link?): not changed",
                    claude.display()
                ));
            }
            Ok(claude.join("settings.local.json"))
        }
        None => {
            let home = std::env::var_os("CLAUDE_CONFIG_DIR").map(PathBuf::from).or_else(|| {
                std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".claude"))
            });
            let home = home.ok_or("neither CLAUDE_CONFIG_DIR nor HOME is set")?;
            Ok(home.join("settings.json"))
        }
    }
}

/// The file's text (`None`: no file), read with bounds, never through a link.
fn read_settings(path: &Path) -> Result<Option<String>, String> {
    let metadata = match std::fs::symlink_metadata(path) {
        Ok(metadata) => metadata,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(format!("cannot read {}: {error}", path.display())),
    };
    if !metadata.is_file() {
        return Err(format!("{} is not a regular file (a link?): not changed", path.display()));
    }
    if metadata.len() > MAX_SETTINGS_BYTES {
        return Err(format!("{} is over {MAX_SETTINGS_BYTES} bytes", path.display()));
    }
    std::fs::read_to_string(path)
        .map(Some)
        .map_err(|error| format!("cannot read {}: {error}", path.display()))
}

/// The settings as a JSON object (an empty one for no file or an empty file).
fn parse(path: &Path, text: Option<&str>) -> Result<Map<String, Value>, String> {
    match text.map(str::trim) {
        None | Some("") => Ok(Map::new()),
        Some(text) => match serde_json::from_str(text) {
            Ok(Value::Object(settings)) => Ok(settings),
            Ok(_) => Err(format!("{} is not a JSON object: not changed", path.display())),
            Err(error) => {
                Err(format!("{} is not JSON ({error}): fix it first; not changed", path.display()))
            }
        },
    }
}

/// The command Claude Code runs for each hook: this program, the data directory, how it fails.
fn command(data_dir: &Path, fail_open: bool) -> Result<String, String> {
    let program = std::env::current_exe()
        .map_err(|error| format!("cannot tell where switchboard is: {error}"))?;
    let data_dir = std::path::absolute(data_dir)
        .map_err(|error| format!("cannot read {}: {error}", data_dir.display()))?;
    let mut command = format!(
        "{} hook --data-dir {}",
        quote(&program.to_string_lossy()),
        quote(&data_dir.to_string_lossy())
    );
    if fail_open {
        command.push_str(" --fail-open");
    }
    Ok(command)
}

/// `text` as one word for `sh`.
fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// Whether a hook's command is Switchboard's (a `switchboard` program's `hook` command).
fn is_ours(command: &str) -> bool {
    let (program, rest) = match command.strip_prefix('\'') {
        Some(quoted) => match quoted.find('\'') {
            Some(end) => (&quoted[..end], &quoted[end + 1..]),
            None => return false,
        },
        None => command.split_once(' ').unwrap_or((command, "")),
    };
    let named = Path::new(program)
        .file_name()
        .is_some_and(|name| name.to_string_lossy().starts_with("switchboard"));
    named && rest.trim_start().starts_with("hook ")
}

/// Takes Switchboard's hook entries out of `settings`, dropping what is left empty; whether
/// there were any.
fn take_ours(settings: &mut Map<String, Value>) -> bool {
    let Some(Value::Object(hooks)) = settings.get_mut("hooks") else { return false };
    let mut found = false;
    for (event, _) in EVENTS {
        let Some(Value::Array(groups)) = hooks.get_mut(event) else { continue };
        let mut emptied = false;
        groups.retain_mut(|group| {
            let Some(Value::Array(entries)) = group.get_mut("hooks") else { return true };
            let before = entries.len();
            entries.retain(|entry| !entry["command"].as_str().is_some_and(is_ours));
            let took = entries.len() != before;
            found |= took;
            // A group only Switchboard's entries were in goes; the person's own stay.
            let keep = !(took && entries.is_empty());
            emptied |= !keep;
            keep
        });
        if emptied && groups.is_empty() {
            hooks.remove(event);
        }
    }
    if found && hooks.is_empty() {
        settings.remove("hooks");
    }
    found
}

/// Switchboard's entries added to `settings`.
fn put_ours(settings: &mut Map<String, Value>, command: &str) -> Result<(), String> {
    let hooks = settings.entry("hooks").or_insert_with(|| json!({}));
    let Value::Object(hooks) = hooks else {
        return Err("the settings' \"hooks\" is not an object: not changed".into());
    };
    for (event, matcher) in EVENTS {
        let timeout = if event == "PreToolUse" {
            PRE_TOOL_USE_TIMEOUT_SECS
        } else {
            SESSION_HOOK_TIMEOUT_SECS
        };
        let mut group =
            json!({"hooks": [{"type": "command", "command": command, "timeout": timeout}]});
        if let Some(matcher) = matcher {
            group["matcher"] = Value::from(matcher);
        }
        let groups = hooks.entry(event).or_insert_with(|| json!([]));
        let Value::Array(groups) = groups else {
            return Err(format!("the settings' hooks.{event} is not a list: not changed"));
        };
        groups.push(group);
    }
    Ok(())
}

/// The installed command's `--fail-open`, if Switchboard's hooks are there.
fn installed(settings: &Map<String, Value>) -> Option<bool> {
    let groups = settings.get("hooks")?.get("PreToolUse")?.as_array()?;
    groups
        .iter()
        .filter_map(|group| group["hooks"].as_array())
        .flatten()
        .filter_map(|entry| entry["command"].as_str())
        .find(|command| is_ours(command))
        .map(|command| command.ends_with(" --fail-open"))
}

/// `settings` as Claude Code writes them: two spaces, a newline at the end.
fn render(settings: &Map<String, Value>) -> String {
    let mut text = serde_json::to_string_pretty(settings).unwrap_or_default();
    text.push('\n');
    text
}

/// The change as a unified diff.
fn diff(path: &Path, before: &str, after: &str) -> String {
    let name = path.display().to_string();
    similar::TextDiff::from_lines(before, after)
        .unified_diff()
        .context_radius(3)
        .header(&name, &name)
        .to_string()
}

/// Where the data directory keeps what `path` was before the install.
fn saved_path(data_dir: &Path, path: &Path) -> PathBuf {
    let digest = sha2::Sha256::digest(path.as_os_str().as_encoded_bytes());
    let name: String = digest.iter().take(8).map(|byte| format!("{byte:02x}")).collect();
    data_dir.join("hooks").join(format!("{name}.json"))
}

fn sha256(text: &str) -> String {
    sha2::Sha256::digest(text.as_bytes()).iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Whether the person says yes (or `--yes` said so), after seeing the change.
fn agreed(target: &Target, question: &str) -> Result<bool, String> {
    if target.yes {
        return Ok(true);
    }
    if !std::io::stdin().is_terminal() {
        return Err(
            "not a terminal to ask at: add --yes to write it (or --dry-run to see it only)".into(),
        );
    }
    eprint!("{question} [y/N] ");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    std::io::stdin().read_line(&mut answer).map_err(|error| error.to_string())?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes"))
}

/// Shows `change` to `path` (whose text is `now`) and asks whether to write it: `false` for a
/// dry run (reported, nothing to write), `Err(refused)` when the person says no.
fn shown_and_agreed(
    target: &Target,
    path: &Path,
    change: &str,
    now: Option<&str>,
    refused: &str,
) -> Result<bool, String> {
    if target.dry_run {
        let installed = installed(&parse(path, now)?);
        report(target, path, change, false, installed, "(a dry run: nothing written)");
        return Ok(false);
    }
    if !target.json {
        print!("{change}");
    }
    if !agreed(target, &format!("Write this to {}?", path.display()))? {
        return Err(refused.to_owned());
    }
    Ok(true)
}

/// Writes `text` to `path` whole (a temporary file renamed over it), private to this user
/// when it is new, as the old one's mode otherwise.
fn write_file(path: &Path, text: &str) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = path.parent().ok_or("no directory")?;
    std::fs::create_dir_all(dir)
        .map_err(|error| format!("cannot make {}: {error}", dir.display()))?;
    let mode = std::fs::metadata(path).map_or(0o600, |metadata| metadata.permissions().mode());
    let mut file = tempfile::NamedTempFile::new_in(dir)
        .map_err(|error| format!("cannot write in {}: {error}", dir.display()))?;
    file.write_all(text.as_bytes()).map_err(|error| format!("cannot write: {error}"))?;
    file.as_file()
        .set_permissions(std::fs::Permissions::from_mode(mode & 0o7777))
        .map_err(|error| format!("cannot write: {error}"))?;
    file.persist(path).map_err(|error| format!("cannot write {}: {error}", path.display()))?;
    Ok(())
}

/// Prints the outcome: the diff, and a line saying what happened (or JSON).
fn report(target: &Target, path: &Path, diff: &str, changed: bool, now: Option<bool>, note: &str) {
    if target.json {
        let answer = json!({
            "path": path, "changed": changed, "installed": now.is_some(),
            "fail_open": now, "diff": diff,
        });
        println!("{answer}");
    } else {
        print!("{diff}");
        println!("{note}");
    }
}

fn install_hooks(target: &Target, fail_open: bool) -> Result<(), String> {
    let path = settings_path(target)?;
    let data_dir = target.data.resolve();
    let before = read_settings(&path)?;
    let mut settings = parse(&path, before.as_deref())?;
    let command = command(&data_dir, fail_open)?;
    let had_ours = take_ours(&mut settings);
    put_ours(&mut settings, &command)?;
    let after = render(&settings);
    let old = before.clone().unwrap_or_default();
    // Already there, as asked: nothing to write.
    let unchanged = had_ours && parse(&path, before.as_deref())? == settings;
    let how = if fail_open { "fail open" } else { "fail closed" };
    if unchanged {
        report(
            target,
            &path,
            "",
            false,
            Some(fail_open),
            &format!(
                "Switchboard's hooks are installed in {} already ({how}): nothing changed",
                path.display()
            ),
        );
        return Ok(());
    }
    let change = diff(&path, &old, &after);
    if settings.get("disableAllHooks") == Some(&Value::Bool(true)) {
        eprintln!(
            "switchboard: {} sets disableAllHooks: no hook runs, Switchboard's included, until it is taken out",
            path.display()
        );
    }
    if !shown_and_agreed(target, &path, &change, before.as_deref(), "not installed")? {
        return Ok(());
    }
    // What the file was before Switchboard's hooks first went in: kept across re-installs.
    let saved_at = saved_path(&data_dir, &path);
    let first = match std::fs::read_to_string(&saved_at)
        .ok()
        .and_then(|text| serde_json::from_str::<Saved>(&text).ok())
    {
        Some(saved) if had_ours => saved.before,
        // Switchboard's entries are in it, but what it was before them is not kept (another
        // data directory installed them): it without them.
        _ if had_ours => {
            let mut clean = parse(&path, before.as_deref())?;
            take_ours(&mut clean);
            Some(render(&clean))
        }
        _ => before,
    };
    write_file(&path, &after)?;
    let saved = Saved { path: path.clone(), before: first, written: sha256(&after) };
    write_file(&saved_at, &serde_json::to_string(&saved).unwrap_or_default())?;
    let note = format!(
        "Installed Switchboard's hooks in {} ({how}): new Claude Code sessions show in Switchboard; `switchboard hooks uninstall{}` takes them out",
        path.display(),
        target.project.as_ref().map_or(String::new(), |dir| format!(" --project {}", dir.display()))
    );
    if target.json {
        report(target, &path, &change, true, Some(fail_open), "");
    } else {
        println!("{note}");
    }
    Ok(())
}

fn uninstall_hooks(target: &Target) -> Result<(), String> {
    let path = settings_path(target)?;
    let data_dir = target.data.resolve();
    let current = read_settings(&path)?;
    let mut settings = parse(&path, current.as_deref())?;
    if !take_ours(&mut settings) {
        report(
            target,
            &path,
            "",
            false,
            None,
            &format!("Switchboard's hooks are not in {}: nothing changed", path.display()),
        );
        return Ok(());
    }
    let saved_at = saved_path(&data_dir, &path);
    let saved: Option<Saved> =
        std::fs::read_to_string(&saved_at).ok().and_then(|text| serde_json::from_str(&text).ok());
    // Untouched since the install: put back exactly what was there.
    let exact = saved.filter(|saved| {
        saved.path == path
            && current.as_deref().map(sha256).as_deref() == Some(saved.written.as_str())
    });
    let after = match &exact {
        Some(saved) => saved.before.clone(),
        None => Some(render(&settings)),
    };
    let change = diff(&path, current.as_deref().unwrap_or(""), after.as_deref().unwrap_or(""));
    if !shown_and_agreed(target, &path, &change, current.as_deref(), "not uninstalled")? {
        return Ok(());
    }
    match &after {
        Some(text) => write_file(&path, text)?,
        None => std::fs::remove_file(&path)
            .map_err(|error| format!("cannot remove {}: {error}", path.display()))?,
    }
    let _ = std::fs::remove_file(&saved_at);
    let how = match (&exact, &after) {
        (Some(_), Some(_)) => "the file is as it was before the install",
        (Some(_), None) => "there was no file before the install, so it is gone",
        (None, _) => "it changed since the install, so only Switchboard's entries were taken out",
    };
    if target.json {
        report(target, &path, &change, true, None, "");
    } else {
        println!("Took Switchboard's hooks out of {}: {how}", path.display());
    }
    Ok(())
}

fn status(target: &Target) -> Result<(), String> {
    let path = settings_path(target)?;
    let settings = parse(&path, read_settings(&path)?.as_deref())?;
    let now = installed(&settings);
    let note = match now {
        Some(true) => format!("installed in {} (fail open)", path.display()),
        Some(false) => format!("installed in {} (fail closed)", path.display()),
        None => format!("not installed in {}", path.display()),
    };
    report(target, &path, "", false, now, &note);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_switchboards_entries_are_taken_out() {
        let theirs = json!({"type": "command", "command": "lint.sh"});
        let mut settings: Map<String, Value> = serde_json::from_value(json!({
            "model": "opus",
            "hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [theirs.clone()]}]},
        }))
        .unwrap();
        let before = settings.clone();
        put_ours(&mut settings, "'/usr/bin/switchboard' hook --data-dir '/d'").unwrap();
        assert_eq!(installed(&settings), Some(false));
        assert_eq!(settings["hooks"]["PreToolUse"].as_array().unwrap().len(), 2);
        assert_eq!(settings["hooks"]["PreToolUse"][1]["hooks"][0]["timeout"], 604_800);
        assert!(take_ours(&mut settings));
        assert_eq!(settings, before, "the person's hook and settings kept as they were");
        assert!(!take_ours(&mut settings), "none left");
        // The person's own empty lists of other events stay as they were.
        let mut own: Map<String, Value> =
            serde_json::from_value(json!({"hooks": {"Stop": []}})).unwrap();
        let kept = own.clone();
        put_ours(&mut own, "switchboard hook --data-dir /d").unwrap();
        take_ours(&mut own);
        assert_eq!(own, kept);
        let mut empty = Map::new();
        put_ours(&mut empty, "switchboard hook --data-dir /d --fail-open").unwrap();
        assert_eq!(installed(&empty), Some(true));
        take_ours(&mut empty);
        assert!(empty.is_empty(), "nothing left behind");
    }

    #[test]
    fn a_command_is_switchboards_by_its_program_and_subcommand() {
        assert!(is_ours("'/opt/x/switchboard' hook --data-dir '/d'"));
        assert!(is_ours("switchboard hook --data-dir /d"));
        assert!(!is_ours("'/opt/x/switchboard' serve"));
        assert!(!is_ours("lint.sh hook --data-dir /d"));
        assert!(!is_ours("'unterminated"));
        assert_eq!(quote("it's"), r"'it'\''s'");
    }

    #[test]
    fn bad_settings_are_named_and_left_alone() {
        let path = Path::new("/h/.claude/settings.json");
        assert!(parse(path, Some("[1]")).unwrap_err().contains("not a JSON object"));
        assert!(parse(path, Some("{")).unwrap_err().contains("not JSON"));
        assert!(parse(path, None).unwrap().is_empty());
        let mut odd: Map<String, Value> = serde_json::from_value(json!({"hooks": []})).unwrap();
        assert!(put_ours(&mut odd, "switchboard hook").unwrap_err().contains("not an object"));
    }
}
