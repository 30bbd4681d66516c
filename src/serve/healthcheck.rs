//! healthCheckNodePort servers for `externalTrafficPolicy: Local` load balancers: exactly one
//! listener set per desired port, answering 200 while the Service has local endpoints and the
//! proxy is healthy, 503 otherwise, so cloud load balancers only send traffic to nodes that can
//! serve it without a second hop.
//!
//! Where they listen is kube-proxy's choice, made by the caller (`ProxyConfig::
//! health_check_addresses`): the nodePortAddresses of each family, or the family's unspecified
//! address. An unspecified IPv6 address listens on IPv6 only, so it coexists with IPv4
//! listeners on the same port.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex};

use hyper::Method;
use tokio::net::{TcpListener, TcpSocket};
use tokio::task::JoinHandle;

use super::{HealthState, ServeError, bind, json_response, method_not_allowed, serve_on};

/// What one healthCheckNodePort reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceHealth {
    /// The Service as `namespace/name`.
    pub name: String,
    /// Ready endpoints of the Service on this node.
    pub local_endpoints: usize,
}

/// Failures of [`HealthCheckServers::sync`].
#[derive(Debug, thiserror::Error)]
pub(crate) enum HealthCheckError {
    #[error("cannot open healthCheckNodePort {addr} for service {service}")]
    Bind {
        addr: SocketAddr,
        service: String,
        #[source]
        source: super::ServeError,
    },
}

struct Listening {
    /// Read by the request handlers; updated in place when only the endpoint count changes.
    service: Arc<Mutex<ServiceHealth>>,
    servers: Vec<JoinHandle<()>>,
}

impl Drop for Listening {
    fn drop(&mut self) {
        // Aborting the server task drops its listener and every open connection with it.
        for s in &self.servers {
            s.abort();
        }
    }
}

/// The set of open healthCheckNodePort listeners, reconciled to the desired set on each sync.
/// Dropping it closes every port.
pub(crate) struct HealthCheckServers {
    addresses: Vec<IpAddr>,
    health: HealthState,
    open: BTreeMap<u16, Listening>,
}

