//! Test scaffolding for kubenft's `nft` layer, kept out of the product library: the table
//! corpus tests and benchmarks share, and (re-exported) the all-or-nothing fake kernel.

pub mod corpus;

pub use kubenft::nft::fake;
