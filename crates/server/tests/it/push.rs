//! Web Push with the real CLI, to a local push service that reads what it is sent as the
//! browser would: it checks the VAPID token against the daemon's public key and decrypts the
//! body with the subscription's own private key (RFC 8291, written here from the RFC, apart
//! from the daemon's code). The decrypted notice's link approves the request; a subscription
//! its push service says is gone (410) is removed.

use std::sync::{Arc, Mutex};

use aes_gcm::aead::{Aead as _, KeyInit as _};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use p256::ecdsa::signature::Verifier as _;
use p256::elliptic_curve::sec1::ToSec1Point as _;
use serde_json::{json, Value};
use switchboard_store::{MemoryStore, Store};
use switchboard_testkit::{CliSandbox, FakeApi, Reply, Scenario};

use crate::links::post;
use crate::notify::fast;
use crate::{is_result, touch_and_ls, Server, WAIT};

/// A push service: keeps what it is sent; answers `201`, or `410` once `gone` is set.
#[derive(Clone, Default)]
struct PushService {
    got: Arc<Mutex<Vec<(HeaderMap, Bytes)>>>,
    gone: Arc<Mutex<bool>>,
    changed: Arc<tokio::sync::Notify>,
}

impl PushService {
    async fn start(&self) -> String {
        async fn take(
            State(service): State<PushService>,
            headers: HeaderMap,
            body: Bytes,
        ) -> StatusCode {
            let gone = *service.gone.lock().unwrap();
            service.got.lock().unwrap().push((headers, body));
            service.changed.notify_waiters();
            if gone {
                StatusCode::GONE
            } else {
                StatusCode::CREATED
            }
        }
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let app = axum::Router::new().fallback(take).with_state(self.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        address.to_string()
    }

    /// Waits for the `count`th push; its headers and body.
    async fn nth(&self, count: usize) -> (HeaderMap, Bytes) {
        tokio::time::timeout(WAIT, async {
            loop {
                let changed = self.changed.notified();
                if let Some(got) = self.got.lock().unwrap().get(count - 1).cloned() {
                    return got;
                }
                changed.await;
            }
        })
        .await
        .expect("the push arrived in time")
    }
}

/// A browser's side of a subscription: its key pair and auth secret.
struct Browser {
    secret: p256::SecretKey,
    auth: [u8; 16],
}

impl Browser {
    fn new() -> Browser {
        let secret = loop {
            let bytes: [u8; 32] = switchboard_transport::random::random_bytes();
            if let Ok(secret) = p256::SecretKey::from_slice(&bytes) {
                break secret;
            }
        };
        Browser { secret, auth: switchboard_transport::random::random_bytes() }
    }

    /// What `PushSubscription.toJSON()` gives, for `endpoint`.
    fn subscription(&self, endpoint: &str) -> Value {
        json!({
            "endpoint": endpoint,
            "expirationTime": null,
            "keys": {
                "p256dh": URL_SAFE_NO_PAD.encode(self.secret.public_key().to_sec1_point(false).as_bytes()),
                "auth": URL_SAFE_NO_PAD.encode(self.auth),
            },
        })
    }

