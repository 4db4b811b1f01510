//! Which addresses a declared name may resolve to (docs/security.md, "Which addresses a
//! name may resolve to"): one table of the IANA IPv4 and IPv6 Special-Purpose Address
//! Registries, completed by the two blocks of the IANA address-space registries that are
//! not unicast (IPv4 multicast, and every IPv6 address outside `2000::/3`, the only block
//! IANA allocates as global unicast). An address is admitted only when the most specific
//! block holding it is globally reachable (or when no block holds it); an address of a
//! mapped or translated form (IPv4-mapped, IPv4-compatible, NAT64, 6to4, Teredo) is also
//! classified by the IPv4 address it embeds, and refused when that one is.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::LazyLock;

/// The registry's "Globally Reachable" column, as revl applies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// `True`: admitted (unless what it embeds is refused).
    Global,
    /// `False`: refused.
    NotGlobal,
    /// `N/A` (a deprecated or tunnelling block): refused.
    NotApplicable,
    /// `True` in the registry, but the block holds identifiers that are not routable at the
    /// IP layer (ORCHIDv2, RFC 7343; DETs, RFC 9374): refused, no public service lives there.
    Identifier,
}

/// An IPv4 address a block carries inside its IPv6 addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Embeds {
    None,
    /// The last 32 bits (IPv4-mapped, IPv4-compatible, NAT64 `64:ff9b::/96`).
    Low32,
    /// Bits 16..48 (6to4, RFC 3056).
    SixToFour,
    /// The server at bits 32..64 and the client, inverted, at bits 96..128 (Teredo, RFC 4380).
    Teredo,
}

/// One row: the block, its name in the registry, where it is defined, and its reach.
#[derive(Debug, Clone, Copy)]
pub struct Row {
    pub prefix: &'static str,
    pub name: &'static str,
    pub source: &'static str,
    pub reach: Reach,
    embeds: Embeds,
}

const fn row(prefix: &'static str, name: &'static str, source: &'static str, reach: Reach) -> Row {
    Row {
        prefix,
        name,
        source,
        reach,
        embeds: Embeds::None,
    }
}

const fn embedding(
    prefix: &'static str,
    name: &'static str,
    source: &'static str,
    reach: Reach,
    embeds: Embeds,
) -> Row {
    Row {
        prefix,
        name,
        source,
        reach,
        embeds,
    }
}

use Reach::{Global, Identifier, NotApplicable, NotGlobal};

/// The IANA IPv4 Special-Purpose Address Registry, and the multicast block of the IANA IPv4
/// Address Space Registry.
pub const V4: &[Row] = &[
    row("0.0.0.0/8", "\"this network\"", "RFC 791", NotGlobal),
    row(
        "0.0.0.0/32",
        "\"this host on this network\"",
        "RFC 1122",
        NotGlobal,
    ),
    row("10.0.0.0/8", "private-use", "RFC 1918", NotGlobal),
    row(
        "100.64.0.0/10",
        "shared address space (CGNAT)",
        "RFC 6598",
        NotGlobal,
    ),
    row("127.0.0.0/8", "loopback", "RFC 1122", NotGlobal),
    row("169.254.0.0/16", "link-local", "RFC 3927", NotGlobal),
    row("172.16.0.0/12", "private-use", "RFC 1918", NotGlobal),
    row(
        "192.0.0.0/24",
        "IETF protocol assignments",
        "RFC 6890",
        NotGlobal,
    ),
    row(
        "192.0.0.0/29",
        "IPv4 service continuity prefix",
        "RFC 7335",
        NotGlobal,
    ),
    row("192.0.0.8/32", "IPv4 dummy address", "RFC 7600", NotGlobal),
    row(
        "192.0.0.9/32",
        "Port Control Protocol anycast",
        "RFC 7723",
        Global,
    ),
    row("192.0.0.10/32", "TURN anycast", "RFC 8155", Global),
    row(
        "192.0.0.170/32",
        "NAT64/DNS64 discovery",
        "RFC 8880",
        NotGlobal,
    ),
    row(
        "192.0.0.171/32",
        "NAT64/DNS64 discovery",
        "RFC 8880",
        NotGlobal,
    ),
    row(
        "192.0.2.0/24",
        "documentation (TEST-NET-1)",
        "RFC 5737",
        NotGlobal,
    ),
    row("192.31.196.0/24", "AS112-v4", "RFC 7535", Global),
    row("192.52.193.0/24", "AMT", "RFC 7450", Global),
    row(
        "192.88.99.0/24",
        "deprecated (6to4 relay anycast)",
        "RFC 7526",
        NotApplicable,
    ),
    row("192.168.0.0/16", "private-use", "RFC 1918", NotGlobal),
    row(
        "192.175.48.0/24",
        "direct delegation AS112 service",
        "RFC 7534",
        Global,
    ),
    row("198.18.0.0/15", "benchmarking", "RFC 2544", NotGlobal),
    row(
        "198.51.100.0/24",
        "documentation (TEST-NET-2)",
        "RFC 5737",
        NotGlobal,
    ),
    row(
        "203.0.113.0/24",
        "documentation (TEST-NET-3)",
        "RFC 5737",
        NotGlobal,
    ),
    row(
        "224.0.0.0/4",
        "multicast",
        "RFC 5771, IPv4 Address Space Registry",
        NotGlobal,
    ),
    row("240.0.0.0/4", "reserved", "RFC 1112", NotGlobal),
    row(
        "255.255.255.255/32",
        "limited broadcast",
        "RFC 919",
        NotGlobal,
    ),
];

