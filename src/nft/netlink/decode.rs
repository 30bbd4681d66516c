//! Decoding of nf_tables dump messages: tables, chains, sets, elements and rules with their
//! kernel expression lists, parsed strictly (a malformed message is an error, never a panic).
//! `lift` turns the expression lists into model statements.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

use super::sys::*;
use crate::netlink::attr::{Attr, AttrError, AttrIter};
use crate::nft::model::{BaseChain, ChainType, DataType, Hook, Policy, Value, Verdict};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("decoding {what}: {source}")]
    Attr {
        what: &'static str,
        #[source]
        source: AttrError,
    },
    #[error("{what} has no {attr}")]
    Missing {
        what: &'static str,
        attr: &'static str,
    },
    #[error("{what}: unsupported {detail}")]
    Unsupported { what: String, detail: String },
}

fn attrs<'a>(
    what: &'static str,
    buf: &'a [u8],
) -> impl Iterator<Item = Result<Attr<'a>, DecodeError>> {
    AttrIter::new(buf).map(move |r| r.map_err(|source| DecodeError::Attr { what, source }))
}

fn at<T>(what: &'static str, r: Result<T, AttrError>) -> Result<T, DecodeError> {
    r.map_err(|source| DecodeError::Attr { what, source })
}

/// A comment from libnftnl userdata: TLVs of (u8 type, u8 len, value), the comment being a
/// NUL-terminated string under `kind` (0 for tables, chains, rules and elements; 7 for sets).
pub fn udata_comment(udata: &[u8], kind: u8) -> Option<String> {
    let mut i = 0;
    while i + 2 <= udata.len() {
        let (t, len) = (udata[i], udata[i + 1] as usize);
        let value = udata.get(i + 2..i + 2 + len)?;
        if t == kind {
            let v = value.strip_suffix(&[0]).unwrap_or(value);
            return std::str::from_utf8(v).ok().map(str::to_owned);
        }
        i += 2 + len;
    }
    None
}

/// Whether libnftnl userdata holds a TLV of `kind` at its top level.
pub fn udata_has(udata: &[u8], kind: u8) -> bool {
    let mut i = 0;
    while i + 2 <= udata.len() {
        let (t, len) = (udata[i], udata[i + 1] as usize);
        if t == kind {
            return true;
        }
        i += 2 + len;
    }
    false
}

pub const UDATA_TABLE_COMMENT: u8 = 0;
pub const UDATA_CHAIN_COMMENT: u8 = 0;
pub const UDATA_RULE_COMMENT: u8 = 0;
pub const UDATA_SET_COMMENT: u8 = 7;
pub const UDATA_SET_KEY_TYPEOF: u8 = 3;
pub const UDATA_SET_ELEM_COMMENT: u8 = 0;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawTable {
    pub name: String,
    pub flags: u32,
    pub comment: Option<String>,
}

