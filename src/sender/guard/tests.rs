use std::net::IpAddr;

use super::ranges::{V4_BLOCKS, V6_BLOCKS};
use super::*;

fn strict(address: &str) -> Result<(), Forbidden> {
    check_address(address.parse().unwrap(), &AddressPolicy::strict())
}

/// One row per block of the tables: its first and last address, and one
/// address on each side that is outside every block.
#[test]
fn every_ipv4_block_is_refused_from_its_first_to_its_last_address() {
    for (network, len, reason) in V4_BLOCKS {
        let first = u32::from(*network);
        let last = first | u32::MAX.checked_shr(u32::from(*len)).unwrap_or(0);
        for address in [first, last] {
            let address = std::net::Ipv4Addr::from(address);
            let got = strict(&address.to_string());
            // 255.255.255.255 is listed before 240/4, which also holds it.
            let expected = if address.is_broadcast() {
                Forbidden::Unspecified
            } else {
                *reason
            };
            assert_eq!(got, Err(expected), "{address} in {network}/{len}");
        }
    }
}

/// Addresses just outside the blocks are allowed: a block drawn too wide
/// fails here.
#[test]
fn the_neighbours_of_each_block_are_allowed() {
    for address in [
        "1.0.0.0",
        "9.255.255.255",
        "11.0.0.0",
        "100.63.255.255",
        "100.128.0.0",
        "126.255.255.255",
        "128.0.0.0",
        "169.253.255.255",
        "169.255.0.0",
        "172.15.255.255",
        "172.32.0.0",
        "191.255.255.255",
        "192.0.1.0",
        "192.0.3.0",
        "192.88.98.255",
        "192.88.100.0",
        "192.167.255.255",
        "192.169.0.0",
        "198.17.255.255",
        "198.20.0.0",
        "198.51.99.255",
        "198.51.101.0",
        "203.0.112.255",
        "203.0.114.0",
        "223.255.255.255",
        "2001:db7:ffff::1",
        "2001:db9::1",
        "2001:200::1",
        "2002::1:0:0:0:1",
        "3ffe::1",
        "2620:4f:7fff::1",
    ] {
        let expected = if address == "2002::1:0:0:0:1" {
            // 6to4 is refused whatever it carries.
            Err(Forbidden::Unspecified)
        } else {
            Ok(())
        };
        assert_eq!(strict(address), expected, "{address}");
    }
}

#[test]
fn ipv4_table_rows() {
    for (address, reason) in [
        ("0.0.0.0", Forbidden::Unspecified),
        ("0.1.2.3", Forbidden::Unspecified),
        ("10.1.2.3", Forbidden::Private),
        ("100.64.0.1", Forbidden::SharedAddressSpace),
        ("100.127.255.254", Forbidden::SharedAddressSpace),
        ("127.0.0.1", Forbidden::Loopback),
        ("127.255.0.9", Forbidden::Loopback),
        ("169.254.1.1", Forbidden::LinkLocal),
        ("172.16.0.1", Forbidden::Private),
        ("172.31.255.255", Forbidden::Private),
        ("192.0.0.1", Forbidden::Reserved),
        ("192.0.0.8", Forbidden::Reserved),
        ("192.0.0.170", Forbidden::Reserved),
        ("192.0.2.1", Forbidden::Documentation),
        ("192.88.99.1", Forbidden::Reserved),
        ("192.168.1.1", Forbidden::Private),
        ("198.18.0.1", Forbidden::Benchmarking),
        ("198.19.255.255", Forbidden::Benchmarking),
        ("198.51.100.7", Forbidden::Documentation),
        ("203.0.113.7", Forbidden::Documentation),
        ("224.0.0.1", Forbidden::Multicast),
        ("239.255.255.250", Forbidden::Multicast),
        ("240.0.0.1", Forbidden::Reserved),
        ("255.255.255.254", Forbidden::Reserved),
        ("255.255.255.255", Forbidden::Unspecified),
    ] {
        assert_eq!(strict(address), Err(reason), "{address}");
    }
}

