//! Expressions that act on the packet or its connection: mark, NAT, masquerade, reject, set
//! updates and limits, each lifted only in the exact form nft writes for our statements.

use super::*;

impl Lifter<'_> {
    /// `meta mark set …` from an immediate or from mark arithmetic.
    pub(super) fn set_mark(&mut self, e: &Expr, sreg: u32) -> Result<(), LiftError> {
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

    /// `dnat to … map`: the map's data is `address . port`.
    pub(super) fn dnat_map(
        &mut self,
        e: &Expr,
        family: u32,
        amin: u32,
        pmin: u32,
    ) -> Result<(), LiftError> {
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
            _ => unreachable!("step admits only map data here"),
        };
        self.stmts.push(stmt);
        Ok(())
    }

    /// `dnat to address[:port]` from immediates.
    pub(super) fn dnat(
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
    pub(super) fn masquerade(&mut self, e: &Expr, flags: u32) -> Result<(), LiftError> {
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
    pub(super) fn reject(&mut self, e: &Expr, kind: u32, code: u8) -> Result<(), LiftError> {
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
    pub(super) fn update(&mut self, e: &Expr, set: &str, sreg_key: u32) -> Result<(), LiftError> {
        let n = self.set(e, set)?.key.len();
        let key = self.key(e, sreg_key, n)?;
        self.stmts.push(Stmt::Update {
            set: set.to_owned(),
            key,
        });
        Ok(())
    }

    /// `limit rate N/unit burst B packets`.
    pub(super) fn limit(
        &mut self,
        e: &Expr,
        rate: u64,
        unit: u64,
        burst: u32,
    ) -> Result<(), LiftError> {
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
}
