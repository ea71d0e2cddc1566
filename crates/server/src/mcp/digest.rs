//! A session's conversation as a model reads it: each turn's prompt, the calls it made and its
//! answer, folded from the one projection's updates (nothing here reads a protocol line).

use std::collections::VecDeque;

use serde::Serialize;
use switchboard_session::projection::Block;
use switchboard_session::{SessionState, Update};

use crate::view::ViewUpdate;

/// The most turns a digest keeps (the newest).
pub const MAX_TURNS: usize = 50;

/// The most characters of a prompt, a result or a call's summary a digest keeps.
pub const MAX_TEXT_CHARS: usize = 4000;

/// The most calls a turn lists (the first ones; the count says how many there were).
const MAX_CALLS: usize = 40;

/// One turn of the main conversation.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Turn {
    /// What was asked (`None`: a turn the CLI began on its own).
    pub prompt: Option<String>,
    /// The calls it made, one line each (`Bash: cargo test`), and whether each failed.
    pub calls: Vec<Call>,
    /// How many calls it made in all.
    pub call_count: usize,
    /// The answer: the final text, or the error.
    pub result: Option<String>,
    /// Whether it ended (else it is under way).
    pub ended: bool,
    /// Whether it failed (and was not interrupted).
    pub failed: bool,
    /// Whether a person interrupted it.
    pub interrupted: bool,
    /// What it cost (US dollars).
    pub cost_usd: f64,
}

/// One tool call of a turn.
#[derive(Debug, Clone, Serialize)]
pub struct Call {
    /// The call, in a line.
    pub call: String,
    /// Its tool failed or was refused.
    pub failed: bool,
    #[serde(skip)]
    id: String,
}

/// The conversation so far.
#[derive(Debug, Default)]
pub struct Digest {
    turns: VecDeque<Turn>,
    /// Prompts of the main conversation seen.
    pub prompts: u64,
    /// Turns of the main conversation ended.
    pub ended: u64,
    /// The state as the log last said it.
    pub state: Option<SessionState>,
    /// The message whose turn a wait is for (its uuid), if one is named.
    pub awaited: Option<String>,
    /// Whether the awaited message's turn has ended.
    pub awaited_ended: bool,
    /// The prompt whose turn runs (its uuid), and those queued behind it.
    running: Option<String>,
    queued: VecDeque<Option<String>>,
}

impl Digest {
    /// A digest that says when the turn of message `awaited` (its uuid) has ended.
    pub fn awaiting(awaited: Option<String>) -> Digest {
        Digest { awaited, ..Digest::default() }
    }

    /// Folds in one update.
    pub fn apply(&mut self, update: &ViewUpdate) {
        let ViewUpdate::Session(update) = update else { return };
        match update {
            Update::Prompt { text, uuid, queued, .. } => {
                self.prompts += 1;
                if *queued {
                    self.queued.push_back(uuid.clone());
                } else {
                    self.running = uuid.clone();
                }
                self.push(Turn { prompt: Some(clip(text)), ..Turn::default() });
            }
            Update::Dequeued => self.running = self.queued.pop_front().flatten(),
            Update::PromptCancelled { uuid } => {
                self.queued.retain(|queued| queued.as_ref() != Some(uuid));
                if self.awaited.as_ref() == Some(uuid) {
                    self.awaited_ended = true;
                }
            }
            Update::Block {
                parent_tool_use_id: None,
                block: Block::ToolUse { tool_use_id, name, input, .. },
                ..
            } => {
                let turn = self.current();
                if turn.calls.iter().any(|call| call.id == *tool_use_id) {
                    return;
                }
                turn.call_count += 1;
                if turn.calls.len() < MAX_CALLS {
                    let said = crate::notify::summary(name, input);
                    let line = if said.starts_with(name.as_str()) {
                        said
                    } else {
                        format!("{name}: {said}")
                    };
                    turn.calls.push(Call {
                        call: clip(&line),
                        failed: false,
                        id: tool_use_id.clone(),
                    });
                }
            }
            Update::ToolResult {
                tool_use_id, parent_tool_use_id: None, is_error: true, ..
            } => {
                if let Some(call) =
                    self.current().calls.iter_mut().find(|call| call.id == *tool_use_id)
                {
                    call.failed = true;
                }
            }
            Update::TurnEnded {
                parent_tool_use_id: None,
                result,
                failed,
                interrupted,
                cost_usd,
                ..
            } => {
                self.ended += 1;
                if self.running.is_some() && self.running == self.awaited {
                    self.awaited_ended = true;
                }
                self.running = None;
                let turn = self.current();
                turn.result = result.as_deref().map(clip);
                turn.ended = true;
                turn.failed = *failed;
                turn.interrupted = *interrupted;
                turn.cost_usd = *cost_usd;
            }
            Update::State { to, .. } => self.state = Some(*to),
            _ => {}
        }
    }

