//! A git worktree per session: the session works on a branch of its own
//! (`switchboard/<short id>`), in a folder of its own beside the repository
//! (`<repo>.worktrees/<short id>`), so that two sessions in one repository never write over
//! each other, and a person reviews the session's whole change against the commit it started
//! from.
//!
//! Through the `git` program, as the person's own git does it: its worktree bookkeeping,
//! config, attributes and ignore rules are exactly the user's, with nothing to build (libgit2
//! is C; gix does not yet add worktrees). Each call has a time limit and a bounded output; the
//! repository's hooks do not run (`core.hooksPath` is emptied), and `GIT_*` variables of the
//! daemon's environment do not reach it.

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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Worktree {
    /// The repository it was made from (its top level).
    pub repo: PathBuf,
    /// The worktree's folder.
    pub path: PathBuf,
    /// Its branch.
    pub branch: String,
    /// The commit it started from.
    pub base: String,
    /// The branch the repository had checked out then (what a merge goes into), if any.
    pub base_branch: Option<String>,
}

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

/// Runs `git` in `dir` with `args`: its standard output, or an error with what git said.
async fn git(dir: &Path, args: &[&str]) -> Result<String, String> {
    let output = run_git(dir, args).await?;
    if !output.status.success() {
        let said = String::from_utf8_lossy(&output.stderr);
        let said: String = said.trim().chars().take(500).collect();
        return Err(format!("git {}: {said}", args[0]));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Runs `git` in `dir` with `args`, whatever its exit status: what it wrote, within bounds.
async fn run_git(dir: &Path, args: &[&str]) -> Result<std::process::Output, String> {
    #[allow(clippy::disallowed_methods)] // git, not the CLI
    let mut command = tokio::process::Command::new("git");
    command
        .arg("-C")
        .arg(dir)
        .args(["-c", "core.hooksPath=/dev/null", "-c", "core.quotePath=false"])
        .args(args)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("GIT_") {
            command.env_remove(name);
        }
    }
    let output = tokio::time::timeout(GIT_TIMEOUT, command.output())
        .await
        .map_err(|_| format!("git {} took more than {} s", args[0], GIT_TIMEOUT.as_secs()))?
        .map_err(|error| format!("cannot run git ({error}): is it installed?"))?;
    if output.stdout.len() > MAX_GIT_OUTPUT {
        return Err(format!("git {} said more than {} MiB", args[0], MAX_GIT_OUTPUT >> 20));
    }
    Ok(output)
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
    git(&repo, &["worktree", "add", "-b", &branch, &shown, &base]).await?;
    let inside = cwd.canonicalize().ok().and_then(|cwd| {
        let repo = repo.canonicalize().ok()?;
        cwd.strip_prefix(&repo).ok().map(Path::to_path_buf)
    });
    let cwd = match inside {
        Some(sub) if !sub.as_os_str().is_empty() => path.join(sub),
        _ => path.clone(),
    };
    Ok((Worktree { repo, path, branch, base, base_branch }, cwd))
}

/// Whether the worktree has nothing uncommitted (untracked files count).
pub async fn is_clean(worktree: &Worktree) -> Result<bool, String> {
    Ok(git(&worktree.path, &["status", "--porcelain"]).await?.trim().is_empty())
}

/// Removes the worktree (refused with changes in it unless `force`), and its branch when
/// `delete_branch`.
pub async fn remove(worktree: &Worktree, force: bool, delete_branch: bool) -> Result<(), String> {
    let path = worktree.path.display().to_string();
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
        git(&worktree.repo, &["branch", "-D", &worktree.branch]).await?;
    }
    Ok(())
}

/// Commits everything in the worktree (new files too) on its branch, with `message`; the
/// author is git's own (the repository's config). The commit's id.
pub async fn commit(worktree: &Worktree, message: &str) -> Result<String, String> {
    if is_clean(worktree).await? {
        return Err("nothing to commit: the worktree has no changes".into());
    }
    git(&worktree.path, &["add", "-A"]).await?;
    git(&worktree.path, &["commit", "-q", "-m", message]).await?;
    Ok(git(&worktree.path, &["rev-parse", "HEAD"]).await?.trim().to_owned())
}

