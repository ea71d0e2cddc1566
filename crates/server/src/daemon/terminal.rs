//! Sessions for an interactive CLI in a person's terminal (`switchboard claude`): its
//! transcript as the session's history, and what the session sends typed back as keys.
//!
//! The session runs over `transport::terminal` in transcript mode, and its `started` event
//! says `transcript`, so that every viewer projects it so.

use super::*;

impl Daemon {
    /// A session for an interactive CLI in a person's terminal (`switchboard claude`): its
    /// history is the CLI's transcript, which the terminal hands in line by line through the
    /// returned [`TranscriptIn`](switchboard_transport::terminal::TranscriptIn), and what the session sends goes back to the terminal as keys. The
    /// session ends when the terminal says the CLI exited, or goes away. The key returned last
    /// is the one the CLI's hooks ask with ([`crate::hooks`]); the terminal forgets it
    /// ([`crate::hook_keys::HookKeys::ended`]) when it goes. The session's policy is the daemon's
    /// default.
    pub async fn attach_terminal(
        self: &Arc<Self>,
        hello: TerminalHello,
    ) -> Result<
        (
            SessionRecord,
            switchboard_transport::terminal::TranscriptIn,
            switchboard_transport::terminal::KeysOut,
            watch::Receiver<switchboard_session::SessionSnapshot>,
            String,
        ),
        DaemonError,
    > {
        self.check_serving()?;
        if hello.cwd.as_os_str().len() > 4096
            || hello.cli_version.as_ref().is_some_and(|version| version.len() > 64)
        {
            return Err(DaemonError::Invalid(
                "cwd is at most 4096 bytes and cli_version at most 64".into(),
            ));
        }
        if !hello.cwd.is_absolute() {
            return Err(DaemonError::Invalid(format!(
                "cwd must be an absolute path, not {:?}",
                hello.cwd
            )));
        }
        if let Some(claude) = &hello.claude_session_id {
            if claude.is_empty()
                || claude.len() > 128
                || !claude.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            {
                return Err(DaemonError::Invalid(
                    "claude_session_id must be a Claude session id (letters, digits, - and _)"
                        .into(),
                ));
            }
        }
        let id = uuid::Uuid::new_v4().to_string();
        let record = SessionRecord {
            claude_session_id: hello.claude_session_id.clone(),
            cwd: hello.cwd.display().to_string(),
            ..self.new_record(
                &id,
                Launch {
                    cwd: hello.cwd.clone(),
                    transport: Some(TransportKind::Terminal),
                    cli_version: hello.cli_version.clone(),
                    ..Launch::default()
                },
            )
        };
        let policy = self.config.default_policy.clone().unwrap_or_default();
        let mut config = SessionConfig::new(hello.cwd.clone(), policy);
        config.transcript = true;
        let (link, lines, keys, gate) = switchboard_transport::terminal::attached();
        let (handle, events) = switchboard_session::spawn_session_on(config, link);
        let snapshot = handle.watch();
        self.store.create_session(&record).await?;
        self.tell_created(&record);
        self.note_started(&id, 0, false, false, true).await?;
        self.run(record.clone(), handle, events, 1, None, Default::default()).await?;
        let hook_key = self.hook_keys.register(&id, gate);
        Ok((record, lines, keys, snapshot, hook_key))
    }
}
