//! EndpointSlices, in the form the store keeps, as endpoints of service ports, read as
//! kube-proxy reads them (first address, unset conditions); a bad endpoint or port is skipped
//! on its own, FQDN slices are not proxied.

use super::kept::{KeptEndpoint, KeptSlice, ListedAddress};
use super::*;

/// Adds the endpoints of `slice`, one of `service`'s, to `endpoints` (by port name, the name
/// of the service's `ports` shared where one has it); returns what of it was skipped and why.
/// A bad endpoint or port is skipped on its own, as kube-proxy does: the slice's other
/// endpoints still serve.
pub(super) fn add_slice(
    service: &ServiceRef,
    slice: &KeptSlice,
    ports: &[ServicePort],
    endpoints: &mut Vec<(Arc<ServicePortName>, Vec<Endpoint>)>,
) -> Vec<String> {
    if slice.service_name.as_deref().is_none_or(str::is_empty) {
        return vec![format!(
            "no {SERVICE_NAME_LABEL} label; the slice is skipped"
        )];
    }
    let v6 = match &*slice.address_type {
        "IPv4" => false,
        "IPv6" => true,
        _ => return Vec::new(), // FQDN slices are not proxied
    };
    let mut skipped = Vec::new();
    // kube-proxy uses the first address of an endpoint.
    let addresses: Vec<(IpAddr, &KeptEndpoint)> = slice
        .endpoints
        .iter()
        .filter_map(|ep| {
            let listed = ep.address();
            let ip = match listed {
                ListedAddress::Ip(ip) => Some(ip),
                ListedAddress::Text(text) => parse_ip(text),
                ListedAddress::Absent => None,
            };
            match ip {
                Some(ip) if ip.is_ipv6() == v6 => Some((ip, ep)),
                Some(ip) => {
                    skipped.push(format!(
                        "endpoint {ip} skipped: it does not match addressType {}",
                        slice.address_type
                    ));
                    None
                }
                None => {
                    skipped.push(match listed {
                        ListedAddress::Text(a) => {
                            format!("endpoint skipped: invalid address {a:?}")
                        }
                        _ => "endpoint skipped: it has no address".to_string(),
                    });
                    None
                }
            }
        })
        .collect();
    for (port_name, protocol, port) in &slice.ports {
        let Some(protocol) = Protocol::parse(protocol.as_deref()) else {
            skipped.push(format!(
                "port {:?} skipped: unknown protocol {protocol:?}",
                port_name.as_deref().unwrap_or_default(),
            ));
            continue;
        };
        let Some(number) = port.and_then(|p| u16::try_from(p).ok()).filter(|p| *p != 0) else {
            continue; // a port the service doesn't resolve on these endpoints
        };
        let port_name = port_name.as_deref().unwrap_or_default();
        // A service has few ports: a look along them beats building a name to search by.
        let at = endpoints
            .iter()
            .position(|(n, _)| n.port == port_name && n.protocol == protocol)
            .unwrap_or_else(|| {
                let of_port = ports
                    .iter()
                    .find(|p| p.name.port == port_name && p.name.protocol == protocol);
                let name = of_port.map_or_else(
                    || {
                        Arc::new(ServicePortName {
                            namespace: service.0.clone(),
                            name: service.1.clone(),
                            port: port_name.to_string(),
                            protocol,
                        })
                    },
                    |p| p.name.clone(),
                );
                endpoints.push((name, Vec::new()));
                endpoints.len() - 1
            });
        let list = &mut endpoints[at].1;
        // Most ports have one slice: room for exactly its endpoints, then room to grow.
        if list.is_empty() {
            list.reserve_exact(addresses.len());
        } else {
            list.reserve(addresses.len());
        }
        for &(ip, ep) in &addresses {
            // As kube-proxy reads them: an unset ready or serving means true, an unset
            // terminating false.
            let (ready, serving, terminating) = ep.conditions();
            let (hint_zones, hint_nodes) = ep.hints();
            list.push(Endpoint {
                ip,
                port: number,
                ready: ready.unwrap_or(true),
                serving: serving.unwrap_or(true),
                terminating: terminating.unwrap_or(false),
                node_name: ep.node_name().cloned(),
                zone: ep.zone().map(str::to_string),
                hint_zones: hint_zones.iter().map(|z| z.to_string()).collect(),
                hint_nodes: hint_nodes.iter().map(|n| n.to_string()).collect(),
            });
        }
    }
    skipped
}
