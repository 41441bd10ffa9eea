//! IP addresses as the relay sees them: canonical form, CIDR ranges, and the address classes a
//! step may not reach unless the policy names the address or its range.
//!
//! Classification is deliberately *not* "is it global?": on some machines registries resolve into
//! documentation ranges that such helpers call non-global (DESIGN section 9). The classes below
//! are exactly the ones the relay refuses, nothing more.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The address in the form every check uses: IPv4-mapped IPv6 (`::ffff:a.b.c.d`) unwrapped to
/// IPv4, because Rust's `Ipv6Addr` predicates do not see `::ffff:127.0.0.1` as loopback.
pub fn canonical(addr: IpAddr) -> IpAddr {
    addr.to_canonical()
}

/// A CIDR range such as `10.0.0.0/8` or `fd00::/8`. Host bits are always zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IpRange {
    network: IpAddr,
    prefix: u8,
}

impl IpRange {
    /// Builds a range; refuses a prefix longer than the address and set host bits (a typo more
    /// often than an intent), naming the network that was probably meant.
    pub fn new(addr: IpAddr, prefix: u8) -> Result<IpRange, String> {
        let (addr, prefix) = canonical_range_addr(addr, prefix);
        let max = max_prefix(addr);
        if prefix > max {
            return Err(format!(
                "prefix /{prefix} is longer than the address (/{max})"
            ));
        }
        let network = mask(addr, prefix);
        if network != addr {
            return Err(format!(
                "host bits are set: did you mean `{}`?",
                IpRange { network, prefix }
            ));
        }
        Ok(IpRange { network, prefix })
    }

    /// The first address of the range.
    pub fn network(&self) -> IpAddr {
        self.network
    }

    /// The prefix length in bits.
    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    /// Whether the range holds exactly one address (`/32` or `/128`).
    pub fn is_single(&self) -> bool {
        self.prefix == max_prefix(self.network)
    }

    /// Whether `addr` (canonicalized first) lies in the range.
    pub fn contains(&self, addr: IpAddr) -> bool {
        let addr = canonical(addr);
        same_family(addr, self.network) && mask(addr, self.prefix) == self.network
    }
}

impl fmt::Display for IpRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

/// `::ffff:0:0/96` and longer prefixes describe IPv4 space: store them as IPv4 so they match the
/// canonical addresses the relay compares against.
fn canonical_range_addr(addr: IpAddr, prefix: u8) -> (IpAddr, u8) {
    if let IpAddr::V6(v6) = addr
        && prefix >= 96
        && let Some(v4) = v6.to_ipv4_mapped()
    {
        return (IpAddr::V4(v4), prefix - 96);
    }
    (addr, prefix)
}

fn max_prefix(addr: IpAddr) -> u8 {
    match addr {
        IpAddr::V4(_) => 32,
        IpAddr::V6(_) => 128,
    }
}

fn same_family(a: IpAddr, b: IpAddr) -> bool {
    matches!(
        (a, b),
        (IpAddr::V4(_), IpAddr::V4(_)) | (IpAddr::V6(_), IpAddr::V6(_))
    )
}

fn mask(addr: IpAddr, prefix: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => {
            let bits = u32::from(a);
            let m = if prefix == 0 {
                0
            } else {
                u32::MAX << (32 - u32::from(prefix))
            };
            IpAddr::V4(Ipv4Addr::from(bits & m))
        }
        IpAddr::V6(a) => {
            let bits = u128::from(a);
            let m = if prefix == 0 {
                0
            } else {
                u128::MAX << (128 - u32::from(prefix))
            };
            IpAddr::V6(Ipv6Addr::from(bits & m))
        }
    }
}

/// Why an address is refused unless the policy names it: one class per kind of place a step
/// must not reach by accident (the host itself, the local network, the cloud's metadata service).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AddrClass {
    /// Cloud instance metadata and friends (169.254.169.254, fd00:ec2::254, 100.100.100.200, ...).
    Metadata,
    /// `0.0.0.0/8` and `::`: "this host" to the kernel.
    Unspecified,
    /// `127.0.0.0/8` and `::1`.
    Loopback,
    /// `169.254.0.0/16` and `fe80::/10`.
    LinkLocal,
    /// RFC 1918 (10/8, 172.16/12, 192.168/16), shared CGNAT space (100.64/10) and unique-local
    /// IPv6 (fc00::/7).
    Private,
    /// `224.0.0.0/4` and `ff00::/8`.
    Multicast,
    /// `255.255.255.255`.
    Broadcast,
    /// An address of one of this machine's own interfaces (its services listening on all
    /// addresses are reachable there, like on loopback). Known to the relay, not to [`classify`].
    ThisHost,
}

