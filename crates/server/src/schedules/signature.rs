//! A webhook's signature: HMAC-SHA256 of the request's body, with the trigger's own secret, in
//! hex, as GitHub sends it (`X-Hub-Signature-256: sha256=HEX`). Compared in constant time; a
//! missing, malformed or wrong signature is refused with the reason, never the expected value.

use hmac::{KeyInit as _, Mac as _};

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

/// The header a signature comes in.
pub const HEADER: &str = "x-hub-signature-256";

/// The signature of `body` with `secret`, as the header carries it (`sha256=HEX`).
pub fn sign(secret: &str, body: &[u8]) -> String {
    let mut mac = HmacSha256::new_from_slice(secret.as_bytes()).expect("HMAC takes any key");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// Whether `header` (the header's value, if sent) signs `body` with `secret`.
pub fn check(secret: &str, body: &[u8], header: Option<&str>) -> Result<(), String> {
    let Some(header) = header else {
        return Err(format!("no {HEADER} header: a trigger's request is signed with its secret (HMAC-SHA256 of the body, as sha256=HEX)"));
    };
    let Some(given) = header.trim().strip_prefix("sha256=") else {
        return Err(format!("the {HEADER} header is not sha256=HEX"));
    };
    let Ok(given) = hex::decode(given) else {
        return Err(format!("the {HEADER} header's signature is not hex"));
    };
    let mut mac = HmacSha256::new_from_slice(secret.as_bytes()).expect("HMAC takes any key");
    mac.update(body);
    mac.verify_slice(&given)
        .map_err(|_| "the signature does not match the body with this trigger's secret".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_is_checked_as_github_sends_it() {
        // GitHub's documented example: secret "It's a Secret to Everybody", body "Hello, World!".
        let expected = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
        assert_eq!(sign("It's a Secret to Everybody", b"Hello, World!"), expected);
        assert!(check("It's a Secret to Everybody", b"Hello, World!", Some(expected)).is_ok());
        let cases = [
            (None, "no x-hub-signature-256 header"),
            (Some("sha1=abc"), "is not sha256=HEX"),
            (Some("sha256=zz"), "is not hex"),
            (Some("sha256=00"), "does not match"),
        ];
        for (header, why) in cases {
            let error = check("It's a Secret to Everybody", b"Hello, World!", header).unwrap_err();
            assert!(error.contains(why), "{error}");
        }
        let error = check("another secret", b"Hello, World!", Some(expected)).unwrap_err();
        assert!(error.contains("does not match"), "{error}");
        let error =
            check("It's a Secret to Everybody", b"Hello, World?", Some(expected)).unwrap_err();
        assert!(error.contains("does not match"), "{error}");
    }
}
