//! `Outline` over netlink: table, chain and rule dumps read only for names, hooks, handles and
//! immediate jump/goto verdicts. Every other attribute and expression is skipped unread, so a
//! rule written by any program (iptables-nft's compat `match`/`target` included) outlines.

use super::apply::Nftables;
use super::decode::{self, DecodeError, RawData, at, attrs};
use super::dump::nfproto;
use super::requests;
use super::sys::*;
use crate::netlink::attr::AttrWriter;
use crate::netlink::{Message, SocketError};
use crate::nft::model::{Family, Verdict};
use crate::nft::outline::{ChainOutline, Outline, OutlineError, RuleOutline};
use crate::nft::transaction::TableRef;

/// Dumps the kernel flags interrupted (the ruleset changed meanwhile) are read again this often.
const ATTEMPTS: usize = 5;

fn failed(what: String) -> impl FnOnce(Box<dyn std::error::Error + Send + Sync>) -> OutlineError {
    move |source| OutlineError { what, source }
}

impl Nftables {
    fn dump_consistent(
        &mut self,
        request: &'static str,
        msg: u16,
        family: u8,
        attrs: &[u8],
    ) -> Result<Vec<Message>, SocketError> {
        let mut last = None;
        for _ in 0..ATTEMPTS {
            match requests::dump(&mut self.sock, request, msg, family, attrs) {
                Err(e @ SocketError::DumpInterrupted { .. }) => last = Some(e),
                other => return other,
            }
        }
        Err(last.expect("ATTEMPTS > 0"))
    }
}

impl Outline for Nftables {
    fn tables(&mut self) -> Result<Vec<TableRef>, OutlineError> {
        let what = || "tables".to_string();
        let replies = self
            .dump_consistent("GETTABLE", NFT_MSG_GETTABLE, NFPROTO_UNSPEC, &[])
            .map_err(|e| failed(what())(e.into()))?;
        let mut out = Vec::new();
        for m in replies {
            let (proto, _, attrs) = m.nfgen().map_err(|e| failed(what())(e.into()))?;
            let Some(family) = family_of(proto) else {
                continue;
            };
            let t = decode::table(attrs).map_err(|e| failed(what())(e.into()))?;
            out.push(TableRef {
                family,
                name: t.name,
            });
        }
        Ok(out)
    }

    fn chains(&mut self, table: &TableRef) -> Result<Vec<ChainOutline>, OutlineError> {
        let what = || format!("the chains of {table}");
        let mut w = AttrWriter::new();
        w.string(NFTA_CHAIN_TABLE, &table.name);
        let replies = self
            .dump_consistent("GETCHAIN", NFT_MSG_GETCHAIN, nfproto(table.family), &w.buf)
            .map_err(|e| failed(what())(e.into()))?;
        let mut out = Vec::new();
        for m in replies {
            let (_, _, attrs) = m.nfgen().map_err(|e| failed(what())(e.into()))?;
            let c = chain_outline(attrs).map_err(|e| failed(what())(e.into()))?;
            // Older kernels list every chain of the family, whatever the request names.
            if c.0 == table.name {
                out.push(c.1);
            }
        }
        Ok(out)
    }

    fn rules(&mut self, table: &TableRef, chain: &str) -> Result<Vec<RuleOutline>, OutlineError> {
        let what = || format!("the rules of {table} {chain}");
        let mut w = AttrWriter::new();
        w.string(NFTA_RULE_TABLE, &table.name);
        w.string(NFTA_RULE_CHAIN, chain);
        let replies =
            match self.dump_consistent("GETRULE", NFT_MSG_GETRULE, nfproto(table.family), &w.buf) {
                Ok(r) => r,
                Err(e) if e.errno() == Some(libc::ENOENT) => return Ok(Vec::new()),
                Err(e) => return Err(failed(what())(e.into())),
            };
        let mut out = Vec::new();
        for m in replies {
            let (_, _, attrs) = m.nfgen().map_err(|e| failed(what())(e.into()))?;
            let (t, c, rule) = rule_outline(attrs).map_err(|e| failed(what())(e.into()))?;
            if t == table.name && c == chain {
                out.push(rule);
            }
        }
        Ok(out)
    }
}

