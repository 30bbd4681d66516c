//! Applying a `Transaction` as ONE nfnetlink batch: the kernel commits every operation or
//! none, and a refusal is traced back to the operation that caused it.

use std::collections::{BTreeMap, BTreeSet};
use std::io;

use super::dump::{DumpError, dump_table_without_elements_of};
use super::encode::{EncodeError, Encoder, Msg};
use super::requests;
use super::sys::*;
use crate::netlink::attr::AttrWriter;
use crate::netlink::socket::{NLM_F_ACK, NetlinkSocket, NfHeader, SocketError};
use crate::nft::model::{Family, Table};
use crate::nft::render::render_op;
use crate::nft::transaction::{ElementStream, Op, TableRef, Transaction};

/// `enum nfnl_batch_attributes` in linux/netfilter/nfnetlink.h.
const NFNL_BATCH_GENID: u16 = 1;

/// What a successful apply sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ApplyStats {
    /// Netlink messages in the batch, framing included.
    pub messages: usize,
    pub bytes: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error("encoding operation {op_index} (`{rendered}`): {source}")]
    Encode {
        op_index: usize,
        rendered: String,
        #[source]
        source: EncodeError,
    },
    #[error("kernel rejected operation {op_index} (`{rendered}`): {errno}{}{}", kernel_message.as_deref().map(|m| format!(" ({m})")).unwrap_or_default(), explain(errno))]
    Rejected {
        op_index: usize,
        op: Box<Op>,
        rendered: String,
        errno: io::Error,
        kernel_message: Option<String>,
    },
    #[error("the ruleset changed since generation {expected} was read; re-read it and plan again")]
    GenerationChanged { expected: u32 },
    #[error("kernel rejected the batch framing: {0}")]
    Batch(io::Error),
    #[error("talking to the kernel: {0}")]
    Socket(#[from] SocketError),
    #[error("no acknowledgement for the batch's last message")]
    NoAck,
}

impl ApplyError {
    /// The errno the kernel answered with, if it answered with one.
    pub fn errno(&self) -> Option<i32> {
        match self {
            ApplyError::Rejected { errno, .. } | ApplyError::Batch(errno) => errno.raw_os_error(),
            ApplyError::GenerationChanged { .. } => Some(libc::ERESTART),
            _ => None,
        }
    }
}

fn explain(errno: &io::Error) -> &'static str {
    match errno.raw_os_error() {
        Some(libc::EBUSY) => {
            "; still referenced: remove the rules and map elements that jump to it (or use it) earlier in the same transaction"
        }
        Some(libc::ENOENT) => "; something it names does not exist (yet) in this transaction",
        Some(libc::EEXIST) => "; an object of that name exists with a different definition",
        Some(libc::ENFILE) => "; the set is full: it holds as many elements as its declared size",
        _ => "",
    }
}

/// A handle on nf_tables in the network namespace of the thread that opened it.
#[derive(Debug)]
pub struct Nftables {
    pub(super) sock: NetlinkSocket,
    /// Interval sets known to exist (created by an applied batch or seen in a dump): their
    /// elements go to the kernel as ranges.
    interval_sets: BTreeMap<(TableRef, String), usize>,
}

impl Nftables {
    pub fn open() -> Result<Nftables, SocketError> {
        Ok(Nftables {
            sock: NetlinkSocket::open()?,
            interval_sets: BTreeMap::new(),
        })
    }

    pub fn generation(&mut self) -> Result<u32, SocketError> {
        requests::generation(&mut self.sock)
    }

    /// The packets counted by each rule of one chain that has a `counter`, with the rule's
    /// comment, in the kernel's order; empty if there is no such chain.
    pub fn rule_counters(
        &mut self,
        family: Family,
        table: &str,
        chain: &str,
    ) -> Result<Vec<(Option<String>, u64)>, DumpError> {
        super::dump::rule_counters(&mut self.sock, family, table, chain)
    }

    /// How many rules one chain holds; 0 if there is no such chain.
    pub fn rule_count(
        &mut self,
        family: Family,
        table: &str,
        chain: &str,
    ) -> Result<usize, DumpError> {
        super::dump::rule_count(&mut self.sock, family, table, chain)
    }

    pub fn dump_table(&mut self, family: Family, name: &str) -> Result<Option<Table>, DumpError> {
        self.dump_table_without_elements_of(family, name, &BTreeSet::new())
    }

