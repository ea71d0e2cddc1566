//! Web Push: the web UI's service worker shows the daemon's notices with no tab open, on a
//! phone as on a desktop.
//!
//! - RFC 8030: a notice is a `POST` to the subscription's endpoint, at the browser's push
//!   service (Google's, Mozilla's, Apple's, Microsoft's), which wakes the browser.
//! - RFC 8291: the body is encrypted (`aes128gcm`) to the subscription's `p256dh` key and
//!   `auth` secret; the push service reads nothing.
//! - RFC 8292 (VAPID): each request carries an ES256 token signed with the daemon's key
//!   (`DATA_DIR/vapid-key`). A browser subscribes with its public half, so only this daemon can
//!   push to its subscriptions.
//!
//! Built on the RustCrypto primitives the rest of the daemon's crypto comes from (p256,
//! aes-gcm, hkdf, sha2). The web-push crates add a second generation of those primitives and
//! an RSA implementation (about 110 crates) for what is here a hundred lines, checked byte for
//! byte against RFC 8291's own example.
//!
//! A subscription is a browser's: its endpoint is a capability (whoever knows it can wake that
//! browser), so the daemon sends only to push services it knows ([`PUSH_SERVICES`], and the
//! notify file's `[push] hosts`), never to an address a caller names.
//!
//! This module holds Web Push's own parts: the encryption, the VAPID token, the daemon's key
//! and the subscriptions (`DATA_DIR/push.json`, replaced whole). It knows nothing of notices'
//! topics or senders; [`crate::notify`] does.

use parking_lot::Mutex;
use std::path::PathBuf;
use std::sync::Arc;

use aes_gcm::aead::{Aead as _, KeyInit as _};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use p256::ecdsa::signature::Signer as _;
use p256::elliptic_curve::sec1::ToSec1Point as _;
use serde::{Deserialize, Serialize};

/// The push services a subscription may be at, by host (and its subdomains): Chrome's and
/// Android's, Firefox's, Safari's, Edge's.
pub const PUSH_SERVICES: [&str; 4] =
    ["fcm.googleapis.com", "push.services.mozilla.com", "push.apple.com", "notify.windows.com"];

/// The most subscriptions a daemon keeps.
pub const MAX_SUBSCRIPTIONS: usize = 100;

/// The most subscriptions one token makes (its devices).
pub const MAX_SUBSCRIPTIONS_PER_TOKEN: usize = 10;

/// The longest endpoint accepted.
pub const MAX_ENDPOINT_BYTES: usize = 2048;

/// The record size: a push message is one record of at most 4096 bytes (RFC 8291 §4).
const RECORD_SIZE: u32 = 4096;

/// The largest plaintext one message carries: a record less its header (86 bytes), its tag
/// (16) and its delimiter (1).
pub const MAX_PLAINTEXT_BYTES: usize = RECORD_SIZE as usize - 86 - 16 - 1;

/// The largest subscriptions file read.
const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// Web Push settings: the notify file's `[push]` table.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PushConfig {
    /// Who runs this daemon, for the push services (VAPID's `sub`): `mailto:…` or `https://…`.
    /// Default: the daemon's public URL when it is HTTPS, else `mailto:switchboard@localhost`
    /// (Apple's service wants a real one).
    pub subject: Option<String>,
    /// More push services to accept subscriptions at, by host (a service of your own network;
    /// these may be plain `http://`).
    #[serde(default)]
    pub hosts: Vec<String>,
}

impl PushConfig {
    /// Whether `uri` is at one of [`PushConfig::hosts`] (a host, or a host and port), which
    /// may be in the person's own network.
    pub fn named(&self, uri: &axum::http::Uri) -> bool {
        let host = uri.host().unwrap_or("").to_ascii_lowercase();
        self.hosts.iter().any(|allowed| {
            let allowed = allowed.to_ascii_lowercase();
            host == allowed
                || uri.authority().is_some_and(|authority| authority.as_str() == allowed)
        })
    }

