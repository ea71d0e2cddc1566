//! A change as git sees it, file by file: a session's worktree against the commit it started
//! from, or the repository a session's directory is in against its `HEAD` (every session has
//! one: read-only where it is not a worktree of the session's own). Renames found, binaries
//! named, untracked files shown whole; a file's patch over [`MAX_FILE_DIFF_BYTES`] is listed,
//! not shown, and at most [`MAX_FILES_SHOWN`] files are shown. Git runs as [`crate::git`]
//! runs it (no program the repository names).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::git::{checked, run_git};
use switchboard_store::Worktree;

/// How a file changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeStatus {
    /// New, and tracked.
    Added,
    /// Changed.
    Modified,
    /// Gone.
    Deleted,
    /// Moved (`old_path` says from where), perhaps changed too.
    Renamed,
    /// New, and not tracked by git.
    Untracked,
}

impl ChangeStatus {
    /// Its name, as the API writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeStatus::Added => "added",
            ChangeStatus::Modified => "modified",
            ChangeStatus::Deleted => "deleted",
            ChangeStatus::Renamed => "renamed",
            ChangeStatus::Untracked => "untracked",
        }
    }
}

impl std::fmt::Display for ChangeStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// Where a diff is read: a work tree (with its git folder named, for a session's worktree,
/// whose `.git` file is the session's to write and is never read) and the commit it is read
/// against.
#[derive(Debug)]
struct Scope<'a> {
    /// The work tree's top folder.
    dir: &'a Path,
    /// Its git folder, named; `None`: found by git from `dir`.
    git_dir: Option<&'a Path>,
    /// The commit (or tree) the work tree is compared with.
    base: &'a str,
    /// Only what is under this folder of the work tree (relative; empty: all of it).
    under: &'a str,
}

/// Runs `git` on the scope's work tree: its standard output, or what git said.
async fn scope_git(scope: &Scope<'_>, args: &[&str]) -> Result<String, String> {
    checked(run_git(scope.dir, scope.git_dir, args).await?, args)
}

/// Which diff a session has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DiffKind {
    /// The session's own worktree against the commit it started from: it may be committed,
    /// merged, pushed or discarded.
    Worktree,
    /// The repository the session's directory is in, against its `HEAD`: read-only.
    Directory,
}

/// A session's change, as every face shows it (`GET /api/sessions/{id}/diff`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionDiff {
    /// A worktree's (it can be committed and merged) or a directory's (read-only).
    pub kind: DiffKind,
    /// The work tree's top folder; each file's path is relative to it.
    pub path: PathBuf,
    /// The commit it is compared with (a worktree's start; a directory's `HEAD`, or the empty
    /// tree in a repository with no commit yet).
    pub base: String,
    /// The branch checked out there (`None`: a detached `HEAD`).
    pub branch: Option<String>,
    /// A worktree's: the branch the repository had checked out when it was made (what a merge
    /// goes into).
    #[serde(default)]
    pub base_branch: Option<String>,
    /// The files changed, by path.
    pub files: Vec<FileChange>,
}

/// A session's worktree against the commit it started from.
pub async fn worktree(tree: &Worktree) -> Result<SessionDiff, String> {
    let scope =
        Scope { dir: &tree.path, git_dir: Some(&tree.git_dir), base: &tree.base, under: "" };
    Ok(SessionDiff {
        kind: DiffKind::Worktree,
        path: tree.path.clone(),
        base: tree.base.clone(),
        branch: Some(tree.branch.clone()),
        base_branch: tree.base_branch.clone(),
        files: changes(&scope).await?,
    })
}

/// Why a directory has no diff.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DirectoryRefused {
    /// The folder is in no git repository.
    NotARepository(PathBuf),
    /// Git failed (what it said).
    Git(String),
}

impl std::fmt::Display for DirectoryRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DirectoryRefused::NotARepository(dir) => write!(
                f,
                "{} is not in a git repository: there is no change to show (start the session in one, or with a worktree)",
                dir.display()
            ),
            DirectoryRefused::Git(said) => f.write_str(said),
        }
    }
}

