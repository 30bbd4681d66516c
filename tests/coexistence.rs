//! Other programs' tables are never touched: a host firewall with a drop policy and a
//! Docker-style nat table keep their exact contents while the daemon syncs, and `cleanup`
//! removes our tables and nothing else.

use crate::harness;

use std::time::Duration;

use harness::*;

const FOREIGN: &str = r#"
table inet host-firewall {
    chain input {
        type filter hook input priority filter; policy drop;
        iif "lo" accept
        ct state established,related accept
        tcp dport 22 accept comment "ssh"
    }
}
table ip nat {
    chain DOCKER {
    }
    chain POSTROUTING {
        type nat hook postrouting priority srcnat; policy accept;
        ip saddr 172.17.0.0/16 oifname != "docker0" masquerade
    }
    chain PREROUTING {
        type nat hook prerouting priority dstnat; policy accept;
        fib daddr type local jump DOCKER
    }
}
"#;

fn list(node: &kubenft::netns::Netns, family: &str, table: &str) -> String {
    let out = node
        .exec_unchecked(&["nft", "list", "table", family, table])
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn foreign_tables_survive_syncs_and_cleanup_untouched() {
    let Some((topo, api)) = lab("coexist") else {
        return;
    };
    let script = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(script.path(), FOREIGN).unwrap();
    topo.node
        .exec(&["nft", "-f", script.path().to_str().unwrap()])
        .unwrap();
    let firewall = list(&topo.node, "inet", "host-firewall");
    let nat = list(&topo.node, "ip", "nat");
    assert!(firewall.contains("policy drop") && nat.contains("masquerade"));

    api.apply(service("web", "10.96.0.10", 80));
    api.apply(slice("web", &[1]));
    let mut daemon = start_daemon(&topo, &api, &[]);
    wait_for_backends(&topo, WEB, &["pod-1"], Duration::from_secs(20));
    api.apply(slice("web", &[1, 2]));
    wait_for_backends(&topo, WEB, &["pod-1", "pod-2"], Duration::from_secs(5));
    assert!(daemon.stop());

    assert_eq!(list(&topo.node, "inet", "host-firewall"), firewall);
    assert_eq!(list(&topo.node, "ip", "nat"), nat);

    let out = std::process::Command::new("ip")
        .args([
            "netns",
            "exec",
            topo.node.name(),
            env!("CARGO_BIN_EXE_kubenft"),
        ])
        .args(["cleanup", "--hostname-override", NODE])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(list(&topo.node, "ip", "kubenft"), "", "our table is gone");
    assert_eq!(list(&topo.node, "inet", "host-firewall"), firewall);
    assert_eq!(list(&topo.node, "ip", "nat"), nat);
}
