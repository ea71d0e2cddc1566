//! The fleet's bus: NATS between daemons that share one PostgreSQL (`serve --nats-url`,
//! docs/fleet.md).
//!
//! - **The live tail.** Every event a node stores is published on
//!   `switchboard.events.<session>` once the store has committed it ([`BusStore`]). A node
//!   that serves a session running elsewhere reads its history from the store and then this
//!   subject ([`Bus::tail`]); the store fills any gap, so a message the bus lost costs a read,
//!   never an event.
//! - **Commands.** A person's answer, a message, an interrupt, a stop or a switch of model or
//!   mode sent to any node is forwarded to the node that runs the session, on
//!   `switchboard.node.<node>.commands` ([`Bus::forward`]); that node acts on it as if it had
//!   been asked itself, and its answer (or refusal) comes back as the reply.
//!
//! - **Nodes.** Each node says every [`BusOptions::heartbeat`] on `switchboard.nodes` who it
//!   is and how busy; a node not heard from for [`BusOptions::lost_after`] is **lost**
//!   ([`Bus::nodes`]): its sessions show as such, and another node may resume them.
//!
//! How each part keeps its promise:
//!
//! - [`BusStore`] queues every committed append for publishing (a bounded queue and one
//!   publishing task, so a slow bus never holds a session back; what it drops, followers read
//!   from the store).
//! - [`Bus::tail`] is one NATS subscription per followed session and node, shared by its
//!   subscribers through a broadcast, confirmed by a round trip before the history is read.
//!   Its task hands on events by seq and reads the store for any gap (and after a
//!   reconnection, or 2 s of quiet): every event once, in order, committed before it is seen,
//!   as on the local tail.
//! - Heartbeats carry the node's `NodeInfo` every second. Every bus remembers when it last
//!   heard each node by its own monotonic clock (hosts' clocks never matter), and calls a node
//!   lost after 5 s of silence, but only while it hears itself. `Bus::cut_off` is this node's
//!   own heartbeat unheard for half of `lost_after`: the daemon then refuses to act for a
//!   session (`503`) before anyone may call it lost.
//! - Dashboard changes go out on `switchboard.dashboard` and come back in marked `from_node`
//!   (never sent on again).
//!
//! NATS is trusted: whoever may publish on it may answer any session's permission requests.
//! Secure it (credentials, TLS, a private network) as docs/fleet.md says.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use switchboard_store::{EventRecord, NewOutboxItem, OutboxItem, SessionRecord, Store, StoreError};
use tokio::sync::{broadcast, mpsc, watch};

/// Messages waiting to be published; past this (or [`PUBLISH_BYTES`]), events are not
/// published (subscribers on other nodes read them from the store) rather than holding a
/// session back.
const PUBLISH_QUEUE: usize = 8192;

/// The most bytes waiting to be published.
const PUBLISH_BYTES: usize = 64 * 1024 * 1024;

/// How long a forwarded command waits for the node that runs the session.
pub const FORWARD_LIMIT: Duration = Duration::from_secs(15);

/// How often a remote tail with nothing new checks the store: the safety net for a
/// publication the bus lost while the session went quiet.
pub const QUIET_CHECK: Duration = Duration::from_secs(2);

/// How often a node says it is there ([`BusOptions::heartbeat`]).
pub const HEARTBEAT: Duration = Duration::from_secs(1);

/// A node not heard from for this long is lost ([`BusOptions::lost_after`]).
pub const LOST_AFTER: Duration = Duration::from_secs(5);

/// The subject of heartbeats.
const NODES_SUBJECT: &str = "switchboard.nodes";

/// The subject of the dashboards' changes (sessions created, changed, deleted).
const DASHBOARD_SUBJECT: &str = "switchboard.dashboard";

/// How a [`Bus`] runs.
#[derive(Debug, Clone)]
pub struct BusOptions {
    /// How often a remote tail with nothing new checks the store ([`QUIET_CHECK`]); `None`:
    /// never (tests that must see the bus carry every event).
    pub quiet_check: Option<Duration>,
    /// How often this node says it is there ([`HEARTBEAT`]).
    pub heartbeat: Duration,
    /// How long a silent node takes to count as lost ([`LOST_AFTER`]).
    pub lost_after: Duration,
}

