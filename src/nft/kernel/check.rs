//! Asking the kernel whether it would accept a `Transaction`, without committing it: the batch
//! is sent without its batch-end message, as `nft --check` does. The kernel then processes
//! every message (resolving each expression, loading the modules it needs) and aborts. The
//! checks the kernel makes only at commit (which hooks and chain types a rule may sit in,
//! loops) are not run: `the_commits_own_validation_is_not_part_of_the_check` pins that. Nothing
//! is ever visible to packets or to other programs, and the ruleset generation does not move.
//!
//! Guarantees: every operation the kernel refuses is reported, not only the first (nfnetlink
//! keeps processing a batch after an error); each refusal names its operation.

use std::collections::BTreeMap;
use std::io;

use super::apply::{ApplyError, BatchEnd, Nftables};
use crate::netlink::socket::SocketError;
use crate::nft::render::render_op;
use crate::nft::transaction::{Op, Transaction};

/// One operation the kernel refused.
#[derive(Debug, Clone)]
pub struct Refusal {
    /// Its index in the transaction's `ops`.
    pub op_index: usize,
    pub op: Op,
    /// The operation in `nft -f` syntax.
    pub rendered: String,
    /// Positive errno.
    pub errno: i32,
    /// The kernel's extended-ack text, when it gave one.
    pub kernel_message: Option<String>,
}

impl Refusal {
    pub fn error(&self) -> io::Error {
        io::Error::from_raw_os_error(self.errno)
    }
}

impl Nftables {
    /// Whether the kernel would commit `tx` now: the refused operations in batch order, empty
    /// when it would. `tx.expected_generation` is ignored: nothing is committed.
    ///
    /// An error that concerns the batch as a whole (EPERM without CAP_NET_ADMIN, say) is an
    /// `ApplyError::Batch`, not a refusal of an operation.
    pub fn check(&mut self, tx: &Transaction) -> Result<Vec<Refusal>, ApplyError> {
        if tx.ops.is_empty() {
            return Ok(Vec::new());
        }
        let sent = self.send_batch(tx, &mut None, BatchEnd::DryRun)?;
        collect_refusals(tx, &sent.owners, sent.first_seq, sent.last_op_seq, || {
            self.sock.recv()
        })
    }
}

