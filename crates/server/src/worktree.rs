//! A git worktree per session: the session works on a branch of its own
//! (`switchboard/<short id>`), in a folder of its own beside the repository
//! (`<repo>.worktrees/<short id>`), so that two sessions in one repository never write over
//! each other, and a person reviews the session's whole change against the commit it started
//! from.
//!
//! Through the `git` program, as the person's own git does it (run as [`crate::git`] runs it:
//! time limits, bounded output, no program the repository names, no hooks): its worktree
//! bookkeeping, config, attributes and ignore rules are exactly the user's, with nothing to
//! build (libgit2 is C; gix does not yet add worktrees). Needs git 2.38 or newer (`git
//! merge-tree --write-tree`).
//!
//! The worktree's folder is the session's to write in, its `.git` file too: a session that
//! pointed it at a repository of its own making (with a config that runs a program) would have
//! the daemon's next git command run it. So every command on a worktree names its git folder
//! (inside the repository's, recorded when the worktree was made) and its work tree itself,
//! and never reads the `.git` file.
//!
//! What it does: commit, push, merge (conflicts found first with `git merge-tree`, so an
//! aborted `git merge` never stays half-done), discard and removal (its diff is
//! [`crate::diff::worktree`]); the daemon makes one such change at a time
//! (`Daemon::worktree_ops`). A session's record keeps its worktree in `config.worktree`;
//! creating one that then fails removes the worktree and branch again.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::git::{checked, git, run_git};

/// A session's worktree, as its record keeps it.
pub use switchboard_store::Worktree;

/// Runs `git` on the worktree (its git folder and work tree named, its `.git` file unread).
async fn tree_git(worktree: &Worktree, args: &[&str]) -> Result<String, String> {
    checked(run_git(&worktree.path, Some(&worktree.git_dir), args).await?, args)
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
    fn local_remotes_are_told_from_remote_hosts() {
        for local in ["/srv/repo.git", "../repo", "file:///srv/repo.git", "repo", "./a:b"] {
            assert!(is_local_url(local), "{local}");
        }
        for remote in ["git@github.com:acme/app.git", "https://h/x", "ssh://h/x", "host:path"] {
            assert!(!is_local_url(remote), "{remote}");
        }
    }
}
