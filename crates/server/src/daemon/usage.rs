//! The account's usage windows: an after-store observer notes the windows a session's
//! `rate_limit_event` lines report, read as the projection reads them ([`crate::usage`]), and
//! the daemon answers with the newest of each window. A report reaching the cap of a running
//! session (`max_window_utilization`) pauses it, as a budget does.

use super::observers::{Observer, Stored, Waiting};
use super::*;

impl Daemon {
    /// The account's usage windows as sessions last reported them.
    pub fn usage(&self) -> crate::usage::UsageReport {
        self.usage.report()
    }

    /// Pauses the running sessions whose cap on the usage windows (`max_window_utilization`)
    /// the latest report reaches, whichever session reported it.
    pub(super) fn check_window_caps(self: &Arc<Self>) {
        let capped: Vec<(String, Arc<LiveSession>)> = self
            .sessions
            .lock()
            .iter()
            .filter(|(_, live)| live.record.lock().launch.max_window_utilization.is_some())
            .map(|(id, live)| (id.clone(), live.clone()))
            .collect();
        for (id, live) in capped {
            if live.handle().is_some() {
                self.check_budget(&id, &live);
            }
        }
    }
}

/// Notes the windows of a batch that reported some.
pub(super) struct UsageWindows;

impl Observer for UsageWindows {
    fn stored<'a>(&'a self, daemon: &'a Arc<Daemon>, s: &'a Stored<'a>) -> Option<Waiting<'a>> {
        // Only what this batch reports: a window the session heard of long ago must not
        // displace another session's newer report of it.
        let mut reported = false;
        for event in s.batch {
            let SessionEvent::Line(line) = event else { continue };
            if let switchboard_protocol::Message::RateLimitEvent(event) = &*line.message {
                let windows =
                    switchboard_session::projection::usage_windows(&event.rate_limit_info);
                daemon.usage.note(s.id, windows);
                reported = true;
            }
        }
        if reported {
            daemon.check_window_caps();
        }
        None
    }
}
