//! The search index kept beside the log: one [`SearchEntry`] per thing a person looks for in a
//! session (a tool call, a permission decision, a prompt, an answer, a turn's end), with the
//! files it touched and the words of its text, written by the daemon as it stores the events
//! the entry was read from. The store never reads a payload: the daemon's projection makes the
//! entries, and the store keeps and finds them.
//!
//! - [`Search::index`] writes entries and, with them, how far each session is indexed (its
//!   mark); an entry is keyed by its session, event and place in the event, so writing one
//!   twice (a rebuild from the log after a crash) keeps one.
//! - [`Search::search`] finds entries by [`SearchQuery`], newest first, a page at a time;
//!   [`Search::group`] adds them up (entries and cost) by a [`GroupBy`].
//! - SQLite keeps the words in an FTS5 table, PostgreSQL in a `tsvector` with a GIN index, the
//!   paths in a table of their own indexed by name; [`MemoryStore`](crate::MemoryStore) scans.
//!   The filters that narrow most (a tool, a decision, a file, words, a time) are an index's;
//!   the others narrow what those find.
//! - **Words are cut once, here** ([`words_of`]: lowercase runs of letters and digits), for
//!   every store: each keeps and looks up the same words, so `deploy` finds `deploy.sh` in
//!   SQLite, PostgreSQL and memory alike. Text comparisons (`who`, a command, a project, a
//!   path's tail) are exact in case, in all three.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::StoreError;

pub(crate) mod memory;
pub(crate) mod postgres;
pub(crate) mod sqlite;

/// What an entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    /// A tool call, with its whole input.
    ToolCall,
    /// A permission decision on a tool call.
    Decision,
    /// A prompt sent to the CLI.
    Prompt,
    /// An answer's text block.
    Answer,
    /// A turn's end, with its cost.
    Turn,
}

impl EntryKind {
    /// Every kind.
    pub const ALL: [EntryKind; 5] = [
        EntryKind::ToolCall,
        EntryKind::Decision,
        EntryKind::Prompt,
        EntryKind::Answer,
        EntryKind::Turn,
    ];

    /// Its text (`tool_call`).
    pub fn as_str(self) -> &'static str {
        match self {
            EntryKind::ToolCall => "tool_call",
            EntryKind::Decision => "decision",
            EntryKind::Prompt => "prompt",
            EntryKind::Answer => "answer",
            EntryKind::Turn => "turn",
        }
    }

    /// The kind `text` names, if any.
    pub fn parse(text: &str) -> Option<EntryKind> {
        EntryKind::ALL.into_iter().find(|kind| kind.as_str() == text)
    }
}

/// A file an entry touched, absolute.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Touched {
    /// The path.
    pub path: String,
    /// Whether the call wrote it (an edit, a write, a shell redirect or `tee`).
    pub wrote: bool,
}

/// One thing found in a session, with what the session was when it happened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchEntry {
    /// The session.
    pub session_id: String,
    /// The event it was read from.
    pub seq: u64,
    /// Its place among the entries of that event (0 for most).
    pub place: u32,
    /// When the event was stored (Unix milliseconds).
    pub ts_ms: u64,
    /// What it is.
    pub kind: EntryKind,
    /// The tool, for a call or a decision.
    pub tool: Option<String>,
    /// The call's id, for a call or a decision.
    pub tool_use_id: Option<String>,
    /// The files it touched.
    pub paths: Vec<Touched>,
    /// A shell command's text.
    pub command: Option<String>,
    /// `allow` or `deny`, for a decision.
    pub decision: Option<String>,
    /// Who decided: `policy`, `person`, `timeout`, `cancelled`, `link_closed`, `cli`,
    /// `terminal`.
    pub decided_by: Option<String>,
    /// The person who answered, or the rule that did.
    pub who: Option<String>,
    /// The face the session was started through (`api`, `grpc`, `mcp`, `acp`, `schedule`,
    /// `trigger`), or how it came (`relay`, `terminal`, `hooks`).
    pub origin: Option<String>,
    /// The token that started the session.
    pub token: Option<String>,
    /// The schedule or trigger run it is (`schedule:nightly`).
    pub run: Option<String>,
    /// The model at the time.
    pub model: Option<String>,
    /// The project: the repository of a worktree session, else its directory.
    pub project: String,
    /// The node that ran it.
    pub node: Option<String>,
    /// Whether the session ran in a worktree of its own.
    pub worktree: bool,
    /// What it cost (a turn), US dollars.
    pub cost_usd: f64,
    /// Its words: a prompt's or an answer's text, a call's input, a decision's message.
    pub text: String,
    /// What a call wrote (an edit's new text, a file's content, a shell command that wrote a
    /// file), for blame; a search's hit never carries it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub written: Option<String>,
}

