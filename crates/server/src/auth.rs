//! Bearer-token auth for every endpoint, each route's scope ([`crate::tokens`]), and the Origin
//! check for browser WebSocket upgrades.
//!
//! - The token comes in the `Authorization` header, the query or the cookie; without auth
//!   (`--no-auth`) only loopback `Host` names are served. The endpoints with tokens of their
//!   own get the same checks (`check_outside_auth`).
//! - [`require_auth`] puts the request's `Caller` (token name and scope) in its extensions;
//!   [`require_scope`] is a layer on each route, with the scope its entry in
//!   `api::routes` names (`Guard::Api(Scope)`), so no route exists without one.
//! - CSRF: a change authenticated only by the cookie must carry the daemon's own `Origin`.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, Request};
use axum::middleware::Next;
use axum::response::Response;
use subtle::ConstantTimeEq;

use crate::error::ApiError;
use crate::tokens::{Caller, Scope, Tokens};

/// The cookie a browser may carry the token in.
pub const TOKEN_COOKIE: &str = "switchboard_token";

/// Who may call the API.
#[derive(Debug, Clone)]
pub struct AuthConfig {
    /// The tokens a request may present; `None` with `--no-auth` (loopback only).
    pub tokens: Option<Arc<Tokens>>,
    /// Origins allowed to open WebSockets besides the daemon's own.
    pub allowed_origins: Vec<String>,
}

/// The caller with `--no-auth`.
pub const LOCAL: &str = "local";

impl AuthConfig {
    /// Requests must present one of `tokens`.
    pub fn new(tokens: Tokens) -> AuthConfig {
        AuthConfig { tokens: Some(Arc::new(tokens)), allowed_origins: Vec::new() }
    }

    /// Requests must present `token` (admin) or a named token made since, kept in memory.
    pub fn with_token(token: &str) -> AuthConfig {
        AuthConfig::new(Tokens::new(token))
    }

    /// `--no-auth`: no token; only loopback host names are served, each caller an admin.
    pub fn no_auth() -> AuthConfig {
        AuthConfig { tokens: None, allowed_origins: Vec::new() }
    }

    /// Also let WebSockets come from pages at `origins`.
    pub fn allowing(mut self, origins: Vec<String>) -> AuthConfig {
        self.allowed_origins = origins;
        self
    }

    /// Whether requests need a token.
    pub fn enabled(&self) -> bool {
        self.tokens.is_some()
    }

    /// Who presents `presented`: a token's holder, or with `--no-auth` anyone (an admin).
    pub fn caller(&self, presented: &str) -> Option<Caller> {
        match &self.tokens {
            None => Some(Caller::unnamed(LOCAL, Scope::Admin)),
            Some(tokens) => tokens.caller(presented),
        }
    }
}

/// Route middleware: the caller ([`require_auth`] put it in the request) must have `needed`.
pub async fn require_scope(
    State(needed): State<Scope>,
    request: Request<Body>,
    next: Next,
) -> Result<Response, ApiError> {
    request.extensions().get::<Caller>().ok_or_else(ApiError::unauthorized)?.require(needed)?;
    Ok(next.run(request).await)
}

/// A new random token: 32 bytes, hex.
pub fn generate_token() -> String {
    switchboard_transport::random::random_hex(32)
}

/// The `Authorization: Bearer` token of a request, if any.
pub(crate) fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let token = value.strip_prefix("Bearer ").or_else(|| value.strip_prefix("bearer "))?;
    Some(token.trim())
}

/// Whether two tokens are equal, compared in constant time.
pub(crate) fn tokens_match(expected: &str, presented: &str) -> bool {
    expected.as_bytes().ct_eq(presented.as_bytes()).into()
}

/// The token a request presents: `Authorization: Bearer`, then `?token=`, then the cookie.
#[cfg(test)]
fn presented_token(request: &Request<Body>) -> Option<String> {
    presented(request).map(|(token, _)| token)
}

/// The token a request presents and whether it came in the cookie (which a browser attaches by
/// itself, so the request may not be the page's own).
fn presented(request: &Request<Body>) -> Option<(String, bool)> {
    let headers = request.headers();
    if let Some(token) = bearer(headers) {
        return Some((token.to_owned(), false));
    }
    if let Some(query) = request.uri().query() {
        if let Some((_, token)) =
            form_urlencoded::parse(query.as_bytes()).find(|(key, _)| key == "token")
        {
            return Some((token.into_owned(), false));
        }
    }
    cookie(headers, TOKEN_COOKIE).map(|token| (token, true))
}

pub(crate) fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers.get_all(header::COOKIE).iter().filter_map(|value| value.to_str().ok()).find_map(
        |value| {
            value.split(';').find_map(|pair| {
                let (key, value) = pair.trim().split_once('=')?;
                (key == name).then(|| value.to_owned())
            })
        },
    )
}

/// Middleware: refuse requests without the token (401), WebSocket upgrades from a foreign
/// `Origin` (403), and changes authenticated only by the cookie that do not come from the
/// daemon's own page (403: cross-site request forgery, on top of the cookie's SameSite=Strict).
pub async fn require_auth(
    State(auth): State<AuthConfig>,
    request: Request<Body>,
    next: Next,
) -> Result<Response, ApiError> {
    let mut request = request;
    let mut by_cookie = false;
    let caller = if auth.enabled() {
        match presented(&request) {
            Some((token, cookie)) => {
                by_cookie = cookie;
                auth.caller(&token).ok_or_else(ApiError::unauthorized)?
            }
            None => return Err(ApiError::unauthorized()),
        }
    } else {
        check_host(&auth, request.headers())?;
        Caller::unnamed(LOCAL, Scope::Admin)
    };
    // Where the request comes from, when it says: the web UI's page (its cookie), or a client
    // that names itself (`switchboard loop`).
    let via = if by_cookie { Some("web UI".to_owned()) } else { client_name(request.headers()) };
    request.extensions_mut().insert(caller.through(via));
    let browser_change =
        !request.method().is_safe() && request.headers().get(header::ORIGIN).is_some();
    if is_websocket_upgrade(request.headers()) || browser_change {
        // A browser says where the request comes from: it must be the daemon's own page.
        check_origin(&auth, request.headers())?;
    } else if by_cookie && !request.method().is_safe() {
        return Err(ApiError::forbidden(
            "a change authenticated by the cookie must carry the page's Origin",
        ));
    }
    Ok(next.run(request).await)
}

