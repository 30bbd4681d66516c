//! The addresses configured on this host's interfaces, read over rtnetlink (no `ip` command).
//!
//! Guarantees: one consistent snapshot per call (a dump the kernel marks as interrupted by a
//! concurrent change is retried), every address of every family, each named by its interface
//! (or its index when the interface vanished between the two dumps). For a point-to-point
//! address the local end is returned, never the peer.

use std::collections::HashMap;
use std::net::IpAddr;

use netlink_packet_core::{
    NLM_F_DUMP, NLM_F_DUMP_INTR, NLM_F_REQUEST, NetlinkHeader, NetlinkMessage, NetlinkPayload,
};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_packet_route::address::{AddressAttribute, AddressMessage};
use netlink_packet_route::link::{LinkAttribute, LinkMessage};
use netlink_sys::protocols::NETLINK_ROUTE;
use netlink_sys::{Socket, SocketAddr};

#[derive(Debug, thiserror::Error)]
pub enum LocalAddrError {
    #[error("opening an rtnetlink socket: {0}")]
    Socket(#[source] std::io::Error),
    #[error("sending the {request} dump request: {source}")]
    Send {
        request: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("receiving the {request} dump: {source}")]
    Receive {
        request: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("decoding the {request} dump: {source}")]
    Decode {
        request: &'static str,
        #[source]
        source: netlink_packet_core::DecodeError,
    },
    #[error("the kernel refused the {request} dump: {source}")]
    Kernel {
        request: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("the {request} dump was interrupted by concurrent changes {attempts} times in a row")]
    Unstable {
        request: &'static str,
        attempts: u32,
    },
}

/// How often a dump interrupted by a concurrent change is started again before giving up.
const DUMP_ATTEMPTS: u32 = 5;

/// Every address on every interface of the calling thread's network namespace, with the
/// interface's name (or its index as text, if it disappeared meanwhile), in kernel order.
pub(crate) fn local_addresses() -> Result<Vec<(IpAddr, String)>, LocalAddrError> {
    let mut rt = Rtnl::open()?;
    let mut names = HashMap::new();
    rt.dump(
        "link",
        RouteNetlinkMessage::GetLink(LinkMessage::default()),
        |msg| {
            if let RouteNetlinkMessage::NewLink(link) = msg {
                let name = link.attributes.iter().find_map(|a| match a {
                    LinkAttribute::IfName(n) => Some(n.clone()),
                    _ => None,
                });
                if let Some(name) = name {
                    names.insert(link.header.index, name);
                }
            }
        },
    )?;
    let mut addrs = Vec::new();
    rt.dump(
        "address",
        RouteNetlinkMessage::GetAddress(AddressMessage::default()),
        |msg| {
            if let RouteNetlinkMessage::NewAddress(addr) = msg
                && let Some(ip) = local_ip(&addr)
            {
                addrs.push((ip, addr.header.index));
            }
        },
    )?;
    Ok(addrs
        .into_iter()
        .map(|(ip, index)| {
            let name = names
                .get(&index)
                .cloned()
                .unwrap_or_else(|| index.to_string());
            (ip, name)
        })
        .collect())
}

/// IFA_LOCAL is the interface's own address; IFA_ADDRESS is the peer on point-to-point links
/// and equals IFA_LOCAL elsewhere. IPv6 sends only IFA_ADDRESS, which is then the local one.
fn local_ip(msg: &AddressMessage) -> Option<IpAddr> {
    let mut address = None;
    for attr in &msg.attributes {
        match attr {
            AddressAttribute::Local(ip) => return Some(*ip),
            AddressAttribute::Address(ip) => address = Some(*ip),
            _ => {}
        }
    }
    address
}

/// A connected rtnetlink socket with its sequence counter.
struct Rtnl {
    socket: Socket,
    seq: u32,
}

impl Rtnl {
    fn open() -> Result<Rtnl, LocalAddrError> {
        let mut socket = Socket::new(NETLINK_ROUTE).map_err(LocalAddrError::Socket)?;
        socket.bind_auto().map_err(LocalAddrError::Socket)?;
        socket
            .connect(&SocketAddr::new(0, 0))
            .map_err(LocalAddrError::Socket)?;
        Ok(Rtnl { socket, seq: 0 })
    }

    /// Runs one dump request, feeding each answer to `each`. If the kernel flags the dump as
    /// interrupted (NLM_F_DUMP_INTR: the table changed while being walked), its answers are
    /// dropped and the dump starts over.
    fn dump(
        &mut self,
        request: &'static str,
        message: RouteNetlinkMessage,
        mut each: impl FnMut(RouteNetlinkMessage),
    ) -> Result<(), LocalAddrError> {
        for _ in 0..DUMP_ATTEMPTS {
            let mut answers = Vec::new();
            if !self.dump_once(request, message.clone(), &mut answers)? {
                for m in answers {
                    each(m);
                }
                return Ok(());
            }
        }
        Err(LocalAddrError::Unstable {
            request,
            attempts: DUMP_ATTEMPTS,
        })
    }

