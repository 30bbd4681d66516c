//! Rules and their kernel expression lists: each expression by name into `Expr` (unknown
//! names kept as `Expr::Other`, missing attributes an error), printed as
//! `nft --debug=netlink` lists them.

use super::*;

/// One kernel expression, as listed by `nft --debug=netlink`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Expr {
    Payload {
        base: u32,
        offset: u32,
        len: u32,
        dreg: u32,
    },
    Meta {
        key: u32,
        dreg: Option<u32>,
        sreg: Option<u32>,
    },
    Ct {
        key: u32,
        dreg: Option<u32>,
        direction: Option<u8>,
    },
    Cmp {
        sreg: u32,
        op: u32,
        data: Vec<u8>,
    },
    Bitwise {
        sreg: u32,
        dreg: u32,
        op: u32,
        mask: Vec<u8>,
        xor: Vec<u8>,
    },
    Lookup {
        set: String,
        sreg: u32,
        dreg: Option<u32>,
        inverted: bool,
    },
    Immediate {
        dreg: u32,
        data: RawData,
    },
    Numgen {
        dreg: u32,
        modulus: u32,
        kind: u32,
        offset: u32,
    },
    /// `hash`: NFT_HASH_JENKINS (`jhash`) or NFT_HASH_SYM over `len` bytes from `sreg`.
    Hash {
        sreg: u32,
        dreg: u32,
        len: u32,
        modulus: u32,
        seed: u32,
        offset: u32,
        kind: u32,
    },
    Nat {
        kind: u32,
        family: u32,
        addr_min: Option<u32>,
        addr_max: Option<u32>,
        proto_min: Option<u32>,
        proto_max: Option<u32>,
        flags: u32,
    },
    Masq {
        flags: u32,
        proto_min: Option<u32>,
    },
    /// `counter`; `packets` is what the kernel has counted (0 in what we send).
    Counter {
        packets: u64,
    },
    Byteorder {
        sreg: u32,
        dreg: u32,
        op: u32,
        len: u32,
        size: u32,
    },
    Reject {
        kind: u32,
        code: u8,
    },
    Fib {
        dreg: u32,
        result: u32,
        flags: u32,
    },
    Dynset {
        set: String,
        op: u32,
        sreg_key: u32,
        sreg_data: Option<u32>,
        timeout: Option<u64>,
        has_exprs: bool,
    },
    Limit {
        rate: u64,
        unit: u64,
        burst: u32,
        kind: u32,
        flags: u32,
    },
    /// An expression we do not lift (its kernel name).
    Other(String),
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        match self {
            Expr::Payload {
                base,
                offset,
                len,
                dreg,
            } => write!(
                f,
                "payload load {len}b @ base {base} + {offset} => reg {dreg}"
            ),
            Expr::Meta { key, dreg, sreg } => match (dreg, sreg) {
                (Some(d), _) => write!(f, "meta load {key} => reg {d}"),
                (_, Some(s)) => write!(f, "meta set {key} with reg {s}"),
                _ => write!(f, "meta {key}"),
            },
            Expr::Ct { key, dreg, .. } => write!(f, "ct load {key} => reg {dreg:?}"),
            Expr::Cmp { sreg, op, data } => write!(f, "cmp op {op} reg {sreg} 0x{}", hex(data)),
            Expr::Bitwise {
                sreg,
                dreg,
                mask,
                xor,
                ..
            } => write!(
                f,
                "bitwise reg {dreg} = (reg {sreg} & 0x{}) ^ 0x{}",
                hex(mask),
                hex(xor)
            ),
            Expr::Lookup {
                set,
                sreg,
                dreg,
                inverted,
            } => write!(
                f,
                "lookup reg {sreg} set {set} dreg {dreg:?}{}",
                if *inverted { " inverted" } else { "" }
            ),
            Expr::Immediate { dreg, data } => write!(f, "immediate reg {dreg} {data:?}"),
            Expr::Numgen {
                dreg,
                modulus,
                kind,
                offset,
            } => write!(
                f,
                "numgen reg {dreg} = type {kind} mod {modulus} offset {offset}"
            ),
            Expr::Hash {
                sreg,
                dreg,
                len,
                modulus,
                seed,
                offset,
                kind,
            } => write!(
                f,
                "hash reg {dreg} = type {kind} (reg {sreg}, {len}, {seed:#x}) mod {modulus} offset {offset}"
            ),
            Expr::Nat { kind, flags, .. } => write!(f, "nat type {kind} flags {flags:#x}"),
            Expr::Masq { flags, .. } => write!(f, "masq flags {flags:#x}"),
            Expr::Counter { .. } => write!(f, "counter"),
            Expr::Byteorder {
                sreg,
                dreg,
                op,
                len,
                size,
            } => write!(
                f,
                "byteorder reg {dreg} = op {op}(reg {sreg}, size {size}, len {len})"
            ),
            Expr::Reject { kind, code } => write!(f, "reject type {kind} code {code}"),
            Expr::Fib {
                dreg,
                result,
                flags,
            } => write!(f, "fib result {result} flags {flags:#x} => reg {dreg}"),
            Expr::Dynset { set, op, .. } => write!(f, "dynset op {op} set {set}"),
            Expr::Limit {
                rate, unit, burst, ..
            } => write!(f, "limit rate {rate}/{unit}s burst {burst}"),
            Expr::Other(name) => write!(f, "{name}"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawRule {
    pub table: String,
    pub chain: String,
    pub handle: u64,
    pub(crate) exprs: Vec<Expr>,
    pub comment: Option<String>,
}

pub fn rule(attr_bytes: &[u8]) -> Result<RawRule, DecodeError> {
    const W: &str = "rule";
    let (mut table, mut chain, mut handle, mut comment) = (None, None, 0, None);
    let mut exprs = Vec::new();
    for a in attrs(W, attr_bytes) {
        let a = a?;
        match a.kind {
            NFTA_RULE_TABLE => table = Some(at(W, a.string())?.to_owned()),
            NFTA_RULE_CHAIN => chain = Some(at(W, a.string())?.to_owned()),
            NFTA_RULE_HANDLE => handle = at(W, a.be64())?,
            NFTA_RULE_USERDATA => comment = udata_comment(a.value, UDATA_RULE_COMMENT),
            NFTA_RULE_EXPRESSIONS => {
                for e in attrs(W, a.value) {
                    exprs.push(expr(e?.value)?);
                }
            }
            _ => {}
        }
    }
    Ok(RawRule {
        table: table.ok_or(DecodeError::Missing {
            what: W,
            attr: "NFTA_RULE_TABLE",
        })?,
        chain: chain.ok_or(DecodeError::Missing {
            what: W,
            attr: "NFTA_RULE_CHAIN",
        })?,
        handle,
        exprs,
        comment,
    })
}

/// Attribute values of one expression's NFTA_EXPR_DATA, by type.
struct Fields<'a>(BTreeMap<u16, Attr<'a>>);

impl<'a> Fields<'a> {
    fn parse(buf: &'a [u8]) -> Result<Self, DecodeError> {
        let mut m = BTreeMap::new();
        for a in attrs("expression", buf) {
            let a = a?;
            m.insert(a.kind, a);
        }
        Ok(Fields(m))
    }
    fn u32(&self, kind: u16) -> Result<Option<u32>, DecodeError> {
        self.0
            .get(&kind)
            .map(|a| at("expression", a.be32()))
            .transpose()
    }
    fn need32(&self, name: &'static str, kind: u16) -> Result<u32, DecodeError> {
        self.u32(kind)?.ok_or(DecodeError::Missing {
            what: "expression",
            attr: name,
        })
    }
    fn u64(&self, kind: u16) -> Result<Option<u64>, DecodeError> {
        self.0
            .get(&kind)
            .map(|a| at("expression", a.be64()))
            .transpose()
    }
    fn bytes(&self, kind: u16) -> Option<&'a [u8]> {
        self.0.get(&kind).map(|a| a.value)
    }
    fn string(&self, name: &'static str, kind: u16) -> Result<String, DecodeError> {
        let a = self.0.get(&kind).ok_or(DecodeError::Missing {
            what: "expression",
            attr: name,
        })?;
        Ok(at("expression", a.string())?.to_owned())
    }
    /// A nested NFTA_DATA_VALUE.
    fn value(&self, name: &'static str, kind: u16) -> Result<Vec<u8>, DecodeError> {
        match self
            .bytes(kind)
            .map(|b| data("expression", b))
            .transpose()?
        {
            Some(RawData::Value(v)) => Ok(v),
            _ => Err(DecodeError::Missing {
                what: "expression",
                attr: name,
            }),
        }
    }
}

