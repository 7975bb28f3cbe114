//! Which addresses are not globally reachable, as pure tables.
//!
//! Sources, as of 2026-11:
//! - IANA IPv4 Special-Purpose Address Registry
//!   (<https://www.iana.org/assignments/iana-ipv4-special-registry/>) and the
//!   IPv4 multicast registry (224.0.0.0/4);
//! - IANA IPv6 Special-Purpose Address Registry
//!   (<https://www.iana.org/assignments/iana-ipv6-special-registry/>) and the
//!   IPv6 Address Space registry (only 2000::/3 is global unicast);
//! - RFC 6052 and 8215 (NAT64), RFC 3056 (6to4), RFC 4380 (Teredo), RFC 4291
//!   (IPv4-mapped and -compatible), RFC 2765 (IPv4-translated);
//! - the cloud providers' own documentation for the metadata addresses.
//!
//! Every block whose "Globally Reachable" column is False or N/A is refused
//! (6to4 and Teredo are N/A).
//! Where the registry marks a few addresses inside such a block globally
//! reachable (anycast services in 192.0.0.0/24), the whole block is still
//! refused: no webhook receiver lives there. In 2001::/23 the globally
//! reachable sub-blocks are allowed, as the registry says.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::Forbidden::{self, *};

/// Cloud metadata and instance-service addresses: credentials and instance
/// identity live behind them. Refused under every policy.
const METADATA_V4: &[Ipv4Addr] = &[
    // AWS, GCP, Azure, Oracle (OCI), OpenStack, DigitalOcean, Hetzner, Huawei.
    Ipv4Addr::new(169, 254, 169, 254),
    // AWS: the Amazon DNS server and the time sync service.
    Ipv4Addr::new(169, 254, 169, 253),
    Ipv4Addr::new(169, 254, 169, 123),
    // AWS ECS task metadata and credentials.
    Ipv4Addr::new(169, 254, 170, 2),
    // AWS EKS Pod Identity agent.
    Ipv4Addr::new(169, 254, 170, 23),
    // Tencent Cloud.
    Ipv4Addr::new(169, 254, 0, 23),
    // Scaleway.
    Ipv4Addr::new(169, 254, 42, 42),
    // Alibaba Cloud.
    Ipv4Addr::new(100, 100, 100, 200),
    // Azure WireServer (the host agent's endpoint): a public-looking address.
    Ipv4Addr::new(168, 63, 129, 16),
    // Oracle Cloud Classic.
    Ipv4Addr::new(192, 0, 0, 192),
];

/// IPv6 metadata addresses and blocks (address, prefix length).
const METADATA_V6: &[(Ipv6Addr, u8)] = &[
    // AWS: IMDS (::254), DNS (::253), time sync (::123), EKS Pod Identity
    // (::23) and whatever else it adds to its instance-service block.
    (Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0), 32),
    // GCP's metadata server on IPv6-only instances.
    (Ipv6Addr::new(0xfd20, 0xce, 0, 0, 0, 0, 0, 0x254), 128),
    // Oracle Cloud over IPv6.
    (Ipv6Addr::new(0xfd00, 0xc1, 0, 0, 0, 0, 0xa9fe, 0xa9fe), 128),
    // Akamai (Linode) over IPv6.
    (Ipv6Addr::new(0xfd00, 0xa9fe, 0xa9fe, 0, 0, 0, 0, 1), 128),
    // Scaleway over IPv6.
    (Ipv6Addr::new(0xfd00, 0x42, 0, 0, 0, 0, 0, 0x42), 128),
];

/// The IPv4 blocks refused, most specific first (the first match wins).
pub(super) const V4_BLOCKS: &[(Ipv4Addr, u8, Forbidden)] = &[
    // "This network" (RFC 791) and "this host on this network" (0.0.0.0/32).
    (Ipv4Addr::new(0, 0, 0, 0), 8, Unspecified),
    (Ipv4Addr::new(10, 0, 0, 0), 8, Private),
    (Ipv4Addr::new(100, 64, 0, 0), 10, SharedAddressSpace),
    (Ipv4Addr::new(127, 0, 0, 0), 8, Loopback),
    (Ipv4Addr::new(169, 254, 0, 0), 16, LinkLocal),
    (Ipv4Addr::new(172, 16, 0, 0), 12, Private),
    // IETF protocol assignments: DS-Lite (192.0.0.0/29), the dummy address
    // (.8), PCP and TURN anycast (.9, .10), NAT64 discovery (.170, .171).
    (Ipv4Addr::new(192, 0, 0, 0), 24, Reserved),
    (Ipv4Addr::new(192, 0, 2, 0), 24, Documentation),
    // Deprecated 6to4 relay anycast (RFC 7526).
    (Ipv4Addr::new(192, 88, 99, 0), 24, Reserved),
    (Ipv4Addr::new(192, 168, 0, 0), 16, Private),
    (Ipv4Addr::new(198, 18, 0, 0), 15, Benchmarking),
    (Ipv4Addr::new(198, 51, 100, 0), 24, Documentation),
    (Ipv4Addr::new(203, 0, 113, 0), 24, Documentation),
    (Ipv4Addr::new(224, 0, 0, 0), 4, Multicast),
    (Ipv4Addr::new(255, 255, 255, 255), 32, Unspecified),
    (Ipv4Addr::new(240, 0, 0, 0), 4, Reserved),
];

