//! What a session's turns cost (`GET …/usage`): its log's turn ends, as the one projection
//! reads them, with the totals per model and the context.
//!
//! The web UI asks at every turn's end of the session it shows, and a session may be long: a
//! call reads only what the log holds past the last call's. The daemon keeps the digest of the
//! last few sessions asked ([`MAX_KEPT`], the least recently used dropped), each with its
//! projector where it stopped, and goes on from there once the event it stopped at is read
//! again and found the same (a log deleted and stored again under the id is read from its
//! start). A digest whose projector is larger than a checkpoint may be is not kept.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};
use switchboard_session::projection::ModelTotals;
use switchboard_session::Update;

use super::*;
use crate::view::{ViewUpdate, Viewer};

/// The most turns `GET …/usage` lists (the newest); the totals count them all.
pub const MAX_USAGE_TURNS: usize = 10_000;

/// The most sessions whose digest is kept.
const MAX_KEPT: usize = 4;

/// One turn of the main conversation, as its end told it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnUsage {
    /// 1 for the session's first turn, 2 for the next, ...
    pub turn: u64,
    /// The event that ended it.
    pub seq: u64,
    /// When that event was stored (Unix milliseconds).
    pub ts: u64,
    /// What the turn cost, in US dollars.
    pub cost_usd: f64,
    /// Its input tokens (with cache reads and writes).
    pub input_tokens: u64,
    /// Its output tokens.
    pub output_tokens: u64,
    /// Its wall time.
    pub duration_ms: u64,
    /// Interrupted by the person.
    pub interrupted: bool,
    /// Failed (and not interrupted).
    pub failed: bool,
    /// Context tokens of its last message.
    pub context_tokens: Option<u64>,
}

/// What a session's turns cost (`GET …/usage`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionUsage {
    /// The newest turns, oldest first (at most [`MAX_USAGE_TURNS`]).
    pub turns: Vec<TurnUsage>,
    /// Every turn of the log.
    pub turn_count: u64,
    /// The totals per model the last turn's end reported.
    pub models: Vec<ModelTotals>,
    /// What the session has cost.
    pub total_cost_usd: f64,
    /// Context tokens of the last message.
    pub context_tokens: Option<u64>,
    /// The context window of the model that answered last.
    pub context_window: Option<u64>,
}

/// A session's turns read up to an event, with the projector there.
#[derive(Default)]
struct Digest {
    /// The last event read (0: none).
    seq: u64,
    /// When it was stored.
    ts_ms: u64,
    viewer: Viewer,
    turns: VecDeque<TurnUsage>,
    count: u64,
    models: Vec<ModelTotals>,
    /// For the least recently used.
    used: u64,
}

/// The digests kept (one set a daemon).
#[derive(Default)]
pub(super) struct Digests {
    kept: Mutex<HashMap<String, Digest>>,
    clock: std::sync::atomic::AtomicU64,
}

impl Digests {
    /// Session `id` was deleted.
    pub(super) fn forget(&self, id: &str) {
        self.kept.lock().remove(id);
    }

    fn keep(&self, id: &str, mut digest: Digest) {
        if digest.viewer.approximate_bytes() > crate::checkpoints::MAX_VIEWER_BYTES {
            return;
        }
        digest.used = self.clock.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut kept = self.kept.lock();
        kept.remove(id);
        while kept.len() >= MAX_KEPT {
            let oldest =
                kept.iter().min_by_key(|(_, digest)| digest.used).map(|(id, _)| id.clone());
            let Some(oldest) = oldest else { break };
            kept.remove(&oldest);
        }
        kept.insert(id.to_owned(), digest);
    }
}

impl Daemon {
    /// What session `id`'s turns cost, from its log: what every face answers.
    pub async fn session_usage(&self, id: &str) -> Result<SessionUsage, DaemonError> {
        if self.record(id).await?.is_none() {
            return Err(DaemonError::NotFound(id.to_owned()));
        }
        let Some(last) = self.store.events_before(id, u64::MAX, 1).await?.pop() else {
            return Ok(SessionUsage::from(&Digest::default()));
        };
        let kept = self.usage_digests.kept.lock().remove(id);
        let mut digest = match kept {
            Some(digest) if digest.seq <= last.seq && self.still_reads(id, &digest).await? => {
                digest
            }
            _ => Digest::default(),
        };
        let from = digest.seq;
        let viewer = std::mem::take(&mut digest.viewer);
        let Digest { turns, count, models, .. } = &mut digest;
        let viewer = self
            .replay_view_from(id, from, viewer, last.seq, &mut |record, update| {
                let ViewUpdate::Session(Update::TurnEnded {
                    parent_tool_use_id: None,
                    cost_usd,
                    input_tokens,
                    output_tokens,
                    duration_ms,
                    interrupted,
                    failed,
                    models: totals,
                    context_tokens,
                    ..
                }) = update
                else {
                    return;
                };
                *count += 1;
                if turns.len() == MAX_USAGE_TURNS {
                    turns.pop_front();
                }
                turns.push_back(TurnUsage {
                    turn: *count,
                    seq: record.seq,
                    ts: record.ts_ms,
                    cost_usd,
                    input_tokens,
                    output_tokens,
                    duration_ms,
                    interrupted,
                    failed,
                    context_tokens,
                });
                *models = totals;
            })
            .await?;
        digest.viewer = viewer;
        digest.seq = last.seq;
        digest.ts_ms = last.ts_ms;
        let usage = SessionUsage::from(&digest);
        self.usage_digests.keep(id, digest);
        Ok(usage)
    }

    /// Whether the log still holds the event `digest` stopped at, as it was read.
    async fn still_reads(&self, id: &str, digest: &Digest) -> Result<bool, DaemonError> {
        if digest.seq == 0 {
            return Ok(true);
        }
        let event = self.store.events_after(id, digest.seq - 1, 1).await?;
        Ok(event
            .first()
            .is_some_and(|event| event.seq == digest.seq && event.ts_ms == digest.ts_ms))
    }
}

impl From<&Digest> for SessionUsage {
    fn from(digest: &Digest) -> SessionUsage {
        let view = digest.viewer.view();
        SessionUsage {
            turns: digest.turns.iter().cloned().collect(),
            turn_count: digest.count,
            models: digest.models.clone(),
            total_cost_usd: view.cost_usd,
            context_tokens: view.context_tokens,
            context_window: view.context_window,
        }
    }
}
