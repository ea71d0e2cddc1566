//! The permission engine's pure core: policy files, Claude Code rule matching, decisions.
//!
//! A policy uses Claude Code's own rule syntax, so users already know it:
//!
//! ```toml
//! [permissions]
//! allow = ["Read", "Grep", "Bash(git status:*)", "Edit(src/**)"]
//! deny  = ["Bash(rm:*)", "WebFetch"]
//! ask   = ["Bash"]
//! default = "ask"          # allow | deny | ask, when no rule matches
//! ask_timeout_secs = 600
//! on_timeout = "deny"
//! ```
//!
//! A policy may also say who hears of its sessions, by the names the daemon's notify file gives
//! its channels, and escalate its requests along a chain:
//!
//! ```toml
//! [notify]
//! channels = ["phone", "team"]   # only these hear of its sessions (default: every channel)
//!
//! [[notify.escalate]]            # requests and questions: the phone at once,
//! channel = "phone"
//! [[notify.escalate]]            # the lead if nobody answered in five minutes
//! channel = "lead"
//! after_secs = 300
//! ```
//!
//! Rules may also hold only for some calls: by who started the turn, or where an MCP tool's
//! server was configured (`[[permissions.when]]`, [`when`]).
//!
//! Deny beats ask beats allow. A Bash command is split into its subcommands (`&&`, `||`, `;`,
//! `|`, `&`, newlines, outside quotes): one denied subcommand denies the whole, one asked
//! subcommand asks, and it is allowed only when every subcommand is. Nothing here does I/O.

use std::path::{Path, PathBuf};
use std::time::Duration;

use globset::{Glob, GlobMatcher};
use serde::Deserialize;
use serde_json::Value;

/// What the engine decides for one tool call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Behavior {
    /// Run it.
    Allow,
    /// Refuse it.
    Deny,
    /// Ask a person.
    Ask,
}

impl Behavior {
    /// `allow`, `deny`, `ask`.
    pub fn as_str(self) -> &'static str {
        match self {
            Behavior::Allow => "allow",
            Behavior::Deny => "deny",
            Behavior::Ask => "ask",
        }
    }
}

/// A decision and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// What to do.
    pub behavior: Behavior,
    /// The rule that decided (`Bash(rm:*)`), or `None` when the default did.
    pub rule: Option<String>,
    /// A sentence for logs and for the model (on deny).
    pub reason: String,
}

/// How long a person has to answer, and what happens when nobody does.
pub const DEFAULT_ASK_TIMEOUT: Duration = Duration::from_secs(600);

/// A parsed policy.
#[derive(Debug, Clone)]
pub struct Policy {
    allow: Vec<Rule>,
    deny: Vec<Rule>,
    ask: Vec<Rule>,
    /// Rules that hold only for some calls (`[[permissions.when]]`).
    when: Vec<when::When>,
    /// What happens when no rule matches.
    pub default: Behavior,
    /// How long an `ask` waits for a person.
    pub ask_timeout: Duration,
    /// What an unanswered `ask` becomes (`allow` is refused: timeouts fail closed).
    pub on_timeout: Behavior,
    /// How long an `ask` waits with the CLI running before it is parked (`park_after_secs`):
    /// the CLI is told to defer the call and ends, and the request waits with no process
    /// until a person answers, which resumes the session. `None`: never parked.
    pub park_after: Option<Duration>,
    /// How long a parked request waits for a person before it is denied, as an unanswered ask
    /// is (`park_expires_secs`, counted from when it was parked; its links last as long).
    /// `None`: until someone answers.
    pub park_expires: Option<Duration>,
    /// Who hears of its sessions (`[notify]`).
    pub notify: NotifyRoute,
    /// What a resume does with calls the last run left unsettled (`on_unsettled`): `ask` (the
    /// default: a person settles each first), or settle each `interrupted` or `done` itself.
    pub on_unsettled: OnUnsettled,
    /// The ceiling of the token that started the session, if it has one: no call is allowed
    /// that it would not allow ([`ceiling`]).
    ceiling: Option<std::sync::Arc<ceiling::Ceiling>>,
}

/// Who hears of a policy's sessions: channel names of the daemon's notify file (`web-push`:
/// every browser subscribed to Web Push). The daemon checks the names.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct NotifyRoute {
    /// Only these channels hear of its sessions (`None`: every channel).
    #[serde(default)]
    pub channels: Option<Vec<String>>,
    /// Requests and questions go to these, each once it has waited `after_secs` (and only to
    /// these); empty: to every channel, as its own `after_secs` says.
    #[serde(default)]
    pub escalate: Vec<EscalationStep>,
}