/// The name a client gives itself in `x-switchboard-client`: 1-32 of `a-z`, `0-9`, `-`
/// (anything else is ignored).
fn client_name(headers: &HeaderMap) -> Option<String> {
    let name = headers.get("x-switchboard-client")?.to_str().ok()?;
    let fits = !name.is_empty()
        && name.len() <= 32
        && name
            .bytes()
            .all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'-');
    fits.then(|| name.to_owned())
}

/// `--no-auth` (loopback only): a page on another site that rebinds its name to 127.0.0.1
/// reaches the daemon with its own `Host`; only loopback names get in.
pub(crate) fn check_host(auth: &AuthConfig, headers: &HeaderMap) -> Result<(), ApiError> {
    if !auth.enabled() && !loopback_host(headers) {
        return Err(ApiError::forbidden("without auth, only loopback host names are served"));
    }
    Ok(())
}

/// The checks a browser meets at the endpoints outside [`require_auth`] (`/`: the page, and the
/// relay's socket for externally launched CLIs, which has a token of its own or, with
/// `--no-auth`, none): without auth only loopback `Host` names, and a WebSocket upgrade that
/// carries an `Origin` (a browser's; a CLI sends none) only from the daemon's own page or an
/// allowed origin. Without these a cross-site page could open the relay's CLI socket, read
/// what frontends type and post permission requests of its own.
pub(crate) fn check_outside_auth(auth: &AuthConfig, headers: &HeaderMap) -> Result<(), ApiError> {
    check_host(auth, headers)?;
    if is_websocket_upgrade(headers) {
        check_origin(auth, headers)?;
    }
    Ok(())
}

/// Whether the `Host` a request names is a loopback one (`localhost`, `127.x`, `[::1]`).
fn loopback_host(headers: &HeaderMap) -> bool {
    let Some(host) = headers.get(header::HOST).and_then(|value| value.to_str().ok()) else {
        return true; // HTTP/1.0 clients and tests without a Host: not a browser
    };
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    name.eq_ignore_ascii_case("localhost")
        || name.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

fn is_websocket_upgrade(headers: &HeaderMap) -> bool {
    headers
        .get(header::UPGRADE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.eq_ignore_ascii_case("websocket"))
}

/// A browser sends `Origin` on WebSocket upgrades; it must be the daemon itself or an allowed
/// origin. Programs (no `Origin`) pass: they authenticate with the token.
fn check_origin(auth: &AuthConfig, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(origin) = headers.get(header::ORIGIN).and_then(|value| value.to_str().ok()) else {
        return Ok(());
    };
    let host = headers.get(header::HOST).and_then(|value| value.to_str().ok()).unwrap_or("");
    let same = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
        .is_some_and(|rest| rest == host);
    if same || auth.allowed_origins.iter().any(|allowed| allowed == origin) {
        Ok(())
    } else {
        Err(ApiError::forbidden(format!(
            "WebSocket connections from origin {origin} are not allowed"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_is_read_from_header_query_or_cookie() {
        let request = |uri: &str, header: Option<(&str, &str)>| {
            let mut builder = Request::builder().uri(uri);
            if let Some((name, value)) = header {
                builder = builder.header(name, value);
            }
            builder.body(Body::empty()).unwrap()
        };
        assert_eq!(
            presented_token(&request("/x", Some(("authorization", "Bearer abc")))).as_deref(),
            Some("abc")
        );
        assert_eq!(
            presented_token(&request("/x?a=1&token=ab%2Bc%20d", None)).as_deref(),
            Some("ab+c d")
        );
        assert_eq!(
            presented_token(&request("/x", Some(("cookie", "a=b; switchboard_token=xyz"))))
                .as_deref(),
            Some("xyz")
        );
        assert_eq!(presented_token(&request("/x?tokenx=1", None)), None);
    }

    #[test]
    fn only_loopback_host_names_count_as_loopback() {
        let host = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::HOST, value.parse().unwrap());
            loopback_host(&headers)
        };
        for ok in ["127.0.0.1:7777", "localhost:7777", "LOCALHOST", "[::1]:7777", "127.1.2.3"] {
            assert!(host(ok), "{ok}");
        }
        for bad in ["evil.example:7777", "evil.example", "192.168.1.2:7777", "[fe80::1]:7777"] {
            assert!(!host(bad), "{bad}");
        }
    }

    #[test]
    fn tokens_are_compared_exactly() {
        let auth = AuthConfig::with_token("secret");
        assert!(auth.caller("secret").is_some_and(|caller| caller.scope == Scope::Admin));
        assert!(auth.caller("secret2").is_none());
        assert!(auth.caller("secre").is_none());
        assert!(auth.caller("").is_none());
        let open = AuthConfig::no_auth().caller("").unwrap();
        assert_eq!((&*open.name, open.scope), (LOCAL, Scope::Admin));
        assert_eq!(generate_token().len(), 64);
        assert_ne!(generate_token(), generate_token());
    }
}
