//! Rules that hold only for some calls: by who started the turn (`origin`) and, for an MCP
//! tool, where its server was configured (`mcp_source`).
//!
//! ```toml
//! [[permissions.when]]
//! origin = ["agent", "trigger"]      # a turn an agent or a trigger started
//! ask = ["Bash", "Edit"]             # never runs Bash or an edit without a person
//!
//! [[permissions.when]]
//! mcp_source = ["project"]           # an MCP server the repository configured
//! deny = ["mcp__*"]
//!
//! [[permissions.when]]
//! mcp_source = ["user", "sdk"]       # the person's own, and the session's own
//! allow = ["mcp__*"]
//! ```
//!
//! A block names one or both conditions (both must hold) and any of `allow`, `deny`, `ask`.
//! Its rules join the policy's own where the conditions hold, and deny still beats ask beats
//! allow. Where a condition cannot be decided (who started the turn is not known: a turn the
//! CLI began on its own, prompts of different origins in flight; or an MCP server's source that
//! an older CLI does not report), the block's deny and ask rules ask a person and its allow
//! rules never apply: what is unknown fails closed. `mcp_source` never holds for a tool that
//! is not an MCP server's.

use serde::Deserialize;

use super::{PolicyError, Rule};
use crate::origin::TurnOrigin;

/// The most MCP servers whose sources a session keeps.
pub const MAX_MCP_SERVERS: usize = 256;

/// The most `[[permissions.when]]` blocks a policy has.
pub const MAX_WHEN_BLOCKS: usize = 64;

/// What a rule may know of a call beyond its tool and input: who started its turn, and where
/// its MCP server was configured. `None` is unknown.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallFacts {
    /// Who started the turn.
    pub origin: Option<TurnOrigin>,
    /// An MCP tool's server's source as the CLI reports it (`user`, `project`, `plugin`,
    /// `dynamic`, `sdk`, ...).
    pub mcp_source: Option<String>,
}

/// One `[[permissions.when]]` block as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct WhenSection {
    #[serde(default)]
    origin: Option<Vec<String>>,
    #[serde(default)]
    mcp_source: Option<Vec<String>>,
    #[serde(default)]
    allow: Vec<String>,
    #[serde(default)]
    deny: Vec<String>,
    #[serde(default)]
    ask: Vec<String>,
}

/// A parsed block.
#[derive(Debug, Clone)]
pub(super) struct When {
    origins: Option<Vec<OriginPattern>>,
    mcp_sources: Option<Vec<String>>,
    pub(super) allow: Vec<Rule>,
    pub(super) deny: Vec<Rule>,
    pub(super) ask: Vec<Rule>,
    /// The conditions in words (`origin agent or trigger`), for reasons and rule names.
    pub(super) condition: String,
}

/// An origin a block names: one, or `api:*` (any token's program).
#[derive(Debug, Clone, PartialEq, Eq)]
enum OriginPattern {
    Exactly(TurnOrigin),
    AnyApi,
}

/// Whether a block's conditions hold for a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Holds {
    Yes,
    No,
    /// A condition names what is not known of this call.
    Unknown,
}

