//! NodePorts that a local process also listens on. kube-proxy up to 1.20 held every NodePort
//! open so no process could take it; later versions (and kubenft) do not, so a process bound
//! to a NodePort's port on an address the NodePort serves quietly loses its traffic to the
//! Service. This finds such pairs: the sockets of the daemon's own network namespace on the
//! NodePorts' range of ports are read with sock_diag (`sock_diag.rs`), and matched by a pure
//! function.

mod sock_diag;

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::ops::RangeInclusive;
use std::path::Path;

use crate::cluster::{ClusterState, Protocol, ServicePortName};
use crate::netlink::socket::{NETLINK_SOCK_DIAG, NetlinkSocket};

/// A socket that accepts traffic: a listening TCP socket or an unconnected bound UDP one.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Listener {
    pub protocol: Protocol,
    pub addr: IpAddr,
    pub port: u16,
}

/// A NodePort and the local socket on its port.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Conflict {
    pub service: ServicePortName,
    pub node_port: u16,
    pub listener: Listener,
}

/// The range of ports the NodePorts of `state` lie in; `None` without NodePorts.
pub(crate) fn node_port_range(state: &ClusterState) -> Option<RangeInclusive<u16>> {
    let mut ports = state.services.values().filter_map(|sp| sp.node_port);
    let first = ports.next()?;
    let (low, high) = ports.fold((first, first), |(l, h), p| (l.min(p), h.max(p)));
    Some(low..=high)
}

/// Reads the accepting sockets on `ports` of the calling thread's network namespace. A table
/// sock_diag cannot give (a kernel without `tcp_diag` or `udp_diag`) is read from
/// `/proc/self/net` instead; one that cannot be read either (IPv6 disabled, say) is skipped.
pub(crate) fn read_listeners(ports: &RangeInclusive<u16>) -> Vec<Listener> {
    let mut sock = NetlinkSocket::open_protocol(NETLINK_SOCK_DIAG)
        .inspect_err(|e| tracing::debug!(error = %e, "no sock_diag socket; reading /proc/self/net"))
        .ok();
    let mut out = Vec::new();
    for (protocol, table) in [(Protocol::Tcp, "tcp"), (Protocol::Udp, "udp")] {
        for (family, suffix) in sock_diag::FAMILIES {
            match sock
                .as_mut()
                .map(|sock| sock_diag::dump(sock, family, protocol, ports))
            {
                Some(Ok(listeners)) => out.extend(listeners),
                read => {
                    if let Some(Err(e)) = read {
                        tracing::debug!(error = %e, table, family, "sock_diag dump failed; reading /proc/self/net");
                    }
                    let path = Path::new("/proc/self/net").join(format!("{table}{suffix}"));
                    if let Ok(text) = std::fs::read_to_string(path) {
                        out.extend(parse_table(&text, protocol));
                    }
                }
            }
        }
    }
    out
}

/// TCP_LISTEN and, for UDP, TCP_CLOSE (an unconnected socket) in the kernel's state numbering.
const LISTEN: &str = "0A";
const UDP_UNCONNECTED: &str = "07";

/// The accepting sockets of one `/proc/net` table.
pub(crate) fn parse_table(text: &str, protocol: Protocol) -> Vec<Listener> {
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let local = fields.nth(1)?;
            let remote = fields.next()?;
            let state = fields.next()?;
            let accepting = match protocol {
                Protocol::Tcp => state == LISTEN,
                _ => state == UDP_UNCONNECTED && remote.split(':').nth(1) == Some("0000"),
            };
            if !accepting {
                return None;
            }
            let (addr, port) = local.split_once(':')?;
            Some(Listener {
                protocol,
                addr: parse_addr(addr)?,
                port: u16::from_str_radix(port, 16).ok()?,
            })
        })
        .collect()
}

/// `/proc/net` addresses: hex of the address's 32-bit words, each in host (little-endian) order.
fn parse_addr(hex: &str) -> Option<IpAddr> {
    let words: Option<Vec<u32>> = (0..hex.len() / 8)
        .map(|i| u32::from_str_radix(hex.get(i * 8..i * 8 + 8)?, 16).ok())
        .collect();
    let bytes: Vec<u8> = words?.iter().flat_map(|w| w.to_le_bytes()).collect();
    match bytes.len() {
        4 => Some(IpAddr::V4(Ipv4Addr::new(
            bytes[0], bytes[1], bytes[2], bytes[3],
        ))),
        16 => {
            let b: [u8; 16] = bytes.try_into().ok()?;
            Some(IpAddr::V6(Ipv6Addr::from(b)))
        }
        _ => None,
    }
}

