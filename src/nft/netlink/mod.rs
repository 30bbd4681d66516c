//! nf_tables over netlink: encode a `Transaction` as one nfnetlink batch, send it, attribute a
//! kernel error to the operation that caused it, and decode dumps back into the model.

pub mod apply;
pub mod attr;
pub mod decode;
pub mod dump;
pub mod encode;
pub mod lift;
pub mod lower;
pub mod socket;
pub mod sys;

pub use apply::{ApplyError, ApplyStats, Nftables};
pub use dump::{DumpError, canonical, canonicalized, dump_table, generation};
pub use socket::{NetlinkSocket, SocketError};

#[cfg(test)]
mod dump_tests;
