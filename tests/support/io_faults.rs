//! A ZooKeeper server's disk, faulted (issue 53): `io_faults.c` beside this file, preloaded into
//! the server's JVM, slows its fsyncs (a slow disk under the transaction log) or fails its
//! writes with ENOSPC (a full disk), as a control file of the server's says. A FUSE passthrough
//! or device-mapper's `delay` target would do the same below the process; this needs neither
//! root nor kernel modules, and the server sees the same: an fsync that takes seconds, a write
//! refused.
//!
//! Owns: building the shim (once a process, with the system's C compiler), a server's control
//! file and the environment that preloads the shim.
//! Must not: start servers (`zk_cluster` does).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The faults of one server's disk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskFaults {
    /// How long each fsync and fdatasync takes, beyond its own time.
    pub fsync_ms: u64,
    /// Writes to regular files fail with ENOSPC.
    pub full: bool,
}

/// One server's control file.
#[derive(Debug, Clone)]
pub struct Control {
    path: PathBuf,
}

impl Control {
    /// A control file at `path`, faulting nothing yet.
    pub fn new(path: PathBuf) -> std::io::Result<Self> {
        let control = Self { path };
        control.set(DiskFaults::default())?;
        Ok(control)
    }

    /// Faults the disk as `faults` says, from at most 100 ms on.
    pub fn set(&self, faults: DiskFaults) -> std::io::Result<()> {
        // Written whole and renamed in: the shim never reads half a line.
        let text = format!(
            "fsync_ms={} enospc={}\n",
            faults.fsync_ms,
            u8::from(faults.full)
        );
        let next = self.path.with_extension("next");
        std::fs::write(&next, text)?;
        std::fs::rename(&next, &self.path)
    }

    /// The environment that preloads the shim under this control file.
    pub fn env(&self) -> Result<Vec<(&'static str, PathBuf)>, String> {
        Ok(vec![
            ("LD_PRELOAD", library()?.to_path_buf()),
            ("ZKCRON_IO_FAULTS", self.path.clone()),
        ])
    }
}

/// The shim, built once a process into a temp dir that lives as long as the process.
fn library() -> Result<&'static Path, String> {
    static BUILT: OnceLock<Result<(tempfile::TempDir, PathBuf), String>> = OnceLock::new();
    let built = BUILT.get_or_init(|| {
        let dir = tempfile::Builder::new()
            .prefix("zkcron-io-faults-")
            .tempdir()
            .map_err(|err| format!("a temp dir for the disk-fault shim: {err}"))?;
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/io_faults.c");
        let library = dir.path().join("libzkcron_io_faults.so");
        let output = Command::new("cc")
            .args(["-shared", "-fPIC", "-O2", "-Wall", "-o"])
            .arg(&library)
            .arg(&source)
            .arg("-ldl")
            .output()
            .map_err(|err| format!("cc (the disk-fault shim needs a C compiler): {err}"))?;
        if !output.status.success() {
            return Err(format!(
                "cc {}: {}",
                source.display(),
                String::from_utf8_lossy(&output.stderr)
            ));
        }
        Ok((dir, library))
    });
    match built {
        Ok((_, library)) => Ok(library),
        Err(why) => Err(why.clone()),
    }
}
