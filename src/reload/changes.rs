//! What a reload changes: the jobs added, removed and changed (key by key), the declarations
//! their runs follow, and the sections that take effect only after a restart.
//!
//! Owns: comparing two loaded schedules, and saying the difference in one line.
//! Must not: do I/O, or decide whether a reload applies (the daemon's reloader does).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::config::{Config, JobConfig, changed_keys};
use crate::ids::JobName;

/// How a new schedule differs from the running one.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Changes {
    pub added: Vec<JobName>,
    pub removed: Vec<JobName>,
    /// Jobs in both whose keys differ, each with those keys (as `zkcron describe` names them).
    pub changed: Vec<JobChange>,
    /// `[[calendar]]` and `[[limit]]` declarations added, removed or changed: the jobs that
    /// name them follow.
    pub declarations: Vec<String>,
    /// Sections that changed but take effect only when the daemon restarts.
    pub after_restart: Vec<String>,
}

/// One job's changed keys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobChange {
    pub job: JobName,
    pub keys: Vec<String>,
}

impl Changes {
    /// The difference between the running schedule `old` and the reloaded `new`.
    pub fn between(old: &Config, new: &Config) -> Self {
        let before = by_name(&old.jobs);
        let after = by_name(&new.jobs);
        let added = after
            .keys()
            .filter(|name| !before.contains_key(*name))
            .map(|name| (*name).clone())
            .collect();
        let removed = before
            .keys()
            .filter(|name| !after.contains_key(*name))
            .map(|name| (*name).clone())
            .collect();
        let changed = after
            .iter()
            .filter_map(|(name, new)| {
                let keys = changed_keys(before.get(name)?, new);
                (!keys.is_empty()).then(|| JobChange {
                    job: (*name).clone(),
                    keys: keys.into_iter().map(str::to_owned).collect(),
                })
            })
            .collect();
        let mut declarations = declared(
            "[[calendar]]",
            old.calendars.iter().map(|c| (c.name.as_str(), c)),
            new.calendars.iter().map(|c| (c.name.as_str(), c)),
        );
        declarations.extend(declared(
            "[[limit]]",
            old.limits.iter().map(|l| (l.name.as_str(), l)),
            new.limits.iter().map(|l| (l.name.as_str(), l)),
        ));
        Self {
            added,
            removed,
            changed,
            declarations,
            after_restart: after_restart(old, new),
        }
    }

    /// True when the new schedule runs exactly as the old one did.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty()
            && self.removed.is_empty()
            && self.changed.is_empty()
            && self.declarations.is_empty()
            && self.after_restart.is_empty()
    }

    /// The changes in one line, for the log and `zkcron reload`: `added: a, b; changed: c
    /// (timeout, misfire); …`, or `nothing changed`.
    pub fn summary(&self) -> String {
        let names = |jobs: &[JobName]| {
            jobs.iter()
                .map(JobName::as_str)
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut parts = Vec::new();
        if !self.added.is_empty() {
            parts.push(format!("added: {}", names(&self.added)));
        }
        if !self.removed.is_empty() {
            parts.push(format!("removed: {}", names(&self.removed)));
        }
        if !self.changed.is_empty() {
            let jobs: Vec<String> = self
                .changed
                .iter()
                .map(|change| format!("{} ({})", change.job, change.keys.join(", ")))
                .collect();
            parts.push(format!("changed: {}", jobs.join(", ")));
        }
        if !self.declarations.is_empty() {
            parts.push(format!("declarations: {}", self.declarations.join(", ")));
        }
        if !self.after_restart.is_empty() {
            parts.push(format!(
                "{} changed and take effect only after a restart",
                self.after_restart.join(", ")
            ));
        }
        if parts.is_empty() {
            "nothing changed".to_owned()
        } else {
            parts.join("; ")
        }
    }
}

fn by_name(jobs: &[Arc<JobConfig>]) -> BTreeMap<&JobName, &JobConfig> {
    jobs.iter()
        .map(|job| (&job.spec.name, job.as_ref()))
        .collect()
}

/// Each declaration of `kind` that is new, gone or different: `[[limit]] db`.
fn declared<'a, T: PartialEq + 'a>(
    kind: &str,
    old: impl Iterator<Item = (&'a str, &'a T)>,
    new: impl Iterator<Item = (&'a str, &'a T)>,
) -> Vec<String> {
    let old: BTreeMap<&str, &T> = old.collect();
    let new: BTreeMap<&str, &T> = new.collect();
    let mut names: Vec<&str> = old.keys().chain(new.keys()).copied().collect();
    names.sort_unstable();
    names.dedup();
    names
        .into_iter()
        .filter(|name| old.get(name) != new.get(name))
        .map(|name| format!("{kind} {name}"))
        .collect()
}

/// The sections a running daemon keeps until it restarts, of those that changed.
fn after_restart(old: &Config, new: &Config) -> Vec<String> {
    [
        ("[zookeeper]", old.zookeeper != new.zookeeper),
        ("[lock]", old.lock != new.lock),
        ("[http]", old.http != new.http),
        ("[node]", old.node != new.node),
        ("[log]", old.log != new.log),
        ("[audit]", old.audit != new.audit),
        ("[delayed]", old.delayed != new.delayed),
        ("[[group]]", old.groups != new.groups),
    ]
    .into_iter()
    .filter(|(_, changed)| *changed)
    .map(|(section, _)| section.to_owned())
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(rest: &str) -> Config {
        let text = format!("[zookeeper]\nconnect = \"zk:2181\"\n[lock]\nname = \"g\"\n{rest}");
        match crate::config::parse(std::path::Path::new("t.toml"), &text, &|_| None) {
            Ok(config) => config,
            Err(err) => panic!("{err}"),
        }
    }

    const JOB: &str = "[[job]]\nname = \"a\"\nschedule = \"0 * * * * *\"\ncommand = [\"true\"]\n";

    #[test]
    fn a_reload_names_jobs_added_removed_and_the_keys_changed() {
        let old = config(&format!(
            "{JOB}[[job]]\nname = \"gone\"\nschedule = \"@hourly\"\nshell = \"true\"\n"
        ));
        let new = config(&format!(
            "{}timeout = \"1m\"\n[[job]]\nname = \"new\"\nschedule = \"@daily\"\nshell = \"true\"\n\
             [[limit]]\nname = \"db\"\nmax = 2\n",
            JOB
        ));
        let changes = Changes::between(&old, &new);
        assert_eq!(changes.added, [JobName::new("new")]);
        assert_eq!(changes.removed, [JobName::new("gone")]);
        assert_eq!(
            changes.changed,
            [JobChange {
                job: JobName::new("a"),
                keys: vec!["timeout".to_owned()],
            }]
        );
        assert_eq!(changes.declarations, ["[[limit]] db"]);
        assert!(changes.after_restart.is_empty());
        assert_eq!(
            changes.summary(),
            "added: new; removed: gone; changed: a (timeout); declarations: [[limit]] db"
        );
    }

    #[test]
    fn the_same_file_changes_nothing_and_a_section_waits_for_a_restart() {
        let old = config(JOB);
        assert!(Changes::between(&old, &config(JOB)).is_empty());
        let moved = config(&JOB.replace("[[job]]", "[log]\nlevel = \"debug\"\n[[job]]"));
        let changes = Changes::between(&old, &moved);
        assert_eq!(changes.after_restart, ["[log]"]);
        assert_eq!(
            changes.summary(),
            "[log] changed and take effect only after a restart"
        );
    }
}
