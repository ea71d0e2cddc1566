//! The traces' part of the daemon ([`crate::traces`]): the after-store observer that hands
//! the spans each stored batch ended to the exporter. The pump's projection feeds each
//! session's tracer only while traces are sent, so a daemon without them pays a look.

use super::*;

/// Sends the spans a stored batch ended.
pub(super) struct Tracing;

impl Observer for Tracing {
    fn stored<'a>(&'a self, daemon: &'a Arc<Daemon>, s: &'a Stored<'a>) -> Option<Waiting<'a>> {
        if let (Some(traces), false) = (&daemon.traces, s.traced.is_empty()) {
            traces.export(&s.traced);
        }
        None
    }
}

impl Daemon {
    /// Sends the spans that ended and wait, now (a test's look, before the next interval).
    pub async fn flush_traces(&self) {
        if let Some(traces) = &self.traces {
            traces.flush().await;
        }
    }
}