impl Default for BusOptions {
    fn default() -> Self {
        BusOptions { quiet_check: Some(QUIET_CHECK), heartbeat: HEARTBEAT, lost_after: LOST_AFTER }
    }
}

/// What a node says of itself in its heartbeat.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeInfo {
    /// Its name (`serve --node`).
    pub node: String,
    /// Where people reach it (its public URL), if it says.
    #[serde(default)]
    pub url: Option<String>,
    /// Sessions whose CLI runs there now.
    #[serde(default)]
    pub running: usize,
    /// Switchboard's version there.
    #[serde(default)]
    pub version: String,
    /// When it started (Unix milliseconds, its own clock).
    #[serde(default)]
    pub started_ms: u64,
    /// The directories whose sessions it runs (`serve --root`); none: only sessions asked of
    /// it by name.
    #[serde(default)]
    pub roots: Vec<String>,
    /// The most sessions it runs at once (`serve --capacity`).
    #[serde(default)]
    pub capacity: usize,
    /// This run of the daemon (random at each start): two daemons under one name tell each
    /// other apart by it.
    #[serde(default)]
    pub instance: String,
    /// The version of the Claude Code CLI it runs (`claude --version`), once known.
    #[serde(default)]
    pub cli_version: Option<String>,
}

/// A node as this one hears it ([`Bus::nodes`]).
#[derive(Debug, Clone, Serialize)]
pub struct NodeStatus {
    /// What it last said.
    #[serde(flatten)]
    pub info: NodeInfo,
    /// How long ago it last spoke (milliseconds).
    pub silent_ms: u64,
    /// Not heard from for [`BusOptions::lost_after`].
    pub lost: bool,
    /// This node.
    pub this: bool,
}

/// How many events a remote tail holds for slow subscribers (as the local live buffer).
const TAIL_BUFFER: usize = 2048;

/// Events read from the store per page when a remote tail fills a gap.
const FILL_PAGE: usize = 512;

/// A session id as a subject token: only what NATS takes as one plain token.
fn subject_token(id: &str) -> Option<&str> {
    let plain = !id.is_empty()
        && id.len() <= 128
        && id.bytes().all(|byte| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_');
    plain.then_some(id)
}

fn events_subject(id: &str) -> Option<String> {
    subject_token(id).map(|id| format!("switchboard.events.{id}"))
}

fn commands_subject(node: &str) -> String {
    format!("switchboard.node.{node}.commands")
}

/// What goes on a session's subject.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Published {
    /// The events, in order.
    Events(Vec<EventRecord>),
    /// Events too large for the bus: read them from the store.
    Stored { first: u64, last: u64 },
}

/// A dashboard change as one node tells the others (`switchboard.dashboard`).
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct ToldChange {
    /// The node that made it.
    pub(crate) node: String,
    /// The change.
    pub(crate) change: crate::changes::DashboardChange,
}

/// A command forwarded to the node that runs `session`.
#[derive(Debug, Serialize, Deserialize)]
pub struct Forwarded {
    /// The session.
    pub session: String,
    /// What is asked: the daemon's `SessionCommand`, as JSON.
    pub command: Value,
}

/// The answering node's reply.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reply {
    /// Done; what the node answered.
    Ok(Value),
    /// Refused, as the node's API would have refused it.
    Error {
        /// The HTTP status.
        status: u16,
        /// The API's error code.
        code: String,
        /// The sentence.
        message: String,
    },
}

/// Why a forwarded command did not get an answer.
#[derive(Debug)]
pub enum ForwardError {
    /// The node answered with a refusal.
    Refused {
        /// The HTTP status.
        status: u16,
        /// The API's error code.
        code: String,
        /// The sentence.
        message: String,
    },
    /// No answer: the node is down, or the bus is.
    Unreachable(String),
}

