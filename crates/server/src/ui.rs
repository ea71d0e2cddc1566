//! The web UI: static files built into the binary (`crates/server/ui/`), served at `/` and
//! `/ui/…`. The page uses only the public API, with the same token: the URL printed at start
//! (`/?token=…`) trades the token for an HttpOnly, SameSite=Strict cookie and redirects to `/`,
//! so the token does not stay in the address bar or the history.
//!
//! `/` is also the relay's CLI socket (seed 003): a WebSocket upgrade there goes to
//! [`crate::relay::cli`], anything else gets the page (or, without a valid token, a login page).

use std::sync::Arc;

use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use serde::Deserialize;

use crate::auth::{AuthConfig, TOKEN_COOKIE};
use crate::daemon::Daemon;

#[derive(rust_embed::RustEmbed)]
#[folder = "ui/"]
#[exclude = "*.md"]
struct Assets;

/// What the page may load and talk to: only the daemon itself (no inline script; styles may be
/// set by the libraries), and it may not be framed (its buttons approve tool calls).
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
     style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; connect-src 'self'; \
     frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

#[derive(Debug, Deserialize)]
pub(crate) struct RootQuery {
    token: Option<String>,
}

/// `GET /`: the relay's CLI socket, the token exchange, the page, or the login page.
pub(crate) async fn root(
    State(daemon): State<Arc<Daemon>>,
    Extension(auth): Extension<AuthConfig>,
    Query(query): Query<RootQuery>,
    headers: HeaderMap,
    upgrade: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> Response {
    if let Err(error) = crate::auth::check_outside_auth(&auth, &headers) {
        return error.into_response();
    }
    if let Ok(upgrade) = upgrade {
        return match crate::relay::cli(State(daemon), headers, upgrade).await {
            Ok(response) => response,
            Err(error) => error.into_response(),
        };
    }
    if let Some(token) = query.token {
        if auth.token.is_some() && !auth.accepts(&token) {
            return login(StatusCode::UNAUTHORIZED, "That token is not this daemon's.");
        }
        let mut response = (StatusCode::SEE_OTHER, [(header::LOCATION, "/")]).into_response();
        if auth.token.is_some() {
            let cookie = format!("{TOKEN_COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/");
            if let Ok(value) = HeaderValue::from_str(&cookie) {
                response.headers_mut().insert(header::SET_COOKIE, value);
            }
        }
        return response;
    }
    let signed_in = auth.token.is_none()
        || crate::auth::cookie(&headers, TOKEN_COOKIE).is_some_and(|token| auth.accepts(&token));
    if !signed_in {
        return login(StatusCode::UNAUTHORIZED, "");
    }
    match Assets::get("index.html") {
        Some(file) => page(StatusCode::OK, file.data.into_owned()),
        None => {
            (StatusCode::INTERNAL_SERVER_ERROR, "the UI is missing from this build").into_response()
        }
    }
}

/// `GET /ui/{*path}`: a file of the UI (behind the API's auth, which takes the cookie).
pub(crate) async fn asset(Path(path): Path<String>, headers: HeaderMap) -> Response {
    let Some(file) = Assets::get(&path) else {
        return crate::error::ApiError::not_found(format!("no UI file {path}")).into_response();
    };
    let etag = format!("\"{}\"", hex(&file.metadata.sha256_hash()[..16]));
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value == etag);
    let mut response = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        file.data.into_owned().into_response()
    };
    let headers = response.headers_mut();
    if let Ok(value) = HeaderValue::from_str(file.metadata.mimetype()) {
        headers.insert(header::CONTENT_TYPE, value);
    }
    if let Ok(value) = HeaderValue::from_str(&etag) {
        headers.insert(header::ETAG, value);
    }
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    response
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// An HTML page with the headers every page gets.
fn page(status: StatusCode, body: Vec<u8>) -> Response {
    let mut response = (status, body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers
        .insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    response
}

/// The login page: a form that sends the token back to `/?token=`.
fn login(status: StatusCode, problem: &str) -> Response {
    let problem = if problem.is_empty() {
        String::new()
    } else {
        format!("<p class=\"problem\">{}</p>", escape(problem))
    };
    let body = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>Switchboard — sign in</title><style>\
         body{{font:16px system-ui,sans-serif;max-width:28rem;margin:15vh auto;padding:0 1rem;color:#1d2330}}\
         input{{width:100%;font:inherit;padding:.5rem;box-sizing:border-box}}\
         button{{margin-top:.75rem;font:inherit;padding:.5rem 1rem}}.problem{{color:#b42318}}\
         code{{background:#eef1f6;padding:0 .25rem}}</style></head><body>\
         <h1>Switchboard</h1>{problem}\
         <p>Open the URL <code>switchboard serve</code> printed, or paste the daemon's token \
         (in <code>DATA_DIR/token</code>).</p>\
         <form method=\"get\" action=\"/\"><label>Token <input name=\"token\" type=\"password\" \
         autocomplete=\"off\" autofocus></label><button type=\"submit\">Sign in</button></form>\
         </body></html>"
    );
    page(status, body.into_bytes())
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}
