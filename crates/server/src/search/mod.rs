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

/// The last tool call that wrote `line` into `path` (an absolute path, or a path's tail), newest
/// first among the calls that wrote that file, through edits, writes and shell redirects; and
/// the prompt of its turn. `None` when no call the index holds wrote it.
pub async fn blame(
    index: &dyn Search,
    path: &str,
    line: &str,
) -> Result<Option<Blamed>, StoreError> {
    let needle = line.trim();
    let mut query = SearchQuery {
        kind: Some(EntryKind::ToolCall),
        path: Some(path.to_owned()),
        wrote: true,
        limit: BLAME_PAGE,
        ..SearchQuery::default()
    };
    for _ in 0..BLAME_PAGES {
        let page = index.search(&query).await?;
        let found = page.iter().find(|hit| {
            hit.entry
                .written
                .as_deref()
                .is_some_and(|written| wrote_line(written, hit.entry.command.is_some(), needle))
        });
        if let Some(call) = found {
            let mut call = call.clone();
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

/// Whether text a call wrote holds `line` (trimmed): one of an edit's or a file's lines, or
/// within a shell command's text (its redirect's words, a here-document's lines) where
/// neither end of it is in the middle of a word.
fn wrote_line(written: &str, shell: bool, line: &str) -> bool {
    if !shell {
        return written.lines().any(|written| written.trim() == line);
    }
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
    }
}