    /// [`Nftables::dump_table`], the sets named in `unread` without their elements.
    pub fn dump_table_without_elements_of(
        &mut self,
        family: Family,
        name: &str,
        unread: &BTreeSet<String>,
    ) -> Result<Option<Table>, DumpError> {
        let table = dump_table_without_elements_of(&mut self.sock, family, name, unread)?;
        if let Some(t) = &table {
            for s in t.sets.values().filter(|s| s.interval) {
                self.interval_sets
                    .insert((t.table_ref(), s.name.clone()), s.key.len());
            }
        }
        Ok(table)
    }

    /// Set `set` of table `table` with its elements, if both exist.
    pub fn dump_set(
        &mut self,
        family: Family,
        table: &str,
        set: &str,
    ) -> Result<Option<crate::nft::model::Set>, DumpError> {
        super::dump::dump_set(&mut self.sock, family, table, set)
    }

    /// The runtime elements of dynamic set `set` of table `name` (see `dump::dynamic_elements`).
    pub(crate) fn dynamic_elements(
        &mut self,
        family: Family,
        name: &str,
        set: &crate::nft::model::Set,
    ) -> Result<Vec<(crate::nft::model::Element, Option<std::time::Duration>)>, DumpError> {
        super::dump::dynamic_elements(&mut self.sock, family, name, set)
    }

    /// Remembers which interval sets exist after `tx` was committed.
    fn learn(&mut self, tx: &Transaction) {
        for op in &tx.ops {
            match op {
                Op::AddSet { table, set } if set.interval => {
                    self.interval_sets
                        .insert((table.clone(), set.name.clone()), set.key.len());
                }
                Op::DeleteSet { table, set } => {
                    self.interval_sets.remove(&(table.clone(), set.clone()));
                }
                Op::DeleteTable { table } => self.interval_sets.retain(|(t, _), _| t != table),
                _ => {}
            }
        }
    }

    /// Sends the whole transaction as one batch and waits for the kernel's verdict.
    pub fn apply(&mut self, tx: &Transaction) -> Result<ApplyStats, ApplyError> {
        self.apply_with(tx, None)
    }

    /// [`apply`](Self::apply), with the elements of each `AddElements` that carries none
    /// taken from `fill(table, set)` one at a time while the batch is encoded: a cold sync then
    /// holds the batch and one message being filled, not the cluster's elements.
    pub fn apply_filling(
        &mut self,
        tx: &Transaction,
        fill: Fill<'_>,
    ) -> Result<ApplyStats, ApplyError> {
        self.apply_with(tx, Some(fill))
    }

    fn apply_with(
        &mut self,
        tx: &Transaction,
        mut fill: Option<Fill<'_>>,
    ) -> Result<ApplyStats, ApplyError> {
        if tx.ops.is_empty() {
            return Ok(ApplyStats::default());
        }
        let Sent {
            bytes,
            messages,
            owners,
            first_seq,
            last_op_seq,
        } = self.send_batch(tx, &mut fill, BatchEnd::Commit)?;
        // The kernel processes the batch inside `send`; read until the last message's ACK or
        // an error. An error on any message aborts the whole batch.
        loop {
            let msgs = self.sock.recv()?;
            for m in msgs {
                let Some(err) = m.error()? else { continue };
                if err.is_ack() {
                    if err.seq == last_op_seq {
                        self.learn(tx);
                        return Ok(ApplyStats { messages, bytes });
                    }
                    continue;
                }
                let errno = io::Error::from_raw_os_error(err.errno);
                if err.seq == first_seq {
                    if err.errno == libc::ERESTART
                        && let Some(expected) = tx.expected_generation
                    {
                        return Err(ApplyError::GenerationChanged { expected });
                    }
                    return Err(ApplyError::Batch(errno));
                }
                return match owners.get(&err.seq) {
                    Some(&op_index) => {
                        let op = filled(&tx.ops[op_index], &mut fill)
                            .unwrap_or_else(|| tx.ops[op_index].clone());
                        Err(ApplyError::Rejected {
                            op_index,
                            rendered: render_op(&op),
                            op: Box::new(op),
                            errno,
                            kernel_message: err.message.clone(),
                        })
                    }
                    None => Err(ApplyError::Batch(errno)),
                };
            }
        }
    }

