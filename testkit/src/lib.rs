//! A Kubernetes API test server that kube-rs cannot tell from a kube-apiserver for what kubenft
//! uses: list and watch of Services, EndpointSlices, Nodes and ServiceCIDRs, and creating and
//! merge-patching events.k8s.io/v1 Events (validated as the real server validates them), over
//! plain HTTP on 127.0.0.1, with an etcd-like global resourceVersion, selectors, paging, bookmarks, streaming
//! lists, expired revisions reported in-stream, and fault injection for tests.
//!
//! ```no_run
//! # async fn demo() -> Result<(), kubenft_testkit::TestkitError> {
//! use kubenft_testkit::{Kind, TestApiServer};
//! let server = TestApiServer::start().await?;
//! server.apply(&serde_json::json!({
//!     "apiVersion": "v1", "kind": "Service",
//!     "metadata": {"name": "web", "namespace": "default"},
//!     "spec": {"clusterIP": "10.96.0.10", "ports": [{"port": 80}]}
//! }))?;
//! server.write_kubeconfig("/tmp/kubeconfig")?;
//! server.drop_watches();
//! server.delete(Kind::Service, Some("default"), "web")?;
//! # Ok(()) }
//! ```

mod http;
pub mod selector;
pub mod store;

pub use store::Kind;

use hyper_util::rt::TokioIo;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use store::{Store, StoreError, StoredEvent};
use tokio::net::TcpListener;
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;