#[test]
fn every_ipv6_block_decides_its_first_and_last_address() {
    for (network, len, verdict) in V6_BLOCKS {
        let first = u128::from(*network);
        let last = first | u128::MAX.checked_shr(u32::from(*len)).unwrap_or(0);
        for address in [first, last].map(std::net::Ipv6Addr::from) {
            // 2001::, the first of 2001::/23, is a Teredo address.
            if super::ranges::embedded(address).is_some() {
                continue;
            }
            let got = strict(&address.to_string());
            match verdict {
                Some(reason) => assert_eq!(got, Err(*reason), "{address} in {network}/{len}"),
                None => assert_eq!(got, Ok(()), "{address} in {network}/{len}"),
            }
        }
    }
}

#[test]
fn ipv6_table_rows() {
    for (address, reason) in [
        ("::1", Forbidden::Loopback),
        ("::", Forbidden::Unspecified),
        ("100::1", Forbidden::Reserved),
        ("100:0:0:1::1", Forbidden::Reserved),
        ("2001:2::1", Forbidden::Benchmarking),
        ("2001:10::1", Forbidden::Reserved),
        ("2001:1::4", Forbidden::Reserved),
        ("2001:db8::1", Forbidden::Documentation),
        ("3fff::1", Forbidden::Documentation),
        ("5f00::1", Forbidden::Reserved),
        ("fc00::1", Forbidden::Private),
        ("fd12:3456::1", Forbidden::Private),
        ("fe80::1", Forbidden::LinkLocal),
        ("febf::1", Forbidden::LinkLocal),
        ("fec0::1", Forbidden::Private),
        ("ff02::1", Forbidden::Multicast),
        ("4000::1", Forbidden::Reserved),
        ("1::1", Forbidden::Reserved),
    ] {
        assert_eq!(strict(address), Err(reason), "{address}");
    }
    // Globally reachable inside 2001::/23, and ordinary global unicast.
    for address in [
        "2001:1::1",
        "2001:1::3",
        "2001:3::1",
        "2001:4:112::1",
        "2001:20::1",
        "2001:30::1",
        "2620:4f:8000::1",
        "2606:4700::1111",
        "2a00:1450:4001::200e",
    ] {
        assert_eq!(strict(address), Ok(()), "{address}");
    }
}

#[test]
fn ipv6_forms_carrying_ipv4_are_decided_by_the_ipv4_inside() {
    for (address, expected) in [
        // IPv4-mapped.
        ("::ffff:127.0.0.1", Err(Forbidden::Loopback)),
        ("::ffff:7f00:1", Err(Forbidden::Loopback)),
        ("::ffff:10.0.0.1", Err(Forbidden::Private)),
        ("::ffff:8.8.8.8", Ok(())),
        // IPv4-compatible (deprecated): refused even when public.
        ("::127.0.0.1", Err(Forbidden::Loopback)),
        ("::10.0.0.1", Err(Forbidden::Private)),
        ("::8.8.8.8", Err(Forbidden::Reserved)),
        // IPv4-translated (RFC 2765).
        ("::ffff:0:127.0.0.1", Err(Forbidden::Loopback)),
        ("::ffff:0:8.8.8.8", Err(Forbidden::Reserved)),
        // NAT64, well-known prefix: reaches the IPv4 address.
        ("64:ff9b::127.0.0.1", Err(Forbidden::Loopback)),
        ("64:ff9b::10.1.1.1", Err(Forbidden::Private)),
        ("64:ff9b::8.8.8.8", Ok(())),
        // NAT64, local-use prefix: never global.
        ("64:ff9b:1::127.0.0.1", Err(Forbidden::Loopback)),
        ("64:ff9b:1::8.8.8.8", Err(Forbidden::Reserved)),
        // 6to4: "N/A" in the registry, refused whatever it carries.
        ("2002:7f00:1::", Err(Forbidden::Loopback)),
        ("2002:c0a8:101::1", Err(Forbidden::Private)),
        ("2002:808:808::1", Err(Forbidden::Reserved)),
        // Teredo: server 65.54.227.120, client 127.0.0.1 obfuscated
        // (0x80fffffe), then a private server with a public client, then
        // both public: "N/A" in the registry, refused.
        (
            "2001:0:4136:e378:8000:63bf:80ff:fffe",
            Err(Forbidden::Loopback),
        ),
        ("2001:0:a00:1:8000:63bf:f7f7:f7f7", Err(Forbidden::Private)),
        (
            "2001:0:4136:e378:8000:63bf:f7f7:f7f7",
            Err(Forbidden::Reserved),
        ),
    ] {
        assert_eq!(strict(address), expected, "{address}");
    }
}

