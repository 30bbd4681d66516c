//! Decoding of nf_tables dump messages: tables, chains, sets, elements and rules with their
//! kernel expression lists, parsed strictly (a malformed message is an error, never a panic).
//! `lift` turns the expression lists into model statements.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

use super::sys::*;
use crate::netlink::attr::{Attr, AttrError, AttrIter};
use crate::nft::model::{BaseChain, ChainType, DataType, Hook, Policy, Value, Verdict};

mod data;
mod expr;

pub use data::{RawData, data, ifname, value};
pub(crate) use data::{data_types, type_len};
pub(crate) use expr::Expr;
pub use expr::{RawRule, rule};

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

/// The attributes of `buf`, a malformed one an error naming `what`.
pub(super) fn attrs<'a>(
    what: &'static str,
    buf: &'a [u8],
) -> impl Iterator<Item = Result<Attr<'a>, DecodeError>> {
    AttrIter::new(buf).map(move |r| r.map_err(|source| DecodeError::Attr { what, source }))
}

/// An attribute's value, read as `r` reads it, a malformed one an error naming `what`.
pub(super) fn at<T>(what: &'static str, r: Result<T, AttrError>) -> Result<T, DecodeError> {
    r.map_err(|source| DecodeError::Attr { what, source })
}

/// A comment from libnftnl userdata: TLVs of (u8 type, u8 len, value), the comment being a
/// NUL-terminated string under `kind` (0 for tables, chains, rules and elements; 7 for sets).
pub(crate) fn udata_comment(udata: &[u8], kind: u8) -> Option<String> {
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
pub(crate) fn udata_has(udata: &[u8], kind: u8) -> bool {
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

pub(crate) const UDATA_TABLE_COMMENT: u8 = 0;
pub(crate) const UDATA_CHAIN_COMMENT: u8 = 0;
pub(crate) const UDATA_RULE_COMMENT: u8 = 0;
pub(crate) const UDATA_SET_COMMENT: u8 = 7;
pub(crate) const UDATA_SET_KEY_TYPEOF: u8 = 3;
pub(crate) const UDATA_SET_ELEM_COMMENT: u8 = 0;

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
    pub(crate) key_type: u32,
    pub(crate) key_len: u32,
    pub(crate) data_type: Option<u32>,
    pub(crate) timeout_ms: Option<u64>,
    /// NFTA_SET_DESC_SIZE: the declared size, if any.
    pub(crate) size: Option<u32>,
    /// Per-field key lengths from NFTA_SET_DESC_CONCAT (empty for a single-field key).
    pub(crate) field_lens: Vec<u32>,
    pub comment: Option<String>,
    /// Whether the userdata describes the key with `typeof` expressions, which nft needs to
    /// list a plain integer key as something it can read back.
    pub(crate) key_typeof: bool,
}

impl RawSet {
    pub(crate) fn is_anonymous(&self) -> bool {
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
        size: None,
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
                    if d.kind == NFTA_SET_DESC_SIZE {
                        s.size = Some(at(W, d.be32())?).filter(|&n| n != 0);
                        continue;
                    }
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
