//! The `kubenft` binary: parse and validate the configuration first (exit 64 when it is bad,
//! before touching anything), set up logging, then run one subcommand (exit 69 when the kernel
//! lacks what the ruleset needs, 1 on other failures).

use std::io::IsTerminal;
use std::process::ExitCode;

use kubenft::config::{Cli, LogFormat, LogSettings, Task};
use tracing_subscriber::EnvFilter;

/// sysexits.h EX_USAGE: the command was used incorrectly.
const EX_USAGE: u8 = 64;

fn main() -> ExitCode {
    let cli = match Cli::parse_args(std::env::args_os()) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            // --help and --version are "errors" that print to stdout and succeed.
            return if e.use_stderr() {
                ExitCode::from(EX_USAGE)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    // Validated before logging starts, since the --config file can set the log format.
    let config = match cli.validate() {
        Ok(config) => config,
        Err(e) => {
            eprintln!("kubenft: invalid configuration: {e}");
            return ExitCode::from(EX_USAGE);
        }
    };
    init_tracing(config.log);
    // Flag warnings concern the planner; the demo and cleanup do not use these flags.
    let plans = matches!(
        config.task,
        Task::Render { .. } | Task::Sync { .. } | Task::Run(_) | Task::WriteConfig { .. }
    );
    for warning in config.warnings.iter().filter(|_| plans) {
        tracing::warn!("{warning}");
    }
    match kubenft::cli::run(&config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kubenft: {}", with_causes(&e));
            ExitCode::from(e.exit_code())
        }
    }
}

/// `e` and every error beneath it that its message does not already spell out, so "building
/// the API client" says what failed inside it (most of our errors embed their cause's text).
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let said = c.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        cause = c.source();
    }
    text
}

/// Logs go to stderr so `render` output on stdout stays clean. RUST_LOG, when set, overrides
/// the -v level.
fn init_tracing(settings: LogSettings) {
    // -v is about kubenft; the HTTP and kube client crates stay at info until -vvv.
    let level = match settings.verbosity {
        0 => "info",
        1 => "info,kubenft=debug",
        2 => "info,kubenft=trace",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level));
    // Colours only for a person at a terminal: log collectors and files get plain text.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match settings.format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}
