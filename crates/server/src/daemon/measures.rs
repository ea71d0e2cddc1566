//! The metrics' part of the daemon (`crate::metrics`): the after-store observer that counts
//! what the projection read of each stored batch, and the scrape, which reads the gauges off
//! the daemon (its live sessions by state, the fleet's nodes) and writes every metric.

use super::*;

/// Counts each stored batch's turns, tool calls, decisions and cost.
pub(super) struct Measures;

impl Observer for Measures {
    fn stored<'a>(&'a self, daemon: &'a Arc<Daemon>, s: &'a Stored<'a>) -> Option<Waiting<'a>> {
        if s.measured.is_empty() {
            return None;
        }
        let (model, project) = {
            let record = s.live.record.lock();
            (record.model.clone(), record.cwd.clone())
        };
        daemon.metrics.measured(s.measured, model.as_deref(), &project);
        None
    }
}

impl Daemon {
    /// The daemon's metrics.
    pub fn metrics(&self) -> &crate::metrics::Metrics {
        &self.metrics
    }

    /// Every metric, its gauges read now, in the OpenMetrics text format
    /// ([`crate::metrics::CONTENT_TYPE`]).
    pub fn scrape(&self) -> String {
        let mut counts: HashMap<&'static str, i64> = HashMap::new();
        for live in self.sessions.lock().values() {
            *counts.entry(live.record.lock().state.as_str()).or_default() += 1;
        }
        self.metrics.set_sessions(counts);
        if let Some(bus) = self.bus() {
            let nodes = bus.nodes();
            self.metrics.set_nodes(
                nodes.iter().map(|node| {
                    (node.info.node.as_str(), node.lost, node.silent_ms as f64 / 1000.0)
                }),
            );
        }
        self.metrics.render()
    }
}
