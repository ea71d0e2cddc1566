//! A WebSocket proxy that breaks the link between a `--sdk-url` CLI and the daemon on demand:
//! it can cut every connection, stall or blackhole it, swallow a frame on its way to the CLI,
//! and refuse reconnects (with a 404, or by closing).
//!
//! It forwards bytes, not messages: the CLI's handshake (its token, `x-last-request-id`) and
//! the daemon's answer (`101`, `401`, …) pass unchanged. Only the daemon's frames are read
//! (they are not masked), so that one can be held back or dropped whole. Binds 127.0.0.1 on
//! port 0.
//!
//! ```text
//! CLI ──ws──▶ WsProxy ──tcp──▶ daemon
//! ```

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the proxy does with traffic, for every connection at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Everything passes.
    Pass,
    /// Nothing reaches the CLI (the daemon's frames wait, and its socket fills up); the CLI's
    /// frames still reach the daemon.
    Stall,
}

/// How a new connection is met.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Welcome {
    /// Forwarded to the daemon.
    Forward,
    /// Answered `404 Not Found` (2.1.120 reads a refused reconnect as close code 1002, and
    /// stops trying).
    NotFound,
    /// Closed before any answer (a failed attempt the CLI tries again).
    Close,
}

/// A proxy in front of the daemon's `--sdk-url` endpoint.
pub struct WsProxy {
    address: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for WsProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WsProxy").finish_non_exhaustive()
    }
}

struct Shared {
    upstream: SocketAddr,
    /// Bumped by every change; connections wait on it.
    changed: watch::Sender<u64>,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    flow: Flow,
    welcome: Welcome,
    /// Connections cut so far: a connection started before the last cut ends.
    cuts: u64,
    /// Connections numbered up to this one are blackholed: nothing passes either way, and
    /// nothing is closed (a link that died without a word: the peers' pings go unanswered).
    silenced: usize,
    /// Armed swallows: the next frame to the CLI holding one of these is dropped.
    swallow: Vec<Vec<u8>>,
    /// The text of every frame dropped so far.
    swallowed: Vec<String>,
    /// Connections forwarded (and refused) so far.
    forwarded: usize,
    refused: usize,
    /// Text frames that reached the CLI.
    to_cli: Vec<String>,
}

impl WsProxy {
    /// A proxy in front of `upstream` (`ws://HOST:PORT/…` or `HOST:PORT`): the CLI is given
    /// [`WsProxy::url_for`] instead.
    /// Needs a Tokio runtime.
    pub fn start(upstream: &str) -> std::io::Result<WsProxy> {
        let authority = upstream
            .trim_start_matches("ws://")
            .trim_start_matches("http://")
            .split('/')
            .next()
            .unwrap_or_default();
        let upstream: SocketAddr = authority
            .parse()
            .map_err(|_| std::io::Error::other(format!("not HOST:PORT: {authority:?}")))?;
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let listener = TcpListener::from_std(listener)?;
        let address = listener.local_addr()?;
        let shared = Arc::new(Shared {
            upstream,
            changed: watch::channel(0).0,
            state: Mutex::new(State {
                flow: Flow::Pass,
                welcome: Welcome::Forward,
                cuts: 0,
                silenced: 0,
                swallow: Vec::new(),
                swallowed: Vec::new(),
                forwarded: 0,
                refused: 0,
                to_cli: Vec::new(),
            }),
        });
        let accepting = shared.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(serve(client, accepting.clone()));
            }
        });
        Ok(WsProxy { address, shared, task })
    }

    /// `upstream_url` with the daemon's `HOST:PORT` replaced by the proxy's.
    pub fn url_for(&self, upstream_url: &str) -> String {
        let rest = upstream_url.trim_start_matches("ws://");
        let path = rest.find('/').map(|at| &rest[at..]).unwrap_or("/");
        format!("ws://{}{path}", self.address)
    }

    /// Where the proxy listens.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Sets what passes, for every connection.
    pub fn set_flow(&self, flow: Flow) {
        self.change(|state| state.flow = flow);
    }

    /// Sets how new connections are met.
    pub fn set_welcome(&self, welcome: Welcome) {
        self.change(|state| state.welcome = welcome);
    }

    /// Blackholes every connection up now; later ones pass.
    pub fn blackhole(&self) {
        self.change(|state| state.silenced = state.forwarded);
    }

    /// Cuts every connection up now (both TCP sockets close, no close frame: the CLI sees an
    /// abnormal closure, 1006). The flow goes back to [`Flow::Pass`] for the next ones.
    pub fn cut(&self) {
        self.change(|state| {
            state.cuts += 1;
            state.flow = Flow::Pass;
        });
    }

    /// Drops the next frame to the CLI whose text contains `needle`.
    pub fn swallow(&self, needle: &str) {
        self.change(|state| state.swallow.push(needle.as_bytes().to_vec()));
    }

    /// The frames swallowed so far.
    pub fn swallowed(&self) -> Vec<String> {
        self.lock().swallowed.clone()
    }

    /// Connections forwarded to the daemon so far.
    pub fn forwarded(&self) -> usize {
        self.lock().forwarded
    }

    /// Connections refused so far.
    pub fn refused(&self) -> usize {
        self.lock().refused
    }

    /// Every text frame written to the CLI's socket.
    pub fn to_cli(&self) -> Vec<String> {
        self.lock().to_cli.clone()
    }

    /// Waits until `check` holds of the proxy's counts (checked on every change and every
    /// frame), for at most `limit`.
    ///
    /// # Panics
    /// When `limit` passes first, naming `what` was awaited.
    pub async fn until(
        &self,
        what: &str,
        limit: std::time::Duration,
        check: impl Fn(&WsProxy) -> bool,
    ) {
        let mut changed = self.shared.changed.subscribe();
        let waiting = async {
            while !check(self) {
                if changed.changed().await.is_err() {
                    return;
                }
            }
        };
        if tokio::time::timeout(limit, waiting).await.is_err() {
            panic!("the proxy did not see {what} within {limit:?}");
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.shared.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn change(&self, apply: impl FnOnce(&mut State)) {
        self.shared.change(apply);
    }
}

impl Drop for WsProxy {
    fn drop(&mut self) {
        self.task.abort();
        self.cut();
    }
}

impl Shared {
    fn change(&self, apply: impl FnOnce(&mut State)) {
        apply(&mut self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner()));
        self.changed.send_modify(|version| *version += 1);
    }

    fn read<T>(&self, look: impl FnOnce(&State) -> T) -> T {
        look(&self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner()))
    }
}

