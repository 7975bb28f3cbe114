//! The SSRF guard: which addresses a webhook may never be delivered to.
//!
//! A URL is decided as the HTTP client will use it: [`check_url`] parses it
//! once with the WHATWG parser of the `url` crate (the type reqwest takes),
//! refuses a forbidden IP literal, and hands back the parsed [`Url`] for the
//! client to send to. Host names are checked address by address as they
//! resolve at connect time (`HttpTransport` does
//! this in its resolver), so a name that resolves to an internal address
//! is refused too.
//!
//! Refused by default: every block of IANA's IPv4 and IPv6 special-purpose
//! registries that is not globally reachable, multicast, unallocated IPv6,
//! and IPv6 forms that carry a refused IPv4 address (IPv4-mapped and
//! -compatible, IPv4-translated, NAT64, 6to4, Teredo). Cloud metadata
//! addresses are refused under every policy.

mod ranges;
#[cfg(test)]
mod tests;

use std::net::IpAddr;
use std::sync::Arc;

pub use ipnet::IpNet;
pub use url::Url;

/// Which otherwise forbidden addresses a sender may deliver to. Everything
/// not globally reachable is forbidden by default; tests allow loopback.
///
/// The decision for an address, in order:
/// 1. a cloud metadata address is refused, whatever else is set;
/// 2. an address in a denied range is refused (an IPv6 address also when
///    the IPv4 address it carries is);
/// 3. an address in an allowed range is allowed (an IPv4-mapped IPv6
///    address also when its IPv4 address is);
/// 4. otherwise loopback and private addresses are allowed only when the
///    matching `insecure_allow_*` is set, and every other special-purpose
///    address is refused.
///
/// ```
/// use hooklatch::sender::AddressPolicy;
/// use hooklatch::sender::guard::{Forbidden, check_address};
///
/// // One on-premises range and nothing else private.
/// let policy = AddressPolicy::strict()
///     .insecure_allow_range("10.20.0.0/16".parse()?)
///     .with_denied_range("10.20.99.0/24".parse()?);
/// assert_eq!(check_address("10.20.1.5".parse()?, &policy), Ok(()));
/// assert_eq!(check_address("10.20.99.5".parse()?, &policy), Err(Forbidden::Denied));
/// assert_eq!(check_address("10.30.0.1".parse()?, &policy), Err(Forbidden::Private));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AddressPolicy {
    allow_loopback: bool,
    allow_private: bool,
    allowed: Arc<[IpNet]>,
    denied: Arc<[IpNet]>,
}

impl AddressPolicy {
    /// Forbids every address that is not globally reachable. The default.
    pub fn strict() -> Self {
        Self::default()
    }

    /// Allows loopback (127.0.0.0/8, ::1, and IPv6 forms carrying a
    /// loopback IPv4 address): for tests and local tools. This lets a
    /// webhook reach services on the sender's own host.
    #[must_use]
    pub fn insecure_allow_loopback(mut self) -> Self {
        self.allow_loopback = true;
        self
    }

    /// Allows private ranges (10/8, 172.16/12, 192.168/16, fc00::/7,
    /// fec0::/10): for senders whose receivers are all on a trusted
    /// network. Prefer [`insecure_allow_range`](Self::insecure_allow_range)
    /// with the one range you need.
    #[must_use]
    pub fn insecure_allow_private(mut self) -> Self {
        self.allow_private = true;
        self
    }

    /// Allows every address in `range`, whatever its class (metadata
    /// addresses and denied ranges excepted). Can be called again to allow
    /// several ranges.
    #[must_use]
    pub fn insecure_allow_range(mut self, range: IpNet) -> Self {
        self.allowed = push(&self.allowed, range);
        self
    }

    /// Refuses every address in `range`, even one an allowed range or an
    /// `insecure_allow_*` would let through. Can be called again.
    #[must_use]
    pub fn with_denied_range(mut self, range: IpNet) -> Self {
        self.denied = push(&self.denied, range);
        self
    }
}

fn push(ranges: &[IpNet], range: IpNet) -> Arc<[IpNet]> {
    ranges.iter().copied().chain([range.trunc()]).collect()
}

