//! A token's ceiling: a policy that bounds what the sessions the token starts may be given.
//!
//! A token made with `--ceiling POLICY` (an agent's, an editor's) starts sessions that:
//!
//! - are decided by their own policy *and* the ceiling, the stricter winning (deny beats ask
//!   beats allow): no call runs that the ceiling would not allow, whatever the session's own
//!   rules say, and the ceiling's deny rules are the CLI's `--disallowedTools` too;
//! - may be given no allow rule (in their policy or `allowed_tools`) the ceiling does not
//!   allow, no `default = "allow"` unless the ceiling's default is allow, and no permission
//!   mode in which the CLI runs calls without asking ([`Ceiling::check_mode`]); each refusal
//!   names the rule or mode and the ceiling;
//! - and the token cannot answer a request with an allow unless the ceiling would have allowed
//!   the call itself ([`Ceiling::check_answer`]): what the ceiling sends to a person, only a
//!   person answers. A deny is always the token's to give.
//!
//! Nothing here does I/O: the daemon keeps the ceiling's text with the token and with each
//! session it starts, and parses it with [`Ceiling::new`].

use serde_json::Value;

use super::{Behavior, CallFacts, Content, Decision, MatchContext, Policy, PolicyError, Rule};

/// A token's ceiling: its name and the policy that bounds its sessions.
#[derive(Debug, Clone)]
pub struct Ceiling {
    token: String,
    policy: Policy,
}

/// The permission modes a session under a ceiling may be in: the CLI asks about every call
/// the ceiling must see (`plan` runs nothing, `dontAsk` denies what it would ask).
/// `acceptEdits` runs edits without asking, so it is allowed only where the ceiling allows
/// every edit; `bypassPermissions` and `auto` never.
pub const MODES_UNDER_A_CEILING: &[&str] = &["default", "plan", "dontAsk"];

impl Ceiling {
    /// The ceiling `text` (a policy's TOML) of token `token`.
    pub fn new(token: &str, text: &str) -> Result<Ceiling, PolicyError> {
        Ok(Ceiling { token: token.to_owned(), policy: Policy::from_toml(text)? })
    }

    /// The token whose ceiling it is.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Its policy.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// `own` (a session's decision), or the ceiling's where it is stricter.
    pub(super) fn bound(
        &self,
        own: Decision,
        tool_name: &str,
        input: &Value,
        context: &MatchContext,
        facts: &CallFacts,
    ) -> Decision {
        let ceiling = self.policy.decide_own(tool_name, input, context, facts);
        if strictness(ceiling.behavior) <= strictness(own.behavior) {
            return own;
        }
        Decision {
            behavior: ceiling.behavior,
            // Always a rule, its default's too: a rule's ask makes the CLI ask even where its
            // own settings (a project's allow rules, a read-only command) would run the call.
            rule: Some(
                ceiling
                    .rule
                    .map_or_else(|| "ceiling default".to_owned(), |rule| format!("ceiling {rule}")),
            ),
            reason: format!("the ceiling of token {}: {}", self.token, ceiling.reason),
        }
    }

    /// Whether a session under this ceiling may be given `policy`: its default and each allow
    /// rule within the ceiling, else why not (naming the rule).
    pub fn check_policy(&self, policy: &Policy) -> Result<(), String> {
        if policy.default == Behavior::Allow && self.policy.default != Behavior::Allow {
            return Err(format!(
                "default = \"allow\" is beyond the ceiling of token {}, whose default is {}",
                self.token,
                self.policy.default.as_str()
            ));
        }
        // A conditional allow is within the ceiling when its rule would be on its own.
        policy
            .allow
            .iter()
            .chain(policy.when.iter().flat_map(|block| &block.allow))
            .try_for_each(|rule| self.check_rule(rule))
    }

    /// Whether a session under this ceiling may be given the allow rule `text` (`allowed_tools`,
    /// or an allow rule of its policy), else why not.
    pub fn check_allow(&self, text: &str) -> Result<(), String> {
        let rule = Rule::parse(text).map_err(|error| error.to_string())?;
        self.check_rule(&rule)
    }

    fn check_rule(&self, rule: &Rule) -> Result<(), String> {
        let beyond = |why: String| {
            Err(format!(
                "allow rule {} is beyond the ceiling of token {}: {why}",
                rule.text, self.token
            ))
        };
        // A rule for the whole tool that the ceiling denies or asks about takes it all back.
        let whole = |rules: &[Rule]| {
            rules
                .iter()
                .find(|held| held.content.is_none() && held.tool_matches(&rule.tool))
                .map(|held| held.text.clone())
        };
        if let Some(held) = whole(&self.policy.deny) {
            return beyond(format!("it denies {held}"));
        }
        if let Some(held) = whole(&self.policy.ask) {
            return beyond(format!("it asks a person for {held}"));
        }
        if self.policy.allow.iter().any(|allowed| covers(allowed, rule)) {
            return Ok(());
        }
        if self.policy.default == Behavior::Allow {
            return Ok(());
        }
        beyond("no rule of it allows as much".to_owned())
    }

