//! Recent permission decisions by request id, for the pages of one-tap links
//! ([`crate::approval`]): a used link's page says who answered without reading the session's
//! log. The pump notes each decision as it stores it; a link to a request decided before the
//! daemon started reads its session's log once (then every decision found there is noted, and
//! that session is not read again). Both are bounded: [`MAX_DECISIONS`] decisions and
//! [`MAX_SCANNED`] sessions, the oldest forgotten first.

use parking_lot::Mutex;
use std::collections::{HashMap, HashSet, VecDeque};

use switchboard_session::{Behavior, DecidedBy};

/// Decisions kept.
pub const MAX_DECISIONS: usize = 10_000;

/// Sessions whose logs were read for their decisions, remembered.
pub const MAX_SCANNED: usize = 1_000;

/// How far back in a session's log its decisions are looked for, once.
pub const DECISION_LOOKBACK: usize = 5000;

/// One decision: allowed or denied, and by whom.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// Allow or deny.
    pub behavior: Behavior,
    /// Who decided.
    pub by: DecidedBy,
}

/// See the module.
#[derive(Debug, Default)]
pub struct Decisions {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    by_request: HashMap<(String, String), Decision>,
    order: VecDeque<(String, String)>,
    scanned: HashSet<String>,
    scanned_order: VecDeque<String>,
}

impl Decisions {
    /// Notes that `request` of `session` was decided.
    pub fn note(&self, session: &str, request: &str, decision: Decision) {
        let mut inner = self.inner.lock();
        let key = (session.to_owned(), request.to_owned());
        if inner.by_request.insert(key.clone(), decision).is_none() {
            inner.order.push_back(key);
        }
        while inner.order.len() > MAX_DECISIONS {
            if let Some(oldest) = inner.order.pop_front() {
                inner.by_request.remove(&oldest);
            }
        }
    }

    /// The decision on `request` of `session`, if noted.
    pub fn get(&self, session: &str, request: &str) -> Option<Decision> {
        self.inner.lock().by_request.get(&(session.to_owned(), request.to_owned())).cloned()
    }

    /// Whether `session`'s log was read for its decisions already ([`Decisions::scanned`]).
    pub fn was_scanned(&self, session: &str) -> bool {
        self.inner.lock().scanned.contains(session)
    }

    /// Notes that `session`'s log was read for its decisions: it is not read again (until it
    /// is forgotten among [`MAX_SCANNED`]).
    pub fn scanned(&self, session: &str) {
        let mut inner = self.inner.lock();
        if !inner.scanned.insert(session.to_owned()) {
            return;
        }
        inner.scanned_order.push_back(session.to_owned());
        while inner.scanned_order.len() > MAX_SCANNED {
            if let Some(oldest) = inner.scanned_order.pop_front() {
                inner.scanned.remove(&oldest);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions_are_kept_by_request_and_bounded() {
        let decisions = Decisions::default();
        let allowed = Decision { behavior: Behavior::Allow, by: DecidedBy::Timeout };
        decisions.note("s", "r0", allowed.clone());
        assert_eq!(decisions.get("s", "r0"), Some(allowed.clone()));
        assert_eq!(decisions.get("other", "r0"), None);
        for at in 1..=MAX_DECISIONS {
            decisions.note("s", &format!("r{at}"), allowed.clone());
        }
        assert_eq!(decisions.get("s", "r0"), None, "the oldest is forgotten");
        assert!(decisions.get("s", &format!("r{MAX_DECISIONS}")).is_some());
        assert!(!decisions.was_scanned("s"));
        decisions.scanned("s");
        assert!(decisions.was_scanned("s"), "a session's log is read once");
    }
}
