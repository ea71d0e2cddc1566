//! The search query language, read in one place for every face (`GET /api/search?q=`, gRPC's
//! `Search`, `switchboard search`, the web UI's search page): words and `"phrases"` the text
//! must hold, and `key:value` filters.
//!
//! | key | means |
//! |---|---|
//! | `tool:Bash` | calls of (and decisions on) this tool |
//! | `file:deploy.sh` | touched this file: a name, a path's tail, or a whole path |
//! | `wrote:deploy.sh` | wrote it (an edit, a write, a shell redirect) |
//! | `command:rm` | a shell command with this word |
//! | `decision:deny` | decisions: `allow` or `deny` (`allowed`, `denied`) |
//! | `by:person` | decided by `person`, `policy`, `timeout`, `cancelled`, `link_closed`, `cli`, `terminal` |
//! | `who:ana` | the person (or rule) who decided, part of the name |
//! | `origin:schedule` | the session's face or way in: `api`, `grpc`, `mcp`, `acp`, `schedule`, `trigger`, `relay`, `terminal`, `external` |
//! | `token:ci` | the token that started the session |
//! | `run:schedule:nightly` (or `schedule:nightly`, `trigger:pr`, `run:schedule`) | a schedule's or trigger's runs |
//! | `model:claude-…` | the model at the time |
//! | `project:/src/app` | the project (the repository of a worktree session), or a folder above it |
//! | `node:a` | the node that ran it |
//! | `session:ID` | one session |
//! | `kind:tool_call` | `tool_call` (`call`), `decision`, `prompt`, `answer`, `turn` |
//! | `worktree:yes` | sessions in a worktree of their own (`no`: not) |
//! | `since:7d`, `until:2026-11-01T00:00:00Z` | a time (RFC 3339) or an age |
//! | `cost:0.5` | costing at least this (US dollars) |
//! | `group:project` | add up instead: `project`, `model`, `session`, `tool`, `origin`, `node`, `day` |

use switchboard_store::{EntryKind, GroupBy, SearchQuery};

/// The longest query read (bytes).
pub const MAX_QUERY_BYTES: usize = 4096;

/// What a query asks.
#[derive(Debug, Clone, PartialEq)]
pub struct Asked {
    /// The filters and words.
    pub query: SearchQuery,
    /// Add the entries up by this, instead of listing them.
    pub group: Option<GroupBy>,
}

/// The keys a query knows, for the error that names one it does not.
const KEYS: &str = "tool, file, wrote, command, decision, by, who, origin, token, run, schedule, \
                    trigger, model, project, node, session, kind, worktree, since, until, cost, group";

/// Splits a query into its terms: words, `"phrases"`, and `key:value` with the value quoted or
/// not. An open quote runs to the end. Each with whether it began with a quote (a quoted term
/// is words, never a filter).
fn terms(text: &str) -> Vec<(String, bool)> {
    let mut terms = Vec::new();
    let mut term = String::new();
    let mut quoted = false;
    let mut started = false;
    let mut began_quoted = false;
    for c in text.chars() {
        match c {
            '"' => {
                if !started {
                    began_quoted = true;
                }
                quoted = !quoted;
                started = true;
            }
            c if c.is_whitespace() && !quoted => {
                if started {
                    terms.push((std::mem::take(&mut term), began_quoted));
                }
                started = false;
                began_quoted = false;
            }
            c => {
                term.push(c);
                started = true;
            }
        }
    }
    if started {
        terms.push((term, began_quoted));
    }
    terms
}

/// Sets `slot` to `value`, or says `key` is given twice.
fn once<T>(slot: &mut Option<T>, value: T, key: &str) -> Result<(), String> {
    match slot.replace(value) {
        Some(_) => Err(format!("{key}: is given twice")),
        None => Ok(()),
    }
}

