//! Operations on other programs' tables that ride at the front of the engine's next commit, so
//! the kernel applies them in the same transaction as a sync: a packet sees the ruleset from
//! before both or after both. Taking over from another proxy is the use: its rules go as ours
//! arrive.
//!
//! Guarantees: the operations are listed after the commit's generation guard was read, so
//! the guard also covers what they were listed from; they are offered to one successful commit
//! only; if the kernel refuses a transaction carrying them, they are dropped (never retried in
//! a loop) and the next sync goes without them, so another program's rules can never stop ours.

use crate::nft::outline::{Outline, OutlineError};
use crate::nft::transaction::Op;

/// Supplies the leading operations and hears how the commit carrying them went.
pub trait Leading: Send {
    /// The operations to put first in the commit being made, read from `kernel` now. Empty
    /// when there is nothing to do.
    fn ops(&mut self, kernel: &mut dyn Outline) -> Result<Vec<Op>, OutlineError>;
    /// The transaction that carried the last `ops` was committed.
    fn committed(&mut self);
    /// The operations will not be committed: listing them failed, or the kernel refused the
    /// transaction that carried them (`error`). They are not offered again.
    fn abandoned(&mut self, error: &dyn std::error::Error);
}