/// The repository `cwd` is in, against its `HEAD`: what is changed under `cwd` and not
/// committed, staged or not, and the files git does not track there. The repository is found
/// once and then named in every command (`--git-dir`, `--work-tree`), and it must be the work
/// tree's own: `<top>/.git` itself, or a linked worktree whose git folder points back at
/// `<top>/.git`. A `.git` file is the session's to write: one that names another repository
/// would otherwise show that repository's files as this one's change.
pub async fn directory(cwd: &Path) -> Result<SessionDiff, DirectoryRefused> {
    if !cwd.is_dir() {
        return Err(DirectoryRefused::Git(format!("{} is not there any more", cwd.display())));
    }
    let found = run_git(cwd, None, &["rev-parse", "--show-toplevel", "--absolute-git-dir"])
        .await
        .map_err(DirectoryRefused::Git)?;
    if !found.status.success() {
        let said = String::from_utf8_lossy(&found.stderr);
        if said.contains("not a git repository") {
            return Err(DirectoryRefused::NotARepository(cwd.to_owned()));
        }
        return Err(DirectoryRefused::Git(format!(
            "git rev-parse: {}",
            said.trim().chars().take(500).collect::<String>()
        )));
    }
    let said = String::from_utf8_lossy(&found.stdout);
    let mut lines = said.lines();
    let (Some(top), Some(git_dir)) = (lines.next(), lines.next()) else {
        return Err(DirectoryRefused::Git("git rev-parse said too little".to_owned()));
    };
    let (top, git_dir) = (PathBuf::from(top), PathBuf::from(git_dir));
    if !own_git_dir(&top, &git_dir) {
        return Err(DirectoryRefused::Git(format!(
            "{}'s .git names a repository that is not its own: there is no change to show",
            top.display()
        )));
    }
    // The session's folder within the work tree: only its changes are shown.
    let real_cwd = cwd.canonicalize().unwrap_or_else(|_| cwd.to_owned());
    let under = real_cwd
        .strip_prefix(top.canonicalize().unwrap_or_else(|_| top.clone()))
        .map(|inside| inside.to_string_lossy().into_owned())
        .unwrap_or_default();
    let named = |args: &'static [&'static str]| {
        let (top, git_dir) = (top.clone(), git_dir.clone());
        async move { checked(run_git(&top, Some(&git_dir), args).await?, args) }
    };
    // No commit yet: everything is new against the empty tree (of the repository's hash).
    let base = match named(&["rev-parse", "-q", "--verify", "HEAD^{commit}"]).await {
        Ok(head) => head.trim().to_owned(),
        Err(_) => named(&["hash-object", "-t", "tree", "--stdin"])
            .await
            .map_err(DirectoryRefused::Git)?
            .trim()
            .to_owned(),
    };
    let branch = named(&["symbolic-ref", "-q", "--short", "HEAD"])
        .await
        .ok()
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty());
    let files = changes(&Scope { dir: &top, git_dir: Some(&git_dir), base: &base, under: &under })
        .await
        .map_err(DirectoryRefused::Git)?;
    Ok(SessionDiff { kind: DiffKind::Directory, path: top, base, branch, base_branch: None, files })
}

/// The largest file whose content a diff shows (an untracked file's, or a patch).
pub const MAX_FILE_DIFF_BYTES: usize = 1024 * 1024;

/// One file of a session's change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileChange {
    /// Its path in the repository (the new path, for a rename).
    pub path: String,
    /// The path it had, for a rename.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub old_path: Option<String>,
    /// How it changed.
    pub status: ChangeStatus,
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
    /// Not shown: the daemon shows no view of it (its own data, what the session's policy
    /// denies to `Read`); see [`withhold`].
    #[serde(default)]
    pub withheld: bool,
}

impl FileChange {
    /// A change of `path`, its lines and patch not read yet.
    fn new(path: &str, status: ChangeStatus) -> FileChange {
        FileChange {
            path: path.to_owned(),
            old_path: None,
            status,
            binary: false,
            added: 0,
            removed: 0,
            patch: None,
            too_large: false,
            withheld: false,
        }
    }
}

