//! A dry run's tally: each replayed call ([`crate::replay`]) decided again by a candidate
//! policy, counted per deciding rule against what really happened, with a few calls kept per
//! cell to show. Pure and bounded: the counts are per rule, the kept calls at most
//! [`SAMPLES_PER_CELL`] a cell and [`MAX_RULES`] rules.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Behavior, CallFacts, Decision, MatchContext, Policy};
use crate::replay::{Actual, ReplayedCall};

/// The most calls a cell keeps to show.
pub const SAMPLES_PER_CELL: usize = 20;

/// The most rules a tally tells apart; the rest are counted together.
pub const MAX_RULES: usize = 512;

/// What really happened to a call, in the few classes a report tells apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// It ran, nobody asked: a policy rule or the CLI on its own let it.
    RanUnasked,
    /// A person was asked and allowed it.
    PersonAllowed,
    /// A person was asked and denied it, or nobody answered, or the request was withdrawn.
    PersonRefused,
    /// A policy rule denied it.
    PolicyDenied,
    /// The log holds no decision.
    Undecided,
}

impl Outcome {
    /// The class of `actual`.
    pub fn of(actual: &Actual) -> Outcome {
        match actual {
            Actual::Cli => Outcome::RanUnasked,
            Actual::Policy { behavior: Behavior::Allow, .. } => Outcome::RanUnasked,
            Actual::Policy { .. } => Outcome::PolicyDenied,
            Actual::Person { behavior: Behavior::Allow, .. }
            | Actual::Terminal { behavior: Behavior::Allow } => Outcome::PersonAllowed,
            Actual::Person { .. }
            | Actual::Terminal { .. }
            | Actual::Timeout
            | Actual::Withdrawn => Outcome::PersonRefused,
            Actual::Undecided => Outcome::Undecided,
        }
    }

    /// Its word.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::RanUnasked => "ran_unasked",
            Outcome::PersonAllowed => "person_allowed",
            Outcome::PersonRefused => "person_refused",
            Outcome::PolicyDenied => "policy_denied",
            Outcome::Undecided => "undecided",
        }
    }
}

/// A call a report shows: where it is, and what it was.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallRef {
    /// The session.
    pub session: String,
    /// The log's sequence number where the call shows.
    pub seq: u64,
    /// The call's id.
    pub tool_use_id: String,
    /// The tool.
    pub tool: String,
    /// Its input in a line (a command, a path), cut.
    pub summary: String,
    /// What really decided it.
    pub actual: Actual,
}

/// The calls one rule decided one way that met one outcome.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Cell {
    /// How many.
    pub count: u64,
    /// The first few.
    pub calls: Vec<CallRef>,
}

/// Counts per rule: what the candidate policy would have done, against what happened.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RuleTally {
    /// The rule (`default` for the policy's default, `other rules` past [`MAX_RULES`]).
    pub rule: String,
    /// What it decides.
    pub behavior: Option<Behavior>,
    /// Per outcome.
    pub outcomes: BTreeMap<Outcome, Cell>,
}

/// The change at a glance: the calls the candidate would have treated otherwise.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Headline {
    /// Calls replayed.
    pub calls: u64,
    /// Sessions read.
    pub sessions: u64,
    /// Allowed unasked that were not: a person was asked, or a rule denied them.
    pub would_allow: u64,
    /// Denied that ran.
    pub would_deny_ran: u64,
    /// Put to a person that ran unasked.
    pub would_ask_ran_unasked: u64,
    /// Decided as they were.
    pub same: u64,
}

/// A dry run in progress.
#[derive(Debug)]
pub struct Trial {
    policy: Policy,
    rules: BTreeMap<String, RuleTally>,
    headline: Headline,
}

impl Trial {
    /// A dry run of `policy`.
    pub fn new(policy: Policy) -> Trial {
        Trial { policy, rules: BTreeMap::new(), headline: Headline::default() }
    }

    /// A session is read.
    pub fn session_read(&mut self) {
        self.headline.sessions += 1;
    }

    /// Decides `call` of session `session` again, in `context`, and counts it.
    pub fn add(&mut self, session: &str, call: &ReplayedCall, context: &MatchContext) {
        let decision = decide(&self.policy, call, context);
        self.count(decision, session, call);
    }

