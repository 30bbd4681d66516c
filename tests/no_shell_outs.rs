//! The product talks to the kernel only over netlink: no `nft`, `ip`, `iptables` or
//! `conntrack` process is ever started outside the test and demo scaffolding, which builds
//! network namespaces and inspects them with the standard tools.

use std::path::{Path, PathBuf};

/// Files (or, ending in `/`, folders) allowed to start processes, and why.
const SCAFFOLDING: &[(&str, &str)] = &[
    (
        "src/netns.rs",
        "creates and enters test/demo network namespaces with `ip netns`",
    ),
    ("src/lab.rs", "wires the test/demo topology with `ip`"),
    ("src/demo.rs", "prints the demo's table with `nft list`"),
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let p = entry.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn only_test_and_demo_scaffolding_starts_processes() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    assert!(files.len() > 20, "the source tree was found");
    let mut offenders = Vec::new();
    for file in files {
        let rel = file
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        // Unit tests are scaffolding too: test-only files (`tests.rs`) and directories (`tests/`), and
        // each file's `#[cfg(test)]` tail.
        let test_only = rel.ends_with("tests.rs")
            || Path::new(&rel)
                .parent()
                .is_some_and(|dir| dir.iter().any(|c| c.to_string_lossy().ends_with("tests")));
        if test_only {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        let text = text.split("#[cfg(test)]").next().unwrap_or_default();
        let starts_processes = [
            "Command::new",
            "process::Command",
            ".exec(",
            "exec_unchecked(",
        ]
        .iter()
        .any(|needle| text.contains(needle));
        if starts_processes
            && !SCAFFOLDING
                .iter()
                .any(|(f, _)| *f == rel || (f.ends_with('/') && rel.starts_with(f)))
        {
            offenders.push(rel);
        }
    }
    assert!(
        offenders.is_empty(),
        "processes started from product code: {offenders:?}"
    );
}