/// A work tree's change against `scope.base` (what was committed since and what was not), and
/// the files git does not track, per file.
async fn changes(scope: &Scope<'_>) -> Result<Vec<FileChange>, String> {
    let base = scope.base;
    // Paths NUL-separated: any name survives. Renames found (-M). No textconv drivers.
    let limit: Vec<&str> = if scope.under.is_empty() { vec![] } else { vec!["--", scope.under] };
    let statuses = scope_git(
        scope,
        &[
            &["diff", "--no-ext-diff", "--no-textconv", "-M", "--name-status", "-z", base][..],
            &limit,
        ]
        .concat(),
    )
    .await?;
    let numstat = scope_git(
        scope,
        &[&["diff", "--no-ext-diff", "--no-textconv", "-M", "--numstat", "-z", base][..], &limit]
            .concat(),
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
        match scope_git(scope, &args).await {
            Ok(patch) if patch.len() <= MAX_FILE_DIFF_BYTES => change.patch = Some(patch),
            // Too large to show (or to take): listed, not shown.
            _ => change.too_large = true,
        }
    }
    let untracked = scope_git(
        scope,
        &[&["ls-files", "--others", "--exclude-standard", "-z"][..], &limit].concat(),
    )
    .await?;
    let names: Vec<String> = untracked
        .split('\0')
        .filter(|path| !path.is_empty())
        .take(MAX_UNTRACKED)
        .map(str::to_owned)
        .collect();
    let dir = scope.dir.to_owned();
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

/// Whether `git_dir` is the work tree `top`'s own: `top/.git` itself, or, where `top/.git` is a
/// file (a linked worktree), a git folder whose `gitdir` file names `top/.git` back.
fn own_git_dir(top: &Path, git_dir: &Path) -> bool {
    let real = |path: &Path| path.canonicalize().ok();
    let dot_git = top.join(".git");
    match std::fs::symlink_metadata(&dot_git) {
        Ok(meta) if meta.is_dir() => real(&dot_git).is_some() && real(&dot_git) == real(git_dir),
        Ok(meta) if meta.is_file() => std::fs::read_to_string(git_dir.join("gitdir"))
            .ok()
            .map(|back| PathBuf::from(back.trim()))
            .is_some_and(|back| real(&back).is_some() && real(&back) == real(&dot_git)),
        _ => false,
    }
}

/// Withholds what `refuses` says no view shows (the daemon's data, what the session's policy
/// denies to `Read`): such a file stays listed, its patch dropped. Blocking (it reads the
/// files' identities).
pub fn withhold(diff: &mut SessionDiff, refuses: impl Fn(&Path, Option<(u64, u64, u64)>) -> bool) {
    use std::os::unix::fs::MetadataExt as _;
    for file in &mut diff.files {
        let full = diff.path.join(&file.path);
        let real = full.canonicalize().unwrap_or_else(|_| full.clone());
        let id = std::fs::metadata(&real).ok().map(|meta| (meta.dev(), meta.ino(), meta.nlink()));
        let old = file.old_path.as_ref().map(|old| diff.path.join(old));
        if refuses(&real, id) || old.is_some_and(|old| refuses(&old, None)) {
            file.patch = None;
            file.withheld = true;
        }
    }
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
                let mut change = FileChange::new(new, ChangeStatus::Renamed);
                change.old_path = Some(old.to_owned());
                changes.push(change);
            }
            Some(kind) => {
                let Some(path) = fields.next() else { break };
                let status = match kind {
                    'A' => ChangeStatus::Added,
                    'D' => ChangeStatus::Deleted,
                    _ => ChangeStatus::Modified,
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
    let mut change = FileChange::new(path, ChangeStatus::Untracked);
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
mod tests {
    use super::*;

    #[test]
    fn a_status_is_written_as_its_name() {
        use ChangeStatus::*;
        for status in [Added, Modified, Deleted, Renamed, Untracked] {
            assert_eq!(serde_json::to_value(status).unwrap(), status.as_str());
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
        let read: Vec<(&str, ChangeStatus, bool, u64, u64)> = changes
            .iter()
            .map(|change| {
                (change.path.as_str(), change.status, change.binary, change.added, change.removed)
            })
            .collect();
        assert_eq!(
            read,
            [
                ("src/a.rs", ChangeStatus::Modified, false, 3, 1),
                ("new name.txt", ChangeStatus::Renamed, false, 2, 0),
                ("logo.png", ChangeStatus::Added, true, 0, 0),
                ("gone", ChangeStatus::Deleted, false, 0, 4),
            ]
        );
        assert_eq!(changes[1].old_path.as_deref(), Some("old name.txt"));
    }
}