    /// [`Trial::add`] under `policy`: the candidate as a session ran it (bounded by the
    /// ceiling of the token that started it).
    pub fn add_under(
        &mut self,
        policy: &Policy,
        session: &str,
        call: &ReplayedCall,
        context: &MatchContext,
    ) {
        let decision = decide(policy, call, context);
        self.count(decision, session, call);
    }

    fn count(&mut self, decision: Decision, session: &str, call: &ReplayedCall) {
        let outcome = Outcome::of(&call.actual);
        let headline = &mut self.headline;
        headline.calls += 1;
        match (decision.behavior, outcome) {
            (Behavior::Allow, Outcome::RanUnasked)
            | (Behavior::Deny, Outcome::PolicyDenied | Outcome::PersonRefused)
            | (Behavior::Ask, Outcome::PersonAllowed | Outcome::PersonRefused) => {
                headline.same += 1
            }
            (
                Behavior::Allow,
                Outcome::PersonAllowed | Outcome::PersonRefused | Outcome::PolicyDenied,
            ) => {
                headline.would_allow += 1;
            }
            (Behavior::Deny, Outcome::RanUnasked | Outcome::PersonAllowed) => {
                headline.would_deny_ran += 1;
            }
            (Behavior::Ask, Outcome::RanUnasked) => headline.would_ask_ran_unasked += 1,
            _ => {}
        }
        let mut name = decision.rule.unwrap_or_else(|| "default".to_owned());
        if !self.rules.contains_key(&name) && self.rules.len() >= MAX_RULES {
            name = "other rules".to_owned();
        }
        let tally = self.rules.entry(name.clone()).or_insert_with(|| RuleTally {
            rule: name,
            behavior: Some(decision.behavior),
            ..RuleTally::default()
        });
        if tally.behavior != Some(decision.behavior) {
            // One name, two behaviors: `other rules`, or a rule whose block asks when unsure.
            tally.behavior = None;
        }
        let cell = tally.outcomes.entry(outcome).or_default();
        cell.count += 1;
        if cell.calls.len() < SAMPLES_PER_CELL {
            cell.calls.push(CallRef {
                session: session.to_owned(),
                seq: call.seq,
                tool_use_id: call.tool_use_id.clone(),
                tool: call.tool_name.clone(),
                summary: summary(&call.tool_name, &call.input),
                actual: call.actual.clone(),
            });
        }
    }

    /// The candidate policy.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The counts so far.
    pub fn headline(&self) -> Headline {
        self.headline
    }

    /// The report: the headline, and the rules, the busiest first.
    pub fn report(self) -> TrialReport {
        let mut rules: Vec<RuleTally> = self.rules.into_values().collect();
        rules.sort_by_key(|tally| {
            std::cmp::Reverse(tally.outcomes.values().map(|cell| cell.count).sum::<u64>())
        });
        TrialReport { headline: self.headline, rules }
    }
}

/// `policy`'s decision on `call`, knowing what the log knew of it.
fn decide(policy: &Policy, call: &ReplayedCall, context: &MatchContext) -> Decision {
    let facts = CallFacts { origin: call.origin.clone(), mcp_source: call.mcp_source.clone() };
    policy.decide_call(&call.tool_name, &call.input, context, &facts)
}

/// What a dry run found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrialReport {
    /// The change at a glance.
    pub headline: Headline,
    /// Per deciding rule.
    pub rules: Vec<RuleTally>,
}

/// A call's input in one line: a command, a path, a URL, or the JSON, cut to 160 characters.
pub fn summary(tool: &str, input: &serde_json::Value) -> String {
    let field = ["command", "file_path", "notebook_path", "path", "url", "pattern", "query"]
        .iter()
        .find_map(|key| input.get(*key).and_then(serde_json::Value::as_str));
    let text = match field {
        Some(text) => text.to_owned(),
        None if input.is_null() => tool.to_owned(),
        None => input.to_string(),
    };
    let line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() > 160 {
        format!("{}…", line.chars().take(159).collect::<String>())
    } else {
        line
    }
}
