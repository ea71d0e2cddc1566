//! The CLIs the daemon runs, recorded in its runs file (pid, start time, run id) as they
//! start and end, so that the next daemon on the data directory ends what a killed one left.

use super::*;

impl Daemon {
    /// Ends the CLIs (and their tools) that a previous daemon on this data directory recorded
    /// as running: it was killed before it could end them.
    pub(super) async fn end_leftovers(&self) {
        let Some(path) = self.config.runs_file.clone() else { return };
        // Only a record this user wrote, that nobody else could have changed: it names
        // processes to kill.
        let trusted = tokio::fs::symlink_metadata(&path).await.is_ok_and(|metadata| {
            use std::os::unix::fs::MetadataExt;
            metadata.is_file()
                && metadata.uid() == nix::unistd::geteuid().as_raw()
                && metadata.mode() & 0o022 == 0
        });
        if !trusted {
            if tokio::fs::symlink_metadata(&path).await.is_ok() {
                tracing::warn!(path = %path.display(), "ignoring a record of running CLIs that is not this user's own private file");
            }
            self.save_runs().await;
            return;
        }
        let Ok(text) = tokio::fs::read_to_string(&path).await else { return };
        let runs: Vec<switchboard_transport::CliRun> = match serde_json::from_str(&text) {
            Ok(runs) => runs,
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "cannot read the record of running CLIs");
                Vec::new()
            }
        };
        if !runs.is_empty() {
            let ended = tokio::task::spawn_blocking(move || {
                runs.iter()
                    .map(|run| {
                        switchboard_transport::procs::end_leftover(
                            run.pid,
                            run.start_time,
                            &run.run_id,
                        )
                    })
                    .sum::<usize>()
            })
            .await
            .unwrap_or(0);
            if ended > 0 {
                tracing::warn!(ended, "ended processes a previous daemon left running");
            }
        }
        self.save_runs().await;
    }

    /// Notes a CLI (or a shell: [`crate::shell`]) that runs now (or, with `running` false,
    /// that it ended) in the runs file, so that a successor ends what it leaves.
    pub(crate) async fn record_run(&self, run: &switchboard_transport::CliRun, running: bool) {
        {
            let mut runs = self.runs.lock();
            if running {
                runs.insert(run.run_id.clone(), run.clone());
            } else {
                runs.remove(&run.run_id);
            }
        }
        self.save_runs().await;
    }

    pub(super) async fn save_runs(&self) {
        let Some(path) = &self.config.runs_file else { return };
        // The snapshot and its write in one turn: an older snapshot never lands after a newer.
        let _turn = self.runs_file_lock.lock().await;
        let runs: Vec<switchboard_transport::CliRun> = self.runs.lock().values().cloned().collect();
        let text = serde_json::to_string(&runs).unwrap_or_else(|_| "[]".into());
        // Written whole, then renamed over the old one: a crash leaves one or the other.
        let temporary = path.with_extension("tmp");
        let written = async {
            let mut file = tokio::fs::OpenOptions::new()
                .create(true)
                .write(true)
                .truncate(true)
                .mode(0o600)
                .open(&temporary)
                .await?;
            tokio::io::AsyncWriteExt::write_all(&mut file, text.as_bytes()).await?;
            drop(file);
            tokio::fs::rename(&temporary, path).await
        };
        if let Err(error) = written.await {
            tracing::warn!(path = %path.display(), %error, "cannot record the running CLIs");
        }
    }
}
