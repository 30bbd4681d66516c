//! `kubenft-testkit serve`: runs the test API server by hand, preloaded with manifests, and
//! writes a kubeconfig pointing at it, so the daemon or a demo can be aimed at a fake cluster.

use clap::{Parser, Subcommand};
use kubenft_testkit::{TestApiServer, TestkitError, parse_manifests};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
enum CliError {
    #[error("starting the server")]
    Start(#[source] TestkitError),
    #[error("reading manifest {path}")]
    LoadRead {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("parsing manifest {path}")]
    LoadParse {
        path: String,
        // Boxed: the parser's error is large and this enum travels in every `Result`.
        #[source]
        source: Box<serde_saphyr::Error>,
    },
    #[error("loading an object from {path}")]
    LoadApply {
        path: String,
        #[source]
        source: TestkitError,
    },
    #[error("writing the kubeconfig")]
    Kubeconfig(#[source] TestkitError),
    #[error("waiting for Ctrl-C")]
    Signal(#[source] std::io::Error),
}

#[derive(Parser)]
#[command(
    name = "kubenft-testkit",
    about = "A protocol-faithful Kubernetes API test server"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve on 127.0.0.1 until Ctrl-C.
    Serve {
        /// Where to write a kubeconfig pointing at the server.
        #[arg(long)]
        kubeconfig_out: PathBuf,
        /// Port to listen on (0: an ephemeral port).
        #[arg(long, default_value_t = 0)]
        port: u16,
        /// YAML or JSON manifests (multi-document allowed) of Services, EndpointSlices, Nodes
        /// and ServiceCIDRs to load before serving.
        #[arg(long = "load")]
        manifests: Vec<PathBuf>,
        /// Seconds between watch bookmarks.
        #[arg(long, default_value_t = 5)]
        bookmark_seconds: u64,
    },
}

fn load(server: &TestApiServer, path: &PathBuf) -> Result<usize, CliError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| CliError::LoadRead {
        path: shown.clone(),
        source,
    })?;
    let objects = parse_manifests(&text).map_err(|source| CliError::LoadParse {
        path: shown.clone(),
        source: Box::new(source),
    })?;
    for value in &objects {
        server.apply(value).map_err(|source| CliError::LoadApply {
            path: shown.clone(),
            source,
        })?;
    }
    Ok(objects.len())
}

async fn serve(
    kubeconfig_out: PathBuf,
    port: u16,
    manifests: Vec<PathBuf>,
    bookmark_seconds: u64,
) -> Result<(), CliError> {
    let server = TestApiServer::builder()
        .port(port)
        .bookmark_interval(Duration::from_secs(bookmark_seconds.max(1)))
        .start()
        .await
        .map_err(CliError::Start)?;
    for path in &manifests {
        let count = load(&server, path)?;
        eprintln!("loaded {count} objects from {}", path.display());
    }
    server
        .write_kubeconfig(&kubeconfig_out)
        .map_err(CliError::Kubeconfig)?;
    eprintln!(
        "serving on {} (kubeconfig: {}); Ctrl-C to stop",
        server.url(),
        kubeconfig_out.display()
    );
    tokio::signal::ctrl_c().await.map_err(CliError::Signal)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve {
            kubeconfig_out,
            port,
            manifests,
            bookmark_seconds,
        } => serve(kubeconfig_out, port, manifests, bookmark_seconds).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            let mut message = error.to_string();
            let mut source = std::error::Error::source(&error);
            while let Some(cause) = source {
                message = format!("{message}: {cause}");
                source = cause.source();
            }
            eprintln!("kubenft-testkit: {message}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubenft_testkit::Kind;

    #[tokio::test]
    async fn loads_a_file_of_more_documents_than_the_parsers_default_budget() {
        let server = TestApiServer::builder().start().await.unwrap();
        let path = std::env::temp_dir().join(format!("testkit-load-{}.yaml", std::process::id()));
        let services = 2_000;
        let text: String = (0..services)
            .map(|i| {
                format!(
                    "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: s{i}\n  \
                     namespace: default\nspec:\n  clusterIP: 10.96.{}.{}\n  ports:\n  \
                     - port: 80\n",
                    i / 250,
                    i % 250 + 1
                )
            })
            .collect();
        std::fs::write(&path, text).unwrap();
        let loaded = load(&server, &path);
        std::fs::remove_file(&path).unwrap();
        assert_eq!(loaded.unwrap(), services);
        assert_eq!(server.objects(Kind::Service).len(), services);
    }
}