/// The NodePorts of `state` that a listener also takes. NodePorts are not served on loopback
/// addresses in nftables mode, so only a wildcard or non-loopback listener conflicts.
pub(crate) fn conflicts(state: &ClusterState, listeners: &[Listener]) -> BTreeSet<Conflict> {
    let mut out = BTreeSet::new();
    for sp in state.services.values() {
        let Some(node_port) = sp.node_port else {
            continue;
        };
        for l in listeners {
            if l.protocol == sp.name.protocol && l.port == node_port && !l.addr.is_loopback() {
                out.insert(Conflict {
                    service: ServicePortName::clone(&sp.name),
                    node_port,
                    listener: l.clone(),
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{ServicePort, TrafficPolicy};

    fn service(name: &str, protocol: Protocol, node_port: Option<u16>) -> ServicePort {
        ServicePort {
            name: ServicePortName {
                namespace: "demo".into(),
                name: name.into(),
                port: "p".into(),
                protocol,
            }
            .into(),
            cluster_ips: vec!["10.96.0.1".parse().unwrap()],
            port: 80,
            node_port,
            external_ips: vec![],
            load_balancer_ips: vec![],
            source_ranges: vec![],
            external_policy: TrafficPolicy::Cluster,
            internal_policy: TrafficPolicy::Cluster,
            affinity_timeout: None,
            health_check_node_port: None,
            traffic_distribution: None,
            consistent: None,
        }
    }

    fn state(services: Vec<ServicePort>) -> ClusterState {
        ClusterState {
            services: services.into_iter().map(|s| (s.name.clone(), s)).collect(),
            ..ClusterState::default()
        }
    }

    fn listener(protocol: Protocol, addr: &str, port: u16) -> Listener {
        Listener {
            protocol,
            addr: addr.parse().unwrap(),
            port,
        }
    }

    #[test]
    fn the_port_range_spans_every_nodeport_and_is_none_without_them() {
        let s = state(vec![
            service("a", Protocol::Tcp, Some(31000)),
            service("b", Protocol::Udp, Some(30007)),
            service("c", Protocol::Tcp, None),
        ]);
        assert_eq!(node_port_range(&s), Some(30007..=31000));
        assert_eq!(
            node_port_range(&state(vec![service("c", Protocol::Tcp, None)])),
            None
        );
    }

    #[test]
    fn a_listener_conflicts_on_its_nodeports_protocol_and_port_unless_on_loopback() {
        let s = state(vec![
            service("web", Protocol::Tcp, Some(30080)),
            service("dns", Protocol::Udp, Some(30053)),
            service("plain", Protocol::Tcp, None),
        ]);
        let listeners = [
            listener(Protocol::Tcp, "0.0.0.0", 30080),
            listener(Protocol::Tcp, "::", 30080),
            listener(Protocol::Tcp, "127.0.0.1", 30080),
            listener(Protocol::Tcp, "0.0.0.0", 30053),
            listener(Protocol::Udp, "10.0.0.1", 30053),
            listener(Protocol::Udp, "::1", 30053),
        ];
        let found: Vec<_> = conflicts(&s, &listeners)
            .into_iter()
            .map(|c| (c.service.name, c.node_port, c.listener.addr.to_string()))
            .collect();
        assert_eq!(
            found,
            [
                ("dns".to_string(), 30053, "10.0.0.1".to_string()),
                ("web".to_string(), 30080, "0.0.0.0".to_string()),
                ("web".to_string(), 30080, "::".to_string()),
            ],
            "loopback listeners and the other protocol's port do not conflict"
        );
    }

    const TCP: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:7596 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0
   1: 0100007F:7597 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2 1 0 100 0 0 10 0
   2: 0100000A:7598 0200000A:D431 01 00000000:00000000 00:00000000 00000000     0        0 3 1 0 100 0 0 10 0
";
    const UDP6: &str = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops
  1: 00000000000000000000000000000000:7596 00000000000000000000000000000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 4 2 0 0
";

    #[test]
    fn listening_and_unconnected_sockets_are_read_with_their_addresses() {
        let tcp = parse_table(TCP, Protocol::Tcp);
        assert_eq!(
            tcp,
            vec![
                Listener {
                    protocol: Protocol::Tcp,
                    addr: "0.0.0.0".parse().unwrap(),
                    port: 30102,
                },
                Listener {
                    protocol: Protocol::Tcp,
                    addr: "127.0.0.1".parse().unwrap(),
                    port: 30103,
                },
            ],
            "the established connection is not a listener"
        );
        let udp = parse_table(UDP6, Protocol::Udp);
        assert_eq!(udp.len(), 1);
        assert_eq!(udp[0].addr, "::".parse::<IpAddr>().unwrap());
        assert_eq!(udp[0].port, 30102);
    }
}