    /// RFC 8291 §3.4 and RFC 8188 §2, from the receiving side: the header's salt, record size
    /// and sender key; the shared secret; the keys; one record, its delimiter last.
    fn decrypt(&self, body: &[u8]) -> Value {
        let salt = &body[..16];
        let record_size = u32::from_be_bytes(body[16..20].try_into().unwrap());
        let id_length = body[20] as usize;
        let sender = &body[21..21 + id_length];
        let sealed = &body[21 + id_length..];
        assert_eq!(id_length, 65, "the sender's key is the key id");
        assert!(sealed.len() as u32 <= record_size, "one record");
        let sender_key = p256::PublicKey::from_sec1_bytes(sender).unwrap();
        let shared =
            p256::ecdh::diffie_hellman(self.secret.to_nonzero_scalar(), sender_key.as_affine());
        let mut info = b"WebPush: info\0".to_vec();
        info.extend_from_slice(self.secret.public_key().to_sec1_point(false).as_bytes());
        info.extend_from_slice(sender);
        let mut ikm = [0u8; 32];
        hkdf::Hkdf::<sha2::Sha256>::new(Some(&self.auth), shared.raw_secret_bytes())
            .expand(&info, &mut ikm)
            .unwrap();
        let prk = hkdf::Hkdf::<sha2::Sha256>::new(Some(salt), &ikm);
        let (mut key, mut nonce) = ([0u8; 16], [0u8; 12]);
        prk.expand(b"Content-Encoding: aes128gcm\0", &mut key).unwrap();
        prk.expand(b"Content-Encoding: nonce\0", &mut nonce).unwrap();
        let cipher = aes_gcm::Aes128Gcm::new_from_slice(&key).unwrap();
        let mut plain = cipher.decrypt(&nonce.into(), sealed).unwrap();
        while plain.last() == Some(&0) {
            plain.pop();
        }
        assert_eq!(plain.pop(), Some(2), "the last record's delimiter");
        serde_json::from_slice(&plain).unwrap()
    }
}

/// Checks a push's VAPID header as a push service does: ES256 over the token, by the key it
/// names, which is the daemon's; for this service; not expired.
fn check_vapid(headers: &HeaderMap, public_key: &str, audience: &str) {
    let header = headers["authorization"].to_str().unwrap();
    let (token, key) = header.strip_prefix("vapid t=").unwrap().split_once(", k=").unwrap();
    assert_eq!(key, public_key, "signed with the key browsers subscribed with");
    let (signed, signature) = token.rsplit_once('.').unwrap();
    let verifying =
        p256::ecdsa::VerifyingKey::from_sec1_bytes(&URL_SAFE_NO_PAD.decode(key).unwrap()).unwrap();
    let signature =
        p256::ecdsa::Signature::from_slice(&URL_SAFE_NO_PAD.decode(signature).unwrap()).unwrap();
    verifying.verify(signed.as_bytes(), &signature).expect("a valid ES256 signature");
    let claims: Value =
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(signed.split_once('.').unwrap().1).unwrap())
            .unwrap();
    assert_eq!(claims["aud"], audience);
    let now = switchboard_store::now_ms() / 1000;
    let expires = claims["exp"].as_u64().unwrap();
    assert!(expires > now && expires <= now + 24 * 3600, "{claims}");
    assert_eq!(claims["sub"], "mailto:switchboard@localhost");
    assert_eq!(headers["content-encoding"], "aes128gcm");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscribed_browser_hears_a_request_and_its_link_approves_it() {
    let api = FakeApi::start(
        Scenario::new()
            .reply(Reply::tool_use("Bash", touch_and_ls("from-push.txt")).when_prompt("RUN"))
            .reply(Reply::text("Done.").when_tool_result_contains("from-push.txt")),
    )
    .await
    .unwrap();
    let sandbox = CliSandbox::new().unwrap();
    let service = PushService::default();
    let host = service.start().await;
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let allowed = host.clone();
    let server = Server::start_with(store, &api, &sandbox, move |config| {
        config.notify = fast(Vec::new());
        config.notify.push.hosts = vec![allowed];
    })
    .await;
    let (status, key) = server.get("/api/push/key").await;
    assert_eq!(status, 200);
    let public_key = key["public_key"].as_str().unwrap().to_owned();
    assert_eq!(URL_SAFE_NO_PAD.decode(&public_key).unwrap().len(), 65);

    // Subscriptions are checked: where the endpoint is, what the keys are.
    let browser = Browser::new();
    let endpoint = format!("http://{host}/push/phone-1");
    for (bad, why) in [
        (browser.subscription("http://127.0.0.2:9/push"), "push service"),
        (browser.subscription("https://example.com/push"), "push service"),
        (json!({"endpoint": endpoint, "keys": {"p256dh": "AAAA", "auth": "AAAA"}}), "p256dh"),
    ] {
        let (status, body) = server.post("/api/push/subscriptions", bad).await;
        assert_eq!(status, 400, "{body}");
        assert!(body["error"]["message"].as_str().unwrap().contains(why), "{body}");
    }
    let mut subscription = browser.subscription(&endpoint);
    subscription["name"] = json!("test phone");
    let (status, made) = server.post("/api/push/subscriptions", subscription.clone()).await;
    assert_eq!(status, 201, "{made}");
    let id = made["id"].as_str().unwrap().to_owned();
    assert_eq!(made["service"], "127.0.0.1");
    assert!(made.get("endpoint").is_none(), "the endpoint is a capability: not shown");
    // The same endpoint again is the same subscription.
    let (status, again) = server.post("/api/push/subscriptions", subscription).await;
    assert_eq!((status, again["id"].as_str()), (200, Some(id.as_str())));

    // A request reaches the browser, encrypted to it and signed by the daemon.
    let (status, session) =
        server.post("/api/sessions", json!({"cwd": sandbox.workdir(), "prompt": "RUN"})).await;
    assert_eq!(status, 201, "{session}");
    let session_id = session["id"].as_str().unwrap().to_owned();
    let mut ws = server.ws(&format!("/api/sessions/{session_id}/subscribe?after=0")).await;
    let (headers, body) = service.nth(1).await;
    check_vapid(&headers, &public_key, &format!("http://{host}"));
    assert_eq!(headers["urgency"], "high");
    let ttl: u64 = headers["ttl"].to_str().unwrap().parse().unwrap();
    assert!(ttl > 0 && ttl <= 600, "lives until the request times out: {ttl}");
    assert!(body.len() <= 4096);
    let notice = browser.decrypt(&body);
    assert_eq!(notice["event"], "permission_requested");
    assert_eq!(notice["session"], session_id.as_str());
    assert_eq!(notice["one_tap"], true);
    assert!(notice["text"].as_str().unwrap().contains("touch from-push.txt"), "{notice}");
    let link = notice["link"].as_str().unwrap();
    assert!(link.starts_with(&format!("{}/a/", server.base)), "{link}");

    // Its link approves, as the service worker's Approve button does.
    let (status, page) = post(&server, link, "decision=allow").await;
    assert!(status == 200 && page.contains("Approved"), "{status} {page}");
    let frames = ws.until(is_result).await;
    let decided = frames.iter().find(|f| f["event"]["event"] == "permission_decided").unwrap();
    assert_eq!(
        decided["event"]["by"],
        json!({"kind": "person", "who": "link (web push:test phone)"})
    );
    assert!(sandbox.file("from-push.txt").exists());
    let (_, body) = service.nth(2).await;
    let done = browser.decrypt(&body);
    assert_eq!(
        (done["event"].as_str(), done["text"].as_str()),
        (Some("session_finished"), Some("Done."))
    );

    // A test on request; then the push service says the subscription is gone: it is removed,
    // and nothing more is sent to it.
    let (status, _) = server.post(&format!("/api/push/subscriptions/{id}/test"), json!({})).await;
    assert_eq!(status, 202);
    let (headers, body) = service.nth(3).await;
    assert_eq!(browser.decrypt(&body)["event"], "test");
    assert_eq!(headers["urgency"], "normal");
    *service.gone.lock().unwrap() = true;
    let (status, _) = server.post(&format!("/api/push/subscriptions/{id}/test"), json!({})).await;
    assert_eq!(status, 202);
    service.nth(4).await;
    let removed = tokio::time::timeout(WAIT, async {
        loop {
            let (_, list) = server.get("/api/push/subscriptions").await;
            if list.as_array().is_some_and(Vec::is_empty) {
                return;
            }
            tokio::task::yield_now().await;
        }
    })
    .await;
    assert!(removed.is_ok(), "a subscription its service calls gone is removed");
    let (status, _) = server.post(&format!("/api/push/subscriptions/{id}/test"), json!({})).await;
    assert_eq!(status, 404);
    let (status, _) = server
        .request_as(
            crate::TOKEN,
            reqwest::Method::DELETE,
            &format!("/api/push/subscriptions/{id}"),
            None,
        )
        .await;
    assert_eq!(status, 404);
    assert_eq!(service.got.lock().unwrap().len(), 4, "nothing more went to it");

    // A phone's approve token subscribes its device; revoking the token removes it.
    let (_, made) = server.post("/api/tokens", json!({"name": "phone", "scope": "approve"})).await;
    let phone = made["token"].as_str().unwrap().to_owned();
    let other = Browser::new().subscription(&format!("http://{host}/push/phone-2"));
    let (status, made) = server
        .request_as(&phone, reqwest::Method::POST, "/api/push/subscriptions", Some(other))
        .await;
    assert_eq!((status, made["by"].as_str()), (201, Some("phone")), "{made}");
    let (status, _) =
        server.request_as(crate::TOKEN, reqwest::Method::DELETE, "/api/tokens/phone", None).await;
    assert_eq!(status, 200);
    let (_, list) = server.get("/api/push/subscriptions").await;
    assert_eq!(list, json!([]), "the revoked token's device hears no more");
    server.stop().await;
}
