//! The pages behind one-tap approval links ([`crate::links`]): `GET /a/{link}` shows the
//! request (tool, input, session, directory, why it asks) with Approve, and Deny with a
//! reason; `POST /a/{link}` answers it. A GET changes nothing, so a link previewer that
//! fetches the link cannot approve. The link is the only credential, and only for its one
//! request; a used link (its request answered, by anyone) and an expired one get a page that
//! says which. The pages are plain HTML forms: no script, readable on a phone.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use switchboard_session::{
    AnswerBehavior, Behavior, DecidedBy, PendingPermission, PermissionAnswer, SessionEvent,
};

use crate::daemon::Daemon;
use crate::decisions::Decision;
use crate::links::LinkClaim;

/// The longest deny reason taken from the form.
pub(crate) const MAX_REASON_CHARS: usize = 2000;

/// The most of a tool's input the page shows.
const MAX_INPUT_CHARS: usize = 8000;

/// No script, nothing from elsewhere, no framing; the form posts to the page itself.
const CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; \
     frame-ancestors 'none'; base-uri 'none'";

/// Where a link's request stands.
enum Standing {
    /// Waiting: the page offers the answers.
    Waiting(PendingPermission),
    /// Decided: by a person, the policy, a timeout, the session's end, or the CLI.
    Decided(Decision),
    /// Past the link's expiry.
    Expired,
    /// Not waiting, and no decision found (the session ended, or the daemon restarted).
    Gone,
}

async fn standing(daemon: &Daemon, claim: &LinkClaim) -> Standing {
    let pending = daemon
        .waiting_in(&claim.session)
        .await
        .unwrap_or_default()
        .into_iter()
        .find(|pending| pending.request_id == claim.request);
    if let Some(pending) = pending {
        if switchboard_store::now_ms() >= claim.expires_ms {
            return Standing::Expired;
        }
        return Standing::Waiting(pending);
    }
    if let Some(decision) = decision(daemon, claim).await {
        return Standing::Decided(decision);
    }
    if switchboard_store::now_ms() >= claim.expires_ms {
        Standing::Expired
    } else {
        Standing::Gone
    }
}

/// The decision on the link's request: as the daemon noted it, or (a request decided before
/// the daemon started) from the session's log, read once for all its decisions.
async fn decision(daemon: &Daemon, claim: &LinkClaim) -> Option<Decision> {
    let decisions = daemon.decisions();
    if let Some(decision) = decisions.get(&claim.session, &claim.request) {
        return Some(decision);
    }
    if decisions.was_scanned(&claim.session) {
        return None;
    }
    let events = daemon
        .store()
        .events_before(&claim.session, u64::MAX, crate::decisions::DECISION_LOOKBACK)
        .await
        .ok()?;
    // Read whole: not read again (a failed read is tried again by the next page).
    decisions.scanned(&claim.session);
    for record in events.iter().filter(|record| record.kind == "permission_decided") {
        let Ok(SessionEvent::PermissionDecided { request_id, behavior, by, .. }) =
            SessionEvent::from_stored(&record.kind, &record.payload)
        else {
            continue;
        };
        decisions.note(&claim.session, &request_id, Decision { behavior, by });
    }
    decisions.get(&claim.session, &claim.request)
}

