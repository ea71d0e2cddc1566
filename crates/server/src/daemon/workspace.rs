//! A session's workspace: its worktree (diff, commit, merge, push, discard), the files its
//! tools touched and the Files view's reads, and rewinding its files to before a prompt.
//! What a session touched is the projection's `View::touched_files` (one place), not read
//! from the disk.

use super::*;

/// The most paths a rewind's dry run lists (its count is whole).
pub(super) const MAX_REWIND_PATHS: usize = 1000;

/// What a rewind did, or would do ([`Daemon::rewind`]).
#[derive(Debug, Clone, Serialize)]
pub struct Rewind {
    /// The CLI can put the files back (a rewind: it did).
    pub can_rewind: bool,
    /// Only asked what would change.
    pub dry_run: bool,
    /// A dry run: how many files would change.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub files_changed: Option<u64>,
    /// A dry run: which (absolute paths, at most [`MAX_REWIND_PATHS`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub files: Option<Vec<String>>,
    /// A dry run: lines that would come back.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub insertions: Option<u64>,
    /// A dry run: lines that would go.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deletions: Option<u64>,
    /// Why not, in the CLI's words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl Daemon {
    /// The session's worktree, if it has one that is still there.
    pub(super) async fn worktree(
        &self,
        id: &str,
    ) -> Result<(SessionRecord, crate::worktree::Worktree), DaemonError> {
        let record = self.record(id).await?.ok_or_else(|| DaemonError::NotFound(id.to_owned()))?;
        if self.runs_elsewhere(&record) {
            return Err(self.elsewhere(&record));
        }
        let tree = worktree_of(&record).ok_or_else(|| {
            DaemonError::Worktree(format!(
                "session {id} has no worktree (start one with \"worktree\": true)"
            ))
        })?;
        if !tree.path.exists() {
            return Err(DaemonError::Worktree(format!("session {id}'s worktree is gone")));
        }
        Ok((record, tree))
    }

    /// Commits the session's changes on its branch, with `message` (default: its title).
    pub async fn commit(&self, id: &str, message: Option<&str>) -> Result<Value, DaemonError> {
        let (record, tree) = self.worktree(id).await?;
        let message = match message.map(str::trim).filter(|message| !message.is_empty()) {
            Some(message) => message.to_owned(),
            None => record
                .title
                .clone()
                .unwrap_or_else(|| format!("Session {}", &id[..8.min(id.len())])),
        };
        if message.len() > 64 * 1024 || message.contains('\0') {
            return Err(DaemonError::Invalid("message is at most 64 KiB, without NUL".into()));
        }
        let _one_at_a_time = self.worktree_ops.lock().await;
        let commit =
            crate::worktree::commit(&tree, &message).await.map_err(DaemonError::Worktree)?;
        Ok(json!({"commit": commit, "branch": tree.branch, "message": message}))
    }

    /// Merges the session's branch into the branch it started from.
    pub async fn merge(
        &self,
        id: &str,
        mode: crate::worktree::MergeMode,
    ) -> Result<Result<Value, crate::worktree::MergeRefused>, DaemonError> {
        let (_, tree) = self.worktree(id).await?;
        let _one_at_a_time = self.worktree_ops.lock().await;
        Ok(crate::worktree::merge(&tree, mode).await.map(
            |commit| json!({"commit": commit, "into": tree.base_branch, "branch": tree.branch}),
        ))
    }

    /// Pushes the session's branch to the repository's remote `remote`.
    pub async fn push(&self, id: &str, remote: &str) -> Result<Value, DaemonError> {
        // A remote that is not a name is a bad request, whatever the session's worktree.
        if !crate::text::is_name(remote) {
            return Err(DaemonError::Invalid(format!(
                "remote is a remote's name (1-64 letters, digits, '.', '_', '-'), not {:?}",
                remote.chars().take(65).collect::<String>()
            )));
        }
        let (_, tree) = self.worktree(id).await?;
        let _one_at_a_time = self.worktree_ops.lock().await;
        let pull_request_url =
            crate::worktree::push(&tree, remote).await.map_err(DaemonError::Worktree)?;
        Ok(json!({"remote": remote, "branch": tree.branch, "pull_request_url": pull_request_url}))
    }

