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
    CREATE INDEX search_by_words ON switchboard.search_entries USING GIN (words)
        WITH (fastupdate = off);
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
                let p = at.bind(Bound::Text(super::words_of(word)));
                format!("phraseto_tsquery('simple', {p})")
            })
            .collect();
        (!phrases.is_empty()).then(|| format!("words @@ ({})", phrases.join(" && ")))
    }

    fn contains(column: &str, p: &str) -> String {
        format!("strpos({column}, {p}) > 0")
    }

    fn ends_with(column: &str, p: &str) -> String {
        format!("right({column}, length({p})) = {p}")
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

/// Writes entries and marks in one transaction: three statements whatever their number (each
/// column an array, unnested), as the event log's group writer does.
pub(crate) async fn write(
    client: &mut deadpool_postgres::Client,
    entries: &[SearchEntry],
    marks: &[(String, u64)],
) -> Result<(), StoreError> {
    let column = |get: &dyn Fn(&SearchEntry) -> Option<String>| -> Vec<Option<String>> {
        entries.iter().map(get).collect()
    };
    let sessions: Vec<&str> = entries.iter().map(|entry| entry.session_id.as_str()).collect();
    let seqs = entries.iter().map(|entry| super::big(entry.seq)).collect::<Result<Vec<_>, _>>()?;
    let places: Vec<i32> =
        entries.iter().map(|entry| i32::try_from(entry.place).unwrap_or(i32::MAX)).collect();
    let times =
        entries.iter().map(|entry| super::big(entry.ts_ms)).collect::<Result<Vec<_>, _>>()?;
    let kinds: Vec<&str> = entries.iter().map(|entry| entry.kind.as_str()).collect();
    let tools = column(&|entry| entry.tool.clone());
    let calls = column(&|entry| entry.tool_use_id.clone());
    let commands = column(&|entry| entry.command.clone());
    let decisions = column(&|entry| entry.decision.clone());
    let deciders = column(&|entry| entry.decided_by.clone());
    let whos = column(&|entry| entry.who.clone());
    let origins = column(&|entry| entry.origin.clone());
    let tokens = column(&|entry| entry.token.clone());
    let runs = column(&|entry| entry.run.clone());
    let models = column(&|entry| entry.model.clone());
    let projects: Vec<&str> = entries.iter().map(|entry| entry.project.as_str()).collect();
    let nodes = column(&|entry| entry.node.clone());
    let worktrees: Vec<bool> = entries.iter().map(|entry| entry.worktree).collect();
    let costs: Vec<f64> = entries.iter().map(|entry| entry.cost_usd).collect();
    let texts: Vec<&str> = entries.iter().map(|entry| entry.text.as_str()).collect();
    let words: Vec<String> = entries.iter().map(|entry| super::words_of(&entry.text)).collect();
    let written = column(&|entry| entry.written.clone());
    let paths = entries
        .iter()
        .map(|entry| serde_json::to_string(&entry.paths))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| StoreError::Database(error.to_string()))?;
    let transaction = client.transaction().await.map_err(db)?;
    let inserted = transaction
        .query(
            "INSERT INTO switchboard.search_entries (session_id, seq, place, ts_ms, kind, tool,
             tool_use_id, command, decision, decided_by, who, origin, token, run, model, project,
             node, worktree, cost_usd, text, written, paths, words)
             SELECT session_id, seq, place, ts_ms, kind, tool, tool_use_id, command, decision,
             decided_by, who, origin, token, run, model, project, node, worktree, cost_usd, text,
             written, paths, to_tsvector('simple', words) FROM UNNEST($1::text[], $2::bigint[],
             $3::int[], $4::bigint[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[],
             $10::text[], $11::text[], $12::text[], $13::text[], $14::text[], $15::text[],
             $16::text[], $17::text[], $18::bool[], $19::float8[], $20::text[], $21::text[],
             $22::text[], $23::text[]) AS e(session_id, seq, place, ts_ms, kind, tool,
             tool_use_id, command, decision, decided_by, who, origin, token, run, model, project,
             node, worktree, cost_usd, text, written, paths, words)
             ON CONFLICT (session_id, seq, place) DO NOTHING
             RETURNING id, session_id, seq, place",
            &[
                &sessions, &seqs, &places, &times, &kinds, &tools, &calls, &commands, &decisions,
                &deciders, &whos, &origins, &tokens, &runs, &models, &projects, &nodes, &worktrees,
                &costs, &texts, &written, &paths, &words,
            ],
        )
        .await
        .map_err(db)?;
    // Entries kept already (a rebuild of what was indexed) return no row: their paths are in.
    let ids: HashMap<(String, i64, i32), i64> = inserted
        .iter()
        .map(|row| ((row.get::<_, String>(1), row.get(2), row.get(3)), row.get(0)))
        .collect();
    let (mut owners, mut names, mut whole, mut wrote) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (entry, (seq, place)) in entries.iter().zip(seqs.iter().zip(&places)) {
        let Some(id) = ids.get(&(entry.session_id.clone(), *seq, *place)) else { continue };
        for touched in &entry.paths {
            owners.push(*id);
            names.push(super::file_name(&touched.path));
            whole.push(touched.path.as_str());
            wrote.push(touched.wrote);
        }
    }
    if !owners.is_empty() {
        transaction
            .execute(
                "INSERT INTO switchboard.search_paths (entry, name, path, wrote)
                 SELECT * FROM UNNEST($1::bigint[], $2::text[], $3::text[], $4::bool[])",
                &[&owners, &names, &whole, &wrote],
            )
            .await
            .map_err(db)?;
    }
    if !marks.is_empty() {
        let sessions: Vec<&str> = marks.iter().map(|(session, _)| session.as_str()).collect();
        let seqs = marks.iter().map(|(_, seq)| super::big(*seq)).collect::<Result<Vec<_>, _>>()?;
        transaction
            .execute(
                "INSERT INTO switchboard.search_marks (session_id, seq)
                 SELECT session_id, max(seq) FROM UNNEST($1::text[], $2::bigint[])
                     AS m(session_id, seq) GROUP BY session_id
                 ON CONFLICT (session_id) DO UPDATE
                 SET seq = GREATEST(switchboard.search_marks.seq, excluded.seq)",
                &[&sessions, &seqs],
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
    let written = if query.with_written { "written" } else { "NULL::text" };
    // With words to look up, the words' index leads: ordered by an expression, the time's
    // index cannot serve the order, so the planner does not walk it back from the newest entry
    // testing every row for a rare word (a hundred thousand rows for a word of five). What the
    // words find is sorted then: the cost follows what they find.
    let order = if query.words.is_empty() && query.command.is_none() {
        "ts_ms DESC, id DESC"
    } else {
        "ts_ms + 0 DESC, id DESC"
    };
    let sql = schema(&format!(
        "SELECT id, session_id, seq, place, ts_ms, kind, tool, tool_use_id, command, decision,
         decided_by, who, origin, token, run, model, project, node, worktree, cost_usd,
         substr(text, 1, {snippet}), {written}, paths
         FROM switchboard.search_entries WHERE {clause} ORDER BY {order} LIMIT {limit}",
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
         WHERE {clause} GROUP BY 1 ORDER BY 3 DESC, 2 DESC, 1 NULLS FIRST LIMIT {limit}",
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
