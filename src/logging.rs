//! Log output: text or JSON lines on stderr, filtered like RUST_LOG.
//!
//! Owns: installing the global tracing subscriber once.
//! Must not: decide what is logged (each module does).

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// Installs the subscriber. A filter that does not parse falls back to `info` (the config
/// already refused bad filters from the file).
pub fn init(format: LogFormat, filter: &str) {
    // zookeeper-client narrates every connection change at info; ours already says what matters.
    let filter = EnvFilter::try_new(format!("zookeeper_client=warn,{filter}"))
        .unwrap_or_else(|_| EnvFilter::new("info,zookeeper_client=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let installed = match format {
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
    // Already installed (a second call in tests): keep the first.
    drop(installed);
}
