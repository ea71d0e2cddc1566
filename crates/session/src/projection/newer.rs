//! What newer CLIs say beyond the conversation, read once: the account's usage windows
//! (`rate_limit_event`), a discarded conversation (`conversation_reset`), a queued prompt
//! dropped (`command_lifecycle`), and Claude Code's words for a person (`system/informational`,
//! `permission_denied`, `notification`, a refusal retried on a fallback model). An
//! `impl Projector` block of its own, as `core/permissions.rs` is to the core.

use serde_json::Value;
use switchboard_protocol::{Message, Num, SystemMessage};

use super::{notice, Level, NoticeKind, Projector, Update, UsageWindow, MAX_USAGE_WINDOWS};

impl Projector {
    /// A `system` line the conversation's projection leaves to this part.
    pub(super) fn newer_system(&mut self, system: &SystemMessage, emit: &mut impl FnMut(Update)) {
        match system {
            SystemMessage::Informational(info) => {
                let level = match info.level.as_deref() {
                    Some("warning") => Level::Warn,
                    _ => Level::Info,
                };
                let mut text = bounded(&info.content);
                if info.prevent_continuation == Some(true) {
                    text.push_str(" (the turn stops here)");
                }
                emit(notice(level, NoticeKind::Informational, text));
            }
            SystemMessage::PermissionDenied(denied) => {
                let tool = denied.tool_name.as_deref().unwrap_or("a tool");
                let why = denied
                    .decision_reason
                    .as_deref()
                    .or(denied.message.as_deref())
                    .unwrap_or("no reason given");
                emit(notice(
                    Level::Warn,
                    NoticeKind::PermissionDenied,
                    bounded(&format!("Claude Code refused {tool} without asking: {why}")),
                ));
            }
            SystemMessage::Notification(note) => {
                let level = match note.priority.as_deref() {
                    Some("high" | "immediate") => Level::Warn,
                    _ => Level::Info,
                };
                emit(notice(level, NoticeKind::Notification, bounded(&note.text)));
            }
            SystemMessage::ModelRefusalFallback(refusal)
            | SystemMessage::ModelRefusalNoFallback(refusal) => {
                let uuids: Vec<String> = refusal
                    .retracted_message_uuids
                    .iter()
                    .flatten()
                    .take(MAX_RETRACTED)
                    .cloned()
                    .collect();
                if !uuids.is_empty() {
                    emit(Update::Retracted { uuids });
                }
                let model = refusal.original_model.as_deref().unwrap_or("the model");
                let text = match refusal.fallback_model.as_deref() {
                Some(fallback) if refusal.subtype == "model_refusal_fallback" => format!(
                    "{model} declined to answer; Claude Code asked {fallback} instead, and took the refused answer back."
                ),
                _ => format!("{model} declined to answer."),
            };
                emit(notice(Level::Warn, NoticeKind::Refusal, text));
            }
            SystemMessage::BackgroundTasksChanged(changed) => self.background_tasks(changed, emit),
            SystemMessage::TaskNotification(event) => self.task_ended(event, emit),
            _ => {}
        }
    }

