//! Lifting a rule's kernel expression list back into the high-level `Stmt`s that `nft -f`
//! would have compiled into exactly that list: the inverse of nft's code generation.
//!
//! An expression sequence nft would not produce for one of our statements is an error naming
//! the chain, rule handle and expression, so the caller falls back to a full resync instead of
//! trusting a guess.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::decode::{Expr, RawData, RawRule, ifname, value};
use super::sys::*;
use crate::nft::model::{
    AddrType, CmpOp, CtState, CtStatus, DataType, Family, MapRef, MarkOp, RateUnit, RejectKind,
    Selector, Stmt, Value, Verdict,
};

mod actions;
mod matches;
mod values;

pub(crate) use values::full_len;
use values::{is_addr, map_ref, ne32, prefix_len, prefix_value, selector_value};

/// An expression sequence with no model equivalent.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[error("chain {chain}, rule handle {handle}: cannot lift `{expr}`: {reason}")]
pub struct LiftError {
    pub chain: String,
    pub handle: u64,
    pub expr: String,
    pub reason: String,
}

/// What the lifter needs to know about the table's sets to lift lookups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetInfo {
    pub key: Vec<DataType>,
    /// For anonymous sets: their (key, verdict) pairs, inlined into the rule.
    pub anonymous: Option<Vec<(Vec<Value>, Verdict)>>,
}

/// Byte offset of a register in the register file: `NFT_REG_1..4` are 16-byte registers,
/// `NFT_REG32_00..15` 4-byte ones over the same storage.
fn reg_offset(reg: u32) -> Option<u32> {
    match reg {
        NFT_REG_1..=NFT_REG_4 => Some((reg - NFT_REG_1) * 16),
        NFT_REG32_00..=NFT_REG32_15 => Some((reg - NFT_REG32_00) * 4),
        _ => None,
    }
}

/// What a register holds while lifting a rule.
#[derive(Debug, Clone)]
enum Reg {
    /// A selector loaded with `len` bytes (fewer than the full width for byte-aligned prefixes).
    Load {
        sel: Selector,
        len: u32,
    },
    /// A loaded selector after `& mask ^ xor`.
    Masked {
        sel: Selector,
        len: u32,
        mask: Vec<u8>,
        xor: Vec<u8>,
    },
    /// Adjacent header fields loaded at once (the last one possibly a byte-aligned prefix).
    Merged(Vec<(Selector, u32)>),
    /// `numgen random mod M offset O`, host-endian.
    Numgen {
        modulus: u32,
        offset: u32,
    },
    /// `numgen random mod M offset O` after nft's conversion to big endian for an interval
    /// map lookup.
    NumgenBigEndian {
        modulus: u32,
        offset: u32,
    },
    /// The `address . port` data an interval map yielded for a numgen key.
    NumgenMapData {
        modulus: u32,
        offset: u32,
        map: String,
    },
    /// `jhash fields mod M seed S offset O`, converted to big endian for an interval map.
    HashBigEndian(HashDraw),
    /// `jhash fields mod M seed S offset O`, host-endian.
    Hash(HashDraw),
    /// The `address . port` data an interval map yielded for a hash key.
    HashMapData {
        draw: HashDraw,
        map: String,
    },
    /// The `address . port` data a hash map yielded for `key . numgen random mod M`.
    SlotMapData {
        key: Vec<Selector>,
        modulus: u32,
        map: String,
    },
    /// The `address . port` data a hash map yielded for `key`.
    MapData {
        key: Vec<Selector>,
        map: String,
    },
    Imm(Vec<u8>),
}

/// The parameters of a `jhash` expression.
#[derive(Debug, Clone)]
struct HashDraw {
    fields: Vec<Selector>,
    seed: u32,
    modulus: u32,
    offset: u32,
}

struct Lifter<'a> {
    family: Family,
    chain: &'a str,
    handle: u64,
    sets: &'a BTreeMap<String, SetInfo>,
    regs: BTreeMap<u32, Reg>,
    stmts: Vec<Stmt>,
    /// In inet tables: the `NFPROTO_*` an ip/ip6 header or nfproto match pinned the rule to.
    context: Option<u8>,
}

