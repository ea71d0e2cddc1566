//! The account's usage windows: an after-store observer notes the windows a session's
//! `rate_limit_event` lines report, read as the projection reads them ([`crate::usage`]), and
//! the daemon answers with the newest of each window.

use super::observers::{Observer, Stored, Waiting};
use super::*;

impl Daemon {
    /// The account's usage windows as sessions last reported them.
    pub fn usage(&self) -> crate::usage::UsageReport {
        self.usage.report()
    }
}

/// Notes the windows of a batch that reported some.
pub(super) struct UsageWindows;

impl Observer for UsageWindows {
    fn stored<'a>(&'a self, daemon: &'a Arc<Daemon>, s: &'a Stored<'a>) -> Option<Waiting<'a>> {
        // Only what this batch reports: a window the session heard of long ago must not
        // displace another session's newer report of it.
        for event in s.batch {
            let SessionEvent::Line(line) = event else { continue };
            if let switchboard_protocol::Message::RateLimitEvent(reported) = &*line.message {
                let windows =
                    switchboard_session::projection::usage_windows(&reported.rate_limit_info);
                daemon.usage.note(s.id, windows);
            }
        }
        None
    }
}
