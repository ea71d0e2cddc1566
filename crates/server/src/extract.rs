//! Extractors whose rejections use the API's one error shape (`{"error": {"code",
//! "message"}}`): axum's own answer in plain text. Every handler takes its body, query and
//! WebSocket upgrade through these. The router's own `405`s and `426`s take the same shape.

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::{FromRequest, FromRequestParts, Query, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::Json;

use crate::error::ApiError;

/// A JSON body.
pub(crate) struct Body<T>(pub(crate) T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned> FromRequest<S> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        match Json::<T>::from_request(request, state).await {
            Ok(Json(value)) => Ok(Body(value)),
            Err(rejection) => Err(match rejection {
                JsonRejection::JsonDataError(error) => ApiError::invalid(error.body_text()),
                JsonRejection::JsonSyntaxError(error) => ApiError::invalid(error.body_text()),
                JsonRejection::MissingJsonContentType(_) => {
                    ApiError::invalid("send the body as JSON with Content-Type: application/json")
                }
                JsonRejection::BytesRejection(error)
                    if error.status() == StatusCode::PAYLOAD_TOO_LARGE =>
                {
                    ApiError {
                        status: StatusCode::PAYLOAD_TOO_LARGE,
                        code: "too_large",
                        message: error.body_text(),
                    }
                }
                // The body stopped arriving (crate::pacing), or its connection failed.
                JsonRejection::BytesRejection(error) => ApiError {
                    status: StatusCode::REQUEST_TIMEOUT,
                    code: "timeout",
                    message: format!("the body did not arrive whole: {}", error.body_text()),
                },
                other => ApiError::invalid(other.body_text()),
            }),
        }
    }
}

/// A body read after its sender was checked (a handler that checks a token of its own before
/// it reads a byte): at most `limit` bytes (`413 too_large`), whole within `within` (`408
/// timeout`).
pub(crate) async fn bounded_body(
    body: axum::body::Body,
    limit: usize,
    within: std::time::Duration,
) -> Result<axum::body::Bytes, ApiError> {
    let timeout = || ApiError {
        status: StatusCode::REQUEST_TIMEOUT,
        code: "timeout",
        message: format!("the body did not arrive within {} s", within.as_secs()),
    };
    tokio::time::timeout(within, axum::body::to_bytes(body, limit))
        .await
        .map_err(|_| timeout())?
        .map_err(|error| {
            let too_large = std::error::Error::source(&error)
                .is_some_and(|source| source.is::<http_body_util::LengthLimitError>());
            if too_large {
                ApiError {
                    status: StatusCode::PAYLOAD_TOO_LARGE,
                    code: "too_large",
                    message: format!("the body is over {limit} bytes"),
                }
            } else {
                ApiError {
                    status: StatusCode::REQUEST_TIMEOUT,
                    code: "timeout",
                    message: format!("the body did not arrive whole: {error}"),
                }
            }
        })
}

/// A JSON body that may be left out: no body at all (no `Content-Type`, nothing sent) is
/// `T::default()`; anything sent is read as [`Body`] reads it.
pub(crate) struct OptionalBody<T>(pub(crate) T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned + Default> FromRequest<S> for OptionalBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let headers = request.headers();
        let length = headers
            .get(axum::http::header::CONTENT_LENGTH)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.parse::<u64>().ok());
        let chunked = headers.contains_key(axum::http::header::TRANSFER_ENCODING);
        if !headers.contains_key(axum::http::header::CONTENT_TYPE)
            && !chunked
            && length.unwrap_or(0) == 0
        {
            return Ok(OptionalBody(T::default()));
        }
        Body::<T>::from_request(request, state).await.map(|Body(value)| OptionalBody(value))
    }
}

/// The query string.
pub(crate) struct Params<T>(pub(crate) T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned> FromRequestParts<S> for Params<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match Query::<T>::from_request_parts(parts, state).await {
            Ok(Query(value)) => Ok(Params(value)),
            Err(rejection) => Err(query_error(rejection)),
        }
    }
}

fn query_error(rejection: QueryRejection) -> ApiError {
    ApiError::invalid(format!("the query string is not valid: {}", rejection.body_text()))
}

/// A WebSocket upgrade: a plain request to a WebSocket endpoint is `426`.
pub(crate) struct Upgrade(pub(crate) axum::extract::ws::WebSocketUpgrade);

impl<S: Send + Sync> FromRequestParts<S> for Upgrade {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::ws::WebSocketUpgrade::from_request_parts(parts, state)
            .await
            .map(Upgrade)
            .map_err(upgrade_error)
    }
}

fn upgrade_error(rejection: WebSocketUpgradeRejection) -> ApiError {
    ApiError {
        status: StatusCode::UPGRADE_REQUIRED,
        code: "upgrade_required",
        message: format!("this endpoint is a WebSocket: {}", rejection.body_text()),
    }
}

/// `405`, for a known path with another method.
pub(crate) async fn method_not_allowed() -> ApiError {
    ApiError {
        status: StatusCode::METHOD_NOT_ALLOWED,
        code: "method_not_allowed",
        message: "this endpoint does not take that method (docs/api.md lists each route's)".into(),
    }
}
