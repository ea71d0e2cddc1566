//! Where the daemon's own requests may go: notification receivers and push services are
//! addresses a person (or a browser) gave, so hostile. A link-local address (a cloud's
//! metadata service is one) or one that is no host's (unspecified, multicast, broadcast) is
//! never sent to; a private one (loopback, RFC 1918, carrier-grade NAT, unique local IPv6) only
//! where the channel says `allow_private = true`. A name is checked after it is resolved, on
//! every try ([`Guarded`], the HTTP client's resolver), so a name that later points elsewhere is
//! caught; an address written as one is checked on every try too ([`check_uri`]).

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::task::{Context, Poll};

use hyper_util::client::legacy::connect::dns::Name;

/// Why the daemon does not send to `ip`, if it does not.
pub fn refusal(ip: IpAddr, allow_private: bool) -> Option<&'static str> {
    let ip = match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    };
    let (never, private) = match ip {
        IpAddr::V4(v4) => (v4_never(v4), v4_private(v4)),
        IpAddr::V6(v6) => (v6_never(v6), v6_private(v6)),
    };
    if let Some(why) = never {
        return Some(why);
    }
    (private && !allow_private).then_some(
        "a private address (say allow_private = true for a receiver of your own network)",
    )
}

fn v4_never(ip: Ipv4Addr) -> Option<&'static str> {
    if ip.is_link_local() {
        Some("a link-local address (a cloud's metadata service is one)")
    } else if ip.is_unspecified() || ip.octets()[0] == 0 || ip.is_multicast() || ip.is_broadcast() {
        Some("not a host's address")
    } else {
        None
    }
}

fn v4_private(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    ip.is_loopback() || ip.is_private() || (a == 100 && (64..128).contains(&b))
}

fn v6_never(ip: Ipv6Addr) -> Option<&'static str> {
    let first = ip.segments()[0];
    if (first & 0xffc0) == 0xfe80 {
        Some("a link-local address (a cloud's metadata service is one)")
    } else if ip.is_unspecified() || ip.is_multicast() {
        Some("not a host's address")
    } else {
        None
    }
}

fn v6_private(ip: Ipv6Addr) -> bool {
    ip.is_loopback() || (ip.segments()[0] & 0xfe00) == 0xfc00
}

/// An address written in `uri` (not a name), checked: `Err` with why it is refused.
pub fn check_uri(uri: &axum::http::Uri, allow_private: bool) -> Result<(), String> {
    let Some(host) = uri.host() else { return Ok(()) };
    let literal = host.trim_start_matches('[').trim_end_matches(']');
    match literal.parse::<IpAddr>() {
        Ok(ip) => match refusal(ip, allow_private) {
            Some(why) => Err(format!("{ip} is {why}")),
            None => Ok(()),
        },
        Err(_) => Ok(()),
    }
}

/// The HTTP client's resolver: the system's, keeping only the addresses [`refusal`] allows; a
/// name with none left fails to connect, saying why.
#[derive(Debug, Clone, Copy)]
pub struct Guarded {
    /// Whether private addresses are allowed.
    pub allow_private: bool,
}

impl tower::Service<Name> for Guarded {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Self::Future {
        let allow_private = self.allow_private;
        Box::pin(async move {
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((name.as_str(), 0)).await?.collect();
            let mut why = None;
            let kept: Vec<SocketAddr> = found
                .into_iter()
                .filter(|address| match refusal(address.ip(), allow_private) {
                    Some(refused) => {
                        why = Some(refused);
                        false
                    }
                    None => true,
                })
                .collect();
            if kept.is_empty() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    format!("{name} resolves to {}", why.unwrap_or("no address")),
                ));
            }
            Ok(kept.into_iter())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(text: &str, allow_private: bool) -> bool {
        refusal(text.parse().unwrap(), allow_private).is_some()
    }

    #[test]
    fn link_local_and_no_ones_addresses_are_never_sent_to() {
        for address in [
            "169.254.169.254",
            "169.254.0.1",
            "fe80::1",
            "::ffff:169.254.169.254",
            "0.0.0.0",
            "0.1.2.3",
            "255.255.255.255",
            "224.0.0.1",
            "::",
            "ff02::1",
        ] {
            assert!(refused(address, true), "{address}");
            assert!(refused(address, false), "{address}");
        }
    }

    #[test]
    fn private_addresses_need_allow_private() {
        for address in [
            "127.0.0.1",
            "127.8.9.10",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "100.64.0.1",
            "::1",
            "fd00::1",
            "fc12::1",
            "::ffff:10.0.0.1",
        ] {
            assert!(refused(address, false), "{address}");
            assert!(!refused(address, true), "{address}");
        }
        for address in ["93.184.216.34", "172.32.0.1", "100.128.0.1", "2606:4700::1111"] {
            assert!(!refused(address, false), "{address}");
        }
    }

    #[test]
    fn an_address_in_a_url_is_checked_and_a_name_is_left_to_the_resolver() {
        let uri = |text: &str| text.parse::<axum::http::Uri>().unwrap();
        assert!(check_uri(&uri("http://169.254.169.254/latest"), true).is_err());
        assert!(check_uri(&uri("http://[fe80::1]:8080/x"), true).is_err());
        assert!(check_uri(&uri("http://127.0.0.1:9/x"), false).is_err());
        assert!(check_uri(&uri("http://127.0.0.1:9/x"), true).is_ok());
        assert!(check_uri(&uri("https://hooks.example/x"), false).is_ok());
    }

    #[tokio::test]
    async fn a_name_is_checked_after_it_is_resolved() {
        use tower::ServiceExt as _;
        let name = |text: &str| text.parse::<Name>().unwrap();
        // `localhost` resolves to loopback only: refused unless private is allowed.
        let strict = Guarded { allow_private: false }.oneshot(name("localhost")).await;
        let error = strict.unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::PermissionDenied);
        assert!(error.to_string().contains("private"), "{error}");
        let allowed = Guarded { allow_private: true }.oneshot(name("localhost")).await.unwrap();
        assert!(allowed.into_iter().all(|address| address.ip().is_loopback()));
    }
}
