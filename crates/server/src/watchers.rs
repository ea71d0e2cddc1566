//! What the daemon spends on the clients that follow it: a session's subscribers, dashboards,
//! and gRPC streams (`Subscribe`, `WatchSessions`).
//!
//! - **Places.** A session has at most [`MAX_PER_SESSION`] subscribers with named tokens
//!   (WebSocket and gRPC together), [`MAX_PER_TOKEN_PER_SESSION`] of them with any one token,
//!   and a named token at most [`MAX_PER_TOKEN`] followers of any kind; past any of these the
//!   next is refused with `429 too_many_subscribers` (gRPC: `RESOURCE_EXHAUSTED`) naming the
//!   limit. The daemon's own token (its owner's) has no such limit, so that no named token can
//!   keep the owner from a session; what its followers hold is bounded by the outbox below.
//! - **Bytes.** Every frame written to a follower is first counted against one budget of
//!   [`OUTBOX_BYTES`], shared by all followers, and counted out once its socket took it. A
//!   follower that cannot get its bytes counted, or whose socket takes nothing, within the
//!   daemon's stall limit ([`crate::daemon::STALL_LIMIT`]) is dropped (it may come back with
//!   `after` and lose nothing): a follower that stopped reading holds one frame at most, and all
//!   of them together hold the budget at most.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use switchboard_store::EventRecord;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Subscribers of one session with named tokens at once (WebSocket and gRPC together).
pub const MAX_PER_SESSION: usize = 32;

/// Subscribers of one session with one named token at once: no one token takes a session's
/// every place.
pub const MAX_PER_TOKEN_PER_SESSION: usize = 8;

/// Followers of one named token at once (subscribers, dashboards, gRPC streams).
pub const MAX_PER_TOKEN: usize = 64;

/// Bytes written to followers and not yet taken by their sockets, daemon-wide.
pub const OUTBOX_BYTES: usize = 32 * 1024 * 1024;

/// The slowest a follower's socket may take a large frame, in bytes a second, after the stall
/// limit: see [`write_limit`].
pub const FOLLOWER_MIN_RATE: usize = 64 * 1024;

/// How long writing `bytes` to a follower may take: the stall limit, plus as long as the bytes
/// take at [`FOLLOWER_MIN_RATE`] (a 5 MiB image on a slow phone link is not a stall).
pub fn write_limit(stall: Duration, bytes: usize) -> Duration {
    stall + Duration::from_secs_f64(bytes as f64 / FOLLOWER_MIN_RATE as f64)
}

/// Events this large, read from the store for a subscriber, are held once however many
/// subscribers read them at the same time ([`Watchers::share`]).
pub const SHARED_EVENT_BYTES: usize = 64 * 1024;

/// The followers' places and their shared byte budget.
#[derive(Debug)]
pub struct Watchers {
    counts: Mutex<Counts>,
    outbox: Arc<Semaphore>,
    /// Large events being handed to subscribers, by session and seq.
    shared: Mutex<HashMap<(String, u64), Weak<EventRecord>>>,
}

#[derive(Debug, Default)]
struct Counts {
    /// Every subscriber, by session.
    sessions: HashMap<String, usize>,
    /// Subscribers with named tokens, by session.
    named: HashMap<String, usize>,
    /// By named token.
    tokens: HashMap<Arc<str>, usize>,
    /// By named token and session.
    token_sessions: HashMap<(Arc<str>, String), usize>,
}

/// Counts `key` up or down (removing it at zero).
fn count<K: std::hash::Hash + Eq>(map: &mut HashMap<K, usize>, key: K, up: bool) {
    if up {
        *map.entry(key).or_default() += 1;
    } else if let std::collections::hash_map::Entry::Occupied(mut entry) = map.entry(key) {
        *entry.get_mut() -= 1;
        if *entry.get() == 0 {
            entry.remove();
        }
    }
}

impl Default for Watchers {
    fn default() -> Self {
        Watchers {
            counts: Mutex::default(),
            outbox: Arc::new(Semaphore::new(OUTBOX_BYTES)),
            shared: Mutex::default(),
        }
    }
}

impl Watchers {
    /// A place for a follower of `session` (a session's subscriber) or of the daemon (a
    /// dashboard, `None`), with the named token `token` (`None`: the daemon's own, or none:
    /// [`crate::tokens::Caller::token_name`]), or why not.
    pub fn seat(
        self: &Arc<Self>,
        token: Option<&str>,
        session: Option<&str>,
    ) -> Result<Seat, TooMany> {
        let mut counts = self.counts.lock();
        let token = token.map(Arc::<str>::from);
        if let Some(token) = &token {
            if let Some(session) = session {
                let now = counts.named.get(session).copied().unwrap_or(0);
                if now >= MAX_PER_SESSION {
                    return Err(TooMany(format!(
                        "session {session} has {MAX_PER_SESSION} subscribers with named tokens already; close one, or try again later"
                    )));
                }
                let key = (token.clone(), session.to_owned());
                let mine = counts.token_sessions.get(&key).copied().unwrap_or(0);
                if mine >= MAX_PER_TOKEN_PER_SESSION {
                    return Err(TooMany(format!(
                        "token {token} has {MAX_PER_TOKEN_PER_SESSION} subscribers of session {session} already; close one, or try again later"
                    )));
                }
            }
            let now = counts.tokens.get(token).copied().unwrap_or(0);
            if now >= MAX_PER_TOKEN {
                return Err(TooMany(format!(
                    "token {token} follows {MAX_PER_TOKEN} sessions or dashboards already; close one, or try again later"
                )));
            }
        }
        let seat = Seat { watchers: self.clone(), session: session.map(str::to_owned), token };
        seat.count(&mut counts, true);
        Ok(seat)
    }