/// One link of an escalation chain.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct EscalationStep {
    /// The channel's name.
    pub channel: String,
    /// How long the request waits before this channel hears of it (0: at once).
    #[serde(default)]
    pub after_secs: u64,
}

/// The most steps, and channels, a route names.
pub const MAX_ROUTE_NAMES: usize = 64;

impl NotifyRoute {
    /// Names are channel names (1-64 of letters, digits, `.`, `_`, `-`), at most
    /// [`MAX_ROUTE_NAMES`] of each, and delays at most a week.
    pub fn check(&self) -> Result<(), String> {
        let named =
            self.channels.iter().flatten().chain(self.escalate.iter().map(|step| &step.channel));
        for name in named {
            let fits = !name.is_empty()
                && name.len() <= 64
                && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
            if !fits {
                return Err(format!(
                    "notify: {name:?} is not a channel name (1-64 letters, digits, '.', '_', '-')"
                ));
            }
        }
        if self.channels.as_ref().is_some_and(|channels| channels.len() > MAX_ROUTE_NAMES)
            || self.escalate.len() > MAX_ROUTE_NAMES
        {
            return Err(format!("notify: at most {MAX_ROUTE_NAMES} channels and steps"));
        }
        if let Some(step) = self.escalate.iter().find(|step| step.after_secs > 7 * 24 * 3600) {
            return Err(format!("notify: {} waits more than a week", step.channel));
        }
        if let Some(channels) = &self.channels {
            if channels.is_empty() {
                return Err("notify: channels names no channel; name one, or leave it out".into());
            }
            let reached = self.escalate.iter().any(|step| channels.contains(&step.channel));
            if !self.escalate.is_empty() && !reached {
                return Err(
                    "notify: no channel of the escalation chain is among its channels: requests would reach nobody"
                        .into(),
                );
            }
        }
        Ok(())
    }
}

impl Default for Policy {
    /// No rules; everything asks; unanswered asks are denied after ten minutes.
    fn default() -> Self {
        Policy {
            allow: Vec::new(),
            deny: Vec::new(),
            ask: Vec::new(),
            when: Vec::new(),
            default: Behavior::Ask,
            ask_timeout: DEFAULT_ASK_TIMEOUT,
            on_timeout: Behavior::Deny,
            park_after: None,
            park_expires: None,
            notify: NotifyRoute::default(),
            on_unsettled: OnUnsettled::Ask,
            ceiling: None,
        }
    }
}

/// A policy's `on_unsettled` ([`crate::unsettled`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OnUnsettled {
    /// A person settles each call before the session runs again.
    #[default]
    Ask,
    /// Each is settled as interrupted (its outcome unknown).
    Interrupted,
    /// Each is settled as done.
    Done,
}

/// A policy file that could not be used.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// Not valid TOML, or unknown keys.
    #[error("policy is not valid: {0}")]
    Toml(#[from] toml::de::Error),
    /// A rule that does not parse.
    #[error("rule {rule:?} is not valid: {reason}")]
    Rule {
        /// The rule as written.
        rule: String,
        /// What is wrong.
        reason: String,
    },
    /// `on_timeout = "allow"` would let silence approve a tool call.
    #[error(
        "on_timeout must be \"deny\" (or \"ask\", which also denies): permissions fail closed"
    )]
    TimeoutAllows,
    /// `park_after_secs` that would never park (zero, or not below `ask_timeout_secs`).
    #[error("park_after_secs must be at least 1 and below ask_timeout_secs ({ask_timeout} s), or the ask's timeout ends it first")]
    ParkNever {
        /// The ask's timeout, in seconds.
        ask_timeout: u64,
    },
    /// `park_expires_secs` that is zero, or without `park_after_secs` (nothing is parked).
    #[error("park_expires_secs must be at least 1, beside park_after_secs (only a parked request waits that long)")]
    ParkExpires,
    /// A `[[permissions.when]]` block that cannot be used.
    #[error("policy is not valid: {0}")]
    When(String),
    /// Its `[notify]` table names something wrongly.
    #[error("policy is not valid: {0}")]
    Notify(String),
    /// The file could not be read.
    #[error("cannot read policy file {path:?}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    #[serde(default)]
    permissions: PermissionsSection,
    #[serde(default)]
    notify: NotifyRoute,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PermissionsSection {
    #[serde(default)]
    allow: Vec<String>,
    #[serde(default)]
    deny: Vec<String>,
    #[serde(default)]
    ask: Vec<String>,
    default: Option<Behavior>,
    ask_timeout_secs: Option<u64>,
    on_timeout: Option<Behavior>,
    park_after_secs: Option<u64>,
    park_expires_secs: Option<u64>,
    on_unsettled: Option<OnUnsettled>,
    #[serde(default)]
    when: Vec<when::WhenSection>,
}

