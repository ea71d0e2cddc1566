//! Checkpoints of sessions' views, kept beside their logs: a session's projection as it stands
//! after one of its events, written by the daemon (its state is opaque here), so that a daemon
//! that has never read a long session projects a page of it from the checkpoint nearest the
//! page, not from the log's first event.
//!
//! One row per session and event (`view_checkpoints`: session, seq, the event's time, the
//! state's format, the state), in every store; deleted with the session. A checkpoint of a
//! session that is gone is not written. A reader asks for its own format alone (a build of
//! other source wrote the others): a row of another format, or of another event time, is
//! replaced when its place is written again; one just as kept is left as it is. The store
//! checks nothing else: the reader compares the checkpoint's event time with its log's, and a
//! state it cannot read back is no checkpoint to it.

use std::collections::HashMap;

use crate::StoreError;

/// A checkpoint as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViewCheckpoint {
    /// The event it stands after.
    pub seq: u64,
    /// When that event was stored (Unix milliseconds).
    pub ts_ms: u64,
    /// What wrote the state, and so what can read it back (opaque here).
    pub format: String,
    /// The projection's state, as its writer wrote it.
    pub state: Vec<u8>,
}

/// The checkpoints of sessions' views a store keeps ([`crate::Store::view_checkpoints`]).
#[async_trait::async_trait]
pub trait ViewCheckpoints: Send + Sync {
    /// Keeps `checkpoint` for session `session_id`, if the session is still there: in place of
    /// one kept at its seq in another format or of another event time (one kept the same is
    /// left).
    async fn put_view_checkpoint(
        &self,
        session_id: &str,
        checkpoint: &ViewCheckpoint,
    ) -> Result<(), StoreError>;
    /// Session `session_id`'s latest checkpoint in `format` at or before event `at`.
    async fn view_checkpoint(
        &self,
        session_id: &str,
        at: u64,
        format: &str,
    ) -> Result<Option<ViewCheckpoint>, StoreError>;
    /// Each session's latest checkpoint's seq in `format` (sessions without one are not
    /// listed).
    async fn view_checkpoint_marks(&self, format: &str)
        -> Result<HashMap<String, u64>, StoreError>;
}

/// SQLite: the schema (one migration) and the statements, run on the store's writer thread
/// (a put) and read connections.
pub(crate) mod sqlite {
    use rusqlite::{params, Connection, OptionalExtension};

    use super::*;

    /// A table with row ids (a state may be megabytes: too large for a `WITHOUT ROWID` row).
    pub(crate) const SCHEMA: &str = "
        CREATE TABLE view_checkpoints (
            id INTEGER PRIMARY KEY,
            session_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            ts_ms INTEGER NOT NULL,
            format TEXT NOT NULL,
            state BLOB NOT NULL
        );
        CREATE UNIQUE INDEX view_checkpoints_by_place ON view_checkpoints (session_id, seq);";

    pub(crate) fn put(
        connection: &Connection,
        session_id: &str,
        checkpoint: &ViewCheckpoint,
    ) -> rusqlite::Result<()> {
        connection
            .prepare_cached(
                "INSERT INTO view_checkpoints (session_id, seq, ts_ms, format, state)
                 SELECT ?1, ?2, ?3, ?4, ?5 WHERE EXISTS (SELECT 1 FROM sessions WHERE id = ?1)
                 ON CONFLICT (session_id, seq) DO UPDATE
                 SET ts_ms = excluded.ts_ms, format = excluded.format, state = excluded.state
                 WHERE ts_ms <> excluded.ts_ms OR format <> excluded.format",
            )?
            .execute(params![
                session_id,
                checkpoint.seq as i64,
                checkpoint.ts_ms as i64,
                checkpoint.format,
                checkpoint.state
            ])?;
        Ok(())
    }

    pub(crate) fn nearest(
        connection: &Connection,
        session_id: &str,
        at: u64,
        format: &str,
    ) -> Result<Option<ViewCheckpoint>, StoreError> {
        let at = i64::try_from(at).unwrap_or(i64::MAX);
        Ok(connection
            .prepare_cached(
                "SELECT seq, ts_ms, state FROM view_checkpoints
                 WHERE session_id = ?1 AND seq <= ?2 AND format = ?3 ORDER BY seq DESC LIMIT 1",
            )?
            .query_row(params![session_id, at, format], |row| {
                Ok(ViewCheckpoint {
                    seq: row.get::<_, i64>(0)?.max(0) as u64,
                    ts_ms: row.get::<_, i64>(1)?.max(0) as u64,
                    format: format.to_owned(),
                    state: row.get(2)?,
                })
            })
            .optional()?)
    }