/// The IANA IPv6 Special-Purpose Address Registry, the deprecated IPv4-compatible form, and
/// the non-unicast blocks of the IANA IPv6 Address Space Registry (everything outside
/// `2000::/3`; its multicast and deprecated site-local blocks named).
pub const V6: &[Row] = &[
    row("::/128", "unspecified address", "RFC 4291", NotGlobal),
    row("::1/128", "loopback address", "RFC 4291", NotGlobal),
    embedding(
        "::/96",
        "IPv4-compatible address (deprecated)",
        "RFC 4291, IPv6 Address Space Registry",
        NotGlobal,
        Embeds::Low32,
    ),
    embedding(
        "::ffff:0:0/96",
        "IPv4-mapped address",
        "RFC 4291",
        NotGlobal,
        Embeds::Low32,
    ),
    embedding(
        "64:ff9b::/96",
        "IPv4-IPv6 translation (NAT64)",
        "RFC 6052",
        Global,
        Embeds::Low32,
    ),
    row(
        "64:ff9b:1::/48",
        "IPv4-IPv6 translation (local-use NAT64)",
        "RFC 8215",
        NotGlobal,
    ),
    row(
        "100::/64",
        "discard-only address block",
        "RFC 6666",
        NotGlobal,
    ),
    row("100:0:0:1::/64", "dummy IPv6 prefix", "RFC 9780", NotGlobal),
    row(
        "2001::/23",
        "IETF protocol assignments",
        "RFC 2928",
        NotGlobal,
    ),
    embedding(
        "2001::/32",
        "Teredo",
        "RFC 4380",
        NotApplicable,
        Embeds::Teredo,
    ),
    row(
        "2001:1::1/128",
        "Port Control Protocol anycast",
        "RFC 7723",
        Global,
    ),
    row("2001:1::2/128", "TURN anycast", "RFC 8155", Global),
    row(
        "2001:1::3/128",
        "DNS-SD service registration protocol anycast",
        "RFC 9665",
        Global,
    ),
    row("2001:2::/48", "benchmarking", "RFC 5180", NotGlobal),
    row("2001:3::/32", "AMT", "RFC 7450", Global),
    row("2001:4:112::/48", "AS112-v6", "RFC 7535", Global),
    row(
        "2001:10::/28",
        "deprecated (previously ORCHID)",
        "RFC 4843",
        NotApplicable,
    ),
    row("2001:20::/28", "ORCHIDv2", "RFC 7343", Identifier),
    row(
        "2001:30::/28",
        "drone remote ID entity tags (DETs)",
        "RFC 9374",
        Identifier,
    ),
    row("2001:db8::/32", "documentation", "RFC 3849", NotGlobal),
    embedding(
        "2002::/16",
        "6to4",
        "RFC 3056",
        NotApplicable,
        Embeds::SixToFour,
    ),
    row(
        "2620:4f:8000::/48",
        "direct delegation AS112 service",
        "RFC 7534",
        Global,
    ),
    row("3fff::/20", "documentation", "RFC 9637", NotGlobal),
    row(
        "5f00::/16",
        "segment routing (SRv6) SIDs",
        "RFC 9602",
        NotGlobal,
    ),
    row("fc00::/7", "unique-local (private)", "RFC 4193", NotGlobal),
    row("fe80::/10", "link-local unicast", "RFC 4291", NotGlobal),
    row(
        "fec0::/10",
        "site-local (deprecated)",
        "RFC 3879, IPv6 Address Space Registry",
        NotGlobal,
    ),
    row(
        "ff00::/8",
        "multicast",
        "RFC 4291, IPv6 Address Space Registry",
        NotGlobal,
    ),
    // Below 2000::/3 and above it: reserved or unassigned by the IPv6 Address Space
    // Registry (the rows above are more specific and win where they apply).
    row(
        "::/3",
        "outside global unicast (2000::/3)",
        "IPv6 Address Space Registry",
        NotGlobal,
    ),
    row(
        "4000::/2",
        "outside global unicast (2000::/3)",
        "IPv6 Address Space Registry",
        NotGlobal,
    ),
    row(
        "8000::/1",
        "outside global unicast (2000::/3)",
        "IPv6 Address Space Registry",
        NotGlobal,
    ),
];

