//! Permission modes, rule updates, and the answer to a `can_use_tool` request.

use serde_json::Value;

use crate::wire::{wire_enum, wire_str_enum, wire_struct, Extra};

wire_str_enum! {
    /// How the CLI decides tool calls that no rule settles.
    pub enum PermissionMode {
        /// Ask (send `can_use_tool`).
        #[default]
        Default = "default",
        /// File edits are allowed without asking.
        AcceptEdits = "acceptEdits",
        /// Everything is allowed; the CLI never asks. 2.1.330 refuses it unless launched with
        /// `--allow-dangerously-skip-permissions`.
        BypassPermissions = "bypassPermissions",
        /// Read-only planning.
        Plan = "plan",
        /// Restricted to coordination tools.
        Delegate = "delegate",
        /// Unresolved requests are denied without asking.
        DontAsk = "dontAsk",
        /// 2.1.100 on: a safety classifier on Anthropic's side approves calls the CLI would
        /// ask about, and blocks the rest. Without it (a gateway that does not pass it through)
        /// 2.1.330 refuses those calls. Switchboard's policy rules still hold: a deny rule is
        /// final and an ask rule makes the CLI ask; what no rule decides is the classifier's
        /// (docs/cli-drift.md).
        Auto = "auto",
    }
}

wire_str_enum! {
    /// Where a permission update is stored.
    pub enum PermissionDestination {
        /// `~/.claude/settings.json`.
        UserSettings = "userSettings",
        /// `<cwd>/.claude/settings.json`.
        ProjectSettings = "projectSettings",
        /// `<cwd>/.claude/settings.local.json`.
        LocalSettings = "localSettings",
        /// This process only; gone when it exits.
        #[default]
        Session = "session",
        /// As if given on the command line.
        CliArg = "cliArg",
    }
}

wire_str_enum! {
    /// What a rule does.
    pub enum RuleBehavior {
        /// Run without asking.
        #[default]
        Allow = "allow",
        /// Refuse without asking.
        Deny = "deny",
        /// Ask.
        Ask = "ask",
    }
}

wire_struct! {
    /// A rule in Claude Code's syntax: `Bash` or `Bash(git status:*)` as tool name + content.
    pub struct RuleValue {
        /// The tool (`Bash`, `Edit`, `mcp__server__tool`).
        req tool_name: String = "toolName",
        /// The part in parentheses, if any.
        opt rule_content: String = "ruleContent",
    }
}

wire_enum! {
    /// A change to the permission rules, offered by the CLI in `permission_suggestions` and
    /// sent back in `updatedPermissions`.
    pub enum PermissionUpdate by "type" {
        /// Add rules.
        AddRules(RulesUpdate) = "addRules",
        /// Replace the rules of one behavior.
        ReplaceRules(RulesUpdate) = "replaceRules",
        /// Remove rules.
        RemoveRules(RulesUpdate) = "removeRules",
        /// Switch the permission mode.
        SetMode(SetModeUpdate) = "setMode",
        /// Add working directories.
        AddDirectories(DirectoriesUpdate) = "addDirectories",
        /// Remove working directories.
        RemoveDirectories(DirectoriesUpdate) = "removeDirectories",
    }
}

wire_struct! {
    /// `addRules`, `replaceRules`, `removeRules`.
    pub struct RulesUpdate {
        /// Which of the three.
        req kind: String = "type",
        /// The rules.
        req rules: Vec<RuleValue> = "rules",
        /// What they do.
        req behavior: RuleBehavior = "behavior",
        /// Where they are kept.
        req destination: PermissionDestination = "destination",
    }
}

wire_struct! {
    /// `setMode`.
    pub struct SetModeUpdate tags { "type" = "setMode" } {
        /// The new mode.
        req mode: PermissionMode = "mode",
        /// Where it is kept.
        req destination: PermissionDestination = "destination",
    }
}

wire_struct! {
    /// `addDirectories`, `removeDirectories`.
    pub struct DirectoriesUpdate {
        /// Which of the two.
        req kind: String = "type",
        /// The directories.
        req directories: Vec<String> = "directories",
        /// Where they are kept.
        req destination: PermissionDestination = "destination",
    }
}

impl PermissionUpdate {
    /// The destination of this update, if it has one.
    pub fn destination(&self) -> Option<&PermissionDestination> {
        match self {
            PermissionUpdate::AddRules(update)
            | PermissionUpdate::ReplaceRules(update)
            | PermissionUpdate::RemoveRules(update) => Some(&update.destination),
            PermissionUpdate::SetMode(update) => Some(&update.destination),
            PermissionUpdate::AddDirectories(update)
            | PermissionUpdate::RemoveDirectories(update) => Some(&update.destination),
            PermissionUpdate::Unknown(_) => None,
        }
    }

