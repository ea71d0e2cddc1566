//! The API's one error type: `{"error": {"code", "message"}}` with the right status.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};

use crate::daemon::DaemonError;

/// An error answer.
#[derive(Debug)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// A stable machine-readable code (`not_found`, `invalid_request`, ...).
    pub code: &'static str,
    /// A sentence for people.
    pub message: String,
}

impl ApiError {
    /// 400.
    pub fn invalid(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            code: "invalid_request",
            message: message.into(),
        }
    }

    /// 401.
    pub fn unauthorized() -> Self {
        ApiError {
            status: StatusCode::UNAUTHORIZED,
            code: "unauthorized",
            message: "a valid token is required (Authorization: Bearer TOKEN, ?token=, or the switchboard_token cookie)".into(),
        }
    }

    /// 401 from a route with a token of its own (a CLI's slot, the relay's `/`): it takes the
    /// token in the `Authorization` header only.
    pub fn unauthorized_bearer(whose: &str) -> Self {
        ApiError {
            status: StatusCode::UNAUTHORIZED,
            code: "unauthorized",
            message: format!("{whose} is required (Authorization: Bearer TOKEN)"),
        }
    }

    /// 403.
    pub fn forbidden(message: impl Into<String>) -> Self {
        ApiError { status: StatusCode::FORBIDDEN, code: "forbidden", message: message.into() }
    }

    /// 404.
    pub fn not_found(message: impl Into<String>) -> Self {
        ApiError { status: StatusCode::NOT_FOUND, code: "not_found", message: message.into() }
    }

    /// 500: the daemon failed, not the request.
    pub fn internal(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            code: "internal",
            message: message.into(),
        }
    }

    /// 503: the daemon cannot answer now; the same request may work later.
    pub fn unavailable(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            code: "unavailable",
            message: message.into(),
        }
    }

    /// 409.
    pub fn conflict(code: &'static str, message: impl Into<String>) -> Self {
        ApiError { status: StatusCode::CONFLICT, code, message: message.into() }
    }
}