impl Policy {
    /// Parses a policy from TOML text.
    pub fn from_toml(text: &str) -> Result<Policy, PolicyError> {
        let file: PolicyFile = toml::from_str(text)?;
        file.notify.check().map_err(PolicyError::Notify)?;
        let notify = file.notify;
        let section = file.permissions;
        let parse = |rules: &[String]| {
            rules.iter().map(|rule| Rule::parse(rule)).collect::<Result<Vec<_>, _>>()
        };
        let on_timeout = section.on_timeout.unwrap_or(Behavior::Deny);
        if on_timeout == Behavior::Allow {
            return Err(PolicyError::TimeoutAllows);
        }
        let ask_timeout =
            section.ask_timeout_secs.map(Duration::from_secs).unwrap_or(DEFAULT_ASK_TIMEOUT);
        let park_after = section.park_after_secs.map(Duration::from_secs);
        if park_after.is_some_and(|park| park.is_zero() || park >= ask_timeout) {
            return Err(PolicyError::ParkNever { ask_timeout: ask_timeout.as_secs() });
        }
        let park_expires = section.park_expires_secs.map(Duration::from_secs);
        if park_expires.is_some_and(|expires| expires.is_zero() || park_after.is_none()) {
            return Err(PolicyError::ParkExpires);
        }
        if section.when.len() > when::MAX_WHEN_BLOCKS {
            return Err(PolicyError::When(format!(
                "at most {} [[permissions.when]] blocks",
                when::MAX_WHEN_BLOCKS
            )));
        }
        let when = section.when.into_iter().map(when::When::parse).collect::<Result<_, _>>()?;
        Ok(Policy {
            allow: parse(&section.allow)?,
            deny: parse(&section.deny)?,
            ask: parse(&section.ask)?,
            when,
            default: section.default.unwrap_or(Behavior::Ask),
            ask_timeout,
            on_timeout,
            park_after,
            park_expires,
            notify,
            on_unsettled: section.on_unsettled.unwrap_or_default(),
            ceiling: None,
        })
    }