/// Lifts one rule's expressions into statements.
pub fn lift_rule(
    family: Family,
    rule: &RawRule,
    sets: &BTreeMap<String, SetInfo>,
) -> Result<Vec<Stmt>, LiftError> {
    let mut l = Lifter {
        family,
        chain: &rule.chain,
        handle: rule.handle,
        sets,
        regs: BTreeMap::new(),
        stmts: Vec::new(),
        context: None,
    };
    for e in &rule.exprs {
        l.step(e)?;
    }
    if let Some((_, r)) = l.regs.iter().find(|(_, r)| !matches!(r, Reg::Imm(_))) {
        return Err(LiftError {
            chain: rule.chain.clone(),
            handle: rule.handle,
            expr: format!("{r:?}"),
            reason: "a loaded value is never used".into(),
        });
    }
    Ok(l.stmts)
}

impl Lifter<'_> {
    fn err(&self, e: &Expr, reason: impl Into<String>) -> LiftError {
        LiftError {
            chain: self.chain.to_owned(),
            handle: self.handle,
            expr: e.to_string(),
            reason: reason.into(),
        }
    }

    fn off(&self, e: &Expr, reg: u32) -> Result<u32, LiftError> {
        reg_offset(reg).ok_or_else(|| self.err(e, format!("register {reg} is not a data register")))
    }

    fn load(&mut self, e: &Expr, dreg: u32, reg: Reg) -> Result<(), LiftError> {
        let o = self.off(e, dreg)?;
        self.regs.insert(o, reg);
        Ok(())
    }

    fn take(&mut self, e: &Expr, reg: u32) -> Result<Reg, LiftError> {
        let o = self.off(e, reg)?;
        self.regs
            .remove(&o)
            .ok_or_else(|| self.err(e, format!("register {reg} was never loaded")))
    }

    /// The concatenated key starting at `sreg`: `n` selector loads at consecutive,
    /// 4-byte aligned offsets.
    fn key(&mut self, e: &Expr, sreg: u32, n: usize) -> Result<Vec<Selector>, LiftError> {
        Ok(self.key_and_end(e, sreg, n)?.0)
    }

    /// `key`, and the register offset just after it (where a further key part would be).
    fn key_and_end(
        &mut self,
        e: &Expr,
        sreg: u32,
        n: usize,
    ) -> Result<(Vec<Selector>, u32), LiftError> {
        let mut off = self.off(e, sreg)?;
        let mut key = Vec::with_capacity(n);
        for _ in 0..n {
            match self.regs.remove(&off) {
                Some(Reg::Load { sel, len }) if len == full_len(sel) => {
                    key.push(sel);
                    off += (len + 3) & !3;
                }
                other => {
                    return Err(
                        self.err(e, format!("key part at register offset {off} is {other:?}"))
                    );
                }
            }
        }
        Ok((key, off))
    }

    fn set(&self, e: &Expr, name: &str) -> Result<&SetInfo, LiftError> {
        self.sets
            .get(name)
            .ok_or_else(|| self.err(e, format!("set {name} is not in the table")))
    }

    /// Lifts one expression: loads fill registers, and the expression that consumes them
    /// completes a statement. The patterns pick the shapes the model has; each kind is lifted
    /// by a method of its own (matches.rs, actions.rs). Longer than most functions because it
    /// is the dispatch table: one arm per expression shape, its length is the patterns.
    fn step(&mut self, e: &Expr) -> Result<(), LiftError> {
        match e {
            Expr::Payload {
                base,
                offset,
                len,
                dreg,
            } => self.payload(e, *base, *offset, *len, *dreg),
            Expr::Meta {
                key,
                dreg: Some(dreg),
                sreg: None,
            } => self.meta_load(e, *key, *dreg),
            Expr::Meta {
                key: NFT_META_MARK,
                dreg: None,
                sreg: Some(sreg),
            } => self.set_mark(e, *sreg),
            Expr::Ct {
                key: key @ (NFT_CT_STATE | NFT_CT_STATUS),
                dreg: Some(dreg),
                direction: None,
            } => self.load(
                e,
                *dreg,
                Reg::Load {
                    sel: if *key == NFT_CT_STATE {
                        Selector::CtState
                    } else {
                        Selector::CtStatus
                    },
                    len: 4,
                },
            ),
            Expr::Fib {
                dreg,
                result: NFT_FIB_RESULT_ADDRTYPE,
                flags,
            } => self.fib_load(e, *dreg, *flags),
            Expr::Bitwise {
                sreg,
                dreg,
                op: NFT_BITWISE_MASK_XOR,
                mask,
                xor,
            } => self.bitwise(e, *sreg, *dreg, mask, xor),
            Expr::Cmp { sreg, op, data } => self.compare(e, *sreg, *op, data),
            Expr::Lookup {
                set,
                sreg,
                dreg,
                inverted,
            } => self.lookup(e, set, *sreg, *dreg, *inverted),
            Expr::Immediate {
                dreg: NFT_REG_VERDICT,
                data: RawData::Verdict(v),
            } => {
                self.stmts.push(Stmt::Verdict(v.clone()));
                Ok(())
            }
            Expr::Immediate {
                dreg,
                data: RawData::Value(v),
            } => self.load(e, *dreg, Reg::Imm(v.clone())),
            // An offset only appears in the key of a `dnat … map` (see the byteorder below);
            // compares and vmaps take offset 0 only.
            Expr::Numgen {
                dreg,
                modulus,
                kind: NFT_NG_RANDOM,
                offset,
            } => self.load(
                e,
                *dreg,
                Reg::Numgen {
                    modulus: *modulus,
                    offset: *offset,
                },
            ),
            Expr::Hash {
                sreg,
                dreg,
                len,
                modulus,
                seed,
                offset,
                kind: NFT_HASH_JENKINS,
            } => {
                let draw = HashDraw {
                    fields: self.hashed_fields(e, *sreg, *len)?,
                    seed: *seed,
                    modulus: *modulus,
                    offset: *offset,
                };
                self.load(e, *dreg, Reg::Hash(draw))
            }
            // `dnat to … map`: the map's data is `address . port`.
            Expr::Nat {
                kind: NFT_NAT_DNAT,
                family,
                addr_min: Some(amin),
                addr_max,
                proto_min: Some(pmin),
                proto_max,
                flags: 0x3,
            } if addr_max.is_none_or(|m| m == *amin)
                && proto_max.is_none_or(|m| m == *pmin)
                && matches!(
                    self.regs.get(&self.off(e, *amin)?),
                    Some(
                        Reg::NumgenMapData { .. }
                            | Reg::HashMapData { .. }
                            | Reg::SlotMapData { .. }
                            | Reg::MapData { .. }
                    )
                ) =>
            {
                self.dnat_map(e, *family, *amin, *pmin)
            }
            Expr::Nat {
                kind: NFT_NAT_DNAT,
                family,
                addr_min: Some(amin),
                addr_max,
                proto_min,
                proto_max,
                flags,
            } if addr_max.is_none_or(|m| m == *amin)
                && proto_max.is_none_or(|m| Some(m) == *proto_min) =>
            {
                self.dnat(e, *family, *amin, *proto_min, *flags)
            }
            Expr::Masq {
                flags,
                proto_min: None,
            } => self.masquerade(e, *flags),
            Expr::Counter { .. } => {
                self.stmts.push(Stmt::Counter);
                Ok(())
            }
            // Keys of interval concatenations are compared big-endian, so nft converts
            // `meta l4proto`; on one byte with size 2 the kernel's conversion is a no-op.
            Expr::Byteorder {
                sreg,
                dreg,
                op: NFT_BYTEORDER_HTON,
                len: 4,
                size: 4,
            } if sreg == dreg => match self.take(e, *sreg)? {
                Reg::Numgen { modulus, offset } => {
                    self.load(e, *dreg, Reg::NumgenBigEndian { modulus, offset })
                }
                Reg::Hash(draw) => self.load(e, *dreg, Reg::HashBigEndian(draw)),
                other => Err(self.err(e, format!("byteorder on {other:?}"))),
            },
            Expr::Byteorder {
                sreg,
                dreg,
                op: NFT_BYTEORDER_HTON,
                len: 1,
                size: 2,
            } if sreg == dreg => match self.regs.get(&self.off(e, *sreg)?) {
                Some(Reg::Load {
                    sel: Selector::L4Proto,
                    ..
                }) => Ok(()),
                other => Err(self.err(e, format!("byteorder on {other:?}"))),
            },
            Expr::Reject { kind, code } => self.reject(e, *kind, *code),
            Expr::Dynset {
                set,
                op: NFT_DYNSET_OP_UPDATE,
                sreg_key,
                sreg_data: None,
                timeout: None,
                has_exprs: false,
            } => self.update(e, set, *sreg_key),
            Expr::Limit {
                rate,
                unit,
                burst,
                kind: NFT_LIMIT_PKTS,
                flags: 0,
            } => self.limit(e, *rate, *unit, *burst),
            _ => Err(self.err(e, "expression has no model equivalent")),
        }
    }
}
