//! Where a webhook may go (server-side request forgery): the operator's allow-list of
//! schemes and hosts, and the addresses refused unless a network is allowed by name.
//!
//! A target's host is checked twice: its name (or IP literal) against the allow-list
//! before any request, and every address it resolves to, by the client's own resolver
//! ([`Resolver`]), so the connection goes to an address that was checked: a name that
//! resolves to a public address for the check and to a private one for the connection
//! (DNS rebinding) cannot happen, since there is one resolution. IP-literal URLs skip
//! resolvers (reqwest's as any), so [`Guard::check`] checks them itself.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

/// A network, `address/prefix` (`127.0.0.1/32`, `fd00::/8`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Net {
    addr: IpAddr,
    prefix: u8,
}

impl Net {
    pub(crate) fn parse(text: &str) -> Result<Net, String> {
        let (addr, prefix) = match text.split_once('/') {
            Some((addr, prefix)) => (addr, Some(prefix)),
            None => (text, None),
        };
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| format!("{text:?} is not an address or a network (a.b.c.d/n)"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(prefix) => prefix
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= max)
                .ok_or_else(|| format!("{text:?}: a prefix is 0 to {max}"))?,
        };
        Ok(Net {
            addr: addr.to_canonical(),
            prefix,
        })
    }

    fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip.to_canonical()) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

/// Why an address is refused by default, or `None` for a public one.
pub(crate) fn non_public(ip: IpAddr) -> Option<&'static str> {
    match ip.to_canonical() {
        IpAddr::V4(ip) => non_public_v4(ip),
        IpAddr::V6(ip) => non_public_v6(ip),
    }
}

fn non_public_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, ..] = ip.octets();
    if ip.is_loopback() {
        Some("loopback")
    } else if ip.is_unspecified() || a == 0 {
        Some("unspecified")
    } else if ip.is_private() {
        Some("private")
    } else if ip.is_link_local() {
        Some("link-local")
    } else if a == 100 && (64..128).contains(&b) {
        Some("shared (carrier-grade NAT)")
    } else if ip.is_multicast() || ip.is_broadcast() || a >= 240 {
        Some("multicast, broadcast or reserved")
    } else if ip.is_documentation() || (a == 198 && (18..20).contains(&b)) {
        Some("documentation or benchmarking")
    } else {
        None
    }
}

fn non_public_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let first = ip.segments()[0];
    if ip.is_loopback() {
        Some("loopback")
    } else if ip.is_unspecified() {
        Some("unspecified")
    } else if ip.is_unique_local() {
        Some("private (unique local)")
    } else if ip.is_unicast_link_local() || first & 0xffc0 == 0xfec0 {
        Some("link-local")
    } else if ip.is_multicast() {
        Some("multicast")
    } else if first == 0x2001 && ip.segments()[1] == 0x0db8 {
        Some("documentation")
    } else if first == 0x0064 && ip.segments()[1] == 0xff9b {
        // NAT64 embeds an IPv4 address: judge that one.
        let [.., c, d] = ip.segments();
        non_public_v4(Ipv4Addr::from((u32::from(c) << 16) | u32::from(d)))
    } else {
        None
    }
}

/// The operator's allow-list, shared by every target's client.
#[derive(Clone, Debug, Default)]
pub(crate) struct Guard {
    /// Hosts a target may name, lower-case; `*` allows any.
    pub(crate) hosts: Vec<String>,
    /// Schemes beyond `https` that a target may use (`http`).
    pub(crate) schemes: Vec<String>,
    /// Networks whose addresses are allowed although not public.
    pub(crate) nets: Vec<Net>,
}

impl Guard {
    /// Whether `ip` may be connected to; the reason if not.
    pub(crate) fn address(&self, ip: IpAddr) -> Result<(), String> {
        match non_public(ip) {
            Some(_) if self.nets.iter().any(|net| net.contains(ip)) => Ok(()),
            Some(why) => Err(format!("{ip} is a {why} address (allow it with allow-net)")),
            None => Ok(()),
        }
    }