    /// Reads a policy file.
    pub fn from_file(path: &Path) -> Result<Policy, PolicyError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| PolicyError::Read { path: path.to_owned(), source })?;
        Policy::from_toml(&text)
    }

    /// A policy that allows everything (the agents-ui relay protocol's "auto-approve").
    pub fn allow_all() -> Policy {
        Policy { default: Behavior::Allow, ..Policy::default() }
    }

    /// Adds an allow rule (a person's "always allow" for this session).
    pub fn add_allow(&mut self, rule: &str) -> Result<(), PolicyError> {
        let rule = Rule::parse(rule)?;
        if !self.allow.iter().any(|existing| existing.text == rule.text) {
            self.allow.push(rule);
        }
        Ok(())
    }

    /// The allow rules, as written.
    pub fn allow_rules(&self) -> impl Iterator<Item = &str> {
        self.allow.iter().map(|rule| rule.text.as_str())
    }

    /// The deny rules, as written (they are also handed to the CLI as its own
    /// `--disallowedTools`, in case a call ever reaches it without the policy's hook).
    /// A ceiling's deny rules come after the policy's own.
    pub fn deny_rules(&self) -> impl Iterator<Item = &str> {
        let ceiling = self.ceiling.iter().flat_map(|ceiling| ceiling.policy().deny.iter());
        self.deny.iter().chain(ceiling).map(|rule| rule.text.as_str())
    }

    /// Decides one tool call of which nothing more is known ([`Policy::decide_call`] with
    /// unknown facts: a rule on origin or source asks, or does not allow).
    pub fn decide(&self, tool_name: &str, input: &Value, context: &MatchContext) -> Decision {
        self.decide_call(tool_name, input, context, &CallFacts::default())
    }

    /// Decides one tool call: by its own rules, then, for a session under a token's ceiling,
    /// the stricter of that and the ceiling's decision (deny beats ask beats allow).
    pub fn decide_call(
        &self,
        tool_name: &str,
        input: &Value,
        context: &MatchContext,
        facts: &CallFacts,
    ) -> Decision {
        let own = self.decide_own(tool_name, input, context, facts);
        match &self.ceiling {
            Some(ceiling) => ceiling.bound(own, tool_name, input, context, facts),
            None => own,
        }
    }

    /// The Read and Edit path rules to hold against a shell command's words: its own deny and
    /// ask rules, those of the blocks that hold, and, asking, those of the blocks that may.
    fn path_rules(&self, tool_name: &str, facts: &CallFacts) -> Vec<words::PathRule<'_>> {
        fn add<'a>(
            rules: &mut Vec<words::PathRule<'a>>,
            block: Option<&when::When>,
            list: &'a [Rule],
            effect: Behavior,
            sure: bool,
        ) {
            for rule in list.iter().filter(|rule| words::is_path_rule(rule)) {
                let name = block.map_or_else(|| rule.text.clone(), |block| block.name(rule));
                rules.push(words::PathRule { rule, name, effect, sure });
            }
        }
        let mut rules = Vec::new();
        add(&mut rules, None, &self.deny, Behavior::Deny, true);
        add(&mut rules, None, &self.ask, Behavior::Ask, true);
        for block in &self.when {
            match block.holds(tool_name, facts) {
                when::Holds::Yes => {
                    add(&mut rules, Some(block), &block.deny, Behavior::Deny, true);
                    add(&mut rules, Some(block), &block.ask, Behavior::Ask, true);
                }
                when::Holds::Unknown => {
                    add(&mut rules, Some(block), &block.deny, Behavior::Ask, false);
                    add(&mut rules, Some(block), &block.ask, Behavior::Ask, false);
                }
                when::Holds::No => {}
            }
        }
        rules
    }

    /// Decides one tool call by its own rules alone.
    fn decide_own(
        &self,
        tool_name: &str,
        input: &Value,
        context: &MatchContext,
        facts: &CallFacts,
    ) -> Decision {
        let call = ToolCall::new(tool_name, input, context);
        // The blocks whose conditions hold, and those that cannot be decided for this call.
        let holding: Vec<&when::When> = self
            .when
            .iter()
            .filter(|block| block.holds(tool_name, facts) == when::Holds::Yes)
            .collect();
        let named = |block: Option<&when::When>, rule: &Rule| match block {
            Some(block) => block.name(rule),
            None => rule.text.clone(),
        };
        let hit = |rules: fn(&when::When) -> &Vec<Rule>, own: &[Rule]| {
            own.iter()
                .map(|rule| (None, rule))
                .chain(
                    holding.iter().flat_map(|block| rules(block).iter().map(|r| (Some(*block), r))),
                )
                .find(|(_, rule)| rule.matches_any_part(&call))
                .map(|(block, rule)| named(block, rule))
        };
        if let Some(rule) = hit(|block| &block.deny, &self.deny) {
            return Decision {
                behavior: Behavior::Deny,
                reason: format!("denied by policy rule {rule}"),
                rule: Some(rule),
            };
        }
        // Read and Edit path rules, held against what a shell command's words touch.
        let words = call.bash.as_ref().and_then(|bash| {
            let rules = self.path_rules(tool_name, facts);
            words::judge(bash, &rules, context)
        });
        if let Some(verdict) = &words {
            if verdict.behavior == Behavior::Deny {
                return Decision {
                    behavior: Behavior::Deny,
                    rule: Some(verdict.rule.clone()),
                    reason: verdict.reason.clone(),
                };
            }
        }
        if tool_name == "AskUserQuestion" {
            // Only a person can answer questions; no rule can (a deny may refuse to ask them).
            return Decision {
                behavior: Behavior::Ask,
                rule: None,
                reason: "AskUserQuestion needs a person's answers".to_owned(),
            };
        }
        if let Some(rule) = hit(|block| &block.ask, &self.ask) {
            return Decision {
                behavior: Behavior::Ask,
                reason: format!("policy rule {rule} asks a person"),
                rule: Some(rule),
            };
        }
        // An ask rule's path the words surely touch asks, as an ask rule does.
        let mut unsure = None;
        if let Some(verdict) = words {
            if verdict.certain {
                return Decision {
                    behavior: Behavior::Ask,
                    rule: Some(verdict.rule),
                    reason: verdict.reason,
                };
            }
            unsure = Some((verdict.rule, verdict.reason));
        }
        // A deny or ask rule that might hold: a person decides what the rule cannot, unless
        // the policy would deny the call anyway (what is unknown never makes it looser).
        let undecided = self
            .when
            .iter()
            .filter(|block| block.holds(tool_name, facts) == when::Holds::Unknown)
            .find_map(|block| {
                block
                    .deny
                    .iter()
                    .chain(&block.ask)
                    .find(|rule| rule.matches_any_part(&call))
                    .map(|rule| block.name(rule))
            });
        if let (None, Some(rule)) = (&unsure, undecided) {
            let reason = format!(
                "policy rule {rule} may apply, and {} is not known: asking a person",
                unknown_of(tool_name, facts)
            );
            unsure = Some((rule, reason));
        }
        let unsure_ask = |(rule, reason): (String, String)| Decision {
            behavior: Behavior::Ask,
            rule: Some(rule),
            reason,
        };
        let allow: Vec<(Option<&when::When>, &Rule)> = self
            .allow
            .iter()
            .map(|rule| (None, rule))
            .chain(holding.iter().flat_map(|block| block.allow.iter().map(|r| (Some(*block), r))))
            .collect();
        if let Some(rules) = allowed_by(&allow, &call) {
            if let Some(unsure) = unsure {
                return unsure_ask(unsure);
            }
            return Decision {
                behavior: Behavior::Allow,
                rule: Some(rules.join(", ")),
                reason: format!("allowed by policy rule {}", rules.join(", ")),
            };
        }
        if let (Some(unsure), Behavior::Allow | Behavior::Ask) = (unsure, self.default) {
            return unsure_ask(unsure);
        }
        Decision {
            behavior: self.default,
            rule: None,
            reason: match self.default {
                Behavior::Allow => "allowed by the policy default".to_owned(),
                Behavior::Deny => format!("no policy rule allows {tool_name}; the default is deny"),
                Behavior::Ask => format!("no policy rule decides {tool_name}; asking a person"),
            },
        }
    }
}

