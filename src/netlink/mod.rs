//! Netlink plumbing shared by nf_tables (`nft::kernel`) and conntrack (`conntrack`): one
//! NETLINK_NETFILTER socket, nfnetlink message headers, attribute TLVs and kernel errors.
//! Nothing here knows a subsystem's messages; each caller builds and reads its own.

pub mod attr;
pub mod socket;

pub use socket::{Message, NetlinkSocket, NfHeader, SocketError};