/// `GET /a/{link}`: the request and its answers, or why there are none. Changes nothing.
pub(crate) async fn page(State(daemon): State<Arc<Daemon>>, Path(link): Path<String>) -> Response {
    let Some(claim) = daemon.link_key().verify(&link) else {
        return not_a_link();
    };
    match standing(&daemon, &claim).await {
        Standing::Waiting(pending) => {
            let record = daemon.record(&claim.session).await.ok().flatten();
            let (title, cwd) = record
                .map(|record| (record.title.unwrap_or_default(), record.cwd))
                .unwrap_or_default();
            let whole = serde_json::to_string_pretty(&pending.input).unwrap_or_default();
            let input: String = whole.chars().take(MAX_INPUT_CHARS).collect();
            let approve = match refusal(&pending, &whole) {
                Some(why) => format!(
                    "<p class=warn>{}</p><p><a href=\"/#/s/{}\">Open the session</a></p>",
                    escape(&why),
                    escape(&claim.session)
                ),
                None => "<button name=decision value=allow class=allow>Approve</button>".to_owned(),
            };
            // Claude Code's own heading, and an MCP tool's server, as it names them.
            let hints = &pending.hints;
            let heading = hints
                .title
                .as_ref()
                .map(|title| format!("<p><strong>{}</strong></p>", escape(title)))
                .unwrap_or_default();
            let server = hints
                .mcp_server
                .as_ref()
                .map(|server| {
                    format!(
                        "<dt>MCP server</dt><dd>{} ({})</dd>",
                        escape(&server.name),
                        escape(&server.source)
                    )
                })
                .unwrap_or_default();
            let body = format!(
                "<h1>Claude wants to use <code>{tool}</code></h1>{heading}\
                 <p class=muted>{why}</p>\
                 <pre>{input}</pre>\
                 <dl>{server}<dt>Session</dt><dd>{title}</dd><dt>Directory</dt><dd><code>{cwd}</code></dd>\
                 <dt>Asked</dt><dd>{asked}</dd><dt>Started by</dt><dd>{started}</dd>\
                 <dt>Through</dt><dd>{channel}</dd>\
                 <dt>Expires</dt><dd>{expires}</dd></dl>\
                 <form method=post>{approve}\
                 <label>Reason to deny (Claude reads it)\
                 <input name=message maxlength={MAX_REASON_CHARS} autocomplete=off></label>\
                 <button name=decision value=deny class=deny>Deny</button>\
                 </form>",
                tool = escape(&pending.tool_name),
                why = escape(&pending.reason),
                input = escape(&input),
                title = escape(if title.is_empty() { &claim.session } else { &title }),
                cwd = escape(&cwd),
                asked = time(pending.asked_at_ms),
                started = escape(pending.started_by.as_deref().unwrap_or("unknown")),
                channel = escape(&claim.channel),
                expires = time(claim.expires_ms),
            );
            html(StatusCode::OK, "Approve?", &body)
        }
        other => closed(other),
    }
}

/// The largest answer form taken: a decision and a reason of [`MAX_REASON_CHARS`] characters,
/// each up to 4 bytes written as `%XX` (12 bytes), with room to spare.
pub(crate) const MAX_FORM_BYTES: usize = 32 * 1024;

/// `POST /a/{link}`: answers the link's request, as `link (CHANNEL)`. The link is verified
/// before a byte of the body is read, and the body may hold at most [`MAX_FORM_BYTES`].
pub(crate) async fn answer(
    State(daemon): State<Arc<Daemon>>,
    Path(link): Path<String>,
    body: axum::body::Body,
) -> Response {
    let Some(claim) = daemon.link_key().verify(&link) else {
        return not_a_link();
    };
    let form = match axum::body::to_bytes(body, MAX_FORM_BYTES).await {
        Ok(bytes) => crate::links::AnswerForm::parse(&bytes),
        Err(error) => {
            let too_large = std::error::Error::source(&error)
                .is_some_and(|source| source.is::<http_body_util::LengthLimitError>());
            return if too_large {
                html(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "Too long",
                    &format!("<p>An answer is at most {MAX_FORM_BYTES} bytes.</p>"),
                )
            } else {
                html(
                    StatusCode::REQUEST_TIMEOUT,
                    "Not an answer",
                    &format!(
                        "<p>The answer did not arrive whole: {}</p>",
                        escape(&error.to_string())
                    ),
                )
            };
        }
    };
    let behavior = match form.decision.as_str() {
        "allow" => AnswerBehavior::Allow,
        "deny" => AnswerBehavior::Deny,
        _ => {
            return html(StatusCode::BAD_REQUEST, "Not an answer", "<p>Choose Approve or Deny.</p>")
        }
    };
    let message = form
        .message
        .map(|message| message.trim().chars().take(MAX_REASON_CHARS).collect::<String>())
        .filter(|message| !message.is_empty());
    let pending = match standing(&daemon, &claim).await {
        Standing::Waiting(pending) => pending,
        other => return closed(other),
    };
    if behavior == AnswerBehavior::Allow {
        let shown = serde_json::to_string_pretty(&pending.input).unwrap_or_default();
        if let Some(why) = refusal(&pending, &shown) {
            return html(StatusCode::CONFLICT, "Not here", &format!("<p>{}</p>", escape(&why)));
        }
    }
    let who = format!("link ({})", claim.channel);
    let answer = PermissionAnswer {
        behavior,
        message: if behavior == AnswerBehavior::Deny { message } else { None },
        ..PermissionAnswer::default()
    };
    // Answered where the session runs: here, or through the bus on the node that runs it.
    match daemon.respond_permission(&claim.session, &claim.request, answer, &who).await {
        Ok(()) => {
            let (title, text) = if behavior == AnswerBehavior::Allow {
                ("Approved", "Approved. Claude goes on.")
            } else {
                ("Denied", "Denied. Claude is told why, if you said.")
            };
            html(StatusCode::OK, title, &format!("<h1>{text}</h1>"))
        }
        // Someone answered first.
        Err(_) => closed(standing(&daemon, &claim).await),
    }
}

