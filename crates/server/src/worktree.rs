//! A git worktree per session: the session works on a branch of its own
//! (`switchboard/<short id>`), in a folder of its own beside the repository
//! (`<repo>.worktrees/<short id>`), so that two sessions in one repository never write over
//! each other, and a person reviews the session's whole change against the commit it started
//! from.
//!
//! Through the `git` program, as the person's own git does it: its worktree bookkeeping,
//! config, attributes and ignore rules are exactly the user's, with nothing to build (libgit2
//! is C; gix does not yet add worktrees). Needs git 2.38 or newer (`git merge-tree
//! --write-tree`). Each call has a time limit and a bounded output; the repository's hooks and
//! fsmonitor do not run, pathspecs are literal, and `GIT_*` and `SWITCHBOARD_*` variables of
//! the daemon's environment (a database URL with its password) do not reach it. No program the
//! repository's own config names runs (filters, merge drivers, signing, ssh, credential and
//! askpass helpers, ...): each such setting is taken back for the command, with the person's
//! global value where there is one ([`PROGRAM_KEYS`]).
//!
//! The worktree's folder is the session's to write in, its `.git` file too: a session that
//! pointed it at a repository of its own making (with a config that runs a program) would have
//! the daemon's next git command run it. So every command on a worktree names its git folder
//! (inside the repository's, recorded when the worktree was made) and its work tree itself,
//! and never reads the `.git` file.
//!
//! What it does: the diff against the commit the session started from, commit, push, merge
//! (conflicts found first with `git merge-tree`, so an aborted `git merge` never stays
//! half-done), discard and removal; the daemon makes one such change at a time
//! (`Daemon::worktree_ops`). Output is held in memory up to its bound: a file's patch over
//! [`MAX_FILE_DIFF_BYTES`] is listed, not shown, and at most [`MAX_FILES_SHOWN`] files are
//! shown. Hooks are off (`core.hooksPath=/dev/null`). A session's record keeps its worktree in
//! `config.worktree`; creating one that then fails removes the worktree and branch again.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How long one git command may take.
pub const GIT_TIMEOUT: Duration = Duration::from_secs(60);

/// The most output one git command may give (a diff of a large change is cut, and says so).
pub const MAX_GIT_OUTPUT: usize = 16 * 1024 * 1024;

/// The largest file whose content a diff shows (an untracked file's, or a patch).
pub const MAX_FILE_DIFF_BYTES: usize = 1024 * 1024;

/// A session's worktree, as its record keeps it.
pub use switchboard_store::Worktree;

/// One file of a session's change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileChange {
    /// Its path in the repository (the new path, for a rename).
    pub path: String,
    /// The path it had, for a rename.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub old_path: Option<String>,
    /// `added`, `modified`, `deleted`, `renamed`, `untracked`.
    pub status: &'static str,
    /// Binary: no patch is shown.
    pub binary: bool,
    /// Lines added and removed (none for a binary file).
    pub added: u64,
    /// Lines removed.
    pub removed: u64,
    /// The unified diff (for an untracked text file, all its lines added); `None` for a binary
    /// file or one too large to show.
    pub patch: Option<String>,
    /// The patch was too large to show.
    pub too_large: bool,
}

impl FileChange {
    /// A change of `path`, its lines and patch not read yet.
    fn new(path: &str, status: &'static str) -> FileChange {
        FileChange {
            path: path.to_owned(),
            old_path: None,
            status,
            binary: false,
            added: 0,
            removed: 0,
            patch: None,
            too_large: false,
        }
    }
}

/// Runs `git` in the repository `dir` with `args`: its standard output, or an error with
/// what git said.
async fn git(dir: &Path, args: &[&str]) -> Result<String, String> {
    checked(run_git(dir, None, args).await?, args)
}

/// Runs `git` on the worktree (its git folder and work tree named, its `.git` file unread).
async fn tree_git(worktree: &Worktree, args: &[&str]) -> Result<String, String> {
    checked(run_git(&worktree.path, Some(&worktree.git_dir), args).await?, args)
}

