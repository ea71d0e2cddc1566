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
        // Every state, at 0 too: a daemon with nothing live still shows (its `instance`).
        let mut sessions: Vec<(&'static str, i64)> =
            RecordState::ALL.iter().map(|state| (state.as_str(), 0)).collect();
        for live in self.sessions.lock().values() {
            let state = live.record.lock().state.as_str();
            if let Some(count) = sessions.iter_mut().find(|(named, _)| *named == state) {
                count.1 += 1;
            }
        }
        let nodes = self.bus().map(|bus| bus.nodes()).unwrap_or_default();
        self.metrics.render(crate::metrics::Gauges {
            sessions,
            nodes: nodes
                .iter()
                .map(|node| (node.info.node.as_str(), node.lost, node.silent_ms as f64 / 1000.0))
                .collect(),
        })
    }
}