    /// Encodes `tx` (filling elements as `fill` says) and sends it as one batch ending as
    /// `end` says; the kernel processes it inside the send.
    pub(super) fn send_batch(
        &mut self,
        tx: &Transaction,
        fill: &mut Option<Fill<'_>>,
        end: BatchEnd,
    ) -> Result<Sent, ApplyError> {
        // Replies a previous, failed batch left queued must not be mistaken for ours.
        let _stale = self.sock.batch_replies();
        // Sequence numbers are reserved generously (an op can become several messages) and
        // wrap harmlessly: replies are matched by exact value.
        let first_seq = self.sock.next_seq(64 + 4 * tx.ops.len() as u32);
        let (bytes, owners, messages) =
            encode_batch(tx, first_seq, self.interval_sets.clone(), fill, end)?;
        self.sock
            .set_buffers(bytes.len().saturating_mul(2).max(4 << 20))?;
        self.sock.send(&bytes).map_err(|e| match e {
            SocketError::Send { source, .. } => ApplyError::Batch(source),
            other => ApplyError::Socket(other),
        })?;
        Ok(Sent {
            bytes: bytes.len(),
            messages,
            owners,
            first_seq,
            // `messages` counts the batch-begin and batch-end messages, a dry run's too.
            last_op_seq: first_seq.wrapping_add(messages as u32 - 2),
        })
    }
}

/// A batch as sent: its size, who owns each sequence number, and the sequence numbers of its
/// batch-begin message and of its last operation's message.
pub(super) struct Sent {
    pub bytes: usize,
    pub messages: usize,
    pub owners: BTreeMap<u32, usize>,
    pub first_seq: u32,
    pub last_op_seq: u32,
}

/// How a batch ends: with the batch-end message that asks the kernel to commit, or without it,
/// which makes the kernel check every message and then abort (`check.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum BatchEnd {
    Commit,
    DryRun,
}

/// The batch bytes, seq → op index, and the message count.
pub(super) type Batch = (Vec<u8>, BTreeMap<u32, usize>, usize);

/// Gives the elements of `set` of `table` for an `AddElements` that carries none.
pub type Fill<'a> = &'a mut dyn FnMut(&TableRef, &str) -> ElementStream<'a>;

/// `op` with its elements from `fill`, if it is an `AddElements` that carries none.
fn filled(op: &Op, fill: &mut Option<Fill<'_>>) -> Option<Op> {
    op.with_filled_elements(fill.as_mut()?)
}

/// The batch `apply` would send for `tx` (`apply_filling`, given `fill`), its first sequence
/// number 1: whether two ways of programming the same tables send the same bytes.
pub fn batch_bytes(tx: &Transaction, mut fill: Option<Fill<'_>>) -> Result<Vec<u8>, ApplyError> {
    Ok(encode_batch(tx, 1, BTreeMap::new(), &mut fill, BatchEnd::Commit)?.0)
}

/// Encodes `tx` as the batch `apply` would send, without sending it: its size, and the
/// user-space share of an apply's cost (benchmarks and metrics).
pub fn encode_only(tx: &Transaction) -> Result<ApplyStats, ApplyError> {
    let (bytes, _, messages) = encode_batch(tx, 1, BTreeMap::new(), &mut None, BatchEnd::Commit)?;
    Ok(ApplyStats {
        messages,
        bytes: bytes.len(),
    })
}