/// Standard output of a command that succeeded; else what git said.
fn checked(output: std::process::Output, args: &[&str]) -> Result<String, String> {
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
async fn run_git(
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

/// Makes a worktree for the session `short` (its id's start) from the repository `cwd` is in,
/// on a new branch from that repository's HEAD. Returns it, and the folder in it that
/// matches `cwd` (a subfolder of the repository gives the same subfolder of the worktree).
pub async fn create(cwd: &Path, short: &str) -> Result<(Worktree, PathBuf), String> {
    let top = git(cwd, &["rev-parse", "--show-toplevel"]).await.map_err(|_| {
        format!("{} is not in a git repository (a worktree needs one)", cwd.display())
    })?;
    let repo = PathBuf::from(top.trim());
    let base = git(&repo, &["rev-parse", "--verify", "HEAD^{commit}"])
        .await
        .map_err(|_| format!("{} has no commit yet to start a worktree from", repo.display()))?
        .trim()
        .to_owned();
    let base_branch = git(&repo, &["symbolic-ref", "--quiet", "--short", "HEAD"])
        .await
        .ok()
        .map(|branch| branch.trim().to_owned())
        .filter(|branch| !branch.is_empty());
    let name = repo.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
    let parent = repo.parent().unwrap_or(&repo);
    let path = parent.join(format!("{name}.worktrees")).join(short);
    let branch = format!("switchboard/{short}");
    let shown = path.display().to_string();
    // Made without its files first: its checkout is a command of its own, run in the new
    // worktree, where its config is read as that checkout sees it (an `includeIf "onbranch:"`
    // there names the new branch).
    git(&repo, &["worktree", "add", "--no-checkout", "-b", &branch, &shown, &base]).await?;
    // Its git folder, read now that git wrote the `.git` file, and checked to be the
    // repository's.
    let common = git(&repo, &["rev-parse", "--path-format=absolute", "--git-common-dir"]).await?;
    let git_dir = git(&path, &["rev-parse", "--absolute-git-dir"]).await?;
    let git_dir = PathBuf::from(git_dir.trim());
    if !git_dir.starts_with(common.trim()) {
        return Err(format!(
            "the new worktree's git folder {} is not the repository's",
            git_dir.display()
        ));
    }
    let tree = Worktree { repo, path, branch, base, base_branch, git_dir };
    tree_git(&tree, &["reset", "-q", "--hard", "HEAD"]).await?;
    let Worktree { repo, path, branch, base, base_branch, git_dir } = tree;
    let inside = cwd.canonicalize().ok().and_then(|cwd| {
        let repo = repo.canonicalize().ok()?;
        cwd.strip_prefix(&repo).ok().map(Path::to_path_buf)
    });
    let cwd = match inside {
        Some(sub) if !sub.as_os_str().is_empty() => path.join(sub),
        _ => path.clone(),
    };
    Ok((Worktree { repo, path, branch, base, base_branch, git_dir }, cwd))
}

/// Whether the worktree has nothing uncommitted (untracked files count).
pub async fn is_clean(worktree: &Worktree) -> Result<bool, String> {
    Ok(tree_git(worktree, &["status", "--porcelain"]).await?.trim().is_empty())
}

/// The worktree still has its own branch checked out (a session may switch it: then what a
/// commit or a discard would touch is not the session's branch).
async fn on_its_branch(worktree: &Worktree) -> Result<(), String> {
    let head = tree_git(worktree, &["symbolic-ref", "-q", "HEAD"]).await.unwrap_or_default();
    if head.trim() == format!("refs/heads/{}", worktree.branch) {
        Ok(())
    } else {
        Err(format!(
            "the worktree is not on {} any more (the session checked out something else): check it out again first",
            worktree.branch
        ))
    }
}

/// Removes the worktree (refused with changes in it unless `force`), and its branch when
/// `delete_branch`.
pub async fn remove(worktree: &Worktree, force: bool, delete_branch: bool) -> Result<(), String> {
    if !worktree.repo.exists() {
        // The repository is gone, and the worktree's bookkeeping with it.
        return Ok(());
    }
    let path = worktree.path.display().to_string();
    if delete_branch && !force {
        // A branch with commits its base branch does not have is work: kept unless forced.
        let branch = format!("refs/heads/{}", worktree.branch);
        let merged = match &worktree.base_branch {
            Some(base) => {
                let base = format!("refs/heads/{base}");
                git(&worktree.repo, &["merge-base", "--is-ancestor", &branch, &base]).await.is_ok()
            }
            // From a detached HEAD: no commit of its own while it is still at its base.
            None => git(&worktree.repo, &["rev-parse", "--verify", "-q", &branch])
                .await
                .is_ok_and(|tip| tip.trim() == worktree.base),
        };
        if !merged {
            return Err(format!(
                "{} has commits its base branch does not have: merge it, or delete with force=true",
                worktree.branch
            ));
        }
    }
    if worktree.path.exists() {
        let mut args = vec!["worktree", "remove"];
        if force {
            args.push("--force");
        }
        args.push(&path);
        git(&worktree.repo, &args).await?;
    } else {
        git(&worktree.repo, &["worktree", "prune"]).await?;
    }
    if delete_branch {
        let exists = git(
            &worktree.repo,
            &["rev-parse", "--verify", "-q", &format!("refs/heads/{}", worktree.branch)],
        )
        .await
        .is_ok();
        if exists {
            git(&worktree.repo, &["branch", "-D", &worktree.branch]).await?;
        }
    }
    Ok(())
}

/// Commits everything in the worktree (new files too) on its branch, with `message`; the
/// author is git's own (the repository's config). The commit's id.
pub async fn commit(worktree: &Worktree, message: &str) -> Result<String, String> {
    on_its_branch(worktree).await?;
    if is_clean(worktree).await? {
        return Err("nothing to commit: the worktree has no changes".into());
    }
    tree_git(worktree, &["add", "-A"]).await?;
    tree_git(worktree, &["commit", "-q", "-m", message]).await?;
    Ok(tree_git(worktree, &["rev-parse", "HEAD"]).await?.trim().to_owned())
}

/// Pushes the session's branch to the repository's remote `remote` (its name: `origin`),
/// under the same name, with the person's own git credentials. No hook runs. Returns the page
/// that opens a pull request of it into its base branch, when the remote is on a forge whose
/// page is known ([`pull_request_url`]).
pub async fn push(worktree: &Worktree, remote: &str) -> Result<Option<String>, String> {
    if !crate::text::is_name(remote) {
        return Err("remote is a remote's name (letters, digits, '.', '_', '-')".into());
    }
    // The URL as configured (`get-url` would apply `insteadOf` rewrites); where git pushes,
    // its `pushurl` when it has one (a fork's).
    let Ok(url) = git(&worktree.repo, &["config", "--get", &format!("remote.{remote}.url")]).await
    else {
        return Err(format!("the repository has no remote {remote}"));
    };
    let push_key = format!("remote.{remote}.pushurl");
    let url = git(&worktree.repo, &["config", "--get", &push_key]).await.unwrap_or(url);
    let refspec = format!("refs/heads/{0}:refs/heads/{0}", worktree.branch);
    // The remote's program named here: the first `receivepack` in config wins, and the
    // repository's own comes before anything a `-c` could say. A remote on this machine (a
    // path, `file://`) runs its receive-pack here, in a repository a session may have made,
    // with git's local settings cleared: its hooks are turned off on its command line.
    let effective = git(&worktree.repo, &["remote", "get-url", "--push", remote]).await?;
    let receive = if is_local_url(effective.trim()) {
        "--receive-pack=git -c core.hooksPath=/dev/null -c core.fsmonitor=false receive-pack"
    } else {
        "--receive-pack=git-receive-pack"
    };
    git(&worktree.repo, &["push", "--quiet", receive, remote, &refspec]).await?;
    Ok(worktree
        .base_branch
        .as_deref()
        .and_then(|base| pull_request_url(url.trim(), &worktree.branch, base)))
}

/// Whether git reaches `url` on this machine: a path, or `file://` (not `scheme://` nor an
/// scp-like `host:path`, whose `:` comes before any `/`).
fn is_local_url(url: &str) -> bool {
    if let Some((scheme, _)) = url.split_once("://") {
        return scheme.eq_ignore_ascii_case("file");
    }
    match (url.find(':'), url.find('/')) {
        (Some(colon), Some(slash)) => slash < colon,
        (Some(_), None) => false,
        (None, _) => true,
    }
}

/// The forge's page that opens a pull (merge) request of `branch` into `base`, from a remote's
/// URL (`https://host/owner/repo.git`, `ssh://git@host/owner/repo`, `git@host:owner/repo`),
/// for GitHub, GitLab, Bitbucket and Codeberg; `None` for another host or a path that is not
/// plainly a repository's. Nothing is sent anywhere: a person opens the page.
pub fn pull_request_url(remote_url: &str, branch: &str, base: &str) -> Option<String> {
    let (host, path) = if let Some(rest) = remote_url
        .strip_prefix("https://")
        .or_else(|| remote_url.strip_prefix("http://"))
        .or_else(|| remote_url.strip_prefix("ssh://"))
        .or_else(|| remote_url.strip_prefix("git://"))
    {
        let (authority, path) = rest.split_once('/')?;
        let host = authority.rsplit('@').next()?;
        (host.split(':').next()?, path)
    } else {
        // scp-like: [user@]host:owner/repo
        let (authority, path) = remote_url.split_once(':')?;
        if authority.contains('/') {
            return None;
        }
        (authority.rsplit('@').next()?, path)
    };
    let path = path.trim_end_matches('/');
    let path = path.strip_suffix(".git").unwrap_or(path);
    let parts: Vec<&str> = path.split('/').collect();
    let plain = |part: &&str| {
        !part.is_empty()
            && *part != "."
            && *part != ".."
            && part.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    };
    if parts.len() < 2 || !parts.iter().all(plain) {
        return None;
    }
    let encode = |text: &str| -> String {
        text.bytes()
            .map(|byte| match byte {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'/' => {
                    (byte as char).to_string()
                }
                other => format!("%{other:02X}"),
            })
            .collect()
    };
    let (branch, base) = (encode(branch), encode(base));
    let host = host.to_ascii_lowercase();
    let two = parts.len() == 2;
    match host.as_str() {
        "github.com" if two => {
            Some(format!("https://github.com/{path}/compare/{base}...{branch}?expand=1"))
        }
        "codeberg.org" if two => Some(format!("https://codeberg.org/{path}/compare/{base}...{branch}")),
        "bitbucket.org" if two => Some(format!(
            "https://bitbucket.org/{path}/pull-requests/new?source={branch}&dest={base}"
        )),
        // GitLab groups nest: owner/group/…/repo.
        "gitlab.com" => Some(format!(
            "https://gitlab.com/{path}/-/merge_requests/new?merge_request%5Bsource_branch%5D={branch}&merge_request%5Btarget_branch%5D={base}"
        )),
        _ => None,
    }
}

/// Puts the worktree back as it was when the session started: its branch at the base commit,
/// its changes and new files gone.
pub async fn discard(worktree: &Worktree) -> Result<(), String> {
    on_its_branch(worktree).await?;
    tree_git(worktree, &["reset", "-q", "--hard", &worktree.base]).await?;
    tree_git(worktree, &["clean", "-q", "-f", "-d"]).await?;
    Ok(())
}

/// How a merge goes in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MergeMode {
    /// Only by fast-forward: the base branch has not moved since the session started.
    FastForward,
    /// With a merge commit.
    Merge,
}

/// Why a merge did not happen; nothing changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MergeRefused {
    /// These files conflict.
    Conflicts(Vec<String>),
    /// Something else: the sentence says what.
    Other(String),
}