impl SearchEntry {
    /// An entry of `kind` read from event `seq` (stored at `ts_ms`) with `text`, and nothing
    /// else yet: no session, tool, file or decision.
    pub fn new(kind: EntryKind, seq: u64, ts_ms: u64, text: String) -> SearchEntry {
        SearchEntry {
            session_id: String::new(),
            seq,
            place: 0,
            ts_ms,
            kind,
            tool: None,
            tool_use_id: None,
            paths: Vec::new(),
            command: None,
            decision: None,
            decided_by: None,
            who: None,
            origin: None,
            token: None,
            run: None,
            model: None,
            project: String::new(),
            node: None,
            worktree: false,
            cost_usd: 0.0,
            text,
            written: None,
        }
    }
}

/// What to look for: every filter given must hold.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SearchQuery {
    /// Of this kind.
    pub kind: Option<EntryKind>,
    /// This tool (exactly).
    pub tool: Option<String>,
    /// Touched this file: an absolute path, a path's tail (`src/deploy.sh`), or a file's name.
    pub path: Option<String>,
    /// Only entries that wrote the file (with `path`).
    pub wrote: bool,
    /// Hits carry what their call wrote (blame's look-up; never a query's: a search answer
    /// does not carry it).
    #[serde(skip)]
    pub with_written: bool,
    /// A shell command with this word.
    pub command: Option<String>,
    /// `allow` or `deny`.
    pub decision: Option<String>,
    /// Who decided (`person`, `policy`, ...).
    pub decided_by: Option<String>,
    /// The person or rule that decided (part of its name).
    pub who: Option<String>,
    /// The session's face or way in (`schedule`, `api`, ...).
    pub origin: Option<String>,
    /// The token that started the session.
    pub token: Option<String>,
    /// The schedule or trigger run (`schedule:nightly`; `schedule` for any schedule's).
    pub run: Option<String>,
    /// The model (exactly).
    pub model: Option<String>,
    /// The project, or a folder above it.
    pub project: Option<String>,
    /// The node.
    pub node: Option<String>,
    /// The session.
    pub session_id: Option<String>,
    /// Whether the session ran in a worktree.
    pub worktree: Option<bool>,
    /// At or after (Unix milliseconds).
    pub since_ms: Option<u64>,
    /// Before (Unix milliseconds).
    pub until_ms: Option<u64>,
    /// Costing at least this (US dollars).
    pub min_cost_usd: Option<f64>,
    /// Words and phrases its text holds, every one.
    pub words: Vec<String>,
    /// Older than this hit (the last hit of the page before).
    pub before: Option<Cursor>,
    /// At most this many hits.
    pub limit: usize,
}

/// Where a page of hits ended: the last hit's time and entry number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cursor {
    /// Its time.
    pub ts_ms: u64,
    /// Its entry number.
    pub id: u64,
}

impl Cursor {
    /// As text: `TS-ID`.
    pub fn to_text(self) -> String {
        format!("{}-{}", self.ts_ms, self.id)
    }

    /// From [`Cursor::to_text`]'s text.
    pub fn parse(text: &str) -> Option<Cursor> {
        let (ts, id) = text.split_once('-')?;
        Some(Cursor { ts_ms: ts.parse().ok()?, id: id.parse().ok()? })
    }
}

/// An entry found, with its number (for the next page).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchHit {
    /// Its entry number.
    pub id: u64,
    /// The entry.
    #[serde(flatten)]
    pub entry: SearchEntry,
}

