//! Who holds the daemon's connections, and who gives one up when they are all taken.
//!
//! Every accepted connection is admitted here under its peer's IP address (an IPv6 address's
//! /64). A connection is *held* while it carries something being answered: a WebSocket after
//! its upgrade, a followed gRPC stream being answered, an HTTP/1.1 request whose body has
//! arrived until its answer is sent ([`Lease`]); any other connection (one still sending its
//! request, one idle between requests, an HTTP/2 connection with no followed stream) can be
//! *shed*. When a peer already has [`Limits::per_peer`] connections, or the daemon has
//! [`Limits::total`], a new connection sheds the oldest sheddable one (the peer's own first,
//! else anyone's), so a flood of connections that never finish a request cannot keep a person's
//! next request out: it is their oldest connection that goes. Where nothing can be shed (every
//! connection is a live WebSocket or stream), the new connection is refused.

use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

/// The connection limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections at once, all peers together.
    pub total: usize,
    /// Connections at once from one IP address.
    pub per_peer: usize,
}

/// The most connections served at once, whatever the file-descriptor limit allows.
pub const MAX_CONNECTIONS: usize = 4096;

/// File descriptors kept for everything but client connections (the store, sessions' pipes and
/// sockets, git, logs).
pub const RESERVED_DESCRIPTORS: u64 = 256;

impl Limits {
    /// The default: [`MAX_CONNECTIONS`], or fewer where the process's file-descriptor limit
    /// (`nofile`, raised to its hard limit first) leaves less than that beside
    /// [`RESERVED_DESCRIPTORS`]; one peer may hold half.
    pub fn for_this_process() -> Limits {
        let total = usize::try_from(descriptors().saturating_sub(RESERVED_DESCRIPTORS))
            .unwrap_or(usize::MAX)
            .clamp(16, MAX_CONNECTIONS);
        Limits { total, per_peer: (total / 2).max(1) }
    }
}

/// The process's limit on open files, raised from its soft to its hard limit first.
fn descriptors() -> u64 {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return 1024;
    };
    if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        return hard;
    }
    soft
}

/// The peer a connection counts against: its IPv4 address, or its IPv6 address's /64 (one
/// host has a whole /64 to pick addresses from); an IPv4-mapped address as IPv4.
fn peer_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let bits = u128::from(v6) & !((1u128 << 64) - 1);
                IpAddr::V6(std::net::Ipv6Addr::from(bits))
            }
        },
        v4 => v4,
    }
}

/// Every admitted connection, by peer.
#[derive(Debug)]
pub struct Peers {
    limits: Limits,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    next_id: u64,
    open: usize,
    peers: HashMap<IpAddr, VecDeque<Arc<Entry>>>,
}

/// One connection as [`Peers`] sees it.
#[derive(Debug)]
struct Entry {
    id: u64,
    /// Things it carries that a client follows; sheddable at zero.
    holds: AtomicUsize,
    /// Told when it is shed.
    shed: Notify,
}

/// What [`Peers::admit`] decided.
#[derive(Debug)]
pub enum Admission {
    /// Come in.
    Admitted(Admitted),
    /// Every place this connection could have is held.
    Refused,
}

impl Peers {
    /// Connections limited by `limits`.
    pub fn new(limits: Limits) -> Arc<Peers> {
        Arc::new(Peers { limits, state: Mutex::new(State::default()) })
    }

    /// The limits in force.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.state.lock().open
    }

    /// Admits a connection from `peer`, shedding the oldest sheddable connection (the peer's
    /// own first) where a limit is reached. The shed connection counts until its task lets it
    /// go, so for a moment the daemon may hold one more than its limit.
    pub fn admit(self: &Arc<Self>, peer: IpAddr) -> Admission {
        let peer = peer_key(peer);
        let mut state = self.state.lock();
        let own = state.peers.get(&peer).map_or(0, VecDeque::len);
        if own >= self.limits.per_peer && !state.shed_from(Some(peer)) {
            return Admission::Refused;
        }
        if state.open >= self.limits.total && !state.shed_from(Some(peer)) && !state.shed_from(None)
        {
            return Admission::Refused;
        }
        state.next_id += 1;
        let entry =
            Arc::new(Entry { id: state.next_id, holds: AtomicUsize::new(0), shed: Notify::new() });
        state.open += 1;
        state.peers.entry(peer).or_default().push_back(entry.clone());
        Admission::Admitted(Admitted { peers: self.clone(), peer, entry })
    }
}