    /// `event`, read from the store for one subscriber, as every subscriber holding it now
    /// holds it: one copy of a large event (a pasted image) however many read it at once.
    pub fn share(&self, event: EventRecord) -> Arc<EventRecord> {
        if event.payload.len() < SHARED_EVENT_BYTES {
            return Arc::new(event);
        }
        let mut shared = self.shared.lock();
        shared.retain(|_, held| held.strong_count() > 0);
        let key = (event.session_id.clone(), event.seq);
        if let Some(held) = shared.get(&key).and_then(Weak::upgrade) {
            return held;
        }
        let event = Arc::new(event);
        shared.insert(key, Arc::downgrade(&event));
        event
    }

    /// Subscribers of `session` now.
    pub fn subscribers(&self, session: &str) -> usize {
        self.counts.lock().sessions.get(session).copied().unwrap_or(0)
    }

    /// Bytes counted against [`OUTBOX_BYTES`] now.
    pub fn outbox_used(&self) -> usize {
        OUTBOX_BYTES - self.outbox.available_permits()
    }

    /// Counts `bytes` against the outbox if it has room for them now.
    pub fn try_reserve(&self, bytes: usize) -> Option<OwnedSemaphorePermit> {
        let bytes = u32::try_from(bytes.clamp(1, OUTBOX_BYTES)).unwrap_or(u32::MAX);
        self.outbox.clone().try_acquire_many_owned(bytes).ok()
    }

    /// Counts `bytes` against the outbox (a frame larger than the whole budget counts as the
    /// budget), waiting at most `limit` for room: `None` when there was none by then.
    pub async fn reserve(&self, bytes: usize, limit: Duration) -> Option<OwnedSemaphorePermit> {
        let bytes = u32::try_from(bytes.clamp(1, OUTBOX_BYTES)).unwrap_or(u32::MAX);
        tokio::time::timeout(limit, self.outbox.clone().acquire_many_owned(bytes))
            .await
            .ok()
            .and_then(Result::ok)
    }
}

/// A follower past a limit: what it is (the API answers `429 too_many_subscribers`).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct TooMany(pub String);

/// One follower's place: given back when dropped.
#[derive(Debug)]
pub struct Seat {
    watchers: Arc<Watchers>,
    session: Option<String>,
    token: Option<Arc<str>>,
}

impl Seat {
    /// Counts this seat in (`up`) or out.
    fn count(&self, counts: &mut Counts, up: bool) {
        if let Some(session) = &self.session {
            count(&mut counts.sessions, session.clone(), up);
        }
        if let Some(token) = &self.token {
            count(&mut counts.tokens, token.clone(), up);
            if let Some(session) = &self.session {
                count(&mut counts.named, session.clone(), up);
                count(&mut counts.token_sessions, (token.clone(), session.clone()), up);
            }
        }
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        let watchers = self.watchers.clone();
        let mut counts = watchers.counts.lock();
        self.count(&mut counts, false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_and_a_named_token_have_a_limit_of_places() {
        let watchers = Arc::new(Watchers::default());
        // The owner is held to no count of places.
        let owner: Vec<Seat> =
            (0..MAX_PER_SESSION * 2).map(|_| watchers.seat(None, Some("s1")).unwrap()).collect();
        assert_eq!(watchers.subscribers("s1"), MAX_PER_SESSION * 2);
        // One named token: a few places of a session, however many sessions it follows.
        let phone = Some("phone");
        let mine: Vec<Seat> = (0..MAX_PER_TOKEN_PER_SESSION)
            .map(|_| watchers.seat(phone, Some("s1")).unwrap())
            .collect();
        let refused = watchers.seat(phone, Some("s1")).unwrap_err();
        assert!(refused.0.contains("token phone has 8 subscribers of session s1"), "{refused}");
        // Named tokens together: the session's named places.
        let others: Vec<Seat> = (0..MAX_PER_SESSION - MAX_PER_TOKEN_PER_SESSION)
            .map(|at| watchers.seat(Some(&format!("t{}", at / 8)), Some("s1")).unwrap())
            .collect();
        let refused = watchers.seat(Some("late"), Some("s1")).unwrap_err();
        assert!(refused.0.contains("32 subscribers with named tokens"), "{refused}");
        // The owner still gets in.
        let _owner_again = watchers.seat(None, Some("s1")).unwrap();
        drop((owner, others, mine));
        assert_eq!(watchers.subscribers("s1"), 1);

        let mut held = Vec::new();
        for at in 0..MAX_PER_TOKEN {
            held.push(watchers.seat(phone, Some(&format!("t{at}"))).unwrap());
        }
        let refused = watchers.seat(phone, None).unwrap_err();
        assert!(refused.0.contains("token phone follows 64"), "{refused}");
        held.pop();
        let _dashboard = watchers.seat(phone, None).unwrap();
        drop(held);
        let counts = watchers.counts.lock();
        assert_eq!(counts.tokens.get("phone"), Some(&1), "the dashboard");
        assert!(counts.token_sessions.is_empty() && counts.named.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn the_outbox_waits_for_room_then_gives_up() {
        let watchers = Watchers::default();
        let whole = watchers.reserve(usize::MAX, Duration::from_secs(1)).await.unwrap();
        assert_eq!(watchers.outbox_used(), OUTBOX_BYTES);
        assert!(watchers.reserve(10, Duration::from_secs(5)).await.is_none());
        drop(whole);
        assert_eq!(watchers.outbox_used(), 0);
        let some = watchers.reserve(10, Duration::from_secs(5)).await.unwrap();
        assert_eq!(watchers.outbox_used(), 10);
        drop(some);
    }
}
