//! The userspace TCP proxy behind loopback NodePorts (KubeProxyNFTablesLocalhostNodePorts):
//! one listener per `LocalhostListener` the planner asks for, each relaying accepted
//! connections to an endpoint, as kube-proxy 1.37's does. The sync loop only reconciles the
//! set of listeners (a bind, a spawn or a drop each); accepting and relaying run in tasks of
//! their own, so a slow endpoint or a flood of clients never holds up a sync.

use std::collections::BTreeMap;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinHandle;

use crate::metrics::{IP_FAMILIES, Metrics};
use crate::proxier::{IpFamily, LocalhostListener};

/// How long a connection to an endpoint may take, as upstream's proxy allows.
const DIAL_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections relayed at once, all listeners together: beyond it, clients wait in the
/// listen backlog instead of costing the daemon two sockets each.
const MAX_CONNECTIONS: usize = 4096;
/// The pause after a failed `accept` (out of file descriptors, say), so it does not spin.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// Where one listener sends connections, updated in place as endpoints change.
#[derive(Debug)]
struct Targets {
    endpoints: Vec<SocketAddr>,
    affinity: Option<Duration>,
    /// ClientIP affinity: the endpoint every loopback client (one source address) is pinned
    /// to, and when a connection last used it (a sliding window, as upstream's).
    pinned: Option<(SocketAddr, Instant)>,
}

impl Targets {
    fn update(&mut self, endpoints: Vec<SocketAddr>, affinity: Option<Duration>) {
        if affinity != self.affinity {
            self.pinned = None;
        }
        self.endpoints = endpoints;
        self.affinity = affinity;
    }

    /// The endpoint for a new connection: the pinned one while affinity holds and it is still
    /// an endpoint, else one drawn at random.
    fn pick(&mut self, now: Instant) -> Option<SocketAddr> {
        if let (Some(timeout), Some((pinned, last))) = (self.affinity, self.pinned)
            && now.duration_since(last) <= timeout
            && self.endpoints.contains(&pinned)
        {
            self.pinned = Some((pinned, now));
            return Some(pinned);
        }
        if self.endpoints.is_empty() {
            return None;
        }
        let draw = RandomState::new().hash_one(now) as usize % self.endpoints.len();
        let chosen = self.endpoints[draw];
        if self.affinity.is_some() {
            self.pinned = Some((chosen, now));
        }
        Some(chosen)
    }
}

/// One open listener. Dropping it closes the listener and every connection it relays.
struct Listening {
    service: String,
    targets: Arc<Mutex<Targets>>,
    accept: JoinHandle<()>,
    /// Dropped with the listener: each relay watches it and ends when it goes.
    _open: watch::Sender<()>,
}

impl Drop for Listening {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// The loopback NodePort listeners, reconciled to the planner's list after each sync. Dropping
/// it closes them all.
pub(crate) struct LocalhostProxy {
    listening: BTreeMap<SocketAddr, Listening>,
    connections: Arc<Semaphore>,
    metrics: Metrics,
}

impl LocalhostProxy {
    pub(crate) fn new(metrics: Metrics) -> Self {
        LocalhostProxy {
            listening: BTreeMap::new(),
            connections: Arc::new(Semaphore::new(MAX_CONNECTIONS)),
            metrics,
        }
    }

    /// Opens, updates and closes listeners so that exactly `desired` are open (those that
    /// cannot be opened are logged, counted and tried again at the next sync). Connections of
    /// a listener that stays keep their endpoint, as upstream's do.
    pub(crate) fn sync(&mut self, desired: Vec<LocalhostListener>) {
        let wanted: BTreeMap<SocketAddr, LocalhostListener> =
            desired.into_iter().map(|l| (l.address, l)).collect();
        self.listening.retain(|address, l| {
            let keep = wanted.contains_key(address);
            if !keep {
                tracing::debug!(%address, service = %l.service, "localhost NodePort closed");
            }
            keep
        });
        for (address, want) in wanted {
            if let Some(l) = self.listening.get_mut(&address) {
                let mut targets = l.targets.lock().unwrap_or_else(|p| p.into_inner());
                targets.update(want.endpoints, want.affinity);
                l.service = want.service;
                continue;
            }
            match self.open(want) {
                Ok(l) => {
                    tracing::debug!(%address, service = %l.service, "localhost NodePort open");
                    self.listening.insert(address, l);
                }
                Err((service, e)) => {
                    tracing::warn!(%address, %service, error = %e, "cannot open localhost NodePort; retried at the next sync");
                    self.metrics
                        .inc_localhost_nodeport_listener_failures(family_label(&address));
                }
            }
        }
        for family in IP_FAMILIES {
            let n = self
                .listening
                .keys()
                .filter(|a| family_label(a) == family)
                .count();
            self.metrics
                .set_localhost_nodeport_listeners(family, n as u64);
        }
    }

    fn open(&self, want: LocalhostListener) -> Result<Listening, (String, std::io::Error)> {
        let listener = bind(want.address).map_err(|e| (want.service.clone(), e))?;
        let targets = Arc::new(Mutex::new(Targets {
            endpoints: want.endpoints,
            affinity: want.affinity,
            pinned: None,
        }));
        let (open, closed) = watch::channel(());
        let accept = tokio::spawn(accept_loop(
            listener,
            Arc::clone(&targets),
            Arc::clone(&self.connections),
            closed,
        ));
        Ok(Listening {
            service: want.service,
            targets,
            accept,
            _open: open,
        })
    }
}

fn family_label(address: &SocketAddr) -> &'static str {
    IpFamily::of(&address.ip()).label()
}

fn bind(address: SocketAddr) -> std::io::Result<TcpListener> {
    let listener = std::net::TcpListener::bind(address)?;
    listener.set_nonblocking(true)?;
    TcpListener::from_std(listener)
}

async fn accept_loop(
    listener: TcpListener,
    targets: Arc<Mutex<Targets>>,
    connections: Arc<Semaphore>,
    closed: watch::Receiver<()>,
) {
    loop {
        let Ok(permit) = Arc::clone(&connections).acquire_owned().await else {
            return;
        };
        match listener.accept().await {
            Ok((client, _)) => {
                let target = targets
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .pick(Instant::now());
                if let Some(target) = target {
                    tokio::spawn(relay(client, target, closed.clone(), permit));
                }
            }
            Err(e) => {
                tracing::debug!(error = %e, "localhost NodePort accept failed");
                tokio::time::sleep(ACCEPT_RETRY).await;
            }
        }
    }
}

/// Copies bytes both ways until both sides are done (a half-close is passed on), the endpoint
/// cannot be reached, or the listener closes.
async fn relay(
    mut client: TcpStream,
    target: SocketAddr,
    mut closed: watch::Receiver<()>,
    _permit: OwnedSemaphorePermit,
) {
    let relayed = async {
        let connect = tokio::time::timeout(DIAL_TIMEOUT, TcpStream::connect(target));
        let mut backend = match connect.await {
            Ok(Ok(backend)) => backend,
            Ok(Err(e)) => {
                tracing::debug!(%target, error = %e, "localhost NodePort: endpoint refused");
                return;
            }
            Err(_) => {
                tracing::debug!(%target, "localhost NodePort: endpoint did not answer in time");
                return;
            }
        };
        if let Err(e) = tokio::io::copy_bidirectional(&mut client, &mut backend).await {
            tracing::trace!(%target, error = %e, "localhost NodePort connection ended");
        }
    };
    tokio::select! {
        () = relayed => {}
        _ = closed.changed() => {}
    }
}

#[cfg(test)]
mod tests;