struct Parsed {
    v4: Vec<(u32, u32, &'static Row)>,
    v6: Vec<(u128, u32, &'static Row)>,
}

fn mask32(len: u32) -> u32 {
    if len == 0 {
        0
    } else {
        u32::MAX << (32 - len)
    }
}

fn mask128(len: u32) -> u128 {
    if len == 0 {
        0
    } else {
        u128::MAX << (128 - len)
    }
}

/// `(network, length)` of a row's prefix (checked by the tests: every prefix parses and
/// has no host bits).
fn split(prefix: &str) -> (&str, u32) {
    let (a, l) = prefix.split_once('/').expect("a prefix has a length");
    (a, l.parse().expect("a prefix length"))
}

static TABLE: LazyLock<Parsed> = LazyLock::new(|| Parsed {
    v4: V4
        .iter()
        .map(|r| {
            let (a, l) = split(r.prefix);
            (
                u32::from(a.parse::<Ipv4Addr>().expect("an IPv4 prefix")),
                l,
                r,
            )
        })
        .collect(),
    v6: V6
        .iter()
        .map(|r| {
            let (a, l) = split(r.prefix);
            (
                u128::from(a.parse::<Ipv6Addr>().expect("an IPv6 prefix")),
                l,
                r,
            )
        })
        .collect(),
});

/// The most specific row holding `a`, if any.
pub fn row_v4(a: &Ipv4Addr) -> Option<&'static Row> {
    let x = u32::from(*a);
    TABLE
        .v4
        .iter()
        .filter(|(n, l, _)| x & mask32(*l) == *n)
        .max_by_key(|(_, l, _)| *l)
        .map(|(_, _, r)| *r)
}

/// The most specific row holding `a`, if any.
pub fn row_v6(a: &Ipv6Addr) -> Option<&'static Row> {
    let x = u128::from(*a);
    TABLE
        .v6
        .iter()
        .filter(|(n, l, _)| x & mask128(*l) == *n)
        .max_by_key(|(_, l, _)| *l)
        .map(|(_, _, r)| *r)
}

fn describe(r: &Row) -> String {
    let reach = match r.reach {
        Global => "globally reachable",
        NotGlobal => "not globally reachable",
        NotApplicable => "globally reachable: N/A (deprecated, or a tunnel's)",
        Identifier => "identifiers, not routable",
    };
    format!("in {} ({}, {}): {reach}", r.prefix, r.name, r.source)
}

/// The IPv4 addresses an IPv6 address of row `r` carries.
fn embedded(r: &Row, a: &Ipv6Addr) -> Vec<Ipv4Addr> {
    let x = u128::from(*a);
    match r.embeds {
        Embeds::None => Vec::new(),
        Embeds::Low32 => vec![Ipv4Addr::from(x as u32)],
        Embeds::SixToFour => vec![Ipv4Addr::from((x >> 80) as u32)],
        Embeds::Teredo => vec![
            Ipv4Addr::from((x >> 64) as u32),
            Ipv4Addr::from(!(x as u32)),
        ],
    }
}

