//! The refusal's message: the kernel release, each refused operation in `nft` syntax with its
//! errno, and what that means for the constructs in it: the module a construct lives in for
//! "missing" errors (ENOENT, EOPNOTSUPP), "this kernel's nf_tables does not accept …" for
//! "invalid" ones (EINVAL, ERANGE). One line, so it fits a log field, `/healthz` and an Event.

use std::collections::BTreeSet;
use std::fmt;

use super::MINIMUM_KERNEL;
use crate::nft::kernel::Refusal;
use crate::nft::model::{ChainType, Family, MapRef, Selector, Stmt, Table};
use crate::nft::transaction::Op;

/// The kernel refused part of the probe: kubenft cannot run here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsupported {
    /// `uname -r`.
    pub kernel: String,
    /// Operations in the probe.
    pub operations: usize,
    /// The refusals that have a cause of their own, in batch order.
    pub refused: Vec<RefusedOp>,
    /// Refusals that only follow from those (ENOENT on a chain or set refused before).
    pub dependent: usize,
}

/// One refused operation, explained.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedOp {
    pub rendered: String,
    pub errno: i32,
    pub kernel_message: Option<String>,
    pub meaning: String,
}

/// A construct of an operation that a kernel may lack, and where it lives.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Construct {
    pub what: &'static str,
    /// Kernel modules it needs (empty: nf_tables itself).
    pub modules: &'static [&'static str],
}

impl Unsupported {
    /// `refusals` of a probe of `operations` operations creating `tables`, on `kernel`.
    pub(crate) fn new(
        kernel: String,
        tables: &[Table],
        operations: usize,
        refusals: Vec<Refusal>,
    ) -> Unsupported {
        let is_map = |family: Family, set: &str| {
            tables
                .iter()
                .filter(|t| t.family == family)
                .any(|t| t.sets.get(set).is_some_and(|s| !s.data.is_empty()))
        };
        let mut refused_names: BTreeSet<String> = BTreeSet::new();
        let mut refused = Vec::new();
        let mut dependent = 0;
        for r in refusals {
            if r.errno == libc::ENOENT && uses_any(&r.op, &refused_names) {
                dependent += 1;
                continue;
            }
            match &r.op {
                Op::AddChain { chain, .. } => drop(refused_names.insert(chain.name.clone())),
                Op::AddSet { set, .. } => drop(refused_names.insert(set.name.clone())),
                _ => {}
            }
            refused.push(RefusedOp {
                meaning: meaning(&r.op, r.errno, &is_map),
                rendered: r.rendered,
                errno: r.errno,
                kernel_message: r.kernel_message,
            });
        }
        Unsupported {
            kernel,
            operations,
            refused,
            dependent,
        }
    }
}

impl fmt::Display for Unsupported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "kernel {} cannot run kubenft's ruleset (kubenft needs Linux {MINIMUM_KERNEL} or later \
             with nf_tables; nothing was changed): it refused {} of the {} operations of a probe \
             that builds every construct of the ruleset in a scratch table and never commits it",
            self.kernel,
            self.refused.len() + self.dependent,
            self.operations
        )?;
        for (i, r) in self.refused.iter().enumerate() {
            let sep = if i == 0 { ": " } else { "; " };
            write!(
                f,
                "{sep}`{}` → {} ({})",
                r.rendered,
                errno_name(r.errno),
                std::io::Error::from_raw_os_error(r.errno)
                    .to_string()
                    .trim_end_matches(&format!(" (os error {})", r.errno)),
            )?;
            if let Some(m) = &r.kernel_message {
                write!(f, " [kernel: {m}]")?;
            }
            write!(f, ": {}", r.meaning)?;
        }
        if self.dependent > 0 {
            write!(
                f,
                "; {} more operation(s) refused only because they use what was refused",
                self.dependent
            )?;
        }
        Ok(())
    }
}

impl std::error::Error for Unsupported {}

/// Whether `op` names a chain or set among `names` (a jump, a lookup, its own chain or set).
fn uses_any(op: &Op, names: &BTreeSet<String>) -> bool {
    match op {
        Op::AddRule { chain, rule, .. } => {
            names.contains(chain)
                || rule.referenced_sets().iter().any(|s| names.contains(*s))
                || rule.referenced_chains().iter().any(|c| names.contains(*c))
        }
        Op::AddElements { set, elements, .. } => {
            names.contains(set)
                || elements
                    .iter()
                    .any(|e| e.referenced_chain().is_some_and(|c| names.contains(c)))
        }
        _ => false,
    }
}

