//! A session's tool calls read back from its log, each with what really decided it: a policy
//! rule, a person (who), a timeout, the CLI on its own. What a dry run of another policy is
//! held against ([`crate::policy::trial`]).
//!
//! Pure: stored events in, calls out. The lines are read by the projection, as for every face
//! ([`Projector`]); this reads its updates: each tool call's block, the requests put to a
//! person, the decisions. A call is given back once its decision is read; one whose decision
//! never comes (the log ends first: a crash, a stop) is given back undecided by
//! [`Replay::finish`]. Memory is bounded by the calls open at once, not by the log's length.

use std::collections::HashMap;

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::event::{DecidedBy, SessionEvent};
use crate::origin::TurnOrigin;
use crate::policy::Behavior;
use crate::projection::{Block, Projector, Update};

/// The most calls held open (seen, not yet decided) at once; past it the oldest is given back
/// undecided.
pub const MAX_OPEN_CALLS: usize = 4096;

/// One tool call as the log tells it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplayedCall {
    /// The call's id.
    pub tool_use_id: String,
    /// The tool.
    pub tool_name: String,
    /// Its input, as the model wrote it.
    pub input: Value,
    /// The log's sequence number of the event that showed it.
    pub seq: u64,
    /// When that event was stored (Unix milliseconds).
    pub at_ms: u64,
    /// Who started its turn, when the log says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub origin: Option<TurnOrigin>,
    /// An MCP tool's server's source, when the log says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mcp_source: Option<String>,
    /// What decided it.
    pub actual: Actual,
}

/// What really decided a call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Actual {
    /// A policy rule (`None`: the policy's default).
    Policy {
        /// Allow or deny.
        behavior: Behavior,
        /// The rule.
        rule: Option<String>,
    },
    /// A person, afar.
    Person {
        /// Allow or deny.
        behavior: Behavior,
        /// Who.
        who: String,
    },
    /// A person at the session's own terminal.
    Terminal {
        /// Allow or deny.
        behavior: Behavior,
    },
    /// Asked, and nobody answered in time: denied.
    Timeout,
    /// Asked, and the CLI withdrew the request, or went away with it: not run.
    Withdrawn,
    /// The CLI ran it on its own, the policy raising no objection.
    Cli,
    /// No decision is in the log.
    Undecided,
}

impl Actual {
    /// Whether the call ran.
    pub fn ran(&self) -> bool {
        match self {
            Actual::Policy { behavior, .. }
            | Actual::Person { behavior, .. }
            | Actual::Terminal { behavior } => *behavior == Behavior::Allow,
            Actual::Cli => true,
            Actual::Timeout | Actual::Withdrawn | Actual::Undecided => false,
        }
    }

    /// Whether a person was asked.
    pub fn asked(&self) -> bool {
        matches!(
            self,
            Actual::Person { .. } | Actual::Terminal { .. } | Actual::Timeout | Actual::Withdrawn
        )
    }

    fn of(behavior: Behavior, by: &DecidedBy) -> Actual {
        match by {
            DecidedBy::Policy { rule } => Actual::Policy { behavior, rule: rule.clone() },
            DecidedBy::Person { who } => Actual::Person { behavior, who: who.clone() },
            DecidedBy::Terminal => Actual::Terminal { behavior },
            DecidedBy::Timeout => Actual::Timeout,
            DecidedBy::Cancelled | DecidedBy::LinkClosed => Actual::Withdrawn,
            DecidedBy::Cli => Actual::Cli,
        }
    }
}

/// What a request put to a person said of its call.
#[derive(Debug, Clone, Default)]
struct Asked {
    origin: Option<TurnOrigin>,
    mcp_source: Option<String>,
}

/// A decision read before its call's block.
#[derive(Debug, Clone)]
struct Early {
    actual: Actual,
    origin: Option<TurnOrigin>,
}

/// Reads one session's events in order.
#[derive(Debug)]
pub struct Replay {
    projector: Projector,
    open: IndexMap<String, ReplayedCall>,
    asked: HashMap<String, Asked>,
    early: IndexMap<String, Early>,
    /// Calls given back lately: a block or decision of theirs that comes again is not new.
    done: indexmap::IndexSet<String>,
    settled: Vec<ReplayedCall>,
}