/// One connection: refused, or forwarded until it is cut or either side ends.
async fn serve(mut client: TcpStream, shared: Arc<Shared>) {
    let (welcome, cuts) = shared.read(|state| (state.welcome, state.cuts));
    match welcome {
        Welcome::Forward => {}
        Welcome::NotFound => {
            shared.change(|state| state.refused += 1);
            let _ = read_head(&mut client).await;
            let _ = client
                .write_all(
                    b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                )
                .await;
            return;
        }
        Welcome::Close => {
            shared.change(|state| state.refused += 1);
            return;
        }
    }
    let Ok(upstream) = connect_upstream(shared.upstream).await else { return };
    let mut number = 0;
    shared.change(|state| {
        state.forwarded += 1;
        number = state.forwarded;
    });
    let (client_read, client_write) = client.into_split();
    let (upstream_read, upstream_write) = upstream.into_split();
    let link = Link { number, cuts };
    let up = forward_up(client_read, upstream_write, shared.clone(), link);
    let down = forward_down(upstream_read, client_write, shared.clone(), link);
    let mut watch = shared.changed.subscribe();
    let cut = async {
        loop {
            if shared.read(|state| state.cuts) > cuts {
                return;
            }
            if watch.changed().await.is_err() {
                return;
            }
        }
    };
    // Either side ending ends the connection (both sockets are dropped, so both peers see it).
    tokio::select! {
        () = up => {}
        () = down => {}
        () = cut => {}
    }
}

/// A connection to the daemon with a small receive buffer: a stalled link fills up after a
/// few hundred KiB (a daemon's send into it then waits, as into a peer that stopped reading),
/// not after the megabytes loopback allows by default.
async fn connect_upstream(upstream: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.set_recv_buffer_size(STALL_BUFFER_BYTES)?;
    socket.connect(upstream).await
}

/// The receive buffer asked for on the daemon's side of the proxy.
const STALL_BUFFER_BYTES: u32 = 16 * 1024;

/// Which connection a forwarding task serves.
#[derive(Debug, Clone, Copy)]
struct Link {
    /// Its number (1 for the first forwarded).
    number: usize,
    /// The cuts made before it began (a later one ends it).
    cuts: u64,
}

/// Waits while `link`'s traffic in this direction is held back (`stalls`: whether a stall
/// holds it). False when the link was cut meanwhile: what it held must not go out (a cut
/// also ends the stall, for the connections after it).
async fn wait_for_flow(shared: &Shared, link: Link, stalls: bool) -> bool {
    let mut watch = shared.changed.subscribe();
    loop {
        let (flow, silenced, cuts) = shared.read(|state| (state.flow, state.silenced, state.cuts));
        if cuts > link.cuts {
            return false;
        }
        let held = link.number <= silenced || (stalls && flow == Flow::Stall);
        if !held {
            return true;
        }
        if watch.changed().await.is_err() {
            return false;
        }
    }
}

