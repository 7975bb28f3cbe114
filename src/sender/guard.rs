//! The SSRF guard: addresses a webhook may never be delivered to.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Which otherwise forbidden addresses a sender may deliver to. Everything
/// is forbidden by default; tests allow loopback.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AddressPolicy {
    allow_loopback: bool,
    allow_private: bool,
}

impl AddressPolicy {
    /// Forbids every class below. The default.
    pub fn strict() -> Self {
        Self::default()
    }

    /// Allows loopback (127.0.0.0/8, ::1): for tests and local tools. This
    /// lets a webhook reach services on the sender's own host.
    #[must_use]
    pub fn insecure_allow_loopback(mut self) -> Self {
        self.allow_loopback = true;
        self
    }

    /// Allows private ranges (10/8, 172.16/12, 192.168/16, fc00::/7): for
    /// senders whose receivers are all on a trusted network.
    #[must_use]
    pub fn insecure_allow_private(mut self) -> Self {
        self.allow_private = true;
        self
    }
}

/// Why an address is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Forbidden {
    /// 127.0.0.0/8 or ::1.
    #[error("loopback address")]
    Loopback,
    /// 10/8, 172.16/12, 192.168/16, or IPv6 unique-local fc00::/7.
    #[error("private address")]
    Private,
    /// 169.254/16 (cloud metadata lives here) or fe80::/10.
    #[error("link-local address")]
    LinkLocal,
    /// 100.64/10, carrier-grade NAT.
    #[error("carrier-grade NAT address")]
    SharedAddressSpace,
    /// 224/4 or ff00::/8.
    #[error("multicast address")]
    Multicast,
    /// 0.0.0.0/8, 255.255.255.255 or ::.
    #[error("unspecified or broadcast address")]
    Unspecified,
    /// The URL is not `http` or `https`, or has no host.
    #[error("not an http(s) URL with a host")]
    NotHttp,
}

/// Checks one address (as resolved at connect time, so a name that later
/// resolves to a private address is still caught). IPv4-mapped and
/// IPv4-compatible IPv6 addresses are checked as the IPv4 address inside.
///
/// ```
/// use hooklatch::sender::{AddressPolicy, Forbidden, check_address};
///
/// let strict = AddressPolicy::strict();
/// assert_eq!(check_address("169.254.169.254".parse()?, strict), Err(Forbidden::LinkLocal));
/// assert_eq!(check_address("::ffff:10.0.0.1".parse()?, strict), Err(Forbidden::Private));
/// assert_eq!(check_address("93.184.215.14".parse()?, strict), Ok(()));
/// assert!(check_address("127.0.0.1".parse()?, strict.insecure_allow_loopback()).is_ok());
/// # Ok::<(), std::net::AddrParseError>(())
/// ```
pub fn check_address(address: IpAddr, policy: AddressPolicy) -> Result<(), Forbidden> {
    let class = match address {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped().or_else(|| compatible_v4(v6)) {
            Some(v4) => classify_v4(v4),
            None => classify_v6(v6),
        },
    };
    match class {
        None => Ok(()),
        Some(Forbidden::Loopback) if policy.allow_loopback => Ok(()),
        Some(Forbidden::Private) if policy.allow_private => Ok(()),
        Some(reason) => Err(reason),
    }
}

/// `::a.b.c.d` (deprecated IPv4-compatible form), but not `::` or `::1`.
fn compatible_v4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    let segments = v6.segments();
    (segments[..6] == [0; 6] && (segments[6] != 0 || segments[7] > 1)).then(|| {
        let [a, b] = segments[6].to_be_bytes();
        let [c, d] = segments[7].to_be_bytes();
        Ipv4Addr::new(a, b, c, d)
    })
}

fn classify_v4(v4: Ipv4Addr) -> Option<Forbidden> {
    let [a, b, ..] = v4.octets();
    if v4.is_loopback() {
        Some(Forbidden::Loopback)
    } else if v4.is_private() {
        Some(Forbidden::Private)
    } else if v4.is_link_local() {
        Some(Forbidden::LinkLocal)
    } else if a == 100 && (64..128).contains(&b) {
        Some(Forbidden::SharedAddressSpace)
    } else if v4.is_multicast() {
        Some(Forbidden::Multicast)
    } else if a == 0 || v4.is_broadcast() {
        Some(Forbidden::Unspecified)
    } else {
        None
    }
}

