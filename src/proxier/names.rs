//! Names in the ruleset. Fixed names live in one block; per-service names are
//! `<prefix>-<HASH>-<ns>/<name>/<proto>/<port>` as in kube-proxy's nftables mode: the readable
//! suffix tells operators what a chain is for, and the 8-character hash of that suffix keeps
//! names unique even where sanitising (IPv6 colons become dots) makes two suffixes alike.
//! Budget: namespace and name ≤ 63, port name ≤ 15, an IPv6 endpoint ≤ 45: well under nft's 256.

use sha2::{Digest, Sha256};

use crate::cluster::ServicePortName;

// Base chains (one per hook/priority we need) and the regular chains they jump to.
pub(crate) const FILTER_PREROUTING_PRE_DNAT: &str = "filter-prerouting-pre-dnat";
pub(crate) const FILTER_OUTPUT_PRE_DNAT: &str = "filter-output-pre-dnat";
pub(crate) const NAT_PREROUTING: &str = "nat-prerouting";
pub(crate) const NAT_OUTPUT: &str = "nat-output";
pub(crate) const FILTER_FORWARD: &str = "filter-forward";
pub(crate) const FILTER_INPUT: &str = "filter-input";
pub(crate) const FILTER_OUTPUT: &str = "filter-output";
pub(crate) const NAT_POSTROUTING: &str = "nat-postrouting";
/// Dispatches by destination to service chains.
pub(crate) const SERVICES: &str = "services";
/// Sets the masquerade bit of the packet mark.
pub(crate) const MARK_FOR_MASQUERADE: &str = "mark-for-masquerade";
/// Masquerades packets carrying the bit (and clears it).
pub(crate) const MASQUERADING: &str = "masquerading";
/// `reject` cannot be a map verdict, so maps `goto` this chain.
pub(crate) const REJECT_CHAIN: &str = "reject-chain";
pub(crate) const FIREWALL_CHECK: &str = "firewall-check";
pub(crate) const SERVICE_ENDPOINTS_CHECK: &str = "service-endpoints-check";
pub(crate) const NODEPORT_ENDPOINTS_CHECK: &str = "nodeport-endpoints-check";
pub(crate) const CLUSTER_IPS_CHECK: &str = "cluster-ips-check";
/// Rejects loopback NodePort traffic no userspace proxy serves (with the
/// KubeProxyNFTablesLocalhostNodePorts gate only).
pub(crate) const LOCALHOST_NODEPORTS_CHECK: &str = "localhost-nodeports-check";

// Sets and maps.
pub(crate) const CLUSTER_IPS: &str = "cluster-ips";
pub(crate) const NODEPORT_IPS: &str = "nodeport-ips";
pub(crate) const SERVICE_IPS: &str = "service-ips";
pub(crate) const SERVICE_NODEPORTS: &str = "service-nodeports";
pub(crate) const NO_ENDPOINT_SERVICES: &str = "no-endpoint-services";
pub(crate) const NO_ENDPOINT_NODEPORTS: &str = "no-endpoint-nodeports";
pub(crate) const FIREWALL_IPS: &str = "firewall-ips";
/// The comment of the rule of `LOCALHOST_NODEPORTS_CHECK` that rejects (and counts) `protocol`:
/// the daemon reads each rule's counter by it for the rejected-packets metric.
pub(crate) fn localhost_reject_comment(protocol: crate::cluster::Protocol) -> String {
    format!(
        "loopback {} NodePorts without a userspace proxy",
        protocol.as_str()
    )
}
/// `protocol . NodePort` rejected on loopback (see `LOCALHOST_NODEPORTS_CHECK`).
pub(crate) const LOCALHOST_NODEPORT_REJECTS: &str = "localhost-nodeport-rejects";
/// Random slot → `address . port`: every endpoint-picking chain owns one block of slots, in
/// the shard `service-endpoints-NN` with NN = block mod `ENDPOINT_MAP_SHARDS`.
pub(crate) const SERVICE_ENDPOINTS: &str = "service-endpoints";
/// Why shards: the kernel checks each element added to a map against every rule that uses
/// the map, so one map used by 10,000 service chains and holding 200,000 elements costs
/// 2·10⁹ checks per cold sync; S shards cut that S²-fold, while each map adds a fixed cost.
/// Measured cold syncs (10,000 × 10 / 30,000 × 10 / 44,000 × 1): 64 shards 1.03 / 5.7 /
/// 2.6 s, 256 shards 0.94 / 3.4 / 2.0 s, 1,024 shards 1.09 / 3.6 / 2.8 s.
pub(crate) const ENDPOINT_MAP_SHARDS: u32 = 256;