impl AddrClass {
    /// The refusal reason the relay reports (`X-Nestbox-Denied` value), e.g. `loopback_address`.
    pub fn reason(self) -> &'static str {
        match self {
            AddrClass::Metadata => "metadata_address",
            AddrClass::Unspecified => "unspecified_address",
            AddrClass::Loopback => "loopback_address",
            AddrClass::LinkLocal => "link_local_address",
            AddrClass::Private => "private_address",
            AddrClass::Multicast => "multicast_address",
            AddrClass::Broadcast => "broadcast_address",
            AddrClass::ThisHost => "this_host_address",
        }
    }

    /// A few words for humans, e.g. "a loopback address".
    pub fn describe(self) -> &'static str {
        match self {
            AddrClass::Metadata => "a cloud metadata address",
            AddrClass::Unspecified => "an unspecified (this-host) address",
            AddrClass::Loopback => "a loopback address",
            AddrClass::LinkLocal => "a link-local address",
            AddrClass::Private => "a private-network address",
            AddrClass::Multicast => "a multicast address",
            AddrClass::Broadcast => "the broadcast address",
            AddrClass::ThisHost => "an address of this machine",
        }
    }

    /// Whether an allow rule for a whole range is enough to open this class. Metadata endpoints
    /// hand out cloud credentials: only an entry naming the exact address opens them, so that
    /// allowing `169.254.0.0/16` for some appliance does not also open the metadata service.
    pub fn needs_exact_entry(self) -> bool {
        self == AddrClass::Metadata
    }
}

/// Metadata services of the common clouds. Kept as data: adding one is a one-line change.
const METADATA_V4: &[[u8; 4]] = &[
    [169, 254, 169, 254], // AWS, GCP, Azure, OpenStack, Oracle, DigitalOcean, ...
    [169, 254, 170, 2],   // AWS ECS task metadata and credentials
    [169, 254, 169, 253], // AWS VPC DNS
    [169, 254, 169, 123], // AWS time sync
    [169, 254, 0, 23],    // Tencent Cloud
    [100, 100, 100, 200], // Alibaba Cloud
    [192, 0, 0, 192],     // Oracle Cloud (legacy)
];
const METADATA_V6: &[u128] = &[
    0xfd00_0ec2_0000_0000_0000_0000_0000_0254, // AWS IMDS over IPv6
    0xfd00_0ec2_0000_0000_0000_0000_0000_0023, // AWS VPC DNS over IPv6
];

/// The class of `addr`, or `None` for an ordinary address the relay may dial.
///
/// IPv6 forms that carry an IPv4 address are judged by that address: IPv4-mapped
/// (`::ffff:a.b.c.d`, unwrapped first), IPv4-compatible (`::a.b.c.d`), the NAT64 well-known
/// prefix `64:ff9b::/96` (on a NAT64 network `64:ff9b::7f00:1` is translated to 127.0.0.1),
/// and 6to4 (`2002:aabb:ccdd::/48`). The local-use NAT64 prefix `64:ff9b:1::/48` is private.
pub fn classify(addr: IpAddr) -> Option<AddrClass> {
    match canonical(addr) {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => {
            let bits = u128::from(v6);
            if bits >> 32 == 0x0064_ff9b_0000_0000_0000_0000 || (bits >> 32 == 0 && bits > 1) {
                return classify_v4(Ipv4Addr::from(bits as u32));
            }
            if bits >> 112 == 0x2002 {
                let embedded = Ipv4Addr::from((bits >> 80) as u32);
                return classify_v4(embedded);
            }
            if bits >> 80 == 0x0064_ff9b_0001 {
                return Some(AddrClass::Private);
            }
            classify_v6(v6)
        }
    }
}

fn classify_v4(a: Ipv4Addr) -> Option<AddrClass> {
    let o = a.octets();
    if METADATA_V4.contains(&o) {
        return Some(AddrClass::Metadata);
    }
    let class = match o {
        [0, ..] => AddrClass::Unspecified,
        [127, ..] => AddrClass::Loopback,
        [169, 254, ..] => AddrClass::LinkLocal,
        [10, ..] => AddrClass::Private,
        [172, b, ..] if (16..32).contains(&b) => AddrClass::Private,
        [192, 168, ..] => AddrClass::Private,
        [100, b, ..] if (64..128).contains(&b) => AddrClass::Private,
        [255, 255, 255, 255] => AddrClass::Broadcast,
        [a, ..] if (224..240).contains(&a) => AddrClass::Multicast,
        _ => return None,
    };
    Some(class)
}