/// Reads a query (see the module's notes); the error names the term at fault.
pub fn parse(text: &str) -> Result<Asked, String> {
    if text.len() > MAX_QUERY_BYTES {
        return Err(format!("the query is {} bytes; at most {MAX_QUERY_BYTES}", text.len()));
    }
    if let Some(c) = text.chars().find(|c| c.is_control() && !c.is_whitespace()) {
        return Err(format!("the query holds a control character ({:?})", c));
    }
    let mut query = SearchQuery::default();
    let mut group = None;
    for (term, quoted) in terms(text) {
        // A filter is `key:value`, unquoted; a URL (`http://…`) is words.
        let Some((key, value)) = term.split_once(':').filter(|(key, value)| {
            !quoted
                && !key.is_empty()
                && key.chars().all(|c| c.is_ascii_alphabetic() || c == '_')
                && !value.is_empty()
                && !value.starts_with("//")
        }) else {
            query.words.push(term);
            continue;
        };
        let value = value.to_owned();
        let set = |slot: &mut Option<String>| -> Result<(), String> {
            if slot.replace(value.clone()).is_some() {
                return Err(format!("{key}: is given twice"));
            }
            Ok(())
        };
        match key.to_ascii_lowercase().as_str() {
            "tool" => set(&mut query.tool)?,
            "file" | "path" | "wrote" => {
                if query.path.is_some() {
                    return Err(format!("{key}:{value}: one file a query (file: or wrote:)"));
                }
                query.path = Some(value.clone());
                query.wrote = key.eq_ignore_ascii_case("wrote");
            }
            "command" | "cmd" => set(&mut query.command)?,
            "decision" => {
                let decision = match value.as_str() {
                    "allow" | "allowed" => "allow",
                    "deny" | "denied" => "deny",
                    "ask" | "asked" => "ask",
                    other => return Err(format!("decision:{other}: say allow, deny or ask")),
                };
                once(&mut query.decision, decision.into(), key)?;
            }
            "by" => {
                const BY: [&str; 7] =
                    ["policy", "person", "timeout", "cancelled", "link_closed", "cli", "terminal"];
                if !BY.contains(&value.as_str()) {
                    return Err(format!("by:{value}: say one of {}", BY.join(", ")));
                }
                set(&mut query.decided_by)?;
            }
            "who" => set(&mut query.who)?,
            "origin" => set(&mut query.origin)?,
            "token" => set(&mut query.token)?,
            "run" => set(&mut query.run)?,
            "schedule" | "trigger" => {
                if query.run.replace(format!("{key}:{value}")).is_some() {
                    return Err(format!("{key}:{value}: a run is given twice"));
                }
            }
            "model" => set(&mut query.model)?,
            "project" => set(&mut query.project)?,
            "node" => set(&mut query.node)?,
            "session" => set(&mut query.session_id)?,
            "kind" => {
                let kind = match value.as_str() {
                    "call" | "tool" => Some(EntryKind::ToolCall),
                    other => EntryKind::parse(other),
                };
                let kind = kind.ok_or_else(|| {
                    format!("kind:{value}: say tool_call, decision, prompt, answer or turn")
                })?;
                once(&mut query.kind, kind, key)?;
            }
            "worktree" => {
                let worktree = match value.as_str() {
                    "yes" | "true" => true,
                    "no" | "false" => false,
                    other => return Err(format!("worktree:{other}: say yes or no")),
                };
                once(&mut query.worktree, worktree, key)?;
            }
            "since" => {
                let at = since_ms(&value).map_err(|e| format!("since: {e}"))?;
                once(&mut query.since_ms, at, key)?;
            }
            "until" => {
                let at = since_ms(&value).map_err(|e| format!("until: {e}"))?;
                once(&mut query.until_ms, at, key)?;
            }
            "cost" => {
                let cost: f64 = value
                    .trim_start_matches(">=")
                    .trim_start_matches('>')
                    .trim_start_matches('$')
                    .parse()
                    .ok()
                    .filter(|cost: &f64| cost.is_finite() && *cost >= 0.0)
                    .ok_or_else(|| {
                        format!("cost:{value}: say a number of US dollars, such as cost:0.5")
                    })?;
                once(&mut query.min_cost_usd, cost, key)?;
            }
            "group" => {
                let by = GroupBy::parse(&value).ok_or_else(|| {
                    format!("group:{value}: say project, model, session, tool, origin, node or day")
                })?;
                once(&mut group, by, key)?;
            }
            _ => {
                return Err(format!(
                    "{key}: is not a key a query knows ({KEYS}); put a word with a colon in quotes"
                ))
            }
        }
    }
    Ok(Asked { query, group })
}

