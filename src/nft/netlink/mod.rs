//! nf_tables over netlink: encode a `Transaction` as one nfnetlink batch, send it, attribute a
//! kernel error to the operation that caused it, and decode dumps back into the model.

pub mod apply;
pub mod decode;
pub mod dump;
pub mod encode;
pub mod lift;
pub mod lower;
pub mod requests;
pub mod sys;

pub use crate::netlink::{NetlinkSocket, SocketError};
pub use apply::{ApplyError, ApplyStats, Nftables};
pub use dump::{DumpError, canonical, canonicalized, dump_table, dump_table_without_elements_of};
pub use requests::generation;

#[cfg(test)]
mod dump_tests;