pub fn table(attr_bytes: &[u8]) -> Result<RawTable, DecodeError> {
    const W: &str = "table";
    let (mut name, mut flags, mut comment) = (None, 0, None);
    for a in attrs(W, attr_bytes) {
        let a = a?;
        match a.kind {
            NFTA_TABLE_NAME => name = Some(at(W, a.string())?.to_owned()),
            NFTA_TABLE_FLAGS => flags = at(W, a.be32())?,
            NFTA_TABLE_USERDATA => comment = udata_comment(a.value, UDATA_TABLE_COMMENT),
            _ => {}
        }
    }
    Ok(RawTable {
        name: name.ok_or(DecodeError::Missing {
            what: W,
            attr: "NFTA_TABLE_NAME",
        })?,
        flags,
        comment,
    })
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawChain {
    pub table: String,
    pub name: String,
    pub handle: u64,
    pub base: Option<BaseChain>,
    pub comment: Option<String>,
}

pub fn chain(attr_bytes: &[u8]) -> Result<RawChain, DecodeError> {
    const W: &str = "chain";
    let (mut table, mut name, mut handle, mut comment) = (None, None, 0, None);
    let (mut hook, mut prio, mut kind, mut policy) = (None, None, None, None);
    for a in attrs(W, attr_bytes) {
        let a = a?;
        match a.kind {
            NFTA_CHAIN_TABLE => table = Some(at(W, a.string())?.to_owned()),
            NFTA_CHAIN_NAME => name = Some(at(W, a.string())?.to_owned()),
            NFTA_CHAIN_HANDLE => handle = at(W, a.be64())?,
            NFTA_CHAIN_TYPE => kind = Some(at(W, a.string())?.to_owned()),
            NFTA_CHAIN_POLICY => policy = Some(at(W, a.be32())?),
            NFTA_CHAIN_USERDATA => comment = udata_comment(a.value, UDATA_CHAIN_COMMENT),
            NFTA_CHAIN_HOOK => {
                for h in attrs(W, a.value) {
                    let h = h?;
                    match h.kind {
                        NFTA_HOOK_HOOKNUM => hook = Some(at(W, h.be32())?),
                        NFTA_HOOK_PRIORITY => prio = Some(at(W, h.be32())? as i32),
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    let name = name.ok_or(DecodeError::Missing {
        what: W,
        attr: "NFTA_CHAIN_NAME",
    })?;
    let base = match hook {
        None => None,
        Some(hooknum) => {
            let unsupported = |detail: String| DecodeError::Unsupported {
                what: format!("chain {name}"),
                detail,
            };
            let hook = match hooknum {
                0 => Hook::Prerouting,
                1 => Hook::Input,
                2 => Hook::Forward,
                3 => Hook::Output,
                4 => Hook::Postrouting,
                n => return Err(unsupported(format!("hook {n}"))),
            };
            let kind = match kind.as_deref() {
                Some("filter") => ChainType::Filter,
                Some("nat") => ChainType::Nat,
                Some("route") => ChainType::Route,
                other => return Err(unsupported(format!("chain type {other:?}"))),
            };
            let policy = match policy.map(|p| p as i32) {
                None | Some(NF_ACCEPT) => Policy::Accept,
                Some(NF_DROP) => Policy::Drop,
                Some(p) => return Err(unsupported(format!("policy {p}"))),
            };
            Some(BaseChain {
                kind,
                hook,
                priority: prio.unwrap_or(0),
                policy,
            })
        }
    };
    Ok(RawChain {
        table: table.ok_or(DecodeError::Missing {
            what: W,
            attr: "NFTA_CHAIN_TABLE",
        })?,
        name,
        handle,
        base,
        comment,
    })
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawSet {
    pub table: String,
    pub name: String,
    pub flags: u32,
    pub key_type: u32,
    pub key_len: u32,
    pub data_type: Option<u32>,
    pub timeout_ms: Option<u64>,
    /// Per-field key lengths from NFTA_SET_DESC_CONCAT (empty for a single-field key).
    pub field_lens: Vec<u32>,
    pub comment: Option<String>,
    /// Whether the userdata describes the key with `typeof` expressions, which nft needs to
    /// list a plain integer key as something it can read back.
    pub key_typeof: bool,
}

impl RawSet {
    pub fn is_anonymous(&self) -> bool {
        self.flags & NFT_SET_ANONYMOUS != 0
    }
}

pub fn set(attr_bytes: &[u8]) -> Result<RawSet, DecodeError> {
    const W: &str = "set";
    let mut s = RawSet {
        table: String::new(),
        name: String::new(),
        flags: 0,
        key_type: 0,
        key_len: 0,
        data_type: None,
        timeout_ms: None,
        field_lens: Vec::new(),
        comment: None,
        key_typeof: false,
    };
    let (mut have_table, mut have_name) = (false, false);
    for a in attrs(W, attr_bytes) {
        let a = a?;
        match a.kind {
            NFTA_SET_TABLE => {
                s.table = at(W, a.string())?.to_owned();
                have_table = true;
            }
            NFTA_SET_NAME => {
                s.name = at(W, a.string())?.to_owned();
                have_name = true;
            }
            NFTA_SET_FLAGS => s.flags = at(W, a.be32())?,
            NFTA_SET_KEY_TYPE => s.key_type = at(W, a.be32())?,
            NFTA_SET_KEY_LEN => s.key_len = at(W, a.be32())?,
            NFTA_SET_DATA_TYPE => s.data_type = Some(at(W, a.be32())?),
            NFTA_SET_TIMEOUT => s.timeout_ms = Some(at(W, a.be64())?),
            NFTA_SET_USERDATA => {
                s.comment = udata_comment(a.value, UDATA_SET_COMMENT);
                s.key_typeof = udata_has(a.value, UDATA_SET_KEY_TYPEOF);
            }
            NFTA_SET_DESC => {
                for d in attrs(W, a.value) {
                    let d = d?;
                    if d.kind != NFTA_SET_DESC_CONCAT {
                        continue;
                    }
                    for elem in attrs(W, d.value) {
                        for f in attrs(W, elem?.value) {
                            let f = f?;
                            if f.kind == NFTA_SET_FIELD_LEN {
                                s.field_lens.push(at(W, f.be32())?);
                            }
                        }
                    }
                }
            }
            _ => {}
        }
    }
    if !have_table || !have_name {
        return Err(DecodeError::Missing {
            what: W,
            attr: if have_table {
                "NFTA_SET_NAME"
            } else {
                "NFTA_SET_TABLE"
            },
        });
    }
    Ok(s)
}

/// nft's datatype ids (src/datatype.h `enum datatypes`), concatenations being
/// `(a << 6) | b` folded left (TYPE_BITS = 6).
pub fn data_types(what: &str, id: u32) -> Result<Vec<DataType>, DecodeError> {
    let mut out = Vec::new();
    let mut rest = id;
    while rest != 0 {
        let t = match rest & 0x3f {
            1 => DataType::Verdict,
            4 => DataType::Integer,
            7 => DataType::Ipv4Addr,
            8 => DataType::Ipv6Addr,
            12 => DataType::InetProto,
            13 => DataType::InetService,
            19 => DataType::Mark,
            41 => DataType::IfName,
            n => {
                return Err(DecodeError::Unsupported {
                    what: what.to_owned(),
                    detail: format!("datatype {n} in type id {id:#x}"),
                });
            }
        };
        out.push(t);
        rest >>= 6;
    }
    out.reverse();
    if out.is_empty() {
        return Err(DecodeError::Unsupported {
            what: what.to_owned(),
            detail: "datatype 0".into(),
        });
    }
    Ok(out)
}

/// Key bytes one field of this type occupies in a register or set key (before 4-byte padding).
pub fn type_len(t: DataType) -> usize {
    match t {
        DataType::Ipv4Addr | DataType::Mark | DataType::Integer => 4,
        DataType::Ipv6Addr | DataType::IfName => 16,
        DataType::InetProto => 1,
        DataType::InetService => 2,
        DataType::Verdict => 0,
    }
}

/// Decodes one key field.
pub fn value(t: DataType, bytes: &[u8]) -> Option<Value> {
    Some(match t {
        DataType::Ipv4Addr => Value::Ipv4(Ipv4Addr::from(<[u8; 4]>::try_from(bytes).ok()?)),
        DataType::Ipv6Addr => Value::Ipv6(Ipv6Addr::from(<[u8; 16]>::try_from(bytes).ok()?)),
        DataType::InetProto => Value::Proto(*bytes.first()?),
        DataType::InetService => Value::Port(u16::from_be_bytes(bytes.get(..2)?.try_into().ok()?)),
        // Marks and numgen results live in host byte order.
        DataType::Mark | DataType::Integer => {
            Value::Mark(u32::from_ne_bytes(bytes.get(..4)?.try_into().ok()?))
        }
        DataType::IfName => Value::IfName(ifname(bytes)),
        DataType::Verdict => return None,
    })
}

/// An interface name compared in a register: exact names are NUL-padded to 16 bytes, a prefix
/// match (`veth*`) compares only the prefix bytes.
pub fn ifname(bytes: &[u8]) -> String {
    match bytes.iter().position(|&b| b == 0) {
        Some(n) => String::from_utf8_lossy(&bytes[..n]).into_owned(),
        None if bytes.len() < 16 => format!("{}*", String::from_utf8_lossy(bytes)),
        None => String::from_utf8_lossy(bytes).into_owned(),
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RawData {
    Value(Vec<u8>),
    Verdict(Verdict),
}

/// NFTA_DATA_VALUE / NFTA_DATA_VERDICT.
pub fn data(what: &'static str, buf: &[u8]) -> Result<RawData, DecodeError> {
    for a in attrs(what, buf) {
        let a = a?;
        match a.kind {
            NFTA_DATA_VALUE => return Ok(RawData::Value(a.value.to_vec())),
            NFTA_DATA_VERDICT => return verdict(what, a.value).map(RawData::Verdict),
            _ => {}
        }
    }
    Err(DecodeError::Missing {
        what,
        attr: "NFTA_DATA_VALUE or NFTA_DATA_VERDICT",
    })
}

fn verdict(what: &'static str, buf: &[u8]) -> Result<Verdict, DecodeError> {
    let (mut code, mut chain) = (None, None);
    for a in attrs(what, buf) {
        let a = a?;
        match a.kind {
            NFTA_VERDICT_CODE => code = Some(at(what, a.be32())? as i32),
            NFTA_VERDICT_CHAIN => chain = Some(at(what, a.string())?.to_owned()),
            _ => {}
        }
    }
    let code = code.ok_or(DecodeError::Missing {
        what,
        attr: "NFTA_VERDICT_CODE",
    })?;
    let need_chain = || {
        chain.clone().ok_or(DecodeError::Missing {
            what,
            attr: "NFTA_VERDICT_CHAIN",
        })
    };
    Ok(match code {
        NF_ACCEPT => Verdict::Accept,
        NF_DROP => Verdict::Drop,
        NFT_CONTINUE => Verdict::Continue,
        NFT_RETURN => Verdict::Return,
        NFT_JUMP => Verdict::Jump(need_chain()?),
        NFT_GOTO => Verdict::Goto(need_chain()?),
        c => {
            return Err(DecodeError::Unsupported {
                what: what.to_owned(),
                detail: format!("verdict code {c}"),
            });
        }
    })
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawElem {
    pub key: Vec<u8>,
    pub key_end: Option<Vec<u8>>,
    pub data: Option<RawData>,
    pub flags: u32,
    pub comment: Option<String>,
    /// Milliseconds until the kernel removes the element (elements with a timeout only).
    pub expiration_ms: Option<u64>,
}

/// The elements of one NEWSETELEM dump message: (set name, elements).
pub fn set_elems(attr_bytes: &[u8]) -> Result<(String, Vec<RawElem>), DecodeError> {
    const W: &str = "set element";
    let mut set = None;
    let mut out = Vec::new();
    for a in attrs(W, attr_bytes) {
        let a = a?;
        match a.kind {
            NFTA_SET_ELEM_LIST_SET => set = Some(at(W, a.string())?.to_owned()),
            NFTA_SET_ELEM_LIST_ELEMENTS => {
                for e in attrs(W, a.value) {
                    out.push(set_elem(e?.value)?);
                }
            }
            _ => {}
        }
    }
    Ok((
        set.ok_or(DecodeError::Missing {
            what: W,
            attr: "NFTA_SET_ELEM_LIST_SET",
        })?,
        out,
    ))
}

fn set_elem(buf: &[u8]) -> Result<RawElem, DecodeError> {
    const W: &str = "set element";
    let mut e = RawElem {
        key: Vec::new(),
        key_end: None,
        data: None,
        flags: 0,
        comment: None,
        expiration_ms: None,
    };
    let mut have_key = false;
    for a in attrs(W, buf) {
        let a = a?;
        match a.kind {
            NFTA_SET_ELEM_KEY => {
                if let RawData::Value(v) = data(W, a.value)? {
                    e.key = v;
                    have_key = true;
                }
            }
            NFTA_SET_ELEM_KEY_END => {
                if let RawData::Value(v) = data(W, a.value)? {
                    e.key_end = Some(v);
                }
            }
            NFTA_SET_ELEM_DATA => e.data = Some(data(W, a.value)?),
            NFTA_SET_ELEM_FLAGS => e.flags = at(W, a.be32())?,
            NFTA_SET_ELEM_EXPIRATION => e.expiration_ms = Some(at(W, a.be64())?),
            NFTA_SET_ELEM_USERDATA => e.comment = udata_comment(a.value, UDATA_SET_ELEM_COMMENT),
            _ => {}
        }
    }
    if !have_key && e.flags & NFT_SET_ELEM_CATCHALL == 0 {
        return Err(DecodeError::Missing {
            what: W,
            attr: "NFTA_SET_ELEM_KEY",
        });
    }
    Ok(e)
}

/// One kernel expression, as listed by `nft --debug=netlink`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expr {
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
    Counter,
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
            Expr::Counter => write!(f, "counter"),
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
    pub exprs: Vec<Expr>,
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
        "counter" => Expr::Counter,
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
