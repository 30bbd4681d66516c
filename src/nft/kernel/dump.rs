//! Reading one table back from the kernel into the model, as one consistent snapshot: the
//! generation id is read before and after the dumps and the whole read is retried when a
//! transaction committed in between, so a restarted daemon reconciles against a real state.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use super::decode::{self, DecodeError, Expr, RawData, RawElem, RawSet};
use super::lift::{LiftError, SetInfo, lift_rule};
use super::requests;
use super::sys::*;
use crate::netlink::attr::AttrWriter;
use crate::netlink::{Message, NetlinkSocket, SocketError};
use crate::nft::model::{
    Chain, CmpOp, DataType, Element, Family, MapData, RejectKind, Rule, Selector, Set, Stmt, Table,
    Value,
};

/// Attempts at a consistent snapshot before giving up (each retry follows a concurrent commit).
const ATTEMPTS: usize = 5;

#[derive(Debug, thiserror::Error)]
pub enum DumpError {
    #[error("reading the ruleset generation: {0}")]
    Generation(#[source] SocketError),
    #[error("getting table {table}: {source}")]
    Table {
        table: String,
        #[source]
        source: SocketError,
    },
    #[error("dumping chains: {0}")]
    Chains(#[source] SocketError),
    #[error("dumping sets: {0}")]
    Sets(#[source] SocketError),
    #[error("dumping elements of set {set}: {source}")]
    Elements {
        set: String,
        #[source]
        source: SocketError,
    },
    #[error("dumping rules: {0}")]
    Rules(#[source] SocketError),
    #[error("decoding {stage}: {source}")]
    Decode {
        stage: &'static str,
        #[source]
        source: DecodeError,
    },
    #[error("lifting rule expressions: {0}")]
    Lift(#[source] LiftError),
    #[error("set {set}: {reason}")]
    Set { set: String, reason: String },
    /// The kernel listed an element twice: the set's hash table was resized while it was being
    /// dumped (this does not change the ruleset generation), so the listing is not trustworthy.
    #[error("set {set} was resized while it was being read")]
    Torn { set: String },
    #[error("the ruleset kept changing during {attempts} dump attempts")]
    Unstable { attempts: usize },
}

fn dec(stage: &'static str) -> impl Fn(DecodeError) -> DumpError {
    move |source| DumpError::Decode { stage, source }
}

pub(crate) fn nfproto(family: Family) -> u8 {
    match family {
        Family::Ip => NFPROTO_IPV4,
        Family::Ip6 => NFPROTO_IPV6,
        Family::Inet => NFPROTO_INET,
    }
}

/// Reads table `name` of `family` with its chains, named sets and maps (with elements) and
/// rules (with handles). `Ok(None)` when the table does not exist. Anonymous sets are inlined
/// into the rules that use them. Elements are sorted; rules keep the kernel's order. Dynamic
/// sets (`flags dynamic`) come back without elements: those are runtime state.
pub fn dump_table(
    sock: &mut NetlinkSocket,
    family: Family,
    name: &str,
) -> Result<Option<Table>, DumpError> {
    dump_table_without_elements_of(sock, family, name, &BTreeSet::new())
}

/// [`dump_table`], leaving the sets named in `unread` without their elements: reading a set of
/// n elements costs O(n²) in the kernel, which walks the set from its first element for every
/// message of the dump.
pub(crate) fn dump_table_without_elements_of(
    sock: &mut NetlinkSocket,
    family: Family,
    name: &str,
    unread: &BTreeSet<String>,
) -> Result<Option<Table>, DumpError> {
    for attempt in 0..ATTEMPTS {
        let before = requests::generation(sock).map_err(DumpError::Generation)?;
        let result = dump_once(sock, family, name, unread);
        let after = requests::generation(sock).map_err(DumpError::Generation)?;
        match result {
            Err(DumpError::Chains(SocketError::DumpInterrupted { .. }))
            | Err(DumpError::Sets(SocketError::DumpInterrupted { .. }))
            | Err(DumpError::Rules(SocketError::DumpInterrupted { .. }))
            | Err(DumpError::Elements {
                source: SocketError::DumpInterrupted { .. },
                ..
            }) => continue,
            // A resize finishes in the background within moments; read again after it.
            Err(DumpError::Torn { .. }) => {
                std::thread::sleep(std::time::Duration::from_millis(100 << attempt));
                continue;
            }
            // A decode error on a half-changed ruleset is not trustworthy either: retry.
            _ if before != after => continue,
            other => return other,
        }
    }
    Err(DumpError::Unstable { attempts: ATTEMPTS })
}

fn dump_once(
    sock: &mut NetlinkSocket,
    family: Family,
    name: &str,
    unread: &BTreeSet<String>,
) -> Result<Option<Table>, DumpError> {
    let proto = nfproto(family);
    let mut w = AttrWriter::new();
    w.string(NFTA_TABLE_NAME, name);
    let reply = match requests::get(sock, "GETTABLE", NFT_MSG_GETTABLE, proto, &w.buf) {
        Ok(r) => r,
        Err(e) if e.errno() == Some(libc::ENOENT) => return Ok(None),
        Err(source) => {
            return Err(DumpError::Table {
                table: name.to_owned(),
                source,
            });
        }
    };
    let (_, _, attrs) = reply.nfgen().map_err(|source| DumpError::Table {
        table: name.to_owned(),
        source,
    })?;
    let raw_table = decode::table(attrs).map_err(dec("table"))?;
    let mut table = Table {
        family,
        name: name.to_owned(),
        comment: raw_table.comment,
        ..Table::default()
    };

    // Chains: the dump lists every chain of the family; keep ours.
    let mut w = AttrWriter::new();
    w.string(NFTA_CHAIN_TABLE, name);
    for m in requests::dump(sock, "GETCHAIN", NFT_MSG_GETCHAIN, proto, &w.buf)
        .map_err(DumpError::Chains)?
    {
        let (_, _, attrs) = m.nfgen().map_err(DumpError::Chains)?;
        let c = decode::chain(attrs).map_err(dec("chain"))?;
        if c.table != name {
            continue;
        }
        table.chains.insert(
            c.name.clone(),
            Chain {
                name: c.name,
                base: c.base,
                comment: c.comment,
                rules: Vec::new(),
            },
        );
    }

    // Sets, then their elements.
    let mut w = AttrWriter::new();
    w.string(NFTA_SET_TABLE, name);
    let mut raw_sets = Vec::new();
    for m in
        requests::dump(sock, "GETSET", NFT_MSG_GETSET, proto, &w.buf).map_err(DumpError::Sets)?
    {
        let (_, _, attrs) = m.nfgen().map_err(DumpError::Sets)?;
        let s = decode::set(attrs).map_err(dec("set"))?;
        if s.table == name {
            raw_sets.push(s);
        }
    }
    let mut infos = BTreeMap::new();
    for raw in raw_sets {
        // Elements of a dynamic set are packet-path state (rules add them, timeouts expire
        // them), not configuration to reconcile, so they are not read.
        let elems = if raw.flags & NFT_SET_EVAL != 0 || unread.contains(&raw.name) {
            Vec::new()
        } else {
            set_elements(sock, proto, name, &raw.name)?
        };
        let set = build_set(&raw, elems)?;
        let info = SetInfo {
            key: set.key.clone(),
            anonymous: raw.is_anonymous().then(|| {
                set.elements
                    .iter()
                    .filter_map(|e| Some((e.key.clone(), e.data.as_ref()?.verdict()?.clone())))
                    .collect()
            }),
        };
        infos.insert(raw.name.clone(), info);
        if !raw.is_anonymous() {
            table.sets.insert(set.name.clone(), set);
        }
    }

    read_rules(sock, &mut table, &infos)?;
    Ok(Some(table))
}

/// Fills the rules of every chain of `table`, lifted with the sets known (`infos`).
///
/// One dump per chain: a table-wide rule dump makes the kernel skip every rule already sent
/// each time it refills the (at most 32 KiB) reply buffer, which is quadratic (32 s for
/// 300,000 rules); a chain-scoped dump finds its chain by hash and costs one round trip.
fn read_rules(
    sock: &mut NetlinkSocket,
    table: &mut Table,
    infos: &BTreeMap<String, SetInfo>,
) -> Result<(), DumpError> {
    let (family, name) = (table.family, table.name.clone());
    let proto = nfproto(family);
    let names: Vec<String> = table.chains.keys().cloned().collect();
    for chain_name in names {
        let mut w = AttrWriter::new();
        w.string(NFTA_RULE_TABLE, &name);
        w.string(NFTA_RULE_CHAIN, &chain_name);
        let replies = requests::dump(sock, "GETRULE", NFT_MSG_GETRULE, proto, &w.buf)
            .map_err(DumpError::Rules)?;
        let mut rules = Vec::with_capacity(replies.len());
        for m in replies {
            let (_, _, attrs) = m.nfgen().map_err(DumpError::Rules)?;
            let raw = decode::rule(attrs).map_err(dec("rule"))?;
            if raw.table != name || raw.chain != chain_name {
                continue;
            }
            let stmts = lift_rule(family, &raw, infos).map_err(DumpError::Lift)?;
            rules.push(Rule {
                stmts,
                comment: raw.comment,
                handle: Some(raw.handle),
            });
        }
        if let Some(chain) = table.chains.get_mut(&chain_name) {
            chain.rules = rules;
        }
    }
    Ok(())
}

/// How many rules `chain` of table `table` holds; 0 when the chain or the table does not exist.
pub(crate) fn rule_count(
    sock: &mut NetlinkSocket,
    family: Family,
    table: &str,
    chain: &str,
) -> Result<usize, DumpError> {
    Ok(chain_rule_messages(sock, family, table, chain)?.len())
}

/// The GETRULE dump of one chain (the kernel sends only that chain's rules); empty when the
/// chain or the table does not exist.
fn chain_rule_messages(
    sock: &mut NetlinkSocket,
    family: Family,
    table: &str,
    chain: &str,
) -> Result<Vec<Message>, DumpError> {
    let mut w = AttrWriter::new();
    w.string(NFTA_RULE_TABLE, table);
    w.string(NFTA_RULE_CHAIN, chain);
    match requests::dump(sock, "GETRULE", NFT_MSG_GETRULE, nfproto(family), &w.buf) {
        Ok(replies) => Ok(replies),
        Err(e) if e.errno() == Some(libc::ENOENT) => Ok(Vec::new()),
        Err(e) => Err(DumpError::Rules(e)),
    }
}

/// The packets counted so far by each rule of `chain` in table `table` that has a `counter`,
/// with the rule's comment, in the kernel's order; empty if the chain does not exist.
pub(crate) fn rule_counters(
    sock: &mut NetlinkSocket,
    family: Family,
    table: &str,
    chain: &str,
) -> Result<Vec<(Option<String>, u64)>, DumpError> {
    let mut counted = Vec::new();
    for m in chain_rule_messages(sock, family, table, chain)? {
        let (_, _, attrs) = m.nfgen().map_err(DumpError::Rules)?;
        let raw = decode::rule(attrs).map_err(dec("rule"))?;
        if raw.table != table || raw.chain != chain {
            continue;
        }
        let packets = raw.exprs.iter().find_map(|e| match e {
            Expr::Counter { packets } => Some(*packets),
            _ => None,
        });
        counted.extend(packets.map(|p| (raw.comment, p)));
    }
    Ok(counted)
}

/// The spelling in which `dump_table` returns `t` once nft (or an encoder producing nft's
/// bytecode) has written it. Some model statements compile to the same bytecode as others, and
/// the dump can only return one of them:
/// - `reject with icmp(v6|x) type port-unreachable` is plain `reject` (same ICMP code);
/// - in inet tables, `meta nfproto ipv4|ipv6` right before a statement that matches ip/ip6
///   addresses of that version is the dependency nft adds anyway, so it is dropped;
/// - comments are stored as the encoder writes them (`sanitize_comment`: no `"`, no control
///   characters, at most 128 bytes).
///
/// Compare `canonical(desired)` with a dump (both normalized, handles stripped).
pub fn canonical(t: &Table) -> Table {
    canonicalized(t.clone())
}

/// Elements as the kernel stores them (their comments sanitized), as [`canonicalized`] makes
/// a table's.
pub(crate) fn canonicalize_elements(elements: &mut [Element]) {
    for e in elements {
        as_stored(&mut e.comment);
    }
}

/// A comment as the kernel stores it, rewritten only where that changes it: nearly every
/// comment already reads as stored.
fn as_stored(comment: &mut Option<String>) {
    if let Some(text) = comment
        && let Cow::Owned(clean) = crate::nft::render::sanitize_comment(text)
    {
        *text = clean;
    }
}

/// [`canonical`] of a table that is given away, rewritten in place.
pub(crate) fn canonicalized(mut t: Table) -> Table {
    let family = t.family;
    as_stored(&mut t.comment);
    for set in t.sets.values_mut() {
        as_stored(&mut set.comment);
        canonicalize_elements(&mut set.elements);
    }
    for chain in t.chains.values_mut() {
        as_stored(&mut chain.comment);
        for rule in &mut chain.rules {
            as_stored(&mut rule.comment);
            let mut out: Vec<Stmt> = Vec::with_capacity(rule.stmts.len());
            for stmt in rule.stmts.drain(..) {
                if family == Family::Inet
                    && let Some(v) = addr_version(&stmt)
                    && matches!(out.last(), Some(Stmt::Match {
                        left: Selector::NfProto,
                        mask: None,
                        op: CmpOp::Eq,
                        right: Value::NfProto(p),
                    }) if *p == v)
                {
                    out.pop();
                }
                out.push(match stmt {
                    Stmt::Reject(RejectKind::IcmpPortUnreachable) => {
                        Stmt::Reject(RejectKind::Default)
                    }
                    other => other,
                });
            }
            rule.stmts = out;
        }
    }
    t
}

/// The IP version (`NFPROTO_*`) whose addresses a statement reads, if any.
fn addr_version(stmt: &Stmt) -> Option<u8> {
    let of = |sel: &Selector| match sel {
        Selector::IpSaddr | Selector::IpDaddr => Some(NFPROTO_IPV4),
        Selector::Ip6Saddr | Selector::Ip6Daddr => Some(NFPROTO_IPV6),
        _ => None,
    };
    match stmt {
        Stmt::Match { left, .. } => of(left),
        Stmt::Lookup { key, .. } | Stmt::VMap { key, .. } | Stmt::Update { key, .. } => {
            key.iter().find_map(of)
        }
        _ => None,
    }
}

/// The elements a dynamic set holds right now (rules add them; `dump_table` leaves them out as
/// runtime state), each with the time left before the kernel removes it. `set` is the set as
/// `dump_table` returned it (its key types); interval sets are not supported here.
pub(crate) fn dynamic_elements(
    sock: &mut NetlinkSocket,
    family: Family,
    table: &str,
    set: &Set,
) -> Result<Vec<(Element, Option<std::time::Duration>)>, DumpError> {
    let lens: Vec<usize> = set.key.iter().map(|&t| decode::type_len(t)).collect();
    let fail = |reason: String| DumpError::Set {
        set: set.name.clone(),
        reason,
    };
    set_elements(sock, nfproto(family), table, &set.name)?
        .into_iter()
        .map(|e| {
            let key = split_key(&set.key, &lens, &e.key).map_err(fail)?;
            let element = Element {
                key,
                data: None,
                comment: e.comment,
            };
            Ok((
                element,
                e.expiration_ms.map(std::time::Duration::from_millis),
            ))
        })
        .collect()
}

/// Set `set` of table `table` with its elements; `Ok(None)` when the table or the set does not
/// exist.
pub(crate) fn dump_set(
    sock: &mut NetlinkSocket,
    family: Family,
    table: &str,
    set: &str,
) -> Result<Option<Set>, DumpError> {
    for _ in 0..ATTEMPTS {
        match dump_set_once(sock, family, table, set) {
            Err(DumpError::Elements {
                source: SocketError::DumpInterrupted { .. },
                ..
            }) => continue,
            other => return other,
        }
    }
    Err(DumpError::Unstable { attempts: ATTEMPTS })
}

fn dump_set_once(
    sock: &mut NetlinkSocket,
    family: Family,
    table: &str,
    set: &str,
) -> Result<Option<Set>, DumpError> {
    let proto = nfproto(family);
    let mut w = AttrWriter::new();
    w.string(NFTA_SET_TABLE, table).string(NFTA_SET_NAME, set);
    let reply = match requests::get(sock, "GETSET", NFT_MSG_GETSET, proto, &w.buf) {
        Ok(r) => r,
        Err(e) if e.errno() == Some(libc::ENOENT) => return Ok(None),
        Err(source) => return Err(DumpError::Sets(source)),
    };
    let (_, _, attrs) = reply.nfgen().map_err(DumpError::Sets)?;
    let raw = decode::set(attrs).map_err(dec("set"))?;
    let elems = set_elements(sock, proto, table, set)?;
    build_set(&raw, elems).map(Some)
}

fn set_elements(
    sock: &mut NetlinkSocket,
    proto: u8,
    table: &str,
    set: &str,
) -> Result<Vec<RawElem>, DumpError> {
    let mut w = AttrWriter::new();
    w.string(NFTA_SET_ELEM_LIST_TABLE, table)
        .string(NFTA_SET_ELEM_LIST_SET, set);
    let err = |source| DumpError::Elements {
        set: set.to_owned(),
        source,
    };
    let mut out = Vec::new();
    for m in requests::dump(sock, "GETSETELEM", NFT_MSG_GETSETELEM, proto, &w.buf).map_err(err)? {
        let (_, _, attrs) = m.nfgen().map_err(err)?;
        let (name, elems) = decode::set_elems(attrs).map_err(dec("set elements"))?;
        if name == set {
            out.extend(elems);
        }
    }
    Ok(out)
}

/// Turns a kernel set and its raw elements into a model `Set`.
pub(crate) fn build_set(raw: &RawSet, elems: Vec<RawElem>) -> Result<Set, DumpError> {
    let fail = |reason: String| DumpError::Set {
        set: raw.name.clone(),
        reason,
    };
    let key = decode::data_types(&raw.name, raw.key_type).map_err(dec("set key type"))?;
    if key.contains(&DataType::Integer) && !raw.is_anonymous() && !raw.key_typeof {
        // Written by a kubenft before sets carried nft's `typeof` description: nft lists it as
        // `type 0`, which it cannot read back. Unreadable, so the table is replaced (in one
        // transaction) with sets that carry it.
        return Err(fail(
            "integer key without nft's typeof description (nft would list it as `type 0`)".into(),
        ));
    }
    let data = match raw.data_type {
        None => Vec::new(),
        Some(NFT_DATA_VERDICT) => vec![DataType::Verdict],
        Some(other) => decode::data_types(&raw.name, other).map_err(dec("set data type"))?,
    };
    let lens: Vec<usize> = if raw.field_lens.is_empty() {
        key.iter().map(|&t| decode::type_len(t)).collect()
    } else {
        raw.field_lens.iter().map(|&l| l as usize).collect()
    };
    if lens.len() != key.len() {
        return Err(fail(format!(
            "{} key types but {} field lengths",
            key.len(),
            lens.len()
        )));
    }
    let timeout = match (raw.flags & NFT_SET_TIMEOUT != 0, raw.timeout_ms) {
        (_, Some(ms)) => Some(u32::try_from(ms / 1000).map_err(|_| fail("timeout".into()))?),
        (true, None) => return Err(fail("flags timeout without a default timeout".into())),
        (false, None) => None,
    };
    let interval = raw.flags & NFT_SET_INTERVAL != 0;
    let mut elements = if interval {
        interval_elements(&key, &lens, &data, elems).map_err(fail)?
    } else {
        elems
            .into_iter()
            .map(|e| {
                Ok(Element {
                    key: split_key(&key, &lens, &e.key)?,
                    data: elem_data(&data, &e)?,
                    comment: e.comment,
                })
            })
            .collect::<Result<Vec<_>, String>>()
            .map_err(fail)?
    };
    elements.sort();
    if elements.windows(2).any(|w| w[0].key == w[1].key) {
        return Err(DumpError::Torn {
            set: raw.name.clone(),
        });
    }
    Ok(Set {
        name: raw.name.clone(),
        key,
        data,
        interval,
        dynamic: raw.flags & NFT_SET_EVAL != 0,
        timeout,
        size: raw.size,
        comment: raw.comment.clone(),
        elements,
    })
}

/// An element's map data, split by the map's data types like a concatenated key.
fn elem_data(types: &[DataType], e: &RawElem) -> Result<Option<MapData>, String> {
    match &e.data {
        None => Ok(None),
        Some(RawData::Verdict(v)) => Ok(Some(MapData::Verdict(v.clone()))),
        Some(RawData::Value(_)) if types.is_empty() || types == [DataType::Verdict] => {
            Err("element carries value data in a set or verdict map".into())
        }
        Some(RawData::Value(bytes)) => {
            let lens: Vec<usize> = types.iter().map(|&t| decode::type_len(t)).collect();
            Ok(Some(MapData::Values(split_key(types, &lens, bytes)?)))
        }
    }
}

/// Splits a concatenated key: each field starts on a 4-byte boundary.
fn split_key(types: &[DataType], lens: &[usize], bytes: &[u8]) -> Result<Vec<Value>, String> {
    let mut out = Vec::with_capacity(types.len());
    let mut off = 0;
    for (&t, &len) in types.iter().zip(lens) {
        let field = bytes
            .get(off..off + len)
            .ok_or_else(|| format!("key of {} bytes is too short", bytes.len()))?;
        out.push(decode::value(t, field).ok_or_else(|| format!("bad {t:?} key bytes"))?);
        off += (len + 3) & !3;
    }
    Ok(out)
}

/// Reassembles interval elements: either `key`..`key_end` inclusive (concatenations), or
/// the classic encoding of a start element followed by an `INTERVAL_END` element at the first
/// address past the range, with a leading end marker at the bottom of the key space.
fn interval_elements(
    types: &[DataType],
    lens: &[usize],
    data: &[DataType],
    elems: Vec<RawElem>,
) -> Result<Vec<Element>, String> {
    let mut out = Vec::new();
    if elems.iter().any(|e| e.key_end.is_some()) || types.len() > 1 {
        for e in elems {
            let end = e.key_end.clone().unwrap_or_else(|| e.key.clone());
            let mut key = Vec::new();
            let mut off = 0;
            for (&t, &len) in types.iter().zip(lens) {
                let lo = e.key.get(off..off + len).ok_or("short interval key")?;
                let hi = end.get(off..off + len).ok_or("short interval key end")?;
                key.push(range_value(t, lo, Some(&inc(hi)))?);
                off += (len + 3) & !3;
            }
            out.push(Element {
                key,
                data: elem_data(data, &e)?,
                comment: e.comment,
            });
        }
        return Ok(out);
    }
    let (t, len) = (types[0], lens[0]);
    let mut sorted = elems;
    // Ends sort before starts at the same key: an end closes the previous, adjacent range.
    sorted.sort_by(|a, b| {
        a.key.cmp(&b.key).then_with(|| {
            let is_start = |e: &RawElem| e.flags & NFT_SET_ELEM_INTERVAL_END == 0;
            is_start(a).cmp(&is_start(b))
        })
    });
    let mut open: Option<RawElem> = None;
    for e in sorted {
        if e.key.len() != len {
            return Err(format!("interval key of {} bytes", e.key.len()));
        }
        if e.flags & NFT_SET_ELEM_INTERVAL_END != 0 {
            if let Some(start) = open.take() {
                out.push(Element {
                    key: vec![range_value(t, &start.key, Some(&e.key))?],
                    data: elem_data(data, &start)?,
                    comment: start.comment,
                });
            }
        } else if let Some(prev) = open.replace(e) {
            return Err(format!("two interval starts in a row at {:?}", prev.key));
        }
    }
    if let Some(start) = open {
        // No end element: the range runs to the top of the key space.
        out.push(Element {
            key: vec![range_value(t, &start.key, None)?],
            data: elem_data(data, &start)?,
            comment: start.comment,
        });
    }
    Ok(out)
}

/// Big-endian increment; `None` (wrapped to zero) marks the top of the key space.
fn inc(bytes: &[u8]) -> Vec<u8> {
    let mut v = bytes.to_vec();
    for b in v.iter_mut().rev() {
        let (n, carry) = b.overflowing_add(1);
        *b = n;
        if !carry {
            return v;
        }
    }
    Vec::new() // wrapped: past the top
}

/// The value for the half-open range `[lo, hi)` (`hi` `None` or empty: to the top). Addresses
/// become CIDRs (a single address stays plain); other types only support single values.
fn range_value(t: DataType, lo: &[u8], hi: Option<&[u8]>) -> Result<Value, String> {
    let width = lo.len() * 8;
    let to_u128 = |b: &[u8]| b.iter().fold(0u128, |acc, &x| (acc << 8) | u128::from(x));
    let lo_n = to_u128(lo);
    // Size of the range, computed in u128 with the top-of-space case as 2^width - lo.
    let size = match hi.filter(|h| !h.is_empty()) {
        Some(h) => to_u128(h).checked_sub(lo_n).ok_or("inverted range")?,
        None if width == 128 => (u128::MAX - lo_n).checked_add(1).ok_or("whole space")?,
        None => (1u128 << width) - lo_n,
    };
    if t == DataType::Integer {
        // Integer intervals (numgen keys) are big-endian ranges of any size.
        let first = u32::try_from(lo_n).map_err(|_| "integer key wider than 32 bits")?;
        let last = u32::try_from(lo_n + size - 1).map_err(|_| "integer range past 2^32")?;
        return Ok(Value::IntRange { first, last });
    }
    if size == 1 {
        return decode::value(t, lo).ok_or_else(|| format!("bad {t:?} bytes"));
    }
    if !size.is_power_of_two() || lo_n % size != 0 {
        return Err(format!("range of {size} values is not a prefix"));
    }
    let prefix = (width as u32 - size.trailing_zeros()) as u8;
    match decode::value(t, lo) {
        Some(Value::Ipv4(a)) => Ok(Value::Ipv4Net(
            ipnet::Ipv4Net::new(a, prefix).map_err(|e| e.to_string())?,
        )),
        Some(Value::Ipv6(a)) => Ok(Value::Ipv6Net(
            ipnet::Ipv6Net::new(a, prefix).map_err(|e| e.to_string())?,
        )),
        _ => Err(format!("{t:?} ranges are not in the model")),
    }
}

#[cfg(test)]
mod tests;
