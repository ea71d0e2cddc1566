//! Where the CLIs are, and a scratch environment to run one in.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tempfile::TempDir;

/// The pinned real CLI versions the tests run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CliVersion {
    /// 2.1.330: the current native CLI.
    V2_1_330,
    /// 2.1.120: native; the last CLI that accepts a non-Anthropic `--sdk-url`.
    V2_1_120,
    /// 2.1.37: Node CLI; the older `--sdk-url` line (it reconnects differently).
    V2_1_37,
}

impl CliVersion {
    /// The two every stdio test runs, newest first.
    pub const ALL: [CliVersion; 2] = [CliVersion::V2_1_330, CliVersion::V2_1_37];

    /// The two `--sdk-url` lines (they differ in how they reconnect), newest first.
    pub const SDK_URL: [CliVersion; 2] = [CliVersion::V2_1_120, CliVersion::V2_1_37];

    /// `2.1.330`, `2.1.120`, `2.1.37`.
    pub fn as_str(self) -> &'static str {
        match self {
            CliVersion::V2_1_330 => "2.1.330",
            CliVersion::V2_1_120 => "2.1.120",
            CliVersion::V2_1_37 => "2.1.37",
        }
    }
}

/// The cache `scripts/install-clis.sh` installs into.
pub fn cli_cache() -> PathBuf {
    match std::env::var_os("SWITCHBOARD_CLI_CACHE") {
        Some(dir) => PathBuf::from(dir),
        None => {
            let home = std::env::var_os("HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from("/tmp"));
            home.join(".cache/switchboard/claude-code")
        }
    }
}

/// The installed real CLI of `version`.
///
/// # Panics
/// When it is not installed, with the command that installs it: a test that needs the real
/// CLI fails rather than passing without it.
pub fn real_cli(version: CliVersion) -> PathBuf {
    real_cli_of(version.as_str())
}

/// The installed real CLI of the version numbered `version` (`2.1.100`).
///
/// # Panics
/// As [`real_cli`].
pub fn real_cli_of(version: &str) -> PathBuf {
    let path = cli_cache().join(version).join("node_modules/.bin/claude");
    assert!(
        path.exists(),
        "claude {version} is not installed at {}: run scripts/install-clis.sh (scripts/test.sh does)",
        path.display()
    );
    path
}

/// The versions Switchboard is tested against, oldest first: `scripts/cli-versions`, which
/// `scripts/install-clis.sh` installs and `scripts/cli-matrix.sh` runs.
pub fn pinned_versions() -> Vec<&'static str> {
    include_str!("../../../scripts/cli-versions")
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .collect()
}

/// The `fake-claude` binary built next to the test binaries.
pub fn fake_cli() -> PathBuf {
    // Test binaries live in target/<profile>/deps; binaries in target/<profile>.
    let exe = std::env::current_exe().expect("current exe");
    let mut dir = exe.parent().expect("exe dir").to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    let path = dir.join("fake-claude");
    assert!(
        path.exists(),
        "fake-claude is not built at {}: run `cargo build -p switchboard-testkit`",
        path.display()
    );
    path
}

/// The dummy API key the sandbox's CLI gets.
const API_KEY: &str = "sk-ant-test-not-a-real-key";

/// A scratch HOME and working directory, removed on drop, and the environment that points the
/// CLI at a fake API.
pub struct CliSandbox {
    root: TempDir,
}

impl std::fmt::Debug for CliSandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CliSandbox").finish_non_exhaustive()
    }
}

impl CliSandbox {
    /// A new sandbox.
    pub fn new() -> std::io::Result<CliSandbox> {
        let root = tempfile::Builder::new().prefix("switchboard-test-").tempdir()?;
        std::fs::create_dir_all(root.path().join("home"))?;
        std::fs::create_dir_all(root.path().join("work"))?;
        std::fs::create_dir_all(root.path().join("tmp"))?;
        Ok(CliSandbox { root })
    }

    /// Whether a Claude Code transcript in the sandbox's home holds `needle` (a CLI killed
    /// before it wrote its transcript has no conversation to resume).
    pub fn transcripts_contain(&self, needle: &str) -> bool {
        fn walk(dir: &std::path::Path, needle: &str) -> bool {
            let Ok(entries) = std::fs::read_dir(dir) else { return false };
            entries.filter_map(Result::ok).any(|entry| {
                let path = entry.path();
                if path.is_dir() {
                    return walk(&path, needle);
                }
                path.extension().is_some_and(|ext| ext == "jsonl")
                    && std::fs::read_to_string(&path).is_ok_and(|text| text.contains(needle))
            })
        }
        walk(&self.home().join(".claude/projects"), needle)
    }

    /// The scratch HOME.
    pub fn home(&self) -> PathBuf {
        self.root.path().join("home")
    }

    /// The working directory.
    pub fn workdir(&self) -> PathBuf {
        self.root.path().join("work")
    }

    /// A path inside the working directory.
    pub fn file(&self, name: impl AsRef<Path>) -> PathBuf {
        self.workdir().join(name)
    }