/// Why an address or URL is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Forbidden {
    /// 127.0.0.0/8 or ::1.
    #[error("loopback address")]
    Loopback,
    /// 10/8, 172.16/12, 192.168/16, IPv6 unique-local fc00::/7 or
    /// site-local fec0::/10.
    #[error("private address")]
    Private,
    /// 169.254/16 or fe80::/10.
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
    /// 192.0.2/24, 198.51.100/24, 203.0.113/24, 2001:db8::/32, 3fff::/20.
    #[error("documentation address")]
    Documentation,
    /// 198.18/15 or 2001:2::/48.
    #[error("benchmarking address")]
    Benchmarking,
    /// Reserved, deprecated or protocol-assigned space that no global route
    /// carries: 240/4, 192.0.0/24, 192.88.99/24, most of 2001::/23,
    /// 100::/64, 5f00::/16, IPv6 outside 2000::/3, and IPv6 forms that carry
    /// an IPv4 address but are not routed to it (IPv4-compatible and
    /// -translated, 6to4, Teredo, local-use NAT64).
    #[error("reserved address")]
    Reserved,
    /// A cloud metadata or instance-service address (169.254.169.254,
    /// fd00:ec2::254, 100.100.100.200 and others): refused under every
    /// policy.
    #[error("cloud metadata address")]
    Metadata,
    /// In a range the policy denies.
    #[error("address in a denied range")]
    Denied,
    /// The URL does not parse, is not `http` or `https`, or has no host.
    #[error("not an http(s) URL with a host")]
    NotHttp,
}

/// Checks one address (as resolved at connect time, so a name that later
/// resolves to an internal address is still caught). An IPv6 address that
/// carries an IPv4 address is checked as the IPv4 address inside.
///
/// ```
/// use hooklatch::sender::AddressPolicy;
/// use hooklatch::sender::guard::{Forbidden, check_address};
///
/// let strict = AddressPolicy::strict();
/// assert_eq!(check_address("169.254.169.254".parse()?, &strict), Err(Forbidden::Metadata));
/// assert_eq!(check_address("::ffff:10.0.0.1".parse()?, &strict), Err(Forbidden::Private));
/// assert_eq!(check_address("2002:7f00:1::".parse()?, &strict), Err(Forbidden::Loopback));
/// assert_eq!(check_address("64:ff9b::8.8.8.8".parse()?, &strict), Ok(()));
/// assert_eq!(check_address("93.184.215.14".parse()?, &strict), Ok(()));
/// let loopback = strict.insecure_allow_loopback();
/// assert!(check_address("127.0.0.1".parse()?, &loopback).is_ok());
/// # Ok::<(), std::net::AddrParseError>(())
/// ```
pub fn check_address(address: IpAddr, policy: &AddressPolicy) -> Result<(), Forbidden> {
    if ranges::is_metadata(address) {
        return Err(Forbidden::Metadata);
    }
    // A deny list also sees every IPv4 address an IPv6 form may carry; an
    // allow list sees only the IPv4-mapped one, which a socket connects to
    // directly.
    let (inside, mapped) = match address {
        IpAddr::V4(_) => (None, None),
        IpAddr::V6(v6) => (ranges::embedded(v6), v6.to_ipv4_mapped()),
    };
    let listed = |ranges: &[IpNet], also: &[std::net::Ipv4Addr]| {
        ranges.iter().any(|range| {
            range.contains(&address) || also.iter().any(|v4| range.contains(&IpAddr::V4(*v4)))
        })
    };
    if listed(
        &policy.denied,
        inside.as_ref().map_or(&[], |e| e.addresses()),
    ) {
        return Err(Forbidden::Denied);
    }
    if listed(&policy.allowed, mapped.as_slice()) {
        return Ok(());
    }
    let class = match address {
        IpAddr::V4(v4) => ranges::classify_v4(v4),
        IpAddr::V6(v6) => ranges::classify_v6(v6),
    };
    match class {
        None => Ok(()),
        Some(Forbidden::Loopback) if policy.allow_loopback => Ok(()),
        Some(Forbidden::Private) if policy.allow_private => Ok(()),
        Some(reason) => Err(reason),
    }
}

