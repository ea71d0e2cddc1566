//! Checkpoints of sessions' views, kept beside their logs: a session's projection as it stands
//! after one of its events, written by the daemon (its state is opaque here), so that a daemon
//! that has never read a long session projects a page of it from the checkpoint nearest the
//! page, not from the log's first event.
//!
//! One row per session and event (`view_checkpoints`: session, seq, the event's time, the
//! state), in every store; deleted with the session. A checkpoint of a session that is gone is
//! not written. The store checks nothing else: the reader compares the checkpoint's event time
//! with its log's, and a state it cannot read back is no checkpoint to it.

use std::collections::HashMap;

use crate::StoreError;

/// A checkpoint as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViewCheckpoint {
    /// The event it stands after.
    pub seq: u64,
    /// When that event was stored (Unix milliseconds).
    pub ts_ms: u64,
    /// The projection's state, as its writer wrote it.
    pub state: Vec<u8>,
}

/// The checkpoints of sessions' views a store keeps ([`crate::Store::view_checkpoints`]).
#[async_trait::async_trait]
pub trait ViewCheckpoints: Send + Sync {
    /// Keeps `checkpoint` for session `session_id` (replacing one kept at its seq), if the
    /// session is still there.
    async fn put_view_checkpoint(
        &self,
        session_id: &str,
        checkpoint: &ViewCheckpoint,
    ) -> Result<(), StoreError>;
    /// Session `session_id`'s latest checkpoint at or before event `at`.
    async fn view_checkpoint(
        &self,
        session_id: &str,
        at: u64,
    ) -> Result<Option<ViewCheckpoint>, StoreError>;
    /// Each session's latest checkpoint's seq (sessions without one are not listed).
    async fn view_checkpoint_marks(&self) -> Result<HashMap<String, u64>, StoreError>;
}

/// SQLite: the schema (one migration) and the statements, run on the store's writer thread
/// (a put) and read connections.
pub(crate) mod sqlite {
    use rusqlite::{params, Connection, OptionalExtension};

    use super::*;

    pub(crate) const SCHEMA: &str = "
        CREATE TABLE view_checkpoints (
            session_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            ts_ms INTEGER NOT NULL,
            state BLOB NOT NULL,
            PRIMARY KEY (session_id, seq)
        ) WITHOUT ROWID;";

    pub(crate) fn put(
        connection: &Connection,
        session_id: &str,
        checkpoint: &ViewCheckpoint,
    ) -> rusqlite::Result<()> {
        connection
            .prepare_cached(
                "INSERT OR REPLACE INTO view_checkpoints (session_id, seq, ts_ms, state)
                 SELECT ?1, ?2, ?3, ?4 WHERE EXISTS (SELECT 1 FROM sessions WHERE id = ?1)",
            )?
            .execute(params![
                session_id,
                checkpoint.seq as i64,
                checkpoint.ts_ms as i64,
                checkpoint.state
            ])?;
        Ok(())
    }

    pub(crate) fn nearest(
        connection: &Connection,
        session_id: &str,
        at: u64,
    ) -> Result<Option<ViewCheckpoint>, StoreError> {
        let at = i64::try_from(at).unwrap_or(i64::MAX);
        Ok(connection
            .prepare_cached(
                "SELECT seq, ts_ms, state FROM view_checkpoints
                 WHERE session_id = ?1 AND seq <= ?2 ORDER BY seq DESC LIMIT 1",
            )?
            .query_row(params![session_id, at], |row| {
                Ok(ViewCheckpoint {
                    seq: row.get::<_, i64>(0)?.max(0) as u64,
                    ts_ms: row.get::<_, i64>(1)?.max(0) as u64,
                    state: row.get(2)?,
                })
            })
            .optional()?)
    }

    pub(crate) fn marks(connection: &Connection) -> Result<HashMap<String, u64>, StoreError> {
        let mut statement = connection.prepare_cached(
            "SELECT session_id, MAX(seq) FROM view_checkpoints GROUP BY session_id",
        )?;
        let rows = statement.query_map([], |row| {
            Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?.max(0) as u64))
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    pub(crate) fn forget(connection: &Connection, session_id: &str) -> rusqlite::Result<()> {
        connection
            .prepare_cached("DELETE FROM view_checkpoints WHERE session_id = ?1")?
            .execute(params![session_id])?;
        Ok(())
    }
}

/// PostgreSQL: the schema (one migration) and the statements.
pub(crate) mod postgres {
    use super::*;
    use crate::postgres::{big, db, unsigned};

