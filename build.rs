//! Stamps the binary with the commit it was built from, for `--version` and the member node every
//! node publishes (`zkcron status` shows each member's): an operator rolling a fleet sees which
//! build runs where, and a bug report names its commit.
//!
//! The commit comes from `ZKCRON_BUILD_COMMIT` when a packager sets it (a source tree without
//! `.git`), else from `git` in the source tree; neither there, and it says "unknown commit".
//! A tree with uncommitted changes is marked `-modified`: its binary is not that commit's.

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=ZKCRON_BUILD_COMMIT");
    // What goes into the binary: an edit there may make a clean tree modified, or one undone
    // may make it clean again.
    for path in ["build.rs", "Cargo.toml", "Cargo.lock", "src"] {
        println!("cargo:rerun-if-changed={path}");
    }
    let commit = std::env::var("ZKCRON_BUILD_COMMIT")
        .ok()
        .filter(|commit| !commit.trim().is_empty())
        .or_else(from_git)
        .unwrap_or_else(|| "unknown commit".to_owned());
    println!("cargo:rustc-env=ZKCRON_COMMIT={commit}");
}

/// `<short hash> <commit date>`, `-modified` after the hash when the work tree differs from it.
fn from_git() -> Option<String> {
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git").args(args).output().ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    };
    let head = git(&["rev-parse", "--short=9", "HEAD"])?;
    // Rebuilt when HEAD moves (a commit, a checkout) or the index changes (a stage, a commit).
    for file in ["HEAD", "index"] {
        if let Some(path) = git(&["rev-parse", "--git-path", file]) {
            println!("cargo:rerun-if-changed={}", Path::new(&path).display());
        }
    }
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        if let Some(path) = git(&["rev-parse", "--git-path", &branch]) {
            println!("cargo:rerun-if-changed={}", Path::new(&path).display());
        }
    }
    let date = git(&["log", "-1", "--format=%cs", "HEAD"]).unwrap_or_default();
    // Only tracked files count: build outputs and editor files do not make a build "modified".
    // `--no-optional-locks`: status must not write back the index it refreshes (it does in a
    // fresh clone), or the index this script watches changes under the next build, which then
    // compiles zkcron again (CI's test run did, for 80 s, after the tests' build).
    let modified = git(&[
        "--no-optional-locks",
        "status",
        "--porcelain",
        "--untracked-files=no",
    ])
    .is_some_and(|changes| !changes.is_empty());
    let suffix = if modified { "-modified" } else { "" };
    Some(format!("{head}{suffix} {date}").trim().to_owned())
}