impl std::fmt::Debug for HealthCheckServers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HealthCheckServers")
            .field("addresses", &self.addresses)
            .field("ports", &self.open.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl HealthCheckServers {
    /// Listeners are opened on each of `addresses` (none: no listener at all). `health` is
    /// the proxy's own health: a Service is only reported healthy while the proxy is.
    pub(crate) fn new(addresses: Vec<IpAddr>, health: HealthState) -> Self {
        HealthCheckServers {
            addresses,
            health,
            open: BTreeMap::new(),
        }
    }

    /// Moves the listeners to `addresses`: when they differ from the current ones, every open
    /// port is closed now and opened on the new addresses by the next `sync`.
    pub(crate) fn set_addresses(&mut self, addresses: Vec<IpAddr>) {
        if addresses != self.addresses {
            tracing::info!(
                ?addresses,
                "healthCheckNodePort servers listen on new addresses"
            );
            self.open.clear();
            self.addresses = addresses;
        }
    }

    /// The ports currently listened on.
    #[cfg(test)]
    pub(crate) fn ports(&self) -> Vec<u16> {
        self.open.keys().copied().collect()
    }

    /// Makes the open ports exactly `desired`: closes ports no longer wanted, updates the
    /// answer of ports kept (also when the port moved to another Service), opens new ones.
    /// A port that cannot be opened is left closed and retried on the next sync; the first
    /// such failure is returned after every other port has been handled.
    pub(crate) async fn sync(
        &mut self,
        desired: BTreeMap<u16, ServiceHealth>,
    ) -> Result<(), HealthCheckError> {
        self.open.retain(|port, _| desired.contains_key(port));
        let mut first_error = None;
        for (port, wanted) in desired {
            if let Some(l) = self.open.get(&port) {
                *l.service.lock().unwrap_or_else(|p| p.into_inner()) = wanted;
                continue;
            }
            match self.listen(port, wanted).await {
                Ok(l) => {
                    self.open.insert(port, l);
                }
                Err(e) => {
                    tracing::warn!(error = %e, source = ?std::error::Error::source(&e), "healthCheckNodePort not opened");
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    async fn listen(
        &self,
        port: u16,
        wanted: ServiceHealth,
    ) -> Result<Listening, HealthCheckError> {
        let service = Arc::new(Mutex::new(wanted));
        // Built before binding so a failure part-way drops (closes) what was opened.
        let mut listening = Listening {
            service: service.clone(),
            servers: Vec::with_capacity(self.addresses.len()),
        };
        for ip in &self.addresses {
            let addr = SocketAddr::new(*ip, port);
            let listener = listen_on(addr)
                .await
                .map_err(|source| HealthCheckError::Bind {
                    addr,
                    service: service
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .name
                        .clone(),
                    source,
                })?;
            let service = service.clone();
            let health = self.health.clone();
            let handler = Arc::new(move |method: &Method, _path: &str| {
                // Load balancers probe various paths; kube-proxy answers on all of them.
                if method != Method::GET && method != Method::HEAD {
                    return method_not_allowed();
                }
                let svc = service.lock().unwrap_or_else(|p| p.into_inner()).clone();
                let proxy_healthy = health.is_healthy(health.clock().now());
                let (namespace, name) = svc.name.split_once('/').unwrap_or(("", &svc.name));
                let body = serde_json::json!({
                    "service": { "namespace": namespace, "name": name },
                    "localEndpoints": svc.local_endpoints,
                    "serviceProxyHealthy": proxy_healthy,
                });
                json_response(svc.local_endpoints > 0 && proxy_healthy, body.to_string())
            });
            listening.servers.push(tokio::spawn(async move {
                if let Err(e) = serve_on(listener, handler, std::future::pending()).await {
                    tracing::warn!(%addr, error = %e, "healthCheckNodePort server stopped");
                }
            }));
        }
        Ok(listening)
    }
}

/// A listener on `addr`; on the unspecified IPv6 address, for IPv6 only (`IPV6_V6ONLY`), so
/// that IPv4 listeners of the same port, on 0.0.0.0 or a node IP, do not conflict with it.
async fn listen_on(addr: SocketAddr) -> Result<TcpListener, ServeError> {
    let IpAddr::V6(ip) = addr.ip() else {
        return bind(addr).await;
    };
    if !ip.is_unspecified() {
        return bind(addr).await;
    }
    let err = |source| ServeError::Bind { addr, source };
    let socket = TcpSocket::new_v6().map_err(err)?;
    // As `TcpListener::bind` does: a restarted daemon rebinds despite lingering connections.
    socket.set_reuseaddr(true).map_err(err)?;
    set_ipv6_only(&socket).map_err(err)?;
    socket.bind(addr).map_err(err)?;
    socket.listen(1024).map_err(err)
}

fn set_ipv6_only(socket: &TcpSocket) -> std::io::Result<()> {
    let on: libc::c_int = 1;
    // SAFETY: a valid socket descriptor, and an option value of the size passed.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_IPV6,
            libc::IPV6_V6ONLY,
            (&raw const on).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::super::testclient::get;
    use super::*;
    use std::net::Ipv4Addr;
    use std::time::{Duration, SystemTime};

    fn health(n: &str, local_endpoints: usize) -> ServiceHealth {
        ServiceHealth {
            name: n.to_owned(),
            local_endpoints,
        }
    }

    thread_local! {
        /// Set on the thread `in_netns` runs a test on: its loopback is the test's alone.
        static IN_OWN_NAMESPACE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }

    /// A port for a test to listen on, given to no other test of this process. In a namespace
    /// of the test's own, any port below the ephemeral range is free. On the host, a port
    /// that was free a moment ago: binding port 0 and letting go is racy there, as a process
    /// forked meanwhile by another test holds the socket until it execs.
    fn free_port() -> u16 {
        static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
        let mut given = GIVEN.lock().unwrap();
        if IN_OWN_NAMESPACE.get() {
            let port = 20_000 + given.len() as u16;
            given.push(port);
            return port;
        }
        loop {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            if !given.contains(&port) {
                given.push(port);
                return port;
            }
        }
    }

    fn loopback(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    /// Waits (bounded) until nothing accepts on `addr`: closing is an abort that the runtime
    /// carries out on its next turn.
    async fn closed(addr: SocketAddr) -> bool {
        for _ in 0..100 {
            if tokio::net::TcpStream::connect(addr).await.is_err() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        false
    }

    fn servers() -> (HealthCheckServers, HealthState) {
        let state = HealthState::new(Duration::from_secs(60));
        let loopback_only = vec![IpAddr::V4(Ipv4Addr::LOCALHOST)];
        (HealthCheckServers::new(loopback_only, state.clone()), state)
    }

    #[test]
    fn a_service_with_local_endpoints_answers_200_with_kube_proxys_body() {
        own_loopback(async || {
            let (mut hc, _) = servers();
            let port = free_port();
            hc.sync(BTreeMap::from([(port, health("default/web", 2))]))
                .await
                .unwrap();
            let a = get(loopback(port), "/").await.unwrap();
            assert_eq!(a.status, 200, "{a:?}");
            assert_eq!(a.header("content-type"), Some("application/json"));
            assert_eq!(a.header("x-content-type-options"), Some("nosniff"));
            let v: serde_json::Value = serde_json::from_str(&a.body).unwrap();
            assert_eq!(
                v,
                serde_json::json!({
                    "service": {"namespace": "default", "name": "web"},
                    "localEndpoints": 2,
                    "serviceProxyHealthy": true
                })
            );
        });
    }

    #[test]
    fn no_local_endpoints_or_an_unhealthy_proxy_answers_503() {
        own_loopback(async || {
            let (mut hc, state) = servers();
            let (empty, full) = (free_port(), free_port());
            hc.sync(BTreeMap::from([
                (empty, health("ns/empty", 0)),
                (full, health("ns/full", 1)),
            ]))
            .await
            .unwrap();
            let a = get(loopback(empty), "/healthz").await.unwrap();
            assert_eq!(a.status, 503);
            assert!(a.body.contains("\"localEndpoints\":0"), "{}", a.body);

            // A change queued long ago and never synced: the proxy is stale, so even a Service
            // with endpoints must not attract traffic.
            state.queued(SystemTime::now() - Duration::from_secs(3600));
            let b = get(loopback(full), "/").await.unwrap();
            assert_eq!(b.status, 503);
            let v: serde_json::Value = serde_json::from_str(&b.body).unwrap();
            assert_eq!(v["serviceProxyHealthy"], false);
            assert_eq!(v["localEndpoints"], 1);
        });
    }

    #[test]
    fn sync_opens_updates_and_closes_ports_as_services_come_and_go() {
        own_loopback(async || {
            let (mut hc, _) = servers();
            let (a, b) = (free_port(), free_port());
            hc.sync(BTreeMap::from([
                (a, health("ns/a", 1)),
                (b, health("ns/b", 0)),
            ]))
            .await
            .unwrap();
            assert_eq!(hc.ports(), {
                let mut p = vec![a, b];
                p.sort();
                p
            });
            assert_eq!(get(loopback(b), "/").await.unwrap().status, 503);

            // b gains an endpoint and a goes away.
            hc.sync(BTreeMap::from([(b, health("ns/b", 3))]))
                .await
                .unwrap();
            assert_eq!(hc.ports(), vec![b]);
            let answer = get(loopback(b), "/").await.unwrap();
            assert_eq!(answer.status, 200);
            assert!(answer.body.contains("\"localEndpoints\":3"));
            assert!(closed(loopback(a)).await, "port {a} should be closed");

            // The port is handed to another Service: same listener, new answer.
            hc.sync(BTreeMap::from([(b, health("other/svc", 1))]))
                .await
                .unwrap();
            let v: serde_json::Value =
                serde_json::from_str(&get(loopback(b), "/").await.unwrap().body).unwrap();
            assert_eq!(v["service"]["namespace"], "other");
            assert_eq!(v["service"]["name"], "svc");

            hc.sync(BTreeMap::new()).await.unwrap();
            assert!(hc.ports().is_empty());
            assert!(closed(loopback(b)).await, "port {b} should be closed");
        });
    }

    #[test]
    fn a_port_in_use_is_reported_and_retried_on_the_next_sync() {
        own_loopback(async || {
            let (mut hc, _) = servers();
            let squatter = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let taken = squatter.local_addr().unwrap().port();
            let free = free_port();
            let desired = BTreeMap::from([(taken, health("ns/x", 1)), (free, health("ns/y", 1))]);
            let err = hc.sync(desired.clone()).await.unwrap_err();
            let HealthCheckError::Bind { addr, service, .. } = err;
            assert_eq!(addr, loopback(taken));
            assert_eq!(service, "ns/x");
            // The other port was opened regardless.
            assert_eq!(hc.ports(), vec![free]);
            assert_eq!(get(loopback(free), "/").await.unwrap().status, 200);

            drop(squatter);
            // Tests run in parallel and `free_port` binds port 0 and lets go, so another test can
            // hold the freed port for a moment: retry a few times, as the daemon's next sync would.
            let mut retried = hc.sync(desired.clone()).await;
            for _ in 0..20 {
                if retried.is_ok() {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                retried = hc.sync(desired.clone()).await;
            }
            retried.unwrap();
            assert_eq!(get(loopback(taken), "/").await.unwrap().status, 200);
        });
    }

    /// Runs `test` where no other process can take the ports `free_port` gave it: in a network
    /// namespace of its own when one can be made (root), else on the host's loopback.
    fn own_loopback(test: impl AsyncFnOnce() + Send + 'static) {
        if crate::netns::can_create() {
            in_netns("hcPorts", test);
        } else {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(test());
        }
    }

    /// Runs `test` on a runtime of its own inside a fresh network namespace, so wildcard
    /// listeners open nothing on the host. None when namespaces cannot be made (not root).
    fn in_netns<T: Send + 'static>(
        tag: &str,
        test: impl AsyncFnOnce() -> T + Send + 'static,
    ) -> Option<T> {
        if !crate::netns::can_create() {
            eprintln!("skipped: creating network namespaces needs root");
            return None;
        }
        let ns = crate::netns::Netns::create(tag).unwrap();
        let result = ns
            .run(move || {
                IN_OWN_NAMESPACE.set(true);
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap()
                    .block_on(test())
            })
            .unwrap();
        Some(result)
    }

    #[test]
    fn kube_proxys_default_listens_on_ipv4_and_ipv6_with_one_port() {
        // Both families' unspecified addresses, as `health_check_addresses` gives them when
        // nodePortAddresses names no address: an IPv6 load balancer's probe is answered too.
        in_netns("hcBoth", async || {
            let state = HealthState::new(Duration::from_secs(60));
            let both = vec!["0.0.0.0".parse().unwrap(), "::".parse().unwrap()];
            let mut hc = HealthCheckServers::new(both, state);
            let port = free_port();
            hc.sync(BTreeMap::from([(port, health("default/lb", 1))]))
                .await
                .unwrap();
            for ip in ["127.0.0.1", "::1"] {
                let addr = SocketAddr::new(ip.parse().unwrap(), port);
                let a = get(addr, "/").await.unwrap();
                assert_eq!(a.status, 200, "{addr}: {a:?}");
            }
        });
    }

    #[test]
    fn an_ipv6_wildcard_shares_its_port_with_ipv4_node_addresses() {
        // nodePortAddresses naming an IPv4 address but none of IPv6: the IPv6 listener is the
        // unspecified address, and must not take the port from the IPv4 one.
        in_netns("hcMixed", async || {
            let state = HealthState::new(Duration::from_secs(60));
            let addresses = vec!["127.0.0.1".parse().unwrap(), "::".parse().unwrap()];
            let mut hc = HealthCheckServers::new(addresses, state);
            let port = free_port();
            hc.sync(BTreeMap::from([(port, health("default/lb", 1))]))
                .await
                .unwrap();
            assert_eq!(get(loopback(port), "/").await.unwrap().status, 200);
            let v6 = SocketAddr::new("::1".parse().unwrap(), port);
            assert_eq!(get(v6, "/").await.unwrap().status, 200);
        });
    }

    #[test]
    fn new_addresses_move_the_open_ports_to_them() {
        own_loopback(async || {
            let (mut hc, _) = servers();
            let port = free_port();
            let desired = BTreeMap::from([(port, health("ns/a", 1))]);
            hc.sync(desired.clone()).await.unwrap();
            assert_eq!(get(loopback(port), "/").await.unwrap().status, 200);

            let other = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
            hc.set_addresses(vec![other]);
            assert!(hc.ports().is_empty(), "closed until the next sync");
            assert!(closed(loopback(port)).await);
            hc.sync(desired).await.unwrap();
            let a = get(SocketAddr::new(other, port), "/").await.unwrap();
            assert_eq!(a.status, 200);
            assert!(closed(loopback(port)).await, "not on the old address");
        });
    }

    #[test]
    fn dropping_the_manager_closes_every_port() {
        own_loopback(async || {
            let (mut hc, _) = servers();
            let port = free_port();
            hc.sync(BTreeMap::from([(port, health("ns/a", 1))]))
                .await
                .unwrap();
            assert_eq!(get(loopback(port), "/").await.unwrap().status, 200);
            drop(hc);
            assert!(closed(loopback(port)).await);
        });
    }
}