    pub(crate) fn marks(
        connection: &Connection,
        format: &str,
    ) -> Result<HashMap<String, u64>, StoreError> {
        let mut statement = connection.prepare_cached(
            "SELECT session_id, MAX(seq) FROM view_checkpoints WHERE format = ?1
             GROUP BY session_id",
        )?;
        let rows = statement.query_map(params![format], |row| {
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
            session_id TEXT NOT NULL
                REFERENCES switchboard.sessions (id) ON DELETE CASCADE,
            seq BIGINT NOT NULL,
            ts_ms BIGINT NOT NULL,
            format TEXT NOT NULL,
            state BYTEA NOT NULL,
            PRIMARY KEY (session_id, seq)
        );";

    /// The session's row is locked against a deletion while the checkpoint is written (the
    /// foreign key's share lock): a session deleted meanwhile takes its checkpoints with it.
    pub(crate) async fn put(
        client: &tokio_postgres::Client,
        session_id: &str,
        checkpoint: &ViewCheckpoint,
    ) -> Result<(), StoreError> {
        let (seq, ts_ms) = (big(checkpoint.seq, "seq")?, big(checkpoint.ts_ms, "ts_ms")?);
        let written = client
            .execute(
                "INSERT INTO switchboard.view_checkpoints (session_id, seq, ts_ms, format, state)
                 SELECT $1, $2, $3, $4, $5
                 WHERE EXISTS (SELECT 1 FROM switchboard.sessions WHERE id = $1)
                 ON CONFLICT (session_id, seq) DO UPDATE
                 SET ts_ms = EXCLUDED.ts_ms, format = EXCLUDED.format, state = EXCLUDED.state
                 WHERE view_checkpoints.ts_ms <> EXCLUDED.ts_ms
                    OR view_checkpoints.format <> EXCLUDED.format",
                &[&session_id, &seq, &ts_ms, &checkpoint.format, &checkpoint.state],
            )
            .await;
        match written {
            Ok(_) => Ok(()),
            // Deleted between the look and the write: nothing to keep.
            Err(error)
                if error.code()
                    == Some(&tokio_postgres::error::SqlState::FOREIGN_KEY_VIOLATION) =>
            {
                Ok(())
            }
            Err(error) => Err(db(error)),
        }
    }

    pub(crate) async fn nearest(
        client: &tokio_postgres::Client,
        session_id: &str,
        at: u64,
        format: &str,
    ) -> Result<Option<ViewCheckpoint>, StoreError> {
        let at = i64::try_from(at).unwrap_or(i64::MAX);
        let row = client
            .query_opt(
                "SELECT seq, ts_ms, state FROM switchboard.view_checkpoints
                 WHERE session_id = $1 AND seq <= $2 AND format = $3 ORDER BY seq DESC LIMIT 1",
                &[&session_id, &at, &format],
            )
            .await
            .map_err(db)?;
        Ok(row.map(|row| ViewCheckpoint {
            seq: unsigned(row.get(0)),
            ts_ms: unsigned(row.get(1)),
            format: format.to_owned(),
            state: row.get(2),
        }))
    }

    pub(crate) async fn marks(
        client: &tokio_postgres::Client,
        format: &str,
    ) -> Result<HashMap<String, u64>, StoreError> {
        Ok(client
            .query(
                "SELECT session_id, MAX(seq) FROM switchboard.view_checkpoints WHERE format = $1
                 GROUP BY session_id",
                &[&format],
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
        let kept = self.kept.entry(session_id.to_owned()).or_default();
        let same = kept
            .get(&checkpoint.seq)
            .is_some_and(|old| old.ts_ms == checkpoint.ts_ms && old.format == checkpoint.format);
        if !same {
            kept.insert(checkpoint.seq, checkpoint.clone());
        }
    }

    pub(crate) fn nearest(
        &self,
        session_id: &str,
        at: u64,
        format: &str,
    ) -> Option<ViewCheckpoint> {
        let kept = self.kept.get(session_id)?;
        kept.range(..=at)
            .rev()
            .map(|(_, checkpoint)| checkpoint)
            .find(|checkpoint| checkpoint.format == format)
            .cloned()
    }

    pub(crate) fn marks(&self, format: &str) -> HashMap<String, u64> {
        self.kept
            .iter()
            .filter_map(|(id, kept)| {
                let seq = kept.values().rev().find(|checkpoint| checkpoint.format == format)?.seq;
                Some((id.clone(), seq))
            })
            .collect()
    }

    pub(crate) fn forget(&mut self, session_id: &str) {
        self.kept.remove(session_id);
    }
}