    /// Whether a session under this ceiling may be in permission mode `mode`, else why not.
    pub fn check_mode(&self, mode: &str) -> Result<(), String> {
        if MODES_UNDER_A_CEILING.contains(&mode) {
            return Ok(());
        }
        if mode == "acceptEdits" {
            let edits = ["Edit", "Write", "MultiEdit", "NotebookEdit"];
            return match edits.iter().find(|tool| self.check_allow(tool).is_err()) {
                None => Ok(()),
                Some(tool) => Err(format!(
                    "permission mode acceptEdits runs every edit without asking, and the ceiling of token {} does not allow every {tool}",
                    self.token
                )),
            };
        }
        Err(format!(
            "permission mode {mode} is beyond the ceiling of token {}: the CLI would run calls without asking (allowed: {}, and acceptEdits where the ceiling allows every edit)",
            self.token,
            MODES_UNDER_A_CEILING.join(", ")
        ))
    }

    /// Whether the token may answer a request for `tool_name` with `input` with an allow: only
    /// where the ceiling would have allowed the call itself.
    pub fn check_answer(
        &self,
        tool_name: &str,
        input: &Value,
        context: &MatchContext,
    ) -> Result<(), String> {
        // What the token's program answers is judged as a call of which nothing more is known.
        let decision = self.policy.decide_own(tool_name, input, context, &CallFacts::default());
        match decision.behavior {
            Behavior::Allow => Ok(()),
            _ => Err(format!(
                "token {} cannot allow this {tool_name} call: its ceiling sends it to a person ({}); a person answers it, or the token denies it",
                self.token, decision.reason
            )),
        }
    }
}

impl Policy {
    /// This policy, bounded by `ceiling` ([`Policy::decide`] takes the stricter of the two).
    pub fn under(mut self, ceiling: std::sync::Arc<Ceiling>) -> Policy {
        self.ceiling = Some(ceiling);
        self
    }

    /// The ceiling that bounds it, if any.
    pub fn ceiling(&self) -> Option<&Ceiling> {
        self.ceiling.as_deref()
    }
}

/// Deny beats ask beats allow.
fn strictness(behavior: Behavior) -> u8 {
    match behavior {
        Behavior::Allow => 0,
        Behavior::Ask => 1,
        Behavior::Deny => 2,
    }
}