    /// The same update kept for this session only.
    ///
    /// Echoing the CLI's own suggestions back unchanged writes `localSettings` rules into the
    /// project's `.claude/settings.local.json` (2.1.330, `f2_echo_permission_suggestions`);
    /// a host that grants "for this session" must rewrite the destination first.
    pub fn into_session_scoped(mut self) -> Self {
        match &mut self {
            PermissionUpdate::AddRules(update)
            | PermissionUpdate::ReplaceRules(update)
            | PermissionUpdate::RemoveRules(update) => {
                update.destination = PermissionDestination::Session;
            }
            PermissionUpdate::SetMode(update) => {
                update.destination = PermissionDestination::Session
            }
            PermissionUpdate::AddDirectories(update)
            | PermissionUpdate::RemoveDirectories(update) => {
                update.destination = PermissionDestination::Session;
            }
            PermissionUpdate::Unknown(value) => {
                if let Some(object) = value.as_object_mut() {
                    if object.contains_key("destination") {
                        object.insert("destination".into(), Value::from("session"));
                    }
                }
            }
        }
        self
    }

    /// An `addRules` update that allows `rules` for this session.
    pub fn allow_for_session(rules: Vec<RuleValue>) -> Self {
        PermissionUpdate::AddRules(RulesUpdate {
            kind: "addRules".to_owned(),
            rules,
            behavior: RuleBehavior::Allow,
            destination: PermissionDestination::Session,
            extra: Extra::new(),
        })
    }
}

wire_enum! {
    /// The answer to `can_use_tool`, chosen by `behavior`.
    pub enum PermissionResult by "behavior" {
        /// Run the tool.
        Allow(PermissionAllow) = "allow",
        /// Do not run it; the model sees `message`.
        Deny(PermissionDeny) = "deny",
    }
}

wire_struct! {
    /// `{"behavior":"allow","updatedInput":{...},"updatedPermissions":[...]}`
    pub struct PermissionAllow tags { "behavior" = "allow" } {
        /// The input the tool runs with. **Required by 2.1.37** (an allow without it is treated
        /// as a deny); [`PermissionResult::allow`] always sets it.
        opt updated_input: Value = "updatedInput",
        /// Rule changes to apply.
        opt updated_permissions: Vec<PermissionUpdate> = "updatedPermissions",
        /// The tool call this answers (optional echo).
        opt tool_use_id: String = "toolUseID",
    }
}

wire_struct! {
    /// `{"behavior":"deny","message":...,"interrupt":...}`
    pub struct PermissionDeny tags { "behavior" = "deny" } {
        /// What the model is told.
        req message: String = "message",
        /// Also end the turn.
        opt interrupt: bool = "interrupt",
        /// The tool call this answers (optional echo).
        opt tool_use_id: String = "toolUseID",
    }
}

impl PermissionResult {
    /// Allow, running `input` (pass the original input to run it unchanged).
    pub fn allow(input: Value) -> Self {
        PermissionResult::Allow(PermissionAllow {
            updated_input: Some(input),
            ..PermissionAllow::default()
        })
    }

    /// Allow with rule changes applied.
    pub fn allow_with_updates(input: Value, updates: Vec<PermissionUpdate>) -> Self {
        PermissionResult::Allow(PermissionAllow {
            updated_input: Some(input),
            updated_permissions: if updates.is_empty() { None } else { Some(updates) },
            ..PermissionAllow::default()
        })
    }

    /// Deny with a message the model sees.
    pub fn deny(message: impl Into<String>) -> Self {
        PermissionResult::Deny(PermissionDeny {
            message: message.into(),
            ..PermissionDeny::default()
        })
    }

    /// Deny and end the turn.
    pub fn deny_and_interrupt(message: impl Into<String>) -> Self {
        PermissionResult::Deny(PermissionDeny {
            message: message.into(),
            interrupt: Some(true),
            ..PermissionDeny::default()
        })
    }

    /// Whether this allows the call.
    pub fn is_allow(&self) -> bool {
        matches!(self, PermissionResult::Allow(_))
    }
}

/// Builds the `updatedInput` that answers an `AskUserQuestion` call: the original input plus
/// `answers`, a map from each question's text to the chosen label(s).
///
/// Both CLI versions read the answers from there (`n_ask_user_question`); allowing without
/// `answers` tells the model the user did not answer.
pub fn ask_user_question_input<I, Q, A>(input: &Value, answers: I) -> Value
where
    I: IntoIterator<Item = (Q, A)>,
    Q: Into<String>,
    A: Into<String>,
{
    let mut updated = input.as_object().cloned().unwrap_or_default();
    let answers: serde_json::Map<String, Value> = answers
        .into_iter()
        .map(|(question, answer)| (question.into(), Value::String(answer.into())))
        .collect();
    updated.insert("answers".to_owned(), Value::Object(answers));
    Value::Object(updated)
}
