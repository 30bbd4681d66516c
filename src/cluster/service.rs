//! A Service object as service ports: one `ServicePort` per spec port, with the Service's
//! ClusterIPs, external addresses, NodePorts, policies and affinity. A Service the proxy does
//! not serve (headless, ExternalName) has no service ports; one it cannot read is an error
//! naming the field.

use super::*;

pub(super) fn service_ports(svc: &Service) -> Result<Vec<ServicePort>, String> {
    let namespace = namespace_of(&svc.metadata);
    let name = svc.metadata.name.clone().ok_or("no metadata.name")?;
    let Some(spec) = &svc.spec else {
        return Ok(Vec::new());
    };
    if spec.type_.as_deref() == Some("ExternalName") {
        return Ok(Vec::new());
    }
    let mut cluster_ips = Vec::new();
    let listed: Vec<String> = match (&spec.cluster_ips, &spec.cluster_ip) {
        (Some(ips), _) if !ips.is_empty() => ips.clone(),
        (_, Some(ip)) => vec![ip.clone()],
        _ => Vec::new(),
    };
    for ip in &listed {
        if ip == "None" {
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
    for ip in spec.external_ips.iter().flatten() {
        external_ips.push(parse_ip(ip).ok_or_else(|| format!("invalid externalIP {ip:?}"))?);
    }
    let load_balancer_ips = load_balancer_ips(svc)?;
    let mut source_ranges = Vec::new();
    for r in spec.load_balancer_source_ranges.iter().flatten() {
        let r = r.trim();
        let net = parse_net(r).ok_or_else(|| format!("invalid loadBalancerSourceRange {r:?}"))?;
        source_ranges.push(net);
    }
    let policy = |p: &Option<String>| {
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
        spec.session_affinity_config
            .as_ref()
            .and_then(|c| c.client_ip.as_ref())
            .and_then(|c| c.timeout_seconds)
            .filter(|t| *t > 0)
            .map_or(10800, |t| t as u32)
    });
    let mut out = Vec::new();
    for p in spec.ports.iter().flatten() {
        let protocol = Protocol::parse(p.protocol.as_deref())
            .ok_or_else(|| format!("unknown protocol {:?}", p.protocol))?;
        let port = u16::try_from(p.port)
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| format!("invalid port {}", p.port))?;
        let node_port = match p.node_port {
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
            name: ServicePortName {
                namespace: namespace.clone(),
                name: name.clone(),
                port: p.name.clone().unwrap_or_default(),
                protocol,
            },
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
            traffic_distribution: spec.traffic_distribution.clone(),
            consistent: ConsistentEndpoint::of(svc).ok().flatten(),
        });
    }
    Ok(out)
}

/// The addresses a LoadBalancer Service's load balancer reports, but those whose ipMode is
/// `Proxy` (the load balancer forwards to the nodes itself; kube-proxy skips them too).
fn load_balancer_ips(svc: &Service) -> Result<Vec<IpAddr>, String> {
    let mut load_balancer_ips = Vec::new();
    if svc.spec.as_ref().and_then(|s| s.type_.as_deref()) != Some("LoadBalancer") {
        return Ok(load_balancer_ips);
    }
    let ingress = svc
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref());
    for ing in ingress.into_iter().flatten() {
        if ing.ip_mode.as_deref() == Some("Proxy") {
            continue;
        }
        if let Some(ip) = &ing.ip {
            load_balancer_ips
                .push(parse_ip(ip).ok_or_else(|| format!("invalid load balancer IP {ip:?}"))?);
        }
    }
    Ok(load_balancer_ips)
}
