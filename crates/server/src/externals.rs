//! The Claude Code sessions Switchboard did not start but follows (`switchboard hooks install`
//! wrote its hooks into the person's settings): each by its Claude session id, with the gate
//! its tool calls are put to the session through, the process that runs it, and how to end the
//! following. The daemon adopts them ([`crate::daemon::Daemon::external`]); this is only their
//! registry.
//!
//! A session let go in Switchboard (stopped there: its CLI runs on alone) is remembered with
//! its process, so that the same process's later hooks are left to the CLI instead of making
//! it a session again; at most [`MAX_LET_GO`] are remembered, the oldest forgotten first.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use parking_lot::Mutex;
use switchboard_transport::terminal::HookGate;
use tokio::sync::Notify;

/// The variable `switchboard claude` names its session with in the environment of the CLI it
/// runs: that CLI's installed hooks leave it to the session's own (`switchboard hook` passes it
/// on, and the daemon checks it names a terminal's session).
pub const TERMINAL_VARIABLE: &str = "SB_TERMINAL";

/// The most sessions followed at once.
pub const MAX_EXTERNALS: usize = 256;

/// The most sessions remembered as let go.
pub const MAX_LET_GO: usize = 4096;

/// A session followed through its hooks.
#[derive(Debug, Clone)]
pub struct External {
    /// The Switchboard session.
    pub session: String,
    /// Where its tool calls are put to the session.
    pub gate: HookGate,
    /// The CLI's process, when its hook could tell.
    pub pid: Option<u32>,
    /// Told when the CLI says its session ended (its `SessionEnd` hook, or another conversation
    /// begun in the same process): the following reads what is left and ends.
    pub end: Arc<Notify>,
}

#[derive(Debug, Default)]
struct Inner {
    /// By Claude session id.
    followed: HashMap<String, External>,
    /// Claude session ids let go, with their process, oldest first.
    let_go: VecDeque<(String, Option<u32>)>,
}

/// Every session followed through its hooks. See the module's documentation.
#[derive(Debug, Default)]
pub struct Externals {
    inner: Mutex<Inner>,
    /// One adoption at a time: two hooks of a new session arriving together make one session.
    adopting: tokio::sync::Mutex<()>,
}

impl Externals {
    /// The session that follows Claude session `claude`.
    pub fn find(&self, claude: &str) -> Option<External> {
        self.inner.lock().followed.get(claude).cloned()
    }

    /// The Claude session a Switchboard session follows, and its process.
    pub fn of_session(&self, session: &str) -> Option<(String, Option<u32>)> {
        let inner = self.inner.lock();
        inner
            .followed
            .iter()
            .find(|(_, external)| external.session == session)
            .map(|(claude, external)| (claude.clone(), external.pid))
    }

    /// Whether the process `pid`'s session `claude` was let go (its later hooks are the CLI's).
    pub fn was_let_go(&self, claude: &str, pid: Option<u32>) -> bool {
        self.inner.lock().let_go.iter().any(|(id, by)| id == claude && *by == pid)
    }

    /// Held while a session is adopted.
    pub async fn adopting(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.adopting.lock().await
    }

    /// Adds `external` as following `claude`; refused when [`MAX_EXTERNALS`] are followed.
    pub fn insert(&self, claude: &str, external: External) -> Result<(), String> {
        let mut inner = self.inner.lock();
        if inner.followed.len() >= MAX_EXTERNALS && !inner.followed.contains_key(claude) {
            return Err(format!("Switchboard follows {MAX_EXTERNALS} sessions already"));
        }
        inner.followed.insert(claude.to_owned(), external);
        Ok(())
    }

    /// Ends the following of every other session that process `pid` ran (it began another
    /// conversation: `/clear`, `/resume`).
    pub fn end_others_of(&self, pid: u32, claude: &str) {
        for (id, external) in &self.inner.lock().followed {
            if external.pid == Some(pid) && id != claude {
                external.end.notify_one();
            }
        }
    }

    /// Tells the following of `claude` that its session ended.
    pub fn end(&self, claude: &str) {
        if let Some(external) = self.inner.lock().followed.get(claude) {
            external.end.notify_one();
        }
    }

    /// `claude` is followed no more: its process ended, or (`let_go`) the session was stopped
    /// in Switchboard while its CLI runs on.
    pub fn remove(&self, claude: &str, let_go: bool) {
        let mut inner = self.inner.lock();
        let Some(external) = inner.followed.remove(claude) else { return };
        if let_go {
            if inner.let_go.len() >= MAX_LET_GO {
                inner.let_go.pop_front();
            }
            inner.let_go.push_back((claude.to_owned(), external.pid));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn external(session: &str, pid: Option<u32>) -> External {
        let (_, _, _, gate) = switchboard_transport::terminal::attached();
        External { session: session.into(), gate, pid, end: Arc::new(Notify::new()) }
    }

    #[test]
    fn a_session_let_go_stays_its_processs() {
        let externals = Externals::default();
        externals.insert("c1", external("s1", Some(7))).unwrap();
        assert_eq!(externals.find("c1").unwrap().session, "s1");
        assert_eq!(externals.of_session("s1"), Some(("c1".into(), Some(7))));
        externals.remove("c1", true);
        assert!(externals.find("c1").is_none());
        assert!(externals.was_let_go("c1", Some(7)), "the same process's hooks are its own");
        assert!(!externals.was_let_go("c1", Some(8)), "another process resuming it is followed");
        externals.insert("c2", external("s2", None)).unwrap();
        externals.remove("c2", false);
        assert!(!externals.was_let_go("c2", None), "an ended process is not let go");
    }

    #[test]
    fn followed_sessions_are_bounded() {
        let externals = Externals::default();
        for at in 0..MAX_EXTERNALS {
            externals.insert(&format!("c{at}"), external("s", None)).unwrap();
        }
        let refused = externals.insert("one-more", external("s", None)).unwrap_err();
        assert!(refused.contains("256"), "{refused}");
        externals.insert("c0", external("s", None)).expect("one followed already is replaced");
    }

    #[tokio::test]
    async fn another_conversation_of_the_process_ends_the_last() {
        let externals = Externals::default();
        let old = external("s1", Some(9));
        let ended = old.end.clone();
        externals.insert("c1", old).unwrap();
        externals.end_others_of(9, "c2");
        tokio::time::timeout(std::time::Duration::from_secs(5), ended.notified())
            .await
            .expect("told to end");
    }
}