fn classify_v6(v6: Ipv6Addr) -> Option<Forbidden> {
    let first = v6.segments()[0];
    if v6.is_loopback() {
        Some(Forbidden::Loopback)
    } else if v6.is_unspecified() {
        Some(Forbidden::Unspecified)
    } else if first & 0xfe00 == 0xfc00 {
        Some(Forbidden::Private)
    } else if first & 0xffc0 == 0xfe80 {
        Some(Forbidden::LinkLocal)
    } else if v6.is_multicast() {
        Some(Forbidden::Multicast)
    } else {
        None
    }
}

/// Checks a webhook URL before any lookup: `http` or `https`, a host, and,
/// when the host is an IP literal, an allowed address. Hostnames pass here
/// and are checked again, address by address, when they are resolved.
///
/// ```
/// use hooklatch::sender::{AddressPolicy, Forbidden, check_url};
///
/// let strict = AddressPolicy::strict();
/// assert_eq!(check_url("https://hooks.example.com/in", strict), Ok(()));
/// assert_eq!(check_url("http://[::1]:8080/", strict), Err(Forbidden::Loopback));
/// assert_eq!(check_url("file:///etc/passwd", strict), Err(Forbidden::NotHttp));
/// ```
pub fn check_url(url: &str, policy: AddressPolicy) -> Result<(), Forbidden> {
    let uri: http::Uri = url.parse().map_err(|_| Forbidden::NotHttp)?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) {
        return Err(Forbidden::NotHttp);
    }
    let host = uri
        .host()
        .filter(|host| !host.is_empty())
        .ok_or(Forbidden::NotHttp)?;
    let literal = host.trim_start_matches('[').trim_end_matches(']');
    match literal.parse::<IpAddr>() {
        Ok(address) => check_address(address, policy),
        Err(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(address: &str) -> Result<(), Forbidden> {
        check_address(address.parse().unwrap(), AddressPolicy::strict())
    }

    #[test]
    fn refuses_every_forbidden_class() {
        for (address, reason) in [
            ("127.0.0.1", Forbidden::Loopback),
            ("127.255.0.9", Forbidden::Loopback),
            ("::1", Forbidden::Loopback),
            ("10.1.2.3", Forbidden::Private),
            ("172.16.0.1", Forbidden::Private),
            ("172.31.255.255", Forbidden::Private),
            ("192.168.1.1", Forbidden::Private),
            ("fc00::1", Forbidden::Private),
            ("fd12:3456::1", Forbidden::Private),
            ("169.254.169.254", Forbidden::LinkLocal),
            ("fe80::1", Forbidden::LinkLocal),
            ("100.64.0.1", Forbidden::SharedAddressSpace),
            ("100.127.255.254", Forbidden::SharedAddressSpace),
            ("224.0.0.1", Forbidden::Multicast),
            ("ff02::1", Forbidden::Multicast),
            ("0.0.0.0", Forbidden::Unspecified),
            ("0.1.2.3", Forbidden::Unspecified),
            ("255.255.255.255", Forbidden::Unspecified),
            ("::", Forbidden::Unspecified),
            ("::ffff:127.0.0.1", Forbidden::Loopback),
            ("::ffff:169.254.169.254", Forbidden::LinkLocal),
            ("::10.0.0.1", Forbidden::Private),
        ] {
            assert_eq!(check(address), Err(reason), "{address}");
        }
    }

    #[test]
    fn allows_public_addresses_and_what_the_policy_allows() {
        for address in [
            "93.184.215.14",
            "172.32.0.1",
            "100.128.0.1",
            "2606:4700::1111",
        ] {
            assert_eq!(check(address), Ok(()), "{address}");
        }
        let relaxed = AddressPolicy::strict()
            .insecure_allow_loopback()
            .insecure_allow_private();
        assert!(check_address("127.0.0.1".parse().unwrap(), relaxed).is_ok());
        assert!(check_address("10.0.0.1".parse().unwrap(), relaxed).is_ok());
        assert!(check_address("169.254.169.254".parse().unwrap(), relaxed).is_err());
    }

    #[test]
    fn urls_need_http_a_host_and_an_allowed_literal() {
        let strict = AddressPolicy::strict();
        assert_eq!(
            check_url("http://10.0.0.1/x", strict),
            Err(Forbidden::Private)
        );
        assert_eq!(
            check_url("https://[fe80::1]/", strict),
            Err(Forbidden::LinkLocal)
        );
        assert_eq!(
            check_url("ftp://example.com/", strict),
            Err(Forbidden::NotHttp)
        );
        assert_eq!(check_url("not a url", strict), Err(Forbidden::NotHttp));
        assert_eq!(check_url("/relative", strict), Err(Forbidden::NotHttp));
        assert_eq!(check_url("https://example.com", strict), Ok(()));
    }
}