/// Why the link's page may not approve a request, if it may not: its input (`shown`, as the
/// page shows it) goes on past what the page shows (a tail past the cut could hold anything),
/// it is a question (whose answer is a choice, not an approval), or Claude Code says a person
/// must answer it in the session. It can be denied.
fn refusal(pending: &PendingPermission, shown: &str) -> Option<String> {
    let hidden = shown.chars().count().saturating_sub(MAX_INPUT_CHARS);
    if hidden > 0 {
        Some(format!(
            "The input goes on for {hidden} more characters than shown: approve it in the web UI, where it shows whole."
        ))
    } else if pending.tool_name == "AskUserQuestion" {
        Some("Answer the question in the web UI, which offers its options.".to_owned())
    } else if pending.tool_name == switchboard_session::ELICITATION_TOOL {
        Some("Answer the MCP server's question in the web UI, which shows its form.".to_owned())
    } else if pending.hints.person_only || pending.hints.default_to_no {
        Some(
            "Claude Code says a person must approve this one in the session itself: open it in the web UI to approve."
                .to_owned(),
        )
    } else {
        None
    }
}

/// The page for a link whose request is not waiting: who or what decided it, in words.
fn closed(standing: Standing) -> Response {
    match standing {
        Standing::Waiting(_) => html(StatusCode::OK, "Waiting", "<p>Reload to answer.</p>"),
        Standing::Decided(Decision { behavior, by }) => {
            let verb = if behavior == Behavior::Allow { "approved" } else { "denied" };
            let (title, body) = match by {
                DecidedBy::Person { who } => (
                    "Already answered",
                    format!(
                        "<h1>This link was used</h1><p>The request was already {verb} by {}.</p>",
                        escape(&who)
                    ),
                ),
                DecidedBy::Policy { rule } => (
                    "Already decided",
                    format!(
                        "<h1>The policy decided this request</h1><p>It was {verb} by {}.</p>",
                        match rule {
                            Some(rule) => format!("the rule {}", escape(&rule)),
                            None => "the policy's default".to_owned(),
                        }
                    ),
                ),
                DecidedBy::Terminal => (
                    "Answered in the terminal",
                    format!(
                        "<h1>Answered in the terminal</h1><p>The person at the session's terminal {verb} it there first.</p>"
                    ),
                ),
                DecidedBy::Timeout => (
                    "Timed out",
                    format!(
                        "<h1>This request timed out</h1><p>Nobody answered in time, so it was {verb}, as its policy says.</p>"
                    ),
                ),
                DecidedBy::Cancelled | DecidedBy::LinkClosed => (
                    "No longer waiting",
                    "<h1>This request is no longer waiting</h1><p>Its session stopped, or Claude withdrew it, before anyone answered.</p>".to_owned(),
                ),
                DecidedBy::Cli => (
                    "Already decided",
                    format!(
                        "<h1>Claude Code decided this request itself</h1><p>Its own rules or permission mode {}.</p>",
                        if behavior == Behavior::Allow { "let the tool run" } else { "refused the tool" }
                    ),
                ),
            };
            html(StatusCode::GONE, title, &body)
        }
        Standing::Expired => html(
            StatusCode::GONE,
            "Expired",
            "<h1>This link expired</h1><p>The request timed out; its policy decided it.</p>",
        ),
        Standing::Gone => html(
            StatusCode::GONE,
            "No longer waiting",
            "<h1>This request is no longer waiting</h1><p>Its session ended or the daemon restarted.</p>",
        ),
    }
}