/// A NATS connection, this node's name, and the remote tails it follows.
pub struct Bus {
    client: async_nats::Client,
    node: String,
    outgoing: mpsc::Sender<(String, bytes::Bytes)>,
    /// Bytes queued for publishing.
    queued: Arc<std::sync::atomic::AtomicUsize>,
    tails: Mutex<HashMap<String, Weak<RemoteTail>>>,
    /// Bumped at each (re)connection: remote tails then check the store.
    connections: watch::Receiver<u64>,
    /// Where it connects, without credentials.
    shown: String,
    options: BusOptions,
    /// Every node heard from, with when.
    heard: Arc<Mutex<HashMap<String, (NodeInfo, tokio::time::Instant)>>>,
    /// This run's [`NodeInfo::instance`].
    instance: String,
    /// Another run heard beating under this node's name, if any (the latest).
    namesake: Arc<Mutex<Option<NodeInfo>>>,
    /// When this bus last (re)connected: a node not heard from since is lost only once this
    /// one has been connected long enough to have heard it.
    since: Arc<Mutex<tokio::time::Instant>>,
}

impl std::fmt::Debug for Bus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bus").field("nats", &self.shown).field("node", &self.node).finish()
    }
}

/// The URL without its credentials (what comes before an `@`, after any `scheme://`).
fn without_credentials(url: &str) -> String {
    let start = url.find("://").map_or(0, |scheme| scheme + 3);
    match url.rfind('@') {
        Some(at) if at >= start => format!("{}{}", &url[..start], &url[at + 1..]),
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn credentials_never_show() {
        for url in ["nats://me:pw@bus:4222", "me:pw@bus:4222", "tls://tok@bus"] {
            let shown = super::without_credentials(url);
            assert!(
                !shown.contains("pw") && !shown.contains("tok") && shown.contains("bus"),
                "{shown}"
            );
        }
        assert_eq!(super::without_credentials("nats://bus:4222"), "nats://bus:4222");
    }
}

impl Bus {
    /// Connects to NATS at `url` (`nats://host:4222`, `tls://…`, with `user:password@` or a
    /// token if the server wants them) as `node`.
    pub async fn connect(url: &str, node: &str) -> Result<Arc<Bus>, String> {
        Bus::connect_with(url, node, BusOptions::default()).await
    }

    /// [`Bus::connect`] with options.
    pub async fn connect_with(
        url: &str,
        node: &str,
        options: BusOptions,
    ) -> Result<Arc<Bus>, String> {
        let shown = without_credentials(url);
        let (connected, connections) = watch::channel(0u64);
        let since = Arc::new(Mutex::new(tokio::time::Instant::now()));
        let reconnected = since.clone();
        let connect = async_nats::ConnectOptions::new()
            .name(format!("switchboard {node}"))
            .connection_timeout(Duration::from_secs(10))
            .request_timeout(Some(FORWARD_LIMIT))
            .event_callback(move |event| {
                let connected = connected.clone();
                let reconnected = reconnected.clone();
                async move {
                    match event {
                        async_nats::Event::Connected => {
                            tracing::info!("connected to NATS");
                            *reconnected.lock() = tokio::time::Instant::now();
                            connected.send_modify(|count| *count += 1);
                        }
                        async_nats::Event::Disconnected => {
                            tracing::warn!("disconnected from NATS; reconnecting")
                        }
                        other => tracing::debug!(event = %other, "NATS"),
                    }
                }
            });
        let client = connect
            .connect(url)
            .await
            // The client's own message may quote the URL: not shown.
            .map_err(|error| format!("cannot connect to NATS at {shown}: {}", error.kind()))?;
        let (outgoing, queue) = mpsc::channel(PUBLISH_QUEUE);
        let queued = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        tokio::spawn(publish(client.clone(), queue, queued.clone()));
        let heard = Arc::new(Mutex::new(HashMap::new()));
        let heartbeats = client.subscribe(NODES_SUBJECT).await.map_err(|error| {
            format!("cannot listen for other nodes on NATS at {shown}: {error}")
        })?;
        let instance = switchboard_transport::random::random_hex(8);
        let namesake = Arc::new(Mutex::new(None));
        tokio::spawn(listen(
            heartbeats,
            Arc::downgrade(&heard),
            Namesakes { node: node.to_owned(), instance: instance.clone(), seen: namesake.clone() },
        ));
        Ok(Arc::new(Bus {
            client,
            node: node.to_owned(),
            outgoing,
            queued,
            tails: Mutex::new(HashMap::new()),
            connections,
            shown,
            options,
            heard,
            instance,
            namesake,
            since,
        }))
    }

    /// This run's instance, for its heartbeat ([`NodeInfo::instance`]).
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// Another daemon beating under this node's name, if one is heard within `within` (a live
    /// node beats every [`BusOptions::heartbeat`]): two daemons under one name would each take
    /// the other's sessions for its own leftovers.
    pub async fn namesake(&self, within: Duration) -> Option<NodeInfo> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(other) = self.namesake.lock().clone() {
                return Some(other);
            }
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// How often nodes beat ([`BusOptions::heartbeat`]).
    pub fn heartbeat(&self) -> Duration {
        self.options.heartbeat
    }

    /// Says every [`BusOptions::heartbeat`] what `info` gives, until `info` gives `None`
    /// (its daemon is gone).
    pub fn beat(self: &Arc<Self>, info: impl Fn() -> Option<NodeInfo> + Send + 'static) {
        let bus = Arc::downgrade(self);
        let every = self.options.heartbeat;
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                let (Some(bus), Some(info)) = (bus.upgrade(), info()) else { return };
                let Ok(body) = serde_json::to_vec(&info) else { return };
                if let Err(error) = bus.client.publish(NODES_SUBJECT, body.into()).await {
                    tracing::warn!(%error, "cannot send this node's heartbeat");
                }
            }
        });
    }

    /// Every node heard from since this one connected (this one among them once its first
    /// heartbeat came back), by name.
    pub fn nodes(&self) -> Vec<NodeStatus> {
        let now = tokio::time::Instant::now();
        let heard = self.heard.lock().clone();
        // Not hearing ourselves means the bus is down for us: then nobody is called lost.
        // (Just after a reconnection, the others may not have spoken yet.)
        let deaf = heard.get(&self.node).is_none_or(|(_, at)| now - *at > self.options.lost_after)
            || now - self.since() <= self.options.lost_after;
        let mut nodes: Vec<NodeStatus> = heard
            .into_values()
            .map(|(info, at)| {
                let silent = now - at;
                NodeStatus {
                    this: info.node == self.node,
                    lost: !deaf && silent > self.options.lost_after,
                    silent_ms: u64::try_from(silent.as_millis()).unwrap_or(u64::MAX),
                    info,
                }
            })
            .collect();
        nodes.sort_by(|a, b| a.info.node.cmp(&b.info.node));
        nodes
    }

    /// Whether `node` is lost: not heard from for [`BusOptions::lost_after`] (or never, by a
    /// node that has been up that long), while this node hears itself.
    pub fn is_lost(&self, node: &str) -> bool {
        if node == self.node {
            return false;
        }
        let now = tokio::time::Instant::now();
        let heard = self.heard.lock();
        let hears_itself =
            heard.get(&self.node).is_some_and(|(_, at)| now - *at <= self.options.lost_after);
        if !hears_itself || now - self.since() <= self.options.lost_after {
            return false;
        }
        heard.get(node).is_none_or(|(_, at)| now - *at > self.options.lost_after)
    }

    /// Whether this node has not heard its own heartbeat for half of
    /// [`BusOptions::lost_after`] (never, if it has been up that long): the other nodes may
    /// soon call it lost and take its sessions over, so it carries out nothing for them
    /// meanwhile.
    pub fn cut_off(&self) -> bool {
        let now = tokio::time::Instant::now();
        let limit = self.options.lost_after / 2;
        let last = self.heard.lock().get(&self.node).map(|(_, at)| *at);
        now - last.unwrap_or_else(|| self.since()) > limit
    }

    /// When this bus last (re)connected.
    fn since(&self) -> tokio::time::Instant {
        *self.since.lock()
    }

    /// This node's name.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// Publishes stored events on their sessions' subjects, in order, without waiting.
    fn publish_events(&self, events: &[&EventRecord]) {
        let max = self.client.max_payload().saturating_sub(1024).max(1024);
        let mut start = 0;
        while start < events.len() {
            let id = &events[start].session_id;
            let end = events[start..]
                .iter()
                .position(|event| event.session_id != *id)
                .map_or(events.len(), |offset| start + offset);
            if let Some(subject) = events_subject(id) {
                let run: Vec<EventRecord> =
                    events[start..end].iter().map(|event| (*event).clone()).collect();
                let (first, last) = (run[0].seq, run[run.len() - 1].seq);
                let mut body = serde_json::to_vec(&Published::Events(run)).unwrap_or_default();
                if body.len() > max {
                    body =
                        serde_json::to_vec(&Published::Stored { first, last }).unwrap_or_default();
                }
                if !self.queue(subject, body) {
                    tracing::warn!(session = %id, "the bus is behind; other nodes read these events from the store");
                }
            }
            start = end;
        }
    }

    /// Queues a message for publishing, unless the queue is full (by count or bytes).
    fn queue(&self, subject: String, body: Vec<u8>) -> bool {
        use std::sync::atomic::Ordering;
        let size = body.len();
        if self.queued.fetch_add(size, Ordering::AcqRel) + size > PUBLISH_BYTES {
            self.queued.fetch_sub(size, Ordering::AcqRel);
            return false;
        }
        if self.outgoing.try_send((subject, body.into())).is_err() {
            self.queued.fetch_sub(size, Ordering::AcqRel);
            return false;
        }
        true
    }

    /// Follows a session that runs on another node: the events stored from now on, in
    /// order and without a gap (the store fills what the bus missed). Subscribed before it
    /// returns, so an event committed after the caller's next read of the store is not
    /// missed.
    pub async fn tail(
        self: &Arc<Self>,
        store: Arc<dyn Store>,
        id: &str,
    ) -> Result<(broadcast::Receiver<Arc<EventRecord>>, Arc<RemoteTail>), String> {
        if let Some(tail) = self
            .tails
            .lock()
            .get(id)
            .and_then(Weak::upgrade)
            .filter(|tail| !*tail.finished.borrow())
        {
            return Ok((tail.sender.subscribe(), tail));
        }
        tokio::time::timeout(FORWARD_LIMIT, self.attach(store, id))
            .await
            .map_err(|_| "the bus did not answer".to_owned())?
    }

    async fn attach(
        self: &Arc<Self>,
        store: Arc<dyn Store>,
        id: &str,
    ) -> Result<(broadcast::Receiver<Arc<EventRecord>>, Arc<RemoteTail>), String> {
        let subject =
            events_subject(id).ok_or_else(|| format!("session {id} has no bus subject"))?;
        let subscriber = self.client.subscribe(subject).await.map_err(|error| error.to_string())?;
        self.round_trip().await?;
        let last = store.last_seq(id).await.map_err(|error| error.to_string())?;
        let (sender, receiver) = broadcast::channel(TAIL_BUFFER);
        let (finished, _) = watch::channel(false);
        let (store_error, _) = watch::channel(None);
        let ended = finished.clone();
        let following = follow(
            subscriber,
            store,
            id.to_owned(),
            last,
            sender.clone(),
            self.connections.clone(),
            self.options.quiet_check,
        );
        let task = tokio::spawn(async move {
            following.await;
            // Its subscribers read the store, then follow anew.
            ended.send_replace(true);
        });
        let tail = Arc::new(RemoteTail { sender, finished, store_error, task });
        {
            let mut tails = self.tails.lock();
            tails.retain(|_, tail| tail.strong_count() > 0);
            tails.insert(id.to_owned(), Arc::downgrade(&tail));
        }
        Ok((receiver, tail))
    }

    /// Returns once the server has handled everything this connection sent before: a message
    /// to an inbox of our own comes back only after the subscriptions made before it are in
    /// place (a server handles one connection's operations in order).
    async fn round_trip(&self) -> Result<(), String> {
        let inbox = self.client.new_inbox();
        let mut probe =
            self.client.subscribe(inbox.clone()).await.map_err(|error| error.to_string())?;
        self.client.publish(inbox, bytes::Bytes::new()).await.map_err(|error| error.to_string())?;
        match tokio::time::timeout(FORWARD_LIMIT, probe.next()).await {
            Ok(Some(_)) => Ok(()),
            _ => Err("the bus did not answer".to_owned()),
        }
    }

    /// Sends `command` to the node that runs the session and waits for its answer.
    pub(crate) async fn forward(
        &self,
        node: &str,
        session: &str,
        command: Value,
    ) -> Result<Value, ForwardError> {
        let body = serde_json::to_vec(&Forwarded { session: session.to_owned(), command })
            .map_err(|error| ForwardError::Unreachable(error.to_string()))?;
        let answer = self.client.request(commands_subject(node), body.into()).await.map_err(
            |error| {
                use async_nats::client::RequestErrorKind;
                ForwardError::Unreachable(match error.kind() {
                    RequestErrorKind::NoResponders => {
                        format!("node {node} is not on the bus (stopped, or lost)")
                    }
                    RequestErrorKind::TimedOut => format!(
                        "node {node} did not answer within {} s",
                        FORWARD_LIMIT.as_secs()
                    ),
                    RequestErrorKind::MaxPayloadExceeded => format!(
                        "too large to forward to node {node} over the bus; send it to that node directly"
                    ),
                    _ => format!("the bus failed: {error}"),
                })
            },
        )?;
        match serde_json::from_slice::<Reply>(&answer.payload) {
            Ok(Reply::Ok(value)) => Ok(value),
            Ok(Reply::Error { status, code, message }) => {
                Err(ForwardError::Refused { status, code, message })
            }
            Err(error) => Err(ForwardError::Unreachable(format!(
                "node {node} answered something unreadable: {error}"
            ))),
        }
    }

    /// The commands other nodes forward to this one; answer each with [`Bus::answer`].
    pub(crate) async fn commands(&self) -> Result<async_nats::Subscriber, String> {
        let subscriber = self
            .client
            .subscribe(commands_subject(&self.node))
            .await
            .map_err(|error| error.to_string())?;
        self.round_trip().await?;
        Ok(subscriber)
    }

    /// Tells the other nodes' dashboards of a change here (without waiting; a change the bus
    /// drops is seen at their next load of the list).
    pub(crate) fn publish_change(&self, change: &crate::changes::DashboardChange) {
        let body = ToldChange { node: self.node.clone(), change: change.clone() };
        let Ok(body) = serde_json::to_vec(&body) else { return };
        if !self.queue(DASHBOARD_SUBJECT.to_owned(), body) {
            tracing::warn!("the bus is behind; a dashboard change is not sent to other nodes");
        }
    }

    /// The other nodes' dashboard changes, each a [`ToldChange`].
    pub(crate) async fn changes(&self) -> Result<async_nats::Subscriber, String> {
        self.client.subscribe(DASHBOARD_SUBJECT).await.map_err(|error| error.to_string())
    }

    /// Answers a forwarded command.
    pub(crate) async fn answer(&self, to: Option<async_nats::Subject>, reply: &Reply) {
        let Some(to) = to else { return };
        let body = serde_json::to_vec(reply).unwrap_or_default();
        if let Err(error) = self.client.publish(to, body.into()).await {
            tracing::warn!(%error, "cannot answer a forwarded command");
        }
    }
}