/// The endpoint map shard holding `block`.
pub(crate) fn endpoint_map(block: u32) -> String {
    format!("{SERVICE_ENDPOINTS}-{:03}", block % ENDPOINT_MAP_SHARDS)
}

/// Whether `set` is one of the endpoint map's shards.
pub fn is_endpoint_map(set: &str) -> bool {
    set.strip_prefix(SERVICE_ENDPOINTS)
        .and_then(|rest| rest.strip_prefix('-'))
        .is_some_and(|n| n.len() == 3 && n.bytes().all(|b| b.is_ascii_digit()))
}
/// The shared chain that draws a slot of `slots` in `pick_slots(slots)` for ClusterIP traffic.
/// Services without ClientIP affinity or externalTrafficPolicy Local have no chain of their
/// own: their n endpoints fill slots 0..n-1 of that map, `slots` being the power of two at or
/// above n, each keeping its slot while it stays (`layout/slots.rs`). Endpoints coming and going
/// are elements, and the table holds a handful of chains
/// instead of one per service — the kernel's commit visits every chain, so that is what keeps
/// a one-endpoint commit O(1).
pub(crate) fn pick_chain(slots: u32) -> String {
    format!("pick-{slots}")
}

/// `address . protocol . port . slot` → endpoint `address . port` for the services of
/// `pick_chain(slots)`. One map per chain rather than one for all: the kernel checks every
/// element added to a map against each rule using it, and the chains hold a dozen draws each.
pub(crate) fn pick_slots(slots: u32) -> String {
    format!("pick-{slots}-slots")
}

/// The shared chain for traffic from outside (NodePorts, external and load-balancer IPs of
/// services with externalTrafficPolicy Cluster): it masquerades, then draws like
/// `pick_chain(slots)` in the same slot map.
pub(crate) fn external_pick_chain(slots: u32) -> String {
    format!("external-pick-{slots}")
}

/// The set of `address . protocol . port` (external IP, load-balancer IP, or node IP and
/// NodePort) the `services` chain sends to `external_pick_chain(slots)`.
pub(crate) fn external_pick_set(slots: u32) -> String {
    format!("external-pick-{slots}-services")
}

/// Whether `set` is one of the shared pick chains' slot maps.
pub fn is_pick_slots(set: &str) -> bool {
    set.strip_prefix("pick-")
        .and_then(|rest| rest.strip_suffix("-slots"))
        .is_some_and(|n| n.parse::<u32>().is_ok_and(u32::is_power_of_two))
}

/// The set of `address . protocol . port` the `services` chain sends to `pick_chain(slots)`.
/// A plain set, not verdict-map elements: adding a `goto` element makes the kernel re-validate
/// every path through the table at commit (milliseconds at 40,000 services), a set element
/// does not, so services come, go and change size in O(1).
pub(crate) fn pick_set(slots: u32) -> String {
    format!("pick-{slots}-services")
}

/// `address . protocol . port` → first endpoint `address . port` (slot 0's in a pick chain), for
/// every address a service is reached at (ClusterIPs, external and load-balancer IPs, node IP .
/// NodePort). The kernel
/// reads its generation anew at each set lookup, so a packet racing a commit that moves a
/// service to another chain can be sent to the old chain and miss the endpoints already
/// moved, or miss both the old and the new dispatch entry: it then lands here (see
/// `PICK_RETRY`).
pub(crate) const PICK_FALLBACK: &str = "pick-fallback";
/// The keys of `PICK_FALLBACK` as a plain set, which `services` tests a packet's key against:
/// kernels before 6.5 (Debian 12's 6.1 among them) refuse a membership test on a map.
pub(crate) const PICK_FALLBACK_FRONTENDS: &str = "pick-fallback-frontends";
/// Where `services` sends a packet whose key is in `PICK_FALLBACK` but matched no dispatch
/// entry: the pick sets again, which see the commit finished, then masquerading and the
/// fallback (a service that moved to a chain of its own, which this packet sees empty).
pub(crate) const PICK_RETRY: &str = "pick-retry";

