//! Search and blame over every session: what the index beside the log answers
//! (`switchboard_store::search`), the one reading of a session's updates into its entries
//! ([`finder`]), the query language every face reads ([`query`]), and blame: which session,
//! turn and tool call last wrote a line of a file.
//!
//! The daemon's part (indexing as it stores, rebuilding what is missing from the log, and
//! `Daemon::search_answer`, what every face answers) is `daemon/search.rs`; the faces are
//! `api/search.rs`, gRPC's `Search` and `Blame`, and `switchboard search` and `blame`.

pub mod finder;
pub mod query;

use serde::{Deserialize, Serialize};
use switchboard_store::{EntryKind, Search, SearchHit, SearchQuery, StoreError};

/// Pages of candidates blame reads at most (each [`BLAME_PAGE`] calls that wrote the file).
pub const BLAME_PAGES: usize = 20;

/// Calls that wrote the file read a page at a time (each keeps up to
/// `switchboard_store::search::MAX_WRITTEN_BYTES` of what it wrote).
pub const BLAME_PAGE: usize = 25;

/// Who last wrote a line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Blamed {
    /// The call that wrote it.
    pub call: SearchHit,
    /// The prompt of the turn it was written in, when the index has it.
    pub prompt: Option<SearchHit>,
    /// The session's title, if it has one.
    #[serde(default)]
    pub title: Option<String>,
}

/// What blame answers, on every face (`GET /api/blame`, gRPC's `Blame`,
/// `switchboard blame --json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BlameAnswer {
    /// Who wrote the line, or `None` when no call the index holds wrote it.
    pub found: Option<Blamed>,
}

/// The last tool call that wrote `line` into `path`, newest first among the calls that wrote
/// that file, through edits, writes and shell redirects; and the prompt of its turn. `None`
/// when no call the index holds wrote it. `path` is absolute, or a file's path in its
/// repository (a clone elsewhere, a worktree's branch merged): one of a single name (a file at
/// the top) must be that, in the call's own project. A call the policy or a person denied wrote
/// nothing, and is passed by.
pub async fn blame(
    index: &dyn Search,
    path: &str,
    line: &str,
) -> Result<Option<Blamed>, StoreError> {
    let needle = line.trim();
    let top_level = !path.contains('/');
    let mut query = SearchQuery {
        kind: Some(EntryKind::ToolCall),
        path: Some(path.to_owned()),
        wrote: true,
        with_written: true,
        limit: BLAME_PAGE,
        ..SearchQuery::default()
    };
    for _ in 0..BLAME_PAGES {
        let page = index.search(&query).await?;
        for hit in &page {
            let entry = &hit.entry;
            let in_project = |path: &str| {
                path == format!("{}/{}", entry.project.trim_end_matches('/'), query_path(&query))
            };
            if top_level
                && !entry.paths.iter().any(|touched| touched.wrote && in_project(&touched.path))
            {
                continue;
            }
            let wrote = entry
                .written
                .as_deref()
                .is_some_and(|written| wrote_line(written, entry.command.is_some(), needle));
            if !wrote || denied(index, hit).await? {
                continue;
            }
            let mut call = hit.clone();
            // What it wrote stays in the index; the answer names the call.
            call.entry.written = None;
            let prompt = index
                .search(&SearchQuery {
                    kind: Some(EntryKind::Prompt),
                    session_id: Some(call.entry.session_id.clone()),
                    before: Some(call.cursor()),
                    limit: 1,
                    ..SearchQuery::default()
                })
                .await?
                .pop();
            return Ok(Some(Blamed { call, prompt, title: None }));
        }
        match page.last() {
            Some(last) if page.len() == BLAME_PAGE => query.before = Some(last.cursor()),
            _ => break,
        }
    }
    Ok(None)
}

fn query_path(query: &SearchQuery) -> &str {
    query.path.as_deref().unwrap_or_default()
}

/// Whether the call of `hit` was denied (by the policy or a person): it never ran.
async fn denied(index: &dyn Search, hit: &SearchHit) -> Result<bool, StoreError> {
    let Some(call) = hit.entry.tool_use_id.as_deref() else { return Ok(false) };
    let denials = index
        .search(&SearchQuery {
            kind: Some(EntryKind::Decision),
            decision: Some("deny".into()),
            session_id: Some(hit.entry.session_id.clone()),
            tool: hit.entry.tool.clone(),
            limit: switchboard_store::search::MAX_HITS,
            ..SearchQuery::default()
        })
        .await?;
    Ok(denials.iter().any(|denial| denial.entry.tool_use_id.as_deref() == Some(call)))
}

/// Whether text a call wrote holds `line` (trimmed):
/// - an edit's or a file's: one of its lines, whole; or, when it wrote a part of a line (an
///   edit's new text of one line, at least 8 characters), that part within the line;
/// - a shell command's (its redirect's words, a here-document's lines; `\n` and `\t` read as
///   the line break and tab they print): the line where neither end is in the middle of a word.
fn wrote_line(written: &str, shell: bool, line: &str) -> bool {
    if !shell {
        let part = written.trim();
        return written.lines().any(|written| written.trim() == line)
            || (!part.contains('\n') && part.chars().count() >= 8 && line.contains(part));
    }
    let written = written.replace("\\n", "\n").replace("\\t", "\t");
    let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
    written.match_indices(line).any(|(at, _)| {
        let before = written[..at].chars().next_back();
        let after = written[at + line.len()..].chars().next();
        let starts_inside = word(before) && word(line.chars().next());
        let ends_inside = word(after) && word(line.chars().next_back());
        !starts_inside && !ends_inside
    })
}

/// The most hits a page holds by default.
pub const DEFAULT_HITS: usize = 50;

/// A hit as every face shows it: the entry, and its session's title.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hit {
    /// The entry found.
    #[serde(flatten)]
    pub hit: SearchHit,
    /// Its session's title, if it has one.
    pub title: Option<String>,
}

/// What a search answers, on every face (`GET /api/search`, gRPC's `Search`,
/// `switchboard search --json`, the web UI's search page).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Answer {
    /// The entries found, newest first (none when the query groups).
    pub hits: Vec<Hit>,
    /// Where the next page starts (`before=`), when this one is full.
    pub next: Option<String>,
    /// The entries added up, when the query has `group:`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub groups: Option<Vec<switchboard_store::SearchGroup>>,
    /// Sessions the index misses a part of now (being rebuilt from the log at start, or left
    /// for the next rebuild): 0 when it holds everything stored.
    pub behind: usize,
}

#[cfg(test)]
mod tests {
    use super::wrote_line;

    #[test]
    fn a_line_is_written_whole() {
        assert!(wrote_line("# v3\necho deployed by edit 3\n", false, "echo deployed by edit 3"));
        assert!(!wrote_line("echo deployed by edit 3", false, "echo deploy"), "part of a line");
        let command = "printf 'generated line 2\\n' > gen/g2.txt";
        assert!(wrote_line(command, true, "generated line 2"));
        assert!(!wrote_line(command, true, "generated lin"), "ends inside a word");
        assert!(!wrote_line(command, true, "enerated line 2"), "starts inside a word");
        assert!(wrote_line("cat > a.py <<'EOF'\nimport os\nEOF", true, "import os"));
        assert!(
            wrote_line("printf 'a\\nsecond line\\n' > f", true, "second line"),
            "a printed escape"
        );
        assert!(
            wrote_line("timeout_ms: 500", false, "let config = Config { timeout_ms: 500 };"),
            "a part of a line"
        );
        assert!(!wrote_line(")", false, "call(a)"), "too small a part says nothing");
    }
}