impl From<crate::push::PushError> for ApiError {
    fn from(error: crate::push::PushError) -> Self {
        match error {
            crate::push::PushError::Invalid(message) => ApiError::invalid(message),
            crate::push::PushError::File(message) => {
                tracing::error!("push subscriptions: {message}");
                ApiError::internal("the push subscriptions could not be saved")
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let answer =
            ErrorAnswer { error: ErrorBody { code: self.code.into(), message: self.message } };
        (self.status, Json(answer)).into_response()
    }
}

/// An error code another node answered with, as one of this API's (`remote_error` for a code
/// this build does not know).
fn known_code(code: &str) -> &'static str {
    const CODES: &[&str] = &[
        "invalid_request",
        "unauthorized",
        "forbidden",
        "not_found",
        "not_running",
        "already_running",
        "other_node",
        "already_answered",
        "no_standing_rule",
        "worktree",
        "cannot_rewind",
        "cli_too_old",
        "held_elsewhere",
        "parked",
        "unsettled",
        "budget_reached",
        "cli_refused",
        "store_error",
        "shutting_down",
        "unavailable",
        "max_running",
        "too_many_subscribers",
        "timeout",
        "internal",
    ];
    CODES.iter().find(|known| **known == code).copied().unwrap_or("remote_error")
}

impl From<DaemonError> for ApiError {
    fn from(error: DaemonError) -> Self {
        use switchboard_session::{AnswerError, SessionError};
        match &error {
            DaemonError::Invalid(_) => ApiError::invalid(error.to_string()),
            DaemonError::NotFound(_) | DaemonError::Missing(_) => {
                ApiError::not_found(error.to_string())
            }
            DaemonError::Conflict(_) => ApiError::conflict("conflict", error.to_string()),
            DaemonError::NotRunning(_) => ApiError::conflict("not_running", error.to_string()),
            DaemonError::AlreadyRunning(_) => {
                ApiError::conflict("already_running", error.to_string())
            }
            DaemonError::Session(SessionError::Answer(AnswerError::AlreadyAnswered(_))) => {
                ApiError::conflict("already_answered", error.to_string())
            }
            DaemonError::Session(SessionError::Answer(AnswerError::Unknown(_))) => {
                ApiError::not_found(error.to_string())
            }
            DaemonError::Session(SessionError::Answer(AnswerError::DeniedInput(_))) => {
                ApiError::forbidden(error.to_string())
            }
            DaemonError::Session(SessionError::Answer(AnswerError::NoStandingRule(_))) => {
                ApiError::conflict("no_standing_rule", error.to_string())
            }
            DaemonError::Session(SessionError::Answer(AnswerError::BadContent(_))) => {
                ApiError::invalid(error.to_string())
            }
            // Parked a moment ago on another node, whose CLI is still ending.
            DaemonError::Session(SessionError::Answer(AnswerError::Parked(_))) => ApiError {
                status: StatusCode::SERVICE_UNAVAILABLE,
                code: "unavailable",
                message: format!("{error}; answer again in a moment"),
            },
            DaemonError::Session(SessionError::Transport(_)) => {
                ApiError::invalid(error.to_string())
            }
            DaemonError::Session(SessionError::Ended) => {
                ApiError::conflict("not_running", error.to_string())
            }
            DaemonError::Session(SessionError::Control(_)) => ApiError {
                status: StatusCode::BAD_GATEWAY,
                code: "cli_refused",
                message: error.to_string(),
            },
            DaemonError::Session(SessionError::Payload(_)) => ApiError {
                status: StatusCode::BAD_GATEWAY,
                code: "cli_refused",
                message: error.to_string(),
            },
            DaemonError::Internal(_) => ApiError::internal(error.to_string()),
            DaemonError::Budget(_) => ApiError::conflict("budget_reached", error.to_string()),
            DaemonError::Worktree(_) => ApiError::conflict("worktree", error.to_string()),
            DaemonError::MaxRunning { .. } => ApiError {
                status: StatusCode::SERVICE_UNAVAILABLE,
                code: "max_running",
                message: error.to_string(),
            },
            DaemonError::Busy(_) => ApiError {
                status: StatusCode::SERVICE_UNAVAILABLE,
                code: "unavailable",
                message: error.to_string(),
            },
            DaemonError::Forbidden(_) => ApiError::forbidden(error.to_string()),
            DaemonError::Rewind(_) => ApiError::conflict("cannot_rewind", error.to_string()),
            DaemonError::CliTooOld(_) => ApiError::conflict("cli_too_old", error.to_string()),
            DaemonError::OtherNode(_) => ApiError::conflict("other_node", error.to_string()),
            DaemonError::HeldElsewhere(_) => {
                ApiError::conflict("held_elsewhere", error.to_string())
            }
            DaemonError::Parked(_) => ApiError::conflict("parked", error.to_string()),
            DaemonError::Unsettled(_) => ApiError::conflict("unsettled", error.to_string()),
            DaemonError::Forwarded { status, code, message } => ApiError {
                // Only a refusal passes as it is: another node's answer is never taken for a
                // success or a redirect.
                status: StatusCode::from_u16(*status)
                    .ok()
                    .filter(|status| status.is_client_error() || status.is_server_error())
                    .unwrap_or(StatusCode::BAD_GATEWAY),
                code: known_code(code),
                message: message.clone(),
            },
            DaemonError::ShuttingDown => ApiError {
                status: StatusCode::SERVICE_UNAVAILABLE,
                code: "shutting_down",
                message: error.to_string(),
            },
            DaemonError::Store(switchboard_store::StoreError::Moved { .. }) => {
                ApiError::conflict("other_node", error.to_string())
            }
            DaemonError::Store(_) => ApiError {
                status: StatusCode::INTERNAL_SERVER_ERROR,
                code: "store_error",
                message: error.to_string(),
            },
        }
    }
}

impl From<crate::tokens::ScopeError> for ApiError {
    fn from(error: crate::tokens::ScopeError) -> ApiError {
        ApiError::forbidden(error.to_string())
    }
}

impl From<crate::tokens::TokenError> for ApiError {
    fn from(error: crate::tokens::TokenError) -> ApiError {
        use crate::tokens::TokenError;
        match error {
            TokenError::Invalid(message) => ApiError::invalid(message),
            TokenError::Exists(_) => ApiError::conflict("exists", error.to_string()),
            TokenError::NotFound(_) => ApiError::not_found(error.to_string()),
            TokenError::File(message) => ApiError::internal(message),
        }
    }
}

impl From<crate::watchers::TooMany> for ApiError {
    fn from(error: crate::watchers::TooMany) -> Self {
        ApiError {
            status: StatusCode::TOO_MANY_REQUESTS,
            code: "too_many_subscribers",
            message: error.0,
        }
    }
}

/// What every error answer of the API is: `{"error": {"code", "message"}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorAnswer {
    /// The error.
    pub error: ErrorBody,
}

/// `{code, message}`, as in every error answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// A stable machine-readable code.
    pub code: String,
    /// A sentence for people.
    pub message: String,
}
