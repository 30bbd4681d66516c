//! The real-traffic tests share the library's lab.
#![allow(unused_imports)]

pub use kubenft::lab::*;
