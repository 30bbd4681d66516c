use super::*;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

/// A directory laid out like /proc/sys and /sys with the kernel's defaults of this machine.
fn fake_node() -> (tempfile::TempDir, Roots) {
    let dir = tempfile::tempdir().unwrap();
    let roots = Roots::under(dir.path());
    for (name, value) in [
        ("nf_conntrack_max", "262144"),
        ("nf_conntrack_tcp_timeout_established", "432000"),
        ("nf_conntrack_tcp_timeout_close_wait", "60"),
        ("nf_conntrack_tcp_be_liberal", "0"),
        ("nf_conntrack_udp_timeout", "30"),
        ("nf_conntrack_udp_timeout_stream", "120"),
    ] {
        let path = roots.sysctl(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, format!("{value}\n")).unwrap();
    }
    let hash = roots.hashsize();
    std::fs::create_dir_all(hash.parent().unwrap()).unwrap();
    std::fs::write(&hash, "65536\n").unwrap();
    (dir, roots)
}

fn read(path: PathBuf) -> String {
    std::fs::read_to_string(path).unwrap().trim().to_string()
}

#[test]
fn the_limit_is_max_per_core_times_cpus_at_least_min_and_at_most_a_million() {
    let s = ConntrackSettings::default();
    assert_eq!(s.conntrack_max(2), Some(131_072), "2 × 32768 < min");
    assert_eq!(s.conntrack_max(8), Some(262_144));
    assert_eq!(s.conntrack_max(64), Some(1_048_576), "capped");
    let off = ConntrackSettings {
        max_per_core: 0,
        ..s.clone()
    };
    assert_eq!(
        off.conntrack_max(64),
        None,
        "0 leaves the limit and min alone"
    );
    let zero = ConntrackSettings {
        min: 0,
        max_per_core: 1,
        ..s
    };
    assert_eq!(zero.conntrack_max(4), Some(4));
}

#[test]
fn cpus_are_counted_from_the_online_list() {
    assert_eq!(count_cpu_list("0"), Some(1));
    assert_eq!(count_cpu_list("0-3"), Some(4));
    assert_eq!(count_cpu_list("0-3,8-11,15"), Some(9));
    assert_eq!(count_cpu_list("x"), None);
    let (_dir, roots) = fake_node();
    let online = roots.sys.join("devices/system/cpu/online");
    std::fs::create_dir_all(online.parent().unwrap()).unwrap();
    std::fs::write(&online, "0-47\n").unwrap();
    assert_eq!(roots.cpus(), 48);
}

#[test]
fn the_defaults_raise_the_limit_and_hash_size_and_set_the_tcp_timeouts() {
    let (_dir, roots) = fake_node();
    let decisions = apply(&ConntrackSettings::default(), &roots, 16);
    let lines: Vec<String> = decisions.iter().map(ToString::to_string).collect();
    assert_eq!(
        lines,
        [
            "raised net.netfilter.nf_conntrack_max from 262144 to 524288",
            "raised nf_conntrack hashsize from 65536 to 131072",
            "set net.netfilter.nf_conntrack_tcp_timeout_established from 432000 to 86400",
            "raised net.netfilter.nf_conntrack_tcp_timeout_close_wait from 60 to 3600",
        ]
    );
    assert_eq!(read(roots.sysctl("nf_conntrack_max")), "524288");
    assert_eq!(read(roots.hashsize()), "131072");
    assert_eq!(
        read(roots.sysctl("nf_conntrack_tcp_timeout_established")),
        "86400"
    );
    assert_eq!(read(roots.sysctl("nf_conntrack_udp_timeout")), "30");
    assert_eq!(read(roots.sysctl("nf_conntrack_tcp_be_liberal")), "0");
}

