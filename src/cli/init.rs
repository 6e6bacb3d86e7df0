//! `zkcron init`: a commented starting schedule at the path every other command reads, that
//! `zkcron check` accepts, for a first day without copying a file from the source tree.
//!
//! Owns: the starting file's text (`starter.toml`, compiled in) and writing it without
//! overwriting an operator's file.
//! Must not: validate it (the tests do, through `check`), or start anything.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use clap::Args;

use super::error::{CliError, UsageError};

/// The starting file, with `{connect}` and `{name}` to fill in.
const STARTER: &str = include_str!("starter.toml");

#[derive(Debug, Args)]
pub struct InitArgs {
    /// The ensemble: `host:port[,host:port…][/chroot]`.
    #[arg(long, default_value = "127.0.0.1:2181")]
    connect: String,
    /// The lock group's name: the hosts that share it fire each job once between them.
    #[arg(long, default_value = "main")]
    name: String,
    /// Replace a file that is already there.
    #[arg(long)]
    force: bool,
}

/// Writes the starting file at `path` (its directory made if missing); an existing file is
/// left alone unless `--force` (exit 2).
pub fn init(path: &Path, args: &InitArgs) -> Result<(), CliError> {
    let quoted = |value: &str| value.replace('\\', "\\\\").replace('"', "\\\"");
    let text = STARTER
        .replace("{connect}", &quoted(&args.connect))
        .replace("{name}", &quoted(&args.name));
    let write_error = |source| CliError::Write {
        path: path.to_owned(),
        source,
    };
    if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(write_error)?;
    }
    let mut file = std::fs::OpenOptions::new();
    file.write(true);
    if args.force {
        file.create(true).truncate(true);
    } else {
        file.create_new(true);
    }
    let mut file = file.open(path).map_err(|source| match source.kind() {
        std::io::ErrorKind::AlreadyExists => CliError::Usage(UsageError::Exists {
            path: PathBuf::from(path),
        }),
        _ => write_error(source),
    })?;
    file.write_all(text.as_bytes()).map_err(write_error)?;
    println!(
        "wrote {}: check it with `zkcron check {}`, then start `zkcron run`",
        path.display(),
        path.display()
    );
    Ok(())
}