/// Parses a webhook URL as the HTTP client will (the WHATWG rules of the
/// `url` crate, whose [`Url`] reqwest takes as it is) and checks it before
/// any lookup: `http` or `https`, a host, and, when the host is an IP
/// literal in any spelling the parser accepts (`2130706433`, `0x7f.1`,
/// `127.0.0.1.`, `[::ffff:7f00:1]`), an allowed address. Send to the `Url`
/// it returns, never to the string again. Host names pass here and are
/// checked address by address when they resolve.
///
/// ```
/// use hooklatch::sender::AddressPolicy;
/// use hooklatch::sender::guard::{Forbidden, check_url};
///
/// let strict = AddressPolicy::strict();
/// assert!(check_url("https://hooks.example.com/in", &strict).is_ok());
/// assert_eq!(check_url("http://[::1]:8080/", &strict), Err(Forbidden::Loopback));
/// assert_eq!(check_url("http://0x7f.1/", &strict), Err(Forbidden::Loopback));
/// assert_eq!(check_url("file:///etc/passwd", &strict), Err(Forbidden::NotHttp));
/// ```
pub fn check_url(url: &str, policy: &AddressPolicy) -> Result<Url, Forbidden> {
    let url = Url::parse(url).map_err(|_| Forbidden::NotHttp)?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(Forbidden::NotHttp);
    }
    match url.host() {
        Some(url::Host::Ipv4(v4)) => check_address(v4.into(), policy)?,
        Some(url::Host::Ipv6(v6)) => check_address(v6.into(), policy)?,
        // The WHATWG parser turns every numeric host into an address, so a
        // name never parses as one; checked anyway, as the connector would
        // connect to it without resolving.
        Some(url::Host::Domain(name)) => match name.parse::<IpAddr>() {
            Ok(address) => check_address(address, policy)?,
            Err(_) if name.is_empty() => return Err(Forbidden::NotHttp),
            Err(_) => {}
        },
        None => return Err(Forbidden::NotHttp),
    }
    Ok(url)
}

/// `url` as it may be shown or recorded: its scheme, host and port only.
/// User-info, the path, the query and the fragment, where credentials live
/// (`user:pass@`, capability paths such as Slack's `/services/T…/B…/…` or
/// Telegram's `/bot<token>/`, `?token=`), each become `***`; a URL that
/// does not parse becomes `***` whole. A host name that is itself a secret
/// stays visible: it names where deliveries go.
///
/// ```
/// use hooklatch::sender::guard::mask_url;
///
/// assert_eq!(
///     mask_url("https://user:pass@hooks.slack.com/services/T0/B0/XYZ?token=1#top"),
///     "https://***@hooks.slack.com/***?***#***"
/// );
/// assert_eq!(mask_url("https://example.com:8443/hooks"), "https://example.com:8443/***");
/// assert_eq!(mask_url("https://example.com"), "https://example.com/");
/// assert_eq!(
///     mask_url("https://api.telegram.org/bot123:AAF-secret/sendMessage"),
///     "https://api.telegram.org/***"
/// );
/// assert_eq!(mask_url("not a URL"), "***");
/// ```
pub fn mask_url(url: &str) -> String {
    use std::fmt::Write as _;
    let Ok(parsed) = Url::parse(url.trim()) else {
        return "***".to_owned();
    };
    let mut masked = format!("{}://", parsed.scheme());
    if !parsed.username().is_empty() || parsed.password().is_some() {
        masked.push_str("***@");
    }
    masked.push_str(parsed.host_str().unwrap_or_default());
    if let Some(port) = parsed.port() {
        let _ = write!(masked, ":{port}");
    }
    masked.push_str(if parsed.path().trim_start_matches('/').is_empty() {
        "/"
    } else {
        "/***"
    });
    if parsed.query().is_some() {
        masked.push_str("?***");
    }
    if parsed.fragment().is_some() {
        masked.push_str("#***");
    }
    masked
}
