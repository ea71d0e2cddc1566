//! The search index in SQLite: `search_entries` (a row per entry, indexed by event, time,
//! tool and decision), `search_paths` (the files each touched, by name), `search_words` (an
//! FTS5 table of each entry's words, keyed by the entry's row id) and `search_marks`. Written
//! by the store's writer thread, in its transactions; read on its read connections.

use std::collections::HashMap;

use rusqlite::{params, Connection, ToSql};

use super::{
    conditions, Bound, Dialect, GroupBy, SearchEntry, SearchGroup, SearchHit, SearchQuery, Touched,
    Where,
};
use crate::StoreError;

/// The schema (one migration).
pub(crate) const SCHEMA: &str = "
    CREATE TABLE search_entries (
        id INTEGER PRIMARY KEY,
        session_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        place INTEGER NOT NULL,
        ts_ms INTEGER NOT NULL,
        kind TEXT NOT NULL,
        tool TEXT,
        tool_use_id TEXT,
        command TEXT,
        decision TEXT,
        decided_by TEXT,
        who TEXT,
        origin TEXT,
        token TEXT,
        run TEXT,
        model TEXT,
        project TEXT NOT NULL,
        node TEXT,
        worktree INTEGER NOT NULL,
        cost_usd REAL NOT NULL,
        text TEXT NOT NULL,
        written TEXT,
        paths TEXT NOT NULL
    );
    CREATE UNIQUE INDEX search_by_event ON search_entries (session_id, seq, place);
    CREATE INDEX search_by_time ON search_entries (ts_ms);
    CREATE INDEX search_by_tool ON search_entries (tool, ts_ms);
    CREATE INDEX search_by_decision ON search_entries (decision, ts_ms);
    CREATE TABLE search_paths (
        entry INTEGER NOT NULL,
        name TEXT NOT NULL,
        path TEXT NOT NULL,
        wrote INTEGER NOT NULL
    );
    CREATE INDEX search_paths_by_name ON search_paths (name, entry);
    CREATE INDEX search_paths_by_entry ON search_paths (entry);
    CREATE VIRTUAL TABLE search_words USING fts5(words, content='', contentless_delete=1,
        tokenize = 'unicode61 remove_diacritics 0');
    CREATE TABLE search_marks (session_id TEXT PRIMARY KEY, seq INTEGER NOT NULL);";

struct Sqlite;

impl Dialect for Sqlite {
    fn param(n: usize) -> String {
        format!("?{n}")
    }

    fn words(at: &mut Where, words: &[String]) -> Option<String> {
        let matched = super::fts5_match(words)?;
        let p = at.bind(Bound::Text(matched));
        Some(format!("id IN (SELECT rowid FROM search_words WHERE search_words MATCH {p})"))
    }

    fn contains(column: &str, p: &str) -> String {
        format!("instr({column}, {p}) > 0")
    }

    fn ends_with(column: &str, p: &str) -> String {
        format!("substr({column}, -length({p})) = {p}")
    }
}

fn to_sql(bound: &[Bound]) -> Vec<Box<dyn ToSql>> {
    bound
        .iter()
        .map(|value| -> Box<dyn ToSql> {
            match value {
                Bound::Text(text) => Box::new(text.clone()),
                Bound::Int(int) => Box::new(*int),
                Bound::Real(real) => Box::new(*real),
                Bound::Bool(flag) => Box::new(*flag),
            }
        })
        .collect()
}

/// Writes entries and marks (within the writer's transaction, all or none).
pub(crate) fn write(
    connection: &Connection,
    entries: &[SearchEntry],
    marks: &[(String, u64)],
) -> Result<(), StoreError> {
    connection.execute_batch("SAVEPOINT search_index")?;
    let written = (|| -> Result<(), StoreError> {
        let mut insert = connection.prepare_cached(
            "INSERT OR IGNORE INTO search_entries (session_id, seq, place, ts_ms, kind, tool,
             tool_use_id, command, decision, decided_by, who, origin, token, run, model, project,
             node, worktree, cost_usd, text, written, paths)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17,
             ?18, ?19, ?20, ?21, ?22)",
        )?;
        let mut path = connection.prepare_cached(
            "INSERT INTO search_paths (entry, name, path, wrote) VALUES (?1, ?2, ?3, ?4)",
        )?;
        let mut words =
            connection.prepare_cached("INSERT INTO search_words (rowid, words) VALUES (?1, ?2)")?;
        for entry in entries {
            let paths = serde_json::to_string(&entry.paths)
                .map_err(|error| StoreError::Database(error.to_string()))?;
            let inserted = insert.execute(params![
                entry.session_id,
                super::big(entry.seq)?,
                entry.place,
                super::big(entry.ts_ms)?,
                entry.kind.as_str(),
                entry.tool,
                entry.tool_use_id,
                entry.command,
                entry.decision,
                entry.decided_by,
                entry.who,
                entry.origin,
                entry.token,
                entry.run,
                entry.model,
                entry.project,
                entry.node,
                entry.worktree,
                entry.cost_usd,
                entry.text,
                entry.written,
                paths,
            ])?;
            if inserted == 0 {
                // Kept already (a rebuild of what was indexed).
                continue;
            }
            let id = connection.last_insert_rowid();
            for touched in &entry.paths {
                path.execute(params![
                    id,
                    super::file_name(&touched.path),
                    touched.path,
                    touched.wrote
                ])?;
            }
            words.execute(params![id, super::words_of(&entry.text)])?;
        }
        let mut mark = connection.prepare_cached(
            "INSERT INTO search_marks (session_id, seq) VALUES (?1, ?2)
             ON CONFLICT (session_id) DO UPDATE SET seq = max(seq, excluded.seq)",
        )?;
        for (session_id, seq) in marks {
            mark.execute(params![session_id, super::big(*seq)?])?;
        }
        Ok(())
    })();
    if written.is_err() {
        connection.execute_batch("ROLLBACK TO search_index")?;
    }
    connection.execute_batch("RELEASE search_index")?;
    written
}