/// The allow rules (each with the block it is in, if any) that together cover every part of
/// the call, if they do, by name.
fn allowed_by(allow: &[(Option<&when::When>, &Rule)], call: &ToolCall<'_>) -> Option<Vec<String>> {
    let name = |(block, rule): &(Option<&when::When>, &Rule)| match block {
        Some(block) => block.name(rule),
        None => rule.text.clone(),
    };
    match &call.bash {
        Some(bash) => {
            // A rule for the whole tool or for this exact text allows it as a whole (a
            // person's "always allow" of a compound command is such a rule).
            let whole = allow
                .iter()
                .filter(|(_, rule)| matches!(rule.content, None | Some(Content::Exact(_))))
                .find(|(_, rule)| rule.matches_command(&call.tool_name, &bash.whole))
                .map(|found| vec![name(found)]);
            if whole.is_some() || bash.needs_whole_match {
                // Substitutions hide commands: never allowed part by part (by a prefix).
                return whole;
            }
            let mut used = Vec::new();
            for part in &bash.parts {
                let found =
                    allow.iter().find(|(_, rule)| rule.matches_command(&call.tool_name, part))?;
                let found = name(found);
                if !used.contains(&found) {
                    used.push(found);
                }
            }
            Some(used)
        }
        None => allow.iter().find(|(_, rule)| rule.matches(call)).map(|found| vec![name(found)]),
    }
}

/// What is not known of a call that a rule's conditions need, in words.
fn unknown_of(tool_name: &str, facts: &CallFacts) -> &'static str {
    match (&facts.origin, &facts.mcp_source) {
        (None, None) if tool_name.starts_with("mcp__") => {
            "who started the turn, or where the MCP server was configured,"
        }
        (None, _) => "who started the turn",
        (Some(_), _) => "where the MCP server was configured",
    }
}

/// What paths in rules are relative to.
#[derive(Debug, Clone, Default)]
pub struct MatchContext {
    /// The session's working directory (`Edit(src/**)` is under it).
    pub cwd: PathBuf,
    /// The user's home (`Read(~/.zshrc)`).
    pub home: Option<PathBuf>,
}

/// A rule: `Tool` or `Tool(content)`.
#[derive(Debug, Clone)]
struct Rule {
    text: String,
    tool: String,
    content: Option<Content>,
}

