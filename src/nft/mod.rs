//! nftables over netlink: a typed model, a renderer to `nft -f` syntax, a transaction that is
//! applied as one atomic netlink batch, and dumps that decode the kernel's state back into the
//! same model. Knows nothing of Kubernetes.

pub mod diff;
pub mod digest;
#[cfg(any(test, feature = "fake-kernel"))]
pub mod fake;
pub mod jhash;
pub mod kernel;
pub mod model;
mod model_ext;
pub mod outline;
mod refs;
pub mod render;
pub mod transaction;