/// Puts the worktree back as it was when the session started: its branch at the base commit,
/// its changes and new files gone.
pub async fn discard(worktree: &Worktree) -> Result<(), String> {
    git(&worktree.path, &["reset", "-q", "--hard", &worktree.base]).await?;
    git(&worktree.path, &["clean", "-q", "-f", "-d"]).await?;
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
    let current =
        git(repo, &["symbolic-ref", "--quiet", "--short", "HEAD"]).await.unwrap_or_default();
    if current.trim() != target {
        return Err(refused(format!(
            "the repository's checkout is on {}, not {target}: check out {target} to merge into it",
            if current.trim().is_empty() { "no branch" } else { current.trim() }
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
    let ahead = git(repo, &["rev-list", "--count", &format!("{target}..{branch}")])
        .await
        .map_err(refused)?;
    if ahead.trim() == "0" {
        return Err(refused(format!("{branch} has nothing {target} does not have: commit first")));
    }
    let fast = git(repo, &["merge-base", "--is-ancestor", target, branch]).await.is_ok();
    match (mode, fast) {
        (MergeMode::FastForward, false) => {
            return Err(refused(format!(
                "{target} moved on since the session started: a fast-forward is not possible (merge with a merge commit)"
            )))
        }
        (MergeMode::FastForward, true) => {
            git(repo, &["merge", "-q", "--ff-only", branch]).await.map_err(refused)?;
        }
        (MergeMode::Merge, _) => {
            // Found first, touching nothing.
            let listed = conflicts(repo, target, branch).await;
            if !listed.is_empty() {
                return Err(MergeRefused::Conflicts(listed));
            }
            let message = format!("Merge {branch} (a Switchboard session)");
            git(repo, &["merge", "-q", "--no-ff", "--no-edit", "-m", &message, branch])
                .await
                .map_err(refused)?;
        }
    }
    Ok(git(repo, &["rev-parse", target]).await.map_err(refused)?.trim().to_owned())
}

/// The files `git merge-tree` finds in conflict (listed after the tree it would write).
async fn conflicts(repo: &Path, target: &str, branch: &str) -> Vec<String> {
    let args = ["merge-tree", "--write-tree", "--name-only", "--no-messages", target, branch];
    let Ok(output) = run_git(repo, &args).await else { return Vec::new() };
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .skip(1)
        .filter(|line| !line.is_empty())
        .take(1000)
        .map(str::to_owned)
        .collect()
}

/// The session's whole change: its worktree against the commit it started from (what it
/// committed and what it did not), and the files it made that git does not track, per file.
pub async fn diff(worktree: &Worktree) -> Result<Vec<FileChange>, String> {
    let dir = &worktree.path;
    let base = worktree.base.as_str();
    // Paths NUL-separated: any name survives. Renames found (-M).
    let statuses = git(dir, &["diff", "--no-ext-diff", "-M", "--name-status", "-z", base]).await?;
    let numstat = git(dir, &["diff", "--no-ext-diff", "-M", "--numstat", "-z", base]).await?;
    let mut changes = parse_name_status(&statuses);
    apply_numstat(&mut changes, &numstat);
    for change in &mut changes {
        if change.binary {
            continue;
        }
        let mut args = vec!["diff", "--no-ext-diff", "--no-color", "-M", base, "--"];
        if let Some(old) = &change.old_path {
            args.push(old);
        }
        args.push(&change.path);
        let patch = git(dir, &args).await?;
        if patch.len() > MAX_FILE_DIFF_BYTES {
            change.too_large = true;
        } else {
            change.patch = Some(patch);
        }
    }
    let untracked = git(dir, &["ls-files", "--others", "--exclude-standard", "-z"]).await?;
    for path in untracked.split('\0').filter(|path| !path.is_empty()) {
        changes.push(untracked_file(dir, path));
    }
    changes.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(changes)
}

/// `--name-status -z`: `STATUS\0PATH\0`, or `R100\0OLD\0NEW\0` for a rename.
fn parse_name_status(text: &str) -> Vec<FileChange> {
    let mut fields = text.split('\0').filter(|field| !field.is_empty());
    let mut changes = Vec::new();
    while let Some(status) = fields.next() {
        let change = |path: &str, old_path: Option<String>, status| FileChange {
            path: path.to_owned(),
            old_path,
            status,
            binary: false,
            added: 0,
            removed: 0,
            patch: None,
            too_large: false,
        };
        match status.chars().next() {
            Some('R') | Some('C') => {
                let (Some(old), Some(new)) = (fields.next(), fields.next()) else { break };
                changes.push(change(new, Some(old.to_owned()), "renamed"));
            }
            Some(kind) => {
                let Some(path) = fields.next() else { break };
                let status = match kind {
                    'A' => "added",
                    'D' => "deleted",
                    _ => "modified",
                };
                changes.push(change(path, None, status));
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
fn untracked_file(dir: &Path, path: &str) -> FileChange {
    let mut change = FileChange {
        path: path.to_owned(),
        old_path: None,
        status: "untracked",
        binary: false,
        added: 0,
        removed: 0,
        patch: None,
        too_large: false,
    };
    let full = dir.join(path);
    let Ok(metadata) = std::fs::symlink_metadata(&full) else { return change };
    if !metadata.is_file() || metadata.len() > MAX_FILE_DIFF_BYTES as u64 {
        change.too_large = metadata.is_file();
        return change;
    }
    let Ok(bytes) = std::fs::read(&full) else { return change };
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
mod tests {
    use super::*;

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
