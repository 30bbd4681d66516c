//! The daemon's servers: `/healthz` and `/livez` (kube-proxy semantics), `/metrics`
//! (Prometheus text), the healthCheckNodePort servers, and the userspace proxy of loopback
//! NodePorts. Every HTTP server stops accepting and drops its open connections when its
//! shutdown future resolves; any other path is a 404.

#[cfg(feature = "daemon")]
pub(crate) mod health;
#[cfg(feature = "daemon")]
pub(crate) mod healthcheck;
#[cfg(feature = "daemon")]
mod http;
#[cfg(feature = "daemon")]
mod localhost_proxy;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

#[cfg(feature = "daemon")]
pub(crate) use health::HealthState;
#[cfg(feature = "daemon")]
pub(crate) use healthcheck::{HealthCheckServers, ServiceHealth};
#[cfg(feature = "daemon")]
pub(crate) use http::*;
#[cfg(feature = "daemon")]
pub(crate) use localhost_proxy::LocalhostProxy;

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
