//! nf_tables over netlink: encode a `Transaction` as one nfnetlink batch, send it, attribute a
//! kernel error to the operation that caused it, and decode dumps back into the model.

pub mod apply;
pub mod check;
pub mod decode;
pub(crate) mod dump;
mod encode;
pub mod lift;
pub(crate) mod lower;
mod outline;
pub mod requests;
pub mod sys;

pub use crate::netlink::{NetlinkSocket, SocketError};
pub use apply::{ApplyError, ApplyStats, Nftables};
pub use check::Refusal;
pub use dump::{DumpError, canonical, dump_table};
pub(crate) use dump::{canonicalize_elements, canonicalized};
pub use encode::EncodeError;
pub use lower::LowerError;
pub use requests::generation;

#[cfg(test)]
mod tests;
