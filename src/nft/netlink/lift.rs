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
    /// by a method of its own below. Longer than most functions because it is the dispatch
    /// table: one arm per expression shape, its length is the patterns.
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
                // The hashed fields: selector loads at consecutive 4-byte aligned offsets.
                let mut off = self.off(e, *sreg)?;
                let end = off + len;
                let mut fields = Vec::new();
                while off < end {
                    match self.regs.remove(&off) {
                        Some(Reg::Load { sel, len }) if len == full_len(sel) => {
                            fields.push(sel);
                            off += (len + 3) & !3;
                        }
                        other => {
                            return Err(self.err(
                                e,
                                format!("hashed field at register offset {off} is {other:?}"),
                            ));
                        }
                    }
                }
                if off != end || fields.is_empty() {
                    return Err(self.err(e, "hash length does not end on a field"));
                }
                let draw = HashDraw {
                    fields,
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
            Expr::Counter => {
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

    /// A header field load; in inet tables it absorbs the `meta nfproto` match nft adds.
    fn payload(
        &mut self,
        e: &Expr,
        base: u32,
        offset: u32,
        len: u32,
        dreg: u32,
    ) -> Result<(), LiftError> {
        let reg = match self.payload_selector(e, base, offset, len) {
            Ok(sel) => Reg::Load { sel, len },
            // nft merges adjacent equality matches on one header into one load.
            Err(err) => Reg::Merged(self.merged_fields(base, offset, len).ok_or(err)?),
        };
        let first = match &reg {
            Reg::Load { sel, .. } => *sel,
            Reg::Merged(fields) => fields[0].0,
            _ => unreachable!("payload loads are Load or Merged"),
        };
        // In inet tables nft prefixes ip/ip6 header matches with `meta nfproto`;
        // it is implied by the match itself, so it is not a statement of ours.
        if self.family == Family::Inet && base == NFT_PAYLOAD_NETWORK_HEADER {
            let want = match first {
                Selector::IpSaddr | Selector::IpDaddr => NFPROTO_IPV4,
                _ => NFPROTO_IPV6,
            };
            if let Some(Stmt::Match {
                left: Selector::NfProto,
                mask: None,
                op: CmpOp::Eq,
                right: Value::NfProto(p),
            }) = self.stmts.last()
                && *p == want
            {
                self.stmts.pop();
            }
            self.context = Some(want);
        }
        self.load(e, dreg, reg)
    }

    /// A `meta` key load.
    fn meta_load(&mut self, e: &Expr, key: u32, dreg: u32) -> Result<(), LiftError> {
        let sel = match key {
            NFT_META_L4PROTO => Selector::L4Proto,
            NFT_META_NFPROTO => Selector::NfProto,
            NFT_META_MARK => Selector::Mark,
            NFT_META_IIFNAME => Selector::IifName,
            NFT_META_OIFNAME => Selector::OifName,
            _ => return Err(self.err(e, "meta key has no selector")),
        };
        self.load(
            e,
            dreg,
            Reg::Load {
                sel,
                len: full_len(sel),
            },
        )
    }

    /// `meta mark set …` from an immediate or from mark arithmetic.
    fn set_mark(&mut self, e: &Expr, sreg: u32) -> Result<(), LiftError> {
        let op = match self.take(e, sreg)? {
            Reg::Imm(v) => MarkOp::Set(ne32(&v).ok_or_else(|| self.err(e, "mark width"))?),
            Reg::Masked {
                sel: Selector::Mark,
                mask,
                xor,
                ..
            } => {
                let (m, x) = (ne32(&mask), ne32(&xor));
                match (m, x) {
                    (Some(m), Some(x)) if m == !x && x != 0 => MarkOp::Or(x),
                    (Some(u32::MAX), Some(x)) => MarkOp::Xor(x),
                    (Some(m), Some(0)) => MarkOp::And(m),
                    _ => return Err(self.err(e, "mark arithmetic is not or/xor/and")),
                }
            }
            other => return Err(self.err(e, format!("mark set from {other:?}"))),
        };
        self.stmts.push(Stmt::SetMark(op));
        Ok(())
    }

    /// A `fib … type` load.
    fn fib_load(&mut self, e: &Expr, dreg: u32, flags: u32) -> Result<(), LiftError> {
        let sel = match flags as u16 {
            NFTA_FIB_F_SADDR => Selector::FibSaddrType,
            NFTA_FIB_F_DADDR => Selector::FibDaddrType,
            _ => return Err(self.err(e, "fib flags other than saddr/daddr")),
        };
        self.load(e, dreg, Reg::Load { sel, len: 4 })
    }

    /// A mask-and-xor of a loaded value (mark arithmetic, prefix matches).
    fn bitwise(
        &mut self,
        e: &Expr,
        sreg: u32,
        dreg: u32,
        mask: &[u8],
        xor: &[u8],
    ) -> Result<(), LiftError> {
        match self.take(e, sreg)? {
            Reg::Load { sel, len } if mask.len() == len as usize => {
                let (mask, xor) = (mask.to_vec(), xor.to_vec());
                self.load(
                    e,
                    dreg,
                    Reg::Masked {
                        sel,
                        len,
                        mask,
                        xor,
                    },
                )
            }
            other => Err(self.err(e, format!("bitwise on {other:?}"))),
        }
    }

    /// A compare: a match statement, a numgen equality, or merged header matches.
    fn compare(&mut self, e: &Expr, sreg: u32, op: u32, data: &[u8]) -> Result<(), LiftError> {
        let op = match op {
            NFT_CMP_EQ => CmpOp::Eq,
            NFT_CMP_NEQ => CmpOp::Ne,
            _ => return Err(self.err(e, "only == and != are lifted")),
        };
        let reg = self.take(e, sreg)?;
        if let Reg::Numgen { modulus, offset: 0 } = reg {
            let value = ne32(data)
                .filter(|_| op == CmpOp::Eq)
                .ok_or_else(|| self.err(e, "numgen is only compared for equality with a u32"))?;
            self.stmts.push(Stmt::NumgenIs { modulus, value });
            return Ok(());
        }
        if let Reg::Merged(fields) = reg {
            if op != CmpOp::Eq {
                return Err(self.err(e, "nft merges only equality matches"));
            }
            let mut rest = data;
            for (sel, len) in fields {
                let Some((part, tail)) = rest.split_at_checked(len as usize) else {
                    return Err(self.err(e, "merged compare is shorter than its load"));
                };
                rest = tail;
                let load = Reg::Load { sel, len };
                let stmt = self
                    .cmp(load, op, part)
                    .ok_or_else(|| self.err(e, "merged field has no model equivalent"))?;
                self.stmts.push(stmt);
            }
            if !rest.is_empty() {
                return Err(self.err(e, "merged compare is longer than its load"));
            }
            return Ok(());
        }
        let stmt = self
            .cmp(reg, op, data)
            .ok_or_else(|| self.err(e, "comparison has no model equivalent"))?;
        if let Stmt::Match {
            left: Selector::NfProto,
            mask: None,
            op: CmpOp::Eq,
            right: Value::NfProto(p),
        } = stmt
        {
            self.context = Some(p);
        }
        self.stmts.push(stmt);
        Ok(())
    }

    /// A set or map lookup: membership, verdict maps, and the data maps `dnat` reads.
    fn lookup(
        &mut self,
        e: &Expr,
        set: &str,
        sreg: u32,
        dreg: Option<u32>,
        inverted: bool,
    ) -> Result<(), LiftError> {
        let info = self.set(e, set)?.clone();
        // numgen feeds a one-field map from its own register.
        if let Some(Reg::Numgen { modulus, offset: 0 }) =
            self.regs.get(&self.off(e, sreg)?).cloned()
        {
            if dreg != Some(NFT_REG_VERDICT) || inverted {
                return Err(self.err(e, "numgen only feeds verdict maps"));
            }
            self.take(e, sreg)?;
            let map = map_ref(set, &info);
            self.stmts.push(Stmt::NumgenVMap { modulus, map });
            return Ok(());
        }
        if let Some(Reg::HashBigEndian(draw)) = self.regs.get(&self.off(e, sreg)?).cloned() {
            let Some(dreg) = dreg.filter(|&d| d != NFT_REG_VERDICT && !inverted) else {
                return Err(self.err(e, "a hash interval key only feeds a data map"));
            };
            self.take(e, sreg)?;
            let map = set.to_owned();
            self.load(e, dreg, Reg::HashMapData { draw, map })?;
            return Ok(());
        }
        if let Some(Reg::NumgenBigEndian { modulus, offset }) =
            self.regs.get(&self.off(e, sreg)?).cloned()
        {
            let Some(dreg) = dreg.filter(|&d| d != NFT_REG_VERDICT && !inverted) else {
                return Err(self.err(e, "a numgen interval key only feeds a data map"));
            };
            self.take(e, sreg)?;
            self.load(
                e,
                dreg,
                Reg::NumgenMapData {
                    modulus,
                    offset,
                    map: set.to_owned(),
                },
            )?;
            return Ok(());
        }
        // `key . numgen random mod M` feeds a data map (shared slot maps).
        if info.key.len() > 1
            && info.key.last() == Some(&DataType::Integer)
            && info.anonymous.is_none()
        {
            let Some(dreg) = dreg.filter(|&d| d != NFT_REG_VERDICT && !inverted) else {
                return Err(self.err(e, "a key with a numgen slot only feeds a data map"));
            };
            let (key, slot_at) = self.key_and_end(e, sreg, info.key.len() - 1)?;
            let modulus = match self.regs.remove(&slot_at) {
                Some(Reg::Numgen { modulus, offset: 0 }) => modulus,
                other => {
                    return Err(self.err(e, format!("slot key part is {other:?}")));
                }
            };
            self.load(
                e,
                dreg,
                Reg::SlotMapData {
                    key,
                    modulus,
                    map: set.to_owned(),
                },
            )?;
            return Ok(());
        }
        let key = self.key(e, sreg, info.key.len())?;
        match dreg {
            Some(NFT_REG_VERDICT) if !inverted => {
                let map = map_ref(set, &info);
                self.stmts.push(Stmt::VMap { key, map });
            }
            None if info.anonymous.is_none() => self.stmts.push(Stmt::Lookup {
                key,
                set: set.to_owned(),
                negate: inverted,
            }),
            // A named data map's `address . port` (`dnat to key map @m`).
            Some(dreg) if !inverted && info.anonymous.is_none() => {
                self.load(
                    e,
                    dreg,
                    Reg::MapData {
                        key,
                        map: set.to_owned(),
                    },
                )?;
            }
            _ => return Err(self.err(e, "lookup shape has no model equivalent")),
        }
        Ok(())
    }

    /// `dnat to … map`: the map's data is `address . port`.
    fn dnat_map(&mut self, e: &Expr, family: u32, amin: u32, pmin: u32) -> Result<(), LiftError> {
        let addr_len = match (family as u8, self.family) {
            (NFPROTO_IPV4, Family::Ip) => 4,
            (NFPROTO_IPV6, Family::Ip6) => 16,
            _ => return Err(self.err(e, "dnat map of another address family")),
        };
        if self.off(e, pmin)? != self.off(e, amin)? + addr_len {
            return Err(self.err(e, "dnat port is not the data after the address"));
        }
        let stmt = match self.take(e, amin)? {
            Reg::NumgenMapData {
                modulus,
                offset,
                map,
            } => Stmt::DnatNumgenMap {
                modulus,
                offset,
                map,
            },
            Reg::HashMapData { draw, map } => Stmt::DnatHashMap {
                fields: draw.fields,
                seed: draw.seed,
                modulus: draw.modulus,
                offset: draw.offset,
                map,
            },
            Reg::SlotMapData { key, modulus, map } => Stmt::DnatSlotMap { key, modulus, map },
            Reg::MapData { key, map } => Stmt::DnatMap { key, map },
            _ => unreachable!("matched above"),
        };
        self.stmts.push(stmt);
        Ok(())
    }

    /// `dnat to address[:port]` from immediates.
    fn dnat(
        &mut self,
        e: &Expr,
        family: u32,
        amin: u32,
        proto_min: Option<u32>,
        flags: u32,
    ) -> Result<(), LiftError> {
        // The kernel dumps max registers equal to the min ones: a single target.
        // NF_NAT_RANGE_MAP_IPS | NF_NAT_RANGE_PROTO_SPECIFIED are implied by the
        // registers; anything else (random, persistent) is not in the model.
        if flags & !0x3 != 0 {
            return Err(self.err(e, "nat flags beyond map-ips/proto-specified"));
        }
        let addr = match (self.take(e, amin)?, family as u8) {
            (Reg::Imm(v), NFPROTO_IPV4) if v.len() == 4 => {
                IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(&v[..]).expect("4")))
            }
            (Reg::Imm(v), NFPROTO_IPV6) if v.len() == 16 => {
                IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(&v[..]).expect("16")))
            }
            (other, _) => return Err(self.err(e, format!("dnat address from {other:?}"))),
        };
        let port = match proto_min {
            None => None,
            Some(r) => match self.take(e, r)? {
                Reg::Imm(v) if v.len() >= 2 => Some(u16::from_be_bytes([v[0], v[1]])),
                other => return Err(self.err(e, format!("dnat port from {other:?}"))),
            },
        };
        self.stmts.push(Stmt::Dnat { addr, port });
        Ok(())
    }

    /// `masquerade [fully-random]`.
    fn masquerade(&mut self, e: &Expr, flags: u32) -> Result<(), LiftError> {
        const NF_NAT_RANGE_PROTO_RANDOM_FULLY: u32 = 0x10;
        if flags & !NF_NAT_RANGE_PROTO_RANDOM_FULLY != 0 {
            return Err(self.err(e, "masquerade flags beyond fully-random"));
        }
        self.stmts.push(Stmt::Masquerade {
            fully_random: flags & NF_NAT_RANGE_PROTO_RANDOM_FULLY != 0,
        });
        Ok(())
    }

    /// `reject`, in the spellings the model has.
    fn reject(&mut self, e: &Expr, kind: u32, code: u8) -> Result<(), LiftError> {
        // ICMP port unreachable: code 3 for ICMP, 4 for ICMPv6.
        let version = match code {
            3 => NFPROTO_IPV4,
            4 => NFPROTO_IPV6,
            _ => 0,
        };
        let kind = match (kind, self.family) {
            // `reject with tcp reset` needs `meta l4proto tcp`, which nft adds at the
            // rule's start when missing; it stays a statement so the rule re-renders
            // to the same bytecode.
            (NFT_REJECT_TCP_RST, _) => RejectKind::TcpReset,
            (NFT_REJECT_ICMP_UNREACH, Family::Ip) if version == NFPROTO_IPV4 => RejectKind::Default,
            (NFT_REJECT_ICMP_UNREACH, Family::Ip6) if version == NFPROTO_IPV6 => {
                RejectKind::Default
            }
            // In inet, a plain reject after an ip/ip6 or nfproto match picks that
            // ICMP version (nft adds the nfproto match itself when none precedes).
            (NFT_REJECT_ICMP_UNREACH, Family::Inet)
                if version != 0 && self.context == Some(version) =>
            {
                RejectKind::Default
            }
            (NFT_REJECT_ICMPX_UNREACH, Family::Inet)
                if u32::from(code) == NFT_REJECT_ICMPX_PORT_UNREACH =>
            {
                RejectKind::Default
            }
            _ => return Err(self.err(e, "reject type/code has no model equivalent")),
        };
        self.stmts.push(Stmt::Reject(kind));
        Ok(())
    }

    /// `update @set { key }`.
    fn update(&mut self, e: &Expr, set: &str, sreg_key: u32) -> Result<(), LiftError> {
        let n = self.set(e, set)?.key.len();
        let key = self.key(e, sreg_key, n)?;
        self.stmts.push(Stmt::Update {
            set: set.to_owned(),
            key,
        });
        Ok(())
    }

    /// `limit rate N/unit burst B packets`.
    fn limit(&mut self, e: &Expr, rate: u64, unit: u64, burst: u32) -> Result<(), LiftError> {
        let unit = match unit {
            1 => RateUnit::Second,
            60 => RateUnit::Minute,
            3600 => RateUnit::Hour,
            86400 => RateUnit::Day,
            _ => return Err(self.err(e, "limit unit")),
        };
        self.stmts.push(Stmt::Limit { rate, unit, burst });
        Ok(())
    }

    fn payload_selector(
        &self,
        e: &Expr,
        base: u32,
        offset: u32,
        len: u32,
    ) -> Result<Selector, LiftError> {
        let v4 = self.family != Family::Ip6;
        let v6 = self.family != Family::Ip;
        let sel = match (base, offset) {
            (NFT_PAYLOAD_NETWORK_HEADER, 12) if v4 && len <= 4 => Selector::IpSaddr,
            (NFT_PAYLOAD_NETWORK_HEADER, 16) if v4 && len <= 4 => Selector::IpDaddr,
            (NFT_PAYLOAD_NETWORK_HEADER, 8) if v6 && len <= 16 => Selector::Ip6Saddr,
            (NFT_PAYLOAD_NETWORK_HEADER, 24) if v6 && len <= 16 => Selector::Ip6Daddr,
            (NFT_PAYLOAD_TRANSPORT_HEADER, 0) if len == 2 => Selector::ThSport,
            (NFT_PAYLOAD_TRANSPORT_HEADER, 2) if len == 2 => Selector::ThDport,
            _ => return Err(self.err(e, "payload field has no selector")),
        };
        if len == 0 {
            return Err(self.err(e, "zero-length payload load"));
        }
        Ok(sel)
    }

    /// The fields a merged load of `len` bytes at `offset` covers: whole fields in header
    /// order, the last possibly a prefix of an address.
    fn merged_fields(&self, base: u32, offset: u32, len: u32) -> Option<Vec<(Selector, u32)>> {
        let layout: &[(Selector, u32, u32)] = match (base, self.family) {
            (NFT_PAYLOAD_TRANSPORT_HEADER, _) => {
                &[(Selector::ThSport, 0, 2), (Selector::ThDport, 2, 2)]
            }
            // In inet tables the offset tells the header apart: ip saddr is at 12, ip6 at 8.
            (NFT_PAYLOAD_NETWORK_HEADER, Family::Ip)
            | (NFT_PAYLOAD_NETWORK_HEADER, Family::Inet)
                if (12..20).contains(&offset) && self.family != Family::Ip6 =>
            {
                &[(Selector::IpSaddr, 12, 4), (Selector::IpDaddr, 16, 4)]
            }
            (NFT_PAYLOAD_NETWORK_HEADER, Family::Ip6 | Family::Inet) => {
                &[(Selector::Ip6Saddr, 8, 16), (Selector::Ip6Daddr, 24, 16)]
            }
            _ => return None,
        };
        let mut fields = Vec::new();
        let (mut at, end) = (offset, offset + len);
        for &(sel, off, flen) in layout {
            if at == end {
                break;
            }
            if off != at {
                continue;
            }
            let take = flen.min(end - at);
            if take < flen && !is_addr(sel) {
                return None;
            }
            fields.push((sel, take));
            at += take;
        }
        (at == end && fields.len() > 1).then_some(fields)
    }

    fn cmp(&self, reg: Reg, op: CmpOp, data: &[u8]) -> Option<Stmt> {
        let m = |left, mask, op, right| {
            Some(Stmt::Match {
                left,
                mask,
                op,
                right,
            })
        };
        match reg {
            Reg::Load { sel, len } if len == full_len(sel) || is_addr(sel) => {
                if sel == Selector::CtState {
                    // `ct state != new` compares the whole state value.
                    return m(sel, None, op, Value::CtState(CtState(ne32(data)?)));
                }
                let right = if len < full_len(sel) {
                    prefix_value(sel, data, len * 8)?
                } else if matches!(sel, Selector::IifName | Selector::OifName) {
                    // A prefix match (`veth*`) compares fewer bytes than the register holds.
                    Value::IfName(ifname(data))
                } else {
                    if data.len() != len as usize {
                        return None;
                    }
                    selector_value(sel, data)?
                };
                m(sel, None, op, right)
            }
            Reg::Masked {
                sel,
                len,
                mask,
                xor,
            } => {
                if xor.iter().any(|&b| b != 0) || data.len() != len as usize {
                    return None;
                }
                match sel {
                    // `ct state new,established`: any of the bits set.
                    Selector::CtState if data.iter().all(|&b| b == 0) && op == CmpOp::Ne => {
                        m(sel, None, CmpOp::Eq, Value::CtState(CtState(ne32(&mask)?)))
                    }
                    Selector::CtState => m(
                        sel,
                        Some(ne32(&mask)?),
                        op,
                        Value::CtState(CtState(ne32(data)?)),
                    ),
                    // `ct status dnat`: any of the bits set.
                    Selector::CtStatus if data.iter().all(|&b| b == 0) && op == CmpOp::Ne => m(
                        sel,
                        None,
                        CmpOp::Eq,
                        Value::CtStatus(CtStatus(ne32(&mask)?)),
                    ),
                    Selector::Mark => m(sel, Some(ne32(&mask)?), op, Value::Mark(ne32(data)?)),
                    _ if is_addr(sel) && len == full_len(sel) => {
                        let prefix = prefix_len(&mask)?;
                        m(sel, None, op, prefix_value(sel, data, prefix)?)
                    }
                    _ => None,
                }
            }
            _ => None,
        }
    }
}

