//! The questions and requests a person may put to a session's CLI beyond a prompt (its usage,
//! its context, a queued prompt dropped, a background task stopped, the rules and hooks in
//! force), each with the first Claude Code version that answers it, so that an older CLI gets
//! a clear refusal naming that version instead of a control request it never answers (2.1.37
//! answers no unknown subtype at all).

use serde::{Deserialize, Serialize};
use switchboard_protocol::control::{
    CancelAsyncMessageRequest, ControlRequestPayload, GetContextUsageRequest,
    GetHooksListingRequest, GetUsageRequest, ListPermissionRulesRequest, RenameSessionRequest,
    StopTaskRequest,
};
use switchboard_protocol::MessagePriority;

/// One of them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "control", rename_all = "snake_case")]
pub enum CliControl {
    /// The session's cost and the plan's usage windows (`get_usage`).
    Usage,
    /// The context window, by what fills it (`get_context_usage`, `summary`).
    ContextUsage,
    /// Drop the queued prompt with this `uuid` (`cancel_async_message`).
    CancelMessage {
        /// The prompt's `uuid`.
        uuid: String,
    },
    /// Stop one background task (`stop_task`).
    StopTask {
        /// The task's id.
        task_id: String,
    },
    /// Name the session (`rename_session`, as a person in the host did).
    Rename {
        /// The title.
        title: String,
    },
    /// The permission rules in force (`list_permission_rules`).
    PermissionRules,
    /// The hooks configured (`get_hooks_listing`).
    Hooks,
}

/// The longest id or title passed on.
const MAX_ARGUMENT_CHARS: usize = 200;

impl CliControl {
    /// A question the faces take by name (`usage`, `context`, `permission-rules`, `hooks`).
    pub fn question(name: &str) -> Option<CliControl> {
        Some(match name {
            "usage" => CliControl::Usage,
            "context" => CliControl::ContextUsage,
            "permission-rules" => CliControl::PermissionRules,
            "hooks" => CliControl::Hooks,
            _ => return None,
        })
    }

    /// The control request's subtype.
    pub fn subtype(&self) -> &'static str {
        match self {
            CliControl::Usage => "get_usage",
            CliControl::ContextUsage => "get_context_usage",
            CliControl::CancelMessage { .. } => "cancel_async_message",
            CliControl::StopTask { .. } => "stop_task",
            CliControl::Rename { .. } => "rename_session",
            CliControl::PermissionRules => "list_permission_rules",
            CliControl::Hooks => "get_hooks_listing",
        }
    }

    /// The first pinned version that answers it (older ones refuse it as unsupported, or never
    /// answer: found with the pinned CLIs, docs/cli-drift.md).
    pub fn since(&self) -> &'static str {
        match self {
            CliControl::ContextUsage
            | CliControl::CancelMessage { .. }
            | CliControl::StopTask { .. } => "2.1.100",
            CliControl::Usage => "2.1.250",
            CliControl::Rename { .. } | CliControl::PermissionRules | CliControl::Hooks => {
                "2.1.330"
            }
        }
    }

    /// Whether it is fit to send: its ids and title short, printable, not empty.
    pub fn check(&self) -> Result<(), String> {
        let (what, text) = match self {
            CliControl::CancelMessage { uuid } => ("uuid", uuid),
            CliControl::StopTask { task_id } => ("task_id", task_id),
            CliControl::Rename { title } => ("title", title),
            _ => return Ok(()),
        };
        if text.trim().is_empty()
            || text.chars().count() > MAX_ARGUMENT_CHARS
            || text.chars().any(char::is_control)
        {
            return Err(format!(
                "{what} must be 1 to {MAX_ARGUMENT_CHARS} characters with no control characters"
            ));
        }
        Ok(())
    }

    /// Whether a CLI of `version` answers it: `Err` names the version that does. An unknown
    /// version (a CLI that has not said yet) may be asked.
    pub fn supported_by(&self, version: Option<&str>) -> Result<(), String> {
        needs(self.subtype(), self.since(), version)
    }

    /// The control request.
    pub fn payload(&self) -> ControlRequestPayload {
        match self {
            CliControl::Usage => ControlRequestPayload::GetUsage(GetUsageRequest {
                skip_behaviors: Some(true),
                ..Default::default()
            }),
            CliControl::ContextUsage => {
                ControlRequestPayload::GetContextUsage(GetContextUsageRequest {
                    detail: Some("summary".to_owned()),
                    ..Default::default()
                })
            }
            CliControl::CancelMessage { uuid } => {
                ControlRequestPayload::CancelAsyncMessage(CancelAsyncMessageRequest {
                    message_uuid: uuid.clone(),
                    ..Default::default()
                })
            }
            CliControl::StopTask { task_id } => ControlRequestPayload::StopTask(StopTaskRequest {
                task_id: task_id.clone(),
                ..Default::default()
            }),
            CliControl::Rename { title } => {
                ControlRequestPayload::RenameSession(RenameSessionRequest {
                    title: title.clone(),
                    source: Some("host".to_owned()),
                    ..Default::default()
                })
            }
            CliControl::PermissionRules => {
                ControlRequestPayload::ListPermissionRules(ListPermissionRulesRequest::default())
            }
            CliControl::Hooks => {
                ControlRequestPayload::GetHooksListing(GetHooksListingRequest::default())
            }
        }
    }
}

