//! Reading a packet's fields and the table's sets: what a selector yields for the packet in
//! its current state, and which element of a set (exact, prefix, range or interface-name
//! pattern) holds a key.

use super::*;

impl Walker<'_> {
    pub(super) fn unknown(&self, here: &RuleRef, sel: Selector) -> WalkError {
        let hint = match sel {
            Selector::IifName => ": pass --iif",
            _ => "",
        };
        WalkError::Unknown {
            chain: here.chain.clone(),
            rule: here.text.clone(),
            selector: sel.to_string(),
            hint,
        }
    }

    /// The value `sel` reads from the packet in `state`; `None` when the packet has no such
    /// field (the rule cannot match).
    pub(super) fn read(
        &self,
        here: &RuleRef,
        sel: Selector,
        state: &State,
    ) -> Result<Option<Value>, WalkError> {
        let ip = |a: IpAddr| match a {
            IpAddr::V4(a) => Value::Ipv4(a),
            IpAddr::V6(a) => Value::Ipv6(a),
        };
        let addr_type = |a: &IpAddr| {
            if self.host.is_local(a) {
                AddrType::Local
            } else if a.is_multicast() {
                AddrType::Multicast
            } else {
                AddrType::Unicast
            }
        };
        let v4 = self.packet.saddr.is_ipv4();
        Ok(Some(match sel {
            Selector::IpSaddr if v4 => ip(self.packet.saddr),
            Selector::IpDaddr if v4 => ip(state.daddr),
            Selector::Ip6Saddr if !v4 => ip(self.packet.saddr),
            Selector::Ip6Daddr if !v4 => ip(state.daddr),
            // An address of the other version: nft's implicit dependency on the network
            // protocol fails, so the rule does not match, whatever the operator.
            Selector::IpSaddr | Selector::IpDaddr | Selector::Ip6Saddr | Selector::Ip6Daddr => {
                return Ok(None);
            }
            Selector::ThDport => Value::Port(state.dport),
            Selector::L4Proto => Value::Proto(self.packet.proto),
            Selector::NfProto => Value::NfProto(if v4 { 2 } else { 10 }),
            Selector::Mark => Value::Mark(state.mark),
            Selector::IifName => match &self.packet.iif {
                Some(name) => Value::IfName(name.clone()),
                None => return Err(self.unknown(here, sel)),
            },
            Selector::FibSaddrType => Value::AddrType(addr_type(&self.packet.saddr)),
            Selector::FibDaddrType => Value::AddrType(addr_type(&state.daddr)),
            Selector::CtState => Value::CtState(CtState::NEW),
            Selector::CtStatus => Value::CtStatus(if state.dnat {
                CtStatus::DNAT
            } else {
                CtStatus(0)
            }),
            Selector::ThSport | Selector::OifName => return Err(self.unknown(here, sel)),
        }))
    }

    /// The numbers `[lo, hi)` a numgen or jhash interval draw may yield, each equally likely:
    /// a jhash whose fields the packet gives is one number, else (as numgen) its whole range.
    pub(super) fn drawn(&self, here: &RuleRef, stmt: &Stmt, state: &State) -> (u64, u64) {
        let (modulus, offset) = match stmt {
            Stmt::DnatHashMap {
                fields,
                seed,
                modulus,
                offset,
                ..
            } => {
                let known = fields
                    .iter()
                    .map(|f| self.read(here, *f, state).ok().flatten())
                    .collect::<Option<Vec<Value>>>();
                if let Some(v) = known.and_then(|v| jhash::draw(&v, *seed, *modulus, *offset)) {
                    return (u64::from(v), u64::from(v) + 1);
                }
                (*modulus, *offset)
            }
            Stmt::DnatNumgenMap {
                modulus, offset, ..
            } => (*modulus, *offset),
            _ => (0, 0),
        };
        (u64::from(offset), u64::from(offset) + u64::from(modulus))
    }

    pub(super) fn key(
        &self,
        here: &RuleRef,
        key: &[Selector],
        state: &State,
    ) -> Result<Option<Vec<Value>>, WalkError> {
        key.iter()
            .map(|s| self.read(here, *s, state))
            .collect::<Result<Option<Vec<Value>>, WalkError>>()
    }

    pub(super) fn set(&self, here: &RuleRef, name: &str) -> Result<&Set, WalkError> {
        self.table
            .sets
            .get(name)
            .ok_or_else(|| WalkError::MissingSet {
                chain: here.chain.clone(),
                rule: here.text.clone(),
                set: name.to_string(),
            })
    }

    /// The element of `set` holding `key`, if any.
    pub(super) fn find<'s>(&self, set: &'s Set, key: &[Value]) -> Option<&'s Element> {
        let exact = !set.interval
            && set.elements.iter().all(|e| {
                e.key.iter().all(|v| {
                    !matches!(
                        v,
                        Value::Ipv4Net(_) | Value::Ipv6Net(_) | Value::IntRange { .. }
                    )
                })
            });
        if !exact {
            return set.elements.iter().find(|e| {
                e.key.len() == key.len() && e.key.iter().zip(key).all(|(a, b)| holds(a, b))
            });
        }
        let mut index = self.index.borrow_mut();
        let by_key = index.entry(set.name.clone()).or_insert_with(|| {
            set.elements
                .iter()
                .enumerate()
                .map(|(i, e)| (e.key.clone(), i))
                .collect()
        });
        by_key.get(key).map(|&i| &set.elements[i])
    }
}

/// The `address . port` an element of a NAT map translates to.
pub(super) fn dnat_target(e: &Element) -> Option<(IpAddr, u16)> {
    match e.data.as_ref()? {
        MapData::Values(v) => match v.as_slice() {
            [Value::Ipv4(a), Value::Port(p)] => Some((IpAddr::V4(*a), *p)),
            [Value::Ipv6(a), Value::Port(p)] => Some((IpAddr::V6(*a), *p)),
            _ => None,
        },
        MapData::Verdict(_) => None,
    }
}

pub(super) fn anonymous(items: &[(Vec<Value>, Verdict)], key: &[Value]) -> Option<Verdict> {
    items
        .iter()
        .find(|(k, _)| k.len() == key.len() && k.iter().zip(key).all(|(a, b)| holds(a, b)))
        .map(|(_, v)| v.clone())
}

/// Whether the packet's value `v` is matched by `pattern` (a constant, a CIDR, a range, an
/// interface-name prefix, or conntrack bits of which any must be set).
pub(super) fn holds(pattern: &Value, v: &Value) -> bool {
    match (pattern, v) {
        (Value::Ipv4Net(n), Value::Ipv4(a)) => n.contains(a),
        (Value::Ipv6Net(n), Value::Ipv6(a)) => n.contains(a),
        (Value::IntRange { first, last }, Value::Mark(x)) => first <= x && x <= last,
        (Value::IfName(p), Value::IfName(name)) => match p.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => p == name,
        },
        (Value::CtState(want), Value::CtState(have)) => want.0 & have.0 != 0,
        (Value::CtStatus(want), Value::CtStatus(have)) => want.0 & have.0 != 0,
        _ => pattern == v,
    }
}
