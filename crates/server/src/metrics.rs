//! Prometheus metrics (`GET /metrics`, docs/observability.md), named by Prometheus's
//! conventions under `switchboard_`.
//!
//! Counters and histograms are fed as things happen: by the after-store observer
//! (`daemon::measures`, what the projection read of each stored batch: turns, tool calls,
//! decisions, cost), by the pump (each append's and each hand-over's time), by subscriptions
//! (a subscriber that fell behind) and by the notifier (each delivery's outcome). Gauges
//! (sessions by state, the fleet's nodes) are read off the daemon when scraped.
//!
//! A label value that comes from a session (a tool's name, a project's directory, a model, a
//! node) is someone else's text: each is cut to [`MAX_LABEL_CHARS`], and past
//! [`MAX_LABEL_VALUES`] distinct values of one label the rest count as `other`, so that no
//! session can grow the daemon's series without bound.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicU64;

use parking_lot::Mutex;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};
use switchboard_session::projection::Block;
use switchboard_session::Update;

/// The most distinct values one label takes; past it, `other`.
pub const MAX_LABEL_VALUES: usize = 200;

/// The longest label value kept, in characters.
pub const MAX_LABEL_CHARS: usize = 200;

/// Requests asked of a person whose asking time is kept until they are decided (for the
/// approval wait); past it, a wait is not measured.
const MAX_ASKED: usize = 10_000;

