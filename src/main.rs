//! `zkcron`: parse the command line, start logging, run the command, turn errors into exit codes.

mod cli;

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use tokio_util::sync::CancellationToken;
use tracing_subscriber::EnvFilter;

use cli::Cli;

fn main() -> ExitCode {
    let cli = Cli::parse(); // clap reports usage errors itself, exit 2
    init_logging(&cli.log_level);
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("zkcron: cannot start the async runtime: {err}");
            return ExitCode::from(1);
        }
    };
    let result = runtime.block_on(async {
        let shutdown = CancellationToken::new();
        tokio::spawn(cancel_on_terminate(shutdown.clone()));
        cli.command.run(shutdown).await
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("zkcron: {}", zkcron::report::error_chain(&err));
            err.exit_code()
        }
    }
}

fn init_logging(filter: &str) {
    // zookeeper-client narrates every connection change at info; ours already says what matters.
    let filter = EnvFilter::try_new(format!("zookeeper_client=warn,{filter}"))
        .unwrap_or_else(|_| EnvFilter::new("info,zookeeper_client=warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
}

/// The only signal handling: SIGTERM or SIGINT cancels the shutdown token.
async fn cancel_on_terminate(shutdown: CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("cannot install signal handlers; stop zkcron with SIGKILL");
        return;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: stopping"),
        _ = int.recv() => tracing::info!("SIGINT: stopping"),
    }
    shutdown.cancel();
}