impl SearchHit {
    /// Where a page ending at it ends.
    pub fn cursor(&self) -> Cursor {
        Cursor { ts_ms: self.entry.ts_ms, id: self.id }
    }
}

/// What entries are added up by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupBy {
    /// The project.
    Project,
    /// The model.
    Model,
    /// The session.
    Session,
    /// The tool.
    Tool,
    /// The session's face or way in.
    Origin,
    /// The node.
    Node,
    /// The day (UTC, `YYYY-MM-DD`).
    Day,
}

impl GroupBy {
    /// Every grouping.
    pub const ALL: [GroupBy; 7] = [
        GroupBy::Project,
        GroupBy::Model,
        GroupBy::Session,
        GroupBy::Tool,
        GroupBy::Origin,
        GroupBy::Node,
        GroupBy::Day,
    ];

    /// Its text.
    pub fn as_str(self) -> &'static str {
        match self {
            GroupBy::Project => "project",
            GroupBy::Model => "model",
            GroupBy::Session => "session",
            GroupBy::Tool => "tool",
            GroupBy::Origin => "origin",
            GroupBy::Node => "node",
            GroupBy::Day => "day",
        }
    }

    /// The grouping `text` names, if any.
    pub fn parse(text: &str) -> Option<GroupBy> {
        GroupBy::ALL.into_iter().find(|by| by.as_str() == text)
    }

    /// The column it reads (`day` is computed from `ts_ms`).
    pub(crate) fn column(self) -> &'static str {
        match self {
            GroupBy::Project => "project",
            GroupBy::Model => "model",
            GroupBy::Session => "session_id",
            GroupBy::Tool => "tool",
            GroupBy::Origin => "origin",
            GroupBy::Node => "node",
            GroupBy::Day => "ts_ms",
        }
    }

    /// An entry's key.
    pub fn key_of(self, entry: &SearchEntry) -> Option<String> {
        match self {
            GroupBy::Project => Some(entry.project.clone()),
            GroupBy::Model => entry.model.clone(),
            GroupBy::Session => Some(entry.session_id.clone()),
            GroupBy::Tool => entry.tool.clone(),
            GroupBy::Origin => entry.origin.clone(),
            GroupBy::Node => entry.node.clone(),
            GroupBy::Day => Some(day_of(entry.ts_ms)),
        }
    }
}

/// The UTC day of a time (`YYYY-MM-DD`).
pub fn day_of(ts_ms: u64) -> String {
    // Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
    let days = (ts_ms / 86_400_000) as i64;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

/// A group's totals.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchGroup {
    /// What the entries share (`None`: they have none, such as calls of no model).
    pub key: Option<String>,
    /// How many entries.
    pub entries: u64,
    /// Their cost, US dollars.
    pub cost_usd: f64,
}

/// The search index of a store (see the module's notes).
#[async_trait::async_trait]
pub trait Search: Send + Sync {
    /// Writes `entries` and each session's mark (how far it is indexed: its last event read),
    /// together; an entry already kept (its session, event and place) is kept once.
    async fn index(
        &self,
        entries: &[SearchEntry],
        marks: &[(String, u64)],
    ) -> Result<(), StoreError>;
    /// How far each session is indexed.
    async fn marks(&self) -> Result<HashMap<String, u64>, StoreError>;
    /// The entries that match, newest first (at most `query.limit`).
    async fn search(&self, query: &SearchQuery) -> Result<Vec<SearchHit>, StoreError>;
    /// The entries that match, added up by `by` (most cost first, then most entries).
    async fn group(&self, query: &SearchQuery, by: GroupBy)
        -> Result<Vec<SearchGroup>, StoreError>;
}

/// The most hits a page holds.
pub const MAX_HITS: usize = 1000;

/// The most groups a grouping returns.
pub const MAX_GROUPS: usize = 1000;

/// The longest text an entry keeps (in bytes; cut at a character's edge): words past it are
/// not found.
pub const MAX_TEXT_BYTES: usize = 16 * 1024;

