//! Which Claude Code a command runs when there is none on PATH: the tested version from
//! Switchboard's cache, which `doctor` names as such; with none there, a way to get it, and
//! `switchboard install-claude` (offline here: it finds the version installed already).

use std::path::{Path, PathBuf};

use switchboard_testkit::{cli_cache, real_cli_of};

/// The newest version the tests pin: what Switchboard installs.
fn tested() -> &'static str {
    include_str!("../../../../scripts/cli-versions")
        .lines()
        .map(str::trim)
        .rfind(|line| !line.is_empty() && !line.starts_with('#'))
        .unwrap()
}

/// A PATH with `node` on it and no `claude`.
fn path_without_claude(dir: &Path) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let node = std::env::split_paths(&std::env::var_os("PATH").unwrap())
        .map(|dir| dir.join("node"))
        .find(|candidate| candidate.is_file())
        .expect("node on PATH");
    std::os::unix::fs::symlink(node, bin.join("node")).unwrap();
    bin
}

#[allow(clippy::disallowed_methods)] // runs our own binary
async fn switchboard(
    args: &[&str],
    path: &Path,
    cache: &Path,
    home: &Path,
) -> std::process::Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .args(args)
        .env("PATH", path)
        .env("SWITCHBOARD_CLI_CACHE", cache)
        .env("HOME", home)
        .env_remove("SWITCHBOARD_CLAUDE")
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_claude_on_path_the_tested_version_in_the_cache_runs_and_doctor_says_so() {
    real_cli_of(tested()); // installed, or the test says how to install it
    let dir = tempfile::tempdir().unwrap();
    let path = path_without_claude(dir.path());
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();

    let out = switchboard(
        &["doctor", "--json", "--listen", "127.0.0.1:0", "--data-dir", "data"],
        &path,
        &cli_cache(),
        &home,
    )
    .await;
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let claude = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|check| check["name"] == "claude")
        .cloned()
        .unwrap();
    assert_eq!(claude["status"], "ok", "{report:#}");
    let detail = claude["detail"].as_str().unwrap();
    assert!(detail.contains(&format!("({})", tested())), "{detail}");
    assert!(detail.contains("from Switchboard's cache"), "{detail}");

    let out = switchboard(&["install-claude", "--json"], &path, &cli_cache(), &home).await;
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let said: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(said["version"], tested());
    assert_eq!(said["installed"], false, "it was there already: nothing downloaded");
    assert_eq!(said["path"], real_cli_of(tested()).display().to_string());

    // No CLI anywhere, and nobody at a terminal to ask: the way to get one.
    let empty = dir.path().join("empty-cache");
    let out = switchboard(&["run", "--json", "hello"], &path, &empty, &home).await;
    assert_eq!(out.status.code(), Some(2));
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("no `claude` on PATH") && text.contains("switchboard install-claude"),
        "{text}"
    );
    let out = switchboard(&["doctor", "--listen", "127.0.0.1:0"], &path, &empty, &home).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("switchboard install-claude"));
    let out = switchboard(&["install-claude", "--version", "2.1"], &path, &empty, &home).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a version number"));
}

/// `install-claude` runs npm into a folder of its own and moves it into the cache whole; npm's
/// own words come back when it fails. (An `npm` of the test's stands in for the registry.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn install_claude_installs_through_npm_into_the_cache_or_says_why_not() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let path = path_without_claude(dir.path());
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let npm = path.join("npm");
    std::fs::write(
        &npm,
        "#!/bin/sh\n\
         # install --prefix DIR ... @anthropic-ai/claude-code@VERSION\n\
         prefix=\"$3\"; package=\"$7\"; version=\"${package##*@}\"\n\
         [ \"$version\" = 9.9.9 ] && { echo 'npm ERR! 404 No match found for version 9.9.9' >&2; exit 1; }\n\
         /bin/mkdir -p \"$prefix/node_modules/.bin\"\n\
         printf '#!/bin/sh\\necho \"%s (Claude Code)\"\\n' \"$version\" > \"$prefix/node_modules/.bin/claude\"\n\
         /bin/chmod +x \"$prefix/node_modules/.bin/claude\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&npm, std::fs::Permissions::from_mode(0o755)).unwrap();
    let cache = dir.path().join("cache");

    let out = switchboard(&["install-claude", "--json"], &path, &cache, &home).await;
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let said: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(said["installed"], true);
    let bin = cache.join(tested()).join("node_modules/.bin/claude");
    assert_eq!(said["path"], bin.display().to_string());
    assert!(bin.is_file());
    let leftovers: Vec<_> = std::fs::read_dir(&cache)
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .filter(|name| name.to_string_lossy().starts_with(".install-"))
        .collect();
    assert!(leftovers.is_empty(), "no staging folder left: {leftovers:?}");
    // Then doctor finds it there.
    let out =
        switchboard(&["doctor", "--json", "--listen", "127.0.0.1:0"], &path, &cache, &home).await;
    assert!(String::from_utf8_lossy(&out.stdout).contains("from Switchboard's cache"));

    let out = switchboard(&["install-claude", "--version", "9.9.9"], &path, &cache, &home).await;
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("npm could not install @anthropic-ai/claude-code@9.9.9")
            && text.contains("404"),
        "{text}"
    );
    assert!(!cache.join("9.9.9").exists());
}
