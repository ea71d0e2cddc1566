//! The daemon's data directory: what lives there, and how it is made. Only what Switchboard
//! creates is created private (0700 directories, 0600 files); a directory that exists already
//! keeps its mode.
//!
//! - `switchboard.db` (with its journal `switchboard.db.log-*` and lock `switchboard.db.lock`);
//! - `token`: the API token (admin); `ingress-token`: the relay's token for externally launched
//!   CLIs; `tokens.json`: the named tokens' digests; `link-key`: what signs approval links;
//! - `vapid-key`: what signs Web Push requests; `push.json`: the browsers' push subscriptions;
//! - `budget.json`: the daily budgets and today's spend;
//! - `daemon.json`: where the running daemon listens ([`DaemonInfo`]), for client commands;
//! - `cli-runs.json`: the CLIs running now ([`crate::DaemonConfig::runs_file`]).
//!
//! Every file is created 0600, the store's too: the database file is made before SQLite opens
//! it, since SQLite gives its WAL the database file's mode.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// What a running daemon writes so that client commands find it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DaemonInfo {
    /// `http://ADDR`.
    pub url: String,
    /// The daemon's process id.
    pub pid: u32,
}

/// A data directory.
#[derive(Debug, Clone)]
pub struct DataDir {
    path: PathBuf,
}

/// The shortest token accepted (`--token`, `--ingress-token`).
pub const MIN_TOKEN_CHARS: usize = 16;

impl DataDir {
    /// The data directory at `path` (nothing is created yet).
    pub fn new(path: impl Into<PathBuf>) -> DataDir {
        DataDir { path: path.into() }
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Creates it (and missing parents) readable by the owner only; an existing directory is
    /// left as it is (it may be shared, a sticky `/tmp`-like directory, and is not ours).
    pub fn create(&self) -> std::io::Result<()> {
        if self.path.is_dir() {
            return Ok(());
        }
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&self.path)
    }

    /// The database file.
    pub fn database(&self) -> PathBuf {
        self.path.join("switchboard.db")
    }

    /// The key that signs approval links (generated and kept on first use); with `shared`
    /// (a fleet's database), the fleet's, so that a link one node signs is answered through
    /// any (this node's own key becomes it where none is shared yet).
    pub async fn link_key(
        &self,
        shared: Option<Arc<dyn switchboard_store::Documents>>,
    ) -> Result<crate::links::LinkKey, String> {
        let text = self.key("link-key", shared).await?;
        crate::links::LinkKey::from_hex(&text).map_err(|error| format!("the link key: {error}"))
    }

    /// The key that signs Web Push requests (VAPID; generated and kept on first use); with
    /// `shared`, the fleet's, so that a browser subscribed through one node hears from any.
    pub async fn vapid_key(
        &self,
        shared: Option<Arc<dyn switchboard_store::Documents>>,
    ) -> Result<crate::push::VapidKey, String> {
        let text = self.key("vapid-key", shared).await?;
        crate::push::VapidKey::from_hex(&text).map_err(|error| format!("the push key: {error}"))
    }

    async fn key(
        &self,
        name: &'static str,
        shared: Option<Arc<dyn switchboard_store::Documents>>,
    ) -> Result<String, String> {
        let local = self.token(None, "", name)?;
        match shared {
            Some(shared) => crate::shared::key(shared, name, local).await,
            None => Ok(local),
        }
    }

    /// The daily budgets and today's spend.
    pub fn budget_file(&self) -> PathBuf {
        self.path.join("budget.json")
    }

    /// The browsers' push subscriptions.
    pub fn push_file(&self) -> PathBuf {
        self.path.join("push.json")
    }

    /// The named tokens' digests.
    pub fn tokens_file(&self) -> PathBuf {
        self.path.join("tokens.json")
    }

    /// The record of running CLIs.
    pub fn runs_file(&self) -> PathBuf {
        self.path.join("cli-runs.json")
    }

    /// The API token: `given` (`--token`), or the stored one, or a new one (stored).
    pub fn api_token(&self, given: Option<&str>) -> Result<String, String> {
        self.token(given, "--token", "token")
    }

    /// The relay's token for externally launched CLIs: `given` (`--ingress-token`), or the
    /// stored one, or a new one (stored). Never the API token: a CLI's environment is visible
    /// to every tool it runs.
    pub fn ingress_token(&self, given: Option<&str>, api: &str) -> Result<String, String> {
        let token = self.token(given, "--ingress-token", "ingress-token")?;
        if token == api {
            return Err("--ingress-token must differ from the API token: a CLI's environment is visible to its tools".into());
        }
        Ok(token)
    }

    /// The stored API token, for client commands (`None` when there is none).
    pub fn stored_api_token(&self) -> Option<String> {
        let token = std::fs::read_to_string(self.path.join("token")).ok()?;
        let token = token.trim();
        (!token.is_empty()).then(|| token.to_owned())
    }

    /// Says where the daemon listens, for client commands.
    pub fn write_info(&self, info: &DaemonInfo) -> Result<(), String> {
        let path = self.info_file();
        crate::files::write_private(&path, &serde_json::to_string(info).unwrap_or_default())
            .map_err(|error| format!("cannot write {}: {error}", path.display()))
    }

    /// Where the running daemon listens.
    pub fn read_info(&self) -> Result<DaemonInfo, String> {
        let path = self.info_file();
        let text = std::fs::read_to_string(&path).map_err(|_| {
            format!(
                "no running daemon found ({} is missing): start `switchboard serve`, or pass --url",
                path.display()
            )
        })?;
        serde_json::from_str(&text)
            .map_err(|error| format!("{} is unreadable: {error}", path.display()))
    }

    /// The daemon stopped: client commands no longer find it.
    pub fn remove_info(&self) {
        let _ = std::fs::remove_file(self.info_file());
    }

    fn info_file(&self) -> PathBuf {
        self.path.join("daemon.json")
    }

    fn token(&self, given: Option<&str>, flag: &str, file: &str) -> Result<String, String> {
        if let Some(token) = given {
            if token.chars().count() < MIN_TOKEN_CHARS {
                return Err(format!("{flag} must be at least {MIN_TOKEN_CHARS} characters"));
            }
            return Ok(token.to_owned());
        }
        let path = self.path.join(file);
        if let Ok(token) = std::fs::read_to_string(&path) {
            let token = token.trim().to_owned();
            if !token.is_empty() {
                return Ok(token);
            }
        }
        let token = switchboard_transport::random::random_hex(32);
        crate::files::write_private(&path, &token)
            .map_err(|error| format!("cannot write the token to {}: {error}", path.display()))?;
        Ok(token)
    }
}