#[derive(Debug, Clone)]
enum Content {
    /// `Bash(git status:*)`: the command, or the command followed by a space and more.
    Prefix(String),
    /// `Bash(npm run *)`: a pattern over the whole command.
    CommandGlob(GlobMatcher),
    /// `Bash(npm run build)`: the exact command.
    Exact(String),
    /// `Edit(src/**)`: a path pattern, kept as written and resolved per call.
    Path(String),
    /// `WebFetch(domain:example.com)`.
    Domain(String),
}

const FILE_EDIT_TOOLS: &[&str] = &["Edit", "MultiEdit", "Write", "NotebookEdit"];
const FILE_READ_TOOLS: &[&str] = &["Read", "Glob", "Grep", "LS", "NotebookRead"];

/// Tools whose `path` is a directory they search: a rule hits them when it covers the
/// directory itself or everything directly in it (`Read(./secrets/**)` hits a Grep in
/// `secrets`). A search whose root only contains a denied file (a Grep of the whole project
/// with `Read(./.env)` denied) is left to the CLI, which also holds the deny rules.
const DIRECTORY_SEARCH_TOOLS: &[&str] = &["Glob", "Grep", "LS"];

impl Rule {
    fn parse(text: &str) -> Result<Rule, PolicyError> {
        let error =
            |reason: &str| PolicyError::Rule { rule: text.to_owned(), reason: reason.to_owned() };
        let trimmed = text.trim();
        let (tool, content) = match trimmed.find('(') {
            None => (trimmed, None),
            Some(open) => {
                let Some(inner) = trimmed[open + 1..].strip_suffix(')') else {
                    return Err(error("a rule with '(' must end with ')'"));
                };
                (&trimmed[..open], Some(inner))
            }
        };
        if tool.is_empty()
            || !tool.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '*')
        {
            return Err(error("the tool name must be letters, digits, '_' or '-'"));
        }
        let content = match content {
            None => None,
            Some("") => return Err(error("empty parentheses; write the tool name alone")),
            Some(inner) => Some(Rule::parse_content(tool, inner).map_err(|reason| error(&reason))?),
        };
        Ok(Rule { text: trimmed.to_owned(), tool: tool.to_owned(), content })
    }

    fn parse_content(tool: &str, inner: &str) -> Result<Content, String> {
        if tool == "Bash" {
            if let Some(prefix) = inner.strip_suffix(":*") {
                return Ok(Content::Prefix(prefix.trim().to_owned()));
            }
            if inner.contains('*') {
                let glob = Glob::new(inner).map_err(|e| e.to_string())?;
                return Ok(Content::CommandGlob(glob.compile_matcher()));
            }
            return Ok(Content::Exact(inner.trim().to_owned()));
        }
        if tool == "WebFetch" {
            return match inner.strip_prefix("domain:") {
                Some(domain) => Ok(Content::Domain(domain.trim().to_lowercase())),
                None => Err("WebFetch rules are WebFetch(domain:example.com)".to_owned()),
            };
        }
        if FILE_EDIT_TOOLS.contains(&tool) || FILE_READ_TOOLS.contains(&tool) {
            Glob::new(inner).map_err(|e| e.to_string())?;
            return Ok(Content::Path(inner.to_owned()));
        }
        Err(format!("{tool} rules take no parentheses (only Bash, WebFetch and file tools do)"))
    }

    fn tool_matches(&self, tool_name: &str) -> bool {
        if self.tool == tool_name {
            return true;
        }
        // `mcp__server` covers every tool of that server; `mcp__server__*` too.
        if let Some(prefix) = self.tool.strip_suffix("__*") {
            return tool_name.starts_with(&format!("{prefix}__"));
        }
        if self.tool.starts_with("mcp__") && self.tool.matches("__").count() == 1 {
            return tool_name.starts_with(&format!("{}__", self.tool));
        }
        // `Edit(...)` rules cover every editing tool, `Read(...)` every reading tool.
        if self.content.is_some() {
            return (self.tool == "Edit" && FILE_EDIT_TOOLS.contains(&tool_name))
                || (self.tool == "Read" && FILE_READ_TOOLS.contains(&tool_name));
        }
        false
    }

    fn matches_command(&self, tool_name: &str, command: &str) -> bool {
        if !self.tool_matches(tool_name) {
            return false;
        }
        match &self.content {
            None => true,
            Some(Content::Prefix(prefix)) => {
                command == prefix
                    || command
                        .strip_prefix(prefix.as_str())
                        .is_some_and(|rest| rest.starts_with(' '))
            }
            Some(Content::CommandGlob(glob)) => glob.is_match(command),
            Some(Content::Exact(exact)) => command == exact,
            _ => false,
        }
    }

    /// Deny and ask rules: does the rule hit any part of the call?
    fn matches_any_part(&self, call: &ToolCall<'_>) -> bool {
        match &call.bash {
            Some(bash) => {
                self.matches_command(&call.tool_name, &bash.whole)
                    || bash
                        .parts
                        .iter()
                        .chain(&bash.hidden)
                        .any(|part| self.matches_command(&call.tool_name, part))
            }
            None => self.matches(call),
        }
    }

    fn matches(&self, call: &ToolCall<'_>) -> bool {
        if !self.tool_matches(&call.tool_name) {
            return false;
        }
        match &self.content {
            None => true,
            Some(Content::Path(pattern)) => {
                let Some(glob) = resolve_pattern(pattern, call.context) else { return false };
                let searched;
                let path = match &call.path {
                    Some(path) => path,
                    // A search without a path searches the working directory.
                    None if DIRECTORY_SEARCH_TOOLS.contains(&call.tool_name.as_str()) => {
                        searched = call.context.cwd.clone();
                        &searched
                    }
                    None => return false,
                };
                glob.is_match(path)
                    || (DIRECTORY_SEARCH_TOOLS.contains(&call.tool_name.as_str())
                        && glob.is_match(path.join("any-file")))
            }
            Some(Content::Domain(domain)) => call
                .host
                .as_deref()
                .is_some_and(|host| host == domain || host.ends_with(&format!(".{domain}"))),
            Some(_) => false,
        }
    }
}