/// `endpoint . endpoint` pairs: a DNATed packet from an endpoint to itself is masqueraded.
pub(crate) const HAIRPIN_ENDPOINTS: &str = "hairpin-endpoints";

/// Short stable hash: the first 8 base32 characters of SHA-256.
pub(crate) fn hash(s: &str) -> String {
    const ALPHABET: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    let digest = Sha256::digest(s.as_bytes());
    let mut bits: u64 = 0;
    for b in &digest[..5] {
        bits = (bits << 8) | u64::from(*b);
    }
    (0..8)
        .map(|i| ALPHABET[((bits >> (35 - 5 * i)) & 31) as usize] as char)
        .collect()
}

/// `ns/name/proto/port` with characters nft identifiers cannot hold replaced.
fn suffix(sp: &ServicePortName) -> String {
    let port = if sp.port.is_empty() { "-" } else { &sp.port };
    sanitize(&format!(
        "{}/{}/{}/{}",
        sp.namespace,
        sp.name,
        sp.protocol.as_str(),
        port
    ))
}

fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '/' | '-' | '_' | '.') {
                c
            } else {
                '.'
            }
        })
        .collect()
}

fn named(prefix: &str, readable: &str) -> String {
    format!("{prefix}-{}-{readable}", hash(readable))
}

/// Chain choosing among the service port's cluster endpoints.
pub(crate) fn service_chain(sp: &ServicePortName) -> String {
    named("service", &suffix(sp))
}

/// Chain choosing among the node-local endpoints (externalTrafficPolicy Local).
pub(crate) fn local_chain(sp: &ServicePortName) -> String {
    named("local", &suffix(sp))
}

/// Entry for NodePort, external-IP and load-balancer traffic.
pub(crate) fn external_chain(sp: &ServicePortName) -> String {
    named("external", &suffix(sp))
}

/// LoadBalancerSourceRanges check.
pub(crate) fn firewall_chain(sp: &ServicePortName) -> String {
    named("firewall", &suffix(sp))
}

fn endpoint_suffix(sp: &ServicePortName, ip: std::net::IpAddr, port: u16) -> String {
    format!("{}__{}/{port}", suffix(sp), sanitize(&ip.to_string()))
}

/// Chain that DNATs to one endpoint.
pub(crate) fn endpoint_chain(sp: &ServicePortName, ip: std::net::IpAddr, port: u16) -> String {
    named("endpoint", &endpoint_suffix(sp, ip, port))
}

/// ClientIP affinity set of one endpoint.
pub(crate) fn affinity_set(sp: &ServicePortName, ip: std::net::IpAddr, port: u16) -> String {
    named("affinity", &endpoint_suffix(sp, ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::Protocol;

    #[test]
    fn names_are_readable_stable_and_valid_nft_identifiers() {
        let sp = ServicePortName {
            namespace: "ns".into(),
            name: "web".into(),
            port: "http".into(),
            protocol: Protocol::Tcp,
        };
        let a = endpoint_chain(&sp, "fd00::1".parse().unwrap(), 8080);
        assert_eq!(a, endpoint_chain(&sp, "fd00::1".parse().unwrap(), 8080));
        assert!(
            a.starts_with("endpoint-") && a.ends_with("-ns/web/tcp/http__fd00..1/8080"),
            "{a}"
        );
        assert!(crate::nft::render::is_nft_identifier(&a));
        assert_ne!(
            service_chain(&sp),
            service_chain(&ServicePortName {
                protocol: Protocol::Udp,
                ..sp.clone()
            })
        );
        assert_eq!(hash("x").len(), 8);
    }
}
