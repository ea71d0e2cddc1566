//! A git worktree per session, with the real CLI in a scratch repository: two sessions change
//! the same file, each in its own worktree, without touching the other or the repository; the
//! diff shows each one's whole change (an untracked file too); a worktree with changes is kept
//! unless the delete forces it.

use std::path::Path;
use std::sync::Arc;

use serde_json::{json, Value};
use switchboard_store::{MemoryStore, Store};
use switchboard_testkit::{git, CliSandbox, FakeApi, Reply, Scenario};

use crate::{is_result, Server, TOKEN};

fn bash(command: &str) -> Value {
    json!({"command": command, "description": "change the file"})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sessions_change_one_file_in_worktrees_of_their_own_and_the_diff_shows_each() {
    let api = FakeApi::start(
        Scenario::new()
            .reply(
                Reply::tool_use("Bash", bash("echo one >> shared.txt && echo ONE_MARK"))
                    .when_prompt("ONE"),
            )
            .reply(Reply::text("One.").when_tool_result_contains("ONE_MARK"))
            .reply(
                Reply::tool_use(
                    "Bash",
                    bash("echo two >> shared.txt && printf 'new\\n' > fresh.txt && echo TWO_MARK"),
                )
                .when_prompt("TWO"),
            )
            .reply(Reply::text("Two.").when_tool_result_contains("TWO_MARK"))
            .reply(
                Reply::tool_use("Bash", bash("echo three >> shared.txt && echo THREE_MARK"))
                    .when_prompt("THREE"),
            )
            .reply(Reply::text("Three.").when_tool_result_contains("THREE_MARK")),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let repo = sandbox.workdir();
    std::fs::write(repo.join("shared.txt"), "base\n").unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    // Who commits: the repository's own config, as a person's git has it.
    git(&repo, &["config", "user.name", "Test Person"]);
    git(&repo, &["config", "user.email", "person@example.com"]);
    git(&repo, &["add", "shared.txt"]);
    git(&repo, &["commit", "-q", "-m", "base"]);
    let base = git(&repo, &["rev-parse", "HEAD"]).trim().to_owned();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let server = Server::start(store, &api, &sandbox).await;
    let policy = "[permissions]\ndefault = \"allow\"\n";

    let mut sessions = Vec::new();
    for prompt in ["ONE", "TWO"] {
        let body = json!({"cwd": repo, "prompt": prompt, "worktree": true, "policy": policy});
        let (status, session) = server.post("/api/sessions", body).await;
        assert_eq!(status, 201, "{session}");
        let id = session["id"].as_str().unwrap().to_owned();
        let mut ws = server.ws(&format!("/api/sessions/{id}/subscribe?after=0")).await;
        ws.until(is_result).await;
        sessions.push(session);
    }
    // Each in its own folder and branch; the repository itself is as it was.
    let (one, two) = (&sessions[0], &sessions[1]);
    let tree = |session: &Value| session["config"]["worktree"].clone();
    assert_ne!(one["cwd"], two["cwd"]);
    assert_eq!(one["cwd"], tree(one)["path"]);
    assert_eq!(tree(one)["base"], base.as_str());
    assert_eq!(tree(one)["base_branch"], "main");
    let short = &one["id"].as_str().unwrap()[..8];
    assert_eq!(tree(one)["branch"], format!("switchboard/{short}"));
    assert_eq!(std::fs::read_to_string(repo.join("shared.txt")).unwrap(), "base\n");
    let one_path = Path::new(one["cwd"].as_str().unwrap()).to_owned();
    assert_eq!(std::fs::read_to_string(one_path.join("shared.txt")).unwrap(), "base\none\n");

    // The diff: each session's own change, against the commit it started from.
    let (status, diff) =
        server.get(&format!("/api/sessions/{}/diff", one["id"].as_str().unwrap())).await;
    assert_eq!(status, 200, "{diff}");
    assert_eq!(diff["base"], base.as_str());
    let files = diff["files"].as_array().unwrap();
    assert_eq!(files.len(), 1, "{diff}");
    assert_eq!(
        (files[0]["path"].as_str(), files[0]["status"].as_str()),
        (Some("shared.txt"), Some("modified"))
    );
    assert_eq!((files[0]["added"].as_u64(), files[0]["removed"].as_u64()), (Some(1), Some(0)));
    let patch = files[0]["patch"].as_str().unwrap();
    assert!(patch.contains("\n+one\n") && !patch.contains("two"), "{patch}");
    let (_, diff) =
        server.get(&format!("/api/sessions/{}/diff", two["id"].as_str().unwrap())).await;
    let files = diff["files"].as_array().unwrap();
    let paths: Vec<(&str, &str)> = files
        .iter()
        .map(|file| (file["path"].as_str().unwrap(), file["status"].as_str().unwrap()))
        .collect();
    assert_eq!(paths, [("fresh.txt", "untracked"), ("shared.txt", "modified")], "{diff}");
    assert!(files[0]["patch"].as_str().unwrap().contains("+new"), "{diff}");
    assert!(files[1]["patch"].as_str().unwrap().contains("\n+two\n"), "{diff}");

    // A session without a worktree has a diff too: the checkout against its HEAD, read-only.
    let denying = "[permissions]\ndefault = \"allow\"\ndeny = [\"Read(./secret.txt)\"]\n";
    let body = json!({"cwd": repo.join("sub"), "prompt": "THREE", "policy": denying});
    std::fs::create_dir_all(repo.join("sub")).unwrap();
    let (status, three) = server.post("/api/sessions", body).await;
    assert_eq!(status, 201, "{three}");
    let three_id = three["id"].as_str().unwrap().to_owned();
    let mut ws = server.ws(&format!("/api/sessions/{three_id}/subscribe?after=0")).await;
    ws.until(is_result).await;
    // Outside the session's folder: not its change. What its policy denies to Read: listed,
    // never shown.
    std::fs::write(repo.join("outside.txt"), "elsewhere\n").unwrap();
    std::fs::write(repo.join("sub/secret.txt"), "SECRET_VALUE\n").unwrap();
    let (status, diff) = server.get(&format!("/api/sessions/{three_id}/diff")).await;
    assert_eq!(status, 200, "{diff}");
    assert!(
        !diff.to_string().contains("SECRET_VALUE") && !diff.to_string().contains("elsewhere"),
        "{diff}"
    );
    let files = diff["files"].as_array().unwrap();
    let secret = files.iter().find(|file| file["path"] == "sub/secret.txt").expect("listed");
    assert_eq!(
        (secret["withheld"].as_bool(), secret["patch"].is_null()),
        (Some(true), true),
        "{diff}"
    );
    std::fs::remove_file(repo.join("sub/secret.txt")).unwrap();
    std::fs::remove_file(repo.join("outside.txt")).unwrap();
    let (status, diff) = server.get(&format!("/api/sessions/{three_id}/diff")).await;
    assert_eq!(status, 200, "{diff}");
    assert_eq!(
        (diff["kind"].as_str(), diff["branch"].as_str(), diff["base"].as_str()),
        (Some("directory"), Some("main"), Some(base.as_str())),
        "{diff}"
    );
    assert_eq!(diff["path"], repo.canonicalize().unwrap().to_str().unwrap(), "{diff}");
    assert_eq!(diff["files"].as_array().unwrap().len(), 1, "{diff}");
    assert_eq!(diff["files"][0]["path"], "sub/shared.txt", "{diff}");
    assert_eq!(diff["files"][0]["status"], "untracked", "{diff}");
    let (status, refused) =
        server.post(&format!("/api/sessions/{three_id}/commit"), json!({})).await;
    assert_eq!(status, 409, "a directory's diff is read-only: {refused}");
    // Its files are what Files shows: a token that may not read those gets no directory diff.
    let (_, made) = server.post("/api/tokens", json!({"name": "watcher", "scope": "read"})).await;
    let watcher = made["token"].as_str().unwrap();
    let path = format!("/api/sessions/{three_id}/diff");
    let (status, refused) = server.request_as(watcher, reqwest::Method::GET, &path, None).await;
    assert_eq!(status, 403, "{refused}");
    std::fs::remove_dir_all(repo.join("sub")).unwrap();

    // A folder whose .git file names another repository is not that repository's work tree:
    // no diff (it would show every file of the other as deleted, with its content).
    let posing = sandbox.home().join("posing");
    std::fs::create_dir_all(&posing).unwrap();
    std::fs::write(posing.join(".git"), format!("gitdir: {}\n", repo.join(".git").display()))
        .unwrap();
    let (_, pose) = server.post("/api/sessions", json!({"cwd": posing})).await;
    let (status, refused) =
        server.get(&format!("/api/sessions/{}/diff", pose["id"].as_str().unwrap())).await;
    assert_eq!(status, 409, "{refused}");
    assert!(refused["error"]["message"].as_str().unwrap().contains("not its own"), "{refused}");
    assert!(!refused.to_string().contains("shared.txt"), "{refused}");

    // Not in a git repository: refused, saying so; no worktree for a session without one.
    let plain = sandbox.home().join("plain");
    std::fs::create_dir_all(&plain).unwrap();
    let (status, refused) =
        server.post("/api/sessions", json!({"cwd": plain, "worktree": true})).await;
    assert_eq!(status, 400, "{refused}");
    assert!(
        refused["error"]["message"].as_str().unwrap().contains("not in a git repository"),
        "{refused}"
    );
    let (_, bare) = server.post("/api/sessions", json!({"cwd": plain})).await;
    let (status, refused) =
        server.get(&format!("/api/sessions/{}/diff", bare["id"].as_str().unwrap())).await;
    assert_eq!((status, refused["error"]["code"].as_str()), (409, Some("worktree")), "{refused}");
    assert!(
        refused["error"]["message"].as_str().unwrap().contains("is not in a git repository"),
        "{refused}"
    );

    // Deleting: a worktree with changes is kept (and so is the session) unless forced; forced,
    // it goes, and its branch when asked.
    let id = one["id"].as_str().unwrap();
    let (status, kept) = server
        .request_as(TOKEN, reqwest::Method::DELETE, &format!("/api/sessions/{id}?purge=true"), None)
        .await;
    assert_eq!(status, 409, "{kept}");
    assert!(kept["error"]["message"].as_str().unwrap().contains("has changes"), "{kept}");
    assert!(one_path.exists());
    assert_eq!(server.get(&format!("/api/sessions/{id}")).await.0, 200, "nothing deleted");
    // Review: TWO commits, and merges into main by fast-forward; the checkout has its change.
    let two_id = two["id"].as_str().unwrap();
    let (status, made) =
        server.post(&format!("/api/sessions/{two_id}/commit"), json!({"message": "Add two"})).await;
    assert_eq!(status, 200, "{made}");
    let (status, merged) = server
        .post(&format!("/api/sessions/{two_id}/merge"), json!({"mode": "fast_forward"}))
        .await;
    assert_eq!(status, 200, "{merged}");
    assert_eq!(merged["commit"], made["commit"]);
    assert_eq!(std::fs::read_to_string(repo.join("shared.txt")).unwrap(), "base\ntwo\n");
    assert!(repo.join("fresh.txt").exists());
    let log = git(&repo, &["log", "-1", "--format=%s|%an"]);
    assert_eq!(log.trim(), "Add two|Test Person", "the author is git's own");

    // ONE, committed, cannot fast-forward (main moved on) and conflicts in shared.txt: refused,
    // saying which file, and nothing changes.
    let head = git(&repo, &["rev-parse", "HEAD"]);
    let (status, _) = server.post(&format!("/api/sessions/{id}/commit"), json!({})).await;
    assert_eq!(status, 200);
    let (status, refused) =
        server.post(&format!("/api/sessions/{id}/merge"), json!({"mode": "fast_forward"})).await;
    assert_eq!(status, 409, "{refused}");
    assert!(refused["error"]["message"].as_str().unwrap().contains("moved on"), "{refused}");
    let (status, refused) =
        server.post(&format!("/api/sessions/{id}/merge"), json!({"mode": "merge"})).await;
    assert_eq!(
        (status, refused["error"]["code"].as_str()),
        (409, Some("merge_conflict")),
        "{refused}"
    );
    assert_eq!(refused["error"]["files"], json!(["shared.txt"]));
    assert_eq!(git(&repo, &["rev-parse", "HEAD"]), head, "nothing merged");
    assert_eq!(git(&repo, &["status", "--porcelain"]).trim(), "", "the checkout is as it was");
    // Discarded, its worktree is back at its base: no change; then it deletes without force,
    // and its branch stays.
    let (status, _) = server.post(&format!("/api/sessions/{id}/discard"), json!({})).await;
    assert_eq!(status, 204);
    let (_, diff) = server.get(&format!("/api/sessions/{id}/diff")).await;
    assert_eq!(diff["files"], json!([]), "{diff}");
    let (status, _) = server
        .request_as(TOKEN, reqwest::Method::DELETE, &format!("/api/sessions/{id}?purge=true"), None)
        .await;
    assert_eq!(status, 204);
    assert!(!one_path.exists(), "the worktree is gone");
    let branch = format!("switchboard/{short}");
    assert_eq!(git(&repo, &["branch", "--list", &branch]).trim(), branch, "its branch stays");

    // The worktree's `.git` file is the session's to write: pointed at a repository of its own
    // making, whose config would run a program, it is not read; a link to a file outside the
    // worktree is listed, not read.
    let (_, third) = server.post("/api/sessions", json!({"cwd": repo, "worktree": true})).await;
    let third_id = third["id"].as_str().unwrap().to_owned();
    let third_path = Path::new(third["cwd"].as_str().unwrap()).to_owned();
    // A copy of the repository's git folder (with its index, which git then refreshes through
    // the fsmonitor program): unpinned, `git diff` in the worktree runs it.
    let evil = sandbox.home().join("evil.git");
    #[allow(clippy::disallowed_methods)] // the test's own setup
    let copied =
        std::process::Command::new("cp").arg("-r").arg(repo.join(".git")).arg(&evil).status();
    assert!(copied.unwrap().success());
    let marker = sandbox.home().join("ran");
    git(&evil, &["config", "core.fsmonitor", &format!("touch {};", marker.display())]);
    // And a work tree elsewhere (what a discard would then wipe).
    let victim = sandbox.home().join("victim");
    std::fs::create_dir_all(&victim).unwrap();
    std::fs::write(victim.join("shared.txt"), "victim\n").unwrap();
    git(&evil, &["config", "core.bare", "false"]);
    git(&evil, &["config", "core.worktree", victim.to_str().unwrap()]);
    std::fs::write(third_path.join(".git"), format!("gitdir: {}\n", evil.display())).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", third_path.join("link.txt")).unwrap();
    let (status, diff) = server.get(&format!("/api/sessions/{third_id}/diff")).await;
    assert_eq!(status, 200, "{diff}");
    assert!(!marker.exists(), "the session's git config ran nothing");
    let listed: Vec<&str> = diff["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|file| file["path"].as_str().unwrap())
        .collect();
    assert_eq!(listed, ["link.txt"], "the worktree's own change, not another folder's: {diff}");
    let link =
        diff["files"].as_array().unwrap().iter().find(|file| file["path"] == "link.txt").cloned();
    let link = link.expect("the link is listed");
    assert_eq!(
        (link["patch"].clone(), link["too_large"].clone()),
        (Value::Null, json!(true)),
        "{link}"
    );

    // Pushed to the repository's remote (a local bare one), under its own name; a remote that
    // is not there is refused.
    let remote = sandbox.home().join("remote.git");
    git(&sandbox.home(), &["init", "-q", "--bare", remote.to_str().unwrap()]);
    let (status, refused) = server.post(&format!("/api/sessions/{two_id}/push"), json!({})).await;
    assert_eq!(status, 409, "{refused}");
    assert!(
        refused["error"]["message"].as_str().unwrap().contains("no remote origin"),
        "{refused}"
    );
    git(&repo, &["remote", "add", "origin", remote.to_str().unwrap()]);
    let (status, pushed) = server.post(&format!("/api/sessions/{two_id}/push"), json!({})).await;
    assert_eq!(status, 200, "{pushed}");
    let two_branch = format!("switchboard/{}", &two_id[..8]);
    let at_remote = git(&remote, &["rev-parse", &format!("refs/heads/{two_branch}")]);
    assert_eq!(at_remote.trim(), made["commit"].as_str().unwrap());
    assert_eq!(pushed["pull_request_url"], Value::Null, "a local remote has no forge page");
    // A GitHub remote (sent to the local one by git's own insteadOf, so nothing leaves the
    // machine): pushed there, and the page that opens the pull request.
    let github = "https://github.com/acme/app.git";
    git(&repo, &["remote", "add", "github", github]);
    git(&repo, &["config", &format!("url.{}.insteadOf", remote.display()), github]);
    let (status, pushed) =
        server.post(&format!("/api/sessions/{two_id}/push"), json!({"remote": "github"})).await;
    assert_eq!(status, 200, "{pushed}");
    assert_eq!(
        pushed["pull_request_url"],
        format!("https://github.com/acme/app/compare/main...{two_branch}?expand=1"),
        "{pushed}"
    );
    let (status, _) = server
        .post(&format!("/api/sessions/{two_id}/push"), json!({"remote": "--upload-pack=x"}))
        .await;
    assert_eq!(status, 400, "an option is not a remote: a bad request");

    // Asked to, the delete takes the branch too.
    let (status, _) = server
        .request_as(
            TOKEN,
            reqwest::Method::DELETE,
            &format!("/api/sessions/{two_id}?purge=true&delete_branch=true"),
            None,
        )
        .await;
    assert_eq!(status, 204);
    assert_eq!(git(&repo, &["branch", "--list", &two_branch]).trim(), "");
    server.stop().await;
}

/// The repository's own config names programs for every git step the daemon takes on a
/// worktree (filters on checkout, diff and commit, a merge driver, a textconv, signing, ssh, a
/// credential helper, askpass, the remote's receive-pack): none of them runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repositorys_own_config_runs_no_program() {
    use switchboard_server::worktree;
    let scratch = tempfile::tempdir().unwrap();
    let repo = scratch.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::write(repo.join(".gitattributes"), "* filter=evil merge=evil diff=evil\n").unwrap();
    switchboard_testkit::git_repository(&repo, &[("a.txt", "one\n")]);
    let bare = scratch.path().join("remote.git");
    git(scratch.path(), &["init", "-q", "--bare", bare.to_str().unwrap()]);
    let ran = scratch.path().join("ran");
    std::fs::create_dir_all(&ran).unwrap();
    let touch = |name: &str| format!("touch {}/{name}", ran.display());
    let askpass = scratch.path().join("askpass.sh");
    std::fs::write(&askpass, format!("#!/bin/sh\n{}\n", touch("askpass"))).unwrap();
    std::os::unix::fs::PermissionsExt::set_mode(
        &mut std::fs::metadata(&askpass).unwrap().permissions(),
        0o755,
    );
    #[allow(clippy::disallowed_methods)] // the test's own setup
    let made = std::process::Command::new("chmod").arg("755").arg(&askpass).status().unwrap();
    assert!(made.success());
    for (key, value) in [
        ("user.name", "Test".to_owned()),
        ("user.email", "test@example.com".to_owned()),
        ("filter.evil.clean", format!("{}; cat", touch("clean"))),
        ("filter.evil.smudge", format!("{}; cat", touch("smudge"))),
        ("filter.evil.process", touch("process")),
        ("filter.evil.required", "true".to_owned()),
        ("merge.evil.driver", format!("{}; false", touch("merge"))),
        ("diff.evil.textconv", format!("{}; cat", touch("textconv"))),
        ("diff.evil.command", touch("diffcommand")),
        ("gpg.program", touch("gpg")),
        ("commit.gpgSign", "true".to_owned()),
        ("core.sshCommand", touch("ssh")),
        ("core.askPass", askpass.display().to_string()),
        ("credential.helper", format!("!{}", touch("credential"))),
        ("remote.local.url", bare.display().to_string()),
        ("remote.local.receivepack", format!("{}; git-receive-pack", touch("receivepack"))),
    ] {
        git(&repo, &["config", key, &value]);
    }
    // The local remote (a repository a session could have made) has hooks of its own.
    for hook in ["pre-receive", "update", "post-receive"] {
        let path = bare.join("hooks").join(hook);
        std::fs::write(&path, format!("#!/bin/sh\n{}\n", touch(hook))).unwrap();
        #[allow(clippy::disallowed_methods)] // the test's own setup
        let made = std::process::Command::new("chmod").arg("755").arg(&path).status().unwrap();
        assert!(made.success());
    }
    let (tree, cwd) = worktree::create(&repo, "evil0001").await.unwrap();
    std::fs::write(cwd.join("a.txt"), "two\n").unwrap();
    std::fs::write(cwd.join("b.txt"), "new\n").unwrap();
    let diff = switchboard_server::diff::worktree(&tree).await.unwrap();
    assert!(!diff.files.is_empty());
    // The repository's own diff (a session without a worktree) runs none of its programs
    // either.
    std::fs::write(repo.join("a.txt"), "dirty\n").unwrap();
    let directory = switchboard_server::diff::directory(&repo).await.unwrap();
    assert_eq!(directory.files.len(), 1, "{directory:?}");
    assert_eq!(directory.files[0].status, switchboard_server::diff::ChangeStatus::Modified);
    worktree::commit(&tree, "the session's change").await.unwrap();
    let pushed = worktree::push(&tree, "local").await;
    assert!(pushed.is_ok(), "{pushed:?}");
    // A change on the base branch too, so that the merge merges (through the driver, if any).
    std::fs::write(repo.join("a.txt"), "three\n").unwrap();
    let plain = [
        "-c",
        "filter.evil.process=",
        "-c",
        "filter.evil.clean=",
        "-c",
        "filter.evil.required=false",
        "-c",
        "commit.gpgSign=false",
    ];
    git(&repo, &[&plain[..], &["commit", "-q", "-am", "base moves"]].concat());
    let merged = worktree::merge(&tree, worktree::MergeMode::Merge).await;
    std::fs::write(cwd.join("c.txt"), "more\n").unwrap();
    worktree::discard(&tree).await.unwrap();
    let ran: Vec<String> = std::fs::read_dir(&ran)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(ran.is_empty(), "the repository's programs ran: {ran:?} (merge: {merged:?})");
    // The repository's merge driver is not run: its file merges as a conflict.
    assert!(merged.is_err(), "{merged:?}");
}

/// A person's own linked worktree (`git worktree add`) is its repository's: a session started
/// there has a diff, though its `.git` is a file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persons_own_linked_worktree_has_a_diff() {
    let sandbox = CliSandbox::new().unwrap();
    let repo = sandbox.workdir().join("main-checkout");
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::write(repo.join("a.txt"), "one\n").unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    git(&repo, &["-c", "user.name=T", "-c", "user.email=t@example.com", "add", "a.txt"]);
    git(
        &repo,
        &["-c", "user.name=T", "-c", "user.email=t@example.com", "commit", "-q", "-m", "one"],
    );
    let linked = sandbox.workdir().join("linked");
    git(&repo, &["worktree", "add", "-q", "-b", "feature", linked.to_str().unwrap()]);
    std::fs::write(linked.join("a.txt"), "two\n").unwrap();
    let diff = switchboard_server::diff::directory(&linked).await.unwrap();
    assert_eq!(diff.branch.as_deref(), Some("feature"));
    assert_eq!(diff.files.len(), 1, "{diff:?}");
    assert_eq!(diff.files[0].path, "a.txt");
    assert!(diff.files[0].patch.as_deref().unwrap().contains("+two"), "{diff:?}");
}