/// One expression by its NFTA_EXPR_NAME. Long because it is the dispatch table: one arm per
/// expression name, each only reading that expression's attributes.
fn expr(buf: &[u8]) -> Result<Expr, DecodeError> {
    const W: &str = "expression";
    let (mut name, mut body) = (None, &[][..]);
    for a in attrs(W, buf) {
        let a = a?;
        match a.kind {
            NFTA_EXPR_NAME => name = Some(at(W, a.string())?.to_owned()),
            NFTA_EXPR_DATA => body = a.value,
            _ => {}
        }
    }
    let name = name.ok_or(DecodeError::Missing {
        what: W,
        attr: "NFTA_EXPR_NAME",
    })?;
    let f = Fields::parse(body)?;
    Ok(match name.as_str() {
        "payload" => {
            if f.u32(NFTA_PAYLOAD_SREG)?.is_some() {
                return Ok(Expr::Other("payload set".into()));
            }
            Expr::Payload {
                base: f.need32("NFTA_PAYLOAD_BASE", NFTA_PAYLOAD_BASE)?,
                offset: f.need32("NFTA_PAYLOAD_OFFSET", NFTA_PAYLOAD_OFFSET)?,
                len: f.need32("NFTA_PAYLOAD_LEN", NFTA_PAYLOAD_LEN)?,
                dreg: f.need32("NFTA_PAYLOAD_DREG", NFTA_PAYLOAD_DREG)?,
            }
        }
        "meta" => Expr::Meta {
            key: f.need32("NFTA_META_KEY", NFTA_META_KEY)?,
            dreg: f.u32(NFTA_META_DREG)?,
            sreg: f.u32(NFTA_META_SREG)?,
        },
        "ct" => {
            if f.u32(NFTA_CT_SREG)?.is_some() {
                return Ok(Expr::Other("ct set".into()));
            }
            Expr::Ct {
                key: f.need32("NFTA_CT_KEY", NFTA_CT_KEY)?,
                dreg: f.u32(NFTA_CT_DREG)?,
                direction: f.bytes(NFTA_CT_DIRECTION).and_then(|b| b.first().copied()),
            }
        }
        "cmp" => Expr::Cmp {
            sreg: f.need32("NFTA_CMP_SREG", NFTA_CMP_SREG)?,
            op: f.need32("NFTA_CMP_OP", NFTA_CMP_OP)?,
            data: f.value("NFTA_CMP_DATA", NFTA_CMP_DATA)?,
        },
        "bitwise" => {
            let op = f.u32(NFTA_BITWISE_OP)?.unwrap_or(NFT_BITWISE_MASK_XOR);
            Expr::Bitwise {
                sreg: f.need32("NFTA_BITWISE_SREG", NFTA_BITWISE_SREG)?,
                dreg: f.need32("NFTA_BITWISE_DREG", NFTA_BITWISE_DREG)?,
                op,
                mask: if op == NFT_BITWISE_MASK_XOR {
                    f.value("NFTA_BITWISE_MASK", NFTA_BITWISE_MASK)?
                } else {
                    Vec::new()
                },
                xor: if op == NFT_BITWISE_MASK_XOR {
                    f.value("NFTA_BITWISE_XOR", NFTA_BITWISE_XOR)?
                } else {
                    Vec::new()
                },
            }
        }
        "lookup" => Expr::Lookup {
            set: f.string("NFTA_LOOKUP_SET", NFTA_LOOKUP_SET)?,
            sreg: f.need32("NFTA_LOOKUP_SREG", NFTA_LOOKUP_SREG)?,
            dreg: f.u32(NFTA_LOOKUP_DREG)?,
            inverted: f.u32(NFTA_LOOKUP_FLAGS)?.unwrap_or(0) & NFT_LOOKUP_F_INV != 0,
        },
        "immediate" => Expr::Immediate {
            dreg: f.need32("NFTA_IMMEDIATE_DREG", NFTA_IMMEDIATE_DREG)?,
            data: data(
                W,
                f.bytes(NFTA_IMMEDIATE_DATA).ok_or(DecodeError::Missing {
                    what: W,
                    attr: "NFTA_IMMEDIATE_DATA",
                })?,
            )?,
        },
        "numgen" => Expr::Numgen {
            dreg: f.need32("NFTA_NG_DREG", NFTA_NG_DREG)?,
            modulus: f.need32("NFTA_NG_MODULUS", NFTA_NG_MODULUS)?,
            kind: f.need32("NFTA_NG_TYPE", NFTA_NG_TYPE)?,
            offset: f.u32(NFTA_NG_OFFSET)?.unwrap_or(0),
        },
        "hash" => Expr::Hash {
            sreg: f.need32("NFTA_HASH_SREG", NFTA_HASH_SREG)?,
            dreg: f.need32("NFTA_HASH_DREG", NFTA_HASH_DREG)?,
            len: f.need32("NFTA_HASH_LEN", NFTA_HASH_LEN)?,
            modulus: f.need32("NFTA_HASH_MODULUS", NFTA_HASH_MODULUS)?,
            seed: f.u32(NFTA_HASH_SEED)?.unwrap_or(0),
            offset: f.u32(NFTA_HASH_OFFSET)?.unwrap_or(0),
            kind: f.u32(NFTA_HASH_TYPE)?.unwrap_or(NFT_HASH_JENKINS),
        },
        "nat" => Expr::Nat {
            kind: f.need32("NFTA_NAT_TYPE", NFTA_NAT_TYPE)?,
            family: f.need32("NFTA_NAT_FAMILY", NFTA_NAT_FAMILY)?,
            addr_min: f.u32(NFTA_NAT_REG_ADDR_MIN)?,
            addr_max: f.u32(NFTA_NAT_REG_ADDR_MAX)?,
            proto_min: f.u32(NFTA_NAT_REG_PROTO_MIN)?,
            proto_max: f.u32(NFTA_NAT_REG_PROTO_MAX)?,
            flags: f.u32(NFTA_NAT_FLAGS)?.unwrap_or(0),
        },
        "masq" => Expr::Masq {
            flags: f.u32(NFTA_MASQ_FLAGS)?.unwrap_or(0),
            proto_min: f.u32(NFTA_MASQ_REG_PROTO_MIN)?,
        },
        "counter" => Expr::Counter {
            packets: f.u64(NFTA_COUNTER_PACKETS)?.unwrap_or(0),
        },
        "byteorder" => Expr::Byteorder {
            sreg: f.need32("NFTA_BYTEORDER_SREG", NFTA_BYTEORDER_SREG)?,
            dreg: f.need32("NFTA_BYTEORDER_DREG", NFTA_BYTEORDER_DREG)?,
            op: f.need32("NFTA_BYTEORDER_OP", NFTA_BYTEORDER_OP)?,
            len: f.need32("NFTA_BYTEORDER_LEN", NFTA_BYTEORDER_LEN)?,
            size: f.need32("NFTA_BYTEORDER_SIZE", NFTA_BYTEORDER_SIZE)?,
        },
        "reject" => Expr::Reject {
            kind: f.need32("NFTA_REJECT_TYPE", NFTA_REJECT_TYPE)?,
            code: f
                .bytes(NFTA_REJECT_ICMP_CODE)
                .and_then(|b| b.first().copied())
                .unwrap_or(0),
        },
        "fib" => Expr::Fib {
            dreg: f.need32("NFTA_FIB_DREG", NFTA_FIB_DREG)?,
            result: f.need32("NFTA_FIB_RESULT", NFTA_FIB_RESULT)?,
            flags: f.need32("NFTA_FIB_FLAGS", NFTA_FIB_FLAGS)?,
        },
        "dynset" => Expr::Dynset {
            set: f.string("NFTA_DYNSET_SET_NAME", NFTA_DYNSET_SET_NAME)?,
            op: f.need32("NFTA_DYNSET_OP", NFTA_DYNSET_OP)?,
            sreg_key: f.need32("NFTA_DYNSET_SREG_KEY", NFTA_DYNSET_SREG_KEY)?,
            sreg_data: f.u32(NFTA_DYNSET_SREG_DATA)?,
            timeout: f.u64(NFTA_DYNSET_TIMEOUT)?.filter(|&t| t != 0),
            has_exprs: f.bytes(NFTA_DYNSET_EXPR).is_some()
                || f.bytes(NFTA_DYNSET_EXPRESSIONS).is_some(),
        },
        "limit" => Expr::Limit {
            rate: f.u64(NFTA_LIMIT_RATE)?.unwrap_or(0),
            unit: f.u64(NFTA_LIMIT_UNIT)?.unwrap_or(0),
            burst: f.u32(NFTA_LIMIT_BURST)?.unwrap_or(0),
            kind: f.u32(NFTA_LIMIT_TYPE)?.unwrap_or(NFT_LIMIT_PKTS),
            flags: f.u32(NFTA_LIMIT_FLAGS)?.unwrap_or(0),
        },
        _ => Expr::Other(name),
    })
}