fn not_a_link() -> Response {
    html(
        StatusCode::NOT_FOUND,
        "Not a link",
        "<h1>This is not a valid approval link</h1><p>It may be cut short, or from another daemon.</p>",
    )
}

/// A page: the strict CSP, no caching, no referrer (the link is a credential).
pub(crate) fn html(status: StatusCode, title: &str, body: &str) -> Response {
    let page = format!(
        "<!doctype html><html lang=en><head><meta charset=utf-8>\
         <meta name=viewport content=\"width=device-width, initial-scale=1\">\
         <meta name=robots content=noindex><title>{title} · Switchboard</title><style>{STYLE}</style>\
         </head><body><main>{body}</main></body></html>",
        title = escape(title),
    );
    let mut response = (status, page).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert("x-robots-tag", HeaderValue::from_static("noindex"));
    response
}

const STYLE: &str = "body{font:16px/1.45 system-ui,sans-serif;margin:0;background:#f6f7f9;color:#1d2129}\
main{max-width:40rem;margin:0 auto;padding:1rem}h1{font-size:1.25rem}\
pre{background:#fff;border:1px solid #d8dde3;border-radius:6px;padding:.6rem;overflow:auto;max-height:50vh;white-space:pre-wrap;word-break:break-word}\
dl{display:grid;grid-template-columns:auto 1fr;gap:.2rem .8rem}dt{color:#5c6670}dd{margin:0;overflow-wrap:anywhere}\
form{display:grid;gap:.6rem;margin-top:1rem}label{display:grid;gap:.2rem;color:#5c6670}\
input{font:inherit;padding:.5rem;border:1px solid #c4cbd3;border-radius:6px}\
button{font:inherit;padding:.75rem;border-radius:6px;border:1px solid #c4cbd3;background:#fff}\
.warn{color:#8a5a00}.allow{background:#2f5bea;border-color:#2f5bea;color:#fff;font-weight:600}.deny{color:#b3261e}.muted{color:#5c6670}\
@media(prefers-color-scheme:dark){body{background:#15181c;color:#e4e7eb}pre,button,input{background:#1f2328;color:inherit;border-color:#39414a}}";

/// Unix milliseconds as an HTTP date (UTC); past the year 9999 (a timeout of "never"), that
/// year's end.
fn time(ms: u64) -> String {
    const LAST: u64 = 253_402_300_799_000;
    httpdate::fmt_http_date(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.min(LAST)))
}

/// Text for HTML: `&`, `<`, `>`, `"` and `'` escaped.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn page(standing: Standing) -> (u16, String) {
        let response = closed(standing);
        let status = response.status().as_u16();
        let body = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn a_closed_link_says_what_decided_its_request() {
        let decided = |behavior, by| Standing::Decided(Decision { behavior, by });
        let (status, timed_out) = page(decided(Behavior::Deny, DecidedBy::Timeout)).await;
        assert_eq!(status, 410);
        assert!(timed_out.contains("This request timed out"), "{timed_out}");
        assert!(!timed_out.contains("used") && !timed_out.contains("by the timeout"));
        let (_, stopped) = page(decided(Behavior::Deny, DecidedBy::Cancelled)).await;
        assert!(stopped.contains("no longer waiting"), "{stopped}");
        assert!(!stopped.contains("cancelled"), "{stopped}");
        let (_, closed) = page(decided(Behavior::Deny, DecidedBy::LinkClosed)).await;
        assert!(closed.contains("Its session stopped"), "{closed}");
        let who = DecidedBy::Person { who: "alice <b>".into() };
        let (_, used) = page(decided(Behavior::Allow, who)).await;
        assert!(
            used.contains("This link was used") && used.contains("approved by alice &lt;b&gt;")
        );
        let (_, ruled) = page(decided(Behavior::Deny, DecidedBy::Policy { rule: None })).await;
        assert!(ruled.contains("denied by the policy's default"), "{ruled}");
    }

    #[test]
    fn text_is_escaped() {
        assert_eq!(
            super::escape(r#"<script>alert("x" & 'y')</script>"#),
            "&lt;script&gt;alert(&quot;x&quot; &amp; &#39;y&#39;)&lt;/script&gt;"
        );
    }
}
