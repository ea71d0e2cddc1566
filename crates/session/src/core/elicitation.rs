//! An MCP server asking the person for input (`elicitation`, 2.1.100 on): held for a person
//! like a permission request, so that every face shows it and answers it (the web UI's form,
//! a link, a notification), and ended like one (a timeout, the CLI's exit) — never left
//! pending. No policy answers it: only a person can say what to fill in. It waits as a
//! [`PendingPermission`] of the tool [`ELICITATION_TOOL`], its input the server's question; an
//! allow's `updated_input` is the content sent back (`accept`), a deny is `decline`.

use super::*;
use switchboard_protocol::control::{ElicitationRequest, ElicitationResult};

/// The tool name an elicitation waits under (no tool of Claude Code's has it).
pub const ELICITATION_TOOL: &str = "McpElicitation";

/// The largest content sent back, as JSON.
const MAX_CONTENT_BYTES: usize = 64 * 1024;

/// The largest question kept for a person (its message, form and address, as JSON): a larger
/// one is declined at once, so that no server's question grows every face's copy of the
/// session (the log keeps the CLI's line as it came).
pub(crate) const MAX_QUESTION_BYTES: usize = 32 * 1024;

impl SessionCore {
    pub(super) fn on_elicitation(
        &mut self,
        request_id: &str,
        request: &ElicitationRequest,
        effects: &mut Vec<Effect>,
    ) {
        let mut input = serde_json::Map::new();
        input.insert("server".into(), Value::from(request.mcp_server_name.clone()));
        input.insert("message".into(), Value::from(request.message.clone()));
        input.insert(
            "mode".into(),
            Value::from(request.mode.clone().unwrap_or_else(|| "form".into())),
        );
        for (key, value) in [
            ("url", request.url.clone().map(Value::from)),
            ("requested_schema", request.requested_schema.clone()),
            ("property_order", request.property_order.clone().map(Value::from)),
            ("description", request.description.clone().map(Value::from)),
        ] {
            if let Some(value) = value {
                input.insert(key.into(), value);
            }
        }
        let size = serde_json::to_vec(&input).map_or(usize::MAX, |bytes| bytes.len());
        if size > MAX_QUESTION_BYTES {
            let result = ElicitationResult { action: "decline".into(), ..Default::default() };
            self.write(Message::from(ControlResponse::success(request_id, &result)), effects);
            return;
        }
        let hints = PermissionHints {
            requires_user_interaction: true,
            default_to_no: true,
            suppress_always_allow_rule: true,
            title: request.title.clone().or_else(|| request.display_name.clone()),
            mcp_server: Some(McpServer {
                name: request.mcp_server_name.clone(),
                source: "mcp".to_owned(),
            }),
            ..PermissionHints::default()
        }
        .settled();
        let asked = CanUseToolRequest {
            tool_name: ELICITATION_TOOL.to_owned(),
            input: Value::Object(input),
            ..CanUseToolRequest::default()
        };
        let pending = PendingPermission {
            request_id: request_id.to_owned(),
            tool_name: ELICITATION_TOOL.to_owned(),
            input: asked.input.clone(),
            tool_use_id: None,
            suggestions: Vec::new(),
            reason: format!("The MCP server {} asks: {}", request.mcp_server_name, request.message),
            agent_id: None,
            timeout_secs: self.policy.ask_timeout.as_secs(),
            asked_at_ms: now_ms(),
            always_allows: String::new(),
            started_by: self.snapshot.sender.clone(),
            origin: self.open_turns.origin().cloned(),
            rule: None,
            cli_reason: None,
            hints,
            parked_at_ms: None,
            park_expires_at_ms: None,
        };
        self.elicitations.insert(request_id.to_owned());
        self.asked.insert(
            request_id.to_owned(),
            AskedPermission { pending: pending.clone(), request: asked, via: Via::CanUseTool },
        );
        self.set_state(SessionState::AwaitingPermission, effects);
        effects.push(Effect::Emit(SessionEvent::PermissionRequested(pending)));
        effects.push(Effect::StartTimer(
            Timer::Permission(request_id.to_owned()),
            self.policy.ask_timeout,
        ));
    }