    /// A `command_lifecycle`, `conversation_reset`, `rate_limit_event` or `prompt_suggestion`
    /// line.
    pub(super) fn newer_line(&mut self, message: &Message, emit: &mut impl FnMut(Update)) {
        match message {
            Message::CommandLifecycle(lifecycle) if lifecycle.state == "started" => {
                self.waiting_prompts.retain(|uuid| *uuid != lifecycle.command_uuid);
            }
            // Only a prompt that was waiting (a steered turn's `cancelled` names the prompt of
            // the turn it stopped, which ran).
            Message::CommandLifecycle(lifecycle)
                if lifecycle.state == "cancelled"
                    && self.waiting_prompts.contains(&lifecycle.command_uuid) =>
            {
                self.waiting_prompts.retain(|uuid| *uuid != lifecycle.command_uuid);
                // A prompt that will have no turn: the ones after it wait for one turn less.
                if self.view.open_turns > 0 {
                    self.view.open_turns -= 1;
                }
                emit(Update::PromptCancelled { uuid: lifecycle.command_uuid.clone() });
            }
            Message::PromptSuggestion(suggested) => {
                // One line of printable text: it goes into a person's message box.
                let text: String = suggested
                    .suggestion
                    .chars()
                    .map(|c| if c.is_control() { ' ' } else { c })
                    .collect();
                let text = bounded(text.trim());
                if !text.is_empty() {
                    self.view.prompt_suggestion = Some(text.clone());
                    emit(Update::PromptSuggestion { suggestion: text });
                }
            }
            Message::ConversationReset(reset) => {
                // The CLI's running total starts from zero; the session's cost goes on.
                self.cost.on_reset();
                self.view.conversation_resets += 1;
                let what = match reset.trigger.as_deref() {
                    Some("clear") => "cleared (/clear)",
                    Some("plan_mode_exit") => "cleared on leaving plan mode",
                    Some("fresh_session") => "started afresh to carry out the plan",
                    _ => "reset",
                };
                emit(Update::ConversationReset { trigger: reset.trigger.clone() });
                emit(notice(
                Level::Info,
                NoticeKind::ConversationReset,
                format!(
                    "The conversation was {what}: Claude goes on without what came before. The session's cost keeps adding up."
                ),
            ));
            }
            Message::RateLimitEvent(event) => {
                let windows = usage_windows(&event.rate_limit_info);
                let info = &event.rate_limit_info;
                // Told once per status: a CLI that repeats the event on each call (each retry
                // of a 429) does not fill the transcript.
                let before = info.rate_limit_type.as_deref().and_then(|name| {
                    self.view
                        .usage_windows
                        .iter()
                        .find(|known| known.window == bounded_name(name))
                        .map(|known| known.status.clone())
                });
                // In the event's order, ahead of the windows heard of before.
                for window in windows.into_iter().rev() {
                    self.view.usage_windows.retain(|known| known.window != window.window);
                    self.view.usage_windows.insert(0, window);
                }
                self.view.usage_windows.truncate(MAX_USAGE_WINDOWS);
                emit(Update::UsageWindows { windows: self.view.usage_windows.clone() });
                if info.status != "allowed" && before.as_deref() != Some(info.status.as_str()) {
                    let window = bounded_name(info.rate_limit_type.as_deref().unwrap_or("usage"));
                    let (level, text) = if info.status == "rejected" {
                        (Level::Error, format!("The {window} usage limit is reached."))
                    } else {
                        (Level::Warn, format!("The {window} usage limit is near."))
                    };
                    emit(notice(level, NoticeKind::RateLimited, text));
                }
            }
            _ => {}
        }
    }
}

/// The most retracted messages one refusal takes out of a view.
const MAX_RETRACTED: usize = 256;

/// The longest notice made of the CLI's own words.
const MAX_NOTICE_CHARS: usize = 2000;

/// `text` cut to [`MAX_NOTICE_CHARS`] characters: the CLI's words, in a notice.
fn bounded(text: &str) -> String {
    super::cut(text, MAX_NOTICE_CHARS)
}

/// The windows a `rate_limit_event` reports: the one it is about, and (2.1.250 on)
/// `unifiedWindows`, every window with its utilization.
pub fn usage_windows(info: &switchboard_protocol::message::RateLimitInfo) -> Vec<UsageWindow> {
    let mut windows: Vec<UsageWindow> = Vec::new();
    if let Some(unified) = info.extra.get("unifiedWindows").and_then(Value::as_object) {
        for (name, window) in unified.iter().take(MAX_USAGE_WINDOWS) {
            windows.push(UsageWindow {
                window: bounded_name(name),
                status: window["status"]
                    .as_str()
                    .map_or_else(|| "allowed".to_owned(), bounded_name),
                utilization: window["utilization"].as_f64().filter(|u| u.is_finite()),
                resets_at: window["resetsAt"].as_f64().filter(|at| *at >= 0.0).map(|at| at as u64),
            });
        }
    }
    if let Some(name) = &info.rate_limit_type {
        let window = UsageWindow {
            window: bounded_name(name),
            status: bounded_name(&info.status),
            utilization: info.utilization.as_ref().map(Num::as_f64).filter(|u| u.is_finite()),
            resets_at: info.resets_at.as_ref().map(Num::get),
        };
        match windows.iter_mut().find(|known| known.window == window.window) {
            // The window the event is about: the graver of the two statuses (a 429 says
            // rejected while the unified figures may lag; they may be past a warning the
            // event's own status does not say).
            Some(known) => {
                if severity(&window.status) > severity(&known.status) {
                    known.status = window.status;
                }
                known.utilization = window.utilization.or(known.utilization);
                known.resets_at = window.resets_at.or(known.resets_at);
            }
            None => windows.insert(0, window),
        }
    }
    windows
}

/// How grave a window's status is: `rejected` over `allowed_warning` over the rest.
fn severity(status: &str) -> u8 {
    match status {
        "rejected" => 2,
        "allowed_warning" => 1,
        _ => 0,
    }
}

/// A window's or status's name from the CLI: at most 64 characters.
fn bounded_name(name: &str) -> String {
    name.chars().take(64).collect()
}
