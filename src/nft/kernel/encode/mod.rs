//! Encoding of transaction operations as nf_tables netlink messages (attributes only; the batch
//! framing lives in `apply`). Mirrors `decode`: what is written here reads back identically.
//! Sets, maps and their elements are in `set`, rule expressions in `expr`.

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet};

use super::dump::nfproto;
use super::lower::{LowerError, lower_rule};
use super::sys::*;
use crate::netlink::attr::AttrWriter;
use crate::nft::model::{BaseChain, ChainType, Element, Hook, Policy, Verdict};
use crate::nft::render::sanitize_comment;
use crate::nft::transaction::{Op, TableRef};

mod expr;
mod set;
#[cfg(test)]
mod tests;

use expr::expr_attrs;
use set::{anon_map_messages, element_messages, set_attrs};

/// One netlink message to send: nf_tables message type, netlink flags, family, attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Msg {
    pub(crate) msg: u16,
    pub(crate) flags: u16,
    pub(crate) family: u8,
    pub(crate) attrs: Vec<u8>,
}

const NLM_F_CREATE: u16 = crate::netlink::socket::NLM_F_CREATE;
const NLM_F_APPEND: u16 = crate::netlink::socket::NLM_F_APPEND;

/// Udata TLV (u8 type, u8 len, value) with a NUL-terminated string, as libnftnl writes it.
fn udata_string(kind: u8, text: &str) -> Vec<u8> {
    let mut v = Vec::new();
    write_udata_string(&mut v, kind, text);
    v
}

/// `udata_string(kind, text)` appended to `out`.
fn write_udata_string(out: &mut Vec<u8>, kind: u8, text: &str) {
    let text = sanitize_comment(text);
    out.extend_from_slice(&[kind, (text.len() + 1) as u8]);
    out.extend_from_slice(text.as_bytes());
    out.push(0);
}

fn verdict_attrs(w: &mut AttrWriter, v: &Verdict) {
    w.nested(NFTA_DATA_VERDICT, |w| {
        let (code, chain) = match v {
            Verdict::Accept => (NF_ACCEPT, None),
            Verdict::Drop => (NF_DROP, None),
            Verdict::Continue => (NFT_CONTINUE, None),
            Verdict::Return => (NFT_RETURN, None),
            Verdict::Jump(c) => (NFT_JUMP, Some(c)),
            Verdict::Goto(c) => (NFT_GOTO, Some(c)),
        };
        w.be32(NFTA_VERDICT_CODE, code as u32);
        if let Some(c) = chain {
            w.string(NFTA_VERDICT_CHAIN, c);
        }
    });
}

fn data_value(w: &mut AttrWriter, kind: u16, bytes: &[u8]) {
    w.nested(kind, |w| {
        w.bytes(NFTA_DATA_VALUE, bytes);
    });
}

/// Encodes the operations of one batch: hands out set ids (anonymous maps are referred to by
/// id) and knows which sets are interval sets, whose elements are ranges on the wire.
#[derive(Debug, Default)]
pub(crate) struct Encoder {
    next_set_id: u32,
    /// Interval sets and the number of fields of their keys.
    interval_sets: BTreeMap<(TableRef, String), usize>,
}

/// An operation could not be encoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    #[error(transparent)]
    Lower(#[from] LowerError),
    #[error("set {set}: {reason}")]
    Element { set: String, reason: String },
}

impl Encoder {
    /// `interval_sets`: interval sets that exist before this batch (created ones are learned
    /// from the batch's own `AddSet` operations).
    pub(crate) fn new(interval_sets: BTreeMap<(TableRef, String), usize>) -> Self {
        Encoder {
            next_set_id: 1,
            interval_sets,
        }
    }

    fn set_id(&mut self) -> u32 {
        let id = self.next_set_id;
        self.next_set_id += 1;
        id
    }

