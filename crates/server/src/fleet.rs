//! Answers the commands other nodes forward to this one over the bus ([`crate::bus`]): each
//! is carried out here as this node's API would, and its answer or refusal (status, code and
//! sentence, as the API says them) goes back to the node that asked.

use std::sync::Arc;

use futures::StreamExt;

use crate::bus::{Forwarded, Reply};
use crate::daemon::{Daemon, SessionCommand};
use crate::error::ApiError;

/// Forwarded commands carried out at once, at most; more wait for one to finish.
const AT_ONCE: usize = 64;

/// Answers forwarded commands until the bus closes (the daemon's own lifetime).
pub(crate) async fn answer_commands(daemon: Arc<Daemon>) {
    let Some(bus) = daemon.bus().cloned() else { return };
    // Until it takes them: a bus that is down at the start comes back.
    let mut pause = std::time::Duration::from_millis(200);
    let mut commands = loop {
        match bus.commands().await {
            Ok(commands) => break commands,
            Err(error) => {
                tracing::error!(%error, "cannot take commands from other nodes yet; trying again");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(std::time::Duration::from_secs(5));
            }
        }
    };
    let slots = Arc::new(tokio::sync::Semaphore::new(AT_ONCE));
    while let Some(message) = commands.next().await {
        let Ok(slot) = slots.clone().acquire_owned().await else { return };
        let (daemon, bus) = (daemon.clone(), bus.clone());
        tokio::spawn(async move {
            let reply = carry_out(&daemon, &message.payload).await;
            bus.answer(message.reply, &reply).await;
            drop(slot);
        });
    }
}

async fn carry_out(daemon: &Arc<Daemon>, payload: &[u8]) -> Reply {
    let refused = |error: ApiError| Reply::Error {
        status: error.status.as_u16(),
        code: error.code.to_owned(),
        message: error.message,
    };
    let forwarded: Forwarded = match serde_json::from_slice(payload) {
        Ok(forwarded) => forwarded,
        Err(error) => return refused(ApiError::invalid(format!("a forwarded command: {error}"))),
    };
    let command: SessionCommand = match serde_json::from_value(forwarded.command) {
        Ok(command) => command,
        Err(error) => return refused(ApiError::invalid(format!("a forwarded command: {error}"))),
    };
    match daemon.command_here(&forwarded.session, command).await {
        Ok(answer) => Reply::Ok(answer),
        Err(error) => refused(error.into()),
    }
}
