//! The keys terminal sessions' hooks ask with ([`crate::hooks`]): one per session, made when
//! its terminal registers, kept as its SHA-256 digest, and marked once the session ends (its
//! CLI may run on without Switchboard).

use std::collections::{HashMap, VecDeque};

use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use switchboard_transport::terminal::HookGate;

/// The most keys of terminal sessions that ended kept (oldest forgotten first): their CLIs may
/// run on without Switchboard.
const MAX_ENDED_KEYS: usize = 4096;

/// The hook keys of the terminal sessions this daemon ran, by their digest.
#[derive(Debug, Default)]
pub struct HookKeys {
    keys: Mutex<Keys>,
}

#[derive(Debug, Default)]
struct Keys {
    by_digest: HashMap<[u8; 32], Registered>,
    /// The keys of sessions that ended, oldest first.
    ended: VecDeque<[u8; 32]>,
}

/// A key's session.
#[derive(Debug, Clone)]
pub struct Registered {
    /// Its id.
    pub session: String,
    /// `None` once the session ended (its terminal detached or went away): its CLI runs on
    /// without Switchboard, and its hook is told so.
    pub gate: Option<HookGate>,
}

impl HookKeys {
    /// A new key for `session`'s hooks, which ask through `gate`.
    pub fn register(&self, session: &str, gate: HookGate) -> String {
        let key = switchboard_transport::random::random_hex(32);
        let registered = Registered { session: session.to_owned(), gate: Some(gate) };
        self.lock().by_digest.insert(digest(&key), registered);
        key
    }

    /// `session` ended (its terminal detached or went away): a hook still waiting gets no
    /// answer, and its CLI's calls from now on are left to the CLI (which runs on in its
    /// terminal without Switchboard), not blocked.
    pub fn ended(&self, session: &str) {
        let mut keys = self.lock();
        let Keys { by_digest, ended } = &mut *keys;
        for (digest, registered) in by_digest.iter_mut() {
            if registered.session == session {
                if let Some(gate) = registered.gate.take() {
                    gate.close();
                    ended.push_back(*digest);
                }
            }
        }
        while ended.len() > MAX_ENDED_KEYS {
            if let Some(oldest) = ended.pop_front() {
                by_digest.remove(&oldest);
            }
        }
    }

    /// The session a key was given to: its gate, or `None` once it ended.
    pub fn find(&self, key: &str) -> Option<Registered> {
        self.lock().by_digest.get(&digest(key)).cloned()
    }

    fn lock(&self) -> parking_lot::MutexGuard<'_, Keys> {
        self.keys.lock()
    }
}

fn digest(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_finds_its_session_until_it_is_forgotten() {
        let keys = HookKeys::default();
        let (_, _, _, gate) = switchboard_transport::terminal::attached();
        let key = keys.register("s1", gate);
        assert_eq!(keys.find(&key).map(|found| found.session), Some("s1".to_owned()));
        assert!(keys.find("not-a-key").is_none());
        assert!(keys.find("").is_none());
        keys.ended("s1");
        let ended = keys.find(&key).expect("known, as ended");
        assert!(ended.gate.is_none(), "its calls are the CLI's to decide");
    }
}