    pub(crate) const SCHEMA: &str = "
        CREATE TABLE switchboard.view_checkpoints (
            session_id TEXT NOT NULL,
            seq BIGINT NOT NULL,
            ts_ms BIGINT NOT NULL,
            state BYTEA NOT NULL,
            PRIMARY KEY (session_id, seq)
        );";

    pub(crate) async fn put(
        client: &tokio_postgres::Client,
        session_id: &str,
        checkpoint: &ViewCheckpoint,
    ) -> Result<(), StoreError> {
        let (seq, ts_ms) = (big(checkpoint.seq, "seq")?, big(checkpoint.ts_ms, "ts_ms")?);
        client
            .execute(
                "INSERT INTO switchboard.view_checkpoints (session_id, seq, ts_ms, state)
                 SELECT $1, $2, $3, $4
                 WHERE EXISTS (SELECT 1 FROM switchboard.sessions WHERE id = $1)
                 ON CONFLICT (session_id, seq) DO UPDATE
                 SET ts_ms = EXCLUDED.ts_ms, state = EXCLUDED.state",
                &[&session_id, &seq, &ts_ms, &checkpoint.state],
            )
            .await
            .map_err(db)?;
        Ok(())
    }

    pub(crate) async fn nearest(
        client: &tokio_postgres::Client,
        session_id: &str,
        at: u64,
    ) -> Result<Option<ViewCheckpoint>, StoreError> {
        let at = i64::try_from(at).unwrap_or(i64::MAX);
        let row = client
            .query_opt(
                "SELECT seq, ts_ms, state FROM switchboard.view_checkpoints
                 WHERE session_id = $1 AND seq <= $2 ORDER BY seq DESC LIMIT 1",
                &[&session_id, &at],
            )
            .await
            .map_err(db)?;
        Ok(row.map(|row| ViewCheckpoint {
            seq: unsigned(row.get(0)),
            ts_ms: unsigned(row.get(1)),
            state: row.get(2),
        }))
    }

    pub(crate) async fn marks(
        client: &tokio_postgres::Client,
    ) -> Result<HashMap<String, u64>, StoreError> {
        Ok(client
            .query(
                "SELECT session_id, MAX(seq) FROM switchboard.view_checkpoints GROUP BY session_id",
                &[],
            )
            .await
            .map_err(db)?
            .iter()
            .map(|row| (row.get(0), unsigned(row.get(1))))
            .collect())
    }

    pub(crate) async fn forget(
        transaction: &tokio_postgres::Transaction<'_>,
        session_id: &str,
    ) -> Result<(), StoreError> {
        transaction
            .execute(
                "DELETE FROM switchboard.view_checkpoints WHERE session_id = $1",
                &[&session_id],
            )
            .await
            .map_err(db)?;
        Ok(())
    }
}

/// The memory store's: each session's checkpoints by seq.
#[derive(Debug, Default)]
pub(crate) struct Memory {
    kept: HashMap<String, std::collections::BTreeMap<u64, ViewCheckpoint>>,
}

impl Memory {
    pub(crate) fn put(&mut self, session_id: &str, checkpoint: &ViewCheckpoint) {
        self.kept
            .entry(session_id.to_owned())
            .or_default()
            .insert(checkpoint.seq, checkpoint.clone());
    }

    pub(crate) fn nearest(&self, session_id: &str, at: u64) -> Option<ViewCheckpoint> {
        let kept = self.kept.get(session_id)?;
        kept.range(..=at).next_back().map(|(_, checkpoint)| checkpoint.clone())
    }

    pub(crate) fn marks(&self) -> HashMap<String, u64> {
        self.kept
            .iter()
            .filter_map(|(id, kept)| Some((id.clone(), *kept.keys().next_back()?)))
            .collect()
    }

    pub(crate) fn forget(&mut self, session_id: &str) {
        self.kept.remove(session_id);
    }
}