impl State {
    /// Sheds the oldest sheddable connection of `peer` (or of anyone): whether there was one.
    /// It leaves the count at once, its task a moment later.
    fn shed_from(&mut self, peer: Option<IpAddr>) -> bool {
        let found = match peer {
            Some(peer) => self.peers.get(&peer).and_then(|entries| {
                entries
                    .iter()
                    .position(|entry| entry.holds.load(Ordering::SeqCst) == 0)
                    .map(|at| (peer, at))
            }),
            None => self
                .peers
                .iter()
                .filter_map(|(peer, entries)| {
                    let at =
                        entries.iter().position(|entry| entry.holds.load(Ordering::SeqCst) == 0)?;
                    Some((*peer, at, entries[at].id))
                })
                .min_by_key(|(_, _, id)| *id)
                .map(|(peer, at, _)| (peer, at)),
        };
        let Some((peer, at)) = found else { return false };
        let Some(entries) = self.peers.get_mut(&peer) else { return false };
        let Some(entry) = entries.remove(at) else { return false };
        if entries.is_empty() {
            self.peers.remove(&peer);
        }
        self.open -= 1;
        tracing::debug!(%peer, "connection limit reached; shedding an idle or unfinished connection");
        entry.shed.notify_one();
        true
    }
}

/// An admitted connection's place: given back when dropped.
#[derive(Debug)]
pub struct Admitted {
    peers: Arc<Peers>,
    peer: IpAddr,
    entry: Arc<Entry>,
}

impl Admitted {
    /// Resolves when the connection is shed to make room for another.
    pub async fn shed(&self) {
        self.entry.shed.notified().await;
    }

    /// Marks the connection as carrying something a client follows until it ends (a
    /// WebSocket).
    pub fn hold_for_good(&self) {
        self.entry.holds.fetch_add(1, Ordering::SeqCst);
    }

    /// Marks the connection as carrying something a client follows until the returned guard
    /// is dropped (an HTTP/2 call's response).
    pub fn hold(&self) -> Hold {
        self.entry.holds.fetch_add(1, Ordering::SeqCst);
        Hold(self.entry.clone())
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut state = self.peers.state.lock();
        let State { open, peers, .. } = &mut *state;
        if let Some(entries) = peers.get_mut(&self.peer) {
            if let Some(at) = entries.iter().position(|entry| entry.id == self.entry.id) {
                entries.remove(at);
                *open -= 1;
            }
            if entries.is_empty() {
                peers.remove(&self.peer);
            }
        }
    }
}

/// A request being answered on an HTTP/1.1 connection: it holds the connection's place from
/// when its whole body has arrived ([`Lease::begin`]) until its response has been sent
/// ([`Lease::end`]). A connection still sending its request (a body that trickles) or idle
/// between requests holds nothing.
#[derive(Debug)]
pub struct Lease {
    place: Arc<Admitted>,
    hold: parking_lot::Mutex<Option<Hold>>,
    ended: std::sync::atomic::AtomicBool,
}

impl Lease {
    /// A lease on `place`, not begun.
    pub fn new(place: Arc<Admitted>) -> Arc<Lease> {
        Arc::new(Lease { place, hold: parking_lot::Mutex::new(None), ended: false.into() })
    }

    /// The request's body has arrived: the connection is held (unless the answer is sent).
    pub fn begin(&self) {
        let mut hold = self.hold.lock();
        if !self.ended.load(Ordering::SeqCst) && hold.is_none() {
            *hold = Some(self.place.hold());
        }
    }

    /// The answer has been sent (or dropped): the connection holds nothing for it.
    pub fn end(&self) {
        let mut hold = self.hold.lock();
        self.ended.store(true, Ordering::SeqCst);
        hold.take();
    }
}

/// See [`Admitted::hold`].
#[derive(Debug)]
pub struct Hold(Arc<Entry>);

impl Drop for Hold {
    fn drop(&mut self) {
        self.0.holds.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([127, 0, 0, last])
    }

    fn admitted(admission: Admission) -> Admitted {
        match admission {
            Admission::Admitted(admitted) => admitted,
            Admission::Refused => panic!("refused"),
        }
    }

    fn is_shed(admitted: &Admitted) -> bool {
        let shed = admitted.shed();
        tokio::pin!(shed);
        futures::FutureExt::now_or_never(shed).is_some()
    }