impl Default for Replay {
    fn default() -> Self {
        Replay::new()
    }
}

impl Replay {
    /// A replay of a session from its first event.
    pub fn new() -> Replay {
        Replay {
            projector: Projector::without_partial_inputs(),
            open: IndexMap::new(),
            asked: HashMap::new(),
            early: IndexMap::new(),
            done: indexmap::IndexSet::new(),
            settled: Vec::new(),
        }
    }

    /// The session's working directory, as its CLI said.
    pub fn cwd(&self) -> Option<&str> {
        self.projector.view().cwd.as_deref()
    }

    /// Reads event `seq`, stored at `at_ms`; gives back the calls it decided.
    pub fn read(&mut self, seq: u64, at_ms: u64, event: &SessionEvent) -> Vec<ReplayedCall> {
        let mut updates = Vec::new();
        self.projector.apply(event, &mut |update| updates.push(update));
        for update in updates {
            self.update(seq, at_ms, update);
        }
        std::mem::take(&mut self.settled)
    }

    /// The calls still open when the log ends: undecided.
    pub fn finish(mut self) -> Vec<ReplayedCall> {
        let open = std::mem::take(&mut self.open);
        open.into_values().collect()
    }

    fn update(&mut self, seq: u64, at_ms: u64, update: Update) {
        match update {
            Update::Block { block: Block::ToolUse { tool_use_id, name, input, .. }, .. } => {
                if self.done.contains(&tool_use_id) {
                    return;
                }
                if let Some(known) = self.open.get_mut(&tool_use_id) {
                    // The CLI's final line confirms what the stream built.
                    known.input = input;
                    return;
                }
                let mcp_source = self.source_of(&name);
                let mut call = ReplayedCall {
                    tool_use_id: tool_use_id.clone(),
                    tool_name: name,
                    input,
                    seq,
                    at_ms,
                    origin: None,
                    mcp_source,
                    actual: Actual::Undecided,
                };
                if let Some(early) = self.early.shift_remove(&tool_use_id) {
                    call.actual = early.actual;
                    call.origin = early.origin;
                    self.settle(call);
                    return;
                }
                if self.open.len() >= MAX_OPEN_CALLS {
                    if let Some((_, oldest)) = self.open.shift_remove_index(0) {
                        self.settle(oldest);
                    }
                }
                self.open.insert(tool_use_id, call);
            }
            Update::PermissionAsked(pending) => {
                let Some(id) = pending.tool_use_id.clone() else { return };
                let origin = pending
                    .origin
                    .clone()
                    .or_else(|| pending.started_by.as_deref().and_then(TurnOrigin::of_started_by));
                let mcp_source = pending.hints.mcp_server.as_ref().map(|s| s.source.clone());
                if self.asked.len() >= MAX_OPEN_CALLS {
                    self.asked.clear();
                }
                self.asked.insert(id, Asked { origin, mcp_source });
            }
            Update::PermissionDecided { tool_use_id: Some(id), behavior, by, origin, .. } => {
                if self.done.contains(&id) {
                    return;
                }
                let actual = Actual::of(behavior, &by);
                let asked = self.asked.remove(&id).unwrap_or_default();
                let origin = origin.or(asked.origin);
                match self.open.shift_remove(&id) {
                    Some(mut call) => {
                        call.actual = actual;
                        call.origin = origin;
                        if asked.mcp_source.is_some() {
                            call.mcp_source = asked.mcp_source;
                        }
                        self.settle(call);
                    }
                    None => {
                        // A decision for a call not yet shown (the first decision stands).
                        if self.early.len() >= MAX_OPEN_CALLS {
                            self.early.shift_remove_index(0);
                        }
                        self.early.entry(id).or_insert(Early { actual, origin });
                    }
                }
            }
            _ => {}
        }
    }