/// What `errno` on `op` means for a reader: the modules its constructs need when something is
/// missing, the constructs themselves when the kernel calls them invalid.
pub(crate) fn meaning(op: &Op, errno: i32, is_map: &dyn Fn(Family, &str) -> bool) -> String {
    let constructs = constructs_of(op, is_map);
    let with_modules: Vec<&Construct> = constructs
        .iter()
        .filter(|c| !c.modules.is_empty())
        .collect();
    match errno {
        libc::ENOENT | libc::EOPNOTSUPP if !with_modules.is_empty() => {
            let modules: Vec<String> = with_modules
                .iter()
                .map(|c| format!("{} ({})", c.modules.join(" + "), c.what))
                .collect();
            format!("module missing or not loadable: {}", modules.join(", "))
        }
        libc::ENOENT => "it names a chain, set or type this kernel does not have".into(),
        libc::EOPNOTSUPP => "this kernel's nf_tables does not support it".into(),
        libc::EAFNOSUPPORT => {
            "this kernel has no nf_tables for this family (CONFIG_NF_TABLES_IPV4/IPV6)".into()
        }
        libc::EINVAL | libc::ERANGE | libc::E2BIG => {
            let what: Vec<&str> = constructs.iter().map(|c| c.what).collect();
            if what.is_empty() {
                "this kernel's nf_tables does not accept it".into()
            } else {
                format!(
                    "this kernel's nf_tables does not accept {}",
                    what.join(", ")
                )
            }
        }
        _ => "the kernel refused it".into(),
    }
}

/// The constructs of `op` a kernel may lack, each once, in a fixed order.
pub(crate) fn constructs_of(op: &Op, is_map: &dyn Fn(Family, &str) -> bool) -> Vec<Construct> {
    let mut out = BTreeSet::new();
    match op {
        Op::AddChain { chain, .. } if chain.base.is_some_and(|b| b.kind == ChainType::Nat) => {
            out.insert(Construct {
                what: "a nat chain",
                modules: &["nft_chain_nat"],
            });
        }
        Op::AddSet { set, .. } => {
            if set.interval && set.key.len() > 1 {
                out.insert(Construct {
                    what: "an interval set with a concatenated key (pipapo)",
                    modules: &[],
                });
            } else if set.interval {
                out.insert(Construct {
                    what: "an interval set",
                    modules: &[],
                });
            }
            if set.timeout.is_some() || set.dynamic {
                out.insert(Construct {
                    what: "a set with timeouts updated from rules",
                    modules: &[],
                });
            }
            if set.key.len() > 1 {
                out.insert(Construct {
                    what: "a concatenated set key",
                    modules: &[],
                });
            }
        }
        Op::AddRule { table, rule, .. } => {
            for stmt in &rule.stmts {
                stmt_constructs(stmt, table.family, is_map, &mut out);
            }
        }
        _ => {}
    }
    out.into_iter().collect()
}

fn stmt_constructs(
    stmt: &Stmt,
    family: Family,
    is_map: &dyn Fn(Family, &str) -> bool,
    out: &mut BTreeSet<Construct>,
) {
    let mut add = |what: &'static str, modules: &'static [&'static str]| {
        out.insert(Construct { what, modules });
    };
    match stmt {
        Stmt::Match { left, .. } => match left {
            Selector::FibSaddrType | Selector::FibDaddrType => match family {
                Family::Ip => add("fib", &["nft_fib_ipv4"]),
                Family::Ip6 => add("fib", &["nft_fib_ipv6"]),
                Family::Inet => add("fib", &["nft_fib_inet"]),
            },
            Selector::CtState | Selector::CtStatus => add("ct", &["nft_ct", "nf_conntrack"]),
            _ => {}
        },
        Stmt::Lookup { set, .. } if is_map(family, set) => {
            add("a plain membership lookup on a map", &[])
        }
        Stmt::Lookup { .. } => {}
        Stmt::VMap { map, .. } => {
            if matches!(map, MapRef::Anonymous(_)) {
                add("an anonymous verdict map", &[]);
            }
        }
        Stmt::NumgenVMap { .. } | Stmt::NumgenIs { .. } => add("numgen", &["nft_numgen"]),
        Stmt::DnatNumgenMap { .. } | Stmt::DnatSlotMap { .. } => {
            add("numgen", &["nft_numgen"]);
            add("dnat", &["nft_nat"]);
        }
        Stmt::DnatHashMap { .. } => {
            add("jhash", &["nft_hash"]);
            add("dnat", &["nft_nat"]);
        }
        Stmt::DnatMap { .. } | Stmt::Dnat { .. } => add("dnat", &["nft_nat"]),
        Stmt::Update { .. } => add("a set update from a rule (dynset)", &[]),
        Stmt::Masquerade { .. } => add("masquerade", &["nft_masq"]),
        Stmt::Reject(_) => match family {
            Family::Ip => add("reject", &["nft_reject_ipv4"]),
            Family::Ip6 => add("reject", &["nft_reject_ipv6"]),
            Family::Inet => add("reject", &["nft_reject_inet"]),
        },
        Stmt::Limit { .. } => add("limit", &["nft_limit"]),
        Stmt::SetMark(_) | Stmt::Counter | Stmt::Verdict(_) => {}
    }
}

/// The errno's symbolic name, as the kernel headers spell it.
pub(crate) fn errno_name(errno: i32) -> String {
    let name = match errno {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::ENOMEM => "ENOMEM",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::EINVAL => "EINVAL",
        libc::ENFILE => "ENFILE",
        libc::ENOSPC => "ENOSPC",
        libc::ERANGE => "ERANGE",
        libc::E2BIG => "E2BIG",
        libc::ELOOP => "ELOOP",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::EAFNOSUPPORT => "EAFNOSUPPORT",
        libc::EMSGSIZE => "EMSGSIZE",
        libc::ENOBUFS => "ENOBUFS",
        _ => return format!("errno {errno}"),
    };
    name.to_string()
}
