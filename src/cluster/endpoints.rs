//! EndpointSlices as endpoints of service ports, read as kube-proxy reads them (first address,
//! unset conditions); a bad endpoint or port is skipped on its own, FQDN slices are not proxied.

use super::*;

/// Adds a slice's endpoints to `state`; returns what of it was skipped and why. A bad endpoint
/// or port is skipped on its own, as kube-proxy does: the slice's other endpoints still serve.
pub(super) fn add_slice(state: &mut ClusterState, slice: &EndpointSlice) -> Vec<String> {
    let (namespace, service) = slice_service_ref(slice);
    if service.is_empty() {
        return vec![format!(
            "no {SERVICE_NAME_LABEL} label; the slice is skipped"
        )];
    }
    let v6 = match slice.address_type.as_str() {
        "IPv4" => false,
        "IPv6" => true,
        _ => return Vec::new(), // FQDN slices are not proxied
    };
    let mut skipped = Vec::new();
    // kube-proxy uses the first address of an endpoint.
    let endpoints: Vec<(IpAddr, &k8s_openapi::api::discovery::v1::Endpoint)> = slice
        .endpoints
        .iter()
        .filter_map(|ep| {
            let first = ep.addresses.first();
            match first.and_then(|a| parse_ip(a)) {
                Some(ip) if ip.is_ipv6() == v6 => Some((ip, ep)),
                Some(ip) => {
                    skipped.push(format!(
                        "endpoint {ip} skipped: it does not match addressType {}",
                        slice.address_type
                    ));
                    None
                }
                None => {
                    skipped.push(match first {
                        Some(a) => format!("endpoint skipped: invalid address {a:?}"),
                        None => "endpoint skipped: it has no address".to_string(),
                    });
                    None
                }
            }
        })
        .collect();
    for port in slice.ports.iter().flatten() {
        let Some(protocol) = Protocol::parse(port.protocol.as_deref()) else {
            skipped.push(format!(
                "port {:?} skipped: unknown protocol {:?}",
                port.name.as_deref().unwrap_or_default(),
                port.protocol
            ));
            continue;
        };
        let Some(number) = port
            .port
            .and_then(|p| u16::try_from(p).ok())
            .filter(|p| *p != 0)
        else {
            continue; // a port the service doesn't resolve on these endpoints
        };
        let key = ServicePortName {
            namespace: namespace.clone(),
            name: service.clone(),
            port: port.name.clone().unwrap_or_default(),
            protocol,
        };
        let list = state.endpoints.entry(key).or_default();
        for &(ip, ep) in &endpoints {
            let c = ep.conditions.as_ref();
            let ready = c.and_then(|c| c.ready).unwrap_or(true);
            // As kube-proxy reads them: an unset ready or serving means true, an unset
            // terminating false.
            let serving = c.and_then(|c| c.serving).unwrap_or(true);
            let terminating = c.and_then(|c| c.terminating).unwrap_or(false);
            let hints = ep.hints.as_ref();
            list.push(Endpoint {
                ip,
                port: number,
                ready,
                serving,
                terminating,
                node_name: ep.node_name.as_deref().map(shared_name),
                zone: ep.zone.clone(),
                hint_zones: hints
                    .and_then(|h| h.for_zones.as_ref())
                    .into_iter()
                    .flatten()
                    .map(|z| z.name.clone())
                    .collect(),
                hint_nodes: hints
                    .and_then(|h| h.for_nodes.as_ref())
                    .into_iter()
                    .flatten()
                    .map(|n| n.name.clone())
                    .collect(),
            });
        }
    }
    skipped
}
