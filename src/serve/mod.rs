//! The daemon's HTTP servers: `/healthz` and `/livez` (kube-proxy semantics), `/metrics`
//! (Prometheus text), and the healthCheckNodePort servers. Every server stops accepting and
//! drops its open connections when its shutdown future resolves; any other path is a 404.

#[cfg(feature = "daemon")]
pub(crate) mod health;
#[cfg(feature = "daemon")]
pub(crate) mod healthcheck;

#[cfg(feature = "daemon")]
use std::convert::Infallible;
#[cfg(feature = "daemon")]
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
#[cfg(feature = "daemon")]
use std::sync::Arc;

#[cfg(feature = "daemon")]
use http_body_util::Full;
#[cfg(feature = "daemon")]
use hyper::body::{Bytes, Incoming};
#[cfg(feature = "daemon")]
use hyper::header::{CONTENT_TYPE, HeaderValue};
#[cfg(feature = "daemon")]
use hyper::{Method, Request, Response, StatusCode};
#[cfg(feature = "daemon")]
use hyper_util::rt::TokioIo;
#[cfg(feature = "daemon")]
use tokio::net::TcpListener;
#[cfg(feature = "daemon")]
use tokio::task::JoinSet;

#[cfg(feature = "daemon")]
use crate::metrics::{self, Metrics, Probe};

#[cfg(feature = "daemon")]
pub(crate) use health::HealthState;
#[cfg(feature = "daemon")]
pub(crate) use healthcheck::{HealthCheckServers, ServiceHealth};

/// Failures of the health and metrics servers.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("bind address {addr:?} is not host:port (e.g. 0.0.0.0:10256 or [::]:10256)")]
    ParseAddress {
        addr: String,
        #[source]
        source: std::net::AddrParseError,
    },
    #[error("cannot listen on {addr}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot accept a connection on {addr}")]
    Accept {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// Parses a kube-proxy style bind address: `0.0.0.0:10256`, `127.0.0.1:10249`, `[::]:10256`,
/// or `:10256` (Go's spelling of "all IPv4 addresses").
pub(crate) fn parse_bind_address(addr: &str) -> Result<SocketAddr, ServeError> {
    let err = |source| ServeError::ParseAddress {
        addr: addr.to_owned(),
        source,
    };
    if let Some(port) = addr.strip_prefix(':') {
        // Reuse SocketAddr's parser for the port so the error type stays one.
        let parsed: SocketAddr = format!("0.0.0.0:{port}").parse().map_err(err)?;
        return Ok(SocketAddr::new(
            IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            parsed.port(),
        ));
    }
    addr.parse().map_err(err)
}

/// Binds a listener for one of the servers (port 0 picks a free port, for tests).
#[cfg(feature = "daemon")]
pub(crate) async fn bind(addr: SocketAddr) -> Result<TcpListener, ServeError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Bind { addr, source })
}

/// Serves `/healthz` and `/livez` on an already bound listener until `shutdown` resolves,
/// counting each probe's answer in `metrics` as kube-proxy does.
#[cfg(feature = "daemon")]
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
#[cfg(feature = "daemon")]
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
#[cfg(feature = "daemon")]
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
#[cfg(feature = "daemon")]
pub(crate) type Handler = Arc<dyn Fn(&Method, &str) -> Response<Full<Bytes>> + Send + Sync>;

#[cfg(feature = "daemon")]
fn read_method(method: &Method) -> bool {
    method == Method::GET || method == Method::HEAD
}

/// The JSON answer of the health endpoints: 200 or 503, with kube-proxy's headers.
#[cfg(feature = "daemon")]
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

#[cfg(feature = "daemon")]
pub(crate) fn not_found() -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from_static(b"404 page not found\n")));
    *resp.status_mut() = StatusCode::NOT_FOUND;
    resp
}

#[cfg(feature = "daemon")]
pub(crate) fn method_not_allowed() -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::new()));
    *resp.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
    resp
}

/// Accepts HTTP/1 connections on `listener` and answers them with `handler` until `shutdown`
/// resolves; then the listener is closed and open connections are dropped (a closed port must
/// stop answering at once, e.g. a healthCheckNodePort whose Service went away).
#[cfg(feature = "daemon")]
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

#[cfg(feature = "daemon")]
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

/// A minimal HTTP/1.1 client for the tests: one GET, `Connection: close`, whole answer back.
#[cfg(test)]
pub(crate) mod testclient {
    use std::net::SocketAddr;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    #[derive(Debug)]
    pub(crate) struct Answer {
        pub status: u16,
        /// Header names lower-cased.
        pub headers: Vec<(String, String)>,
        pub body: String,
    }

    impl Answer {
        pub(crate) fn header(&self, name: &str) -> Option<&str> {
            self.headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
        }
    }

    pub(crate) async fn get(addr: SocketAddr, path: &str) -> std::io::Result<Answer> {
        let mut s = TcpStream::connect(addr).await?;
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await?;
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).await?;
        let text = String::from_utf8(raw).expect("utf-8 answer");
        let (head, body) = text.split_once("\r\n\r\n").expect("header/body separator");
        let mut lines = head.split("\r\n");
        let status = lines
            .next()
            .and_then(|l| l.split(' ').nth(1))
            .and_then(|c| c.parse().ok())
            .expect("status line");
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        Ok(Answer {
            status,
            headers,
            body: body.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests;