/// Encodes every operation, filling elements as `apply_filling` says; `first` is the sequence
/// number of the batch-begin message. A dry run's batch has no batch-end message; its message
/// count still includes one, so sequence numbers are the same either way.
pub(super) fn encode_batch(
    tx: &Transaction,
    first: u32,
    interval_sets: BTreeMap<(TableRef, String), usize>,
    fill: &mut Option<Fill<'_>>,
    end: BatchEnd,
) -> Result<Batch, ApplyError> {
    let mut encoder = Encoder::new(interval_sets);
    let mut out = Vec::new();
    let mut begin = AttrWriter::new();
    // A dry run commits nothing, so there is nothing for a generation to guard.
    if let (Some(generation), BatchEnd::Commit) = (tx.expected_generation, end) {
        begin.be32(NFNL_BATCH_GENID, generation);
    }
    NfHeader::batch_begin(NFNL_SUBSYS_NFTABLES, first).encode(&begin.buf, &mut out);
    let mut owners = BTreeMap::new();
    let mut seq = first;
    // Each message goes into the batch as soon as the next one is known: only the last asks
    // for an ACK (thousands of ACKs would overflow the socket), and holding every encoded
    // message until the end would keep the whole batch in memory twice.
    let mut held: Option<(usize, Msg)> = None;
    let mut emit = |out: &mut Vec<u8>, (op_index, m): (usize, Msg), ack: u16| {
        seq = seq.wrapping_add(1);
        owners.insert(seq, op_index);
        requests::header(m.msg, m.flags | ack, m.family, seq).encode(&m.attrs, out);
    };
    for (op_index, op) in tx.ops.iter().enumerate() {
        let mut hold = |m: Msg| {
            if let Some(previous) = held.replace((op_index, m)) {
                emit(&mut out, previous, 0);
            }
        };
        let encoded = match (op.unfilled_elements(), fill.as_mut()) {
            (Some((table, set)), Some(fill)) => {
                encoder.elements(true, table, set, fill(table, set), &mut hold)
            }
            _ => encoder.op(op).map(|msgs| msgs.into_iter().for_each(hold)),
        };
        encoded.map_err(|source| ApplyError::Encode {
            op_index,
            rendered: render_op(filled(op, fill).as_ref().unwrap_or(op)),
            source,
        })?;
    }
    if let Some(last) = held {
        emit(&mut out, last, NLM_F_ACK);
    }
    let total = seq.wrapping_sub(first) + 2;
    if end == BatchEnd::Commit {
        NfHeader::batch_end(NFNL_SUBSYS_NFTABLES, first.wrapping_add(total - 1))
            .encode(&[], &mut out);
    }
    Ok((out, owners, total as usize))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nft::model::{DataType, Element, Set, Value};

    fn tx(elements: Vec<Element>) -> Transaction {
        let table = TableRef {
            family: Family::Ip,
            name: "kubenft".into(),
        };
        let set = Set::new("ports", vec![DataType::InetService]);
        Transaction {
            ops: vec![
                Op::AddTable {
                    table: table.clone(),
                    comment: None,
                },
                Op::AddSet {
                    table: table.clone(),
                    set,
                },
                Op::AddElements {
                    table,
                    set: "ports".into(),
                    elements,
                },
            ],
            expected_generation: Some(7),
        }
    }

    /// A dry run commits nothing: it carries no generation to guard, so a stale one cannot
    /// make the kernel refuse the whole check.
    #[test]
    fn a_dry_run_batch_leaves_out_the_generation_guard_and_the_batch_end() {
        let encode = |generation, end| {
            let tx = Transaction {
                expected_generation: generation,
                ..tx(Vec::new())
            };
            encode_batch(&tx, 1, BTreeMap::new(), &mut None, end).unwrap()
        };
        let guarded = encode(Some(7), BatchEnd::Commit);
        let unguarded = encode(None, BatchEnd::Commit);
        assert_ne!(guarded.0, unguarded.0, "a commit carries the generation");
        let dry = encode(Some(7), BatchEnd::DryRun);
        assert_eq!(dry, encode(None, BatchEnd::DryRun));
        assert_eq!(dry.1, unguarded.1, "the same sequence numbers");
        assert!(
            unguarded.0.starts_with(&dry.0) && dry.0.len() < unguarded.0.len(),
            "the same messages, less the batch end"
        );
    }

    #[test]
    fn elements_filled_while_encoding_make_the_batch_the_filled_transaction_makes() {
        // Enough elements for several messages.
        let elements: Vec<Element> = (1..=20_000u16)
            .map(|p| Element {
                key: vec![Value::Port(p)],
                data: None,
                comment: Some(format!("port {p}")),
            })
            .collect();
        let whole = encode_batch(
            &tx(elements.clone()),
            1,
            BTreeMap::new(),
            &mut None,
            BatchEnd::Commit,
        )
        .unwrap();
        let mut asked = Vec::new();
        let mut fill = |t: &TableRef, set: &str| {
            asked.push((t.name.clone(), set.to_string()));
            Box::new(elements.iter().cloned()) as ElementStream<'_>
        };
        let filled = encode_batch(
            &tx(Vec::new()),
            1,
            BTreeMap::new(),
            &mut Some(&mut fill),
            BatchEnd::Commit,
        )
        .unwrap();
        assert!(whole.2 > 5, "{} messages", whole.2);
        assert_eq!(filled, whole);
        assert_eq!(asked, vec![("kubenft".to_string(), "ports".to_string())]);
    }
}
