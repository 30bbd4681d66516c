//! The HTTP serving the daemon's servers share: binding, the accept loop with its shutdown, and
//! the `/healthz`, `/livez` and `/metrics` handlers.

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::task::JoinSet;

use crate::metrics::{self, Metrics, Probe};

use super::{HealthState, ServeError};

/// Binds a listener for one of the servers (port 0 picks a free port, for tests).
pub(crate) async fn bind(addr: SocketAddr) -> Result<TcpListener, ServeError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Bind { addr, source })
}

/// Serves `/healthz` and `/livez` on an already bound listener until `shutdown` resolves,
/// counting each probe's answer in `metrics` as kube-proxy does.
pub(crate) async fn serve_healthz_on(
    listener: TcpListener,
    health: HealthState,
    metrics: Metrics,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    let answer = move |path: &str| {
        let now = health.clock().now();
        let (probe, report) = if path == "/healthz" {
            (Probe::Healthz, health.healthz(now))
        } else {
            (Probe::Livez, health.livez(now))
        };
        let response = json_response(report.healthy, report.body);
        metrics.count_probe(probe, response.status().as_u16());
        response
    };
    serve_reads_on(listener, &["/healthz", "/livez"], answer, shutdown).await
}

/// Serves `/metrics` on an already bound listener until `shutdown` resolves.
pub(crate) async fn serve_metrics_on(
    listener: TcpListener,
    metrics: Metrics,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    let answer = move |_: &str| {
        let mut resp = Response::new(Full::new(Bytes::from(metrics.render())));
        resp.headers_mut().insert(
            CONTENT_TYPE,
            HeaderValue::from_static(metrics::CONTENT_TYPE),
        );
        resp
    };
    serve_reads_on(listener, &["/metrics"], answer, shutdown).await
}

/// Serves GET and HEAD of `paths` with `answer` (given the path) until `shutdown` resolves:
/// any other path is a 404, any other method on one of `paths` a 405.
async fn serve_reads_on(
    listener: TcpListener,
    paths: &'static [&'static str],
    answer: impl Fn(&str) -> Response<Full<Bytes>> + Send + Sync + 'static,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    let handler = move |method: &Method, path: &str| {
        if !paths.contains(&path) {
            return not_found();
        }
        if !read_method(method) {
            return method_not_allowed();
        }
        answer(path)
    };
    serve_on(listener, Arc::new(handler), shutdown).await
}

/// A request handler: method and path in, full response out. Handlers only read shared
/// state, so they are plain synchronous functions.
pub(crate) type Handler = Arc<dyn Fn(&Method, &str) -> Response<Full<Bytes>> + Send + Sync>;

fn read_method(method: &Method) -> bool {
    method == Method::GET || method == Method::HEAD
}

/// The JSON answer of the health endpoints: 200 or 503, with kube-proxy's headers.
pub(crate) fn json_response(healthy: bool, body: String) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = if healthy {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let h = resp.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    resp
}

pub(crate) fn not_found() -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from_static(b"404 page not found\n")));
    *resp.status_mut() = StatusCode::NOT_FOUND;
    resp
}

pub(crate) fn method_not_allowed() -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::new()));
    *resp.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
    resp
}

/// Accepts HTTP/1 connections on `listener` and answers them with `handler` until `shutdown`
/// resolves; then the listener is closed and open connections are dropped (a closed port must
/// stop answering at once, e.g. a healthCheckNodePort whose Service went away).
pub(crate) async fn serve_on(
    listener: TcpListener,
    handler: Handler,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    let local = listener
        .local_addr()
        .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => return Ok(()),
            // Reap finished connections so the set does not grow without bound.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => {
                let (stream, _) = match accepted {
                    Ok(a) => a,
                    // Per-connection failures (the peer reset before accept) are not the
                    // server's; resource exhaustion is worth reporting but also transient.
                    Err(e) if is_transient_accept_error(&e) => {
                        tracing::debug!(addr = %local, error = %e, "accept failed, continuing");
                        if e.raw_os_error() == Some(libc::EMFILE)
                            || e.raw_os_error() == Some(libc::ENFILE)
                        {
                            // Out of descriptors: give connections a moment to close.
                            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        }
                        continue;
                    }
                    Err(source) => return Err(ServeError::Accept { addr: local, source }),
                };
                let handler = handler.clone();
                connections.spawn(async move {
                    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                        let resp = handler(req.method(), req.uri().path());
                        async move { Ok::<_, Infallible>(resp) }
                    });
                    if let Err(e) = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await
                    {
                        tracing::debug!(error = %e, "http connection ended with an error");
                    }
                });
            }
        }
    }
}

fn is_transient_accept_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionAborted | ConnectionReset | Interrupted | WouldBlock
    ) || matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}