impl When {
    pub(super) fn parse(section: WhenSection) -> Result<When, PolicyError> {
        let invalid = |reason: String| PolicyError::When(reason);
        if section.origin.is_none() && section.mcp_source.is_none() {
            return Err(invalid(
                "a [[permissions.when]] block names origin, mcp_source or both".into(),
            ));
        }
        if section.allow.is_empty() && section.deny.is_empty() && section.ask.is_empty() {
            return Err(invalid(
                "a [[permissions.when]] block has allow, deny or ask rules".into(),
            ));
        }
        let origins = match section.origin {
            None => None,
            Some(names) if names.is_empty() => {
                return Err(invalid(
                    "origin = [] names no origin; name one, or leave it out".into(),
                ))
            }
            Some(names) => Some(
                names
                    .iter()
                    .map(|name| match name.as_str() {
                        "api:*" => Ok(OriginPattern::AnyApi),
                        name => TurnOrigin::parse(name).map(OriginPattern::Exactly),
                    })
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|reason| invalid(format!("origin: {reason} (or api:*)")))?,
            ),
        };
        let mcp_sources = match section.mcp_source {
            None => None,
            Some(names) if names.is_empty() => {
                return Err(invalid(
                    "mcp_source = [] names no source; name one, or leave it out".into(),
                ))
            }
            Some(names) => {
                if let Some(bad) = names.iter().find(|name| !is_source_name(name)) {
                    return Err(invalid(format!(
                        "mcp_source: {:?} is not a source (user, project, local, plugin, dynamic, sdk, managed, ...)",
                        bad.chars().take(40).collect::<String>()
                    )));
                }
                Some(names)
            }
        };
        let mut said = Vec::new();
        if let Some(names) = &origins {
            let names: Vec<String> = names
                .iter()
                .map(|pattern| match pattern {
                    OriginPattern::Exactly(origin) => origin.to_string(),
                    OriginPattern::AnyApi => "api:*".to_owned(),
                })
                .collect();
            said.push(format!("origin {}", names.join(" or ")));
        }
        if let Some(names) = &mcp_sources {
            said.push(format!("mcp_source {}", names.join(" or ")));
        }
        let parse = |rules: &[String]| {
            rules.iter().map(|rule| Rule::parse(rule)).collect::<Result<Vec<_>, _>>()
        };
        Ok(When {
            origins,
            mcp_sources,
            allow: parse(&section.allow)?,
            deny: parse(&section.deny)?,
            ask: parse(&section.ask)?,
            condition: said.join(", "),
        })
    }

    /// Whether its conditions hold for a call of `tool_name` with `facts`.
    pub(super) fn holds(&self, tool_name: &str, facts: &CallFacts) -> Holds {
        let mut holds = Holds::Yes;
        if let Some(origins) = &self.origins {
            match &facts.origin {
                None => holds = Holds::Unknown,
                Some(origin) => {
                    let named = origins.iter().any(|pattern| match pattern {
                        OriginPattern::Exactly(named) => named == origin,
                        OriginPattern::AnyApi => matches!(origin, TurnOrigin::Api { .. }),
                    });
                    if !named {
                        return Holds::No;
                    }
                }
            }
        }
        if let Some(sources) = &self.mcp_sources {
            if !tool_name.starts_with("mcp__") {
                return Holds::No;
            }
            match &facts.mcp_source {
                None => holds = Holds::Unknown,
                Some(source) if !sources.contains(source) => return Holds::No,
                Some(_) => {}
            }
        }
        holds
    }

    /// A rule of this block, named with its conditions: `Bash (when origin agent)`.
    pub(super) fn name(&self, rule: &Rule) -> String {
        format!("{} (when {})", rule.text, self.condition)
    }
}

/// A source's name: 1-32 of lowercase letters, digits, `_` or `-` (the CLI's are words).
fn is_source_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 32
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_-".contains(&b))
}

/// A server's name as its tools' names carry it (`mcp__my_server__tool` for `my server`):
/// Claude Code puts `_` for each character but letters, digits, `_` and `-`.
pub fn server_in_tool_names(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect()
}