    /// The subject is `mailto:` or `https://`; hosts are host names.
    pub fn check(&self) -> Result<(), String> {
        if let Some(subject) = &self.subject {
            let fits = (subject.starts_with("mailto:") || subject.starts_with("https://"))
                && subject.len() <= 256
                && !subject.contains(|c: char| c.is_whitespace() || c.is_control());
            if !fits {
                return Err("push: subject is a mailto: or https:// address".into());
            }
        }
        for host in &self.hosts {
            let fits = !host.is_empty()
                && host.len() <= 253
                && host.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':'));
            if !fits {
                return Err("push: hosts are host names (or addresses), without a scheme".into());
            }
        }
        Ok(())
    }

    /// Whether a subscription may be at `endpoint`: HTTPS at a known push service, or any
    /// scheme at one of [`PushConfig::hosts`]. The error says why not.
    pub fn allows(&self, endpoint: &str) -> Result<(), String> {
        if endpoint.len() > MAX_ENDPOINT_BYTES {
            return Err(format!("endpoint is longer than {MAX_ENDPOINT_BYTES} bytes"));
        }
        let uri: axum::http::Uri =
            endpoint.parse().map_err(|_| "endpoint is not a valid address".to_owned())?;
        if uri.authority().is_some_and(|authority| authority.as_str().contains('@')) {
            return Err("endpoint may not carry a user name or password".into());
        }
        let host = uri.host().unwrap_or("").to_ascii_lowercase();
        let under = |service: &str| {
            host == service || host.strip_suffix(service).is_some_and(|rest| rest.ends_with('.'))
        };
        let own = self.named(&uri);
        let known = PUSH_SERVICES.iter().any(|service| under(service));
        match uri.scheme_str() {
            Some("https") if known || own => Ok(()),
            Some("http") if own => Ok(()),
            Some("https" | "http") => Err(format!(
                "endpoint is not at a push service this daemon sends to ({}; more in the notify file's [push] hosts)",
                PUSH_SERVICES.join(", ")
            )),
            _ => Err("endpoint must be https://".into()),
        }
    }
}

/// The daemon's VAPID key: an ECDSA P-256 key (`DATA_DIR/vapid-key`, hex, so subscriptions
/// outlive a restart).
#[derive(Clone)]
pub struct VapidKey(p256::ecdsa::SigningKey);

impl std::fmt::Debug for VapidKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "VapidKey({})", self.public_key())
    }
}

impl Default for VapidKey {
    /// A new random key (subscriptions made with it die with the daemon).
    fn default() -> VapidKey {
        loop {
            let bytes: [u8; 32] = switchboard_transport::random::random_bytes();
            // All but about 2^-32 of 32-byte strings are valid scalars.
            if let Ok(key) = p256::ecdsa::SigningKey::from_slice(&bytes) {
                return VapidKey(key);
            }
        }
    }
}

impl VapidKey {
    /// A key from its hex form (64 hex digits).
    pub fn from_hex(text: &str) -> Result<VapidKey, String> {
        let mut bytes = [0u8; 32];
        hex::decode_to_slice(text.trim(), &mut bytes)
            .map_err(|_| "a VAPID key is 64 hex digits".to_owned())?;
        p256::ecdsa::SigningKey::from_slice(&bytes)
            .map(VapidKey)
            .map_err(|_| "not a P-256 private key".to_owned())
    }

    /// Its hex form.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0.to_bytes())
    }

    /// The public key browsers subscribe with (`applicationServerKey`): the uncompressed point,
    /// base64url.
    pub fn public_key(&self) -> String {
        URL_SAFE_NO_PAD.encode(self.0.verifying_key().to_sec1_point(false).as_bytes())
    }

    /// The `Authorization` header for a push to `endpoint`: `vapid t=JWT, k=KEY`, where the
    /// token names the push service (`aud`), expires in 12 hours and says who sends (`sub`).
    pub fn authorization(&self, endpoint: &axum::http::Uri, subject: &str, now_s: u64) -> String {
        let scheme = endpoint.scheme_str().unwrap_or("https");
        // The origin: the host, and a port only when it is not the scheme's own.
        let host = endpoint.host().unwrap_or("");
        let authority = match (endpoint.port_u16(), scheme) {
            (Some(443), "https") | (Some(80), "http") | (None, _) => host.to_owned(),
            (Some(port), _) => format!("{host}:{port}"),
        };
        let header = URL_SAFE_NO_PAD.encode(br#"{"typ":"JWT","alg":"ES256"}"#);
        let claims = serde_json::json!({
            "aud": format!("{scheme}://{authority}"),
            "exp": now_s + 12 * 3600,
            "sub": subject,
        });
        let claims = URL_SAFE_NO_PAD.encode(claims.to_string());
        let signed = format!("{header}.{claims}");
        let signature: p256::ecdsa::Signature = self.0.sign(signed.as_bytes());
        let signature = URL_SAFE_NO_PAD.encode(signature.to_bytes());
        format!("vapid t={signed}.{signature}, k={}", self.public_key())
    }
}