    /// The environment a session's CLI is started with: the daemon's `env` (and whether it
    /// starts from an empty one), then the session's own. The web UI's shell gets the same.
    pub(crate) fn cli_environment(
        &self,
        record: &SessionRecord,
    ) -> (std::collections::BTreeMap<String, String>, bool) {
        let node = self.node_cli();
        let mut env = node.env;
        env.extend(record.launch.env.iter().map(|(name, value)| (name.clone(), value.clone())));
        (env, node.clear_env)
    }

    /// The files the session's tools changed, as its live view has them (empty for a
    /// session whose CLI is not running).
    pub fn touched_files(&self, id: &str) -> Vec<String> {
        self.live(id)
            .map(|live| live.projector.lock().view().touched_files.clone())
            .unwrap_or_default()
    }

    /// Reads the session's directory for the Files view ([`crate::browse`]): off the async
    /// threads, within [`BROWSE_TIMEOUT`].
    pub async fn browse<T: Send + 'static>(
        &self,
        id: &str,
        read: impl FnOnce(
                &std::path::Path,
                &[String],
                crate::browse::Refuse<'_>,
            ) -> Result<T, crate::browse::BrowseError>
            + Send
            + 'static,
    ) -> Result<Result<T, crate::browse::BrowseError>, DaemonError> {
        let record = self.record(id).await?.ok_or_else(|| DaemonError::NotFound(id.to_owned()))?;
        if self.runs_elsewhere(&record) {
            return Err(self.elsewhere(&record));
        }
        let root = std::path::PathBuf::from(&record.cwd);
        let touched = self.touched_files(id);
        // What the session's own policy denies to Read is not shown either, nor the daemon's
        // data directory, nor the kernel's own trees.
        let policy = match record.launch.policy.as_deref() {
            Some(text) => load_policy(text).await?,
            None => self.config.default_policy.clone().unwrap_or_default(),
        };
        let private = self.config.data_dir.clone();
        let Ok(permit) = crate::browse::READERS.try_acquire() else {
            return Err(DaemonError::Busy(format!(
                "{} reads of session directories are under way: try again",
                crate::browse::MAX_READERS
            )));
        };
        let reading = tokio::task::spawn_blocking(move || {
            // Held until the read is done, even past the time limit below.
            let _permit = permit;
            let refuse = crate::refusals::Refusals::new(&root, private.as_deref(), policy);
            read(&root, &touched, &|path, id| refuse.refuses(path, id))
        });
        match tokio::time::timeout(BROWSE_TIMEOUT, reading).await {
            Ok(Ok(found)) => Ok(found),
            Ok(Err(_)) | Err(_) => Err(DaemonError::Busy(format!(
                "session {id}'s directory took more than {} s to read",
                BROWSE_TIMEOUT.as_secs()
            ))),
        }
    }

    /// Whether the session's CLI is in a turn (its tools may be changing files).
    pub(super) fn is_working(&self, id: &str) -> bool {
        self.handle(id).ok().map(|handle| handle.snapshot().state).is_some_and(|state| {
            matches!(
                state,
                SessionState::Working | SessionState::AwaitingPermission | SessionState::Compacting
            )
        })
    }

    /// Puts the files the session's tools changed back as they were before the prompt
    /// `message` (its `uuid`), through the CLI's file checkpoints (`rewind_files`); with
    /// `dry_run`, only says what would change. The conversation is not changed: fork it at
    /// the same message for that (`resume_at`).
    pub async fn rewind(
        &self,
        id: &str,
        message: &str,
        dry_run: bool,
    ) -> Result<Rewind, DaemonError> {
        let valid = !message.is_empty()
            && message.len() <= 100
            && message.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
        if !valid {
            return Err(DaemonError::Invalid(
                "message must be a prompt's uuid (letters, digits and -)".to_owned(),
            ));
        }
        let handle = self.running(id).await?;
        if !dry_run && self.is_working(id) {
            return Err(DaemonError::Rewind(format!(
                "session {id} is working: interrupt it first, then rewind"
            )));
        }
        let success = match handle.rewind_files(message, dry_run).await {
            Ok(success) => success,
            Err(switchboard_session::SessionError::Control(failure)) => {
                return Err(DaemonError::Rewind(format!("the CLI cannot rewind: {failure}")))
            }
            Err(error) => return Err(error.into()),
        };
        let answer: switchboard_protocol::control::RewindFilesResponse =
            success.payload().and_then(Result::ok).unwrap_or_default();
        let mut rewind = Rewind {
            can_rewind: answer.can(),
            dry_run,
            files_changed: None,
            files: None,
            insertions: None,
            deletions: None,
            reason: answer.error.as_ref().map(|error| error.chars().take(500).collect()),
        };
        if dry_run {
            rewind.files_changed = answer.count();
            rewind.files = answer
                .files()
                .map(|paths| paths.into_iter().take(MAX_REWIND_PATHS).map(str::to_owned).collect());
            rewind.insertions = answer.insertions;
            rewind.deletions = answer.deletions;
        }
        if !dry_run && !rewind.can_rewind {
            let reason = rewind.reason.as_deref().unwrap_or("it says it cannot");
            return Err(DaemonError::Rewind(format!("the CLI cannot rewind: {reason}")));
        }
        Ok(rewind)
    }

    /// Puts the session's worktree back at its base commit.
    pub async fn discard(&self, id: &str) -> Result<(), DaemonError> {
        let (_, tree) = self.worktree(id).await?;
        // Not under Claude's feet.
        if self.is_working(id) {
            return Err(DaemonError::Worktree(format!(
                "session {id} is working: interrupt it first, then discard"
            )));
        }
        let _one_at_a_time = self.worktree_ops.lock().await;
        crate::worktree::discard(&tree).await.map_err(DaemonError::Worktree)
    }

    /// The session's change: its worktree's against the commit it started from
    /// ([`crate::diff::worktree`]), or, for a session without one, the repository its
    /// directory is in against `HEAD`, under that directory ([`crate::diff::directory`],
    /// read-only; it shows the directory's files as the Files view does, so only to a caller
    /// that may see those: `files_allowed`). Either way, what the Files view never shows (the
    /// daemon's data, what the session's policy denies to `Read`) is listed without its patch.
    pub async fn diff(
        &self,
        id: &str,
        files_allowed: bool,
    ) -> Result<crate::diff::SessionDiff, DaemonError> {
        let record = self.record(id).await?.ok_or_else(|| DaemonError::NotFound(id.to_owned()))?;
        if self.runs_elsewhere(&record) {
            return Err(self.elsewhere(&record));
        }
        let mut diff = match worktree_of(&record) {
            Some(_) => {
                let (_, tree) = self.worktree(id).await?;
                crate::diff::worktree(&tree).await.map_err(DaemonError::Worktree)?
            }
            None => {
                if !files_allowed {
                    return Err(DaemonError::Forbidden(format!(
                        "session {id} has no worktree: its diff is its directory's files, which \
                         this token may not read (operate and above may)"
                    )));
                }
                // A read of the directory, as the Files view's: a few at once.
                let Ok(_permit) = crate::browse::READERS.try_acquire() else {
                    return Err(DaemonError::Busy(format!(
                        "{} reads of session directories are under way: try again",
                        crate::browse::MAX_READERS
                    )));
                };
                crate::diff::directory(std::path::Path::new(&record.cwd))
                    .await
                    .map_err(|refused| DaemonError::Worktree(refused.to_string()))?
            }
        };
        let policy = match record.launch.policy.as_deref() {
            Some(text) => load_policy(text).await?,
            None => self.config.default_policy.clone().unwrap_or_default(),
        };
        let private = self.config.data_dir.clone();
        let root = std::path::PathBuf::from(&record.cwd);
        let checked = tokio::task::spawn_blocking(move || {
            let refuse = crate::refusals::Refusals::new(&root, private.as_deref(), policy);
            crate::diff::withhold(&mut diff, |path, id| refuse.refuses(path, id));
            diff
        });
        match tokio::time::timeout(BROWSE_TIMEOUT, checked).await {
            Ok(Ok(diff)) => Ok(diff),
            Ok(Err(_)) | Err(_) => Err(DaemonError::Busy(format!(
                "session {id}'s change took more than {} s to check",
                BROWSE_TIMEOUT.as_secs()
            ))),
        }
    }
}
