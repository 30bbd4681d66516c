//! One statement's effect on a packet in one state: matches, lookups, verdict maps, random
//! and hashed draws, NAT and marks. A draw splits the state into weighted branches whose
//! weights add up to one; every other statement leads to exactly one step.

use super::*;

impl Walker<'_> {
    /// The steps `stmt` leads to from `state`, weighted.
    pub(super) fn stmt(
        &self,
        chain: &Chain,
        here: &RuleRef,
        caller: Option<&RuleRef>,
        stmt: &Stmt,
        mut state: State,
    ) -> Result<Dist<Step>, WalkError> {
        let mut out = Dist::new();
        match stmt {
            Stmt::Match {
                left,
                mask,
                op,
                right,
            } => {
                let Some(mut v) = self.read(here, *left, &state)? else {
                    return Ok(no_match(state));
                };
                if let (Some(m), Value::Mark(x)) = (mask, &v) {
                    v = Value::Mark(x & m);
                }
                let hit = holds(right, &v) == (*op == CmpOp::Eq);
                out.push(
                    1.0,
                    if hit {
                        Step::Go(state)
                    } else {
                        Step::End(RuleEnd::NoMatch(state))
                    },
                );
            }
            Stmt::Lookup { key, set, negate } => {
                return self.lookup(chain, here, key, set, *negate, state);
            }
            Stmt::VMap { key, map } => {
                let Some(k) = self.key(here, key, &state)? else {
                    return Ok(no_match(state));
                };
                let verdict = self.map_verdict(chain, here, map, &k, &mut state)?;
                out.push(1.0, verdict_step(verdict, state));
            }
            Stmt::NumgenVMap { modulus, map } => {
                let n = (*modulus).max(1);
                for r in 0..n {
                    let mut s = state.clone();
                    let verdict = self.map_verdict(chain, here, map, &[Value::Mark(r)], &mut s)?;
                    out.push(1.0 / f64::from(n), verdict_step(verdict, s));
                }
            }
            Stmt::NumgenIs { modulus, value } => {
                let n = f64::from((*modulus).max(1));
                let p = if value < modulus { 1.0 / n } else { 0.0 };
                out.push(p, Step::Go(state.clone()));
                out.push(1.0 - p, Step::End(RuleEnd::NoMatch(state)));
            }
            Stmt::DnatNumgenMap { map, .. } | Stmt::DnatHashMap { map, .. } => {
                return self.dnat_draw(here, stmt, map, state);
            }
            Stmt::DnatSlotMap { key, modulus, map } => {
                return self.dnat_slots(here, key, *modulus, map, state);
            }
            Stmt::DnatMap { key, map } => {
                let s = self.set(here, map)?;
                let Some(k) = self.key(here, key, &state)? else {
                    return Ok(no_match(state));
                };
                match self.find(s, &k).and_then(|e| Some((e, dnat_target(e)?))) {
                    Some((e, to)) => {
                        self.dnat(&mut state, here, Some(map), e.comment.clone(), to);
                        out.push(1.0, Step::End(RuleEnd::Terminal(Terminal::Accept, state)));
                    }
                    None => out.push(1.0, Step::End(RuleEnd::NoMatch(state))),
                }
            }
            Stmt::Dnat { addr, port } => {
                let to = (*addr, port.unwrap_or(state.dport));
                self.dnat(&mut state, here, None, None, to);
                out.push(1.0, Step::End(RuleEnd::Terminal(Terminal::Accept, state)));
            }
            Stmt::Update { set, .. } => {
                state.events.push(Event::Remembered { set: set.clone() });
                out.push(1.0, Step::Go(state));
            }
            Stmt::SetMark(op) => {
                state.mark = match *op {
                    MarkOp::Or(v) => state.mark | v,
                    MarkOp::Xor(v) => state.mark ^ v,
                    MarkOp::And(v) => state.mark & v,
                    MarkOp::Set(v) => v,
                };
                state.events.push(Event::Marked {
                    rule: here.clone(),
                    caller: caller.cloned(),
                });
                out.push(1.0, Step::Go(state));
            }
            Stmt::Masquerade { .. } => {
                state.masquerade = true;
                state.events.push(Event::Masquerade { rule: here.clone() });
                out.push(1.0, Step::End(RuleEnd::Terminal(Terminal::Accept, state)));
            }
            Stmt::Reject(_) => out.push(1.0, Step::End(RuleEnd::Terminal(Terminal::Reject, state))),
            // Rate limits are assumed not exceeded; counters count.
            Stmt::Limit { .. } | Stmt::Counter => out.push(1.0, Step::Go(state)),
            Stmt::Verdict(v) => out.push(1.0, Step::End(RuleEnd::Verdict(v.clone(), state))),
        }
        Ok(out)
    }

    /// A set lookup: dynamic sets are searched in the host's runtime elements (and pin the
    /// connection), the others in the table's elements.
    fn lookup(
        &self,
        chain: &Chain,
        here: &RuleRef,
        key: &[Selector],
        set: &str,
        negate: bool,
        mut state: State,
    ) -> Result<Dist<Step>, WalkError> {
        let Some(k) = self.key(here, key, &state)? else {
            return Ok(no_match(state));
        };
        let s = self.set(here, set)?;
        let hit = if s.dynamic {
            let e = self.host.dynamic.get(set).and_then(|es| {
                es.iter().find(|e| {
                    e.key.len() == k.len() && e.key.iter().zip(&k).all(|(a, b)| holds(a, b))
                })
            });
            if let Some(e) = e {
                state.events.push(Event::Pinned {
                    set: set.to_owned(),
                    expires_in: e.expires_in,
                });
            }
            e.is_some()
        } else {
            match self.find(s, &k) {
                Some(e) => {
                    if !negate {
                        found(&mut state, chain, set, e);
                    }
                    true
                }
                None => {
                    if negate {
                        state.events.push(Event::NotFound {
                            chain: chain.name.clone(),
                            set: set.to_owned(),
                        });
                    }
                    false
                }
            }
        };
        let mut out = Dist::new();
        out.push(
            1.0,
            if hit != negate {
                Step::Go(state)
            } else {
                Step::End(RuleEnd::NoMatch(state))
            },
        );
        Ok(out)
    }

    /// The verdict `map` holds for `key`, if any; an element found in a named map is recorded.
    fn map_verdict(
        &self,
        chain: &Chain,
        here: &RuleRef,
        map: &MapRef,
        key: &[Value],
        state: &mut State,
    ) -> Result<Option<Verdict>, WalkError> {
        Ok(match map {
            MapRef::Named(name) => {
                let s = self.set(here, name)?;
                self.find(s, key).and_then(|e| {
                    let v = e.data.as_ref().and_then(MapData::verdict).cloned();
                    if v.is_some() {
                        found(state, chain, name, e);
                    }
                    v
                })
            }
            MapRef::Anonymous(items) => anonymous(items, key),
        })
    }

    /// `dnat to … . numgen random mod M map`: each of the M draws takes the element holding the
    /// key with that slot, or does not match.
    fn dnat_slots(
        &self,
        here: &RuleRef,
        key: &[Selector],
        modulus: u32,
        map: &str,
        state: State,
    ) -> Result<Dist<Step>, WalkError> {
        let mut out = Dist::new();
        let s = self.set(here, map)?;
        let Some(mut k) = self.key(here, key, &state)? else {
            return Ok(no_match(state));
        };
        let n = modulus.max(1);
        for r in 0..n {
            k.push(Value::Mark(r));
            let step = match self.find(s, &k).and_then(|e| Some((e, dnat_target(e)?))) {
                Some((e, to)) => {
                    let mut t = state.clone();
                    self.dnat(&mut t, here, Some(map), e.comment.clone(), to);
                    Step::End(RuleEnd::Terminal(Terminal::Accept, t))
                }
                None => Step::End(RuleEnd::NoMatch(state.clone())),
            };
            k.pop();
            out.push(1.0 / f64::from(n), step);
        }
        Ok(out)
    }

    /// `dnat to numgen … map` or `dnat to jhash … map`: each interval element of `map` takes
    /// the share of the draw it covers; the share no element covers does not match.
    fn dnat_draw(
        &self,
        here: &RuleRef,
        stmt: &Stmt,
        map: &str,
        state: State,
    ) -> Result<Dist<Step>, WalkError> {
        let mut out = Dist::new();
        let s = self.set(here, map)?;
        let (lo, hi) = self.drawn(here, stmt, &state);
        let total = (hi - lo).max(1) as f64;
        let mut covered = 0u64;
        for e in &s.elements {
            let Some(Value::IntRange { first, last }) = e.key.first() else {
                continue;
            };
            let a = u64::from(*first).max(lo);
            let b = (u64::from(*last) + 1).min(hi);
            if a >= b {
                continue;
            }
            covered += b - a;
            if let Some(to) = dnat_target(e) {
                let mut t = state.clone();
                self.dnat(&mut t, here, Some(map), e.comment.clone(), to);
                out.push(
                    (b - a) as f64 / total,
                    Step::End(RuleEnd::Terminal(Terminal::Accept, t)),
                );
            }
        }
        let missed = (hi - lo).saturating_sub(covered);
        out.push(missed as f64 / total, Step::End(RuleEnd::NoMatch(state)));
        Ok(out)
    }

    pub(super) fn dnat(
        &self,
        state: &mut State,
        here: &RuleRef,
        map: Option<&str>,
        comment: Option<String>,
        (to, port): (IpAddr, u16),
    ) {
        state.daddr = to;
        state.dport = port;
        state.dnat = true;
        state.events.push(Event::Dnat {
            rule: here.clone(),
            map: map.map(str::to_owned),
            comment,
            to,
            port,
        });
    }
}

/// The one step of a statement that cannot match (the packet lacks a field of its key).
fn no_match(state: State) -> Dist<Step> {
    let mut out = Dist::new();
    out.push(1.0, Step::End(RuleEnd::NoMatch(state)));
    out
}

/// A verdict map's answer as a step: its verdict, or no match when no element held the key.
fn verdict_step(verdict: Option<Verdict>, state: State) -> Step {
    match verdict {
        Some(v) => Step::End(RuleEnd::Verdict(v, state)),
        None => Step::End(RuleEnd::NoMatch(state)),
    }
}

/// Records that `chain`'s rule found element `e` of `set`.
fn found(state: &mut State, chain: &Chain, set: &str, e: &Element) {
    state.events.push(Event::Found {
        chain: chain.name.clone(),
        set: set.to_string(),
        key: e.key.clone(),
        comment: e.comment.clone(),
    });
}