#[test]
fn a_limit_or_hash_size_already_higher_is_never_lowered() {
    let (_dir, roots) = fake_node();
    std::fs::write(roots.hashsize(), "500000").unwrap();
    let decisions = apply(&ConntrackSettings::default(), &roots, 2);
    assert_eq!(
        decisions[..2],
        [
            Decision::Kept {
                name: "net.netfilter.nf_conntrack_max".into(),
                value: 262_144,
                wanted: 131_072
            },
            Decision::Kept {
                name: "nf_conntrack hashsize".into(),
                value: 500_000,
                wanted: 32_768
            },
        ]
    );
    assert_eq!(
        decisions[0].to_string(),
        "left net.netfilter.nf_conntrack_max at 262144: already at least 131072, and it is \
             never lowered"
    );
    assert_eq!(read(roots.sysctl("nf_conntrack_max")), "262144");
    assert_eq!(read(roots.hashsize()), "500000");
}

#[test]
fn every_configured_field_is_applied_and_zero_ones_are_left_alone() {
    let (_dir, roots) = fake_node();
    let settings = ConntrackSettings {
        max_per_core: 0,
        min: 999_999,
        tcp_established_timeout: Duration::ZERO,
        tcp_close_wait_timeout: Duration::from_secs(60),
        tcp_be_liberal: true,
        udp_timeout: Duration::from_secs(10),
        udp_stream_timeout: Duration::from_secs(300),
    };
    let lines: Vec<String> = apply(&settings, &roots, 4)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        lines,
        [
            "left net.netfilter.nf_conntrack_tcp_timeout_close_wait at 60: already as \
                 configured",
            "raised net.netfilter.nf_conntrack_tcp_be_liberal from 0 to 1",
            "set net.netfilter.nf_conntrack_udp_timeout from 30 to 10",
            "raised net.netfilter.nf_conntrack_udp_timeout_stream from 120 to 300",
        ]
    );
    assert_eq!(read(roots.sysctl("nf_conntrack_max")), "262144");
    assert_eq!(read(roots.hashsize()), "65536");
    assert_eq!(
        read(roots.sysctl("nf_conntrack_tcp_timeout_established")),
        "432000"
    );
}

#[test]
fn a_read_only_limit_skips_it_and_the_global_hash_size() {
    // The kernel makes nf_conntrack_max mode 0444 outside the host's network namespace;
    // root would write through the mode bits, so they are checked before writing.
    let (_dir, roots) = fake_node();
    let max = roots.sysctl("nf_conntrack_max");
    std::fs::set_permissions(&max, std::fs::Permissions::from_mode(0o444)).unwrap();
    let decisions = apply(&ConntrackSettings::default(), &roots, 16);
    assert!(
        matches!(&decisions[0], Decision::SkippedReadOnly { name, wanted: 524_288, .. }
            if name == "net.netfilter.nf_conntrack_max"),
        "{decisions:?}"
    );
    assert!(
        matches!(&decisions[1], Decision::SkippedReadOnly { name, wanted: 131_072, .. }
            if name == "nf_conntrack hashsize"),
        "{decisions:?}"
    );
    assert!(decisions[0].to_string().contains("read-only (mode 444)"));
    assert_eq!(read(max), "262144");
    assert_eq!(read(roots.hashsize()), "65536");
    assert!(decisions.iter().all(|d| !d.failed()));
}

#[test]
fn a_missing_or_garbled_file_is_a_failure_that_stops_nothing_else() {
    let (_dir, roots) = fake_node();
    std::fs::remove_file(roots.sysctl("nf_conntrack_tcp_timeout_established")).unwrap();
    std::fs::write(roots.sysctl("nf_conntrack_tcp_timeout_close_wait"), "x").unwrap();
    let decisions = apply(&ConntrackSettings::default(), &roots, 16);
    assert_eq!(decisions.iter().filter(|d| d.failed()).count(), 2);
    assert!(decisions[2].to_string().starts_with(
        "could not set net.netfilter.nf_conntrack_tcp_timeout_established to 86400: reading"
    ));
    assert!(decisions[3].to_string().contains("not a number"));
    assert_eq!(read(roots.sysctl("nf_conntrack_max")), "524288");
}
