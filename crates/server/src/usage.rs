//! The account's usage windows (`GET /api/usage`): what Claude Code last reported of each
//! (`rate_limit_event`, as the projection reads it into a session's view), whichever session
//! reported it. Kept in memory by a daemon of its own; on a database several daemons share,
//! in the fleet's shared `usage` document ([`crate::shared`]), so that every node answers the
//! same.

use std::sync::Arc;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use switchboard_session::projection::{UsageWindow, MAX_USAGE_WINDOWS};

use crate::shared::SharedDoc;

/// What `GET /api/usage` answers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UsageReport {
    /// Every window heard of, most recently reported first.
    pub windows: Vec<UsageWindow>,
    /// When the newest report came (Unix milliseconds); `None` before any.
    pub reported_at_ms: Option<u64>,
    /// The session that reported it last.
    pub reported_by: Option<String>,
}

impl UsageReport {
    /// `windows` as reported now by session `id`: each replaces the window of its name.
    fn take(&mut self, windows: &[UsageWindow], id: &str, now_ms: u64) {
        for window in windows.iter().rev() {
            self.windows.retain(|known| known.window != window.window);
            self.windows.insert(0, window.clone());
        }
        self.windows.truncate(MAX_USAGE_WINDOWS);
        self.reported_at_ms = Some(now_ms);
        self.reported_by = Some(id.to_owned());
    }
}

/// Reports a node has taken and not yet written to the fleet's document, at most this many
/// (older ones are superseded by newer reports of the same windows anyway).
const MAX_UNSENT: usize = 32;

/// A report taken here: the windows, the session, when.
#[derive(Clone)]
struct Taken {
    windows: Vec<UsageWindow>,
    id: String,
    at_ms: u64,
    /// Its place in this node's order of reports.
    number: u64,
}

/// Reports taken here and not yet written to the fleet's document.
#[derive(Default)]
struct Unsent {
    taken: Vec<Taken>,
    next: u64,
}

/// Where the report is kept: this daemon's, in memory; or the fleet's shared document, with
/// what this node took that its writer (a task of its own, so that no session's events wait on
/// the database) has not written yet.
pub struct Usage(Kept);

enum Kept {
    Here(Mutex<UsageReport>),
    Shared {
        doc: Arc<SharedDoc<UsageReport>>,
        unsent: Arc<Mutex<Unsent>>,
        wake: Arc<tokio::sync::Notify>,
    },
}

impl std::fmt::Debug for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Usage").finish_non_exhaustive()
    }
}

impl Usage {
    /// Kept in memory, or (`shared`: a database several daemons share) in its `usage`
    /// document, read again for other nodes' reports.
    pub async fn open(
        shared: Option<Arc<dyn switchboard_store::Documents>>,
    ) -> Result<Usage, String> {
        match shared {
            None => Ok(Usage(Kept::Here(Mutex::new(UsageReport::default())))),
            Some(store) => {
                let doc = SharedDoc::open(store, "usage", || Ok(UsageReport::default())).await?;
                doc.follow();
                let unsent: Arc<Mutex<Unsent>> = Arc::default();
                let wake = Arc::new(tokio::sync::Notify::new());
                tokio::spawn(write_shared(Arc::downgrade(&doc), unsent.clone(), wake.clone()));
                Ok(Usage(Kept::Shared { doc, unsent, wake }))
            }
        }
    }

    /// The report as it stands (in a fleet: the shared one, with what this node took since).
    pub fn report(&self) -> UsageReport {
        match &self.0 {
            Kept::Here(report) => report.lock().clone(),
            Kept::Shared { doc, unsent, .. } => {
                let mut report = doc.get();
                for taken in &unsent.lock().taken {
                    report.take(&taken.windows, &taken.id, taken.at_ms);
                }
                report
            }
        }
    }

    /// Session `id` reported `windows` (and only those: each replaces its window). Never
    /// waits: in a fleet the writer takes it to the shared document.
    pub fn note(&self, id: &str, windows: Vec<UsageWindow>) {
        let now = switchboard_store::now_ms();
        match &self.0 {
            Kept::Here(report) => report.lock().take(&windows, id, now),
            Kept::Shared { unsent, wake, .. } => {
                let mut unsent = unsent.lock();
                if unsent.taken.len() >= MAX_UNSENT {
                    unsent.taken.remove(0);
                }
                let number = unsent.next;
                unsent.next += 1;
                unsent.taken.push(Taken { windows, id: id.to_owned(), at_ms: now, number });
                wake.notify_one();
            }
        }
    }
}

/// Writes what this node took to the fleet's document, in the order taken, until the usage is
/// dropped with its daemon.
async fn write_shared(
    doc: std::sync::Weak<SharedDoc<UsageReport>>,
    unsent: Arc<Mutex<Unsent>>,
    wake: Arc<tokio::sync::Notify>,
) {
    loop {
        wake.notified().await;
        let Some(doc) = doc.upgrade() else { return };
        let taken: Vec<Taken> = unsent.lock().taken.clone();
        let Some(last) = taken.last().map(|taken| taken.number) else { continue };
        let written = doc
            .update(|report| {
                for taken in &taken {
                    report.take(&taken.windows, &taken.id, taken.at_ms);
                }
                Ok(())
            })
            .await;
        match written {
            // Written: off the list (more may have come meanwhile).
            Ok(()) => {
                let mut unsent = unsent.lock();
                unsent.taken.retain(|taken| taken.number > last);
                if !unsent.taken.is_empty() {
                    wake.notify_one();
                }
            }
            // Kept for the next report to try again; the report reads them meanwhile.
            Err(error) => tracing::warn!(%error, "the usage windows are not shared yet"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(name: &str, used: f64) -> UsageWindow {
        UsageWindow {
            window: name.into(),
            status: "allowed".into(),
            utilization: Some(used),
            resets_at: Some(1),
        }
    }

    #[test]
    fn the_newest_report_of_each_window_first() {
        let mut report = UsageReport::default();
        report.take(&[window("five_hour", 0.1), window("seven_day", 0.2)], "a", 10);
        report.take(&[window("five_hour", 0.5)], "b", 20);
        let names: Vec<&str> = report.windows.iter().map(|w| w.window.as_str()).collect();
        assert_eq!(names, ["five_hour", "seven_day"]);
        assert_eq!(report.windows[0].utilization, Some(0.5));
        assert_eq!((report.reported_at_ms, report.reported_by.as_deref()), (Some(20), Some("b")));
        let many: Vec<UsageWindow> = (0..20).map(|n| window(&format!("w{n}"), 0.0)).collect();
        report.take(&many, "c", 30);
        assert_eq!(report.windows.len(), MAX_USAGE_WINDOWS);
        assert_eq!(report.windows[0].window, "w0", "in the order reported");
    }
}