/// Merges the session's branch into the branch the repository had checked out when it
/// started, in the repository's own checkout (which must still be on that branch, and clean).
/// Conflicts are found first, without touching anything (`git merge-tree`): a merge either
/// happens whole or not at all. The base branch's new commit.
pub async fn merge(worktree: &Worktree, mode: MergeMode) -> Result<String, MergeRefused> {
    let refused = MergeRefused::Other;
    let repo = &worktree.repo;
    let target = worktree.base_branch.as_deref().ok_or_else(|| {
        refused("the repository had no branch checked out when the session started".into())
    })?;
    if !is_clean(worktree).await.map_err(refused)? {
        return Err(refused("the worktree has changes: commit or discard them first".into()));
    }
    // By full names: a tag of the same name never stands in for a branch.
    let (target_ref, branch_ref) =
        (format!("refs/heads/{target}"), format!("refs/heads/{}", worktree.branch));
    let current = git(repo, &["symbolic-ref", "--quiet", "HEAD"]).await.unwrap_or_default();
    if current.trim() != target_ref {
        let shown = current.trim().strip_prefix("refs/heads/").unwrap_or("no branch");
        return Err(refused(format!(
            "the repository's checkout is on {shown}, not {target}: check out {target} to merge into it"
        )));
    }
    if !git(repo, &["status", "--porcelain", "--untracked-files=no"])
        .await
        .map_err(refused)?
        .trim()
        .is_empty()
    {
        return Err(refused(format!(
            "{} has uncommitted changes: commit or stash them first",
            repo.display()
        )));
    }
    let branch = worktree.branch.as_str();
    let ahead = git(repo, &["rev-list", "--count", &format!("{target_ref}..{branch_ref}")])
        .await
        .map_err(refused)?;
    if ahead.trim() == "0" {
        return Err(refused(format!("{branch} has nothing {target} does not have: commit first")));
    }
    let fast = git(repo, &["merge-base", "--is-ancestor", &target_ref, &branch_ref]).await.is_ok();
    match (mode, fast) {
        (MergeMode::FastForward, false) => {
            return Err(refused(format!(
                "{target} moved on since the session started: a fast-forward is not possible (merge with a merge commit)"
            )))
        }
        (MergeMode::FastForward, true) => {
            git(repo, &["merge", "-q", "--ff-only", &branch_ref]).await.map_err(refused)?;
        }
        (MergeMode::Merge, _) => {
            // Found first, touching nothing.
            let listed = conflicts(repo, &target_ref, &branch_ref).await?;
            if !listed.is_empty() {
                return Err(MergeRefused::Conflicts(listed));
            }
            let message = format!("Merge {branch} (a Switchboard session)");
            let merged =
                git(repo, &["merge", "-q", "--no-ff", "--no-edit", "-m", &message, &branch_ref])
                    .await;
            if let Err(said) = merged {
                // Never left half-done in the person's checkout.
                if git(repo, &["rev-parse", "-q", "--verify", "MERGE_HEAD"]).await.is_ok() {
                    let _ = git(repo, &["merge", "--abort"]).await;
                }
                return Err(refused(said));
            }
        }
    }
    Ok(git(repo, &["rev-parse", &target_ref]).await.map_err(refused)?.trim().to_owned())
}