    /// The turn under way, or the last one (a new one when there is none, or the last ended:
    /// a turn the CLI begins on its own has no prompt).
    fn current(&mut self) -> &mut Turn {
        if self.turns.back().is_none_or(|turn| turn.ended) {
            self.push(Turn::default());
        }
        self.turns.back_mut().expect("pushed above")
    }

    fn push(&mut self, turn: Turn) {
        if self.turns.len() == MAX_TURNS {
            self.turns.pop_front();
        }
        self.turns.push_back(turn);
    }

    /// The last `count` turns, oldest first.
    pub fn last(&self, count: usize) -> Vec<Turn> {
        let skip = self.turns.len().saturating_sub(count);
        self.turns.iter().skip(skip).cloned().collect()
    }

    /// The last answer, if a turn ended.
    pub fn last_result(&self) -> Option<&str> {
        self.turns.iter().rev().find(|turn| turn.ended).and_then(|turn| turn.result.as_deref())
    }

    /// Whether the awaited message's turn ended, or, with none awaited, every prompt seen has
    /// its answer; and none is under way.
    pub fn settled(&self) -> bool {
        let answered = match &self.awaited {
            Some(_) => self.awaited_ended,
            None => self.prompts > 0 && self.ended >= self.prompts,
        };
        answered
            && !matches!(
                self.state,
                Some(SessionState::Working | SessionState::Starting | SessionState::Compacting)
            )
    }
}

/// `text` cut to [`MAX_TEXT_CHARS`], saying so.
fn clip(text: &str) -> String {
    match text.char_indices().nth(MAX_TEXT_CHARS) {
        Some((at, _)) => format!("{}… ({} characters in all)", &text[..at], text.chars().count()),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn turn_ended(result: &str) -> ViewUpdate {
        ViewUpdate::Session(Update::TurnEnded {
            parent_tool_use_id: None,
            subtype: "success".into(),
            interrupted: false,
            failed: false,
            result: Some(result.into()),
            duration_ms: 1,
            input_tokens: 0,
            output_tokens: 0,
            cost_usd: 0.01,
            total_cost_usd: 0.01,
            models: Vec::new(),
            context_tokens: None,
            context_window: None,
        })
    }

    #[test]
    fn turns_keep_their_prompt_calls_and_answer() {
        let mut digest = Digest::default();
        let prompt = |text: &str| {
            ViewUpdate::Session(Update::Prompt {
                text: text.into(),
                images: Vec::new(),
                uuid: None,
                queued: false,
            })
        };
        digest.apply(&prompt("list the files"));
        assert!(!digest.settled(), "a prompt without its answer");
        let call = ViewUpdate::Session(Update::Block {
            message_id: "m".into(),
            index: 0,
            parent_tool_use_id: None,
            uuid: None,
            block: Block::ToolUse {
                tool_use_id: "t1".into(),
                name: "Bash".into(),
                input: json!({"command": "ls"}),
                rebuilt: true,
            },
        });
        digest.apply(&call);
        digest.apply(&call);
        digest.apply(&turn_ended("a.txt"));
        assert!(digest.settled());
        let turns = digest.last(5);
        assert_eq!(turns.len(), 1);
        assert_eq!(turns[0].prompt.as_deref(), Some("list the files"));
        assert_eq!(turns[0].call_count, 1, "a call confirmed by the CLI's line is one call");
        assert!(turns[0].calls[0].call.contains("ls"), "{:?}", turns[0].calls);
        assert_eq!(digest.last_result(), Some("a.txt"));

        digest.apply(&prompt(&"x".repeat(MAX_TEXT_CHARS + 10)));
        let long = digest.last(1).remove(0).prompt.unwrap();
        assert!(long.ends_with(&format!("({} characters in all)", MAX_TEXT_CHARS + 10)));
        for _ in 0..MAX_TURNS + 5 {
            digest.apply(&prompt("again"));
            digest.apply(&turn_ended("ok"));
        }
        assert_eq!(digest.last(usize::MAX).len(), MAX_TURNS, "bounded");
    }
}
