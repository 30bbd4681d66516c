//! Lowering model statements to the kernel expressions `nft -f` generates for them: the exact
//! inverse of `lift`, register allocation included, so a table applied over netlink and the
//! same table applied by `nft -f` are the same bytecode.
//!
//! nft counts registers in 32-bit units from 1, restarts at 1 for every statement, and names a
//! register by its 128-bit number when the unit is 16-byte aligned (`netlink_put_register`):
//! a concatenation `ip daddr . meta l4proto . th dport` lands in reg 1, reg 9 and reg 10.

use std::collections::BTreeSet;
use std::net::IpAddr;

use super::decode::{Expr, RawData};
use super::sys::*;
use crate::nft::model::{
    CmpOp, DataType, Family, MapRef, MarkOp, RejectKind, Selector, Stmt, Value, Verdict,
};

/// An anonymous constant map a rule owns; created in the same batch, right before the rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AnonMap {
    /// The placeholder the rule's lookup names (`__anonN`, N counting within the rule).
    pub(crate) placeholder: String,
    pub(crate) key: Vec<DataType>,
    pub(crate) elements: Vec<(Vec<Value>, Verdict)>,
}

/// A rule's expressions plus the anonymous maps they look up.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Lowered {
    pub(crate) exprs: Vec<Expr>,
    pub(crate) anon: Vec<AnonMap>,
}

/// A statement the kernel cannot be given (e.g. an IPv6 DNAT target in an `ip` table).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("statement `{stmt}` cannot be encoded: {reason}")]
pub struct LowerError {
    pub(crate) stmt: String,
    pub(crate) reason: String,
}

/// The lookup of the key in reg 1 in `map`, and the `nat` expression translating to the
/// `address . port` it leaves in reg 1 (the port follows the address's 32-bit units), with the
/// range's upper end named when `with_max` (as nft writes it for numgen-keyed interval maps;
/// elsewhere nft names only the low end and the kernel fills in the rest).
fn dnat_via_map(map: &str, proto: u8, with_max: bool) -> [Expr; 2] {
    let addr_len = if proto == NFPROTO_IPV4 { 4 } else { 16 };
    let r1 = put_register(1);
    let port_reg = put_register(1 + units(addr_len));
    [
        Expr::Lookup {
            set: map.to_string(),
            sreg: r1,
            dreg: Some(r1),
            inverted: false,
        },
        Expr::Nat {
            kind: NFT_NAT_DNAT,
            family: u32::from(proto),
            addr_min: Some(r1),
            addr_max: with_max.then_some(r1),
            proto_min: Some(port_reg),
            proto_max: with_max.then_some(port_reg),
            flags: NF_NAT_RANGE_MAP_IPS | NF_NAT_RANGE_PROTO_SPECIFIED,
        },
    ]
}

/// nft's register name for 32-bit unit `unit` (1-based).
pub(crate) fn put_register(unit: u32) -> u32 {
    let r = unit - 1;
    if r.is_multiple_of(4) {
        NFT_REG_1 + r / 4
    } else {
        NFT_REG32_00 + r
    }
}

/// Where a hash expression's input starts: register 2, as nft places it.
const HASH_INPUT_UNIT: u32 = 5;

/// 32-bit units a value of `len` bytes occupies.
fn units(len: u32) -> u32 {
    len.div_ceil(4)
}

/// Bytes a selector loads.
pub(crate) fn selector_len(sel: Selector) -> u32 {
    super::lift::full_len(sel)
}

/// The set key type of a selector, for anonymous maps keyed by it.
pub(crate) fn selector_type(sel: Selector) -> DataType {
    match sel {
        Selector::IpSaddr | Selector::IpDaddr => DataType::Ipv4Addr,
        Selector::Ip6Saddr | Selector::Ip6Daddr => DataType::Ipv6Addr,
        Selector::ThSport | Selector::ThDport => DataType::InetService,
        Selector::L4Proto => DataType::InetProto,
        Selector::Mark => DataType::Mark,
        Selector::IifName | Selector::OifName => DataType::IfName,
        Selector::NfProto
        | Selector::FibSaddrType
        | Selector::FibDaddrType
        | Selector::CtState
        | Selector::CtStatus => DataType::Integer,
    }
}

fn addr_proto(sel: Selector) -> Option<u8> {
    match sel {
        Selector::IpSaddr | Selector::IpDaddr => Some(NFPROTO_IPV4),
        Selector::Ip6Saddr | Selector::Ip6Daddr => Some(NFPROTO_IPV6),
        _ => None,
    }
}

