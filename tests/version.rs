//! `zkcron --version` names the commit the binary was built from (issue 34): an operator rolling
//! a fleet sees which build runs where (`status` shows each member's), and a bug report names its
//! commit.

use std::process::Command;

#[test]
fn version_names_the_crate_version_and_the_commit() {
    let out = Command::new(env!("CARGO_BIN_EXE_zkcron"))
        .arg("--version")
        .output()
        .expect("run zkcron --version");
    assert!(out.status.success());
    let version = String::from_utf8_lossy(&out.stdout);
    let expected_start = format!("zkcron {} (", env!("CARGO_PKG_VERSION"));
    assert!(version.starts_with(&expected_start), "{version}");
    let head = Command::new("git")
        .args(["rev-parse", "--short=9", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output();
    match head {
        // Built from a git checkout (as CI is): that commit, by its short hash.
        Ok(head) if head.status.success() => {
            let head = String::from_utf8_lossy(&head.stdout).trim().to_owned();
            assert!(
                version.contains(&format!("({head}")),
                "{version} names {head}"
            );
        }
        // Elsewhere (a source tarball without `ZKCRON_BUILD_COMMIT`) it says so.
        _ => assert!(version.contains("unknown commit"), "{version}"),
    }
}
