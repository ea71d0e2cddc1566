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
    if let Some(channels) = record.config.get("notify").and_then(|value| {
        serde_json::from_value::<Option<Vec<String>>>(value.clone()).ok().flatten()
    }) {
        route.channels = Some(channels);
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
    serde_json::from_value(record.config.get("worktree")?.clone()).ok()
}

pub(super) fn current_record(live: &LiveSession) -> SessionRecord {
    live.record.lock().clone()
}

/// A relay status line for frontends (`{"type":"status","text":…}`, the agents-ui relay
/// protocol's own).
pub(crate) fn relay_status(text: &str) -> String {
    json!({"type": "status", "text": text}).to_string()
}

/// A session record as clients see it: how its CLI is launched ([`Launch`]), minus secrets. The
/// values of `env` are replaced (the names stay), and so are those of each inline MCP server's
/// `env` and `headers` (which carry API keys). The store keeps them, for a resume.
pub fn public_record(mut record: SessionRecord) -> SessionRecord {
    if let Some(Value::Object(env)) = record.config.get_mut("env") {
        hide_values(env);
    }
    if let Some(Value::Array(configs)) = record.config.get_mut("mcp_config") {
        for config in configs {
            let Some(text) = config.as_str() else { continue };
            // A path to a file stays as it is; inline JSON is shown without its secrets.
            let Ok(mut parsed) = serde_json::from_str::<Value>(text) else { continue };
            if let Some(Value::Object(servers)) = parsed.get_mut("mcpServers") {
                for server in servers.values_mut() {
                    for key in ["env", "headers"] {
                        if let Some(Value::Object(values)) = server.get_mut(key) {
                            hide_values(values);
                        }
                    }
                }
            }
            *config = Value::from(parsed.to_string());
        }
    }
    record
}

pub(super) fn hide_values(map: &mut serde_json::Map<String, Value>) {
    for value in map.values_mut() {
        *value = Value::from("(hidden)");
    }
}

/// Whether the session is an interactive CLI in a person's terminal
/// ([`Daemon::attach_terminal`]).
pub fn is_terminal(record: &SessionRecord) -> bool {
    record.config["transport"] == "terminal"
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