/// The load of `sel` (`len` bytes, fewer for an address prefix) into 32-bit unit `unit`.
fn load(sel: Selector, len: u32, unit: u32) -> Expr {
    let dreg = put_register(unit);
    let payload = |base, offset| Expr::Payload {
        base,
        offset,
        len,
        dreg,
    };
    let meta = |key| Expr::Meta {
        key,
        dreg: Some(dreg),
        sreg: None,
    };
    match sel {
        Selector::IpSaddr => payload(NFT_PAYLOAD_NETWORK_HEADER, 12),
        Selector::IpDaddr => payload(NFT_PAYLOAD_NETWORK_HEADER, 16),
        Selector::Ip6Saddr => payload(NFT_PAYLOAD_NETWORK_HEADER, 8),
        Selector::Ip6Daddr => payload(NFT_PAYLOAD_NETWORK_HEADER, 24),
        Selector::ThSport => payload(NFT_PAYLOAD_TRANSPORT_HEADER, 0),
        Selector::ThDport => payload(NFT_PAYLOAD_TRANSPORT_HEADER, 2),
        Selector::L4Proto => meta(NFT_META_L4PROTO),
        Selector::NfProto => meta(NFT_META_NFPROTO),
        Selector::Mark => meta(NFT_META_MARK),
        Selector::IifName => meta(NFT_META_IIFNAME),
        Selector::OifName => meta(NFT_META_OIFNAME),
        Selector::FibSaddrType | Selector::FibDaddrType => Expr::Fib {
            dreg,
            result: NFT_FIB_RESULT_ADDRTYPE,
            flags: u32::from(if sel == Selector::FibSaddrType {
                NFTA_FIB_F_SADDR
            } else {
                NFTA_FIB_F_DADDR
            }),
        },
        Selector::CtState => Expr::Ct {
            key: NFT_CT_STATE,
            dreg: Some(dreg),
            direction: None,
        },
        Selector::CtStatus => Expr::Ct {
            key: NFT_CT_STATUS,
            dreg: Some(dreg),
            direction: None,
        },
    }
}

/// The register bytes of a value (network order for addresses and ports, host order for
/// marks, numgen results, conntrack state and address types).
pub(crate) fn value_bytes(v: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    write_value(&mut out, v);
    out
}

/// `value_bytes(v)` appended to `out`.
pub(crate) fn write_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::Ipv4(a) => out.extend_from_slice(&a.octets()),
        Value::Ipv6(a) => out.extend_from_slice(&a.octets()),
        Value::Ipv4Net(n) => out.extend_from_slice(&n.network().octets()),
        Value::Ipv6Net(n) => out.extend_from_slice(&n.network().octets()),
        Value::Proto(p) | Value::NfProto(p) => out.push(*p),
        Value::Port(p) => out.extend_from_slice(&p.to_be_bytes()),
        Value::Mark(m) => out.extend_from_slice(&m.to_ne_bytes()),
        Value::IfName(name) => match name.strip_suffix('*') {
            Some(prefix) => out.extend_from_slice(prefix.as_bytes()),
            None => {
                // IFNAMSIZ bytes: padded, or cut if longer.
                let start = out.len();
                out.extend_from_slice(name.as_bytes());
                out.resize(start + 16, 0);
            }
        },
        Value::AddrType(t) => {
            let n: u32 = match t {
                crate::nft::model::AddrType::Unicast => 1,
                crate::nft::model::AddrType::Local => 2,
                crate::nft::model::AddrType::Broadcast => 3,
                crate::nft::model::AddrType::Multicast => 5,
            };
            out.extend_from_slice(&n.to_ne_bytes())
        }
        Value::CtState(s) => out.extend_from_slice(&s.0.to_ne_bytes()),
        Value::CtStatus(s) => out.extend_from_slice(&s.0.to_ne_bytes()),
        // Interval keys are big-endian so that ranges compare as numbers; this is the start.
        Value::IntRange { first, .. } => out.extend_from_slice(&first.to_be_bytes()),
    }
}

/// A set key: each field's bytes padded to 4 (a lone field is not padded).
pub(crate) fn key_bytes(values: &[Value]) -> Vec<u8> {
    let mut out = Vec::new();
    write_key(&mut out, values);
    out
}

/// `key_bytes(values)` appended to `out`.
pub(crate) fn write_key(out: &mut Vec<u8>, values: &[Value]) {
    if let [value] = values {
        return write_value(out, value);
    }
    for v in values {
        let start = out.len();
        write_value(out, v);
        out.resize(start + (out.len() - start).div_ceil(4) * 4, 0);
    }
}

