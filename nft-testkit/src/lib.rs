//! Test scaffolding for kubenft's `nft` layer, kept out of the product library: the table
//! corpus tests and benchmarks share, the kernel's view of a table through the `nft` binary
//! (`inspect`), and (re-exported) the all-or-nothing fake kernel.

pub mod conntrack;
pub mod corpus;
pub mod inspect;

pub use kubenft::nft::fake;