fn map_ref(name: &str, info: &SetInfo) -> MapRef {
    match &info.anonymous {
        Some(elems) => MapRef::Anonymous(elems.clone()),
        None => MapRef::Named(name.to_owned()),
    }
}

fn ne32(b: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(b.try_into().ok()?))
}

fn is_addr(sel: Selector) -> bool {
    matches!(
        sel,
        Selector::IpSaddr | Selector::IpDaddr | Selector::Ip6Saddr | Selector::Ip6Daddr
    )
}

/// Bytes a selector occupies in a register.
pub fn full_len(sel: Selector) -> u32 {
    match sel {
        Selector::IpSaddr | Selector::IpDaddr => 4,
        Selector::Ip6Saddr | Selector::Ip6Daddr => 16,
        Selector::ThSport | Selector::ThDport => 2,
        Selector::L4Proto | Selector::NfProto => 1,
        Selector::Mark
        | Selector::FibSaddrType
        | Selector::FibDaddrType
        | Selector::CtState
        | Selector::CtStatus => 4,
        Selector::IifName | Selector::OifName => 16,
    }
}

/// The number of leading one bits of a contiguous netmask.
fn prefix_len(mask: &[u8]) -> Option<u32> {
    let ones: u32 = mask.iter().map(|b| b.count_ones()).sum();
    let expect = (0..mask.len() * 8).map(|i| {
        let bit = (mask[i / 8] >> (7 - i % 8)) & 1;
        bit == 1
    });
    expect
        .enumerate()
        .all(|(i, set)| set == ((i as u32) < ones))
        .then_some(ones)
}