/// The IPv6 blocks refused (`Some`) or allowed inside a refused block
/// (`None`), most specific first (the first match wins). Addresses that
/// embed an IPv4 address are decided before this table.
pub(super) const V6_BLOCKS: &[(Ipv6Addr, u8, Option<Forbidden>)] = &[
    (Ipv6Addr::LOCALHOST, 128, Some(Loopback)),
    (Ipv6Addr::UNSPECIFIED, 128, Some(Unspecified)),
    // Discard-only (RFC 6666) and the dummy prefix (RFC 9780).
    (
        Ipv6Addr::new(0x100, 0, 0, 0, 0, 0, 0, 0),
        64,
        Some(Reserved),
    ),
    (
        Ipv6Addr::new(0x100, 0, 0, 1, 0, 0, 0, 0),
        64,
        Some(Reserved),
    ),
    // Globally reachable services inside 2001::/23.
    (Ipv6Addr::new(0x2001, 1, 0, 0, 0, 0, 0, 1), 128, None),
    (Ipv6Addr::new(0x2001, 1, 0, 0, 0, 0, 0, 2), 128, None),
    (Ipv6Addr::new(0x2001, 1, 0, 0, 0, 0, 0, 3), 128, None),
    (Ipv6Addr::new(0x2001, 3, 0, 0, 0, 0, 0, 0), 32, None),
    (Ipv6Addr::new(0x2001, 4, 0x112, 0, 0, 0, 0, 0), 48, None),
    (Ipv6Addr::new(0x2001, 0x20, 0, 0, 0, 0, 0, 0), 28, None),
    (Ipv6Addr::new(0x2001, 0x30, 0, 0, 0, 0, 0, 0), 28, None),
    (
        Ipv6Addr::new(0x2001, 2, 0, 0, 0, 0, 0, 0),
        48,
        Some(Benchmarking),
    ),
    // The rest of the IETF protocol assignments (ORCHID v1 among them).
    (
        Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0),
        23,
        Some(Reserved),
    ),
    (
        Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0),
        32,
        Some(Documentation),
    ),
    (
        Ipv6Addr::new(0x3fff, 0, 0, 0, 0, 0, 0, 0),
        20,
        Some(Documentation),
    ),
    // Segment routing SIDs (RFC 9602).
    (
        Ipv6Addr::new(0x5f00, 0, 0, 0, 0, 0, 0, 0),
        16,
        Some(Reserved),
    ),
    (Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0), 7, Some(Private)),
    (
        Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0),
        10,
        Some(LinkLocal),
    ),
    // Site-local, deprecated (RFC 3879) but still routed inside some sites.
    (
        Ipv6Addr::new(0xfec0, 0, 0, 0, 0, 0, 0, 0),
        10,
        Some(Private),
    ),
    (
        Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0),
        8,
        Some(Multicast),
    ),
];

/// The IPv4 addresses an IPv6 address carries, and whether traffic to it
/// reaches the first of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Embedded {
    /// IPv4-mapped (`::ffff:a.b.c.d`, which a dual-stack socket connects to
    /// over IPv4) and NAT64's well-known prefix (64:ff9b::/96) reach their
    /// IPv4 address, and are decided as it. Every other form is refused:
    /// IPv4-compatible (`::a.b.c.d`) and IPv4-translated (`::ffff:0:a.b.c.d`)
    /// are deprecated, 6to4 (2002::/16) and Teredo (2001::/32) are marked
    /// not globally reachable ("N/A") in the registry, and local-use NAT64
    /// (64:ff9b:1::/48) is local by definition.
    pub(super) reaches: bool,
    addresses: [Ipv4Addr; 4],
    len: usize,
    /// How many of the addresses name the reason it is refused for (the
    /// other NAT64 layouts are seen only by deny lists and the metadata
    /// check).
    decisive: usize,
}

impl Embedded {
    fn one(reaches: bool, v4: Ipv4Addr) -> Self {
        Self {
            reaches,
            addresses: [v4; 4],
            len: 1,
            decisive: 1,
        }
    }

