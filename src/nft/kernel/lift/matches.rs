//! Loads and the expressions that consume them as matches: header fields, meta keys, fib,
//! bitwise masks, compares and set or map lookups. A load only fills a register; the match
//! that reads it completes the statement, exactly as nft generated the pair.

use super::*;

impl Lifter<'_> {
    /// A header field load; in inet tables it absorbs the `meta nfproto` match nft adds.
    pub(super) fn payload(
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
    pub(super) fn meta_load(&mut self, e: &Expr, key: u32, dreg: u32) -> Result<(), LiftError> {
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

    /// A `fib … type` load.
    pub(super) fn fib_load(&mut self, e: &Expr, dreg: u32, flags: u32) -> Result<(), LiftError> {
        let sel = match flags as u16 {
            NFTA_FIB_F_SADDR => Selector::FibSaddrType,
            NFTA_FIB_F_DADDR => Selector::FibDaddrType,
            _ => return Err(self.err(e, "fib flags other than saddr/daddr")),
        };
        self.load(e, dreg, Reg::Load { sel, len: 4 })
    }

    /// A mask-and-xor of a loaded value (mark arithmetic, prefix matches).
    pub(super) fn bitwise(
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
    pub(super) fn compare(
        &mut self,
        e: &Expr,
        sreg: u32,
        op: u32,
        data: &[u8],
    ) -> Result<(), LiftError> {
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
    pub(super) fn lookup(
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

    pub(super) fn payload_selector(
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
    pub(super) fn merged_fields(
        &self,
        base: u32,
        offset: u32,
        len: u32,
    ) -> Option<Vec<(Selector, u32)>> {
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

    pub(super) fn cmp(&self, reg: Reg, op: CmpOp, data: &[u8]) -> Option<Stmt> {
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

    /// The fields a `jhash` reads: selector loads at consecutive 4-byte aligned register
    /// offsets from `sreg`, `len` bytes in all.
    pub(super) fn hashed_fields(
        &mut self,
        e: &Expr,
        sreg: u32,
        len: u32,
    ) -> Result<Vec<Selector>, LiftError> {
        let mut off = self.off(e, sreg)?;
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
        Ok(fields)
    }
}
