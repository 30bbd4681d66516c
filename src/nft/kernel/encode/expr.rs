//! Rule expressions on the wire: the inverse of `decode::expr`.

use std::collections::BTreeMap;

use super::super::decode::{Expr, RawData};
use super::super::sys::*;
use super::{data_value, verdict_attrs};
use crate::netlink::attr::AttrWriter;

/// NFTA_EXPR_NAME + NFTA_EXPR_DATA of one expression. `anon` maps lookup placeholders to
/// the batch set ids of their anonymous maps. Long because it is the dispatch table: one arm
/// per `Expr` variant, each writing only that expression's attributes.
pub(super) fn expr_attrs(w: &mut AttrWriter, e: &Expr, anon: &BTreeMap<String, u32>) {
    let name = match e {
        Expr::Payload { .. } => "payload",
        Expr::Meta { .. } => "meta",
        Expr::Ct { .. } => "ct",
        Expr::Cmp { .. } => "cmp",
        Expr::Bitwise { .. } => "bitwise",
        Expr::Lookup { .. } => "lookup",
        Expr::Immediate { .. } => "immediate",
        Expr::Numgen { .. } => "numgen",
        Expr::Hash { .. } => "hash",
        Expr::Nat { .. } => "nat",
        Expr::Masq { .. } => "masq",
        Expr::Counter { .. } => "counter",
        Expr::Byteorder { .. } => "byteorder",
        Expr::Reject { .. } => "reject",
        Expr::Fib { .. } => "fib",
        Expr::Dynset { .. } => "dynset",
        Expr::Limit { .. } => "limit",
        Expr::Other(n) => n.as_str(),
    };
    w.string(NFTA_EXPR_NAME, name);
    w.nested(NFTA_EXPR_DATA, |w| match e {
        Expr::Payload {
            base,
            offset,
            len,
            dreg,
        } => {
            w.be32(NFTA_PAYLOAD_DREG, *dreg)
                .be32(NFTA_PAYLOAD_BASE, *base)
                .be32(NFTA_PAYLOAD_OFFSET, *offset)
                .be32(NFTA_PAYLOAD_LEN, *len);
        }
        Expr::Meta { key, dreg, sreg } => {
            w.be32(NFTA_META_KEY, *key);
            if let Some(d) = dreg {
                w.be32(NFTA_META_DREG, *d);
            }
            if let Some(s) = sreg {
                w.be32(NFTA_META_SREG, *s);
            }
        }
        Expr::Ct {
            key,
            dreg,
            direction,
        } => {
            if let Some(d) = dreg {
                w.be32(NFTA_CT_DREG, *d);
            }
            w.be32(NFTA_CT_KEY, *key);
            if let Some(dir) = direction {
                w.u8(NFTA_CT_DIRECTION, *dir);
            }
        }
        Expr::Cmp { sreg, op, data } => {
            w.be32(NFTA_CMP_SREG, *sreg).be32(NFTA_CMP_OP, *op);
            data_value(w, NFTA_CMP_DATA, data);
        }
        Expr::Bitwise {
            sreg,
            dreg,
            op,
            mask,
            xor,
        } => {
            w.be32(NFTA_BITWISE_SREG, *sreg)
                .be32(NFTA_BITWISE_DREG, *dreg)
                .be32(NFTA_BITWISE_LEN, mask.len() as u32);
            if *op != NFT_BITWISE_MASK_XOR {
                w.be32(NFTA_BITWISE_OP, *op);
            }
            data_value(w, NFTA_BITWISE_MASK, mask);
            data_value(w, NFTA_BITWISE_XOR, xor);
        }
        Expr::Lookup {
            set,
            sreg,
            dreg,
            inverted,
        } => {
            let id = anon.get(set);
            w.string(NFTA_LOOKUP_SET, if id.is_some() { "__map%d" } else { set });
            w.be32(NFTA_LOOKUP_SREG, *sreg);
            if let Some(d) = dreg {
                w.be32(NFTA_LOOKUP_DREG, *d);
            }
            if let Some(id) = id {
                w.be32(NFTA_LOOKUP_SET_ID, *id);
            }
            if *inverted {
                w.be32(NFTA_LOOKUP_FLAGS, NFT_LOOKUP_F_INV);
            }
        }
        Expr::Immediate { dreg, data } => {
            w.be32(NFTA_IMMEDIATE_DREG, *dreg);
            match data {
                RawData::Value(v) => data_value(w, NFTA_IMMEDIATE_DATA, v),
                RawData::Verdict(v) => {
                    w.nested(NFTA_IMMEDIATE_DATA, |w| verdict_attrs(w, v));
                }
            }
        }
        Expr::Numgen {
            dreg,
            modulus,
            kind,
            offset,
        } => {
            w.be32(NFTA_NG_DREG, *dreg)
                .be32(NFTA_NG_MODULUS, *modulus)
                .be32(NFTA_NG_TYPE, *kind)
                .be32(NFTA_NG_OFFSET, *offset);
        }
        Expr::Hash {
            sreg,
            dreg,
            len,
            modulus,
            seed,
            offset,
            kind,
        } => {
            w.be32(NFTA_HASH_SREG, *sreg)
                .be32(NFTA_HASH_DREG, *dreg)
                .be32(NFTA_HASH_LEN, *len)
                .be32(NFTA_HASH_MODULUS, *modulus)
                .be32(NFTA_HASH_SEED, *seed)
                .be32(NFTA_HASH_OFFSET, *offset)
                .be32(NFTA_HASH_TYPE, *kind);
        }
        Expr::Nat {
            kind,
            family,
            addr_min,
            addr_max,
            proto_min,
            proto_max,
            flags,
        } => {
            w.be32(NFTA_NAT_TYPE, *kind).be32(NFTA_NAT_FAMILY, *family);
            if let Some(r) = addr_min {
                w.be32(NFTA_NAT_REG_ADDR_MIN, *r);
            }
            if let Some(r) = addr_max {
                w.be32(NFTA_NAT_REG_ADDR_MAX, *r);
            }
            if let Some(r) = proto_min {
                w.be32(NFTA_NAT_REG_PROTO_MIN, *r);
            }
            if let Some(r) = proto_max {
                w.be32(NFTA_NAT_REG_PROTO_MAX, *r);
            }
            if *flags != 0 {
                w.be32(NFTA_NAT_FLAGS, *flags);
            }
        }
        Expr::Masq { flags, proto_min } => {
            if *flags != 0 {
                w.be32(NFTA_MASQ_FLAGS, *flags);
            }
            if let Some(r) = proto_min {
                w.be32(NFTA_MASQ_REG_PROTO_MIN, *r);
            }
        }
        Expr::Counter { .. } => {
            w.be64(NFTA_COUNTER_BYTES, 0).be64(NFTA_COUNTER_PACKETS, 0);
        }
        Expr::Byteorder {
            sreg,
            dreg,
            op,
            len,
            size,
        } => {
            w.be32(NFTA_BYTEORDER_SREG, *sreg)
                .be32(NFTA_BYTEORDER_DREG, *dreg)
                .be32(NFTA_BYTEORDER_OP, *op);
            w.be32(NFTA_BYTEORDER_LEN, *len)
                .be32(NFTA_BYTEORDER_SIZE, *size);
        }
        Expr::Reject { kind, code } => {
            w.be32(NFTA_REJECT_TYPE, *kind);
            if *kind != NFT_REJECT_TCP_RST {
                w.u8(NFTA_REJECT_ICMP_CODE, *code);
            }
        }
        Expr::Fib {
            dreg,
            result,
            flags,
        } => {
            w.be32(NFTA_FIB_DREG, *dreg)
                .be32(NFTA_FIB_RESULT, *result)
                .be32(NFTA_FIB_FLAGS, *flags);
        }
        Expr::Dynset {
            set,
            op,
            sreg_key,
            sreg_data,
            timeout,
            ..
        } => {
            w.string(NFTA_DYNSET_SET_NAME, set)
                .be32(NFTA_DYNSET_OP, *op)
                .be32(NFTA_DYNSET_SREG_KEY, *sreg_key);
            if let Some(r) = sreg_data {
                w.be32(NFTA_DYNSET_SREG_DATA, *r);
            }
            if let Some(t) = timeout {
                w.be64(NFTA_DYNSET_TIMEOUT, *t);
            }
        }
        Expr::Limit {
            rate,
            unit,
            burst,
            kind,
            flags,
        } => {
            w.be64(NFTA_LIMIT_RATE, *rate)
                .be64(NFTA_LIMIT_UNIT, *unit)
                .be32(NFTA_LIMIT_BURST, *burst);
            w.be32(NFTA_LIMIT_TYPE, *kind)
                .be32(NFTA_LIMIT_FLAGS, *flags);
        }
        Expr::Other(_) => {}
    });
}