/// Deletes a session's entries and mark.
pub(crate) fn forget(connection: &Connection, session_id: &str) -> rusqlite::Result<()> {
    for statement in [
        "DELETE FROM search_words WHERE rowid IN (SELECT id FROM search_entries WHERE session_id = ?1)",
        "DELETE FROM search_paths WHERE entry IN (SELECT id FROM search_entries WHERE session_id = ?1)",
        "DELETE FROM search_entries WHERE session_id = ?1",
        "DELETE FROM search_marks WHERE session_id = ?1",
    ] {
        connection.prepare_cached(statement)?.execute(params![session_id])?;
    }
    Ok(())
}

/// Every session's mark.
pub(crate) fn marks(connection: &Connection) -> Result<HashMap<String, u64>, StoreError> {
    let mut statement = connection.prepare_cached("SELECT session_id, seq FROM search_marks")?;
    let rows =
        statement.query_map([], |row| Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?)))?;
    let mut marks = HashMap::new();
    for row in rows {
        let (session, seq) = row?;
        marks.insert(session, u64::try_from(seq).unwrap_or(0));
    }
    Ok(marks)
}

/// The entries that match, newest first.
pub(crate) fn search(
    connection: &Connection,
    query: &SearchQuery,
) -> Result<Vec<SearchHit>, StoreError> {
    let at = conditions::<Sqlite>(query);
    let written = if query.with_written { "written" } else { "NULL" };
    let sql = format!(
        "SELECT id, session_id, seq, place, ts_ms, kind, tool, tool_use_id, command, decision,
         decided_by, who, origin, token, run, model, project, node, worktree, cost_usd,
         substr(text, 1, {snippet}), {written}, paths
         FROM search_entries WHERE {clause} ORDER BY ts_ms DESC, id DESC LIMIT {limit}",
        snippet = super::SNIPPET_CHARS,
        clause = at.clause(),
        limit = query.limit.min(super::MAX_HITS),
    );
    let values = to_sql(&at.bound);
    let mut statement = connection.prepare_cached(&sql)?;
    let rows = statement.query_map(rusqlite::params_from_iter(values.iter()), |row| {
        let kind: String = row.get(5)?;
        let paths: String = row.get(22)?;
        Ok((
            row.get::<_, i64>(0)?,
            SearchEntry {
                session_id: row.get(1)?,
                seq: u64::try_from(row.get::<_, i64>(2)?).unwrap_or(0),
                place: row.get(3)?,
                ts_ms: u64::try_from(row.get::<_, i64>(4)?).unwrap_or(0),
                kind: super::EntryKind::parse(&kind).unwrap_or(super::EntryKind::ToolCall),
                tool: row.get(6)?,
                tool_use_id: row.get(7)?,
                command: row.get(8)?,
                decision: row.get(9)?,
                decided_by: row.get(10)?,
                who: row.get(11)?,
                origin: row.get(12)?,
                token: row.get(13)?,
                run: row.get(14)?,
                model: row.get(15)?,
                project: row.get(16)?,
                node: row.get(17)?,
                worktree: row.get(18)?,
                cost_usd: row.get(19)?,
                text: row.get(20)?,
                written: row.get(21)?,
                paths: serde_json::from_str::<Vec<Touched>>(&paths).unwrap_or_default(),
            },
        ))
    })?;
    let mut hits = Vec::new();
    for row in rows {
        let (id, entry) = row?;
        hits.push(SearchHit { id: u64::try_from(id).unwrap_or(0), entry });
    }
    Ok(hits)
}

/// The entries that match, added up.
pub(crate) fn group(
    connection: &Connection,
    query: &SearchQuery,
    by: GroupBy,
) -> Result<Vec<SearchGroup>, StoreError> {
    let at = conditions::<Sqlite>(query);
    let key = match by {
        GroupBy::Day => String::from("strftime('%Y-%m-%d', ts_ms / 1000, 'unixepoch')"),
        other => other.column().to_owned(),
    };
    let sql = format!(
        "SELECT {key}, count(*), total(cost_usd) FROM search_entries WHERE {clause}
         GROUP BY 1 ORDER BY 3 DESC, 2 DESC, 1 NULLS FIRST LIMIT {limit}",
        clause = at.clause(),
        limit = super::MAX_GROUPS,
    );
    let values = to_sql(&at.bound);
    let mut statement = connection.prepare_cached(&sql)?;
    let rows = statement.query_map(rusqlite::params_from_iter(values.iter()), |row| {
        Ok(SearchGroup {
            key: row.get(0)?,
            entries: u64::try_from(row.get::<_, i64>(1)?).unwrap_or(0),
            cost_usd: row.get(2)?,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}