/// Where a subscription's messages are encrypted to: the browser's key and secret.
#[derive(Clone, PartialEq, Eq)]
pub struct Target {
    key: p256::PublicKey,
    auth: [u8; 16],
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Target(…)")
    }
}

impl Target {
    /// From a subscription's `keys`: `p256dh` (an uncompressed P-256 point) and `auth` (16
    /// bytes), both base64url as a browser gives them.
    pub fn from_keys(p256dh: &str, auth: &str) -> Result<Target, String> {
        let decode = |text: &str| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(text.trim_end_matches('=')).ok()
        };
        let key = decode(p256dh)
            .filter(|bytes| bytes.len() == 65)
            .and_then(|bytes| p256::PublicKey::from_sec1_bytes(&bytes).ok())
            .ok_or("keys.p256dh is not a P-256 public key (65 bytes, base64url)")?;
        let auth = decode(auth)
            .and_then(|bytes| <[u8; 16]>::try_from(bytes).ok())
            .ok_or("keys.auth is not 16 bytes (base64url)")?;
        Ok(Target { key, auth })
    }

    /// `plaintext` encrypted to this browser (RFC 8291): one `aes128gcm` record under a new
    /// key pair and salt.
    pub fn encrypt(&self, plaintext: &[u8]) -> Result<Vec<u8>, String> {
        let salt: [u8; 16] = switchboard_transport::random::random_bytes();
        let ephemeral = loop {
            let bytes: [u8; 32] = switchboard_transport::random::random_bytes();
            if let Ok(key) = p256::SecretKey::from_slice(&bytes) {
                break key;
            }
        };
        self.encrypt_with(plaintext, &ephemeral, salt)
    }

    fn encrypt_with(
        &self,
        plaintext: &[u8],
        ephemeral: &p256::SecretKey,
        salt: [u8; 16],
    ) -> Result<Vec<u8>, String> {
        if plaintext.len() > MAX_PLAINTEXT_BYTES {
            return Err(format!("a push message holds at most {MAX_PLAINTEXT_BYTES} bytes"));
        }
        let ua_public = self.key.to_sec1_point(false);
        let as_public = ephemeral.public_key().to_sec1_point(false);
        let shared =
            p256::ecdh::diffie_hellman(ephemeral.to_nonzero_scalar(), self.key.as_affine());
        // §3.3: the input keying material, from the shared secret and the browser's auth
        // secret, bound to both public keys.
        let mut key_info = b"WebPush: info\0".to_vec();
        key_info.extend_from_slice(ua_public.as_bytes());
        key_info.extend_from_slice(as_public.as_bytes());
        let mut ikm = [0u8; 32];
        hkdf::Hkdf::<sha2::Sha256>::new(Some(&self.auth), shared.raw_secret_bytes())
            .expand(&key_info, &mut ikm)
            .map_err(|_| "HKDF refused a 32-byte output")?;
        // RFC 8188 §2.2, 2.3: the content key and nonce, from the salt.
        let prk = hkdf::Hkdf::<sha2::Sha256>::new(Some(&salt), &ikm);
        let (mut cek, mut nonce) = ([0u8; 16], [0u8; 12]);
        prk.expand(b"Content-Encoding: aes128gcm\0", &mut cek)
            .and_then(|()| prk.expand(b"Content-Encoding: nonce\0", &mut nonce))
            .map_err(|_| "HKDF refused a short output")?;
        // One record, the last: the plaintext and its delimiter (2), no padding.
        let mut record = plaintext.to_vec();
        record.push(2);
        let cipher = aes_gcm::Aes128Gcm::new_from_slice(&cek).map_err(|_| "a bad key length")?;
        let sealed = cipher
            .encrypt(&nonce.into(), record.as_slice())
            .map_err(|_| "the message could not be encrypted")?;
        // The header: salt, record size, and the sender's public key as the key id.
        let mut body = Vec::with_capacity(86 + sealed.len());
        body.extend_from_slice(&salt);
        body.extend_from_slice(&RECORD_SIZE.to_be_bytes());
        body.push(as_public.as_bytes().len() as u8);
        body.extend_from_slice(as_public.as_bytes());
        body.extend_from_slice(&sealed);
        Ok(body)
    }
}

/// Why a subscription was not added or removed.
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    /// What was given is wrong (400).
    #[error("{0}")]
    Invalid(String),
    /// The subscriptions file could not be written (500).
    #[error("{0}")]
    File(String),
}

