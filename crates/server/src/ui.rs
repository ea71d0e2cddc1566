//! The web UI: static files built into the binary (`crates/server/ui/`), served at `/` and
//! `/ui/…`. The page uses only the public API, with the same token: the URL printed at start
//! (`/?token=…`) trades the token for an HttpOnly, SameSite=Strict cookie and redirects to `/`,
//! so the token does not stay in the address bar or the history.
//!
//! `/` is also the relay's CLI socket (the agents-ui relay protocol): a WebSocket upgrade there
//! goes to [`crate::relay::cli`], anything else gets the page (or, without a valid token, a
//! login page). The page carries a strict CSP (scripts and connections only from the daemon,
//! no framing); `auth` adds the CSRF rule for changes authenticated only by the cookie.

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
        if auth.enabled() && auth.caller(&token).is_none() {
            return login(StatusCode::UNAUTHORIZED, "That token is not this daemon's.");
        }
        let mut response = (StatusCode::SEE_OTHER, [(header::LOCATION, "/")]).into_response();
        if auth.enabled() {
            let cookie = format!("{TOKEN_COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/");
            if let Ok(value) = HeaderValue::from_str(&cookie) {
                response.headers_mut().insert(header::SET_COOKIE, value);
            }
        }
        return response;
    }
    let signed_in = !auth.enabled()
        || crate::auth::cookie(&headers, TOKEN_COOKIE)
            .is_some_and(|token| auth.caller(&token).is_some());
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
    let etag = format!("\"{}\"", hex::encode(&file.metadata.sha256_hash()[..16]));
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

/// The sign-in page's look: a card, light or dark as the system is.
const LOGIN_STYLE: &str = "\
    :root{color-scheme:light dark;--bg:#f6f7f9;--panel:#fff;--ink:#1d2330;--muted:#667085;\
    --line:#e3e6ec;--accent:#2f5bea;--bad:#b42318;--code:#eef1f6}\
    @media (prefers-color-scheme:dark){:root{--bg:#0f1117;--panel:#171a22;--ink:#e6e8ee;\
    --muted:#9aa3b5;--line:#2a2f3b;--accent:#6d8cff;--bad:#ff7b72;--code:#1f2430}}\
    *{box-sizing:border-box}body{margin:0;min-height:100vh;display:grid;place-items:center;\
    background:var(--bg);color:var(--ink);font:15px/1.5 system-ui,-apple-system,sans-serif;padding:1rem}\
    .card{width:100%;max-width:26rem;background:var(--panel);border:1px solid var(--line);\
    border-radius:12px;padding:1.5rem 1.6rem;box-shadow:0 8px 30px rgba(16,24,40,.08)}\
    .brand{display:flex;align-items:center;gap:.5rem;font-weight:700}.brand svg{width:1.4rem;height:1.4rem}\
    h1{font-size:1.3rem;margin:1rem 0 .4rem}p{color:var(--muted);margin:.4rem 0}\
    label{display:block;font-size:.9rem;color:var(--muted);margin:1rem 0 .25rem}\
    input{width:100%;font:inherit;padding:.55rem .65rem;border:1px solid var(--line);border-radius:8px;\
    background:var(--panel);color:var(--ink)}input:focus{outline:2px solid var(--accent);outline-offset:1px}\
    button{margin-top:.9rem;width:100%;font:inherit;font-weight:600;padding:.55rem 1rem;border-radius:8px;\
    border:1px solid var(--accent);background:var(--accent);color:#fff;cursor:pointer}\
    .problem{color:var(--bad);background:color-mix(in srgb,var(--bad) 10%,transparent);\
    padding:.4rem .6rem;border-radius:6px}.hint{font-size:.8rem}\
    code{background:var(--code);padding:0 .3rem;border-radius:4px;overflow-wrap:anywhere}";

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
         <meta name=\"color-scheme\" content=\"light dark\">\
         <title>Switchboard — sign in</title><style>{LOGIN_STYLE}</style></head><body>\
         <main class=\"card\"><div class=\"brand\"><svg viewBox=\"0 0 16 16\" aria-hidden=\"true\">\
         <rect width=\"16\" height=\"16\" rx=\"3\" fill=\"#2f5bea\"/>\
         <path d=\"M4 5h8M4 8h8M4 11h5\" stroke=\"white\" stroke-width=\"1.6\"/></svg>\
         Switchboard</div><h1>Sign in</h1>{problem}\
         <p>Open the URL <code>switchboard serve</code> printed, or paste the daemon's token \
         (in <code>DATA_DIR/token</code>).</p>\
         <form method=\"get\" action=\"/\"><label for=\"token\">Token</label>\
         <input id=\"token\" name=\"token\" type=\"password\" autocomplete=\"off\" autofocus \
         required spellcheck=\"false\"><button type=\"submit\">Sign in</button></form>\
         <p class=\"hint\">The token becomes a cookie for this browser only; it leaves the \
         address bar at once.</p></main></body></html>"
    );
    page(status, body.into_bytes())
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}