fn prefix_mask(bits: u32, len: u32) -> Vec<u8> {
    (0..len)
        .map(|i| {
            let from = i * 8;
            if bits >= from + 8 {
                0xff
            } else if bits <= from {
                0
            } else {
                0xffu8 << (8 - (bits - from))
            }
        })
        .collect()
}

fn cmp_op(op: CmpOp) -> u32 {
    match op {
        CmpOp::Eq => NFT_CMP_EQ,
        CmpOp::Ne => NFT_CMP_NEQ,
    }
}

fn verdict_imm(v: &Verdict) -> Expr {
    Expr::Immediate {
        dreg: NFT_REG_VERDICT,
        data: RawData::Verdict(v.clone()),
    }
}

struct Lowerer<'a> {
    family: Family,
    /// Named sets with concatenated interval keys: nft converts `meta l4proto` to big endian
    /// before looking them up.
    concat_intervals: &'a BTreeSet<&'a str>,
    /// In inet tables: the network protocol the rule is already pinned to.
    context: Option<u8>,
    out: Lowered,
}

impl Lowerer<'_> {
    fn err(stmt: &Stmt, reason: impl Into<String>) -> LowerError {
        LowerError {
            stmt: format!("{stmt:?}"),
            reason: reason.into(),
        }
    }

    /// In inet tables nft pins an ip/ip6 header access to its protocol with `meta nfproto`.
    fn dependency(&mut self, sel: Selector) {
        if self.family != Family::Inet {
            return;
        }
        if let Some(p) = addr_proto(sel)
            && self.context != Some(p)
        {
            self.out.exprs.push(load(Selector::NfProto, 1, 1));
            self.out.exprs.push(Expr::Cmp {
                sreg: NFT_REG_1,
                op: NFT_CMP_EQ,
                data: vec![p],
            });
            self.context = Some(p);
        }
    }

    /// Loads a concatenated key from unit 1 on; returns the first register. `set` is the
    /// named set it is looked up in, if any.
    fn load_key(&mut self, key: &[Selector], set: Option<&str>) -> u32 {
        self.load_key_end(key, set);
        put_register(1)
    }

    /// `load_key`, returning the unit just after the key (where a further key part goes).
    fn load_key_end(&mut self, key: &[Selector], set: Option<&str>) -> u32 {
        for sel in key {
            self.dependency(*sel);
        }
        let big_endian = key.len() > 1 && set.is_some_and(|s| self.concat_intervals.contains(s));
        let mut unit = 1;
        for sel in key {
            let len = selector_len(*sel);
            self.out.exprs.push(load(*sel, len, unit));
            if big_endian && *sel == Selector::L4Proto {
                let reg = put_register(unit);
                self.out.exprs.push(Expr::Byteorder {
                    sreg: reg,
                    dreg: reg,
                    op: NFT_BYTEORDER_HTON,
                    len: 1,
                    size: 2,
                });
            }
            unit += units(len);
        }
        unit
    }

    fn map(&mut self, map: &MapRef, key: Vec<DataType>) -> String {
        match map {
            MapRef::Named(n) => n.clone(),
            MapRef::Anonymous(elements) => {
                let placeholder = format!("__anon{}", self.out.anon.len());
                self.out.anon.push(AnonMap {
                    placeholder: placeholder.clone(),
                    key,
                    elements: elements.clone(),
                });
                placeholder
            }
        }
    }

    /// The address family of a `dnat … map` whose data the table's family implies.
    fn dnat_family(&self, stmt: &Stmt) -> Result<u8, LowerError> {
        match self.family {
            Family::Ip => Ok(NFPROTO_IPV4),
            Family::Ip6 => Ok(NFPROTO_IPV6),
            Family::Inet => Err(Self::err(
                stmt,
                "an inet table cannot tell which address family the map holds",
            )),
        }
    }

    /// `numgen random mod modulus offset offset` into `dreg`.
    fn random(&mut self, dreg: u32, modulus: u32, offset: u32) {
        self.out.exprs.push(Expr::Numgen {
            dreg,
            modulus,
            kind: NFT_NG_RANDOM,
            offset,
        });
    }

    /// The verdict `set` maps the key in `sreg` to.
    fn verdict_lookup(&mut self, set: String, sreg: u32) {
        self.out.exprs.push(Expr::Lookup {
            set,
            sreg,
            dreg: Some(NFT_REG_VERDICT),
            inverted: false,
        });
    }

    /// `dnat to … map @map` of the number a draw left in register 1: the map's interval keys
    /// are big-endian, as nft converts the number.
    fn dnat_via_drawn_number(&mut self, map: &str, proto: u8) {
        let r1 = put_register(1);
        self.out.exprs.push(Expr::Byteorder {
            sreg: r1,
            dreg: r1,
            op: NFT_BYTEORDER_HTON,
            len: 4,
            size: 4,
        });
        self.out.exprs.extend(dnat_via_map(map, proto, true));
    }

    /// Lowers one statement to the expressions `nft -f` generates for it. Long because it is
    /// the dispatch table: one arm per `Stmt` variant, the larger ones in methods of their own.
    fn stmt(&mut self, stmt: &Stmt) -> Result<(), LowerError> {
        let r1 = put_register(1);
        match stmt {
            Stmt::Match {
                left,
                mask,
                op,
                right,
            } => self.matches(stmt, *left, *mask, *op, right)?,
            Stmt::Lookup { key, set, negate } => {
                let sreg = self.load_key(key, Some(set));
                self.out.exprs.push(Expr::Lookup {
                    set: set.clone(),
                    sreg,
                    dreg: None,
                    inverted: *negate,
                });
            }
            Stmt::VMap { key, map } => {
                let named = match map {
                    MapRef::Named(n) => Some(n.as_str()),
                    MapRef::Anonymous(_) => None,
                };
                let sreg = self.load_key(key, named);
                let set = self.map(map, key.iter().map(|s| selector_type(*s)).collect());
                self.verdict_lookup(set, sreg);
            }
            Stmt::NumgenVMap { modulus, map } => {
                self.random(r1, *modulus, 0);
                let set = self.map(map, vec![DataType::Integer]);
                self.verdict_lookup(set, r1);
            }
            Stmt::NumgenIs { modulus, value } => {
                self.random(r1, *modulus, 0);
                // numgen writes a host-endian integer, and nft compares it as one.
                self.out.exprs.push(Expr::Cmp {
                    sreg: r1,
                    op: NFT_CMP_EQ,
                    data: value.to_ne_bytes().to_vec(),
                });
            }
            Stmt::DnatNumgenMap {
                modulus,
                offset,
                map,
            } => {
                let proto = self.dnat_family(stmt)?;
                self.random(r1, *modulus, *offset);
                self.dnat_via_drawn_number(map, proto);
            }
            Stmt::DnatHashMap {
                fields,
                seed,
                modulus,
                offset,
                map,
            } => {
                let proto = self.dnat_family(stmt)?;
                // As nft does: the fields from register 2 on, the hash into register 1.
                let mut unit = HASH_INPUT_UNIT;
                for sel in fields {
                    self.dependency(*sel);
                }
                for sel in fields {
                    let len = selector_len(*sel);
                    self.out.exprs.push(load(*sel, len, unit));
                    unit += units(len);
                }
                self.out.exprs.push(Expr::Hash {
                    sreg: put_register(HASH_INPUT_UNIT),
                    dreg: r1,
                    len: (unit - HASH_INPUT_UNIT) * 4,
                    modulus: *modulus,
                    seed: *seed,
                    offset: *offset,
                    kind: NFT_HASH_JENKINS,
                });
                self.dnat_via_drawn_number(map, proto);
            }
            Stmt::DnatSlotMap { key, modulus, map } => {
                let proto = self.dnat_family(stmt)?;
                let unit = self.load_key_end(key, Some(map));
                self.random(put_register(unit), *modulus, 0);
                self.out.exprs.extend(dnat_via_map(map, proto, false));
            }
            Stmt::DnatMap { key, map } => {
                let proto = self.dnat_family(stmt)?;
                self.load_key(key, Some(map));
                self.out.exprs.extend(dnat_via_map(map, proto, false));
            }
            Stmt::Update { set, key } => {
                let sreg_key = self.load_key(key, Some(set));
                self.out.exprs.push(Expr::Dynset {
                    set: set.clone(),
                    op: NFT_DYNSET_OP_UPDATE,
                    sreg_key,
                    sreg_data: None,
                    timeout: None,
                    has_exprs: false,
                });
            }
            Stmt::SetMark(op) => {
                let (mask, xor) = match *op {
                    MarkOp::Set(v) => {
                        self.out.exprs.push(Expr::Immediate {
                            dreg: r1,
                            data: RawData::Value(v.to_ne_bytes().to_vec()),
                        });
                        self.out.exprs.push(Expr::Meta {
                            key: NFT_META_MARK,
                            dreg: None,
                            sreg: Some(r1),
                        });
                        return Ok(());
                    }
                    MarkOp::Or(x) => (!x, x),
                    MarkOp::Xor(x) => (u32::MAX, x),
                    MarkOp::And(m) => (m, 0),
                };
                self.out.exprs.push(load(Selector::Mark, 4, 1));
                self.out.exprs.push(Expr::Bitwise {
                    sreg: r1,
                    dreg: r1,
                    op: NFT_BITWISE_MASK_XOR,
                    mask: mask.to_ne_bytes().to_vec(),
                    xor: xor.to_ne_bytes().to_vec(),
                });
                self.out.exprs.push(Expr::Meta {
                    key: NFT_META_MARK,
                    dreg: None,
                    sreg: Some(r1),
                });
            }
            Stmt::Dnat { addr, port } => {
                let (bytes, proto) = match addr {
                    IpAddr::V4(a) => (a.octets().to_vec(), NFPROTO_IPV4),
                    IpAddr::V6(a) => (a.octets().to_vec(), NFPROTO_IPV6),
                };
                let fits = match self.family {
                    Family::Ip => proto == NFPROTO_IPV4,
                    Family::Ip6 => proto == NFPROTO_IPV6,
                    Family::Inet => true,
                };
                if !fits {
                    return Err(Self::err(
                        stmt,
                        "the target address is of the other IP family than the table",
                    ));
                }
                // nft gives each nat operand a whole 128-bit register: reg 1, then reg 2.
                self.out.exprs.push(Expr::Immediate {
                    dreg: NFT_REG_1,
                    data: RawData::Value(bytes),
                });
                let mut flags = 0;
                let proto_min = port.map(|p| {
                    self.out.exprs.push(Expr::Immediate {
                        dreg: NFT_REG_2,
                        data: RawData::Value(p.to_be_bytes().to_vec()),
                    });
                    flags |= NF_NAT_RANGE_PROTO_SPECIFIED;
                    NFT_REG_2
                });
                self.out.exprs.push(Expr::Nat {
                    kind: NFT_NAT_DNAT,
                    family: u32::from(proto),
                    addr_min: Some(NFT_REG_1),
                    addr_max: None,
                    proto_min,
                    proto_max: None,
                    flags,
                });
            }
            Stmt::Masquerade { fully_random } => {
                self.out.exprs.push(Expr::Masq {
                    flags: if *fully_random {
                        NF_NAT_RANGE_PROTO_RANDOM_FULLY
                    } else {
                        0
                    },
                    proto_min: None,
                });
            }
            Stmt::Reject(kind) => self.reject(*kind),
            Stmt::Limit { rate, unit, burst } => {
                let unit = match unit {
                    crate::nft::model::RateUnit::Second => 1,
                    crate::nft::model::RateUnit::Minute => 60,
                    crate::nft::model::RateUnit::Hour => 3600,
                    crate::nft::model::RateUnit::Day => 86400,
                };
                self.out.exprs.push(Expr::Limit {
                    rate: *rate,
                    unit,
                    burst: *burst,
                    kind: NFT_LIMIT_PKTS,
                    flags: 0,
                });
            }
            Stmt::Counter => self.out.exprs.push(Expr::Counter { packets: 0 }),
            Stmt::Verdict(v) => self.out.exprs.push(verdict_imm(v)),
        }
        Ok(())
    }

    fn reject(&mut self, kind: RejectKind) {
        let (kind, code) = match (kind, self.family) {
            (RejectKind::TcpReset, _) => (NFT_REJECT_TCP_RST, 0),
            (_, Family::Ip) => (NFT_REJECT_ICMP_UNREACH, 3),
            (_, Family::Ip6) => (NFT_REJECT_ICMP_UNREACH, 4),
            (_, Family::Inet) => match self.context {
                Some(NFPROTO_IPV4) => (NFT_REJECT_ICMP_UNREACH, 3),
                Some(NFPROTO_IPV6) => (NFT_REJECT_ICMP_UNREACH, 4),
                _ => (
                    NFT_REJECT_ICMPX_UNREACH,
                    NFT_REJECT_ICMPX_PORT_UNREACH as u8,
                ),
            },
        };
        self.out.exprs.push(Expr::Reject { kind, code });
    }

    fn matches(
        &mut self,
        stmt: &Stmt,
        left: Selector,
        mask: Option<u32>,
        op: CmpOp,
        right: &Value,
    ) -> Result<(), LowerError> {
        let r1 = put_register(1);
        self.dependency(left);
        // An explicit `meta nfproto` match pins the rule like nft's own dependency does.
        if let (Selector::NfProto, CmpOp::Eq, Value::NfProto(p)) = (left, op, right) {
            self.context = Some(*p);
        }
        let cmp = |data: Vec<u8>| Expr::Cmp {
            sreg: r1,
            op: cmp_op(op),
            data,
        };
        // Address prefixes: byte-aligned ones load only the prefix bytes, others mask.
        let prefix = match right {
            Value::Ipv4Net(n) => Some((n.prefix_len() as u32, 4u32)),
            Value::Ipv6Net(n) => Some((n.prefix_len() as u32, 16u32)),
            _ => None,
        };
        if let Some((bits, full)) = prefix {
            if addr_proto(left).is_none() {
                return Err(Self::err(
                    stmt,
                    "a CIDR can only be matched against an address",
                ));
            }
            let net = value_bytes(right);
            if bits.is_multiple_of(8) {
                let n = bits / 8;
                self.out.exprs.push(load(left, n, 1));
                self.out.exprs.push(cmp(net[..n as usize].to_vec()));
            } else {
                self.out.exprs.push(load(left, full, 1));
                self.out.exprs.push(Expr::Bitwise {
                    sreg: r1,
                    dreg: r1,
                    op: NFT_BITWISE_MASK_XOR,
                    mask: prefix_mask(bits, full),
                    xor: vec![0; full as usize],
                });
                self.out.exprs.push(cmp(net));
            }
            return Ok(());
        }
        let len = selector_len(left);
        self.out.exprs.push(load(left, len, 1));
        match (left, mask) {
            // `ct state new`, `ct status dnat`: any of the bits set.
            (Selector::CtState | Selector::CtStatus, None) if op == CmpOp::Eq => {
                self.out.exprs.push(Expr::Bitwise {
                    sreg: r1,
                    dreg: r1,
                    op: NFT_BITWISE_MASK_XOR,
                    mask: value_bytes(right),
                    xor: vec![0; 4],
                });
                self.out.exprs.push(Expr::Cmp {
                    sreg: r1,
                    op: NFT_CMP_NEQ,
                    data: vec![0; 4],
                });
            }
            (_, Some(m)) => {
                self.out.exprs.push(Expr::Bitwise {
                    sreg: r1,
                    dreg: r1,
                    op: NFT_BITWISE_MASK_XOR,
                    mask: m.to_ne_bytes().to_vec(),
                    xor: vec![0; 4],
                });
                self.out.exprs.push(cmp(value_bytes(right)));
            }
            _ => self.out.exprs.push(cmp(value_bytes(right))),
        }
        Ok(())
    }
}

