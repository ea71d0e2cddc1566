//! One-tap approval links: `/a/{link}`, where the link names one permission request (session,
//! request id, when it expires, the channel it went out on) and carries an HMAC-SHA256 of that
//! under the daemon's link key. The link is the only credential its page needs, and only for
//! its one request. It is single-use because a request is answered once (the first answer
//! wins); it expires when the request would time out. The pages are [`crate::approval`]'s.
//! `Daemon::approval_link` makes the links. A page's GET only reads (the pending table, else
//! the log's decision); its POST answers through the session's first-answer-wins table, so a
//! link is single-use without a table of its own.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hmac::{KeyInit as _, Mac as _};
use serde::{Deserialize, Serialize};

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

/// The longest link accepted (a request id and a session id are short).
pub const MAX_LINK_CHARS: usize = 1024;

/// What signs links: 32 random bytes (`DATA_DIR/link-key`, hex, so links outlive a restart).
#[derive(Clone)]
pub struct LinkKey([u8; 32]);

impl std::fmt::Debug for LinkKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LinkKey(…)")
    }
}

impl Default for LinkKey {
    /// A new random key (links signed with it die with the daemon).
    fn default() -> LinkKey {
        LinkKey::from_hex(&switchboard_transport::random::random_hex(32))
            .expect("random_hex(32) is 64 hex digits")
    }
}

impl LinkKey {
    /// A key from its hex form (64 hex digits).
    pub fn from_hex(text: &str) -> Result<LinkKey, String> {
        let mut key = [0u8; 32];
        hex::decode_to_slice(text.trim(), &mut key)
            .map_err(|_| "a link key is 64 hex digits".to_owned())?;
        Ok(LinkKey(key))
    }

    fn mac(&self) -> HmacSha256 {
        HmacSha256::new_from_slice(&self.0).expect("HMAC takes a key of any length")
    }

    /// The link for `claim`, or `None` where it would be longer than [`MAX_LINK_CHARS`] (a
    /// request or session id that long, from a CLI's own output, would make a link that
    /// [`LinkKey::verify`] refuses: better no button than one that leads to "not a link").
    pub fn sign(&self, claim: &LinkClaim) -> Option<String> {
        let payload =
            URL_SAFE_NO_PAD.encode(serde_json::to_vec(claim).expect("a claim is plain JSON"));
        let mut mac = self.mac();
        mac.update(payload.as_bytes());
        let signature = URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes());
        let link = format!("{payload}.{signature}");
        (link.len() <= MAX_LINK_CHARS).then_some(link)
    }

    /// What `link` claims, if this key signed it (compared in constant time). Expiry is the
    /// caller's to check, so that an expired link can say so.
    pub fn verify(&self, link: &str) -> Option<LinkClaim> {
        if link.len() > MAX_LINK_CHARS {
            return None;
        }
        let (payload, signature) = link.split_once('.')?;
        let signature = URL_SAFE_NO_PAD.decode(signature).ok()?;
        let mut mac = self.mac();
        mac.update(payload.as_bytes());
        mac.verify_slice(&signature).ok()?;
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).ok()?).ok()
    }
}

/// What a link names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkClaim {
    /// The session.
    #[serde(rename = "s")]
    pub session: String,
    /// The permission request.
    #[serde(rename = "r")]
    pub request: String,
    /// When it expires (Unix milliseconds).
    #[serde(rename = "e")]
    pub expires_ms: u64,
    /// The channel it went out on (`webhook:NAME`, `ntfy:NAME`, `api`): recorded with the
    /// decision.
    #[serde(rename = "c")]
    pub channel: String,
}

/// Where links point and what signs them.
#[derive(Debug, Clone, Default)]
pub struct LinkConfig {
    /// The key (`None`: a random one for this run).
    pub key: Option<LinkKey>,
    /// The daemon's address as people reach it (`switchboard serve --public-url`), without a
    /// trailing `/`; links are paths alone without it.
    pub public_url: Option<String>,
}

/// What a link's page posts: `decision=…&message=…` (`application/x-www-form-urlencoded`).
#[derive(Debug, Default)]
pub struct AnswerForm {
    /// `allow` or `deny` (anything else is refused by the page).
    pub decision: String,
    /// The reason given with a denial, if any.
    pub message: Option<String>,
}

impl AnswerForm {
    /// Reads a posted form; unknown fields are ignored, a repeated field counts its last value.
    pub fn parse(body: &[u8]) -> AnswerForm {
        let mut form = AnswerForm::default();
        for (name, value) in form_urlencoded::parse(body) {
            match &*name {
                "decision" => form.decision = value.into_owned(),
                "message" => form.message = Some(value.into_owned()),
                _ => {}
            }
        }
        form
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim() -> LinkClaim {
        LinkClaim {
            session: "s1".into(),
            request: "r1".into(),
            expires_ms: 1_800_000_000_000,
            channel: "webhook:ops".into(),
        }
    }

    #[test]
    fn a_link_verifies_under_its_key_only_and_untouched() {
        let key = LinkKey::default();
        let link = key.sign(&claim()).unwrap();
        assert!(link.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)), "{link}");
        assert_eq!(key.verify(&link), Some(claim()));
        assert_eq!(LinkKey::default().verify(&link), None, "another daemon's key");
        // Any change to the payload or the signature breaks it.
        let (payload, signature) = link.split_once('.').unwrap();
        let mut other = claim();
        other.request = "r2".into();
        let forged =
            format!("{}.{signature}", key.sign(&other).unwrap().split_once('.').unwrap().0);
        assert_eq!(key.verify(&forged), None);
        let mut flipped = signature.to_owned();
        let last = flipped.pop().unwrap();
        flipped.push(if last == 'A' { 'B' } else { 'A' });
        assert_eq!(key.verify(&format!("{payload}.{flipped}")), None);
        for bad in ["", ".", "abc", "abc.", ".abc", &"a".repeat(MAX_LINK_CHARS + 1)] {
            assert_eq!(key.verify(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_claim_too_long_to_verify_gets_no_link() {
        let key = LinkKey::default();
        // The longest request id that still fits signs and verifies; one more byte, no link.
        let fits = |len: usize| {
            let mut long = claim();
            long.request = "r".repeat(len);
            key.sign(&long).map(|link| (key.verify(&link) == Some(long), link.len()))
        };
        let longest = (1..MAX_LINK_CHARS).take_while(|&len| fits(len).is_some()).last().unwrap();
        assert!(longest > 600, "room for a real id: {longest}");
        assert_eq!(fits(longest).map(|(verified, _)| verified), Some(true));
        assert!(fits(longest).unwrap().1 <= MAX_LINK_CHARS);
        assert_eq!(fits(longest + 1), None);
        assert_eq!(fits(5_000), None);
    }

    #[test]
    fn keys_read_from_hex() {
        let key = LinkKey::from_hex(&"ab".repeat(32)).unwrap();
        assert_eq!(key.0, [0xab; 32]);
        assert!(LinkKey::from_hex("abc").is_err() && LinkKey::from_hex(&"zz".repeat(32)).is_err());
        assert!(format!("{key:?}").contains('…'), "never printed");
    }
}
