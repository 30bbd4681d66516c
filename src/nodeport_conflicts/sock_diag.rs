//! The accepting sockets of a network namespace, from the kernel's inet sock_diag interface
//! (NETLINK_SOCK_DIAG): TCP sockets in LISTEN and unconnected UDP ones whose local port lies in
//! a range. The kernel filters by state and port itself, so for TCP it walks only its
//! listening sockets (`/proc/net/tcp` walks every established connection too, of every
//! namespace), and it copies out only the sockets that match.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::ops::RangeInclusive;

use super::Listener;
use crate::cluster::Protocol;
use crate::netlink::attr::AttrWriter;
use crate::netlink::socket::{Message, NetlinkSocket, SocketError};

// linux/sock_diag.h, linux/inet_diag.h and linux/tcp_states.h, named as in the headers.
const SOCK_DIAG_BY_FAMILY: u16 = 20;
const INET_DIAG_REQ_BYTECODE: u16 = 1;
const INET_DIAG_BC_S_GE: u8 = 2;
const INET_DIAG_BC_S_LE: u8 = 3;
const TCP_LISTEN: u8 = 10;
/// The state of a UDP socket without a peer.
const TCP_CLOSE: u8 = 7;
const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;
const IPPROTO_TCP: u8 = 6;
const IPPROTO_UDP: u8 = 17;
/// `struct inet_diag_sockid`; `struct inet_diag_msg` is 4 bytes, this, then 20 bytes.
const SOCKID_LEN: usize = 48;
const DIAG_MSG_LEN: usize = 4 + SOCKID_LEN + 20;

/// The address families read, as `/proc/net` names their tables.
pub(super) const FAMILIES: [(u8, &str); 2] = [(AF_INET, ""), (AF_INET6, "6")];

/// The state a socket of `protocol` is in when it accepts traffic.
fn accepting_state(protocol: Protocol) -> u8 {
    match protocol {
        Protocol::Tcp => TCP_LISTEN,
        _ => TCP_CLOSE,
    }
}

fn ip_protocol(protocol: Protocol) -> u8 {
    match protocol {
        Protocol::Tcp => IPPROTO_TCP,
        _ => IPPROTO_UDP,
    }
}

/// The body (`struct inet_diag_req_v2` and its bytecode filter) of a dump of the accepting
/// sockets of `family` and `protocol` whose local port lies in `ports`.
pub(super) fn request(family: u8, protocol: Protocol, ports: &RangeInclusive<u16>) -> Vec<u8> {
    let mut body = vec![family, ip_protocol(protocol), 0, 0];
    body.extend_from_slice(&(1u32 << accepting_state(protocol)).to_ne_bytes());
    body.extend_from_slice(&[0; SOCKID_LEN]);
    // Two comparisons, each an op (code, bytes to jump if true, if false) and an op whose
    // `no` field holds the port. Jumping exactly to the end accepts; 4 bytes past it rejects.
    const PROGRAM_LEN: u16 = 16;
    let mut program = Vec::new();
    for (at, code, port) in [
        (0, INET_DIAG_BC_S_GE, *ports.start()),
        (8, INET_DIAG_BC_S_LE, *ports.end()),
    ] {
        program.extend_from_slice(&[code, 8]);
        program.extend_from_slice(&(PROGRAM_LEN - at + 4).to_ne_bytes());
        program.extend_from_slice(&[0, 0]);
        program.extend_from_slice(&port.to_ne_bytes());
    }
    let mut attrs = AttrWriter::new();
    attrs.bytes(INET_DIAG_REQ_BYTECODE, &program);
    body.extend_from_slice(&attrs.buf);
    body
}

/// The socket one dump reply describes (`struct inet_diag_msg`), if it accepts traffic.
pub(super) fn parse(payload: &[u8], protocol: Protocol) -> Result<Option<Listener>, SocketError> {
    let msg = payload.get(..DIAG_MSG_LEN).ok_or(SocketError::Malformed {
        offset: 0,
        reason: "inet_diag_msg truncated",
    })?;
    let (family, state, id) = (msg[0], msg[1], &msg[4..4 + SOCKID_LEN]);
    let port = |at: usize| u16::from_be_bytes([id[at], id[at + 1]]);
    let (sport, dport, src) = (port(0), port(2), &id[4..20]);
    // A connected UDP socket takes only its peer's datagrams.
    if state != accepting_state(protocol) || (protocol != Protocol::Tcp && dport != 0) {
        return Ok(None);
    }
    let addr = match family {
        AF_INET => IpAddr::V4(Ipv4Addr::new(src[0], src[1], src[2], src[3])),
        AF_INET6 => IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(src).expect("16 bytes"))),
        _ => return Ok(None),
    };
    Ok(Some(Listener {
        protocol,
        addr,
        port: sport,
    }))
}