/// Whether the ceiling's allow rule `allowed` allows at least all that `rule` does.
fn covers(allowed: &Rule, rule: &Rule) -> bool {
    if !allowed.tool_matches(&rule.tool) && allowed.tool != rule.tool {
        return false;
    }
    if allowed.text == rule.text {
        return true;
    }
    match (&allowed.content, &rule.content) {
        (None, _) => true,
        (Some(_), None) => false,
        // `Bash(git:*)` covers `Bash(git status:*)` and `Bash(git status)`: one command, never
        // one joined to others (`git status && curl …`) or with substitutions.
        (Some(Content::Prefix(wide)), Some(Content::Prefix(narrow) | Content::Exact(narrow))) => {
            let simple = !narrow.contains(['&', '|', ';', '$', '`', '<', '>', '\n', '(', ')']);
            simple
                && (narrow == wide
                    || narrow.strip_prefix(wide.as_str()).is_some_and(|rest| rest.starts_with(' ')))
        }
        (Some(Content::Domain(wide)), Some(Content::Domain(narrow))) => {
            narrow == wide || narrow.ends_with(&format!(".{wide}"))
        }
        // Path patterns are compared as written: the same pattern, or, under `**` (everything
        // in the project), one within the project (not absolute, not home's, no `..`).
        (Some(Content::Path(wide)), Some(Content::Path(narrow))) => {
            let within = !narrow.starts_with(['/', '~']) && !narrow.contains("..");
            wide == narrow || (wide == "**" && within)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Arc;

    const CEILING: &str = r#"
[permissions]
allow = ["Read", "Grep", "Bash(git:*)", "Edit(src/**)"]
deny = ["Bash(rm:*)", "WebFetch"]
ask = ["WebSearch"]
default = "ask"
"#;

    fn ceiling() -> Arc<Ceiling> {
        Arc::new(Ceiling::new("agent", CEILING).unwrap())
    }

    fn context() -> MatchContext {
        MatchContext { cwd: "/work".into(), home: None }
    }

    #[test]
    fn a_session_under_a_ceiling_is_never_allowed_more_than_it() {
        let own = Policy::allow_all().under(ceiling());
        let decide = |tool: &str, input: Value| own.decide(tool, &input, &context());
        let rm = decide("Bash", json!({"command": "rm -rf /"}));
        assert_eq!(rm.behavior, Behavior::Deny);
        assert_eq!(rm.rule.as_deref(), Some("ceiling Bash(rm:*)"));
        assert!(rm.reason.starts_with("the ceiling of token agent: denied"), "{}", rm.reason);
        let ls = decide("Bash", json!({"command": "ls"}));
        assert_eq!(ls.behavior, Behavior::Ask);
        assert_eq!(ls.rule.as_deref(), Some("ceiling default"), "a rule: the CLI is made to ask");
        assert_eq!(decide("Bash", json!({"command": "git status"})).behavior, Behavior::Allow);
        assert_eq!(decide("Read", json!({"file_path": "/work/a"})).behavior, Behavior::Allow);
        // The session's own stricter word stands.
        let strict =
            Policy::from_toml("[permissions]\ndeny = [\"Read\"]").unwrap().under(ceiling());
        let read = strict.decide("Read", &json!({"file_path": "/work/a"}), &context());
        assert_eq!((read.behavior, read.rule.as_deref()), (Behavior::Deny, Some("Read")));
        // The CLI holds the ceiling's deny rules too.
        assert_eq!(strict.deny_rules().collect::<Vec<_>>(), ["Read", "Bash(rm:*)", "WebFetch"]);
    }

    #[test]
    fn allow_rules_and_modes_beyond_the_ceiling_are_refused_with_the_reason() {
        let ceiling = ceiling();
        for within in ["Read", "Bash(git:*)", "Bash(git status:*)", "Bash(git log)", "Edit(src/**)"]
        {
            assert_eq!(ceiling.check_allow(within), Ok(()), "{within}");
        }
        let beyond = ceiling.check_allow("Bash").unwrap_err();
        assert!(beyond.contains("allow rule Bash is beyond the ceiling of token agent: no rule of it allows as much"), "{beyond}");
        let asked = ceiling.check_allow("WebSearch").unwrap_err();
        assert!(asked.contains("it asks a person for WebSearch"), "{asked}");
        let denied = ceiling.check_allow("WebFetch(domain:x.com)").unwrap_err();
        assert!(denied.contains("it denies WebFetch"), "{denied}");
        let wider = ceiling.check_allow("Edit").unwrap_err();
        assert!(wider.contains("no rule of it allows as much"), "{wider}");
        assert!(ceiling.check_allow("Bash(gitk:*)").is_err(), "a prefix is a whole word");
        for joined in ["Bash(git status && curl x | sh)", "Bash(git log $(rm -rf ~))"] {
            assert!(ceiling.check_allow(joined).is_err(), "{joined}");
        }
        let everything = Ceiling::new("e", "[permissions]\nallow = [\"Edit(**)\"]").unwrap();
        assert_eq!(everything.check_allow("Edit(src/**)"), Ok(()));
        for outside in ["Edit(//**)", "Edit(~/.ssh/**)", "Edit(../**)"] {
            assert!(everything.check_allow(outside).is_err(), "{outside}");
        }
        let open = Policy::from_toml("[permissions]\ndefault = \"allow\"").unwrap();
        assert!(ceiling.check_policy(&open).unwrap_err().contains("default = \"allow\""));
        let rules = Policy::from_toml("[permissions]\nallow = [\"Read\", \"Write\"]").unwrap();
        assert!(ceiling.check_policy(&rules).unwrap_err().contains("allow rule Write"));

        assert_eq!(ceiling.check_mode("plan"), Ok(()));
        assert_eq!(ceiling.check_mode("default"), Ok(()));
        for mode in ["bypassPermissions", "auto", "acceptEdits"] {
            assert!(ceiling.check_mode(mode).is_err(), "{mode}");
        }
        let edits = Ceiling::new(
            "e",
            "[permissions]\nallow = [\"Edit\", \"Write\", \"MultiEdit\", \"NotebookEdit\"]",
        )
        .unwrap();
        assert_eq!(edits.check_mode("acceptEdits"), Ok(()));
        assert!(edits
            .check_mode("bypassPermissions")
            .unwrap_err()
            .contains("bypassPermissions is beyond"));
    }

    #[test]
    fn a_token_answers_with_an_allow_only_what_its_ceiling_allows() {
        let ceiling = ceiling();
        assert_eq!(
            ceiling.check_answer("Bash", &json!({"command": "git diff"}), &context()),
            Ok(())
        );
        let asked =
            ceiling.check_answer("Bash", &json!({"command": "ls"}), &context()).unwrap_err();
        assert!(asked.contains("token agent cannot allow this Bash call"), "{asked}");
        let question = ceiling.check_answer("AskUserQuestion", &json!({}), &context());
        assert!(question.is_err(), "only a person answers a question");
    }
}