/// A browser's subscription, as the daemon keeps it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Subscription {
    /// Its id (random; the capability to remove it or test it).
    pub id: String,
    /// Where its messages go: a URL at its push service.
    pub endpoint: String,
    /// The browser's public key (base64url).
    pub p256dh: String,
    /// The browser's auth secret (base64url).
    pub auth: String,
    /// What the person called the device (`"phone"`), or the browser's own description.
    pub name: String,
    /// Who subscribed it (a token's name).
    pub by: String,
    /// When (Unix milliseconds).
    pub created_ms: u64,
    /// The topics it hears of (`None`: everything; the notifier reads them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events: Option<Vec<String>>,
}

impl Subscription {
    /// The outbox channel its messages wait in.
    pub fn channel(&self) -> String {
        format!("push-{}", self.id)
    }
}

/// What `POST /api/push/subscriptions` takes: a browser's `PushSubscription.toJSON()`, and a
/// name for the device.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewSubscription {
    /// The push service's URL for this browser.
    pub endpoint: String,
    /// Its keys.
    pub keys: SubscriptionKeys,
    /// What the browser says of when the subscription ends (ignored).
    #[serde(default, rename = "expirationTime")]
    pub expiration_time: Option<serde_json::Value>,
    /// A name for the device, at most 64 characters.
    #[serde(default)]
    pub name: Option<String>,
    /// The topics it hears of (default: everything; the notifier checks them).
    #[serde(default)]
    pub events: Option<Vec<String>>,
}

/// A subscription's keys, as the browser gives them.
#[derive(Debug, Clone, Deserialize)]
pub struct SubscriptionKeys {
    /// The browser's P-256 public key, base64url.
    pub p256dh: String,
    /// Its auth secret, base64url.
    pub auth: String,
}

/// The subscriptions file's shape (and the fleet's shared `push` document's).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SubscriptionsFile {
    subscriptions: Vec<Subscription>,
}

/// Where the subscriptions are kept.
#[derive(Debug)]
enum Kept {
    /// In memory only.
    Memory,
    /// `DATA_DIR/push.json` (written whole, then renamed over the old).
    File(PathBuf),
    /// The `push` document of a database the fleet shares: a browser subscribed through one
    /// node hears from every node.
    Shared(Arc<crate::shared::SharedDoc<SubscriptionsFile>>),
}

/// The subscriptions: kept in `DATA_DIR/push.json`, or in the fleet's shared document.
#[derive(Debug)]
pub struct Subscriptions {
    kept: Kept,
    list: Mutex<Vec<Subscription>>,
}

/// The subscriptions of `stored` that are still good (their id and keys, their endpoint where
/// `allowed` sends), at most [`MAX_SUBSCRIPTIONS`]; each dropped one is a line in the log that
/// names `source`.
fn good(stored: SubscriptionsFile, allowed: &PushConfig, source: &str) -> Vec<Subscription> {
    let mut kept = Vec::new();
    for subscription in stored.subscriptions {
        let good = (subscription.id.len() == 32
            && subscription.id.bytes().all(|byte| byte.is_ascii_hexdigit()))
        .then_some(())
        .ok_or_else(|| "its id is not 32 hex digits".to_owned())
        .and_then(|()| Target::from_keys(&subscription.p256dh, &subscription.auth))
        .and_then(|_| allowed.allows(&subscription.endpoint));
        match good {
            Ok(_) if kept.len() < MAX_SUBSCRIPTIONS => kept.push(subscription),
            Ok(_) => tracing::warn!(
                "{source}: more than {MAX_SUBSCRIPTIONS} subscriptions; the rest are dropped"
            ),
            Err(error) => tracing::warn!("{source}: a push subscription is dropped: {error}"),
        }
    }
    kept
}

fn read_file(file: &std::path::Path) -> Result<SubscriptionsFile, String> {
    let shown = file.display();
    match crate::files::read_bounded(file, MAX_FILE_BYTES) {
        Ok(text) => {
            serde_json::from_str(&text).map_err(|error| format!("{shown} is unreadable: {error}"))
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            Ok(SubscriptionsFile::default())
        }
        Err(error) => Err(format!("cannot read {shown}: {error}")),
    }
}

impl Subscriptions {
    /// None, kept in memory only.
    pub fn in_memory() -> Subscriptions {
        Subscriptions { kept: Kept::Memory, list: Mutex::new(Vec::new()) }
    }