/// This node's name and run, and where another run under the same name is noted.
struct Namesakes {
    node: String,
    instance: String,
    seen: Arc<Mutex<Option<NodeInfo>>>,
}

/// Notes each heartbeat heard, until the bus goes.
async fn listen(
    mut heartbeats: async_nats::Subscriber,
    heard: Weak<Mutex<HashMap<String, (NodeInfo, tokio::time::Instant)>>>,
    namesakes: Namesakes,
) {
    /// The most nodes remembered: heartbeats are trusted, but bounded all the same.
    const MAX_NODES: usize = 1024;
    while let Some(message) = heartbeats.next().await {
        let Some(heard) = heard.upgrade() else { return };
        let Ok(info) = serde_json::from_slice::<NodeInfo>(&message.payload) else {
            tracing::warn!("an unreadable heartbeat on the bus");
            continue;
        };
        if info.node == namesakes.node && info.instance != namesakes.instance {
            *namesakes.seen.lock() = Some(info.clone());
            // Not noted as this node's own: the map keeps what this run says of itself.
            continue;
        }
        let mut heard = heard.lock();
        if heard.len() < MAX_NODES || heard.contains_key(&info.node) {
            heard.insert(info.node.clone(), (info, tokio::time::Instant::now()));
        }
    }
}

