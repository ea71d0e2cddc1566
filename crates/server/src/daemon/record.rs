//! Reading a session's record: its final states, what it has spent, its worktree and notify
//! route, and the public form every face shows (secrets hidden).

use super::*;

/// Who hears of a session: its policy's `[notify]`, its own channels (`notify` at create)
/// replacing the policy's.
pub(super) fn route_of(
    policy: &Policy,
    record: &SessionRecord,
) -> switchboard_session::NotifyRoute {
    let mut route = policy.notify.clone();
    if let Some(channels) = &record.launch.notify {
        route.channels = Some(channels.clone());
    }
    // A chain reaches only channels the session hears on; with none of them left, requests
    // go to those channels at once.
    if let Some(channels) = &route.channels {
        route.escalate.retain(|step| channels.contains(&step.channel));
    }
    route
}

/// A session's worktree, if it has one.
pub(super) fn worktree_of(record: &SessionRecord) -> Option<crate::worktree::Worktree> {
    record.launch.worktree.clone()
}

pub(super) fn current_record(live: &LiveSession) -> SessionRecord {
    live.record.lock().clone()
}

/// A relay status line for frontends (`{"type":"status","text":…}`, the agents-ui relay
/// protocol's own).
pub(crate) fn relay_status(text: &str) -> String {
    json!({"type": "status", "text": text}).to_string()
}

/// A session record as clients see it: how its CLI is launched, minus secrets
/// ([`Launch::public`]). The store keeps them, for a resume.
pub fn public_record(mut record: SessionRecord) -> SessionRecord {
    record.launch = record.launch.public();
    record
}

/// Whether the session is an interactive CLI in a person's terminal
/// ([`Daemon::attach_terminal`]).
pub fn is_terminal(record: &SessionRecord) -> bool {
    record.launch.transport == Some(TransportKind::Terminal)
}

/// Whether the session is a Claude Code session Switchboard did not start, followed through
/// its hooks ([`Daemon::external`]).
pub fn is_external(record: &SessionRecord) -> bool {
    record.launch.transport == Some(TransportKind::External)
}

/// A record's state for its CLI's `state`: `paused` while a budget holds a session that has
/// not ended.
pub fn record_state(state: SessionState, paused: bool) -> RecordState {
    match state {
        _ if paused && !state.is_final() => RecordState::Paused,
        SessionState::Starting => RecordState::Starting,
        SessionState::Idle => RecordState::Idle,
        SessionState::Working => RecordState::Working,
        SessionState::AwaitingPermission => RecordState::AwaitingPermission,
        SessionState::Compacting => RecordState::Compacting,
        SessionState::Exited => RecordState::Exited,
        SessionState::Crashed => RecordState::Crashed,
    }
}

/// A change to a session's record (`PATCH /api/sessions/{id}`): each field given is changed.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Amend {
    /// A new title.
    #[serde(default)]
    pub title: Option<String>,
    /// Put away, or back.
    #[serde(default)]
    pub archived: Option<bool>,
    /// A new budget (`null`: none).
    #[serde(default, deserialize_with = "crate::budget::some_or_null")]
    pub max_budget_usd: Option<Option<f64>>,
    /// A new cap on the usage windows' share (`null`: none).
    #[serde(default, deserialize_with = "crate::budget::some_or_null")]
    pub max_window_utilization: Option<Option<f64>>,
}

impl Amend {
    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        self.title.is_none()
            && self.archived.is_none()
            && self.max_budget_usd.is_none()
            && self.max_window_utilization.is_none()
    }
}
