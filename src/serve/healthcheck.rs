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
mod tests;
