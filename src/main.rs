//! `zkcron`: parse the command line, run the command, turn errors into exit codes. The only
//! signal handling lives here: SIGTERM/SIGINT cancel the shutdown token, SIGHUP asks for a reload.

mod cli;

use std::process::ExitCode;

use clap::Parser;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use cli::Cli;

fn main() -> ExitCode {
    // The daemon starts each job through its own binary (see `zkcron::run::Launcher`):
    // before anything else, so a job's start costs no more than an exec.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args
        .get(1)
        .is_some_and(|arg| arg == zkcron::runner::LAUNCHER_ARG)
    {
        return zkcron::runner::launch_job(args.get(2..).unwrap_or_default());
    }
    zkcron::heap::give_back_as_freed();
    let cli = Cli::parse(); // clap reports usage errors itself, exit 2
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("zkcron: cannot start the async runtime: {err}");
            return ExitCode::from(1);
        }
    };
    let result = runtime.block_on(async {
        let shutdown = CancellationToken::new();
        let (reload_tx, reloads) = mpsc::unbounded_channel();
        tokio::spawn(cancel_on_terminate(shutdown.clone()));
        tokio::spawn(forward_reloads(reload_tx));
        cli.run(shutdown, reloads).await
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("zkcron: {}", zkcron::report::error_chain(&err));
            err.exit_code()
        }
    }
}

/// SIGTERM or SIGINT cancels the shutdown token.
async fn cancel_on_terminate(shutdown: CancellationToken) {
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("cannot install SIGTERM/SIGINT handlers; stop zkcron with SIGKILL");
        return;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: stopping"),
        _ = int.recv() => tracing::info!("SIGINT: stopping"),
    }
    shutdown.cancel();
}

/// Every SIGHUP becomes a reload request.
async fn forward_reloads(reloads: mpsc::UnboundedSender<()>) {
    let Ok(mut hup) = signal(SignalKind::hangup()) else {
        tracing::error!("cannot install the SIGHUP handler; reload by restarting zkcron");
        return;
    };
    while hup.recv().await.is_some() {
        tracing::info!("SIGHUP: reloading the schedule");
        if reloads.send(()).is_err() {
            return;
        }
    }
}
