//! Questions and requests put to a session's CLI beyond a prompt
//! ([`switchboard_session::CliControl`]): its usage and context, a queued prompt dropped, a
//! background task stopped, its title, the rules and hooks in force. Asked where the session
//! runs (forwarded to its node in a fleet), refused before they are sent to a CLI too old to
//! answer (409 naming the version), answered with what the CLI says.

use super::*;
use switchboard_session::CliControl;

/// The largest answer passed on (a CLI's listing is its own output).
const MAX_ANSWER_BYTES: usize = 1024 * 1024;

impl Daemon {
    /// Puts `control` to session `id`'s CLI, on whichever node runs it; its answer.
    pub async fn ask_cli(&self, id: &str, control: CliControl) -> Result<Value, DaemonError> {
        control.check().map_err(DaemonError::Invalid)?;
        match self.remote_owner(id).await? {
            Some(node) => self.forward(&node, id, &SessionCommand::Ask { control }).await,
            None => self.ask_cli_here(id, &control).await,
        }
    }

    /// [`Daemon::ask_cli`] of a session that runs here.
    pub(super) async fn ask_cli_here(
        &self,
        id: &str,
        control: &CliControl,
    ) -> Result<Value, DaemonError> {
        control.check().map_err(DaemonError::Invalid)?;
        let handle = self.running(id).await?;
        let version = handle.snapshot().cli_version;
        control.supported_by(version.as_deref()).map_err(DaemonError::CliTooOld)?;
        let success = handle.control(control.payload()).await?;
        let Some(raw) = success.response.as_ref() else { return Ok(Value::Null) };
        if raw.get().len() > MAX_ANSWER_BYTES {
            return Err(DaemonError::Internal(format!(
                "the CLI's answer to {} is larger than {MAX_ANSWER_BYTES} bytes",
                control.subtype()
            )));
        }
        serde_json::from_str(raw.get()).map_err(|error| {
            DaemonError::Internal(format!(
                "the CLI's answer to {} is unreadable: {error}",
                control.subtype()
            ))
        })
    }
}
