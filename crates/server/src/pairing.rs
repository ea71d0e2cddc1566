//! A phone signed in by a glance (`switchboard pair`): an admin asks for a one-time code
//! (`POST /api/pair`) that names the `approve` token it becomes; its link (`/pair/{code}`,
//! shown as a QR code) opens a page on the phone, whose button signs the phone in: the token
//! is made, set as the web UI's cookie, and the phone lands on the web UI, where it can turn on
//! notifications and answer requests. The code is the only credential, works once, and
//! expires in minutes ([`crate::pair_codes`]); a GET changes nothing, so a link previewer
//! cannot use it. The token is listed and revoked like any other.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Path, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};

use crate::approval::{escape, html};
use crate::auth::{AuthConfig, TOKEN_COOKIE};
use crate::daemon::Daemon;
use crate::error::ApiError;
use crate::pair_codes::{Refused, DEFAULT_LIFETIME, LIFETIMES};
use crate::tokens::{Caller, Scope};

/// `POST /api/pair`'s body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PairRequest {
    /// The token's name (a new one).
    name: String,
    /// How long the code works, in seconds (60 to 3600; default 600).
    #[serde(default)]
    expires_secs: Option<u64>,
}

/// A code made: its link, and when it stops working.
#[derive(Debug, Serialize, Deserialize)]
pub struct PairCode {
    /// The token it becomes.
    pub name: String,
    /// The code itself (the last part of the link).
    pub code: String,
    /// The page that signs a device in with it.
    pub url: String,
    /// When it stops working (Unix milliseconds).
    pub expires_ms: u64,
    /// The link as a QR code, an SVG image (for the web UI to show).
    pub qr_svg: String,
}

/// `url` as a QR code: an SVG, dark on white, with its quiet zone.
fn qr_svg(url: &str) -> Result<String, ApiError> {
    let code = qrcode::QrCode::new(url.as_bytes()).map_err(|error| {
        ApiError::internal(format!("cannot draw the link as a QR code: {error}"))
    })?;
    Ok(code
        .render::<qrcode::render::svg::Color<'_>>()
        .min_dimensions(240, 240)
        .quiet_zone(true)
        .build())
}

/// `POST /api/pair`: a one-time code for a device to sign in as the new `approve` token `name`.
pub(crate) async fn create(
    State(daemon): State<Arc<Daemon>>,
    Extension(auth): Extension<AuthConfig>,
    Extension(caller): Extension<Caller>,
    crate::extract::Body(body): crate::extract::Body<PairRequest>,
) -> Result<(StatusCode, Json<PairCode>), ApiError> {
    let Some(tokens) = auth.tokens.as_deref() else {
        return Err(ApiError::invalid(
            "the daemon runs with --no-auth: there is nothing to sign in to",
        ));
    };
    if !crate::text::is_name(&body.name) {
        return Err(ApiError::invalid(format!(
            "a token name is 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit; not {:?}",
            body.name.chars().take(65).collect::<String>()
        )));
    }
    let lifetime = body.expires_secs.map_or(DEFAULT_LIFETIME, Duration::from_secs);
    if !LIFETIMES.contains(&lifetime) {
        return Err(ApiError::invalid("expires_secs is 60 to 3600"));
    }
    let now = Instant::now();
    let taken = tokens.list().iter().any(|token| token.name == body.name)
        || daemon.pair_codes().pairing(&body.name, now);
    if taken {
        return Err(ApiError::conflict(
            "name_taken",
            format!("a token named {} exists (or is being paired): pick another name, or revoke it first", body.name),
        ));
    }
    let code = daemon.pair_codes().issue(&body.name, lifetime, now);
    let base = daemon.public_url().unwrap_or_default();
    let expires_ms = switchboard_store::now_ms()
        .saturating_add(u64::try_from(lifetime.as_millis()).unwrap_or(u64::MAX));
    tracing::info!(name = %body.name, by = %caller.name, "a pairing code was made");
    let url = format!("{}/pair/{code}", base.trim_end_matches('/'));
    let qr_svg = qr_svg(&url)?;
    Ok((StatusCode::CREATED, Json(PairCode { name: body.name, code, url, expires_ms, qr_svg })))
}

fn refused(why: Refused) -> Response {
    let text = match why {
        Refused::Unknown => "This code was used already, or is not one of this daemon's (a restart voids codes). Ask for a new one: switchboard pair.",
        Refused::Expired => "This code has expired. Ask for a new one: switchboard pair.",
    };
    html(StatusCode::GONE, "Not signed in", &format!("<h1>Not signed in</h1><p>{text}</p>"))
}

/// `GET /pair/{code}`: what the code would do, and the button that does it.
pub(crate) async fn page(State(daemon): State<Arc<Daemon>>, Path(code): Path<String>) -> Response {
    match daemon.pair_codes().peek(&code, Instant::now()) {
        Err(why) => refused(why),
        Ok(name) => html(
            StatusCode::OK,
            "Sign in",
            &format!(
                "<h1>Sign this device in to Switchboard</h1>\
                 <p>It will answer permission requests as <b>{name}</b> (an approve token: it sees \
                 sessions and answers their requests; it cannot start or stop them). The code \
                 works once.</p>\
                 <form method=post><button class=allow type=submit>Sign in as {name}</button></form>",
                name = escape(&name)
            ),
        ),
    }
}

/// `POST /pair/{code}`: uses the code: the token is made, and this browser signed in with it.
pub(crate) async fn redeem(
    State(daemon): State<Arc<Daemon>>,
    Extension(auth): Extension<AuthConfig>,
    Path(code): Path<String>,
) -> Response {
    let name = match daemon.pair_codes().redeem(&code, Instant::now()) {
        Ok(name) => name,
        Err(why) => return refused(why),
    };
    let Some(tokens) = auth.tokens.as_deref() else {
        return refused(Refused::Unknown);
    };
    let made = match tokens.create(&name, Scope::Approve).await {
        Ok(made) => made,
        Err(error) => {
            return html(
                StatusCode::CONFLICT,
                "Not signed in",
                &format!("<h1>Not signed in</h1><p>{}</p>", escape(&error.to_string())),
            )
        }
    };
    tracing::info!(%name, "a device signed in with a pairing code");
    daemon
        .audit(crate::audit::AuditEntry::TokenCreated {
            name: name.clone(),
            scope: Scope::Approve.to_string(),
            ceiling: false,
            by: "a pairing code".into(),
        })
        .await;
    let mut response = (StatusCode::SEE_OTHER, [(header::LOCATION, "/")]).into_response();
    let cookie = format!(
        "{TOKEN_COOKIE}={}; HttpOnly; SameSite=Strict; Path=/; Max-Age=31536000",
        made.token
    );
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}