/// Whether a CLI of `version` does what a prompt's `priority` asks: `Err` names the version
/// that does. `next` is what every version does with a prompt that names none; `now` (steer)
/// and `later` (a turn of its own) from 2.1.120: 2.1.100 ends the running turn with an error
/// instead of steering it, and 2.1.37 and older ignore the field (docs/protocol.md).
pub fn priority_supported_by(
    priority: &MessagePriority,
    version: Option<&str>,
) -> Result<(), String> {
    match priority {
        MessagePriority::Next => Ok(()),
        MessagePriority::Now | MessagePriority::Later => {
            needs(&format!("priority {priority}"), "2.1.120", version)
        }
        MessagePriority::Other(other) => {
            Err(format!("priority is now, next or later, not {other:?}"))
        }
    }
}

/// `what` needs Claude Code `since`: fine for an unknown version (a CLI that has not said yet).
fn needs(what: &str, since: &str, version: Option<&str>) -> Result<(), String> {
    let (Some(version), Some(since_numbers)) = (version.and_then(numbers), numbers(since)) else {
        return Ok(());
    };
    if version >= since_numbers {
        return Ok(());
    }
    Err(format!(
        "{what} needs Claude Code {since} or newer; this session runs {}",
        version.iter().map(u64::to_string).collect::<Vec<_>>().join(".")
    ))
}

/// Whether Claude Code `version` is `since` or newer (`None` for a version that does not read
/// as one).
pub fn version_at_least(version: &str, since: &str) -> Option<bool> {
    Some(numbers(version)? >= numbers(since)?)
}

/// `2.1.330` → `[2, 1, 330]` (a suffix after the numbers, `2.1.330-beta`, is left out).
fn numbers(version: &str) -> Option<Vec<u64>> {
    let core = version.trim().split(['-', '+', ' ']).next()?;
    let parts: Option<Vec<u64>> = core.split('.').map(|part| part.parse().ok()).collect();
    parts.filter(|parts| !parts.is_empty() && parts.len() <= 4)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_compare_by_their_numbers() {
        assert_eq!(version_at_least("2.1.330", "2.1.330"), Some(true));
        assert_eq!(version_at_least("2.1.332 (Claude Code)", "2.1.330"), Some(true));
        assert_eq!(version_at_least("2.1.99", "2.1.100"), Some(false));
        assert_eq!(version_at_least("1.0.112", "2.1.100"), Some(false));
        assert_eq!(version_at_least("soon", "2.1.100"), None);
    }

    #[test]
    fn an_older_cli_is_refused_by_name_a_newer_or_unknown_one_asked() {
        assert!(CliControl::Usage.supported_by(Some("2.1.250")).is_ok());
        assert!(CliControl::Usage.supported_by(Some("2.1.332")).is_ok());
        assert!(CliControl::Usage.supported_by(None).is_ok());
        assert_eq!(
            CliControl::Usage.supported_by(Some("2.1.120")).unwrap_err(),
            "get_usage needs Claude Code 2.1.250 or newer; this session runs 2.1.120"
        );
        assert!(CliControl::Hooks.supported_by(Some("2.1.37")).is_err());
        assert!(CliControl::ContextUsage.supported_by(Some("10.0.0")).is_ok());
        assert!(CliControl::ContextUsage.supported_by(Some("1.0.112")).is_err());
    }

    #[test]
    fn a_priority_is_refused_by_a_cli_that_would_not_do_it() {
        assert!(priority_supported_by(&MessagePriority::Next, Some("1.0.112")).is_ok());
        assert!(priority_supported_by(&MessagePriority::Now, Some("2.1.120")).is_ok());
        assert!(priority_supported_by(&MessagePriority::Later, None).is_ok());
        assert_eq!(
            priority_supported_by(&MessagePriority::Now, Some("2.1.100")).unwrap_err(),
            "priority now needs Claude Code 2.1.120 or newer; this session runs 2.1.100"
        );
        assert!(priority_supported_by(&MessagePriority::Other("soon".into()), None).is_err());
    }

    #[test]
    fn arguments_are_checked_and_the_wire_form_is_the_clis() {
        assert!(CliControl::StopTask { task_id: "".into() }.check().is_err());
        assert!(CliControl::Rename { title: "a\nb".into() }.check().is_err());
        assert!(CliControl::Rename { title: "x".repeat(201) }.check().is_err());
        assert!(CliControl::CancelMessage { uuid: "u-1".into() }.check().is_ok());
        let control: CliControl =
            serde_json::from_str(r#"{"control":"stop_task","task_id":"t1"}"#).unwrap();
        let line = switchboard_protocol::control::ControlRequest::new("r1", control.payload());
        assert_eq!(
            serde_json::to_value(&line).unwrap(),
            serde_json::json!({"type":"control_request","request_id":"r1","request":{"subtype":"stop_task","task_id":"t1"}})
        );
    }
}
