//! A Service, in the form the store keeps, as service ports: one `ServicePort` per spec port,
//! with the Service's ClusterIPs, external addresses, NodePorts, policies and affinity. A
//! Service the proxy does not serve (headless, ExternalName) has no service ports; one it
//! cannot read is an error naming the field.

use super::kept::{KeptService, KeptServiceSpec, Text};
use super::*;

pub(super) fn service_ports(svc: &KeptService) -> Result<Vec<ServicePort>, String> {
    let namespace = namespace_or_default(svc.names.namespace.as_deref());
    let name = svc.names.name.as_deref().ok_or("no metadata.name")?;
    let Some(spec) = svc.spec.as_deref() else {
        return Ok(Vec::new());
    };
    if spec.type_.as_deref() == Some("ExternalName") {
        return Ok(Vec::new());
    }
    let mut cluster_ips = Vec::new();
    let listed = if spec.cluster_ips.is_empty() {
        spec.cluster_ip.as_slice()
    } else {
        &spec.cluster_ips
    };
    for ip in listed {
        if &**ip == "None" {
            return Ok(Vec::new()); // headless
        }
        if ip.is_empty() {
            continue;
        }
        cluster_ips.push(parse_ip(ip).ok_or_else(|| format!("invalid clusterIP {ip:?}"))?);
    }
    if cluster_ips.is_empty() {
        return Err("no clusterIP allocated".into());
    }
    let mut external_ips = Vec::new();
    for ip in &spec.external_ips {
        external_ips.push(parse_ip(ip).ok_or_else(|| format!("invalid externalIP {ip:?}"))?);
    }
    let load_balancer_ips = load_balancer_ips(svc, spec)?;
    let mut source_ranges = Vec::new();
    for r in &spec.load_balancer_source_ranges {
        let r = r.trim();
        let net = parse_net(r).ok_or_else(|| format!("invalid loadBalancerSourceRange {r:?}"))?;
        source_ranges.push(net);
    }
    let policy = |p: &Option<Text>| {
        if p.as_deref() == Some("Local") {
            TrafficPolicy::Local
        } else {
            TrafficPolicy::Cluster
        }
    };
    let external_policy = if matches!(
        spec.type_.as_deref(),
        Some("NodePort") | Some("LoadBalancer")
    ) || !external_ips.is_empty()
    {
        policy(&spec.external_traffic_policy)
    } else {
        TrafficPolicy::Cluster
    };
    let affinity_timeout = (spec.session_affinity.as_deref() == Some("ClientIP")).then(|| {
        spec.affinity_timeout_seconds
            .filter(|t| *t > 0)
            .map_or(10800, |t| t as u32)
    });
    let consistent = ConsistentEndpoint::of(svc).ok().flatten();
    let mut out = Vec::new();
    for (port_name, protocol, port, node_port) in &spec.ports {
        let protocol = Protocol::parse(protocol.as_deref())
            .ok_or_else(|| format!("unknown protocol {protocol:?}"))?;
        let port = u16::try_from(*port)
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| format!("invalid port {port}"))?;
        let node_port = match *node_port {
            None | Some(0) => None,
            Some(n) => Some(u16::try_from(n).map_err(|_| format!("invalid nodePort {n}"))?),
        };
        let node_port = node_port.filter(|_| {
            matches!(
                spec.type_.as_deref(),
                Some("NodePort") | Some("LoadBalancer")
            )
        });
        out.push(ServicePort {
            name: Arc::new(ServicePortName {
                namespace: namespace.to_string(),
                name: name.to_string(),
                port: port_name.as_deref().unwrap_or_default().to_string(),
                protocol,
            }),
            cluster_ips: cluster_ips.clone(),
            port,
            node_port,
            external_ips: external_ips.clone(),
            load_balancer_ips: load_balancer_ips.clone(),
            source_ranges: source_ranges.clone(),
            external_policy,
            internal_policy: policy(&spec.internal_traffic_policy),
            affinity_timeout,
            health_check_node_port: spec
                .health_check_node_port
                .and_then(|p| u16::try_from(p).ok())
                .filter(|p| *p != 0),
            traffic_distribution: spec.traffic_distribution.as_deref().map(str::to_string),
            consistent,
        });
    }
    Ok(out)
}

/// The addresses a LoadBalancer Service's load balancer reports, but those whose ipMode is
/// `Proxy` (the load balancer forwards to the nodes itself; kube-proxy skips them too).
fn load_balancer_ips(svc: &KeptService, spec: &KeptServiceSpec) -> Result<Vec<IpAddr>, String> {
    let mut load_balancer_ips = Vec::new();
    if spec.type_.as_deref() != Some("LoadBalancer") {
        return Ok(load_balancer_ips);
    }
    for (ip, ip_mode) in &svc.ingress {
        if ip_mode.as_deref() == Some("Proxy") {
            continue;
        }
        if let Some(ip) = ip {
            load_balancer_ips
                .push(parse_ip(ip).ok_or_else(|| format!("invalid load balancer IP {ip:?}"))?);
        }
    }
    Ok(load_balancer_ips)
}