/// Turns a rule's path pattern into an absolute glob ([`absolute_pattern`]).
fn resolve_pattern(pattern: &str, context: &MatchContext) -> Option<GlobMatcher> {
    let absolute = absolute_pattern(pattern, context)?;
    let glob = globset::GlobBuilder::new(&absolute).literal_separator(true).build().ok()?;
    Some(glob.compile_matcher())
}

/// A rule's path pattern made absolute: `//abs` is absolute, `~/x` is under the home, `/x` and
/// `x` are under the session's cwd.
fn absolute_pattern(pattern: &str, context: &MatchContext) -> Option<String> {
    Some(if let Some(rest) = pattern.strip_prefix("//") {
        format!("/{rest}")
    } else if let Some(rest) = pattern.strip_prefix("~/") {
        format!("{}/{rest}", context.home.as_ref()?.display())
    } else {
        // `./x`, `/x` and `x` are all under the cwd.
        let relative = pattern.strip_prefix("./").unwrap_or(pattern);
        format!(
            "{}/{}",
            context.cwd.display().to_string().trim_end_matches('/'),
            relative.trim_start_matches('/')
        )
    })
}

/// A tool call, prepared for matching.
struct ToolCall<'a> {
    tool_name: String,
    context: &'a MatchContext,
    /// File tools: the absolute path.
    path: Option<PathBuf>,
    /// WebFetch: the URL's host.
    host: Option<String>,
    /// Bash: the command and its parts.
    bash: Option<BashCommand>,
}

impl<'a> ToolCall<'a> {
    fn new(tool_name: &str, input: &Value, context: &'a MatchContext) -> ToolCall<'a> {
        let string = |key: &str| input.get(key).and_then(Value::as_str);
        let path =
            ["file_path", "notebook_path", "path"].iter().find_map(|key| string(key)).map(|path| {
                let path = Path::new(path);
                if path.is_absolute() {
                    normalize(path)
                } else {
                    normalize(&context.cwd.join(path))
                }
            });
        let host = string("url").and_then(host_of);
        let bash =
            (tool_name == "Bash").then(|| BashCommand::parse(string("command").unwrap_or("")));
        ToolCall { tool_name: tool_name.to_owned(), context, path, host, bash }
    }
}

/// Removes `.` and `..` without touching the file system (so `src/../secret` is not `src/**`).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    out
}

fn host_of(url: &str) -> Option<String> {
    let rest = url.split_once("://").map(|(_, rest)| rest).unwrap_or(url);
    let authority = rest.split(['/', '?', '#']).next()?;
    let host = authority.rsplit('@').next()?.split(':').next()?;
    (!host.is_empty()).then(|| host.to_lowercase())
}