/// The accepting sockets of `family` and `protocol` on `ports`, in the namespace `sock` was
/// opened in (a NETLINK_SOCK_DIAG socket).
pub(super) fn dump(
    sock: &mut NetlinkSocket,
    family: u8,
    protocol: Protocol,
    ports: &RangeInclusive<u16>,
) -> Result<Vec<Listener>, SocketError> {
    let mut out = Vec::new();
    let mut failed = None;
    let body = request(family, protocol, ports);
    sock.dump_plain(
        "the inet socket dump",
        SOCK_DIAG_BY_FAMILY,
        &body,
        |m: Message| match parse(&m.payload, protocol) {
            Ok(l) => out.extend(l),
            Err(e) => failed = Some(e),
        },
    )?;
    match failed {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::socket::split_messages;

    fn hex(text: &str) -> Vec<u8> {
        (0..text.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
            .collect()
    }

    /// Replies captured from kernel 6.18 (x86-64) in a namespace holding a TCP listener on
    /// 0.0.0.0:30080 and one on 127.0.0.1:20000 (outside the ports asked for), an established
    /// connection to the first, an unconnected UDP socket on [::]:30081 and a connected one
    /// on 127.0.0.1:30082; each dump asked for the ports 30000-32767.
    const TCP4: &str = "7c0000001400020007000000c0670000020a000075800000000000000000000000000000000000000000000000000000000000000000000000000000010000000000000000000000000000008000000000000000aaef4800050008000000000008000f00000000000c00150001000000000000000600160052000000140000000300020007000000c067000000000000";
    const UDP6: &str = "840000001400020007000000c06700000a07000075810000000000000000000000000000000000000000000000000000000000000000000000000000020000000000000000000000000000000000000000000000aeef4800050008000000000005000b000000000008000f00000000000c00150001000000000000000600160010000000140000000300020007000000c067000000000000";

    fn listeners(captured: &str, protocol: Protocol) -> Vec<Listener> {
        split_messages(&hex(captured))
            .unwrap()
            .into_iter()
            .filter(|m| m.msg_type == SOCK_DIAG_BY_FAMILY)
            .filter_map(|m| parse(&m.payload, protocol).unwrap())
            .collect()
    }

    #[test]
    fn a_listening_tcp_socket_is_read_with_its_address_and_port() {
        assert_eq!(
            listeners(TCP4, Protocol::Tcp),
            [Listener {
                protocol: Protocol::Tcp,
                addr: "0.0.0.0".parse().unwrap(),
                port: 30080,
            }],
            "one reply: the established connection and the other port were filtered out"
        );
    }

    #[test]
    fn an_unconnected_udp6_socket_is_read_with_its_address_and_port() {
        assert_eq!(
            listeners(UDP6, Protocol::Udp),
            [Listener {
                protocol: Protocol::Udp,
                addr: "::".parse().unwrap(),
                port: 30081,
            }]
        );
    }

    #[test]
    fn sockets_in_other_states_and_short_replies_are_not_listeners() {
        let mut reply = split_messages(&hex(TCP4)).unwrap().remove(0).payload;
        assert!(parse(&reply, Protocol::Tcp).unwrap().is_some());
        reply[1] = 1; // TCP_ESTABLISHED
        assert_eq!(parse(&reply, Protocol::Tcp).unwrap(), None);
        let mut udp = split_messages(&hex(UDP6)).unwrap().remove(0).payload;
        udp[6..8].copy_from_slice(&53u16.to_be_bytes()); // a peer's port: connected
        assert_eq!(parse(&udp, Protocol::Udp).unwrap(), None);
        assert!(parse(&reply[..40], Protocol::Tcp).is_err());
    }

    #[test]
    fn the_request_asks_for_listening_sockets_on_the_port_range() {
        // What the captures above were answered for (AF_INET, TCP): the kernel accepted it.
        let want = "020600000004000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000014000100020814000000307503080c000000ff7f";
        assert_eq!(request(AF_INET, Protocol::Tcp, &(30000..=32767)), hex(want));
        let udp6 = request(AF_INET6, Protocol::Udp, &(30000..=32767));
        assert_eq!(&udp6[..4], &[AF_INET6, IPPROTO_UDP, 0, 0]);
        assert_eq!(&udp6[4..8], &(1u32 << TCP_CLOSE).to_ne_bytes());
    }
}