    /// Those kept in `file` (none if it does not exist), but any that is no longer good (its
    /// keys, or its endpoint where `allowed` no longer sends), which is dropped with a line in
    /// the log. A file that cannot be read is an error, which names it.
    pub fn load(file: PathBuf, allowed: &PushConfig) -> Result<Subscriptions, String> {
        let kept = good(read_file(&file)?, allowed, &file.display().to_string());
        Ok(Subscriptions { kept: Kept::File(file), list: Mutex::new(kept) })
    }

    /// Those of the fleet's shared `push` document (where none is shared yet, this node's
    /// `file` becomes it), but any that is no longer good here. [`Subscriptions::changes`]
    /// tells of other nodes' changes.
    pub async fn shared(
        store: Arc<dyn switchboard_store::Documents>,
        file: Option<PathBuf>,
        allowed: &PushConfig,
    ) -> Result<Subscriptions, String> {
        let doc = crate::shared::SharedDoc::open(store, "push", || match &file {
            Some(file) => read_file(file),
            None => Ok(SubscriptionsFile::default()),
        })
        .await?;
        doc.follow();
        let kept = good(doc.get(), allowed, "the shared push subscriptions");
        Ok(Subscriptions { kept: Kept::Shared(doc), list: Mutex::new(kept) })
    }

    /// Where the subscriptions are shared with other nodes: told at each change (this node's
    /// or another's), for [`Subscriptions::reread`].
    pub fn changes(&self) -> Option<tokio::sync::watch::Receiver<(SubscriptionsFile, u64)>> {
        match &self.kept {
            Kept::Shared(doc) => Some(doc.watch()),
            Kept::Memory | Kept::File(_) => None,
        }
    }

    /// Takes the shared list as it is now (those still good here): the subscriptions it adds,
    /// and those it no longer has.
    pub fn reread(
        &self,
        shared: SubscriptionsFile,
        allowed: &PushConfig,
    ) -> (Vec<Subscription>, Vec<Subscription>) {
        let next = good(shared, allowed, "the shared push subscriptions");
        let mut list = self.list.lock();
        let added: Vec<Subscription> =
            next.iter().filter(|new| !list.contains(new)).cloned().collect();
        let removed: Vec<Subscription> =
            list.iter().filter(|old| !next.iter().any(|new| new.id == old.id)).cloned().collect();
        *list = next;
        (added, removed)
    }

    /// Every subscription.
    pub fn list(&self) -> Vec<Subscription> {
        self.list.lock().clone()
    }

    /// Adds `new` (checked: `allowed` says where endpoints may be), by the token `by`. The same
    /// endpoint again replaces its keys and name and keeps its id. The subscription, and
    /// whether it is new.
    pub async fn add(
        &self,
        new: NewSubscription,
        by: &str,
        allowed: &PushConfig,
    ) -> Result<(Subscription, bool), PushError> {
        allowed.allows(&new.endpoint).map_err(PushError::Invalid)?;
        let target =
            Target::from_keys(&new.keys.p256dh, &new.keys.auth).map_err(PushError::Invalid)?;
        let name = new.name.unwrap_or_default();
        if name.chars().count() > 64 || name.chars().any(crate::text::invisible) {
            return Err(PushError::Invalid(
                "name is at most 64 characters, without control, bidirectional or invisible characters".into(),
            ));
        }
        if new.events.as_ref().is_some_and(|events| events.len() > 16) {
            return Err(PushError::Invalid("events names at most 16 topics".into()));
        }
        let subscription = Subscription {
            id: switchboard_transport::random::random_hex(16),
            endpoint: new.endpoint,
            // Kept as the keys decoded, not as given (a key with a megabyte of padding is a
            // key of 65 bytes).
            p256dh: URL_SAFE_NO_PAD.encode(target.key.to_sec1_point(false).as_bytes()),
            auth: URL_SAFE_NO_PAD.encode(target.auth),
            name,
            by: by.to_owned(),
            created_ms: switchboard_store::now_ms(),
            events: new.events,
        };
        self.change(|list| {
            let mut subscription = subscription.clone();
            let full = list.len() >= MAX_SUBSCRIPTIONS;
            let mine =
                list.iter().filter(|old| old.by == by).count() >= MAX_SUBSCRIPTIONS_PER_TOKEN;
            match list.iter_mut().find(|old| old.endpoint == subscription.endpoint) {
                Some(old) => {
                    subscription.id = old.id.clone();
                    *old = subscription.clone();
                    Ok((subscription, false))
                }
                None if full => Err(PushError::Invalid(format!(
                    "this daemon keeps at most {MAX_SUBSCRIPTIONS} push subscriptions; remove one first"
                ))),
                None if mine => Err(PushError::Invalid(format!(
                    "a token subscribes at most {MAX_SUBSCRIPTIONS_PER_TOKEN} devices; remove one first"
                ))),
                None => {
                    list.push(subscription.clone());
                    Ok((subscription, true))
                }
            }
        })
        .await
    }