/// A Bash command split into its simple commands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BashCommand {
    /// The whole command, trimmed.
    pub whole: String,
    /// Each simple command, trimmed, without leading `VAR=value` assignments.
    pub parts: Vec<String>,
    /// It has `$(...)`, backticks or `<(...)`: parts cannot be trusted to be all it runs.
    pub needs_whole_match: bool,
    /// The simple commands inside substitutions (checked against deny and ask rules).
    pub hidden: Vec<String>,
}

impl BashCommand {
    /// Splits on `&&`, `||`, `;`, `|`, `&` and newlines outside quotes.
    pub fn parse(command: &str) -> BashCommand {
        let mut parts = Vec::new();
        let mut current = String::new();
        let mut chars = command.chars().peekable();
        let mut single = false;
        let mut double = false;
        let mut needs_whole_match = false;
        while let Some(c) = chars.next() {
            match c {
                '\\' if !single => {
                    current.push(c);
                    if let Some(next) = chars.next() {
                        current.push(next);
                    }
                }
                '\'' if !double => {
                    single = !single;
                    current.push(c);
                }
                '"' if !single => {
                    double = !double;
                    current.push(c);
                }
                '`' if !single => {
                    needs_whole_match = true;
                    current.push(c);
                }
                '$' if !single && chars.peek() == Some(&'(') => {
                    needs_whole_match = true;
                    current.push(c);
                }
                '<' | '>' if !single && !double && chars.peek() == Some(&'(') => {
                    needs_whole_match = true;
                    current.push(c);
                }
                ';' | '\n' | '&' | '|' if !single && !double => {
                    // `&>` and `>&` are redirections, not separators.
                    if c == '&' && (chars.peek() == Some(&'>') || current.ends_with('>')) {
                        current.push(c);
                        continue;
                    }
                    if (c == '&' || c == '|') && chars.peek() == Some(&c) {
                        chars.next();
                    }
                    push_part(&mut parts, &mut current);
                }
                _ => current.push(c),
            }
        }
        push_part(&mut parts, &mut current);
        let hidden = if needs_whole_match {
            substitutions(command)
                .iter()
                .flat_map(|inner| {
                    let inner = BashCommand::parse(inner);
                    inner.parts.into_iter().chain(inner.hidden)
                })
                .collect()
        } else {
            Vec::new()
        };
        BashCommand { whole: command.trim().to_owned(), parts, needs_whole_match, hidden }
    }
}

/// The texts inside `$(...)`, `<(...)`, `>(...)` and backticks (outermost only; the parse of
/// each finds the ones nested in it).
fn substitutions(command: &str) -> Vec<String> {
    let chars: Vec<char> = command.chars().collect();
    let mut found = Vec::new();
    let mut index = 0;
    while index < chars.len() {
        let opens_paren =
            matches!(chars[index], '$' | '<' | '>') && chars.get(index + 1) == Some(&'(');
        if opens_paren {
            let start = index + 2;
            let mut depth = 1;
            let mut end = start;
            while end < chars.len() && depth > 0 {
                match chars[end] {
                    '(' => depth += 1,
                    ')' => depth -= 1,
                    _ => {}
                }
                end += 1;
            }
            found.push(chars[start..end.saturating_sub(1).max(start)].iter().collect());
            index = end;
        } else if chars[index] == '`' {
            let start = index + 1;
            let end = chars[start..]
                .iter()
                .position(|c| *c == '`')
                .map_or(chars.len(), |offset| start + offset);
            found.push(chars[start..end].iter().collect());
            index = end + 1;
        } else {
            index += 1;
        }
    }
    found
}

fn push_part(parts: &mut Vec<String>, current: &mut String) {
    let part = strip_assignments(current.trim());
    if !part.is_empty() {
        parts.push(part.to_owned());
    }
    current.clear();
}

/// `FOO=1 BAR=2 cmd args` → `cmd args`.
fn strip_assignments(mut command: &str) -> &str {
    loop {
        let Some((word, rest)) = command.split_once(' ') else { return command };
        let is_assignment = word.split_once('=').is_some_and(|(name, _)| {
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        });
        if !is_assignment || word.contains(['\'', '"']) {
            return command;
        }
        command = rest.trim_start();
    }
}

pub mod ceiling;
pub mod trial;
pub mod when;
mod words;

pub use when::CallFacts;
#[cfg(test)]
mod tests;
