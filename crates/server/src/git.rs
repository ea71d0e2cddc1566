//! Git, run safely on the daemon's behalf: every command has a time limit and a bounded
//! output; no terminal, hooks or fsmonitor; pathspecs literal; the daemon's `GIT_*` and
//! `SWITCHBOARD_*` variables (a database URL with its password) kept from it. No program the
//! repository's own config names runs (filters, merge drivers, signing, ssh, credential and
//! askpass helpers, ...): a session's tools can write that config, and the daemon runs git on
//! the session's behalf (a `read` token's diff among them), so each such setting is taken
//! back for the command, with the person's global value where there is one
//! ([`PROGRAM_KEYS`]).
//!
//! Worktrees (`worktree`) and diffs (`diff`) run every git command through [`run_git`].

use std::path::Path;
use std::time::Duration;

/// How long one git command may take.
pub(crate) const GIT_TIMEOUT: Duration = Duration::from_secs(60);

/// The most output one git command may give (a diff of a large change is cut, and says so).
pub(crate) const MAX_GIT_OUTPUT: usize = 16 * 1024 * 1024;

/// Runs `git` in the repository `dir` with `args`: its standard output, or an error with
/// what git said.
pub(crate) async fn git(dir: &Path, args: &[&str]) -> Result<String, String> {
    checked(run_git(dir, None, args).await?, args)
}