    /// A command that runs the CLI `program` by hand (below Switchboard's transport, as a user
    /// would): `claude -p` in stream-json mode, in the working directory, with only `PATH` and
    /// [`CliSandbox::env`] in its environment. Add the mode's own flags.
    #[allow(clippy::disallowed_methods)] // tests launch the CLI themselves, on purpose
    pub fn cli_command(&self, program: &Path, api_base_url: &str) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(program);
        command
            .args([
                "-p",
                "--output-format",
                "stream-json",
                "--input-format",
                "stream-json",
                "--verbose",
            ])
            .current_dir(self.workdir())
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .envs(self.env(api_base_url))
            .kill_on_drop(true);
        command
    }

    /// Prepares the scratch HOME for the interactive CLI (`claude` in a terminal), which asks
    /// a new user first: onboarding done, the working directory trusted, the dummy API key
    /// approved (the CLI keeps a key's last 20 characters).
    pub fn prepare_interactive(&self) -> std::io::Result<()> {
        let key = API_KEY;
        let config = serde_json::json!({
            "hasCompletedOnboarding": true,
            "theme": "dark",
            "projects": {self.workdir().display().to_string(): {"hasTrustDialogAccepted": true}},
            "customApiKeyResponses": {"approved": [&key[key.len() - 20..]], "rejected": []},
        });
        std::fs::write(self.home().join(".claude.json"), config.to_string())
    }

    /// The environment for a CLI talking to `api_base_url`: `ANTHROPIC_BASE_URL`, a dummy key,
    /// non-essential traffic off, the scratch HOME and TMPDIR, two API retries (so error tests
    /// end quickly).
    pub fn env(&self, api_base_url: &str) -> BTreeMap<String, String> {
        let mut env = BTreeMap::new();
        env.insert("ANTHROPIC_BASE_URL".into(), api_base_url.to_owned());
        env.insert("ANTHROPIC_API_KEY".into(), API_KEY.into());
        env.insert("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC".into(), "1".into());
        env.insert("DISABLE_AUTOUPDATER".into(), "1".into());
        env.insert("CLAUDE_CODE_MAX_RETRIES".into(), "2".into());
        env.insert("HOME".into(), self.home().display().to_string());
        env.insert("TMPDIR".into(), self.root.path().join("tmp").display().to_string());
        env
    }

    /// [`CliSandbox::env`] as a claude.ai subscriber's CLI has it: a dummy
    /// `CLAUDE_CODE_OAUTH_TOKEN` in place of the API key. The CLI writes `rate_limit_event`
    /// lines (the usage windows) only for such a login. With non-essential traffic off it
    /// still reaches nothing but `api_base_url` (2.1.332 under strace: one connection, to the
    /// fake API).
    pub fn subscriber_env(&self, api_base_url: &str) -> BTreeMap<String, String> {
        let mut env = self.env(api_base_url);
        env.remove("ANTHROPIC_API_KEY");
        env.insert("CLAUDE_CODE_OAUTH_TOKEN".into(), "sk-ant-oat-test-not-a-real-token".into());
        env
    }
}

/// Live (not zombie) processes whose command line holds `needle`, from `/proc`: for tests that
/// check that nothing a session started is left running.
pub fn processes_running(needle: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let zombie =
                state.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'));
            !zombie && String::from_utf8_lossy(&cmdline).replace('\0', " ").contains(needle)
        })
        .collect()
}

/// A command line no other test's processes have: `sleep N` with `N` made from `base` and
/// this test process's id (each test runs in a process of its own under nextest, and two test
/// binaries running at once must not count each other's sleepers). Dropped, it kills whatever
/// still runs with that command line, so a failed test leaves nothing behind.
#[derive(Debug)]
pub struct Sleeper(String);

impl Sleeper {
    /// A sleeper marker from `base` (a test's own number).
    pub fn new(base: u32) -> Sleeper {
        Sleeper(format!("sleep {}", u64::from(base) * 1_000_000 + u64::from(std::process::id())))
    }

    /// The command line (`sleep N`).
    pub fn command(&self) -> &str {
        &self.0
    }

    /// Live processes running it.
    pub fn running(&self) -> Vec<u32> {
        processes_running(&self.0)
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        for pid in processes_running(&self.0) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap_or(0)),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// Runs git in `dir` as a person sets a repository up (a test's own setup: an author is
/// given, hooks are the repository's); panics with git's words when it fails. Its stdout.
pub fn git(dir: &Path, args: &[&str]) -> String {
    #[allow(clippy::disallowed_methods)] // a test's own setup, not the daemon's
    let output = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=Test", "-c", "user.email=test@example.com"])
        .args(args)
        .output()
        .expect("git runs");
    assert!(output.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Makes `dir` a git repository on `main` whose one commit ("base") holds `files`
/// (path, content).
pub fn git_repository(dir: &Path, files: &[(&str, &str)]) {
    for (path, content) in files {
        std::fs::write(dir.join(path), content).expect("a file of the repository");
    }
    git(dir, &["init", "-q", "-b", "main"]);
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "-m", "base"]);
}
