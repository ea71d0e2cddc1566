//! The session core's prompts: a person's message sent (held behind `initialize`, stamped
//! with its origin and a `uuid`), and a stop that drops what is queued behind the turn. An
//! `impl SessionCore` block of its own, as `core/permissions.rs` is.

use super::*;
use crate::origin::Sender;

impl SessionCore {
    /// Sends a user message (queued behind `initialize` if that is still unanswered). One sent
    /// during a turn is the CLI's to place, as its `priority` says: taken into the running turn
    /// between tool calls, a turn of its own after it, or in place of it.
    ///
    /// A prompt without a `uuid` gets one: the CLI runs a `uuid` once, so a prompt sent again
    /// after a reconnect cannot run twice, and its echo says that it arrived.
    pub fn send_user(&mut self, message: UserMessage) -> Vec<Effect> {
        self.send_user_from(message, None)
    }

    /// [`SessionCore::send_user`] from `by` (`token NAME (CHANNEL)`, say, and its origin): a
    /// permission request asked from now on records `by` as who started its turn, once, here;
    /// a rule on origin holds while every open turn has the same one ([`OpenTurns`]).
    ///
    /// [`OpenTurns`]: crate::OpenTurns
    pub fn send_user_from(&mut self, mut message: UserMessage, by: Option<Sender>) -> Vec<Effect> {
        self.changed = true;
        let (who, origin) = match by {
            Some(Sender { who, origin }) => (Some(who), origin),
            None => (None, None),
        };
        self.snapshot.sender = who;
        self.open_turns.sent(origin);
        if message.uuid.is_none() {
            message.uuid = Some(uuid::Uuid::new_v4().to_string());
        }
        // Every prompt carries who it is from: a person's, unless its sender said otherwise (a
        // sender that is not a person stamps its own).
        if message.origin.is_none() {
            message.origin = Some(switchboard_protocol::MessageOrigin::human());
        }
        let mut effects = Vec::new();
        if let Some(uuid) = &message.uuid {
            if self.unechoed.len() >= ANSWERED_MEMORY {
                self.unechoed.shift_remove_index(0);
            }
            self.unechoed.insert(uuid.clone());
        }
        let raw = self.write(Message::from(message), &mut effects);
        self.snapshot.queued_turns += 1;
        if self.refused.is_some() {
            // Never written: the session cannot run it as it was asked to.
            effects.retain(|effect| !matches!(effect, Effect::Send(_)));
            effects.append(&mut self.on_undelivered(raw.as_bytes()));
        } else if !self.awaiting.is_empty() {
            // Hold the line itself; its `Line` event was emitted, the write waits.
            effects.retain(|effect| !matches!(effect, Effect::Send(_)));
            self.held.push(raw);
        } else if matches!(self.state, SessionState::Idle) && !self.transcript {
            // (A terminal's CLI works once its transcript says it took the prompt.)
            self.set_state(SessionState::Working, &mut effects);
        }
        effects
    }

    /// Interrupts the turn and drops every prompt of ours still queued behind it: one
    /// `interrupt` with `cancel_queued` where the CLI lists `interrupt_cancel_queued_v1`;
    /// otherwise a `cancel_async_message` for each prompt not yet finished, sent before the
    /// interrupt so that the CLI cannot start the next one in between (a prompt that already
    /// ran is answered `cancelled: false`). Returns the interrupt's request id.
    pub fn interrupt_all(&mut self) -> (String, Vec<Effect>) {
        let mut effects = Vec::new();
        if !self.interrupt_cancels_queued {
            let waiting: Vec<String> = self
                .unechoed
                .iter()
                .rev()
                .take(usize::try_from(self.snapshot.queued_turns).unwrap_or(usize::MAX))
                .cloned()
                .collect();
            for uuid in waiting.into_iter().rev() {
                let (_, mut sent) = self.control(ControlRequestPayload::CancelAsyncMessage(
                    switchboard_protocol::control::CancelAsyncMessageRequest {
                        message_uuid: uuid,
                        ..Default::default()
                    },
                ));
                effects.append(&mut sent);
            }
        }
        let (request_id, mut sent) = self.control(ControlRequestPayload::Interrupt(
            switchboard_protocol::control::InterruptRequest {
                cancel_queued: self.interrupt_cancels_queued.then_some(true),
                ..Default::default()
            },
        ));
        effects.append(&mut sent);
        (request_id, effects)
    }
}
