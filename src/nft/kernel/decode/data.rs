//! Data types, values and verdicts as the kernel holds them: nft's datatype ids, key and
//! data bytes in the model's types, and NFTA_DATA_* payloads. A value the model cannot hold is
//! `None` or an error, never a guess.

use super::*;

/// nft's datatype ids (src/datatype.h `enum datatypes`), concatenations being
/// `(a << 6) | b` folded left (TYPE_BITS = 6).
pub(crate) fn data_types(what: &str, id: u32) -> Result<Vec<DataType>, DecodeError> {
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
pub(crate) fn type_len(t: DataType) -> usize {
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