    /// A person's answer to an elicitation: an allow sends its `updated_input` as the content
    /// (checked against the server's schema first; the request still waits when it does not
    /// fit), a deny declines.
    pub(super) fn answer_elicitation(
        &mut self,
        request_id: &str,
        answer: PermissionAnswer,
        who: &str,
    ) -> Result<Vec<Effect>, AnswerError> {
        let Some(asked) = self.asked.get(request_id) else {
            return Err(AnswerError::Unknown(request_id.to_owned()));
        };
        if answer.remember || answer.updated_permissions.is_some() {
            return Err(AnswerError::NoStandingRule(request_id.to_owned()));
        }
        let result = match answer.behavior {
            AnswerBehavior::Allow => {
                let schema = asked.request.input.get("requested_schema");
                let content = content_of(answer.updated_input.as_ref(), schema)
                    .map_err(AnswerError::BadContent)?;
                ElicitationResult { action: "accept".into(), content, ..Default::default() }
            }
            AnswerBehavior::Deny => {
                ElicitationResult { action: "decline".into(), ..Default::default() }
            }
        };
        let Some(asked) = self.asked.shift_remove(request_id) else {
            return Err(AnswerError::Unknown(request_id.to_owned()));
        };
        self.elicitations.remove(request_id);
        let mut effects = Vec::new();
        let accepted = result.action == "accept";
        self.write(Message::from(ControlResponse::success(request_id, &result)), &mut effects);
        let (behavior, message) = if accepted {
            (Behavior::Allow, format!("answered by {who}"))
        } else {
            (Behavior::Deny, answer.message.clone().unwrap_or_else(|| format!("declined by {who}")))
        };
        effects.push(Effect::Emit(SessionEvent::decided(
            request_id,
            &asked.request.tool_name,
            behavior,
            DecidedBy::Person { who: who.to_owned() },
            message,
        )));
        self.after_permission_resolved(request_id, &mut effects);
        Ok(effects)
    }

    /// An elicitation that ends without a person's answer (a timeout, a withdrawn request) is
    /// declined; true when `request_id` was one (then nothing else is written for it).
    pub(super) fn decline_elicitation(
        &mut self,
        request_id: &str,
        effects: &mut Vec<Effect>,
    ) -> bool {
        if !self.elicitations.remove(request_id) {
            return false;
        }
        let result = ElicitationResult { action: "decline".into(), ..Default::default() };
        self.write(Message::from(ControlResponse::success(request_id, &result)), effects);
        true
    }
}

/// The content an answer sends back: a JSON object whose keys the schema has, with each value
/// of its type (and among its `enum`), every `required` key there. No schema (URL mode): no
/// content.
fn content_of(
    given: Option<&Value>,
    schema: Option<&Value>,
) -> Result<Option<serde_json::Map<String, Value>>, String> {
    let properties = schema.and_then(|schema| schema.get("properties")).and_then(Value::as_object);
    let Some(properties) = properties else {
        return match given {
            None => Ok(None),
            Some(Value::Object(object)) if object.is_empty() => Ok(None),
            Some(_) => Err("this request asks for nothing to be filled in".to_owned()),
        };
    };
    let object = match given {
        Some(Value::Object(object)) => object.clone(),
        None => serde_json::Map::new(),
        Some(_) => {
            return Err(
                "the answer (updated_input) must be an object of the fields asked for".to_owned()
            )
        }
    };
    if serde_json::to_vec(&object).map_or(0, |bytes| bytes.len()) > MAX_CONTENT_BYTES {
        return Err(format!("the answer is larger than {MAX_CONTENT_BYTES} bytes"));
    }
    for (key, value) in &object {
        let Some(field) = properties.get(key) else {
            return Err(format!("the request asks for no field {key:?}"));
        };
        let fits = match field.get("type").and_then(Value::as_str) {
            Some("string") => value.is_string(),
            Some("number") => value.is_number(),
            Some("integer") => value.is_i64() || value.is_u64(),
            Some("boolean") => value.is_boolean(),
            _ => true,
        };
        if !fits {
            return Err(format!("{key} must be a {}", field["type"].as_str().unwrap_or("value")));
        }
        if let Some(choices) = field.get("enum").and_then(Value::as_array) {
            if !choices.contains(value) {
                return Err(format!("{key} must be one of {}", Value::Array(choices.clone())));
            }
        }
    }
    let required = schema.and_then(|schema| schema.get("required")).and_then(Value::as_array);
    for key in required.into_iter().flatten().filter_map(Value::as_str) {
        if !object.contains_key(key) {
            return Err(format!("{key} is required"));
        }
    }
    Ok(Some(object))
}