/// The most an entry keeps of what a call wrote (bytes): a line written past it is not found
/// by blame.
pub const MAX_WRITTEN_BYTES: usize = 256 * 1024;

/// How much of an entry's text a hit shows (characters).
pub const SNIPPET_CHARS: usize = 1000;

/// A number as the databases keep it, or an error naming it.
pub(crate) fn big(value: u64) -> Result<i64, StoreError> {
    i64::try_from(value)
        .map_err(|_| StoreError::Database(format!("{value} is too large for the search index")))
}

/// `text` cut to at most `max` bytes, at a character's edge.
pub fn cut(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// A file's name: what follows its path's last `/`.
pub fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// A text's words as every store keeps and looks them up: its runs of letters and digits,
/// lowercased, joined by spaces.
pub fn words_of(text: &str) -> String {
    let mut words = String::with_capacity(text.len());
    for word in text.split(|c: char| !c.is_alphanumeric()).filter(|word| !word.is_empty()) {
        if !words.is_empty() {
            words.push(' ');
        }
        words.extend(word.chars().flat_map(char::to_lowercase));
    }
    words
}

/// The query's words as an FTS5 query: each a phrase of its [`words_of`], all required; `None`
/// when no word has a letter or a digit (nothing to look up).
pub(crate) fn fts5_match(words: &[String]) -> Option<String> {
    let phrases: Vec<String> = words
        .iter()
        .map(|word| words_of(word))
        .filter(|word| !word.is_empty())
        .map(|word| format!("\"{word}\""))
        .collect();
    (!phrases.is_empty()).then(|| phrases.join(" "))
}

/// A value a query binds.
#[derive(Debug, Clone)]
pub(crate) enum Bound {
    Text(String),
    Int(i64),
    Real(f64),
    Bool(bool),
}

/// A query's `WHERE` clause as it is built: its conditions (all must hold) and what they bind.
pub(crate) struct Where {
    pub clauses: Vec<String>,
    pub bound: Vec<Bound>,
    param: fn(usize) -> String,
}

impl Where {
    /// Binds `value`; its parameter's name.
    pub(crate) fn bind(&mut self, value: Bound) -> String {
        self.bound.push(value);
        (self.param)(self.bound.len())
    }

    /// The clause (`TRUE` for none).
    pub(crate) fn clause(&self) -> String {
        if self.clauses.is_empty() {
            return String::from("TRUE");
        }
        self.clauses.iter().map(|clause| format!("({clause})")).collect::<Vec<_>>().join(" AND ")
    }
}

/// How a database writes the parts of a query that differ.
pub(crate) trait Dialect {
    /// The `n`th parameter (from 1).
    fn param(n: usize) -> String;
    /// A condition: the entry's words hold every one of `words` (each a phrase), or `None`
    /// when there is nothing to look up.
    fn words(at: &mut Where, words: &[String]) -> Option<String>;
    /// A condition: text `column` holds parameter `p` (exact in case).
    fn contains(column: &str, p: &str) -> String;
    /// A condition: text `column` ends with parameter `p` (exact in case).
    fn ends_with(column: &str, p: &str) -> String;
}

/// A condition: text `column` starts with parameter `p` (exact in case; the same SQL in both
/// databases).
fn starts_with(column: &str, p: &str) -> String {
    format!("substr({column}, 1, length({p})) = {p}")
}

fn clamp(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// A query's `WHERE` clause and its parameters, over the `search_entries` columns and the
/// `search_paths` table.
pub(crate) fn conditions<D: Dialect>(query: &SearchQuery) -> Where {
    let mut at = Where { clauses: Vec::new(), bound: Vec::new(), param: D::param };
    let exact = [
        ("kind", query.kind.map(|kind| kind.as_str().to_owned())),
        ("tool", query.tool.clone()),
        ("decision", query.decision.clone()),
        ("decided_by", query.decided_by.clone()),
        ("origin", query.origin.clone()),
        ("token", query.token.clone()),
        ("model", query.model.clone()),
        ("node", query.node.clone()),
        ("session_id", query.session_id.clone()),
    ];
    for (column, value) in exact {
        if let Some(value) = value {
            let p = at.bind(Bound::Text(value));
            at.clauses.push(format!("{column} = {p}"));
        }
    }
    if let Some(run) = &query.run {
        let clause = if run.contains(':') {
            format!("run = {}", at.bind(Bound::Text(run.clone())))
        } else {
            starts_with("run", &at.bind(Bound::Text(format!("{run}:"))))
        };
        at.clauses.push(clause);
    }
    if let Some(who) = &query.who {
        let p = at.bind(Bound::Text(who.clone()));
        at.clauses.push(D::contains("who", &p));
    }
    if let Some(project) = &query.project {
        let project = project.trim_end_matches('/');
        let exact = at.bind(Bound::Text(project.to_owned()));
        let under = at.bind(Bound::Text(format!("{project}/")));
        at.clauses.push(format!("project = {exact} OR {}", starts_with("project", &under)));
    }
    if let Some(worktree) = query.worktree {
        let p = at.bind(Bound::Bool(worktree));
        at.clauses.push(format!("worktree = {p}"));
    }
    if let Some(since) = query.since_ms {
        let p = at.bind(Bound::Int(clamp(since)));
        at.clauses.push(format!("ts_ms >= {p}"));
    }
    if let Some(until) = query.until_ms {
        let p = at.bind(Bound::Int(clamp(until)));
        at.clauses.push(format!("ts_ms < {p}"));
    }
    if let Some(cost) = query.min_cost_usd {
        let p = at.bind(Bound::Real(cost));
        at.clauses.push(format!("cost_usd >= {p}"));
    }
    if let Some(command) = &query.command {
        // Through the words' index, then checked on the command itself.
        if let Some(clause) = D::words(&mut at, std::slice::from_ref(command)) {
            at.clauses.push(clause);
        }
        let p = at.bind(Bound::Text(command.clone()));
        at.clauses.push(D::contains("command", &p));
    }
    if let Some(clause) = D::words(&mut at, &query.words) {
        at.clauses.push(clause);
    }
    if let Some(path) = &query.path {
        let name = at.bind(Bound::Text(file_name(path).to_owned()));
        let mut clause = format!("id IN (SELECT entry FROM search_paths WHERE name = {name}");
        if query.wrote {
            clause.push_str(" AND wrote");
        }
        if path.contains('/') {
            // An absolute path, or a path's tail: `src/deploy.sh` is `/…/src/deploy.sh`.
            let tail = path.trim_start_matches('/');
            let whole = at.bind(Bound::Text(format!("/{tail}")));
            let ending = at.bind(Bound::Text(format!("/{tail}")));
            let ends = D::ends_with("path", &ending);
            clause.push_str(&format!(" AND (path = {whole} OR {ends})"));
        }
        clause.push(')');
        at.clauses.push(clause);
    }
    if let Some(before) = query.before {
        let ts = at.bind(Bound::Int(clamp(before.ts_ms)));
        let id = at.bind(Bound::Int(clamp(before.id)));
        at.clauses.push(format!("ts_ms < {ts} OR ts_ms = {ts} AND id < {id}"));
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_are_utc_dates() {
        assert_eq!(day_of(0), "1970-01-01");
        assert_eq!(day_of(951_782_400_000), "2000-02-29");
        assert_eq!(day_of(1_796_083_199_000), "2026-11-30");
    }

    #[test]
    fn words_become_phrases_and_nothing_else() {
        assert_eq!(words_of("Tidy deploy.sh, SAY \"hi\"—café 2"), "tidy deploy sh say hi café 2");
        assert_eq!(fts5_match(&["rm".into(), "say \"hi\"".into()]).unwrap(), "\"rm\" \"say hi\"");
        assert_eq!(fts5_match(&["--".into(), "*".into()]), None);
        assert_eq!(cut("héllo", 2), "h");
        assert_eq!(file_name("/a/b/deploy.sh"), "deploy.sh");
        assert_eq!(
            Cursor::parse(&Cursor { ts_ms: 5, id: 7 }.to_text()),
            Some(Cursor { ts_ms: 5, id: 7 })
        );
        assert_eq!(Cursor::parse("5"), None);
    }
}