#[test]
fn metadata_addresses_are_refused_under_every_policy() {
    let everything = AddressPolicy::strict()
        .insecure_allow_loopback()
        .insecure_allow_private()
        .insecure_allow_range("0.0.0.0/0".parse().unwrap())
        .insecure_allow_range("::/0".parse().unwrap());
    for address in [
        "169.254.169.254",
        "169.254.169.253",
        "169.254.169.123",
        "169.254.170.2",
        "169.254.170.23",
        "169.254.0.23",
        "169.254.42.42",
        "100.100.100.200",
        "168.63.129.16",
        "192.0.0.192",
        "fd00:ec2::254",
        "fd00:ec2::253",
        "fd00:ec2::123",
        "fd00:ec2::23",
        "fd00:ec2::1234",
        "fd20:ce::254",
        "fd00:c1::a9fe:a9fe",
        "fd00:a9fe:a9fe::1",
        "fd00:42::42",
        // Local-use NAT64 carrying 169.254.169.254 in its /48 layout.
        "64:ff9b:1:a9fe:a9:fe00:808:808",
        // Teredo with the metadata address as its server.
        "2001:0:a9fe:a9fe:8000:63bf:f7f7:f7f7",
        "::ffff:169.254.169.254",
        "::ffff:a9fe:a9fe",
        "64:ff9b::169.254.169.254",
        "2002:a9fe:a9fe::",
        "::169.254.169.254",
    ] {
        let address: IpAddr = address.parse().unwrap();
        for policy in [AddressPolicy::strict(), everything.clone()] {
            assert_eq!(
                check_address(address, &policy),
                Err(Forbidden::Metadata),
                "{address}"
            );
        }
    }
}

#[test]
fn a_denied_range_beats_an_allowed_one_and_the_insecure_switches() {
    let policy = AddressPolicy::strict()
        .insecure_allow_private()
        .insecure_allow_range("10.20.0.0/16".parse().unwrap())
        .with_denied_range("10.20.5.0/24".parse().unwrap())
        .with_denied_range("192.168.0.0/16".parse().unwrap())
        .with_denied_range("93.184.0.0/16".parse().unwrap());
    let check = |address: &str| check_address(address.parse().unwrap(), &policy);
    assert_eq!(check("10.20.1.1"), Ok(()));
    assert_eq!(check("10.20.5.1"), Err(Forbidden::Denied));
    assert_eq!(check("192.168.1.1"), Err(Forbidden::Denied));
    assert_eq!(check("93.184.215.14"), Err(Forbidden::Denied));
    assert_eq!(check("172.16.0.1"), Ok(()));
    // IPv6 spellings of a denied IPv4 address are denied too.
    assert_eq!(check("::ffff:10.20.5.1"), Err(Forbidden::Denied));
    assert_eq!(check("64:ff9b::192.168.0.1"), Err(Forbidden::Denied));
    assert_eq!(check("2002:c0a8:1::"), Err(Forbidden::Denied));
    // Teredo's server is seen too (10.20.5.5 here), and each layout of a
    // local-use NAT64 address (10.20.5.1 at /48).
    assert_eq!(check("2001:0:a14:505::f7f7:f7f7"), Err(Forbidden::Denied));
    assert_eq!(check("64:ff9b:1:a14:5:100::"), Err(Forbidden::Denied));
}