/// The files `git merge-tree` finds in conflict (listed after the tree it would write; it
/// exits 1 then, 0 with none). Anything else refuses the merge.
async fn conflicts(repo: &Path, target: &str, branch: &str) -> Result<Vec<String>, MergeRefused> {
    let args = ["merge-tree", "--write-tree", "--name-only", "--no-messages", "-z", target, branch];
    let output = run_git(repo, None, &args).await.map_err(MergeRefused::Other)?;
    match output.status.code() {
        Some(0) => Ok(Vec::new()),
        Some(1) => Ok(String::from_utf8_lossy(&output.stdout)
            .split('\0')
            .skip(1)
            .filter(|name| !name.is_empty())
            .take(1000)
            .map(str::to_owned)
            .collect()),
        _ => Err(MergeRefused::Other(format!(
            "git could not check the merge for conflicts (git 2.38 or newer is needed): {}",
            String::from_utf8_lossy(&output.stderr).trim().chars().take(300).collect::<String>()
        ))),
    }
}

/// The session's whole change: its worktree against the commit it started from (what it
/// committed and what it did not), and the files it made that git does not track, per file.
pub async fn diff(worktree: &Worktree) -> Result<Vec<FileChange>, String> {
    let base = worktree.base.as_str();
    // Paths NUL-separated: any name survives. Renames found (-M). No textconv drivers.
    let statuses = tree_git(
        worktree,
        &["diff", "--no-ext-diff", "--no-textconv", "-M", "--name-status", "-z", base],
    )
    .await?;
    let numstat = tree_git(
        worktree,
        &["diff", "--no-ext-diff", "--no-textconv", "-M", "--numstat", "-z", base],
    )
    .await?;
    let mut changes = parse_name_status(&statuses);
    apply_numstat(&mut changes, &numstat);
    for (index, change) in changes.iter_mut().enumerate() {
        if change.binary {
            continue;
        }
        // The first files are shown whole; past that, listed.
        if index >= MAX_FILES_SHOWN {
            change.too_large = true;
            continue;
        }
        let mut args =
            vec!["diff", "--no-ext-diff", "--no-textconv", "--no-color", "-M", base, "--"];
        if let Some(old) = &change.old_path {
            args.push(old);
        }
        args.push(&change.path);
        match tree_git(worktree, &args).await {
            Ok(patch) if patch.len() <= MAX_FILE_DIFF_BYTES => change.patch = Some(patch),
            // Too large to show (or to take): listed, not shown.
            _ => change.too_large = true,
        }
    }
    let untracked =
        tree_git(worktree, &["ls-files", "--others", "--exclude-standard", "-z"]).await?;
    let names: Vec<String> = untracked
        .split('\0')
        .filter(|path| !path.is_empty())
        .take(MAX_UNTRACKED)
        .map(str::to_owned)
        .collect();
    let dir = worktree.path.clone();
    let read = tokio::task::spawn_blocking(move || {
        let root = dir.canonicalize().unwrap_or_else(|_| dir.clone());
        names
            .iter()
            .enumerate()
            .map(|(index, path)| untracked_file(&root, path, index < MAX_FILES_SHOWN))
            .collect::<Vec<_>>()
    })
    .await
    .map_err(|_| "reading the new files failed".to_owned())?;
    changes.extend(read);
    changes.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(changes)
}