/// Reads the kernel's replies until the one for the last operation (an ACK or its error),
/// turning each error into the refusal of the operation that owns its sequence number.
fn collect_refusals(
    tx: &Transaction,
    owners: &BTreeMap<u32, usize>,
    first_seq: u32,
    last_op_seq: u32,
    mut recv: impl FnMut() -> Result<Vec<crate::netlink::socket::Message>, SocketError>,
) -> Result<Vec<Refusal>, ApplyError> {
    let mut refusals: Vec<Refusal> = Vec::new();
    loop {
        for m in recv()? {
            let Some(err) = m.error()? else { continue };
            if err.seq == first_seq && !err.is_ack() {
                return Err(ApplyError::Batch(err.to_io()));
            }
            if !err.is_ack() {
                match owners.get(&err.seq) {
                    // An operation encoded as several messages is reported once.
                    Some(&op_index) if refusals.last().is_some_and(|r| r.op_index == op_index) => {}
                    Some(&op_index) => refusals.push(Refusal {
                        op_index,
                        op: tx.ops[op_index].clone(),
                        rendered: render_op(&tx.ops[op_index]),
                        errno: err.errno,
                        kernel_message: err.message.clone(),
                    }),
                    None => return Err(ApplyError::Batch(err.to_io())),
                }
            }
            if err.seq == last_op_seq {
                return Ok(refusals);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netns::{Netns, can_create};
    use crate::nft::model::{Chain, ChainType, Family, Hook, Rule, Stmt};
    use crate::nft::transaction::TableRef;

    fn table_ref() -> TableRef {
        TableRef {
            family: Family::Ip,
            name: "check".into(),
        }
    }

    /// A table with one base chain of `kind` on `hook`, whose rules are `rules`.
    fn creating(kind: ChainType, hook: Hook, rules: Vec<Vec<Stmt>>) -> Transaction {
        let table = table_ref();
        let mut ops = vec![
            Op::AddTable {
                table: table.clone(),
                comment: None,
            },
            Op::AddChain {
                table: table.clone(),
                chain: Chain::base("base", kind, hook, -100),
            },
        ];
        for stmts in rules {
            ops.push(Op::AddRule {
                table: table.clone(),
                chain: "base".into(),
                rule: Rule::new(stmts),
            });
        }
        Transaction {
            ops,
            expected_generation: None,
        }
    }

    /// `f` on an `Nftables` opened inside a fresh namespace, with the namespace's ruleset
    /// listing and generation before and after; None when not root.
    fn in_namespace<T: Send + 'static>(
        tag: &str,
        f: impl FnOnce(&mut Nftables) -> T + Send + 'static,
    ) -> Option<(T, String, String, u32, u32)> {
        if !can_create() {
            eprintln!("skipped: creating network namespaces needs root");
            return None;
        }
        let ns = Netns::create(tag).unwrap();
        let list = |ns: &Netns| {
            String::from_utf8(ns.exec(&["nft", "-j", "list", "ruleset"]).unwrap().stdout).unwrap()
        };
        let before = list(&ns);
        let (out, generations) = ns
            .run(move || {
                let mut nft = Nftables::open().unwrap();
                let g0 = nft.generation().unwrap();
                let out = f(&mut nft);
                (out, (g0, nft.generation().unwrap()))
            })
            .unwrap();
        Some((out, before, list(&ns), generations.0, generations.1))
    }

    #[test]
    fn a_transaction_the_kernel_accepts_is_checked_without_leaving_anything_behind() {
        let tx = creating(
            ChainType::Nat,
            Hook::Postrouting,
            vec![vec![Stmt::Masquerade { fully_random: true }]],
        );
        let Some((refusals, before, after, g0, g1)) =
            in_namespace("chkok", move |nft| nft.check(&tx).unwrap())
        else {
            return;
        };
        assert!(refusals.is_empty(), "{refusals:?}");
        assert_eq!(before, after, "nothing was committed");
        assert_eq!(g0, g1, "the ruleset generation did not move");
    }

    #[test]
    fn the_commits_own_validation_is_not_part_of_the_check() {
        // Masquerading is allowed in nat chains on postrouting only, and only the validation
        // at commit looks at where a rule sits: each expression on its own is accepted. The
        // kernel's dry run (and `nft --check`) does not run it, so placement mistakes surface
        // at the first sync, not in a check. Should a kernel start validating dry runs, this
        // test says so.
        let tx = creating(
            ChainType::Filter,
            Hook::Prerouting,
            vec![vec![Stmt::Masquerade {
                fully_random: false,
            }]],
        );
        let Some((refusals, before, after, g0, g1)) =
            in_namespace("chkval", move |nft| nft.check(&tx).unwrap())
        else {
            return;
        };
        assert!(refusals.is_empty(), "{refusals:?}");
        assert_eq!((before, g0), (after, g1));
    }

    #[test]
    fn every_refused_operation_of_the_batch_is_reported() {
        let tx = creating(
            ChainType::Filter,
            Hook::Input,
            vec![
                vec![Stmt::jump("missing")],
                vec![Stmt::Counter],
                vec![Stmt::NumgenIs {
                    modulus: 0,
                    value: 0,
                }],
            ],
        );
        let Some((refusals, before, after, g0, g1)) =
            in_namespace("chkall", move |nft| nft.check(&tx).unwrap())
        else {
            return;
        };
        let got: Vec<(usize, i32)> = refusals.iter().map(|r| (r.op_index, r.errno)).collect();
        assert_eq!(
            got,
            vec![(2, libc::ENOENT), (4, libc::ERANGE)],
            "{refusals:?}"
        );
        assert_eq!((before, g0), (after, g1));
    }
}