    /// Removes the subscription `id`; it, if there was one.
    pub async fn remove(&self, id: &str) -> Result<Option<Subscription>, PushError> {
        self.change(|list| {
            Ok(list.iter().position(|subscription| subscription.id == id).map(|at| list.remove(at)))
        })
        .await
    }

    /// Applies `change` to the list where it is kept, then here.
    async fn change<R>(
        &self,
        mut change: impl FnMut(&mut Vec<Subscription>) -> Result<R, PushError>,
    ) -> Result<R, PushError> {
        match &self.kept {
            Kept::Shared(doc) => {
                let mut refused = None;
                let answer = doc
                    .update(|file| {
                        change(&mut file.subscriptions).map_err(|error| {
                            let text = error.to_string();
                            refused = Some(error);
                            text
                        })
                    })
                    .await;
                match (answer, refused) {
                    (Ok(answer), _) => {
                        // Here at once (the change's watchers see it too, and find it done).
                        *self.list.lock() = doc.get().subscriptions;
                        Ok(answer)
                    }
                    (Err(_), Some(refused)) => Err(refused),
                    (Err(error), None) => Err(PushError::File(error)),
                }
            }
            Kept::Memory | Kept::File(_) => {
                let mut list = self.list.lock();
                let mut next = list.clone();
                let answer = change(&mut next)?;
                if let Kept::File(file) = &self.kept {
                    let text = serde_json::to_string_pretty(&SubscriptionsFile {
                        subscriptions: next.clone(),
                    })
                    .map_err(|error| PushError::File(error.to_string()))?;
                    crate::files::replace_private(file, &text).map_err(|error| {
                        PushError::File(format!("cannot write {}: {error}", file.display()))
                    })?;
                }
                *list = next;
                Ok(answer)
            }
        }
    }
}