    /// Whether a request to `url` may be sent: its scheme, its host on the list, and an
    /// IP-literal host's address. A name's addresses are checked by [`Resolver`].
    pub(crate) fn check(&self, url: &reqwest::Url) -> Result<(), String> {
        let scheme = url.scheme();
        if scheme != "https" && !self.schemes.iter().any(|s| s == scheme) {
            return Err(format!(
                "scheme {scheme} is not allowed (https is; others with allow-scheme)"
            ));
        }
        let Some(host) = url.host_str() else {
            return Err("the target's URL has no host".into());
        };
        let name = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase();
        let literal = name.parse::<IpAddr>().ok();
        // The list names an IP literal as it is written, without brackets.
        let listed = literal.map_or(name.clone(), |ip| ip.to_string());
        if !self.hosts.iter().any(|h| h == "*" || *h == listed) {
            return Err(format!(
                "host {listed} is not on the allow-list (allow-host)"
            ));
        }
        match literal {
            Some(ip) => self.address(ip),
            None => Ok(()),
        }
    }
}

/// A DNS resolver that answers only the addresses the guard allows: the client connects
/// to nothing else, and a name with none left fails to connect with the reason.
pub(crate) struct Resolver(pub(crate) Arc<Guard>);

impl reqwest::dns::Resolve for Resolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let guard = self.0.clone();
        Box::pin(async move {
            let found = tokio::net::lookup_host((name.as_str(), 0)).await?;
            let mut allowed = Vec::new();
            let mut refused = Vec::new();
            for addr in found {
                match guard.address(addr.ip()) {
                    Ok(()) => allowed.push(addr),
                    Err(why) => refused.push(why),
                }
            }
            if allowed.is_empty() {
                let why = if refused.is_empty() {
                    format!("{} has no address", name.as_str())
                } else {
                    format!(
                        "refused: {} resolves only to addresses not allowed ({})",
                        name.as_str(),
                        refused.join("; ")
                    )
                };
                return Err(why.into());
            }
            Ok(Box::new(allowed.into_iter()) as Box<dyn Iterator<Item = SocketAddr> + Send>)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn non_public_addresses_are_named() {
        for (addr, why) in [
            ("127.0.0.1", "loopback"),
            ("::1", "loopback"),
            ("::ffff:127.0.0.1", "loopback"),
            ("10.1.2.3", "private"),
            ("172.16.0.1", "private"),
            ("192.168.1.1", "private"),
            ("169.254.169.254", "link-local"),
            ("fe80::1", "link-local"),
            ("fd00::1", "private (unique local)"),
            ("0.0.0.0", "unspecified"),
            ("::", "unspecified"),
            ("100.64.0.1", "shared (carrier-grade NAT)"),
            ("64:ff9b::7f00:1", "loopback"),
        ] {
            assert_eq!(non_public(ip(addr)), Some(why), "{addr}");
        }
        for addr in ["93.184.216.34", "2606:2800:220:1::1", "1.1.1.1"] {
            assert_eq!(non_public(ip(addr)), None, "{addr}");
        }
    }

    #[test]
    fn allowed_networks_let_their_addresses_through() {
        let guard = Guard {
            nets: vec![
                Net::parse("127.0.0.1/32").unwrap(),
                Net::parse("fd00::/8").unwrap(),
            ],
            ..Guard::default()
        };
        assert!(guard.address(ip("127.0.0.1")).is_ok());
        assert!(guard.address(ip("::ffff:127.0.0.1")).is_ok());
        assert!(guard.address(ip("127.0.0.2")).is_err());
        assert!(guard.address(ip("fd12::1")).is_ok());
        assert!(guard.address(ip("10.0.0.1")).is_err());
        assert!(Net::parse("10.0.0.0/33").is_err());
        assert!(Net::parse("nonsense").is_err());
        assert!(Net::parse("0.0.0.0/0").unwrap().contains(ip("8.8.8.8")));
    }

    #[test]
    fn urls_are_checked_for_scheme_host_and_literal_address() {
        let guard = Guard {
            hosts: vec!["hooks.example.com".into(), "127.0.0.1".into()],
            schemes: vec!["http".into()],
            nets: Vec::new(),
        };
        let url = |u: &str| reqwest::Url::parse(u).unwrap();
        assert!(guard.check(&url("https://HOOKS.example.com/x")).is_ok());
        assert!(guard.check(&url("ftp://hooks.example.com/x")).is_err());
        assert!(guard.check(&url("https://other.example.com/x")).is_err());
        let err = guard.check(&url("http://127.0.0.1:9/x")).unwrap_err();
        assert!(err.contains("loopback"), "{err}");
    }
}
