//! What the dashboards hear, typed: a frame of `/api/events`, a `SessionChange` of gRPC's
//! `WatchSessions` (mapped from these in one place, `grpc::session_change`), and what the nodes
//! of a fleet tell each other. The daemon sends [`DashboardChange`]s on one broadcast channel;
//! every face and the CLI client read the same types.

use serde::{Deserialize, Serialize};

/// A change the dashboards hear: a frame of `/api/events`, a `SessionChange` of gRPC's
/// `WatchSessions`, and what the nodes of a fleet tell each other. One tagged set, by `event`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DashboardChange {
    /// What changed.
    #[serde(flatten)]
    pub change: Change,
    /// The node that made it, for a change another node of a fleet told this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_node: Option<String>,
}

/// What changed, by `event`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Change {
    /// A session was made (its public record).
    SessionCreated {
        /// The session, secrets hidden.
        session: switchboard_store::SessionRecord,
    },
    /// A session's record changed: what the list shows of it.
    SessionChanged(SessionChanged),
    /// A session was deleted.
    SessionDeleted {
        /// Its id.
        session_id: String,
    },
    /// A session's events could not be stored for too long: it was stopped.
    SessionFailed {
        /// Its id.
        session_id: String,
        /// Why.
        error: String,
    },
    /// A session's events cannot be stored now; the daemon retries.
    StoreFailing {
        /// Its id.
        session_id: String,
        /// Why.
        error: String,
    },
    /// The store takes the session's events again.
    StoreRecovered {
        /// Its id.
        session_id: String,
    },
    /// The nodes this one finds lost changed (each node says so for itself; never shared).
    NodesChanged {
        /// The lost nodes' names.
        lost: Vec<String>,
    },
    /// The schedules or triggers changed (one added, removed or paused; a run started,
    /// skipped, queued or held): `GET /api/schedules` answers anew. Each node says so for
    /// itself, as it reads the shared book.
    SchedulesChanged {},
}

/// What the list shows of a session whose record changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionChanged {
    /// Its id.
    pub session_id: String,
    /// Its state.
    pub state: switchboard_store::RecordState,
    /// Its cost, as its CLI reports it.
    pub cost_usd: f64,
    /// How many permission requests wait.
    pub pending_permissions: usize,
    /// Its model.
    pub model: Option<String>,
    /// The CLI's session id.
    pub claude_session_id: Option<String>,
    /// Its permission mode.
    pub permission_mode: Option<String>,
    /// Its title.
    pub title: Option<String>,
    /// Put away by a person.
    pub archived: bool,
    /// `--sdk-url`: since when the CLI's socket is down (Unix milliseconds), while it is.
    pub disconnected_since_ms: Option<u64>,
    /// The node that runs it.
    pub node: Option<String>,
    /// Why it is paused, if it is.
    pub paused: Option<String>,
}

impl Change {
    /// Its `event` name.
    pub fn event(&self) -> &'static str {
        match self {
            Change::SessionCreated { .. } => "session_created",
            Change::SessionChanged(_) => "session_changed",
            Change::SessionDeleted { .. } => "session_deleted",
            Change::SessionFailed { .. } => "session_failed",
            Change::StoreFailing { .. } => "store_failing",
            Change::StoreRecovered { .. } => "store_recovered",
            Change::NodesChanged { .. } => "nodes_changed",
            Change::SchedulesChanged {} => "schedules_changed",
        }
    }

    /// The session it is about, if any.
    pub fn session_id(&self) -> Option<&str> {
        match self {
            Change::SessionCreated { session } => Some(&session.id),
            Change::SessionChanged(changed) => Some(&changed.session_id),
            Change::SessionDeleted { session_id }
            | Change::SessionFailed { session_id, .. }
            | Change::StoreFailing { session_id, .. }
            | Change::StoreRecovered { session_id } => Some(session_id),
            Change::NodesChanged { .. } | Change::SchedulesChanged {} => None,
        }
    }

    /// Why, for a failure.
    pub fn error(&self) -> Option<&str> {
        match self {
            Change::SessionFailed { error, .. } | Change::StoreFailing { error, .. } => Some(error),
            _ => None,
        }
    }
}

impl From<Change> for DashboardChange {
    fn from(change: Change) -> DashboardChange {
        DashboardChange { change, from_node: None }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_change_is_one_flat_object_tagged_by_its_event_and_reads_back() {
        let changed = DashboardChange {
            change: Change::SessionChanged(SessionChanged {
                session_id: "s".into(),
                state: switchboard_store::RecordState::AwaitingPermission,
                cost_usd: 0.25,
                pending_permissions: 1,
                model: Some("m".into()),
                claude_session_id: None,
                permission_mode: None,
                title: None,
                archived: false,
                disconnected_since_ms: None,
                node: Some("a".into()),
                paused: None,
            }),
            from_node: Some("a".into()),
        };
        let value = serde_json::to_value(&changed).unwrap();
        assert_eq!(value["event"], "session_changed");
        assert_eq!(value["state"], "awaiting_permission");
        assert_eq!(value["pending_permissions"], 1);
        assert_eq!(value["from_node"], "a");
        assert!(value["paused"].is_null() && value.get("paused").is_some(), "{value}");
        assert_eq!(serde_json::from_value::<DashboardChange>(value).unwrap(), changed);
        let deleted: DashboardChange =
            serde_json::from_value(json!({"event": "session_deleted", "session_id": "x"})).unwrap();
        assert_eq!(deleted.change.event(), "session_deleted");
        assert_eq!(deleted.change.session_id(), Some("x"));
        assert_eq!(deleted.from_node, None);
        let text = serde_json::to_string(&deleted).unwrap();
        assert_eq!(text, r#"{"event":"session_deleted","session_id":"x"}"#);
        assert!(serde_json::from_value::<DashboardChange>(json!({"event": "nope"})).is_err());
    }
}