/// The CLI's bytes to the daemon, as they come (held only by a blackhole).
async fn forward_up(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    shared: Arc<Shared>,
    link: Link,
) {
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        if !wait_for_flow(&shared, link, false).await {
            return;
        }
        let read = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(read) => read,
        };
        // Read before a blackhole began: held until it ends, like the rest.
        if !wait_for_flow(&shared, link, false).await {
            return;
        }
        if to.write_all(&buffer[..read]).await.is_err() {
            return;
        }
    }
}

/// The daemon's bytes to the CLI: its handshake answer as is, then frame by frame (held by a
/// stall or a blackhole, dropped when swallowed).
async fn forward_down(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    shared: Arc<Shared>,
    link: Link,
) {
    let mut pending: Vec<u8> = Vec::new();
    let mut head_done = false;
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        if head_done {
            while let Some(length) = frame_length(&pending) {
                let frame: Vec<u8> = pending.drain(..length).collect();
                if !wait_for_flow(&shared, link, true).await {
                    return;
                }
                if !passes(&frame, &shared) {
                    continue;
                }
                if to.write_all(&frame).await.is_err() {
                    return;
                }
                if frame[0] & 0x0f == 1 {
                    let text = String::from_utf8_lossy(frame_payload(&frame)).into_owned();
                    shared.change(|state| state.to_cli.push(text));
                }
            }
        } else if let Some(end) = find(&pending, b"\r\n\r\n") {
            let head: Vec<u8> = pending.drain(..end + 4).collect();
            if to.write_all(&head).await.is_err() {
                return;
            }
            head_done = true;
            continue;
        }
        if !wait_for_flow(&shared, link, true).await {
            return;
        }
        match from.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(read) => pending.extend_from_slice(&buffer[..read]),
        }
    }
}

/// Whether `frame` goes on to the CLI (false: an armed swallow took it).
fn passes(frame: &[u8], shared: &Shared) -> bool {
    if frame[0] & 0x0f != 1 {
        return true;
    }
    let payload = frame_payload(frame);
    let mut passes = true;
    shared.change(|state| {
        if let Some(at) = state.swallow.iter().position(|needle| find(payload, needle).is_some()) {
            state.swallow.remove(at);
            state.swallowed.push(String::from_utf8_lossy(payload).into_owned());
            passes = false;
        }
    });
    passes
}

/// The length of the first whole frame in `bytes`, if it is all there (RFC 6455 §5.2).
fn frame_length(bytes: &[u8]) -> Option<usize> {
    let (header, payload) = frame_sizes(bytes)?;
    (bytes.len() >= header + payload).then_some(header + payload)
}

/// A frame's header and payload sizes, once the header is all there.
fn frame_sizes(bytes: &[u8]) -> Option<(usize, usize)> {
    let second = *bytes.get(1)?;
    let masked = if second & 0x80 != 0 { 4 } else { 0 };
    let (extended, payload) = match second & 0x7f {
        126 => (2, u16::from_be_bytes(bytes.get(2..4)?.try_into().ok()?) as usize),
        127 => (8, u64::from_be_bytes(bytes.get(2..10)?.try_into().ok()?) as usize),
        short => (0, short as usize),
    };
    let header = 2 + extended + masked;
    (bytes.len() >= header).then_some((header, payload))
}

/// A whole frame's payload (the daemon's frames are not masked).
fn frame_payload(frame: &[u8]) -> &[u8] {
    match frame_sizes(frame) {
        Some((header, payload)) => &frame[header..header + payload],
        None => &[],
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return Some(0);
    }
    haystack.windows(needle.len()).position(|window| window == needle)
}

/// Reads a request's head (up to 64 KiB), for a refusal sent after it.
async fn read_head(client: &mut TcpStream) -> std::io::Result<()> {
    let mut head = Vec::new();
    let mut buffer = [0u8; 4096];
    while find(&head, b"\r\n\r\n").is_none() && head.len() < 64 * 1024 {
        let read = client.read(&mut buffer).await?;
        if read == 0 {
            break;
        }
        head.extend_from_slice(&buffer[..read]);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_measured_whole() {
        assert_eq!(frame_length(&[0x81, 3, b'a', b'b', b'c', 0x81]), Some(5));
        assert_eq!(frame_length(&[0x81, 3, b'a']), None);
        let mut long = vec![0x81, 126, 0x01, 0x00];
        long.extend(std::iter::repeat_n(b'x', 256));
        assert_eq!(frame_length(&long), Some(260));
        assert_eq!(frame_payload(&long).len(), 256);
        assert_eq!(frame_length(&[0x81]), None);
    }
}
