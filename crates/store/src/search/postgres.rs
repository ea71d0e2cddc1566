//! The search index in PostgreSQL: `search_entries` (a row per entry, its words as a
//! `tsvector` of the `simple` configuration with a GIN index), `search_paths` and
//! `search_marks`, in the `switchboard` schema. Each write is one transaction.

use std::collections::HashMap;

use tokio_postgres::types::ToSql;

use super::{
    conditions, Bound, Dialect, GroupBy, SearchEntry, SearchGroup, SearchHit, SearchQuery, Touched,
    Where,
};
use crate::postgres::db;
use crate::StoreError;

/// The schema (one migration).
pub(crate) const SCHEMA: &str = "
    CREATE TABLE switchboard.search_entries (
        id BIGSERIAL PRIMARY KEY,
        session_id TEXT NOT NULL,
        seq BIGINT NOT NULL,
        place INTEGER NOT NULL,
        ts_ms BIGINT NOT NULL,
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
        worktree BOOLEAN NOT NULL,
        cost_usd DOUBLE PRECISION NOT NULL,
        text TEXT NOT NULL,
        written TEXT,
        paths TEXT NOT NULL,
        words TSVECTOR NOT NULL,
        UNIQUE (session_id, seq, place)
    );
    CREATE INDEX search_by_time ON switchboard.search_entries (ts_ms);
    CREATE INDEX search_by_tool ON switchboard.search_entries (tool, ts_ms);
    CREATE INDEX search_by_decision ON switchboard.search_entries (decision, ts_ms);
    CREATE INDEX search_by_words ON switchboard.search_entries USING GIN (words);
    CREATE TABLE switchboard.search_paths (
        entry BIGINT NOT NULL,
        name TEXT NOT NULL,
        path TEXT NOT NULL,
        wrote BOOLEAN NOT NULL
    );
    CREATE INDEX search_paths_by_name ON switchboard.search_paths (name, entry);
    CREATE INDEX search_paths_by_entry ON switchboard.search_paths (entry);
    CREATE TABLE switchboard.search_marks (
        session_id TEXT PRIMARY KEY,
        seq BIGINT NOT NULL
    );";

struct Postgres;

impl Dialect for Postgres {
    fn param(n: usize) -> String {
        format!("${n}")
    }

    fn words(at: &mut Where, words: &[String]) -> Option<String> {
        let phrases: Vec<String> = words
            .iter()
            .filter(|word| word.chars().any(char::is_alphanumeric))
            .map(|word| {
                let p = at.bind(Bound::Text(word.clone()));
                format!("phraseto_tsquery('simple', {p})")
            })
            .collect();
        (!phrases.is_empty()).then(|| format!("words @@ ({})", phrases.join(" && ")))
    }
}

fn to_sql(bound: &[Bound]) -> Vec<Box<dyn ToSql + Sync + Send>> {
    bound
        .iter()
        .map(|value| -> Box<dyn ToSql + Sync + Send> {
            match value {
                Bound::Text(text) => Box::new(text.clone()),
                Bound::Int(int) => Box::new(*int),
                Bound::Real(real) => Box::new(*real),
                Bound::Bool(flag) => Box::new(*flag),
            }
        })
        .collect()
}

/// The table names of the schema, for the shared conditions.
fn schema(sql: &str) -> String {
    sql.replace("FROM search_paths", "FROM switchboard.search_paths")
}

/// Writes entries and marks in one transaction.
pub(crate) async fn write(
    client: &mut deadpool_postgres::Client,
    entries: &[SearchEntry],
    marks: &[(String, u64)],
) -> Result<(), StoreError> {
    let transaction = client.transaction().await.map_err(db)?;
    let insert = transaction
        .prepare_cached(
            "INSERT INTO switchboard.search_entries (session_id, seq, place, ts_ms, kind, tool,
             tool_use_id, command, decision, decided_by, who, origin, token, run, model, project,
             node, worktree, cost_usd, text, written, paths, words)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17,
             $18, $19, $20, $21, $22, to_tsvector('simple', $20))
             ON CONFLICT (session_id, seq, place) DO NOTHING RETURNING id",
        )
        .await
        .map_err(db)?;
    let path = transaction
        .prepare_cached(
            "INSERT INTO switchboard.search_paths (entry, name, path, wrote) VALUES ($1, $2, $3, $4)",
        )
        .await
        .map_err(db)?;
    for entry in entries {
        let paths = serde_json::to_string(&entry.paths)
            .map_err(|error| StoreError::Database(error.to_string()))?;
        let place = i32::try_from(entry.place).unwrap_or(i32::MAX);
        let row = transaction
            .query_opt(
                &insert,
                &[
                    &entry.session_id,
                    &super::big(entry.seq)?,
                    &place,
                    &super::big(entry.ts_ms)?,
                    &entry.kind.as_str(),
                    &entry.tool,
                    &entry.tool_use_id,
                    &entry.command,
                    &entry.decision,
                    &entry.decided_by,
                    &entry.who,
                    &entry.origin,
                    &entry.token,
                    &entry.run,
                    &entry.model,
                    &entry.project,
                    &entry.node,
                    &entry.worktree,
                    &entry.cost_usd,
                    &entry.text,
                    &entry.written,
                    &paths,
                ],
            )
            .await
            .map_err(db)?;
        // No row: kept already (a rebuild of what was indexed).
        let Some(row) = row else { continue };
        let id: i64 = row.get(0);
        for touched in &entry.paths {
            transaction
                .execute(
                    &path,
                    &[&id, &super::file_name(&touched.path), &touched.path, &touched.wrote],
                )
                .await
                .map_err(db)?;
        }
    }
    for (session_id, seq) in marks {
        transaction
            .execute(
                "INSERT INTO switchboard.search_marks (session_id, seq) VALUES ($1, $2)
                 ON CONFLICT (session_id) DO UPDATE
                 SET seq = GREATEST(switchboard.search_marks.seq, excluded.seq)",
                &[session_id, &super::big(*seq)?],
            )
            .await
            .map_err(db)?;
    }
    transaction.commit().await.map_err(db)
}