    #[test]
    fn a_full_peer_sheds_its_oldest_idle_connection_and_keeps_its_held_ones() {
        let peers = Peers::new(Limits { total: 100, per_peer: 3 });
        let first = admitted(peers.admit(ip(1)));
        let _kept = first.hold();
        let second = admitted(peers.admit(ip(1)));
        let third = admitted(peers.admit(ip(1)));
        assert_eq!(peers.open(), 3);
        // The fourth sheds the oldest one that holds nothing: the second.
        let fourth = admitted(peers.admit(ip(1)));
        assert!(!is_shed(&first));
        assert!(is_shed(&second));
        assert!(!is_shed(&third));
        assert_eq!(peers.open(), 3);
        drop(second);
        assert_eq!(peers.open(), 3, "a shed connection was counted out already");
        // Another peer is not touched by this one's limit.
        let _other = admitted(peers.admit(ip(2)));
        assert_eq!(peers.open(), 4);
        // With every connection of the peer held, a new one is refused.
        let _h3 = third.hold();
        let _h4 = fourth.hold();
        assert!(matches!(peers.admit(ip(1)), Admission::Refused));
        drop(_h4);
        let _fifth = admitted(peers.admit(ip(1)));
        assert!(is_shed(&fourth));
    }

    #[test]
    fn a_full_daemon_sheds_the_oldest_idle_connection_of_anyone() {
        let peers = Peers::new(Limits { total: 3, per_peer: 3 });
        let a = admitted(peers.admit(ip(1)));
        let b = admitted(peers.admit(ip(2)));
        let _hb = b.hold();
        let c = admitted(peers.admit(ip(3)));
        // Peer 4 has nothing to shed of its own: the oldest idle of anyone goes (a).
        let d = admitted(peers.admit(ip(4)));
        assert!(is_shed(&a));
        assert!(!is_shed(&b) && !is_shed(&c) && !is_shed(&d));
        // Peer 3 at the limit sheds its own first.
        let _e = admitted(peers.admit(ip(3)));
        assert!(is_shed(&c));
        assert!(!is_shed(&d));
        drop((a, c));
        assert_eq!(peers.open(), 3);
        let held = [d.hold(), _e.hold()];
        assert!(matches!(peers.admit(ip(5)), Admission::Refused));
        drop(held);
    }

    #[test]
    fn a_request_being_answered_holds_its_connection_until_its_answer_is_sent() {
        let peers = Peers::new(Limits { total: 100, per_peer: 1 });
        let place = Arc::new(admitted(peers.admit(ip(1))));
        let lease = Lease::new(place.clone());
        // Still arriving: sheddable.
        let next = admitted(peers.admit(ip(1)));
        assert!(is_shed(&place));
        drop((next, lease));
        let place = Arc::new(admitted(peers.admit(ip(1))));
        let lease = Lease::new(place.clone());
        lease.begin();
        assert!(matches!(peers.admit(ip(1)), Admission::Refused), "held while answered");
        lease.end();
        lease.begin();
        let _next = admitted(peers.admit(ip(1)));
        assert!(is_shed(&place), "an ended lease does not begin again");
    }

    #[test]
    fn an_ipv6_host_is_one_peer_across_its_64() {
        let peers = Peers::new(Limits { total: 100, per_peer: 1 });
        let one = admitted(peers.admit("2001:db8:1:2::1".parse().unwrap()));
        one.hold_for_good();
        assert!(matches!(peers.admit("2001:db8:1:2:ffff::9".parse().unwrap()), Admission::Refused));
        let _other = admitted(peers.admit("2001:db8:1:3::1".parse().unwrap()));
        let _mapped = admitted(peers.admit("::ffff:10.0.0.1".parse().unwrap()));
        _mapped.hold_for_good();
        assert!(matches!(peers.admit(ip(0).to_canonical()), Admission::Admitted(_)));
        assert!(matches!(peers.admit("10.0.0.1".parse().unwrap()), Admission::Refused));
    }

    #[test]
    fn a_hold_for_good_lasts_until_the_connection_ends() {
        let peers = Peers::new(Limits { total: 1, per_peer: 1 });
        let socket = admitted(peers.admit(ip(1)));
        socket.hold_for_good();
        assert!(matches!(peers.admit(ip(1)), Admission::Refused));
        drop(socket);
        assert_eq!(peers.open(), 0);
        let _next = admitted(peers.admit(ip(1)));
    }

    #[test]
    fn the_default_fits_the_descriptor_limit() {
        let limits = Limits::for_this_process();
        let (soft, _) =
            nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap();
        assert!(limits.total as u64 + RESERVED_DESCRIPTORS <= soft.max(16 + RESERVED_DESCRIPTORS));
        assert!(limits.total <= MAX_CONNECTIONS);
        assert_eq!(limits.per_peer, limits.total / 2);
    }
}