/// What the service worker gets: a notice cut to fit one push message (its title to 200
/// characters, its text to 1,000 or less; ids and the link are short).
pub fn message(notice: &serde_json::Value) -> Vec<u8> {
    let text = notice["text"].as_str().unwrap_or("");
    let title: String = notice["title"].as_str().unwrap_or("").chars().take(200).collect();
    let mut cut: String = text.chars().take(1000).collect();
    loop {
        let message = serde_json::json!({
            "v": 1,
            "id": notice["id"],
            "event": notice["event"],
            "title": title,
            "text": cut,
            "session": notice["session"]["id"],
            "link": notice["link"],
            "one_tap": notice["one_tap"].as_bool().unwrap_or(false),
        })
        .to_string()
        .into_bytes();
        if message.len() <= MAX_PLAINTEXT_BYTES || cut.is_empty() {
            return message;
        }
        let keep = cut.chars().count() / 2;
        cut = cut.chars().take(keep).collect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(text: &str) -> Vec<u8> {
        URL_SAFE_NO_PAD.decode(text).unwrap()
    }

    /// RFC 8291 §5 and Appendix A: the same keys, salt and plaintext give the RFC's body, byte
    /// for byte.
    #[test]
    fn encryption_matches_the_rfc_example() {
        let ua_public = "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4";
        let target = Target::from_keys(ua_public, "BTBZMqHH6r4Tts7J_aSIgg").unwrap();
        let ephemeral =
            p256::SecretKey::from_slice(&b64("yfWPiYE-n46HLnH0KqZOF1fJJU3MYrct3AELtAQ-oRw"))
                .unwrap();
        let salt: [u8; 16] = b64("DGv6ra1nlYgDCS1FRnbzlw").try_into().unwrap();
        let body = target
            .encrypt_with(b"When I grow up, I want to be a watermelon", &ephemeral, salt)
            .unwrap();
        assert_eq!(
            URL_SAFE_NO_PAD.encode(body),
            "DGv6ra1nlYgDCS1FRnbzlwAAEABBBP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A_yl95bQpu6cVPTpK4Mqgkf1CXztLVBSt2Ks3oZwbuwXPXLWyouBWLVWGNWQexSgSxsj_Qulcy4a-fN"
        );
        // A fresh key and salt each time, and nothing over one record.
        let ua = "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4";
        let target = Target::from_keys(ua, "BTBZMqHH6r4Tts7J_aSIgg").unwrap();
        assert_ne!(target.encrypt(b"x").unwrap(), target.encrypt(b"x").unwrap());
        assert!(target.encrypt(&vec![b'x'; MAX_PLAINTEXT_BYTES]).unwrap().len() <= 4096);
        assert!(target.encrypt(&vec![b'x'; MAX_PLAINTEXT_BYTES + 1]).is_err());
    }

    #[test]
    fn keys_are_checked() {
        let ua = "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4";
        assert!(Target::from_keys(ua, "BTBZMqHH6r4Tts7J_aSIgg==").is_ok(), "padding is fine");
        assert!(Target::from_keys(ua, "BTBZMqHH6r4Tts7J").unwrap_err().contains("auth"));
        assert!(Target::from_keys(&ua[..40], "BTBZMqHH6r4Tts7J_aSIgg")
            .unwrap_err()
            .contains("p256dh"));
        // A point that is not on the curve.
        let off = format!("BA{}", &ua[2..]);
        assert!(Target::from_keys(&off, "BTBZMqHH6r4Tts7J_aSIgg").is_err());
    }

    #[test]
    fn vapid_tokens_verify_with_the_public_key() {
        use p256::ecdsa::signature::Verifier as _;
        let key = VapidKey::default();
        assert_eq!(VapidKey::from_hex(&key.to_hex()).unwrap().public_key(), key.public_key());
        let endpoint: axum::http::Uri = "https://fcm.googleapis.com/fcm/send/abc".parse().unwrap();
        let header = key.authorization(&endpoint, "mailto:me@example.com", 1_000);
        let (token, public) = header.strip_prefix("vapid t=").unwrap().split_once(", k=").unwrap();
        assert_eq!(public, key.public_key());
        let (signed, signature) = token.rsplit_once('.').unwrap();
        let verifying = p256::ecdsa::VerifyingKey::from_sec1_bytes(&b64(public)).unwrap();
        let signature = p256::ecdsa::Signature::from_slice(&b64(signature)).unwrap();
        verifying.verify(signed.as_bytes(), &signature).unwrap();
        let claims: serde_json::Value =
            serde_json::from_slice(&b64(signed.split_once('.').unwrap().1)).unwrap();
        assert_eq!(
            claims,
            serde_json::json!({"aud": "https://fcm.googleapis.com", "exp": 1_000 + 43_200, "sub": "mailto:me@example.com"})
        );
    }

    #[test]
    fn endpoints_are_at_push_services() {
        let config = PushConfig::default();
        assert!(config.allows("https://fcm.googleapis.com/fcm/send/abc").is_ok());
        assert!(config.allows("https://updates.push.services.mozilla.com/wpush/v2/x").is_ok());
        assert!(config.allows("https://web.push.apple.com/QG").is_ok());
        assert!(config.allows("https://wns2-by3p.notify.windows.com/w/?token=x").is_ok());
        for bad in [
            "http://fcm.googleapis.com/fcm/send/abc",
            "https://evilfcm.googleapis.com.example/x",
            "https://notfcm.googleapis.com.evil/x",
            "https://fcm.googleapis.com.evil.example/x",
            "https://127.0.0.1:8080/x",
            "ftp://fcm.googleapis.com/x",
            "not a url",
        ] {
            assert!(config.allows(bad).is_err(), "{bad}");
        }
        let own = PushConfig { hosts: vec!["127.0.0.1:9000".into()], ..PushConfig::default() };
        assert!(own.allows("http://127.0.0.1:9000/push/1").is_ok());
        assert!(own.allows("http://127.0.0.1:9001/push/1").is_err(), "another port");
        assert!(config
            .allows(&format!("https://fcm.googleapis.com/{}", "x".repeat(3000)))
            .is_err());
    }

    #[tokio::test]
    async fn subscriptions_are_kept_and_replaced_by_endpoint() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("push.json");
        let subscriptions = Subscriptions::load(file.clone(), &PushConfig::default()).unwrap();
        let ua = "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4";
        let new = |endpoint: &str, name: &str| NewSubscription {
            endpoint: endpoint.into(),
            keys: SubscriptionKeys { p256dh: ua.into(), auth: "BTBZMqHH6r4Tts7J_aSIgg".into() },
            expiration_time: None,
            name: Some(name.into()),
            events: None,
        };
        let config = PushConfig::default();
        let (first, created) = subscriptions
            .add(new("https://fcm.googleapis.com/fcm/send/a", "phone"), "ops", &config)
            .await
            .unwrap();
        assert!(created);
        let (again, created) = subscriptions
            .add(new("https://fcm.googleapis.com/fcm/send/a", "my phone"), "ops", &config)
            .await
            .unwrap();
        assert!(!created);
        assert_eq!((again.id.as_str(), again.name.as_str()), (first.id.as_str(), "my phone"));
        let reloaded = Subscriptions::load(file.clone(), &PushConfig::default()).unwrap();
        assert_eq!(reloaded.list(), vec![again.clone()]);
        assert!(subscriptions
            .add(new("https://example.com/push", "x"), "ops", &config)
            .await
            .unwrap_err()
            .to_string()
            .contains("push service"));
        assert_eq!(subscriptions.remove(&first.id).await.unwrap(), Some(again));
        assert_eq!(subscriptions.remove(&first.id).await.unwrap(), None);
        assert!(Subscriptions::load(file.clone(), &PushConfig::default())
            .unwrap()
            .list()
            .is_empty());
        // A key given with padding is kept as the key; a stored subscription no longer allowed
        // is dropped at load.
        let mut padded = new("https://fcm.googleapis.com/fcm/send/b", "pad");
        padded.keys.auth = format!("BTBZMqHH6r4Tts7J_aSIgg{}", "=".repeat(10_000));
        let (kept, _) = subscriptions.add(padded, "ops", &config).await.unwrap();
        assert_eq!(kept.auth, "BTBZMqHH6r4Tts7J_aSIgg");
        let own = PushConfig { hosts: vec!["push.internal".into()], ..PushConfig::default() };
        subscriptions.add(new("https://push.internal/x", "own"), "ops", &own).await.unwrap();
        assert_eq!(Subscriptions::load(file.clone(), &own).unwrap().list().len(), 2);
        assert_eq!(
            Subscriptions::load(file, &config).unwrap().list().len(),
            1,
            "no longer allowed"
        );
    }

    #[tokio::test]
    async fn a_subscription_made_through_one_node_is_every_nodes() {
        let store: Arc<dyn switchboard_store::Documents> =
            Arc::new(switchboard_store::MemoryStore::new());
        let config = PushConfig::default();
        let a = Subscriptions::shared(store.clone(), None, &config).await.unwrap();
        let b = Subscriptions::shared(store.clone(), None, &config).await.unwrap();
        let mut b_changes = b.changes().expect("shared");
        let new = NewSubscription {
            endpoint: "https://fcm.googleapis.com/fcm/send/a".into(),
            keys: SubscriptionKeys {
                p256dh: "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4".into(),
                auth: "BTBZMqHH6r4Tts7J_aSIgg".into(),
            },
            expiration_time: None,
            name: Some("phone".into()),
            events: None,
        };
        let (made, _) = a.add(new, "ops", &config).await.unwrap();
        let Kept::Shared(doc) = &b.kept else { panic!("shared") };
        doc.refresh().await.unwrap();
        b_changes.changed().await.unwrap();
        let (added, removed) = b.reread(b_changes.borrow_and_update().0.clone(), &config);
        assert_eq!((added, removed), (vec![made.clone()], vec![]), "b takes a's subscription");
        assert_eq!(b.list(), vec![made.clone()]);
        assert_eq!(b.remove(&made.id).await.unwrap(), Some(made.clone()));
        let Kept::Shared(doc) = &a.kept else { panic!("shared") };
        let mut a_changes = a.changes().unwrap();
        a_changes.borrow_and_update();
        doc.refresh().await.unwrap();
        a_changes.changed().await.unwrap();
        let (added, removed) = a.reread(a_changes.borrow_and_update().0.clone(), &config);
        assert_eq!((added, removed), (vec![], vec![made]), "removed through b, gone on a");
        assert!(a.list().is_empty());
    }

    #[test]
    fn a_message_fits_one_record() {
        let notice = serde_json::json!({
            "id": "s:1", "event": "permission_requested", "title": "Bash wants approval",
            "text": "é".repeat(5000), "session": {"id": "s"}, "link": "https://x/a/1", "one_tap": true,
        });
        let made = message(&notice);
        assert!(made.len() <= MAX_PLAINTEXT_BYTES);
        let read: serde_json::Value = serde_json::from_slice(&made).unwrap();
        assert_eq!(read["link"], "https://x/a/1");
        assert_eq!(read["text"].as_str().unwrap().chars().count(), 1000);
        let long = serde_json::json!({"title": "😀".repeat(5000), "text": "😀".repeat(5000)});
        assert!(message(&long).len() <= MAX_PLAINTEXT_BYTES);
    }
}