const NF_NAT_RANGE_MAP_IPS: u32 = 0x1;
const NF_NAT_RANGE_PROTO_SPECIFIED: u32 = 0x2;
const NF_NAT_RANGE_PROTO_RANDOM_FULLY: u32 = 0x10;

/// Lowers one rule's statements.
pub(crate) fn lower_rule(
    family: Family,
    stmts: &[Stmt],
    concat_intervals: &BTreeSet<&str>,
) -> Result<Lowered, LowerError> {
    let mut l = Lowerer {
        family,
        concat_intervals,
        context: None,
        out: Lowered::default(),
    };
    for (i, stmt) in stmts.iter().enumerate() {
        // `reject with tcp reset` only makes sense for TCP: nft adds the match when missing.
        if let Stmt::Reject(RejectKind::TcpReset) = stmt {
            let has_tcp = stmts[..i].iter().any(|s| {
                matches!(
                    s,
                    Stmt::Match {
                        left: Selector::L4Proto,
                        mask: None,
                        op: CmpOp::Eq,
                        right: Value::Proto(6)
                    }
                )
            });
            if !has_tcp {
                let dep = Stmt::Match {
                    left: Selector::L4Proto,
                    mask: None,
                    op: CmpOp::Eq,
                    right: Value::Proto(6),
                };
                let mut deps = Lowerer {
                    family,
                    concat_intervals,
                    context: None,
                    out: Lowered::default(),
                };
                deps.stmt(&dep)?;
                let mut exprs = deps.out.exprs;
                exprs.append(&mut l.out.exprs);
                l.out.exprs = exprs;
            }
        }
        l.stmt(stmt)?;
    }
    Ok(l.out)
}
