//! Running a command as an unprivileged user, for the tests that check kubenft needs only
//! CAP_NET_ADMIN.

/// `setpriv` arguments that drop to uid/gid 65532 (the image's user) keeping only `caps`
/// (e.g. "+net_admin", or "" for none) in every capability set, with no_new_privs as the
/// DaemonSet's `allowPrivilegeEscalation: false` sets it.
pub fn unprivileged(caps: &str) -> Vec<String> {
    let keep = format!(
        "-all{}",
        if caps.is_empty() {
            String::new()
        } else {
            format!(",{caps}")
        }
    );
    vec![
        "setpriv".into(),
        "--reuid=65532".into(),
        "--regid=65532".into(),
        "--clear-groups".into(),
        format!("--inh-caps={keep}"),
        format!("--ambient-caps={keep}"),
        format!("--bounding-set={keep}"),
        "--no-new-privs".into(),
    ]
}