fn family_of(nfproto: u8) -> Option<Family> {
    match nfproto {
        NFPROTO_IPV4 => Some(Family::Ip),
        NFPROTO_IPV6 => Some(Family::Ip6),
        NFPROTO_INET => Some(Family::Inet),
        _ => None,
    }
}

/// (table, chain) of one NEWCHAIN message.
fn chain_outline(attr_bytes: &[u8]) -> Result<(String, ChainOutline), DecodeError> {
    const W: &str = "chain";
    let (mut table, mut name, mut base) = (None, None, false);
    for a in attrs(W, attr_bytes) {
        let a = a?;
        match a.kind {
            NFTA_CHAIN_TABLE => table = Some(at(W, a.string())?.to_owned()),
            NFTA_CHAIN_NAME => name = Some(at(W, a.string())?.to_owned()),
            NFTA_CHAIN_HOOK => base = true,
            _ => {}
        }
    }
    let missing = |attr| DecodeError::Missing { what: W, attr };
    Ok((
        table.ok_or_else(|| missing("NFTA_CHAIN_TABLE"))?,
        ChainOutline {
            name: name.ok_or_else(|| missing("NFTA_CHAIN_NAME"))?,
            base,
        },
    ))
}

/// (table, chain, outline) of one NEWRULE message: its handle and the chains named by its
/// `immediate` verdicts (how nft and iptables-nft both write `jump`/`goto`).
fn rule_outline(attr_bytes: &[u8]) -> Result<(String, String, RuleOutline), DecodeError> {
    const W: &str = "rule";
    let (mut table, mut chain, mut handle) = (None, None, None);
    let mut jumps = Vec::new();
    for a in attrs(W, attr_bytes) {
        let a = a?;
        match a.kind {
            NFTA_RULE_TABLE => table = Some(at(W, a.string())?.to_owned()),
            NFTA_RULE_CHAIN => chain = Some(at(W, a.string())?.to_owned()),
            NFTA_RULE_HANDLE => handle = Some(at(W, a.be64())?),
            NFTA_RULE_EXPRESSIONS => {
                for e in attrs(W, a.value) {
                    let e = e?;
                    if e.kind == NFTA_LIST_ELEM
                        && let Some(target) = immediate_jump(e.value)?
                    {
                        jumps.push(target);
                    }
                }
            }
            _ => {}
        }
    }
    let missing = |attr| DecodeError::Missing { what: W, attr };
    Ok((
        table.ok_or_else(|| missing("NFTA_RULE_TABLE"))?,
        chain.ok_or_else(|| missing("NFTA_RULE_CHAIN"))?,
        RuleOutline {
            handle: handle.ok_or_else(|| missing("NFTA_RULE_HANDLE"))?,
            jumps,
        },
    ))
}

/// The chain an `immediate` expression jumps or goes to; `None` for any other expression.
fn immediate_jump(expr: &[u8]) -> Result<Option<String>, DecodeError> {
    const W: &str = "expression";
    let (mut is_immediate, mut data) = (false, None);
    for a in attrs(W, expr) {
        let a = a?;
        match a.kind {
            NFTA_EXPR_NAME => is_immediate = at(W, a.string())? == "immediate",
            NFTA_EXPR_DATA => data = Some(a.value),
            _ => {}
        }
    }
    let (true, Some(data)) = (is_immediate, data) else {
        return Ok(None);
    };
    for a in attrs(W, data) {
        let a = a?;
        if a.kind == NFTA_IMMEDIATE_DATA
            && let RawData::Verdict(Verdict::Jump(c) | Verdict::Goto(c)) =
                decode::data("immediate", a.value)?
        {
            return Ok(Some(c));
        }
    }
    Ok(None)
}