/// The content type of what [`Metrics::render`] writes.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolLabel {
    tool: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DecisionLabels {
    tool: String,
    decision: String,
    by: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CostLabels {
    model: String,
    project: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NotificationLabels {
    channel: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NodeLabel {
    node: String,
}

/// Every metric the daemon keeps, and the registry that writes them.
pub struct Metrics {
    registry: Registry,
    sessions: Family<StateLabel, Gauge>,
    turns: Family<OutcomeLabel, Counter>,
    tool_calls: Family<ToolLabel, Counter>,
    decisions: Family<DecisionLabels, Counter>,
    approval_wait: Histogram,
    cost: Family<CostLabels, Counter<f64, AtomicU64>>,
    store_append: Histogram,
    publish: Histogram,
    subscriber_lagged: Counter,
    notifications: Family<NotificationLabels, Counter>,
    node_up: Family<NodeLabel, Gauge>,
    node_silent: Family<NodeLabel, Gauge<f64, AtomicU64>>,
    /// The values each bounded label has taken, by label.
    seen: Mutex<HashMap<&'static str, HashSet<String>>>,
    /// When each request now asked of a person was asked (Unix ms), by request id.
    asked: Mutex<HashMap<String, u64>>,
    /// Held by a scrape while it sets the gauges and writes (two at once would each clear
    /// what the other set).
    scraping: Mutex<()>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

/// Seconds, from half a millisecond to about half a minute (store and hand-over times).
fn quick_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.000_5, 2.0, 17))
}

impl Metrics {
    /// Every metric at zero, registered.
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("switchboard");
        let sessions = Family::<StateLabel, Gauge>::default();
        registry.register(
            "sessions",
            "Sessions this node holds live (running, or waiting with no process), by state",
            sessions.clone(),
        );
        let turns = Family::<OutcomeLabel, Counter>::default();
        registry.register(
            "turns",
            "Turns of a main conversation that ended, by outcome (success, error, interrupted)",
            turns.clone(),
        );
        let tool_calls = Family::<ToolLabel, Counter>::default();
        registry.register("tool_calls", "Tool calls the model made, by tool", tool_calls.clone());
        let decisions = Family::<DecisionLabels, Counter>::default();
        registry.register(
            "permission_decisions",
            "Permission decisions, by tool, decision (allow, deny) and who decided (policy, person, cli, terminal, timeout, cancelled, link_closed)",
            decisions.clone(),
        );
        let approval_wait = Histogram::new(exponential_buckets(0.5, 2.0, 18));
        registry.register_with_unit(
            "approval_wait",
            "How long a request asked of a person waited for the person's answer",
            Unit::Seconds,
            approval_wait.clone(),
        );
        let cost = Family::<CostLabels, Counter<f64, AtomicU64>>::default();
        registry.register(
            "cost_usd",
            "What turns cost, in US dollars as the CLI reported them, by the session's model and project directory",
            cost.clone(),
        );
        let store_append = quick_buckets();
        registry.register_with_unit(
            "store_append",
            "How long appending a batch of a session's events to the store took (retries included)",
            Unit::Seconds,
            store_append.clone(),
        );
        let publish = quick_buckets();
        registry.register_with_unit(
            "publish",
            "How long a stored batch took to reach every observer and the session's subscribers' queue",
            Unit::Seconds,
            publish.clone(),
        );
        let subscriber_lagged = Counter::default();
        registry.register(
            "subscriber_lagged",
            "Times a subscriber fell behind the live tail and read on from the store",
            subscriber_lagged.clone(),
        );
        let notifications = Family::<NotificationLabels, Counter>::default();
        registry.register(
            "notification_deliveries",
            "Notification delivery attempts, by channel and outcome (delivered, retry, refused, gone)",
            notifications.clone(),
        );
        let node_up = Family::<NodeLabel, Gauge>::default();
        registry.register(
            "fleet_node_up",
            "Each node of the fleet this node hears: 1 when heard from, 0 when lost",
            node_up.clone(),
        );
        let node_silent = Family::<NodeLabel, Gauge<f64, AtomicU64>>::default();
        registry.register_with_unit(
            "fleet_node_silence",
            "How long since each node of the fleet was last heard from",
            Unit::Seconds,
            node_silent.clone(),
        );
        Metrics {
            registry,
            sessions,
            turns,
            tool_calls,
            decisions,
            approval_wait,
            cost,
            store_append,
            publish,
            subscriber_lagged,
            notifications,
            node_up,
            node_silent,
            seen: Mutex::default(),
            asked: Mutex::default(),
            scraping: Mutex::default(),
        }
    }

    /// `value` as label `label` may hold it: cut to [`MAX_LABEL_CHARS`], escaped as the
    /// OpenMetrics text says (`\\`, `\"`, `\n`; other control characters are spaces: the
    /// encoder writes a label value as it is given), and `other` once the label has taken
    /// [`MAX_LABEL_VALUES`] others.
    fn bounded(&self, label: &'static str, value: &str) -> String {
        let mut escaped = String::with_capacity(value.len());
        for c in value.chars().take(MAX_LABEL_CHARS) {
            match c {
                '\\' => escaped.push_str("\\\\"),
                '"' => escaped.push_str("\\\""),
                '\n' => escaped.push_str("\\n"),
                c if c.is_control() => escaped.push(' '),
                c => escaped.push(c),
            }
        }
        let value = escaped;
        let mut seen = self.seen.lock();
        let values = seen.entry(label).or_default();
        if values.contains(&value) {
            return value;
        }
        if values.len() >= MAX_LABEL_VALUES {
            return "other".to_owned();
        }
        values.insert(value.clone());
        value
    }

    /// Counts what the projection told of one stored batch; `model` and `project` are the
    /// session's (for its cost).
    pub fn measured(&self, measured: &Measured, model: Option<&str>, project: &str) {
        for outcome in &measured.turns {
            self.turns.get_or_create(&OutcomeLabel { outcome: (*outcome).to_owned() }).inc();
        }
        for tool in &measured.tool_calls {
            self.tool_calls.get_or_create(&ToolLabel { tool: self.bounded("tool", tool) }).inc();
        }
        if !measured.asked.is_empty() {
            let mut waiting = self.asked.lock();
            for (request, at) in &measured.asked {
                if waiting.len() >= MAX_ASKED {
                    // Requests decided elsewhere (another node, a parked one answered after a
                    // restart) are never removed here: the older half goes.
                    let mut times: Vec<u64> = waiting.values().copied().collect();
                    times.sort_unstable();
                    let cut = times[times.len() / 2];
                    waiting.retain(|_, asked| *asked > cut);
                }
                waiting.insert(request.clone(), *at);
            }
        }
        for decision in &measured.decisions {
            let labels = DecisionLabels {
                tool: self.bounded("tool", &decision.tool),
                decision: decision.decision.to_owned(),
                by: decision.by.to_owned(),
            };
            self.decisions.get_or_create(&labels).inc();
            let asked_at = self.asked.lock().remove(&decision.request_id);
            // Only a person's answer from afar: a terminal's allow is logged when the tool
            // has run, so its time would hold the tool's too.
            if let (Some(asked_at), "person") = (asked_at, decision.by) {
                let waited = decision.decided_at_ms.saturating_sub(asked_at);
                self.approval_wait.observe(waited as f64 / 1000.0);
            }
        }
        if measured.cost_usd > 0.0 {
            let (model, project) = (model.unwrap_or("unknown"), project);
            // The pairs are bounded too, not only each label: else up to 200 × 200 series.
            let pair = self.bounded("model and project", &format!("{model}\n{project}"));
            let labels = if pair == "other" {
                CostLabels { model: "other".into(), project: "other".into() }
            } else {
                CostLabels {
                    model: self.bounded("model", model),
                    project: self.bounded("project", project),
                }
            };
            self.cost.get_or_create(&labels).inc_by(measured.cost_usd);
        }
    }

    /// An append of a batch took `seconds`.
    pub fn stored(&self, seconds: f64) {
        self.store_append.observe(seconds);
    }

    /// A stored batch took `seconds` to reach its observers and subscribers.
    pub fn published(&self, seconds: f64) {
        self.publish.observe(seconds);
    }

    /// A subscriber fell behind the live tail.
    pub fn lagged(&self) {
        self.subscriber_lagged.inc();
    }

    /// A notification's delivery to `channel` ended as `outcome`.
    pub fn notified(&self, channel: &str, outcome: &'static str) {
        let labels = NotificationLabels {
            channel: self.bounded("channel", channel),
            outcome: outcome.into(),
        };
        self.notifications.get_or_create(&labels).inc();
    }

    /// Every metric in the OpenMetrics text format ([`CONTENT_TYPE`]), the gauges set first
    /// from `gauges`: sessions by state (every state given is written, at 0 too), and the
    /// fleet's nodes (each, whether it is lost, and how long it has been silent).
    pub fn render(&self, gauges: Gauges<'_>) -> String {
        let _one = self.scraping.lock();
        self.sessions.clear();
        for (state, count) in gauges.sessions {
            self.sessions.get_or_create(&StateLabel { state: state.to_owned() }).set(count);
        }
        self.node_up.clear();
        self.node_silent.clear();
        for (node, lost, silent) in gauges.nodes {
            let label = NodeLabel { node: self.bounded("node", node) };
            self.node_up.get_or_create(&label).set(i64::from(!lost));
            self.node_silent.get_or_create(&label).set(silent);
        }
        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}

/// What a scrape reads off the daemon ([`Metrics::render`]).
#[derive(Debug, Default)]
pub struct Gauges<'a> {
    /// Sessions by state.
    pub sessions: Vec<(&'static str, i64)>,
    /// Each node: its name, whether it is lost, seconds since it was heard.
    pub nodes: Vec<(&'a str, bool, f64)>,
}

/// What the projection told of one stored batch that the metrics count, gathered as the pump
/// projects it (only what counts is kept: a text delta costs nothing here).
#[derive(Debug, Default)]
pub struct Measured {
    /// Each main-conversation turn that ended, by outcome.
    turns: Vec<&'static str>,
    /// Each tool call's tool.
    tool_calls: Vec<String>,
    /// Requests asked of a person: id and when (Unix ms).
    asked: Vec<(String, u64)>,
    decisions: Vec<MeasuredDecision>,
    /// What the batch's turns (a subagent's too) cost.
    cost_usd: f64,
}

#[derive(Debug)]
struct MeasuredDecision {
    request_id: String,
    tool: String,
    decision: &'static str,
    by: &'static str,
    decided_at_ms: u64,
}

impl Measured {
    /// Notes `update`, if it is one the metrics count.
    pub fn note(&mut self, update: &Update) {
        match update {
            Update::TurnEnded { parent_tool_use_id, interrupted, failed, cost_usd, .. } => {
                if cost_usd.is_finite() && *cost_usd > 0.0 {
                    self.cost_usd += cost_usd;
                }
                if parent_tool_use_id.is_none() {
                    self.turns.push(match (interrupted, failed) {
                        (true, _) => "interrupted",
                        (false, true) => "error",
                        (false, false) => "success",
                    });
                }
            }
            Update::Block { block: Block::ToolUse { name, rebuilt, .. }, .. } if !rebuilt => {
                self.tool_calls.push(name.clone());
            }
            Update::PermissionAsked(pending) => {
                self.asked.push((pending.request_id.clone(), pending.asked_at_ms));
            }
            Update::PermissionDecided {
                request_id,
                tool_name,
                behavior,
                by,
                decided_at_ms,
                ..
            } => {
                self.decisions.push(MeasuredDecision {
                    request_id: request_id.clone(),
                    tool: tool_name.clone(),
                    decision: behavior.as_str(),
                    by: by.kind(),
                    decided_at_ms: *decided_at_ms,
                });
            }
            _ => {}
        }
    }

    /// Whether there is nothing to count.
    pub fn is_empty(&self) -> bool {
        self.turns.is_empty()
            && self.tool_calls.is_empty()
            && self.asked.is_empty()
            && self.decisions.is_empty()
            && self.cost_usd <= 0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_label_from_sessions_is_cut_and_bounded() {
        let metrics = Metrics::new();
        let mut measured = Measured::default();
        for n in 0..MAX_LABEL_VALUES + 50 {
            measured.tool_calls.push(format!("mcp__server__tool_{n}"));
        }
        measured.tool_calls.push("x".repeat(1000));
        metrics.measured(&measured, None, "/p");
        // Someone else's text, escaped: it cannot end the value or add a series.
        let other = Metrics::new();
        let mut hostile = Measured::default();
        hostile.tool_calls.push("a\"} 1e9\nswitchboard_x{y=\"\\".into());
        other.measured(&hostile, None, "/p");
        let text = other.render(Gauges::default());
        assert!(
            text.contains(
                "switchboard_tool_calls_total{tool=\"a\\\"} 1e9\\nswitchboard_x{y=\\\"\\\\\"} 1"
            ),
            "{text}"
        );
        let text = metrics.render(Gauges::default());
        let series =
            text.lines().filter(|line| line.starts_with("switchboard_tool_calls_total{")).count();
        assert_eq!(series, MAX_LABEL_VALUES + 1, "the first 200 and other");
        assert!(text.contains("switchboard_tool_calls_total{tool=\"other\"} 51"), "{text}");
        assert!(!text.contains(&"x".repeat(MAX_LABEL_CHARS + 1)));
    }

    /// Every series the Grafana dashboard in the repository asks for is one the daemon
    /// writes (a renamed metric would leave a panel empty).
    #[test]
    fn the_dashboard_asks_only_for_metrics_that_exist() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/grafana/switchboard.json");
        let dashboard: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        // A family with no series is not written: one of each.
        let metrics = Metrics::new();
        let mut measured = Measured::default();
        measured.turns.push("success");
        measured.tool_calls.push("Bash".into());
        measured.decisions.push(MeasuredDecision {
            request_id: "r".into(),
            tool: "Bash".into(),
            decision: "deny",
            by: "policy",
            decided_at_ms: 1,
        });
        measured.cost_usd = 0.5;
        metrics.measured(&measured, Some("m"), "/p");
        metrics.notified("ops", "delivered");
        metrics.lagged();
        let text =
            metrics.render(Gauges { sessions: vec![("idle", 1)], nodes: vec![("n1", false, 0.5)] });
        let families: Vec<(&str, &str)> = text
            .lines()
            .filter_map(|line| line.strip_prefix("# TYPE "))
            .filter_map(|line| line.split_once(' '))
            .collect();
        let exists = |name: &str| {
            families.iter().any(|(family, kind)| {
                let suffixes: &[&str] = match *kind {
                    "counter" => &["_total"],
                    "histogram" => &["_bucket", "_sum", "_count"],
                    _ => &[""],
                };
                suffixes.iter().any(|suffix| name == format!("{family}{suffix}"))
            })
        };
        let mut asked = 0;
        for panel in dashboard["panels"].as_array().unwrap() {
            for target in panel["targets"].as_array().unwrap() {
                let expr = target["expr"].as_str().unwrap();
                for (at, _) in expr.match_indices("switchboard_") {
                    let name: String = expr[at..]
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    assert!(exists(&name), "panel {} asks for {name}", panel["title"]);
                    asked += 1;
                }
            }
        }
        assert!(asked >= 10, "{asked}");
    }

    #[test]
    fn a_persons_wait_is_measured_from_the_asking() {
        let metrics = Metrics::new();
        let mut asked = Measured::default();
        asked.asked.push(("r1".into(), 1_000));
        metrics.measured(&asked, None, "/p");
        let mut decided = Measured::default();
        decided.decisions.push(MeasuredDecision {
            request_id: "r1".into(),
            tool: "Bash".into(),
            decision: "allow",
            by: "person",
            decided_at_ms: 4_000,
        });
        decided.cost_usd = 0.25;
        metrics.measured(&decided, Some("claude-sonnet-4-5"), "/work/app");
        let text = metrics.render(Gauges::default());
        assert!(text.contains("switchboard_approval_wait_seconds_sum 3.0"), "{text}");
        assert!(text.contains("switchboard_approval_wait_seconds_count 1"), "{text}");
        assert!(
            text.contains(
                "switchboard_permission_decisions_total{tool=\"Bash\",decision=\"allow\",by=\"person\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "switchboard_cost_usd_total{model=\"claude-sonnet-4-5\",project=\"/work/app\"} 0.25"
            ),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"));
    }
}
