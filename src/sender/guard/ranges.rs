//! Which addresses are not globally reachable, as pure tables.
//!
//! Sources, as of 2026-11:
//! - IANA IPv4 Special-Purpose Address Registry
//!   (<https://www.iana.org/assignments/iana-ipv4-special-registry/>) and the
//!   IPv4 multicast registry (224.0.0.0/4);
//! - IANA IPv6 Special-Purpose Address Registry
//!   (<https://www.iana.org/assignments/iana-ipv6-special-registry/>) and the
//!   IPv6 Address Space registry (only 2000::/3 is global unicast);
//! - RFC 6052 (NAT64), RFC 3056 (6to4), RFC 4380 (Teredo), RFC 4291
//!   (IPv4-mapped and -compatible), RFC 2765 (IPv4-translated);
//! - the cloud providers' own documentation for the metadata addresses.
//!
//! Every block whose "Globally Reachable" column is False or N/A is refused.
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

const METADATA_V6: &[Ipv6Addr] = &[
    // AWS IMDS, DNS, time sync and EKS Pod Identity over IPv6.
    Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254),
    Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x253),
    Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x123),
    Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x23),
    // GCP's metadata server on IPv6-only instances.
    Ipv6Addr::new(0xfd20, 0xce, 0, 0, 0, 0, 0, 0x254),
    // Scaleway over IPv6.
    Ipv6Addr::new(0xfd00, 0x42, 0, 0, 0, 0, 0, 0x42),
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

/// An IPv4 address carried inside an IPv6 one, and how it is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Embedded {
    /// Traffic reaches this IPv4 address: IPv4-mapped (`::ffff:a.b.c.d`,
    /// which a dual-stack socket connects to over IPv4), NAT64's
    /// well-known prefix (64:ff9b::/96) and 6to4 (2002::/16).
    Reaches(Ipv4Addr),
    /// Teredo (2001::/32): the server, and the client with its
    /// obfuscation undone.
    Teredo { server: Ipv4Addr, client: Ipv4Addr },
    /// A form no global route carries: IPv4-compatible (`::a.b.c.d`),
    /// IPv4-translated (`::ffff:0:a.b.c.d`) and local-use NAT64
    /// (64:ff9b:1::/48). Refused for its own reason when the IPv4 address
    /// inside is allowed.
    Unrouted(Ipv4Addr, Forbidden),
}

/// The IPv4 address `v6` carries, if it is one of the embedding forms.
pub(super) fn embedded(v6: Ipv6Addr) -> Option<Embedded> {
    let bits = u128::from(v6);
    let low32 = Ipv4Addr::from(bits as u32);
    if let Some(v4) = v6.to_ipv4_mapped() {
        Some(Embedded::Reaches(v4))
    } else if within_v6(v6, Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0), 96) {
        Some(Embedded::Reaches(low32))
    } else if within_v6(v6, Ipv6Addr::new(0x2002, 0, 0, 0, 0, 0, 0, 0), 16) {
        Some(Embedded::Reaches(Ipv4Addr::from((bits >> 80) as u32)))
    } else if within_v6(v6, Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0), 32) {
        Some(Embedded::Teredo {
            server: Ipv4Addr::from((bits >> 64) as u32),
            client: Ipv4Addr::from(!(bits as u32)),
        })
    } else if within_v6(v6, Ipv6Addr::new(0x64, 0xff9b, 1, 0, 0, 0, 0, 0), 48) {
        Some(Embedded::Unrouted(low32, Private))
    } else if within_v6(v6, Ipv6Addr::new(0, 0, 0, 0, 0xffff, 0, 0, 0), 96)
        || (bits >> 32 == 0 && bits > 1)
    {
        // IPv4-translated, then IPv4-compatible (but not :: or ::1).
        Some(Embedded::Unrouted(low32, Reserved))
    } else {
        None
    }
}

/// The IPv4 address an IPv6 one carries, if any; for Teredo the client.
pub(super) fn embedded_v4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    match embedded(v6)? {
        Embedded::Reaches(v4) | Embedded::Unrouted(v4, _) => Some(v4),
        Embedded::Teredo { client, .. } => Some(client),
    }
}

/// Whether `address`, or the IPv4 address it carries, is a metadata address.
pub(super) fn is_metadata(address: IpAddr) -> bool {
    match address {
        IpAddr::V4(v4) => METADATA_V4.contains(&v4),
        IpAddr::V6(v6) => {
            METADATA_V6.contains(&v6)
                || match embedded(v6) {
                    Some(Embedded::Teredo { server, client }) => {
                        METADATA_V4.contains(&server) || METADATA_V4.contains(&client)
                    }
                    _ => embedded_v4(v6).is_some_and(|v4| METADATA_V4.contains(&v4)),
                }
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

/// Why `v6` is not globally reachable, or `None` when it is. An embedded
/// IPv4 address is decided as that address.
pub(super) fn classify_v6(v6: Ipv6Addr) -> Option<Forbidden> {
    match embedded(v6) {
        Some(Embedded::Reaches(v4)) => return classify_v4(v4),
        Some(Embedded::Teredo { server, client }) => {
            return classify_v4(client).or_else(|| classify_v4(server));
        }
        Some(Embedded::Unrouted(v4, own)) => return Some(classify_v4(v4).unwrap_or(own)),
        None => {}
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