/// Deletes a session's entries and mark, within `transaction`.
pub(crate) async fn forget(
    transaction: &deadpool_postgres::Transaction<'_>,
    session_id: &str,
) -> Result<(), StoreError> {
    for statement in [
        "DELETE FROM switchboard.search_paths WHERE entry IN
         (SELECT id FROM switchboard.search_entries WHERE session_id = $1)",
        "DELETE FROM switchboard.search_entries WHERE session_id = $1",
        "DELETE FROM switchboard.search_marks WHERE session_id = $1",
    ] {
        transaction.execute(statement, &[&session_id]).await.map_err(db)?;
    }
    Ok(())
}

/// Every session's mark.
pub(crate) async fn marks(
    client: &deadpool_postgres::Client,
) -> Result<HashMap<String, u64>, StoreError> {
    let rows = client
        .query("SELECT session_id, seq FROM switchboard.search_marks", &[])
        .await
        .map_err(db)?;
    Ok(rows
        .iter()
        .map(|row| (row.get::<_, String>(0), u64::try_from(row.get::<_, i64>(1)).unwrap_or(0)))
        .collect())
}

/// The entries that match, newest first.
pub(crate) async fn search(
    client: &deadpool_postgres::Client,
    query: &SearchQuery,
) -> Result<Vec<SearchHit>, StoreError> {
    let at = conditions::<Postgres>(query);
    let written = if query.wrote { "written" } else { "NULL::text" };
    let sql = schema(&format!(
        "SELECT id, session_id, seq, place, ts_ms, kind, tool, tool_use_id, command, decision,
         decided_by, who, origin, token, run, model, project, node, worktree, cost_usd,
         substr(text, 1, {snippet}), {written}, paths
         FROM switchboard.search_entries WHERE {clause} ORDER BY ts_ms DESC, id DESC LIMIT {limit}",
        snippet = super::SNIPPET_CHARS,
        clause = at.clause(),
        limit = query.limit.min(super::MAX_HITS),
    ));
    let values = to_sql(&at.bound);
    let params: Vec<&(dyn ToSql + Sync)> =
        values.iter().map(|value| value.as_ref() as &(dyn ToSql + Sync)).collect();
    let rows = client.query(&sql, &params).await.map_err(db)?;
    Ok(rows
        .iter()
        .map(|row| {
            let kind: String = row.get(5);
            let paths: String = row.get(22);
            SearchHit {
                id: u64::try_from(row.get::<_, i64>(0)).unwrap_or(0),
                entry: SearchEntry {
                    session_id: row.get(1),
                    seq: u64::try_from(row.get::<_, i64>(2)).unwrap_or(0),
                    place: u32::try_from(row.get::<_, i32>(3)).unwrap_or(0),
                    ts_ms: u64::try_from(row.get::<_, i64>(4)).unwrap_or(0),
                    kind: super::EntryKind::parse(&kind).unwrap_or(super::EntryKind::ToolCall),
                    tool: row.get(6),
                    tool_use_id: row.get(7),
                    command: row.get(8),
                    decision: row.get(9),
                    decided_by: row.get(10),
                    who: row.get(11),
                    origin: row.get(12),
                    token: row.get(13),
                    run: row.get(14),
                    model: row.get(15),
                    project: row.get(16),
                    node: row.get(17),
                    worktree: row.get(18),
                    cost_usd: row.get(19),
                    text: row.get(20),
                    written: row.get(21),
                    paths: serde_json::from_str::<Vec<Touched>>(&paths).unwrap_or_default(),
                },
            }
        })
        .collect())
}

/// The entries that match, added up.
pub(crate) async fn group(
    client: &deadpool_postgres::Client,
    query: &SearchQuery,
    by: GroupBy,
) -> Result<Vec<SearchGroup>, StoreError> {
    let at = conditions::<Postgres>(query);
    let key = match by {
        GroupBy::Day => {
            String::from("to_char(to_timestamp(ts_ms / 1000.0) AT TIME ZONE 'UTC', 'YYYY-MM-DD')")
        }
        other => other.column().to_owned(),
    };
    let sql = schema(&format!(
        "SELECT {key}, count(*), COALESCE(sum(cost_usd), 0) FROM switchboard.search_entries
         WHERE {clause} GROUP BY 1 ORDER BY 3 DESC, 2 DESC, 1 LIMIT {limit}",
        clause = at.clause(),
        limit = super::MAX_GROUPS,
    ));
    let values = to_sql(&at.bound);
    let params: Vec<&(dyn ToSql + Sync)> =
        values.iter().map(|value| value.as_ref() as &(dyn ToSql + Sync)).collect();
    let rows = client.query(&sql, &params).await.map_err(db)?;
    Ok(rows
        .iter()
        .map(|row| SearchGroup {
            key: row.get(0),
            entries: u64::try_from(row.get::<_, i64>(1)).unwrap_or(0),
            cost_usd: row.get(2),
        })
        .collect())
}