    fn settle(&mut self, call: ReplayedCall) {
        if self.done.len() >= MAX_OPEN_CALLS {
            self.done.shift_remove_index(0);
        }
        self.done.insert(call.tool_use_id.clone());
        self.settled.push(call);
    }

    /// Where an MCP tool's server was configured, as the session's `init` said.
    fn source_of(&self, tool_name: &str) -> Option<String> {
        let servers: Vec<(String, &str)> = self
            .projector
            .view()
            .mcp_servers
            .iter()
            .filter_map(|known| {
                let source = known.source.as_deref()?;
                Some((crate::policy::when::server_in_tool_names(&known.name), source))
            })
            .collect();
        crate::policy::when::source_of_tool(
            tool_name,
            servers.iter().map(|(name, source)| (name.as_str(), *source)),
        )
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::{json, Value};
    use switchboard_protocol::Message;

    use super::*;
    use crate::event::{LineDirection, PendingPermission, WireLine};
    use crate::policy::trial::{Outcome, Trial};
    use crate::policy::{MatchContext, Policy};

    fn cli(value: Value) -> SessionEvent {
        let raw = value.to_string();
        let message = Message::decode_str(&raw).expect("a protocol line");
        SessionEvent::Line(WireLine {
            direction: LineDirection::FromCli,
            raw: Arc::from(raw.as_str()),
            message: Arc::new(message),
        })
    }

    fn init() -> SessionEvent {
        cli(
            json!({"type":"system","subtype":"init","session_id":"s","cwd":"/work/p","tools":["Bash"],
            "mcp_servers":[{"name":"gh hub","status":"connected","source":"project"}]}),
        )
    }

    fn call(id: &str, tool: &str, input: Value) -> SessionEvent {
        cli(
            json!({"type":"assistant","message":{"id":format!("m-{id}"),"type":"message","role":"assistant",
            "model":"m","content":[{"type":"tool_use","id":id,"name":tool,"input":input}]},
            "parent_tool_use_id":null,"session_id":"s","uuid":format!("a-{id}")}),
        )
    }

    fn decided(id: &str, tool: &str, behavior: Behavior, by: DecidedBy) -> SessionEvent {
        SessionEvent::decided(&format!("r-{id}"), tool, behavior, by, String::new())
            .with_tool_use_id(Some(id.to_owned()))
    }

    fn asked(id: &str, tool: &str, started_by: &str) -> SessionEvent {
        SessionEvent::PermissionRequested(PendingPermission {
            request_id: format!("r-{id}"),
            tool_name: tool.to_owned(),
            input: json!({}),
            tool_use_id: Some(id.to_owned()),
            suggestions: Vec::new(),
            reason: String::new(),
            agent_id: None,
            timeout_secs: 600,
            asked_at_ms: 0,
            always_allows: String::new(),
            started_by: Some(started_by.to_owned()),
            origin: None,
            rule: None,
            cli_reason: None,
            hints: Default::default(),
            parked_at_ms: None,
            park_expires_at_ms: None,
        })
    }

    fn replay(events: &[SessionEvent]) -> Vec<ReplayedCall> {
        let mut replay = Replay::new();
        let mut calls = Vec::new();
        for (seq, event) in events.iter().enumerate() {
            calls.extend(replay.read(seq as u64 + 1, 0, event));
        }
        calls.extend(replay.finish());
        calls
    }

    #[test]
    fn each_call_comes_back_once_with_what_decided_it() {
        let person = DecidedBy::Person { who: "alice, token admin (web UI)".into() };
        let calls = replay(&[
            init(),
            call("t1", "Bash", json!({"command": "ls"})),
            decided("t1", "Bash", Behavior::Allow, DecidedBy::Cli),
            call("t2", "Bash", json!({"command": "rm -rf x"})),
            asked("t2", "Bash", "alice, token admin (web UI)"),
            decided("t2", "Bash", Behavior::Deny, person.clone()),
            // A second decision of the same call is not a second call.
            decided("t2", "Bash", Behavior::Deny, DecidedBy::Cancelled),
            // A decision before its call's block.
            decided(
                "t3",
                "mcp__gh_hub__issue",
                Behavior::Deny,
                DecidedBy::Policy { rule: Some("mcp__*".into()) },
            )
            .with_origin(Some(TurnOrigin::Schedule)),
            call("t3", "mcp__gh_hub__issue", json!({"title": "x"})),
            // The log ends before this one is decided.
            call("t4", "Edit", json!({"file_path": "/work/p/a"})),
        ]);
        let ids: Vec<&str> = calls.iter().map(|c| c.tool_use_id.as_str()).collect();
        assert_eq!(ids, ["t1", "t2", "t3", "t4"]);
        assert_eq!(calls[0].actual, Actual::Cli);
        assert_eq!(calls[0].seq, 2);
        assert_eq!(
            calls[1].actual,
            Actual::Person { behavior: Behavior::Deny, who: "alice, token admin (web UI)".into() }
        );
        assert_eq!(calls[1].origin, Some(TurnOrigin::Person), "read from the recorded sentence");
        assert_eq!(calls[2].origin, Some(TurnOrigin::Schedule));
        assert_eq!(
            calls[2].mcp_source.as_deref(),
            Some("project"),
            "from init, by the tools' name"
        );
        assert_eq!(calls[3].actual, Actual::Undecided);
        assert!(calls[0].actual.ran() && !calls[1].actual.ran() && calls[1].actual.asked());
    }

    #[test]
    fn a_trial_counts_each_call_by_the_rule_that_would_decide_it() {
        let calls = replay(&[
            init(),
            call("t1", "Bash", json!({"command": "cargo test"})),
            decided("t1", "Bash", Behavior::Allow, DecidedBy::Cli),
            call("t2", "Bash", json!({"command": "git push"})),
            decided("t2", "Bash", Behavior::Allow, DecidedBy::Person { who: "bob".into() }),
            call("t3", "Read", json!({"file_path": "/work/p/.env"})),
            decided("t3", "Read", Behavior::Allow, DecidedBy::Cli),
            call("t4", "Bash", json!({"command": "cargo build"})),
            decided("t4", "Bash", Behavior::Deny, DecidedBy::Timeout),
        ]);
        let policy = Policy::from_toml(
            "[permissions]\nallow = [\"Bash(cargo:*)\"]\ndeny = [\"Read(.env)\"]\nask = [\"Bash(git push:*)\"]",
        )
        .unwrap();
        let mut trial = Trial::new(policy);
        let context = MatchContext { cwd: "/work/p".into(), home: None };
        for call in &calls {
            trial.add("s1", call, &context);
        }
        trial.session_read();
        let report = trial.report();
        let headline = report.headline;
        assert_eq!((headline.calls, headline.sessions), (4, 1));
        assert_eq!(headline.would_allow, 1, "cargo build, which timed out");
        assert_eq!(headline.would_deny_ran, 1, "the .env read that ran");
        assert_eq!(headline.would_ask_ran_unasked, 0);
        assert_eq!(headline.same, 2);
        let cargo = report.rules.iter().find(|rule| rule.rule == "Bash(cargo:*)").unwrap();
        assert_eq!(cargo.behavior, Some(Behavior::Allow));
        assert_eq!(cargo.outcomes[&Outcome::RanUnasked].count, 1);
        assert_eq!(cargo.outcomes[&Outcome::PersonRefused].calls[0].summary, "cargo build");
        let env = report.rules.iter().find(|rule| rule.rule == "Read(.env)").unwrap();
        assert_eq!(env.outcomes[&Outcome::RanUnasked].calls[0].tool_use_id, "t3");
    }

    #[test]
    fn open_calls_are_bounded() {
        let mut replay = Replay::new();
        let mut given = 0;
        for n in 0..(MAX_OPEN_CALLS + 10) {
            given += replay
                .read(n as u64, 0, &call(&format!("t{n}"), "Bash", json!({"command": "x"})))
                .len();
        }
        assert_eq!(given, 10, "the oldest given back undecided");
        assert_eq!(replay.finish().len(), MAX_OPEN_CALLS);
    }
}
