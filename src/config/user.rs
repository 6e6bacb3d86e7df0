//! `user`: who a job's process runs as, found in the user database at load.
//!
//! Owns: looking a user name up (its ids, groups and home) and refusing a name this host does
//! not know.
//! Must not: switch users (the runner does, in the child before its exec) nor decide whether
//! this daemon may (the daemon says so at start).

use std::ffi::CString;
use std::sync::Arc;

use nix::unistd::{Gid, User, getgrouplist};
use toml::Spanned;

use super::error::JobContext;
use super::validator::{NeededBy, Validator};
use crate::run::RunAs;

impl Validator<'_> {
    /// `user`, looked up in the user database (unless this load looks nothing up on this host,
    /// when only the name is checked and the user left out).
    pub(super) fn job_user(
        &mut self,
        raw: Option<Spanned<String>>,
        job: JobContext<'_>,
    ) -> Option<Arc<RunAs>> {
        let raw = raw?;
        let name = raw.get_ref().trim();
        let context = job.key("user");
        if name.is_empty() || name.contains(['\0', ':', '/']) {
            self.problem(raw.span(), context, "expected a user name, like \"backup\"");
            return None;
        }
        if !self.looks_up(NeededBy::Daemon) {
            return None;
        }
        match run_as(name) {
            Ok(user) => Some(Arc::new(user)),
            Err(why) => {
                self.problem(raw.span(), context, why);
                None
            }
        }
    }
}

/// `name`'s entry in the user database, with every group it is in.
fn run_as(name: &str) -> Result<RunAs, String> {
    let user = match User::from_name(name) {
        Ok(Some(user)) => user,
        Ok(None) => return Err(format!("no user {name:?} on this host")),
        Err(err) => return Err(format!("cannot look user {name:?} up: {err}")),
    };
    let c_name = CString::new(name).map_err(|_| format!("{name:?} is not a user name"))?;
    let groups = getgrouplist(&c_name, user.gid)
        .map_err(|err| format!("cannot list the groups of user {name:?}: {err}"))?;
    Ok(RunAs {
        name: user.name,
        uid: user.uid.as_raw(),
        gid: user.gid.as_raw(),
        groups: groups.into_iter().map(Gid::as_raw).collect(),
        home: user.dir,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_is_found_with_its_groups_or_refused_by_name() {
        let root = run_as("root").expect("every host has root");
        assert_eq!((root.uid, root.gid), (0, 0));
        assert!(root.groups.contains(&0), "{root:?}");
        assert_eq!(
            run_as("zkcron-no-such-user").map(|_| ()),
            Err("no user \"zkcron-no-such-user\" on this host".to_owned())
        );
    }
}
