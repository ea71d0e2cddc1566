//! One-time codes that sign a device in (`switchboard pair`): each names the `approve` token
//! it becomes, works once, and expires in minutes. Only the code's SHA-256 digest is kept, in
//! memory (a daemon restart voids every code), at most [`MAX_CODES`] at once. The pages and
//! routes are [`crate::pairing`]'s.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use sha2::{Digest, Sha256};

/// The most codes waiting at once (the oldest gives way to a new one).
pub const MAX_CODES: usize = 16;

/// How long a code works unless asked otherwise.
pub const DEFAULT_LIFETIME: Duration = Duration::from_secs(600);

/// The shortest and the longest a code may be asked to work.
pub const LIFETIMES: std::ops::RangeInclusive<Duration> =
    Duration::from_secs(60)..=Duration::from_secs(3600);

/// Why a code does not sign anyone in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Used already, or never made here (or made before the daemon restarted).
    Unknown,
    /// Its minutes are up.
    Expired,
}

#[derive(Debug)]
struct Waiting {
    name: String,
    expires: Instant,
}

/// The codes waiting to be used. See the module's documentation.
#[derive(Debug, Default)]
pub struct PairCodes {
    waiting: Mutex<HashMap<[u8; 32], Waiting>>,
}

fn digest(code: &str) -> [u8; 32] {
    Sha256::digest(code.as_bytes()).into()
}

impl PairCodes {
    /// A new code that becomes the token `name`, working until `now + lifetime`.
    pub fn issue(&self, name: &str, lifetime: Duration, now: Instant) -> String {
        let code = switchboard_transport::random::random_hex(16);
        let mut waiting = self.waiting.lock();
        waiting.retain(|_, code| code.expires > now);
        if waiting.len() >= MAX_CODES {
            if let Some(oldest) =
                waiting.iter().min_by_key(|(_, code)| code.expires).map(|(key, _)| *key)
            {
                waiting.remove(&oldest);
            }
        }
        waiting.insert(digest(&code), Waiting { name: name.to_owned(), expires: now + lifetime });
        code
    }

    /// Whether a token is being paired as `name` now (a second code for it would make a second
    /// token of the same name).
    pub fn pairing(&self, name: &str, now: Instant) -> bool {
        self.waiting.lock().values().any(|code| code.name == name && code.expires > now)
    }

    /// The name `code` would sign in as, without using it.
    pub fn peek(&self, code: &str, now: Instant) -> Result<String, Refused> {
        match self.waiting.lock().get(&digest(code)) {
            None => Err(Refused::Unknown),
            Some(waiting) if waiting.expires <= now => Err(Refused::Expired),
            Some(waiting) => Ok(waiting.name.clone()),
        }
    }

    /// Uses `code`: the name its token takes, once.
    pub fn redeem(&self, code: &str, now: Instant) -> Result<String, Refused> {
        match self.waiting.lock().remove(&digest(code)) {
            None => Err(Refused::Unknown),
            Some(waiting) if waiting.expires <= now => Err(Refused::Expired),
            Some(waiting) => Ok(waiting.name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_code_works_once_and_only_in_its_minutes() {
        let codes = PairCodes::default();
        let now = Instant::now();
        let code = codes.issue("phone", Duration::from_secs(60), now);
        assert_eq!(code.len(), 32);
        assert!(codes.pairing("phone", now));
        assert_eq!(codes.peek(&code, now), Ok("phone".into()), "looking uses nothing");
        assert_eq!(codes.redeem(&code, now), Ok("phone".into()));
        assert_eq!(codes.redeem(&code, now), Err(Refused::Unknown), "once");
        assert_eq!(codes.peek("0123", now), Err(Refused::Unknown));
        let late = codes.issue("tablet", Duration::from_secs(60), now);
        let then = now + Duration::from_secs(61);
        assert_eq!(codes.peek(&late, then), Err(Refused::Expired));
        assert_eq!(codes.redeem(&late, then), Err(Refused::Expired));
        assert!(!codes.pairing("tablet", then));
    }

    #[test]
    fn codes_are_bounded() {
        let codes = PairCodes::default();
        let now = Instant::now();
        let first = codes.issue("a", Duration::from_secs(60), now);
        for at in 0..MAX_CODES {
            codes.issue(&format!("n{at}"), Duration::from_secs(120), now);
        }
        assert_eq!(codes.waiting.lock().len(), MAX_CODES);
        assert_eq!(codes.peek(&first, now), Err(Refused::Unknown), "the oldest gave way");
    }
}