/// Why a test-server operation failed.
#[derive(Debug, thiserror::Error)]
pub enum TestkitError {
    #[error("binding the test API server to 127.0.0.1:{port}")]
    StartBind {
        port: u16,
        #[source]
        source: std::io::Error,
    },
    #[error("encoding the object as JSON")]
    ApplyEncode(#[source] serde_json::Error),
    #[error("storing the object")]
    ApplyStore(#[source] StoreError),
    #[error("decoding the stored object back into the caller's type")]
    ApplyDecode(#[source] serde_json::Error),
    #[error("deleting the object")]
    DeleteStore(#[source] StoreError),
    #[error("building a runtime for the test API server")]
    StartRuntime(#[source] std::io::Error),
    #[error("writing the kubeconfig to {path}")]
    KubeconfigWrite {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// One request the server received, for assertions on what a client did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedRequest {
    /// HTTP method, e.g. "GET".
    pub method: String,
    /// The path, e.g. "/api/v1/services".
    pub path: String,
    /// The raw query string without '?', possibly empty.
    pub query: String,
}

impl RecordedRequest {
    fn new(method: &str, path: &str, query: &str) -> Self {
        Self {
            method: method.into(),
            path: path.into(),
            query: query.into(),
        }
    }

    /// The decoded value of a query parameter (the first, if repeated).
    pub fn param(&self, name: &str) -> Option<String> {
        form_urlencoded::parse(self.query.as_bytes())
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.into_owned())
    }

    /// Whether this was a watch request.
    pub fn is_watch(&self) -> bool {
        self.param("watch").is_some_and(|w| w == "true" || w == "1")
    }

    /// Whether this was a list (a GET of a collection that is not a watch).
    pub fn is_list(&self) -> bool {
        self.method == "GET"
            && !self.is_watch()
            && Kind::ALL.iter().any(|k| self.path.ends_with(k.plural()))
    }

    /// Path and query as sent, e.g. "/api/v1/nodes?fieldSelector=metadata.name%3Dn1".
    pub fn path_and_query(&self) -> String {
        if self.query.is_empty() {
            self.path.clone()
        } else {
            format!("{}?{}", self.path, self.query)
        }
    }
}

/// State shared by the handle and every connection.
pub(crate) struct Shared {
    pub(crate) store: Mutex<Store>,
    pub(crate) events: broadcast::Sender<Arc<StoredEvent>>,
    /// Bumped to end every open watch stream.
    pub(crate) watch_epoch: watch::Sender<u64>,
    pub(crate) unavailable: AtomicBool,
    pub(crate) stall_until: Mutex<Option<tokio::time::Instant>>,
    pub(crate) requests: Mutex<Vec<RecordedRequest>>,
    pub(crate) bookmark_interval: Duration,
    /// Kinds every request about is answered 403 Forbidden (RBAC missing).
    pub(crate) forbidden: Mutex<std::collections::BTreeSet<Kind>>,
}

/// Settings for a [`TestApiServer`]; defaults suit tests.
#[derive(Debug, Clone)]
pub struct Builder {
    port: u16,
    history_limit: usize,
    bookmark_interval: Duration,
}

impl Default for Builder {
    fn default() -> Self {
        Self {
            port: 0,
            history_limit: 10_000,
            bookmark_interval: Duration::from_secs(5),
        }
    }
}

impl Builder {
    /// Listen on this port of 127.0.0.1 (default 0: an ephemeral port).
    pub fn port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    /// Keep at most this many events; watches from before the oldest kept one get 410 Expired.
    pub fn history_limit(mut self, events: usize) -> Self {
        self.history_limit = events;
        self
    }

    /// How often open watches that allow bookmarks receive one (the real server: about a minute).
    pub fn bookmark_interval(mut self, interval: Duration) -> Self {
        self.bookmark_interval = interval;
        self
    }

    /// Starts serving on a runtime of its own, built here: its worker thread and listening
    /// socket belong to the calling thread's network namespace, so a caller that joined a
    /// namespace serves only that namespace. Keep the runtime while the server is used, and
    /// drop the server first.
    pub fn start_with_runtime(
        self,
    ) -> Result<(tokio::runtime::Runtime, TestApiServer), TestkitError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .map_err(TestkitError::StartRuntime)?;
        let server = runtime.block_on(self.start())?;
        Ok((runtime, server))
    }

    /// Binds 127.0.0.1 and starts serving on the current tokio runtime.
    pub async fn start(self) -> Result<TestApiServer, TestkitError> {
        let listener = TcpListener::bind(("127.0.0.1", self.port))
            .await
            .map_err(|source| TestkitError::StartBind {
                port: self.port,
                source,
            })?;
        let addr = listener
            .local_addr()
            .map_err(|source| TestkitError::StartBind {
                port: self.port,
                source,
            })?;
        let shared = Arc::new(Shared {
            store: Mutex::new(Store::new(self.history_limit)),
            events: broadcast::channel(4096).0,
            watch_epoch: watch::channel(0).0,
            unavailable: AtomicBool::new(false),
            stall_until: Mutex::new(None),
            requests: Mutex::new(Vec::new()),
            bookmark_interval: self.bookmark_interval.max(Duration::from_millis(10)),
            forbidden: Mutex::new(std::collections::BTreeSet::new()),
        });
        let (shutdown, _) = watch::channel(false);
        let accept = tokio::spawn(accept_loop(listener, shared.clone(), shutdown.subscribe()));
        Ok(TestApiServer {
            shared,
            addr,
            accept,
            shutdown,
        })
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>, shutdown: watch::Receiver<bool>) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(_) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let shared = shared.clone();
        let mut shutdown = shutdown.clone();
        tokio::spawn(async move {
            let service =
                hyper::service::service_fn(move |request| http::handle(shared.clone(), request));
            let connection = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                _ = connection => {}
                _ = shutdown.wait_for(|&stop| stop) => {}
            }
        });
    }
}

/// A running test API server; it stops (closing every connection) when dropped.
pub struct TestApiServer {
    shared: Arc<Shared>,
    addr: SocketAddr,
    accept: JoinHandle<()>,
    shutdown: watch::Sender<bool>,
}

impl Drop for TestApiServer {
    fn drop(&mut self) {
        self.shutdown.send_replace(true);
        self.accept.abort();
    }
}

impl TestApiServer {
    /// Starts a server with default settings on an ephemeral port of 127.0.0.1.
    pub async fn start() -> Result<Self, TestkitError> {
        Builder::default().start().await
    }

    /// Settings for a server.
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// The cluster URL, e.g. `http://127.0.0.1:41234`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A kubeconfig pointing at this server with no credentials.
    pub fn kubeconfig(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: kubenft-testkit\n  cluster:\n    server: {url}\n\
             contexts:\n- name: kubenft-testkit\n  context:\n    cluster: kubenft-testkit\n    user: kubenft-testkit\n\
             \x20   namespace: default\ncurrent-context: kubenft-testkit\nusers:\n- name: kubenft-testkit\n  user: {{}}\n",
            url = self.url()
        )
    }

    /// Writes [`Self::kubeconfig`] to a file, atomically (written aside, then renamed), so a
    /// process polling for the file never reads half of it.
    pub fn write_kubeconfig(&self, path: impl AsRef<Path>) -> Result<(), TestkitError> {
        let path = path.as_ref();
        let error = |source| TestkitError::KubeconfigWrite {
            path: path.display().to_string(),
            source,
        };
        let file_name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let aside = path.with_file_name(format!(".{file_name}.tmp"));
        std::fs::write(&aside, self.kubeconfig()).map_err(error)?;
        std::fs::rename(&aside, path).map_err(error)
    }

    /// Creates or replaces an object (a k8s-openapi Service, EndpointSlice, Node or ServiceCIDR,
    /// or a `serde_json::Value` with apiVersion and kind) and returns it as stored, with the
    /// server-set resourceVersion, uid and creationTimestamp. Writing an identical object is a
    /// no-op, as on a real server.
    pub fn apply<T: Serialize + DeserializeOwned>(&self, object: &T) -> Result<T, TestkitError> {
        let value = serde_json::to_value(object).map_err(TestkitError::ApplyEncode)?;
        let stored = {
            let mut store = self.shared.store.lock().expect("store lock");
            let (event, stored) = store.apply(value).map_err(TestkitError::ApplyStore)?;
            // Published under the store lock so that watches see writes in revision order.
            if let Some(event) = event {
                let _ = self.shared.events.send(event);
            }
            stored
        };
        serde_json::from_value((*stored).clone()).map_err(TestkitError::ApplyDecode)
    }

    /// Deletes an object; `namespace` None means "default", and is ignored for cluster-scoped kinds.
    pub fn delete(
        &self,
        kind: Kind,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<(), TestkitError> {
        let mut store = self.shared.store.lock().expect("store lock");
        let event = store
            .delete(kind, namespace.unwrap_or("default"), name)
            .map_err(TestkitError::DeleteStore)?;
        let _ = self.shared.events.send(event);
        Ok(())
    }

    /// One object as currently stored (`namespace` as for [`Self::delete`]).
    pub fn get(
        &self,
        kind: Kind,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<serde_json::Value> {
        let store = self.shared.store.lock().expect("store lock");
        store
            .get(kind, namespace.unwrap_or("default"), name)
            .map(|o| (*o).clone())
    }

    /// The newest resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.shared
            .store
            .lock()
            .expect("store lock")
            .resource_version()
    }

    /// Ends every open watch stream cleanly (as a server-side timeout or restart does); the
    /// clients see end-of-stream and resume from their last resourceVersion.
    pub fn drop_watches(&self) {
        self.shared.watch_epoch.send_modify(|epoch| *epoch += 1);
    }

    /// Holds every request arriving during the next `duration` until it has passed (a slow or
    /// partitioned server); open watch streams are not affected.
    pub fn stall(&self, duration: Duration) {
        *self.shared.stall_until.lock().expect("stall lock") =
            Some(tokio::time::Instant::now() + duration);
    }

    /// While true, every request is answered 503 ServiceUnavailable and, when switched on,
    /// every open watch is ended, as while an API server restarts.
    pub fn set_unavailable(&self, unavailable: bool) {
        self.shared.unavailable.store(unavailable, Ordering::SeqCst);
        if unavailable {
            self.drop_watches();
        }
    }

    /// While true, every request about `kind` is answered 403 Forbidden, as when the client's
    /// role does not grant it.
    pub fn set_forbidden(&self, kind: Kind, forbidden: bool) {
        let mut set = self.shared.forbidden.lock().expect("forbidden lock");
        if forbidden {
            set.insert(kind);
        } else {
            set.remove(&kind);
        }
    }

    /// Every object of `kind` as currently stored, in key order.
    pub fn objects(&self, kind: Kind) -> Vec<serde_json::Value> {
        let store = self.shared.store.lock().expect("store lock");
        let rv = store.resource_version();
        store
            .list_at(kind, rv)
            .map(|list| list.into_iter().map(|(_, o)| (*o).clone()).collect())
            .unwrap_or_default()
    }

    /// Forgets the event history: every resourceVersion handed out so far becomes too old, so
    /// resumed watches get an in-stream 410 Expired and must re-list. Open streams go on.
    pub fn compact(&self) {
        self.shared.store.lock().expect("store lock").compact();
    }

    /// Every request received so far, oldest first.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared
            .requests
            .lock()
            .expect("request log lock")
            .clone()
    }

    /// Empties the request log.
    pub fn clear_requests(&self) {
        self.shared
            .requests
            .lock()
            .expect("request log lock")
            .clear();
    }
}

/// The objects of a stream of YAML or JSON manifests (multi-document allowed), empty documents
/// left out, ready for [`TestApiServer::apply`].
///
/// The parser runs without its safety budget: the manifests are the caller's own test
/// clusters, and the default budget refuses more than 1,024 documents (a cluster of 10,000
/// Services is 20,000).
pub fn parse_manifests(text: &str) -> Result<Vec<serde_json::Value>, serde_saphyr::Error> {
    let unbounded = serde_saphyr::options! { budget: None };
    let mut objects =
        serde_saphyr::from_multiple_with_options::<serde_json::Value>(text, unbounded)?;
    // An empty document, e.g. after a trailing "---".
    objects.retain(|o| !o.is_null());
    Ok(objects)
}