/// Where the server an MCP tool belongs to was configured, among `servers` (each server's
/// name as its tools carry it, and its source): every server whose tools' names could start
/// so (`mcp__a__b__c` could be server `a`'s tool `b__c` or server `a__b`'s tool `c`) must agree,
/// or the source is unknown.
pub fn source_of_tool<'a>(
    tool_name: &str,
    servers: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Option<String> {
    let rest = tool_name.strip_prefix("mcp__")?;
    let mut found: Option<&str> = None;
    for (name, source) in servers {
        let carries = rest.strip_prefix(name).is_some_and(|tool| tool.starts_with("__"));
        if !carries {
            continue;
        }
        match found {
            Some(known) if known != source => return None,
            _ => found = Some(source),
        }
    }
    found.map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::policy::{Behavior, MatchContext, Policy};

    fn context() -> MatchContext {
        MatchContext { cwd: "/work/project".into(), home: None }
    }

    fn facts(origin: Option<&str>, source: Option<&str>) -> CallFacts {
        CallFacts {
            origin: origin.map(|text| TurnOrigin::parse(text).unwrap()),
            mcp_source: source.map(str::to_owned),
        }
    }

    const POLICY: &str = r#"
        [permissions]
        allow = ["Bash(git status:*)", "Bash(echo:*)", "Read"]

        [[permissions.when]]
        origin = ["agent", "trigger"]
        ask = ["Bash"]

        [[permissions.when]]
        origin = ["api:*"]
        deny = ["Bash(git push:*)"]

        [[permissions.when]]
        mcp_source = ["project"]
        deny = ["mcp__*"]

        [[permissions.when]]
        mcp_source = ["user", "dynamic"]
        allow = ["mcp__*"]
    "#;

    #[test]
    fn an_origin_rule_holds_for_its_origins_and_asks_when_the_origin_is_unknown() {
        let policy = Policy::from_toml(POLICY).unwrap();
        let bash = |origin: Option<&str>| {
            let command = json!({"command": "echo hi"});
            policy.decide_call("Bash", &command, &context(), &facts(origin, None))
        };
        assert_eq!(bash(Some("person")).behavior, Behavior::Allow);
        assert_eq!(bash(Some("api:ci")).behavior, Behavior::Allow);
        for origin in ["agent", "trigger"] {
            let asked = bash(Some(origin));
            assert_eq!(asked.behavior, Behavior::Ask, "{origin}");
            assert_eq!(asked.rule.as_deref(), Some("Bash (when origin agent or trigger)"));
        }
        let unknown = bash(None);
        assert_eq!(unknown.behavior, Behavior::Ask, "an unknown origin never skips the ask");
        assert!(unknown.reason.contains("who started the turn"), "{}", unknown.reason);
        // `api:*`: any token's program, and only a program.
        let push = |origin| {
            let command = json!({"command": "git push origin main"});
            policy.decide_call("Bash", &command, &context(), &facts(origin, None)).behavior
        };
        assert_eq!(push(Some("api:ci")), Behavior::Deny);
        assert_eq!(push(Some("person")), Behavior::Ask, "no rule allows it: the default asks");
        assert_eq!(push(None), Behavior::Ask, "a deny that may apply asks, unknown");
        // A tool no conditional rule names is not touched by what is unknown.
        let read =
            policy.decide_call("Read", &json!({"file_path": "a"}), &context(), &facts(None, None));
        assert_eq!(read.behavior, Behavior::Allow);
    }

    #[test]
    fn an_mcp_tool_is_judged_by_where_its_server_was_configured() {
        let policy = Policy::from_toml(POLICY).unwrap();
        let call = |source: Option<&str>| {
            policy.decide_call(
                "mcp__probe__echo",
                &json!({"text": "x"}),
                &context(),
                &facts(Some("person"), source),
            )
        };
        assert_eq!(call(Some("project")).behavior, Behavior::Deny);
        assert_eq!(call(Some("project")).rule.as_deref(), Some("mcp__* (when mcp_source project)"));
        assert_eq!(call(Some("user")).behavior, Behavior::Allow);
        assert_eq!(call(Some("dynamic")).behavior, Behavior::Allow);
        assert_eq!(call(Some("plugin")).behavior, Behavior::Ask, "no rule: the default");
        let unknown = call(None);
        assert_eq!(unknown.behavior, Behavior::Ask, "an unknown source is never allowed");
        assert!(unknown.reason.contains("MCP server was configured"), "{}", unknown.reason);
        // `mcp_source` never holds for a built-in tool.
        let bash = json!({"command": "echo hi"});
        let built_in = policy.decide_call("Bash", &bash, &context(), &facts(Some("person"), None));
        assert_eq!(built_in.behavior, Behavior::Allow);
    }

    #[test]
    fn both_conditions_must_hold_and_a_conditional_allow_covers_only_its_parts() {
        let policy = Policy::from_toml(
            r#"
            [[permissions.when]]
            origin = ["person"]
            mcp_source = ["user"]
            allow = ["mcp__*"]

            [[permissions.when]]
            origin = ["schedule"]
            allow = ["Bash(cargo test:*)"]
            "#,
        )
        .unwrap();
        let mcp = |origin, source| {
            let facts = facts(Some(origin), Some(source));
            policy.decide_call("mcp__gh__list", &json!({}), &context(), &facts).behavior
        };
        assert_eq!(mcp("person", "user"), Behavior::Allow);
        assert_eq!(mcp("agent", "user"), Behavior::Ask);
        assert_eq!(mcp("person", "project"), Behavior::Ask);
        let bash = |command: &str, origin| {
            let facts = facts(Some(origin), None);
            policy.decide_call("Bash", &json!({"command": command}), &context(), &facts).behavior
        };
        assert_eq!(bash("cargo test -p x", "schedule"), Behavior::Allow);
        assert_eq!(bash("cargo test && curl x", "schedule"), Behavior::Ask);
        assert_eq!(bash("cargo test", "person"), Behavior::Ask);
    }

    #[test]
    fn a_block_that_cannot_be_used_is_refused_naming_why() {
        let cases = [
            ("[[permissions.when]]\nask = [\"Bash\"]", "names origin, mcp_source or both"),
            ("[[permissions.when]]\norigin = [\"agent\"]", "has allow, deny or ask rules"),
            ("[[permissions.when]]\norigin = []\nask = [\"Bash\"]", "names no origin"),
            ("[[permissions.when]]\norigin = [\"robot\"]\nask = [\"Bash\"]", "is not an origin"),
            (
                "[[permissions.when]]\nmcp_source = [\"Pro ject\"]\ndeny = [\"mcp__*\"]",
                "is not a source",
            ),
            ("[[permissions.when]]\norigin = [\"agent\"]\nask = [\"Bash(\"]", "must end with ')'"),
            ("[[permissions.when]]\norigin = [\"agent\"]\nmaybe = [\"Bash\"]", "unknown field"),
        ];
        for (text, why) in cases {
            let error = Policy::from_toml(text).unwrap_err().to_string();
            assert!(error.contains(why), "{text}: {error}");
        }
        let many = "[[permissions.when]]\norigin = [\"agent\"]\nask = [\"Bash\"]\n".repeat(65);
        assert!(Policy::from_toml(&many).unwrap_err().to_string().contains("at most 64"));
    }

    #[test]
    fn a_ceiling_takes_a_conditional_allow_only_when_its_rule_would_pass_alone() {
        let ceiling = crate::Ceiling::new("agent", "[permissions]\nallow = [\"Read\"]").unwrap();
        let within =
            Policy::from_toml("[[permissions.when]]\norigin = [\"person\"]\nallow = [\"Read\"]")
                .unwrap();
        assert!(ceiling.check_policy(&within).is_ok());
        let beyond =
            Policy::from_toml("[[permissions.when]]\norigin = [\"person\"]\nallow = [\"Bash\"]")
                .unwrap();
        let error = ceiling.check_policy(&beyond).unwrap_err();
        assert!(error.contains("allow rule Bash is beyond the ceiling"), "{error}");
    }

    #[test]
    fn what_is_unknown_never_loosens_a_policy_that_denies_by_default() {
        let policy = Policy::from_toml(
            "[permissions]\ndefault = \"deny\"\nallow = [\"Read\"]\n[[permissions.when]]\norigin = [\"agent\"]\ndeny = [\"Bash\"]\n[[permissions.when]]\norigin = [\"agent\"]\ndeny = [\"Read(secret)\"]",
        )
        .unwrap();
        let bash =
            policy.decide_call("Bash", &json!({"command": "ls"}), &context(), &facts(None, None));
        assert_eq!(bash.behavior, Behavior::Deny, "the default denies it anyway: {}", bash.reason);
        let read = |path: &str| {
            policy.decide_call("Read", &json!({"file_path": path}), &context(), &facts(None, None))
        };
        assert_eq!(
            read("/work/project/secret").behavior,
            Behavior::Ask,
            "allowed, but a deny may hold"
        );
        assert_eq!(read("/work/project/other").behavior, Behavior::Allow);
        let words = Policy::from_toml("[permissions]\ndefault = \"deny\"\ndeny = [\"Read(.env)\"]")
            .unwrap();
        let cat = words.decide_call(
            "Bash",
            &json!({"command": "cat $F"}),
            &context(),
            &facts(None, None),
        );
        assert_eq!(cat.behavior, Behavior::Deny, "{}", cat.reason);
    }

    #[test]
    fn a_tools_source_is_unknown_when_two_servers_could_own_it() {
        let servers = [("github", "user"), ("github__x", "project"), ("docs", "user")];
        assert_eq!(source_of_tool("mcp__docs__read", servers), Some("user".into()));
        assert_eq!(
            source_of_tool("mcp__github__x__issue", servers),
            None,
            "github's x__issue or github__x's issue"
        );
        assert_eq!(source_of_tool("mcp__github__issue", servers), Some("user".into()));
        assert_eq!(source_of_tool("mcp__other__a", servers), None);
    }
}