#[test]
fn an_allowed_range_opens_only_itself() {
    let policy = AddressPolicy::strict().insecure_allow_range("10.20.0.0/16".parse().unwrap());
    let check = |address: &str| check_address(address.parse().unwrap(), &policy);
    assert_eq!(check("10.20.0.1"), Ok(()));
    assert_eq!(check("10.20.255.255"), Ok(()));
    assert_eq!(check("10.21.0.1"), Err(Forbidden::Private));
    assert_eq!(check("192.168.0.1"), Err(Forbidden::Private));
    assert_eq!(check("127.0.0.1"), Err(Forbidden::Loopback));
    // A range given with host bits set still means its network.
    let sloppy = AddressPolicy::strict().insecure_allow_range("10.20.3.4/16".parse().unwrap());
    assert_eq!(check_address("10.20.9.9".parse().unwrap(), &sloppy), Ok(()));
}

#[test]
fn the_insecure_switches_open_their_class_and_nothing_else() {
    let loopback = AddressPolicy::strict().insecure_allow_loopback();
    let private = AddressPolicy::strict().insecure_allow_private();
    let check =
        |address: &str, policy: &AddressPolicy| check_address(address.parse().unwrap(), policy);
    assert_eq!(check("127.0.0.1", &loopback), Ok(()));
    assert_eq!(check("::1", &loopback), Ok(()));
    assert_eq!(check("::ffff:127.0.0.1", &loopback), Ok(()));
    assert_eq!(check("10.0.0.1", &loopback), Err(Forbidden::Private));
    assert_eq!(check("10.0.0.1", &private), Ok(()));
    assert_eq!(check("fd12::1", &private), Ok(()));
    assert_eq!(check("127.0.0.1", &private), Err(Forbidden::Loopback));
    assert_eq!(check("169.254.1.1", &private), Err(Forbidden::LinkLocal));
    assert_eq!(
        check("100.64.0.1", &private),
        Err(Forbidden::SharedAddressSpace)
    );
}

#[test]
fn urls_are_decided_on_the_whatwg_parse() {
    let strict = AddressPolicy::strict();
    for (url, expected) in [
        ("http://2130706433/", Err(Forbidden::Loopback)),
        ("http://127.1/", Err(Forbidden::Loopback)),
        ("http://0x7f.0.0.1/", Err(Forbidden::Loopback)),
        ("http://0177.0.0.1/", Err(Forbidden::Loopback)),
        ("http://0/", Err(Forbidden::Unspecified)),
        ("http://127.0.0.1./", Err(Forbidden::Loopback)),
        ("http://%31%32%37.0.0.1/", Err(Forbidden::Loopback)),
        (
            "http://127\u{3002}0\u{3002}0\u{3002}1/",
            Err(Forbidden::Loopback),
        ),
        ("http://[::ffff:7f00:1]/", Err(Forbidden::Loopback)),
        (
            "http://169.254.169.254/latest/meta-data/",
            Err(Forbidden::Metadata),
        ),
        ("http://[fd00:ec2::254]/", Err(Forbidden::Metadata)),
        ("http://example.com@10.0.0.1/", Err(Forbidden::Private)),
        ("http://10.0.0.1\\@example.com/", Err(Forbidden::Private)),
        ("ftp://example.com/", Err(Forbidden::NotHttp)),
        ("file:///etc/passwd", Err(Forbidden::NotHttp)),
        ("not a url", Err(Forbidden::NotHttp)),
        ("/relative", Err(Forbidden::NotHttp)),
        ("http:///", Err(Forbidden::NotHttp)),
    ] {
        assert_eq!(check_url(url, &strict).map(|_| ()), expected, "{url}");
    }
    let url = check_url(" HTTPS://Hooks.Example.COM/in ", &strict).unwrap();
    assert_eq!(url.as_str(), "https://hooks.example.com/in");
}