/// A time as the query language reads it (`since:`, `until:`), and every face's `since`
/// (the audit trail's, a policy's dry run's): an RFC 3339 time, or an age before now (`7d`,
/// `24h`, `90m`, `30s`).
pub(crate) fn since_ms(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let unit = |suffix: char| match suffix {
        'd' => Some(86_400_000u64),
        'h' => Some(3_600_000),
        'm' => Some(60_000),
        's' => Some(1000),
        _ => None,
    };
    if let Some((number, suffix)) =
        text.char_indices().last().and_then(|(at, c)| Some((text[..at].parse::<u64>().ok()?, c)))
    {
        if let Some(ms) = unit(suffix) {
            return Ok(switchboard_store::now_ms().saturating_sub(number.saturating_mul(ms)));
        }
    }
    let at: jiff::Timestamp = text.parse().map_err(|_| {
        format!("{text:?} is neither a time (2026-11-01T00:00:00Z) nor an age (7d, 24h, 90m)")
    })?;
    u64::try_from(at.as_millisecond()).map_err(|_| "a time before 1970".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_is_a_time_or_an_age() {
        // The age is counted back from the clock as it reads it: between these two readings.
        let before = switchboard_store::now_ms();
        let week = since_ms("7d").unwrap();
        let after = switchboard_store::now_ms();
        assert!((before - 7 * 86_400_000..=after - 7 * 86_400_000).contains(&week), "{week}");
        assert_eq!(since_ms("2026-11-01T00:00:00Z").unwrap(), 1_793_491_200_000);
        assert!(since_ms("yesterday").unwrap_err().contains("neither a time"));
        assert!(since_ms("-3d").is_err());
    }

    #[test]
    fn terms_filters_and_words() {
        let asked = parse(
            r#"file:deploy.sh decision:denied schedule:nightly "rm -rf" since:7d cost:>0.5 worktree:yes group:project by:person say"#,
        )
        .unwrap();
        let query = asked.query;
        assert_eq!(query.path.as_deref(), Some("deploy.sh"));
        assert!(!query.wrote);
        assert_eq!(query.decision.as_deref(), Some("deny"));
        assert_eq!(query.decided_by.as_deref(), Some("person"));
        assert_eq!(query.run.as_deref(), Some("schedule:nightly"));
        assert_eq!(query.words, ["rm -rf", "say"]);
        assert!(query.since_ms.unwrap() < switchboard_store::now_ms());
        assert_eq!(query.min_cost_usd, Some(0.5));
        assert_eq!(query.worktree, Some(true));
        assert_eq!(asked.group, Some(GroupBy::Project));
        let quoted = parse(r#"file:"my notes.md" run:schedule:nightly http://x.y "a:b""#).unwrap();
        assert_eq!(quoted.query.path.as_deref(), Some("my notes.md"));
        assert_eq!(quoted.query.run.as_deref(), Some("schedule:nightly"));
        assert_eq!(quoted.query.words, ["http://x.y", "a:b"]);
        assert_eq!(parse("kind:call wrote:x.rs").unwrap().query.kind, Some(EntryKind::ToolCall));
        assert!(parse("wrote:x.rs").unwrap().query.wrote);
    }

    #[test]
    fn a_bad_term_is_named() {
        for (query, says) in [
            ("colour:red", "colour: is not a key"),
            ("decision:maybe", "say allow, deny or ask"),
            ("by:someone", "by:someone"),
            ("kind:file", "kind:file"),
            ("since:soon", "since:"),
            ("cost:-1", "cost:-1"),
            ("cost:NaN", "cost:NaN"),
            ("group:colour", "group:colour"),
            ("tool:a tool:b", "tool: is given twice"),
            ("since:1d since:2d", "since: is given twice"),
            ("group:day group:model", "group: is given twice"),
            ("file:a wrote:b", "one file a query"),
            ("rm\u{0}x", "control character"),
            ("worktree:maybe", "say yes or no"),
        ] {
            let error = parse(query).unwrap_err();
            assert!(error.contains(says), "{query}: {error}");
        }
        assert!(parse(&"a ".repeat(MAX_QUERY_BYTES)).unwrap_err().contains("at most"));
    }
}
