//! How fast relay CLIs may make sessions: the relay's ingress token is in every relay CLI's
//! environment, so its tools have it (one socket made 300 sessions in under a second). A
//! connection makes at most [`MAX_RELAY_SESSIONS`] and rotates at most
//! [`RELAY_ROTATIONS_PER_SECOND`] times a second; relay CLIs together make at most
//! [`RELAY_NEW_SESSIONS_PER_MINUTE`]. Past any, a connection's lines go on in its current
//! session (none is lost).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// The most Switchboard sessions one relay connection makes (one per distinct Claude session
/// id): a CLI whose lines name more goes on in its last session.
pub const MAX_RELAY_SESSIONS: usize = 16;

/// The most sessions relay CLIs make in a minute, daemon-wide (connections and rotations to a
/// new Claude session together): a tool that reconnects is held to it too.
pub const RELAY_NEW_SESSIONS_PER_MINUTE: usize = 60;

/// The most rotations one relay connection makes in a second.
pub const RELAY_ROTATIONS_PER_SECOND: usize = 5;

/// At most `most` events in any `span`: when the last ones were.
#[derive(Debug)]
pub(crate) struct Window {
    span: Duration,
    at: VecDeque<Instant>,
}

impl Window {
    /// A window of `span`.
    pub(crate) fn new(span: Duration) -> Window {
        Window { span, at: VecDeque::new() }
    }

    /// Counts one more event now if fewer than `most` happened within the span: whether it
    /// did.
    pub(crate) fn take(&mut self, most: usize) -> bool {
        let now = Instant::now();
        while self.at.front().is_some_and(|at| now.duration_since(*at) >= self.span) {
            self.at.pop_front();
        }
        if self.at.len() >= most {
            return false;
        }
        self.at.push_back(now);
        true
    }

    /// Whether one more would be counted now (nothing is counted).
    pub(crate) fn has_room(&mut self, most: usize) -> bool {
        let now = Instant::now();
        while self.at.front().is_some_and(|at| now.duration_since(*at) >= self.span) {
            self.at.pop_front();
        }
        self.at.len() < most
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_window_counts_at_most_so_many() {
        let mut window = super::Window::new(std::time::Duration::from_secs(3600));
        assert!(window.has_room(2));
        assert!(window.take(2) && window.take(2));
        assert!(!window.has_room(2));
        assert!(!window.take(2));
    }
}