    /// The messages of one operation, in order. Long because it is the dispatch table: one arm
    /// per `Op` variant.
    pub(crate) fn op(&mut self, op: &Op) -> Result<Vec<Msg>, EncodeError> {
        let fam = |t: &TableRef| nfproto(t.family);
        let msg = |msg, flags, t: &TableRef, w: AttrWriter| Msg {
            msg,
            flags,
            family: fam(t),
            attrs: w.buf,
        };
        Ok(match op {
            Op::AddTable { table, comment } => {
                let mut w = AttrWriter::new();
                w.string(NFTA_TABLE_NAME, &table.name)
                    .be32(NFTA_TABLE_FLAGS, 0);
                if let Some(c) = comment {
                    w.bytes(NFTA_TABLE_USERDATA, &udata_string(0, c));
                }
                vec![msg(NFT_MSG_NEWTABLE, NLM_F_CREATE, table, w)]
            }
            Op::DeleteTable { table } => {
                let mut w = AttrWriter::new();
                w.string(NFTA_TABLE_NAME, &table.name);
                vec![msg(NFT_MSG_DELTABLE, 0, table, w)]
            }
            Op::FlushTable { table } => {
                let mut w = AttrWriter::new();
                w.string(NFTA_RULE_TABLE, &table.name);
                vec![msg(NFT_MSG_DELRULE, 0, table, w)]
            }
            Op::AddChain { table, chain } => {
                let mut w = AttrWriter::new();
                w.string(NFTA_CHAIN_TABLE, &table.name)
                    .string(NFTA_CHAIN_NAME, &chain.name);
                if let Some(base) = &chain.base {
                    base_chain_attrs(&mut w, base);
                }
                if let Some(c) = &chain.comment {
                    w.bytes(NFTA_CHAIN_USERDATA, &udata_string(0, c));
                }
                vec![msg(NFT_MSG_NEWCHAIN, NLM_F_CREATE, table, w)]
            }
            Op::FlushChain { table, chain } => {
                let mut w = AttrWriter::new();
                w.string(NFTA_RULE_TABLE, &table.name)
                    .string(NFTA_RULE_CHAIN, chain);
                vec![msg(NFT_MSG_DELRULE, 0, table, w)]
            }
            Op::DeleteChain { table, chain } => {
                let mut w = AttrWriter::new();
                w.string(NFTA_CHAIN_TABLE, &table.name)
                    .string(NFTA_CHAIN_NAME, chain);
                vec![msg(NFT_MSG_DELCHAIN, 0, table, w)]
            }
            Op::AddSet { table, set } => {
                if set.interval {
                    self.interval_sets
                        .insert((table.clone(), set.name.clone()), set.key.len());
                }
                let id = self.set_id();
                vec![msg(
                    NFT_MSG_NEWSET,
                    NLM_F_CREATE,
                    table,
                    set_attrs(&table.name, set, id),
                )]
            }
            Op::FlushSet { table, set } => {
                let mut w = AttrWriter::new();
                w.string(NFTA_SET_ELEM_LIST_TABLE, &table.name)
                    .string(NFTA_SET_ELEM_LIST_SET, set);
                vec![msg(NFT_MSG_DELSETELEM, 0, table, w)]
            }
            Op::DeleteSet { table, set } => {
                let mut w = AttrWriter::new();
                w.string(NFTA_SET_TABLE, &table.name)
                    .string(NFTA_SET_NAME, set);
                vec![msg(NFT_MSG_DELSET, 0, table, w)]
            }
            Op::AddElements {
                table,
                set,
                elements,
            }
            | Op::DeleteElements {
                table,
                set,
                elements,
            } => {
                let add = matches!(op, Op::AddElements { .. });
                let mut out = Vec::new();
                self.elements(add, table, set, elements, &mut |m| out.push(m))?;
                out
            }
            Op::AddRule { table, chain, rule } => {
                let concat_intervals: BTreeSet<&str> = self
                    .interval_sets
                    .iter()
                    .filter(|((t, _), fields)| t == table && **fields > 1)
                    .map(|((_, name), _)| name.as_str())
                    .collect();
                let lowered = lower_rule(table.family, &rule.stmts, &concat_intervals)?;
                let mut out = Vec::new();
                let mut ids = BTreeMap::new();
                for anon in &lowered.anon {
                    let id = self.set_id();
                    ids.insert(anon.placeholder.clone(), id);
                    out.extend(anon_map_messages(table, anon, id)?);
                }
                let mut w = AttrWriter::new();
                w.string(NFTA_RULE_TABLE, &table.name)
                    .string(NFTA_RULE_CHAIN, chain);
                w.nested(NFTA_RULE_EXPRESSIONS, |w| {
                    for e in &lowered.exprs {
                        w.nested(NFTA_LIST_ELEM, |w| expr_attrs(w, e, &ids));
                    }
                });
                if let Some(c) = &rule.comment {
                    w.bytes(NFTA_RULE_USERDATA, &udata_string(0, c));
                }
                out.push(msg(NFT_MSG_NEWRULE, NLM_F_CREATE | NLM_F_APPEND, table, w));
                out
            }
            Op::DeleteRule {
                table,
                chain,
                handle,
            } => {
                let mut w = AttrWriter::new();
                w.string(NFTA_RULE_TABLE, &table.name)
                    .string(NFTA_RULE_CHAIN, chain)
                    .be64(NFTA_RULE_HANDLE, *handle);
                vec![msg(NFT_MSG_DELRULE, 0, table, w)]
            }
        })
    }
}

impl Encoder {
    /// The messages of adding (`add`) or deleting `elements` of `set`, each handed to `emit` as
    /// soon as it is full: elements streamed in one at a time are never all held, unpacked or
    /// encoded, and make the same messages as the `Op` carrying them.
    pub(crate) fn elements<E: Borrow<Element>>(
        &self,
        add: bool,
        table: &TableRef,
        set: &str,
        elements: impl IntoIterator<Item = E>,
        emit: &mut dyn FnMut(Msg),
    ) -> Result<(), EncodeError> {
        let (msg, flags) = if add {
            (NFT_MSG_NEWSETELEM, NLM_F_CREATE)
        } else {
            (NFT_MSG_DELSETELEM, 0)
        };
        let family = nfproto(table.family);
        let interval = self
            .interval_sets
            .contains_key(&(table.clone(), set.to_owned()));
        element_messages(&table.name, set, None, interval, elements, &mut |attrs| {
            emit(Msg {
                msg,
                flags,
                family,
                attrs,
            })
        })
    }
}

fn base_chain_attrs(w: &mut AttrWriter, base: &BaseChain) {
    let hooknum: u32 = match base.hook {
        Hook::Prerouting => 0,
        Hook::Input => 1,
        Hook::Forward => 2,
        Hook::Output => 3,
        Hook::Postrouting => 4,
    };
    w.nested(NFTA_CHAIN_HOOK, |w| {
        w.be32(NFTA_HOOK_HOOKNUM, hooknum)
            .be32(NFTA_HOOK_PRIORITY, base.priority as u32);
    });
    w.be32(
        NFTA_CHAIN_POLICY,
        match base.policy {
            Policy::Accept => NF_ACCEPT as u32,
            Policy::Drop => NF_DROP as u32,
        },
    );
    w.string(
        NFTA_CHAIN_TYPE,
        match base.kind {
            ChainType::Filter => "filter",
            ChainType::Nat => "nat",
            ChainType::Route => "route",
        },
    );
}