/// Why an address a declared name resolved to is refused (`None`: admitted), e.g. `in
/// 198.18.0.0/15 (benchmarking, RFC 2544): not globally reachable`.
pub fn refused(ip: &IpAddr) -> Option<String> {
    match ip {
        IpAddr::V4(a) => row_v4(a).filter(|r| r.reach != Global).map(describe),
        IpAddr::V6(a) => {
            let r = row_v6(a)?;
            // What it embeds, where that is refused.
            let inner: Vec<String> = embedded(r, a)
                .iter()
                .filter_map(|v4| refused(&IpAddr::V4(*v4)).map(|why| format!("{v4}, {why}")))
                .collect();
            if r.reach == Global {
                if inner.is_empty() {
                    return None;
                }
                return Some(format!(
                    "in {} ({}, {}), embedding {}",
                    r.prefix,
                    r.name,
                    r.source,
                    inner.join("; and ")
                ));
            }
            let mut why = describe(r);
            for i in inner {
                why.push_str("; it embeds ");
                why.push_str(&i);
            }
            Some(why)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_prefix_parses_and_has_no_host_bits() {
        for (n, l, r) in &TABLE.v4 {
            assert!(*l <= 32, "{}", r.prefix);
            assert_eq!(n & !mask32(*l), 0, "{} has host bits", r.prefix);
        }
        for (n, l, r) in &TABLE.v6 {
            assert!(*l <= 128, "{}", r.prefix);
            assert_eq!(n & !mask128(*l), 0, "{} has host bits", r.prefix);
        }
    }

    fn is_refused(a: &str) -> bool {
        refused(&a.parse().unwrap()).is_some()
    }

    /// One test per block: each address listed under `refused` is refused, each under
    /// `admitted` admitted; at least one of them lies in the block (its most specific row),
    /// and the others just outside it.
    macro_rules! blocks {
        ($($test:ident: $prefix:literal refused [$($no:literal),*] admitted [$($yes:literal),*];)+) => {
            $(
                #[test]
                fn $test() {
                    let row = |a: &str| match a.parse::<IpAddr>().unwrap() {
                        IpAddr::V4(a) => row_v4(&a).map(|r| r.prefix),
                        IpAddr::V6(a) => row_v6(&a).map(|r| r.prefix),
                    };
                    let all: &[&str] = &[$($no,)* $($yes,)*];
                    assert!(
                        all.iter().any(|a| row(a) == Some($prefix)),
                        "no address of the test lies in {}", $prefix
                    );
                    $(
                        assert!(is_refused($no), "{} (near {}) was admitted", $no, $prefix);
                    )*
                    $(
                        assert!(!is_refused($yes), "{} (near {}) was refused: {:?}", $yes, $prefix, refused(&$yes.parse().unwrap()));
                    )*
                }
            )+
            /// Every row of the table has its test.
            #[test]
            fn every_row_has_its_test() {
                let tested = [$($prefix),+];
                for r in V4.iter().chain(V6) {
                    assert!(tested.contains(&r.prefix), "{} has no test", r.prefix);
                }
            }
        };
    }

    blocks! {
        v4_this_network: "0.0.0.0/8" refused ["0.1.2.3", "0.255.255.255"] admitted ["1.0.0.0"];
        v4_this_host: "0.0.0.0/32" refused ["0.0.0.0", "0.0.0.1"] admitted [];
        v4_private_10: "10.0.0.0/8" refused ["10.0.0.1", "10.255.255.255"] admitted ["9.255.255.255", "11.0.0.0"];
        v4_cgnat: "100.64.0.0/10" refused ["100.64.0.0", "100.127.255.255"] admitted ["100.63.255.255", "100.128.0.0"];
        v4_loopback: "127.0.0.0/8" refused ["127.0.0.1", "127.255.255.254"] admitted ["126.255.255.255", "128.0.0.0"];
        v4_link_local: "169.254.0.0/16" refused ["169.254.169.254", "169.254.0.1"] admitted ["169.253.255.255", "169.255.0.0"];
        v4_private_172: "172.16.0.0/12" refused ["172.16.0.1", "172.31.255.255"] admitted ["172.15.255.255", "172.32.0.0"];
        v4_ietf: "192.0.0.0/24" refused ["192.0.0.11", "192.0.0.255"] admitted ["191.255.255.255", "192.0.1.0"];
        v4_service_continuity: "192.0.0.0/29" refused ["192.0.0.1", "192.0.0.7"] admitted ["192.0.0.9"];
        v4_dummy: "192.0.0.8/32" refused ["192.0.0.8", "192.0.0.7"] admitted ["192.0.0.9"];
        v4_pcp_anycast: "192.0.0.9/32" refused ["192.0.0.8"] admitted ["192.0.0.9"];
        v4_turn_anycast: "192.0.0.10/32" refused ["192.0.0.11"] admitted ["192.0.0.10"];
        v4_nat64_discovery_170: "192.0.0.170/32" refused ["192.0.0.170", "192.0.0.169"] admitted [];
        v4_nat64_discovery_171: "192.0.0.171/32" refused ["192.0.0.171", "192.0.0.172"] admitted [];
        v4_test_net_1: "192.0.2.0/24" refused ["192.0.2.0", "192.0.2.255"] admitted ["192.0.1.255", "192.0.3.0"];
        v4_as112: "192.31.196.0/24" refused [] admitted ["192.31.196.1", "192.31.195.255", "192.31.197.0"];
        v4_amt: "192.52.193.0/24" refused [] admitted ["192.52.193.1", "192.52.192.255", "192.52.194.0"];
        v4_6to4_relay: "192.88.99.0/24" refused ["192.88.99.1", "192.88.99.255"] admitted ["192.88.98.255", "192.88.100.0"];
        v4_private_192: "192.168.0.0/16" refused ["192.168.0.1", "192.168.255.255"] admitted ["192.167.255.255", "192.169.0.0"];
        v4_as112_delegation: "192.175.48.0/24" refused [] admitted ["192.175.48.1", "192.175.47.255", "192.175.49.0"];
        v4_benchmarking: "198.18.0.0/15" refused ["198.18.0.1", "198.19.255.255"] admitted ["198.17.255.255", "198.20.0.0"];
        v4_test_net_2: "198.51.100.0/24" refused ["198.51.100.7", "198.51.100.255"] admitted ["198.51.99.255", "198.51.101.0"];
        v4_test_net_3: "203.0.113.0/24" refused ["203.0.113.9", "203.0.113.0"] admitted ["203.0.112.255", "203.0.114.0"];
        v4_multicast: "224.0.0.0/4" refused ["224.0.0.1", "239.255.255.255", "240.0.0.0"] admitted ["223.255.255.255"];
        v4_reserved: "240.0.0.0/4" refused ["240.0.0.1", "255.255.255.254", "239.255.255.255"] admitted [];
        v4_broadcast: "255.255.255.255/32" refused ["255.255.255.255", "255.255.255.254"] admitted [];
        v6_unspecified: "::/128" refused ["::", "::2"] admitted [];
        v6_loopback: "::1/128" refused ["::1", "::2"] admitted [];
        v6_ipv4_compatible: "::/96" refused ["::8.8.8.8", "::127.0.0.1", "::1:0:0"] admitted [];
        v6_ipv4_mapped: "::ffff:0:0/96" refused ["::ffff:8.8.8.8", "::ffff:127.0.0.1", "::ffff:10.0.0.1", "::fffe:ffff:ffff", "::1:0:0:0"] admitted [];
        v6_nat64: "64:ff9b::/96" refused ["64:ff9b::127.0.0.1", "64:ff9b::10.0.0.1", "64:ff9b::169.254.169.254", "64:ff9b::198.18.0.1", "64:ff9b::100.64.0.1", "64:ff9b::1:0:0", "64:ff9a:ffff:ffff:ffff:ffff:ffff:ffff"] admitted ["64:ff9b::8.8.8.8"];
        v6_nat64_local: "64:ff9b:1::/48" refused ["64:ff9b:1::8.8.8.8", "64:ff9b:1:ffff:ffff:ffff:ffff:ffff", "64:ff9b:2::"] admitted [];
        v6_discard_only: "100::/64" refused ["100::", "100::ffff:ffff:ffff:ffff", "100:0:0:2::"] admitted [];
        v6_dummy_prefix: "100:0:0:1::/64" refused ["100:0:0:1::1", "100:0:0:2::"] admitted [];
        v6_ietf: "2001::/23" refused ["2001:1::4", "2001:1ff:ffff::"] admitted ["2001:200::", "2000:ffff:ffff:ffff::"];
        v6_teredo: "2001::/32" refused ["2001:0:4136:e378:8000:63bf:3fff:fdd2", "2001:0:7f00:1::ffff:fffe"] admitted ["2001:1::1"];
        v6_pcp_anycast: "2001:1::1/128" refused ["2001:1::"] admitted ["2001:1::1"];
        v6_turn_anycast: "2001:1::2/128" refused ["2001:1::4"] admitted ["2001:1::2"];
        v6_dnssd_srp_anycast: "2001:1::3/128" refused ["2001:1::5"] admitted ["2001:1::3"];
        v6_benchmarking: "2001:2::/48" refused ["2001:2::1", "2001:2:0:ffff::1", "2001:2:1::"] admitted [];
        v6_amt: "2001:3::/32" refused ["2001:4::", "2001:2:ffff::"] admitted ["2001:3::1", "2001:3:ffff::1"];
        v6_as112: "2001:4:112::/48" refused ["2001:4:111::1", "2001:4:113::"] admitted ["2001:4:112::1"];
        v6_orchid: "2001:10::/28" refused ["2001:10::1", "2001:1f:ffff::", "2001:f::"] admitted [];
        v6_orchid_v2: "2001:20::/28" refused ["2001:20::1", "2001:2f::", "2001:1f::"] admitted [];
        v6_dets: "2001:30::/28" refused ["2001:30::1", "2001:3f::", "2001:40::"] admitted [];
        v6_documentation: "2001:db8::/32" refused ["2001:db8::1", "2001:db8:ffff::"] admitted ["2001:db7:ffff::", "2001:db9::"];
        v6_6to4: "2002::/16" refused ["2002:808:808::1", "2002:7f00:1::1", "2002:a00:1::1"] admitted ["2001:ffff::", "2003::1"];
        v6_as112_delegation: "2620:4f:8000::/48" refused [] admitted ["2620:4f:8000::1", "2620:4f:7fff::", "2620:4f:8001::"];
        v6_documentation_3fff: "3fff::/20" refused ["3fff::1", "3fff:fff:ffff::"] admitted ["3ffe:ffff::", "3fff:1000::"];
        v6_srv6: "5f00::/16" refused ["5f00::1", "5f01::"] admitted [];
        v6_unique_local: "fc00::/7" refused ["fc00::1", "fd12:3456::1", "fbff::", "fe00::"] admitted [];
        v6_link_local: "fe80::/10" refused ["fe80::1", "febf::1", "fec0::"] admitted [];
        v6_site_local: "fec0::/10" refused ["fec0::1", "feff::1", "ff00::"] admitted [];
        v6_multicast: "ff00::/8" refused ["ff02::1", "ff0e::1", "feff::"] admitted [];
        v6_below_global_unicast: "::/3" refused ["1fff:ffff::"] admitted ["2000::"];
        v6_above_global_unicast: "4000::/2" refused ["4000::", "7fff::"] admitted ["3fff:ffff::"];
        v6_upper_half: "8000::/1" refused ["8000::", "e000::", "7fff::"] admitted [];
    }

    #[test]
    fn a_translated_or_mapped_form_is_classified_by_what_it_embeds() {
        let why = refused(&"64:ff9b::7f00:1".parse().unwrap()).unwrap();
        assert!(
            why.contains("embedding 127.0.0.1") && why.contains("loopback"),
            "{why}"
        );
        let why = refused(&"::ffff:10.1.2.3".parse().unwrap()).unwrap();
        assert!(
            why.contains("IPv4-mapped") && why.contains("private-use"),
            "{why}"
        );
        let why = refused(&"2002:c0a8:101::1".parse().unwrap()).unwrap();
        assert!(
            why.contains("6to4") && why.contains("embeds 192.168.1.1"),
            "{why}"
        );
        // Teredo: server 65.54.227.120 (public), client 127.0.0.1 (inverted in the address).
        let why = refused(&"2001:0:4136:e378::80ff:fffe".parse().unwrap()).unwrap();
        assert!(
            why.contains("Teredo") && why.contains("embeds 127.0.0.1"),
            "{why}"
        );
        assert!(!why.contains("embeds 65.54.227.120"), "{why}");
        assert_eq!(refused(&"64:ff9b::1.1.1.1".parse().unwrap()), None);
    }

    #[test]
    fn public_addresses_are_admitted() {
        for a in [
            "1.1.1.1",
            "8.8.8.8",
            "151.101.0.223",
            "2a04:4e42::223",
            "2606:4700:4700::1111",
            "2001:4860:4860::8888",
        ] {
            assert!(!is_refused(a), "{a}: {:?}", refused(&a.parse().unwrap()));
        }
    }
}