/// Standard output of a command that succeeded; else what git said.
pub(crate) fn checked(output: std::process::Output, args: &[&str]) -> Result<String, String> {
    if !output.status.success() {
        let said = String::from_utf8_lossy(&output.stderr);
        let said: String = said.trim().chars().take(500).collect();
        return Err(format!("git {}: {said}", args[0]));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Runs `git` in `dir` with `args`, whatever its exit status: what it wrote, within bounds.
/// With `git_dir`, `dir` is a work tree of that git folder. Every setting of the repository's
/// own config that names a program git would run is overridden first ([`program_overrides`]).
pub(crate) async fn run_git(
    dir: &Path,
    git_dir: Option<&Path>,
    args: &[&str],
) -> Result<std::process::Output, String> {
    let listing =
        git_command(dir, git_dir, &["config", "--list", "--show-scope", "--includes", "-z"])
            .output();
    let config = tokio::time::timeout(GIT_TIMEOUT, listing)
        .await
        .map_err(|_| format!("git config took more than {} s", GIT_TIMEOUT.as_secs()))?
        .map_err(|error| format!("cannot run git ({error}): is it installed?"))?;
    if !config.status.success() {
        // Not a repository (yet): nothing of its own to override. Anything else is refused.
        let said = String::from_utf8_lossy(&config.stderr);
        if !said.contains("not a git repository") {
            let said: String = said.trim().chars().take(500).collect();
            return Err(format!("git config: {said}"));
        }
    }
    let overrides = program_overrides(&config.stdout);
    let mut command = git_command(dir, git_dir, &[]);
    for setting in &overrides {
        command.arg("-c").arg(setting);
    }
    command.args(args);
    let output = tokio::time::timeout(GIT_TIMEOUT, command.output())
        .await
        .map_err(|_| format!("git {} took more than {} s", args[0], GIT_TIMEOUT.as_secs()))?
        .map_err(|error| format!("cannot run git ({error}): is it installed?"))?;
    if output.stdout.len() > MAX_GIT_OUTPUT {
        return Err(format!("git {} said more than {} MiB", args[0], MAX_GIT_OUTPUT >> 20));
    }
    Ok(output)
}

/// Settings of the repository's own config (`local` and `worktree` scopes, and what they
/// include) whose value is a program git runs, or turns one on: a session's tools can write
/// that config, and the daemon runs git on the session's behalf (a `read` token's diff among
/// them). Matched case-insensitively by section and key; `*` is any subsection.
const PROGRAM_KEYS: &[&str] = &[
    "core.sshcommand",
    "core.askpass",
    "core.editor",
    "core.pager",
    "core.gitproxy",
    "core.alternaterefscommand",
    "core.fsmonitor",
    "core.hookspath",
    "credential.helper",
    "credential.*.helper",
    "gpg.program",
    "gpg.*.program",
    "gpg.ssh.defaultkeycommand",
    "commit.gpgsign",
    "tag.gpgsign",
    "push.gpgsign",
    "filter.*.clean",
    "filter.*.smudge",
    "filter.*.process",
    "filter.*.required",
    "merge.*.driver",
    "diff.*.textconv",
    "diff.*.command",
    "diff.external",
    "sequence.editor",
    "protocol.allow",
    "protocol.*.allow",
    "ssh.variant",
];

/// Whether `key` (as `git config --list` writes it: section and name lower-case) is one of
/// [`PROGRAM_KEYS`].
fn names_a_program(key: &str) -> bool {
    let Some((section, rest)) = key.split_once('.') else { return false };
    let (sub, name) = match rest.rsplit_once('.') {
        Some((sub, name)) => (Some(sub), name),
        None => (None, rest),
    };
    PROGRAM_KEYS.iter().any(|pattern| {
        let mut parts = pattern.split('.');
        let (Some(p_section), Some(p_second)) = (parts.next(), parts.next()) else { return false };
        match (parts.next(), sub) {
            (None, None) => p_section == section && p_second == name.to_ascii_lowercase(),
            (Some(p_name), Some(sub)) => {
                p_section == section
                    && p_name == name.to_ascii_lowercase()
                    && (p_second == "*" || p_second == sub.to_ascii_lowercase())
            }
            _ => false,
        }
    })
}

/// The `-c KEY=VALUE` settings that take back every program-naming key ([`PROGRAM_KEYS`]) the
/// repository's own config sets, from `git config --list --show-scope --includes -z`'s output:
/// the person's global (or the system's) values where they have any, so that their own
/// signing, ssh and credential helpers still work; otherwise a value that runs nothing (an
/// empty filter or helper, signing off, the plain `git-upload-pack`). A merge driver the
/// repository names is not run: its files merge as a conflict to resolve.
fn program_overrides(listing: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(listing);
    let mut fields = text.split('\0');
    let mut entries: Vec<(&str, &str, &str)> = Vec::new();
    while let (Some(scope), Some(entry)) = (fields.next(), fields.next()) {
        let (key, value) = entry.split_once('\n').unwrap_or((entry, "true"));
        entries.push((scope, key, value));
    }
    let mut keys: Vec<&str> = entries
        .iter()
        .filter(|(scope, key, _)| matches!(*scope, "local" | "worktree") && names_a_program(key))
        .map(|(_, key, _)| *key)
        .collect();
    keys.sort_unstable();
    keys.dedup();
    // Git never goes into a submodule for the daemon: a submodule's config (its own
    // `.git/modules/*/config`) is not listed here.
    let mut settings: Vec<String> = [
        "core.quotePath=false",
        "submodule.recurse=false",
        "diff.ignoreSubmodules=all",
        "push.recurseSubmodules=no",
        "fetch.recurseSubmodules=no",
    ]
    .map(str::to_owned)
    .to_vec();
    for key in keys {
        let theirs: Vec<&str> = entries
            .iter()
            .filter(|(scope, k, _)| matches!(*scope, "global" | "system") && *k == key)
            .map(|(_, _, value)| *value)
            .collect();
        let lower = key.to_ascii_lowercase();
        if matches!(lower.as_str(), "core.hookspath" | "core.fsmonitor") {
            continue;
        }
        if lower.starts_with("credential.") {
            // An empty helper empties the list; the person's own come after it.
            settings.push(format!("{key}="));
            settings.extend(theirs.iter().map(|value| format!("{key}={value}")));
            continue;
        }
        let fallback = match lower.rsplit('.').next().unwrap_or_default() {
            "gpgsign" => "false",
            "required" => "false",
            "sshcommand" => "ssh",
            "program" if lower == "gpg.program" => "gpg",
            "allow" => "never",
            _ => "",
        };
        let value = theirs.last().copied().unwrap_or(fallback);
        settings.push(format!("{key}={value}"));
    }
    // Last, so that nothing above turns them back on: git's own transports only (a remote
    // helper the repository names, `ext::` among them, never runs).
    for known in ["http", "https", "ssh", "git", "file"] {
        let key = format!("protocol.{known}.allow");
        let theirs = entries
            .iter()
            .filter(|(scope, k, _)| matches!(*scope, "global" | "system") && *k == key)
            .map(|(_, _, value)| *value)
            .next_back();
        settings.push(format!("{key}={}", theirs.unwrap_or("always")));
    }
    settings.push("protocol.allow=never".to_owned());
    settings.push("protocol.ext.allow=never".to_owned());
    settings
}

/// `git` in `dir` (of `git_dir`), without a terminal, hooks, fsmonitor, or the daemon's
/// environment's `GIT_*` and `SWITCHBOARD_*` variables, with `args`.
fn git_command(dir: &Path, git_dir: Option<&Path>, args: &[&str]) -> tokio::process::Command {
    #[allow(clippy::disallowed_methods)] // git, not the CLI
    let mut command = tokio::process::Command::new("git");
    command.arg("-C").arg(dir);
    if let Some(git_dir) = git_dir {
        command.arg(format!("--git-dir={}", git_dir.display()));
        command.arg(format!("--work-tree={}", dir.display()));
    }
    command
        .args(["--literal-pathspecs", "--no-optional-locks"])
        .args(["-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false"])
        .args(args)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    // Git's own settings from the daemon's environment, and the daemon's (its database and
    // bus URLs may carry passwords, which a credential helper or ssh would otherwise see).
    for (name, _) in std::env::vars_os() {
        let name_text = name.to_string_lossy();
        if name_text.starts_with("GIT_") || name_text.starts_with("SWITCHBOARD_") {
            command.env_remove(name);
        }
    }
    // A push never waits for a password nobody will type.
    command.env("GIT_TERMINAL_PROMPT", "0");
    command
}

#[cfg(test)]
mod tests {
    use super::{names_a_program, program_overrides};

    #[test]
    fn program_keys_are_matched_by_section_subsection_and_name() {
        for key in [
            "filter.Evil.clean",
            "filter.evil.process",
            "merge.m.driver",
            "gpg.program",
            "gpg.ssh.program",
            "credential.https://example.com.helper",
            "credential.helper",
            "core.sshcommand",
            "commit.gpgsign",
            "protocol.evil.allow",
        ] {
            assert!(names_a_program(key), "{key}");
        }
        for key in ["user.name", "remote.origin.url", "core.bare", "filter.x", "gpg.format"] {
            assert!(!names_a_program(key), "{key}");
        }
    }

    #[test]
    fn the_repositorys_programs_are_taken_back_with_the_persons_own() {
        let listing = [
            "global\0user.name\nAlice",
            "global\0gpg.program\n/usr/bin/my-gpg",
            "global\0credential.helper\nstore",
            "local\0core.bare\nfalse",
            "local\0filter.Evil.clean\ntouch /tmp/x",
            "local\0gpg.program\n/tmp/evil",
            "local\0commit.gpgsign\ntrue",
            "local\0credential.helper\n/tmp/evil",
            "worktree\0merge.m.driver\n/tmp/evil %A",
            "local\0protocol.ext.allow\nalways",
            "",
        ]
        .join("\0");
        let settings = program_overrides(listing.as_bytes());
        assert_eq!(
            settings,
            [
                "core.quotePath=false",
                "submodule.recurse=false",
                "diff.ignoreSubmodules=all",
                "push.recurseSubmodules=no",
                "fetch.recurseSubmodules=no",
                "commit.gpgsign=false",
                "credential.helper=",
                "credential.helper=store",
                "filter.Evil.clean=",
                "gpg.program=/usr/bin/my-gpg",
                "merge.m.driver=",
                "protocol.ext.allow=never",
                "protocol.http.allow=always",
                "protocol.https.allow=always",
                "protocol.ssh.allow=always",
                "protocol.git.allow=always",
                "protocol.file.allow=always",
                "protocol.allow=never",
                "protocol.ext.allow=never",
            ]
        );
        assert_eq!(program_overrides(b"").len(), 12);
    }
}