/// `addr/prefix` from the first bytes of an address; a full-length prefix is a plain address.
fn prefix_value(sel: Selector, data: &[u8], prefix: u32) -> Option<Value> {
    match sel {
        Selector::IpSaddr | Selector::IpDaddr => {
            let mut b = [0u8; 4];
            b.get_mut(..data.len())?.copy_from_slice(data);
            let a = Ipv4Addr::from(b);
            if prefix == 32 {
                return Some(Value::Ipv4(a));
            }
            Some(Value::Ipv4Net(ipnet::Ipv4Net::new(a, prefix as u8).ok()?))
        }
        Selector::Ip6Saddr | Selector::Ip6Daddr => {
            let mut b = [0u8; 16];
            b.get_mut(..data.len())?.copy_from_slice(data);
            let a = Ipv6Addr::from(b);
            if prefix == 128 {
                return Some(Value::Ipv6(a));
            }
            Some(Value::Ipv6Net(ipnet::Ipv6Net::new(a, prefix as u8).ok()?))
        }
        _ => None,
    }
}

fn selector_value(sel: Selector, data: &[u8]) -> Option<Value> {
    Some(match sel {
        Selector::IpSaddr | Selector::IpDaddr => value(DataType::Ipv4Addr, data)?,
        Selector::Ip6Saddr | Selector::Ip6Daddr => value(DataType::Ipv6Addr, data)?,
        Selector::ThSport | Selector::ThDport => value(DataType::InetService, data)?,
        Selector::L4Proto => Value::Proto(*data.first()?),
        Selector::NfProto => Value::NfProto(*data.first()?),
        Selector::Mark => Value::Mark(ne32(data)?),
        Selector::IifName | Selector::OifName => Value::IfName(ifname(data)),
        Selector::FibSaddrType | Selector::FibDaddrType => Value::AddrType(match ne32(data)? {
            1 => AddrType::Unicast,
            2 => AddrType::Local,
            3 => AddrType::Broadcast,
            5 => AddrType::Multicast,
            _ => return None,
        }),
        Selector::CtState => Value::CtState(CtState(ne32(data)?)),
        Selector::CtStatus => Value::CtStatus(CtStatus(ne32(data)?)),
    })
}
