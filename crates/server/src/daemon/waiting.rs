//! What waits for a person in a session, read from its one projection on every node.
//!
//! A session that runs here has its projection in memory, fed by the pump after each batch is
//! stored. A session another node of a fleet runs has it in the shared store only: this node
//! projects that session's log, keeping the projection and the last event it read, so that
//! each later read catches up from there (a page or two of new events, not the whole log).
//! Every face (REST, gRPC, the CLI client, a link's page, the web UI's view) asks here, so a
//! request that waits shows on every node, the same; none reads a session actor's snapshot.
//! The decisions read on the way are noted for links' pages, as the running node's pump notes
//! its own.

use super::*;

/// Projections of sessions that run on other nodes, by id, each with the last seq it read.
#[derive(Default)]
pub(super) struct RemoteViews {
    views: Mutex<HashMap<String, Arc<tokio::sync::Mutex<RemoteView>>>>,
}

#[derive(Default)]
struct RemoteView {
    viewer: crate::view::Viewer,
    seq: u64,
}

/// Remote sessions whose projection is kept; past that the oldest reads start over.
const REMOTE_VIEWS: usize = 1024;

impl RemoteViews {
    fn entry(&self, id: &str) -> Arc<tokio::sync::Mutex<RemoteView>> {
        let mut views = self.views.lock();
        if views.len() >= REMOTE_VIEWS && !views.contains_key(id) {
            // Rare (as many sessions running elsewhere at once): each is rebuilt when asked.
            views.clear();
        }
        views.entry(id.to_owned()).or_default().clone()
    }

    fn forget(&self, id: &str) {
        self.views.lock().remove(id);
    }
}

/// What a running session has under way for a person to see and act on: the permission
/// requests waiting, and the tasks running in the background.
#[derive(Debug, Default)]
pub struct UnderWay {
    /// Permission requests waiting for a person.
    pub pending_permissions: Vec<PendingPermission>,
    /// Tasks running in the background, each of which may be stopped alone.
    pub background_tasks: Vec<switchboard_session::projection::BackgroundTask>,
}

impl UnderWay {
    fn of(view: &switchboard_session::View) -> UnderWay {
        UnderWay {
            pending_permissions: view.pending_permissions.clone(),
            background_tasks: view.background_tasks.clone(),
        }
    }
}

impl Daemon {
    /// The permission requests waiting for a person in the session `record` names, as its
    /// projection says: here for a session this node runs, else from its log in the shared
    /// store while another (live) node runs it. None for a session that runs nowhere.
    pub async fn waiting(&self, record: &SessionRecord) -> Vec<PendingPermission> {
        self.under_way(record).await.pending_permissions
    }

    /// [`Daemon::waiting`], and the tasks running in the background, read the same way.
    pub async fn under_way(&self, record: &SessionRecord) -> UnderWay {
        if let Some(live) = self.live(&record.id) {
            return UnderWay::of(live.projector.lock().view());
        }
        // A parked session's request waits in its log, read as a remote session's is.
        let parked = record.state == RecordState::Parked;
        if !parked
            && (!self.runs_elsewhere(record) || record.state.is_final() || self.node_lost(record))
        {
            self.remote_views.forget(&record.id);
            return UnderWay::default();
        }
        let entry = self.remote_views.entry(&record.id);
        let mut view = entry.lock().await;
        loop {
            let page = match self.store.events_after(&record.id, view.seq, HISTORY_PAGE).await {
                Ok(page) => page,
                Err(error) => {
                    tracing::warn!(session = %record.id, %error, "cannot read a remote session's log for what waits");
                    break;
                }
            };
            let full = page.len() == HISTORY_PAGE;
            for event in &page {
                // Decisions are noted on the way, for the pages of links to its requests.
                view.viewer.apply(event, &mut |update| {
                    if let crate::view::ViewUpdate::Session(
                        switchboard_session::Update::PermissionDecided {
                            request_id,
                            behavior,
                            by,
                            ..
                        },
                    ) = update
                    {
                        let decision = crate::decisions::Decision { behavior, by };
                        self.decisions.note(&record.id, &request_id, decision);
                    }
                });
                view.seq = event.seq;
            }
            if !full {
                break;
            }
        }
        UnderWay::of(view.viewer.view())
    }

    /// What waits in session `id`, when this node has it live (its projection); `None`
    /// otherwise.
    pub fn waiting_here(&self, id: &str) -> Option<Vec<PendingPermission>> {
        let live = self.live(id)?;
        let projector = live.projector.lock();
        Some(projector.view().pending_permissions.clone())
    }

    /// [`Daemon::waiting`] for the session `id` (none when there is no such session).
    pub async fn waiting_in(&self, id: &str) -> Result<Vec<PendingPermission>, DaemonError> {
        Ok(match self.record(id).await? {
            Some(record) => self.waiting(&record).await,
            None => Vec::new(),
        })
    }
}