fn classify_v6(a: Ipv6Addr) -> Option<AddrClass> {
    let bits = u128::from(a);
    if METADATA_V6.contains(&bits) {
        return Some(AddrClass::Metadata);
    }
    let first = a.segments()[0];
    let class = if a.is_unspecified() {
        AddrClass::Unspecified
    } else if a.is_loopback() {
        AddrClass::Loopback
    } else if first & 0xffc0 == 0xfe80 {
        AddrClass::LinkLocal
    } else if first & 0xfe00 == 0xfc00 {
        AddrClass::Private
    } else if first & 0xff00 == 0xff00 {
        AddrClass::Multicast
    } else {
        return None;
    };
    Some(class)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(text: &str) -> Option<AddrClass> {
        classify(text.parse().unwrap())
    }

    #[test]
    fn classes_cover_the_listed_ranges() {
        assert_eq!(class("127.0.0.1"), Some(AddrClass::Loopback));
        assert_eq!(class("127.255.0.9"), Some(AddrClass::Loopback));
        assert_eq!(class("::1"), Some(AddrClass::Loopback));
        assert_eq!(class("0.0.0.0"), Some(AddrClass::Unspecified));
        assert_eq!(class("::"), Some(AddrClass::Unspecified));
        assert_eq!(class("169.254.1.1"), Some(AddrClass::LinkLocal));
        assert_eq!(class("fe80::1"), Some(AddrClass::LinkLocal));
        assert_eq!(class("febf::1"), Some(AddrClass::LinkLocal));
        assert_eq!(class("10.1.2.3"), Some(AddrClass::Private));
        assert_eq!(class("172.16.0.1"), Some(AddrClass::Private));
        assert_eq!(class("172.31.255.255"), Some(AddrClass::Private));
        assert_eq!(class("192.168.1.1"), Some(AddrClass::Private));
        assert_eq!(class("100.64.0.1"), Some(AddrClass::Private));
        assert_eq!(class("100.127.255.255"), Some(AddrClass::Private));
        assert_eq!(class("fc00::1"), Some(AddrClass::Private));
        assert_eq!(class("fdff::1"), Some(AddrClass::Private));
        assert_eq!(class("224.0.0.1"), Some(AddrClass::Multicast));
        assert_eq!(class("ff02::1"), Some(AddrClass::Multicast));
        assert_eq!(class("255.255.255.255"), Some(AddrClass::Broadcast));
    }

    #[test]
    fn metadata_addresses_are_their_own_class() {
        for a in [
            "169.254.169.254",
            "169.254.170.2",
            "100.100.100.200",
            "fd00:ec2::254",
            "::ffff:169.254.169.254",
        ] {
            assert_eq!(class(a), Some(AddrClass::Metadata), "{a}");
        }
    }

    #[test]
    fn ordinary_and_documentation_addresses_pass() {
        // Registries resolve into 203.0.113.0/24 on these machines: never refuse it.
        for a in [
            "203.0.113.80",
            "198.51.100.1",
            "192.0.2.1",
            "8.8.8.8",
            "172.32.0.1",
            "172.15.0.1",
            "100.128.0.1",
            "100.63.255.255",
            "2001:db8::1",
            "2606:4700::1111",
        ] {
            assert_eq!(class(a), None, "{a}");
        }
    }

    #[test]
    fn mapped_and_nat64_addresses_are_unwrapped() {
        assert_eq!(class("::ffff:127.0.0.1"), Some(AddrClass::Loopback));
        assert_eq!(class("::ffff:10.0.0.1"), Some(AddrClass::Private));
        assert_eq!(class("64:ff9b::7f00:1"), Some(AddrClass::Loopback));
        assert_eq!(class("64:ff9b::a9fe:a9fe"), Some(AddrClass::Metadata));
        assert_eq!(class("64:ff9b::808:808"), None);
        assert_eq!(
            class("::7f00:1"),
            Some(AddrClass::Loopback),
            "IPv4-compatible"
        );
        assert_eq!(class("::a9fe:a9fe"), Some(AddrClass::Metadata));
        assert_eq!(class("2002:7f00:1::1"), Some(AddrClass::Loopback), "6to4");
        assert_eq!(class("2002:a9fe:a9fe::"), Some(AddrClass::Metadata));
        assert_eq!(class("2002:808:808::1"), None);
        assert_eq!(
            class("64:ff9b:1::a00:1"),
            Some(AddrClass::Private),
            "local NAT64"
        );
    }

    #[test]
    fn ranges_contain_their_members_only() {
        let r = IpRange::new("10.0.0.0".parse().unwrap(), 8).unwrap();
        assert!(r.contains("10.255.0.1".parse().unwrap()));
        assert!(r.contains("::ffff:10.1.1.1".parse().unwrap()));
        assert!(!r.contains("11.0.0.0".parse().unwrap()));
        assert!(!r.contains("::a00:1".parse().unwrap()));
        let r6 = IpRange::new("fd00::".parse().unwrap(), 8).unwrap();
        assert!(r6.contains("fd12::1".parse().unwrap()));
        assert!(!r6.contains("fe00::1".parse().unwrap()));
        let all = IpRange::new("0.0.0.0".parse().unwrap(), 0).unwrap();
        assert!(all.contains("1.2.3.4".parse().unwrap()));
    }

    #[test]
    fn ranges_refuse_host_bits_and_long_prefixes() {
        let e = IpRange::new("10.1.0.0".parse().unwrap(), 8).unwrap_err();
        assert!(e.contains("10.0.0.0/8"), "{e}");
        assert!(IpRange::new("10.0.0.0".parse().unwrap(), 33).is_err());
        assert!(IpRange::new("::".parse().unwrap(), 129).is_err());
    }

    #[test]
    fn mapped_ranges_become_ipv4_ranges() {
        let r = IpRange::new("::ffff:10.0.0.0".parse().unwrap(), 104).unwrap();
        assert_eq!(r.to_string(), "10.0.0.0/8");
    }
}