    /// Every IPv4 address the form may carry: one, both Teredo ends, or
    /// each RFC 6052 layout of a local-use NAT64 prefix (/48 to /96).
    pub(super) fn addresses(&self) -> &[Ipv4Addr] {
        &self.addresses[..self.len]
    }

    fn decisive(&self) -> &[Ipv4Addr] {
        &self.addresses[..self.decisive]
    }
}

/// The IPv4 addresses `v6` carries, if it is one of the embedding forms.
pub(super) fn embedded(v6: Ipv6Addr) -> Option<Embedded> {
    let bits = u128::from(v6);
    let o = v6.octets();
    let low32 = Ipv4Addr::new(o[12], o[13], o[14], o[15]);
    if let Some(v4) = v6.to_ipv4_mapped() {
        Some(Embedded::one(true, v4))
    } else if within_v6(v6, Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0), 96) {
        Some(Embedded::one(true, low32))
    } else if within_v6(v6, Ipv6Addr::new(0x2002, 0, 0, 0, 0, 0, 0, 0), 16) {
        Some(Embedded::one(false, Ipv4Addr::new(o[2], o[3], o[4], o[5])))
    } else if within_v6(v6, Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0), 32) {
        let client = Ipv4Addr::from(!(bits as u32));
        let server = Ipv4Addr::new(o[4], o[5], o[6], o[7]);
        Some(Embedded {
            reaches: false,
            addresses: [client, server, client, client],
            len: 2,
            decisive: 2,
        })
    } else if within_v6(v6, Ipv6Addr::new(0x64, 0xff9b, 1, 0, 0, 0, 0, 0), 48) {
        // RFC 6052 section 2.2: bits 64 to 71 are never part of the address.
        Some(Embedded {
            reaches: false,
            addresses: [
                low32,
                Ipv4Addr::new(o[9], o[10], o[11], o[12]),
                Ipv4Addr::new(o[7], o[9], o[10], o[11]),
                Ipv4Addr::new(o[6], o[7], o[9], o[10]),
            ],
            len: 4,
            decisive: 1,
        })
    } else if within_v6(v6, Ipv6Addr::new(0, 0, 0, 0, 0xffff, 0, 0, 0), 96)
        || (bits >> 32 == 0 && bits > 1)
    {
        // IPv4-translated, then IPv4-compatible (but not :: or ::1).
        Some(Embedded::one(false, low32))
    } else {
        None
    }
}

/// Whether `address`, or any IPv4 address it carries, is a metadata address.
pub(super) fn is_metadata(address: IpAddr) -> bool {
    match address {
        IpAddr::V4(v4) => METADATA_V4.contains(&v4),
        IpAddr::V6(v6) => {
            METADATA_V6
                .iter()
                .any(|(network, len)| within_v6(v6, *network, *len))
                || embedded(v6).is_some_and(|inside| {
                    inside.addresses().iter().any(|v4| METADATA_V4.contains(v4))
                })
        }
    }
}

/// Why `v4` is not globally reachable, or `None` when it is.
pub(super) fn classify_v4(v4: Ipv4Addr) -> Option<Forbidden> {
    V4_BLOCKS
        .iter()
        .find(|(network, len, _)| within_v4(v4, *network, *len))
        .map(|(_, _, reason)| *reason)
}

/// Why `v6` is not globally reachable, or `None` when it is. A form that
/// reaches an IPv4 address is decided as that address; the other embedding
/// forms are refused, for the reason of an address inside where one has a
/// reason, else as reserved.
pub(super) fn classify_v6(v6: Ipv6Addr) -> Option<Forbidden> {
    if let Some(inside) = embedded(v6) {
        let mut reasons = inside.decisive().iter().filter_map(|v4| classify_v4(*v4));
        return match (inside.reaches, reasons.next()) {
            (true, reason) => reason,
            (false, reason) => Some(reason.unwrap_or(Reserved)),
        };
    }
    if let Some((_, _, verdict)) = V6_BLOCKS
        .iter()
        .find(|(network, len, _)| within_v6(v6, *network, *len))
    {
        return *verdict;
    }
    // Outside 2000::/3 nothing is allocated for global unicast.
    (!within_v6(v6, Ipv6Addr::new(0x2000, 0, 0, 0, 0, 0, 0, 0), 3)).then_some(Reserved)
}

fn within_v4(address: Ipv4Addr, network: Ipv4Addr, len: u8) -> bool {
    let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
    u32::from(address) & mask == u32::from(network) & mask
}

fn within_v6(address: Ipv6Addr, network: Ipv6Addr, len: u8) -> bool {
    let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
    u128::from(address) & mask == u128::from(network) & mask
}