/// The most files whose content a diff shows (the rest are listed, marked `too_large`).
pub const MAX_FILES_SHOWN: usize = 300;

/// The most untracked files a diff lists.
pub const MAX_UNTRACKED: usize = 2000;

/// `--name-status -z`: `STATUS\0PATH\0`, or `R100\0OLD\0NEW\0` for a rename.
fn parse_name_status(text: &str) -> Vec<FileChange> {
    let mut fields = text.split('\0').filter(|field| !field.is_empty());
    let mut changes = Vec::new();
    while let Some(status) = fields.next() {
        match status.chars().next() {
            Some('R') | Some('C') => {
                let (Some(old), Some(new)) = (fields.next(), fields.next()) else { break };
                let mut change = FileChange::new(new, "renamed");
                change.old_path = Some(old.to_owned());
                changes.push(change);
            }
            Some(kind) => {
                let Some(path) = fields.next() else { break };
                let status = match kind {
                    'A' => "added",
                    'D' => "deleted",
                    _ => "modified",
                };
                changes.push(FileChange::new(path, status));
            }
            None => break,
        }
    }
    changes
}

/// `--numstat -z`: `ADDED\tREMOVED\tPATH\0`, or for a rename `ADDED\tREMOVED\t\0OLD\0NEW\0`;
/// `-\t-` for a binary file.
fn apply_numstat(changes: &mut [FileChange], text: &str) {
    let mut fields = text.split('\0');
    while let Some(field) = fields.next() {
        let mut parts = field.splitn(3, '\t');
        let (Some(added), Some(removed), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let path = if path.is_empty() {
            let _old = fields.next();
            fields.next().unwrap_or_default()
        } else {
            path
        };
        if let Some(change) = changes.iter_mut().find(|change| change.path == path) {
            change.binary = added == "-" && removed == "-";
            change.added = added.parse().unwrap_or(0);
            change.removed = removed.parse().unwrap_or(0);
        }
    }
}

/// A file git does not track, as a change: all its lines added (text), or binary.
/// Read inside `root` only (a path through a link that leads out is not read), without
/// following a link or blocking on a pipe, at most [`MAX_FILE_DIFF_BYTES`]; `show`: its
/// content too.
fn untracked_file(root: &Path, path: &str, show: bool) -> FileChange {
    let mut change = FileChange::new(path, "untracked");
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let full = root.join(path);
    // The folder it is in must be the worktree's own (a link to elsewhere is not followed).
    let inside = full
        .parent()
        .and_then(|parent| parent.canonicalize().ok())
        .is_some_and(|parent| parent.starts_with(root));
    if !inside || !show {
        change.too_large = true;
        return change;
    }
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
        .open(&full);
    let Ok(file) = opened else {
        change.too_large = true;
        return change;
    };
    if !file.metadata().is_ok_and(|metadata| metadata.is_file()) {
        change.too_large = true;
        return change;
    }
    let mut bytes = Vec::new();
    if file.take(MAX_FILE_DIFF_BYTES as u64 + 1).read_to_end(&mut bytes).is_err()
        || bytes.len() > MAX_FILE_DIFF_BYTES
    {
        change.too_large = true;
        return change;
    }
    if bytes.iter().take(8000).any(|byte| *byte == 0) {
        change.binary = true;
        return change;
    }
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text.lines().collect();
    change.added = lines.len() as u64;
    let mut patch = format!("--- /dev/null\n+++ b/{path}\n@@ -0,0 +1,{} @@\n", lines.len());
    for line in lines {
        patch.push('+');
        patch.push_str(line);
        patch.push('\n');
    }
    change.patch = Some(patch);
    change
}

#[cfg(test)]
mod program_tests {
    use super::{names_a_program, program_overrides};

    #[test]
    fn local_remotes_are_told_from_remote_hosts() {
        for local in ["/srv/repo.git", "../repo", "file:///srv/repo.git", "repo", "./a:b"] {
            assert!(super::is_local_url(local), "{local}");
        }
        for remote in ["git@github.com:acme/app.git", "https://h/x", "ssh://h/x", "host:path"] {
            assert!(!super::is_local_url(remote), "{remote}");
        }
    }

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pull_request_page_from_a_remote_s_url() {
        let url = |remote: &str| pull_request_url(remote, "switchboard/ab12cd34", "main");
        let github = "https://github.com/acme/app/compare/main...switchboard/ab12cd34?expand=1";
        for remote in [
            "https://github.com/acme/app.git",
            "https://user@github.com/acme/app",
            "git@github.com:acme/app.git",
            "ssh://git@github.com:22/acme/app.git",
            "https://GitHub.com/acme/app/",
        ] {
            assert_eq!(url(remote).as_deref(), Some(github), "{remote}");
        }
        assert_eq!(
            url("git@gitlab.com:group/sub/app.git").as_deref(),
            Some("https://gitlab.com/group/sub/app/-/merge_requests/new?merge_request%5Bsource_branch%5D=switchboard/ab12cd34&merge_request%5Btarget_branch%5D=main")
        );
        assert_eq!(
            url("https://bitbucket.org/acme/app.git").as_deref(),
            Some("https://bitbucket.org/acme/app/pull-requests/new?source=switchboard/ab12cd34&dest=main")
        );
        assert_eq!(
            pull_request_url("https://codeberg.org/a/b", "x y&z", "main").as_deref(),
            Some("https://codeberg.org/a/b/compare/main...x%20y%26z")
        );
        // Another host, a local path, or a path that is not plainly owner/repo: no page.
        for remote in [
            "/srv/git/app.git",
            "file:///srv/git/app.git",
            "https://git.example.com/acme/app.git",
            "https://github.com/acme",
            "https://github.com/acme/app/extra",
            "https://github.com/../app",
            "https://github.com/acme/app?x=<script>",
            "git@github.com:acme/a\"pp",
        ] {
            assert_eq!(url(remote), None, "{remote}");
        }
    }

    #[test]
    fn name_status_and_numstat_are_read_with_renames_and_binaries() {
        let statuses = [
            "M",
            "src/a.rs",
            "R087",
            "old name.txt",
            "new name.txt",
            "A",
            "logo.png",
            "D",
            "gone",
            "",
        ];
        let mut changes = parse_name_status(&statuses.join("\0"));
        let numstat = [
            "3\t1\tsrc/a.rs",
            "2\t0\t",
            "old name.txt",
            "new name.txt",
            "-\t-\tlogo.png",
            "0\t4\tgone",
            "",
        ];
        apply_numstat(&mut changes, &numstat.join("\0"));
        let read: Vec<(&str, &str, bool, u64, u64)> = changes
            .iter()
            .map(|change| {
                (change.path.as_str(), change.status, change.binary, change.added, change.removed)
            })
            .collect();
        assert_eq!(
            read,
            [
                ("src/a.rs", "modified", false, 3, 1),
                ("new name.txt", "renamed", false, 2, 0),
                ("logo.png", "added", true, 0, 0),
                ("gone", "deleted", false, 0, 4),
            ]
        );
        assert_eq!(changes[1].old_path.as_deref(), Some("old name.txt"));
    }
}