/// Publishes what [`Bus::publish_events`] queued, in order.
async fn publish(
    client: async_nats::Client,
    mut queue: mpsc::Receiver<(String, bytes::Bytes)>,
    queued: Arc<std::sync::atomic::AtomicUsize>,
) {
    while let Some((subject, body)) = queue.recv().await {
        queued.fetch_sub(body.len(), std::sync::atomic::Ordering::AcqRel);
        if let Err(error) = client.publish(subject, body).await {
            tracing::warn!(%error, "cannot publish on the bus");
        }
    }
}

/// A session followed from another node: its events, in order, to every subscriber here.
/// Ends (and leaves the subject) when the last subscriber lets go.
pub struct RemoteTail {
    sender: broadcast::Sender<Arc<EventRecord>>,
    /// Set if the bus stops carrying the session (the subscription ended): its subscribers
    /// then read the store and follow it anew. A session's own end is an event like any
    /// other.
    pub(crate) finished: watch::Sender<bool>,
    /// Never set: the node that runs the session reports its store's troubles there.
    pub(crate) store_error: watch::Sender<Option<String>>,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for RemoteTail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteTail").finish_non_exhaustive()
    }
}

impl Drop for RemoteTail {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Reads a session's subject and hands its events on, filling from the store whatever the
/// bus skipped (a gap, events published as too large, a reconnection, a quiet spell).
async fn follow(
    mut subscriber: async_nats::Subscriber,
    store: Arc<dyn Store>,
    id: String,
    mut last: u64,
    sender: broadcast::Sender<Arc<EventRecord>>,
    mut connections: watch::Receiver<u64>,
    quiet_check: Option<Duration>,
) {
    connections.borrow_and_update();
    loop {
        let received = tokio::select! {
            message = subscriber.next() => match message {
                Some(message) => Some(message),
                None => return,
            },
            changed = connections.changed() => {
                if changed.is_err() {
                    return;
                }
                None
            }
            () = quiet(quiet_check) => None,
        };
        let events = match received.map(|message| serde_json::from_slice(&message.payload)) {
            Some(Ok(Published::Events(events))) => events,
            Some(Ok(Published::Stored { last: stored, .. })) if stored <= last => continue,
            Some(Err(error)) => {
                tracing::warn!(session = %id, %error, "an unreadable message on the bus");
                Vec::new()
            }
            // Too large for the bus, a reconnection or a quiet spell: the store has it.
            Some(Ok(Published::Stored { .. })) | None => Vec::new(),
        };
        let needs_store = events.first().is_none_or(|event| event.seq > last + 1);
        if needs_store {
            loop {
                match store.events_after(&id, last, FILL_PAGE).await {
                    Ok(page) if page.is_empty() => break,
                    Ok(page) => {
                        for event in page {
                            last = event.seq;
                            let _ = sender.send(Arc::new(event));
                        }
                    }
                    Err(error) => {
                        tracing::warn!(session = %id, %error, "cannot read the store to follow a session");
                        break;
                    }
                }
            }
        }
        for event in events {
            if event.seq == last + 1 {
                last = event.seq;
                let _ = sender.send(Arc::new(event));
            }
        }
    }
}

/// After `check`, or never.
async fn quiet(check: Option<Duration>) {
    match check {
        Some(check) => tokio::time::sleep(check).await,
        None => std::future::pending().await,
    }
}

/// A store that publishes on the bus what it stored: every append, once committed.
#[derive(Debug)]
pub struct BusStore {
    inner: Arc<dyn Store>,
    bus: Arc<Bus>,
}

impl BusStore {
    /// `inner`, publishing its appends on `bus`.
    pub fn new(inner: Arc<dyn Store>, bus: Arc<Bus>) -> BusStore {
        BusStore { inner, bus }
    }
}

#[async_trait::async_trait]
impl Store for BusStore {
    async fn create_session(&self, record: &SessionRecord) -> Result<(), StoreError> {
        self.inner.create_session(record).await
    }
    async fn update_session(&self, record: &SessionRecord) -> Result<(), StoreError> {
        self.inner.update_session(record).await
    }
    async fn get_session(&self, id: &str) -> Result<Option<SessionRecord>, StoreError> {
        self.inner.get_session(id).await
    }
    async fn claim_session(&self, claim: switchboard_store::Claim<'_>) -> Result<bool, StoreError> {
        self.inner.claim_session(claim).await
    }
    async fn list_sessions(&self) -> Result<Vec<SessionRecord>, StoreError> {
        self.inner.list_sessions().await
    }
    async fn delete_session(&self, id: &str) -> Result<(), StoreError> {
        self.inner.delete_session(id).await
    }
    async fn append(&self, events: &[EventRecord]) -> Result<(), StoreError> {
        self.inner.append(events).await?;
        // The audit trail is no session's: nobody follows it live.
        if events.first().is_some_and(|event| event.session_id != crate::audit::AUDIT_LOG) {
            self.bus.publish_events(&events.iter().collect::<Vec<_>>());
        }
        Ok(())
    }
    async fn append_shared(&self, events: &[Arc<EventRecord>]) -> Result<(), StoreError> {
        self.inner.append_shared(events).await?;
        self.bus.publish_events(&events.iter().map(|event| &**event).collect::<Vec<_>>());
        Ok(())
    }
    async fn events_after(
        &self,
        session_id: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<EventRecord>, StoreError> {
        self.inner.events_after(session_id, after, limit).await
    }
    async fn events_before(
        &self,
        session_id: &str,
        before: u64,
        limit: usize,
    ) -> Result<Vec<EventRecord>, StoreError> {
        self.inner.events_before(session_id, before, limit).await
    }
    async fn last_seq(&self, session_id: &str) -> Result<u64, StoreError> {
        self.inner.last_seq(session_id).await
    }
    async fn enqueue_outbox(&self, items: &[NewOutboxItem]) -> Result<(), StoreError> {
        self.inner.enqueue_outbox(items).await
    }
    async fn outbox(&self, channel: &str, limit: usize) -> Result<Vec<OutboxItem>, StoreError> {
        self.inner.outbox(channel, limit).await
    }
    async fn outbox_done(&self, id: u64) -> Result<(), StoreError> {
        self.inner.outbox_done(id).await
    }
    async fn outbox_forget(&self, channel: &str) -> Result<(), StoreError> {
        self.inner.outbox_forget(channel).await
    }
    async fn outbox_channels(&self) -> Result<Vec<String>, StoreError> {
        self.inner.outbox_channels().await
    }
    fn search_index(&self) -> Option<&dyn switchboard_store::Search> {
        self.inner.search_index()
    }
    fn view_checkpoints(&self) -> Option<&dyn switchboard_store::ViewCheckpoints> {
        self.inner.view_checkpoints()
    }
}