    /// One dump; returns whether the kernel marked it interrupted. Answers are collected first
    /// and only handed out when the dump is known to be consistent.
    fn dump_once(
        &mut self,
        request: &'static str,
        message: RouteNetlinkMessage,
        answers: &mut Vec<RouteNetlinkMessage>,
    ) -> Result<bool, LocalAddrError> {
        self.seq += 1;
        let seq = self.seq;
        let mut packet =
            NetlinkMessage::new(NetlinkHeader::default(), NetlinkPayload::from(message));
        packet.header.flags = NLM_F_REQUEST | NLM_F_DUMP;
        packet.header.sequence_number = seq;
        packet.finalize();
        let mut out = vec![0; packet.buffer_len()];
        packet.serialize(&mut out);
        self.socket
            .send(&out, 0)
            .map_err(|source| LocalAddrError::Send { request, source })?;

        let mut interrupted = false;
        // The kernel fills dump datagrams up to 32 KiB; 64 KiB never truncates one.
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = self
                .socket
                .recv(&mut &mut buf[..], 0)
                .map_err(|source| LocalAddrError::Receive { request, source })?;
            let mut offset = 0;
            while offset < n {
                let msg: NetlinkMessage<RouteNetlinkMessage> =
                    NetlinkMessage::deserialize(&buf[offset..n])
                        .map_err(|source| LocalAddrError::Decode { request, source })?;
                let len = msg.header.length as usize;
                if msg.header.sequence_number == seq {
                    interrupted |= msg.header.flags & NLM_F_DUMP_INTR != 0;
                    match msg.payload {
                        NetlinkPayload::Done(_) => return Ok(interrupted),
                        NetlinkPayload::Error(e) if e.code.is_some() => {
                            return Err(LocalAddrError::Kernel {
                                request,
                                source: e.to_io(),
                            });
                        }
                        NetlinkPayload::InnerMessage(m) => answers.push(m),
                        _ => {}
                    }
                }
                if len == 0 {
                    break; // a zero length would loop forever; the datagram is corrupt anyway
                }
                offset += (len + 3) & !3;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netns::{Netns, can_create};

    #[test]
    fn addresses_added_in_a_namespace_are_read_back_with_their_interface() {
        if !can_create() {
            eprintln!("skipped: creating network namespaces needs root");
            return;
        }
        let ns = Netns::create("addrs").unwrap();
        for cmd in [
            // veth rather than dummy: the dummy driver is not built into every kernel.
            &[
                "ip", "link", "add", "kveth0", "type", "veth", "peer", "name", "kveth1",
            ][..],
            &["ip", "link", "set", "kveth0", "up"],
            &["ip", "addr", "add", "192.0.2.7/24", "dev", "kveth0"],
            &[
                "ip",
                "-6",
                "addr",
                "add",
                "2001:db8::7/64",
                "dev",
                "kveth0",
                "nodad",
            ],
            // Point-to-point: the peer (192.0.2.200) must not be reported as ours.
            &[
                "ip",
                "addr",
                "add",
                "198.51.100.1",
                "peer",
                "192.0.2.200",
                "dev",
                "kveth0",
            ],
        ] {
            ns.exec(cmd).unwrap();
        }
        let addrs = ns.run(local_addresses).unwrap().unwrap();
        let has =
            |ip: &str, ifname: &str| addrs.contains(&(ip.parse().unwrap(), ifname.to_string()));
        assert!(has("127.0.0.1", "lo"), "{addrs:?}");
        assert!(has("::1", "lo"), "{addrs:?}");
        assert!(has("192.0.2.7", "kveth0"), "{addrs:?}");
        assert!(has("2001:db8::7", "kveth0"), "{addrs:?}");
        assert!(has("198.51.100.1", "kveth0"), "{addrs:?}");
        let peer: IpAddr = "192.0.2.200".parse().unwrap();
        assert!(addrs.iter().all(|(ip, _)| *ip != peer), "{addrs:?}");
    }

    #[test]
    fn a_fresh_namespace_has_only_loopback_addresses() {
        if !can_create() {
            eprintln!("skipped: creating network namespaces needs root");
            return;
        }
        let ns = Netns::create("addrs0").unwrap();
        let mut addrs = ns.run(local_addresses).unwrap().unwrap();
        addrs.sort();
        let want: Vec<(IpAddr, String)> = vec![
            ("127.0.0.1".parse().unwrap(), "lo".into()),
            ("::1".parse().unwrap(), "lo".into()),
        ];
        assert_eq!(addrs, want);
    }
}
