//! The slash commands and skills a CLI offers, as a picker shows them: named, described
//! briefly, and bounded (a CLI's list is its own output).

use serde::Serialize;

/// The most slash commands a snapshot keeps, the longest name, and the longest description
/// (cut at a character boundary): a CLI's list is its own output, so it is bounded.
pub const MAX_COMMANDS: usize = 500;
const MAX_COMMAND_NAME_CHARS: usize = 100;
const MAX_COMMAND_DESCRIPTION_CHARS: usize = 300;

/// A slash command or skill the CLI offers, for a picker.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct SlashCommandInfo {
    /// Its name, without the `/`.
    pub name: String,
    /// What it does (from `initialize`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Its arguments' syntax (from `initialize`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub argument_hint: Option<String>,
    /// A skill (named in `system/init`'s `skills`) rather than a built-in command.
    pub skill: bool,
}

/// A command's name as a picker may offer it: without a leading `/`, no spaces or controls.
pub(super) fn command_name(name: &str) -> Option<String> {
    let name = name.trim_start_matches('/');
    (!name.is_empty()
        && name.chars().count() <= MAX_COMMAND_NAME_CHARS
        && !name.chars().any(|c| c.is_control() || c.is_whitespace()))
    .then(|| name.to_owned())
}

/// The CLI's slash commands (from `initialize`, or `system/commands_changed`) as a picker
/// offers them: named as [`command_name`] takes them, described briefly, at most
/// [`MAX_COMMANDS`].
pub(super) fn command_infos(
    commands: impl IntoIterator<Item = switchboard_protocol::control::SlashCommand>,
) -> Vec<SlashCommandInfo> {
    commands
        .into_iter()
        .filter_map(|command| {
            Some(SlashCommandInfo {
                name: command_name(&command.name)?,
                description: short_text(command.description.as_deref()),
                argument_hint: short_text(command.argument_hint.as_deref()),
                skill: false,
            })
        })
        .take(MAX_COMMANDS)
        .collect()
}

fn short_text(text: Option<&str>) -> Option<String> {
    let text = text?.trim();
    if text.is_empty() || text.chars().any(|c| c.is_control() && c != '\n') {
        return None;
    }
    Some(match text.char_indices().nth(MAX_COMMAND_DESCRIPTION_CHARS) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    })
}
