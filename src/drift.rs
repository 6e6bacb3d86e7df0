//! Schedule drift (issue "Operate it"): every node publishes a fingerprint of its effective
//! schedule in its member znode; the owner compares them, so a follower that would fire a
//! different schedule after a takeover is visible before the failover.
//!
//! Owns: what counts as the effective schedule (everything that decides what fires and how:
//! names, schedules, zones, commands, policies; not where this host keeps the zkcron binary),
//! its fingerprint, and comparing two of them down to the differing jobs.
//! Must not: do I/O or decide anything about firing.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use serde::Serialize;

use crate::config::JobConfig;
use crate::ids::{JobName, NodeId};
use crate::lock::node::ScheduleHash;

/// Per-job fingerprints are published only up to this many bytes in all (a member znode is read
/// by every catch-up); beyond, only the total says whether schedules differ.
const JOBS_DETAIL_LIMIT: usize = 64 * 1024;

/// How one member's schedule differs from the owner's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Drift {
    pub node: NodeId,
    /// Jobs declared differently, or only on one side; empty when the member published no
    /// per-job detail (or none at all: an older zkcron).
    pub jobs: Vec<JobName>,
    /// Those of `jobs` a drop-in declares or changes on one side, and where: `backup: n2's
    /// zkcron.d/10-host.toml` — a per-host override, not an unexplained drift.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub per_host: Vec<String>,
}

/// The fingerprint a member publishes: its jobs', and the jobs its drop-ins declare or change,
/// each with their names as `zkcron.d/<file>`.
pub fn published<'a>(
    jobs: impl IntoIterator<Item = &'a JobConfig>,
    per_host_jobs: &BTreeMap<JobName, Vec<PathBuf>>,
) -> ScheduleHash {
    let mut hash = fingerprint(jobs);
    hash.per_host = per_host_jobs
        .iter()
        .map(|(job, files)| {
            let names = files
                .iter()
                .map(|file| {
                    let name = file.file_name().unwrap_or(file.as_os_str());
                    format!("{}/{}", crate::config::DROP_IN_DIR, name.to_string_lossy())
                })
                .collect();
            (job.clone(), names)
        })
        .collect();
    hash
}

/// The fingerprint of `jobs`' effective schedule.
pub fn fingerprint<'a>(jobs: impl IntoIterator<Item = &'a JobConfig>) -> ScheduleHash {
    let per_job: BTreeMap<JobName, String> = jobs
        .into_iter()
        .map(|job| {
            (
                job.spec.name.clone(),
                format!("{:08x}", crc32fast::hash(job_text(job).as_bytes())),
            )
        })
        .collect();
    let mut all = crc32fast::Hasher::new();
    let mut size = 0;
    for (name, hash) in &per_job {
        all.update(name.as_str().as_bytes());
        all.update(b"=");
        all.update(hash.as_bytes());
        all.update(b"\n");
        size += name.as_str().len() + hash.len() + 6;
    }
    ScheduleHash {
        total: format!("{:08x}", all.finalize()),
        jobs: (size <= JOBS_DETAIL_LIMIT).then_some(per_job),
        per_host: BTreeMap::new(),
        loaded_unix_ms: None,
    }
}

/// Everything about a job that changes what fires, when, or how, as text.
fn job_text(job: &JobConfig) -> String {
    let spec = &job.spec;
    let mut text = String::new();
    // Writing to a String cannot fail.
    let _ = write!(
        text,
        "schedule={:?}\ntz={}\nenabled={}\nprogram={:?}\ndir={:?}\nenv={:?}\ntimeout={:?}\n\
         grace={:?}\non_lost={:?}\nconcurrency={:?}\nmisfire={:?}\ndeadline={:?}\n\
         interrupted={:?}\nretries={}\nbackoff={:?}\nmax_running={}\nhistory={}",
        job.schedule.as_ref().map(|s| s.expression()),
        job.timezone.name(),
        job.enabled,
        spec.program,
        spec.working_dir,
        spec.env,
        spec.timeout,
        spec.kill_grace,
        job.on_lost,
        job.concurrency,
        job.misfire,
        job.starting_deadline,
        job.on_interrupted,
        job.retries,
        job.retry_backoff,
        job.max_running,
        job.history,
    );
    // Only when set: a job in the default group hashes as before groups existed, so an
    // upgraded member shows no drift beside an older one.
    if let Some(group) = &job.group {
        let _ = write!(text, "\ngroup={group}");
    }
    text
}

/// How `theirs` (member `node`'s published fingerprint) differs from `own`; `None` when they
/// agree.
pub fn compare(own: &ScheduleHash, node: &NodeId, theirs: Option<&ScheduleHash>) -> Option<Drift> {
    let theirs = match theirs {
        Some(theirs) if theirs.total == own.total => return None,
        Some(theirs) => theirs,
        None => {
            return Some(Drift {
                node: node.clone(),
                jobs: Vec::new(),
                per_host: Vec::new(),
            });
        }
    };
    let jobs = match (&own.jobs, &theirs.jobs) {
        (Some(mine), Some(other)) => {
            let mut differing: Vec<JobName> = mine
                .iter()
                .filter(|(name, hash)| other.get(*name) != Some(*hash))
                .map(|(name, _)| name.clone())
                .chain(
                    other
                        .keys()
                        .filter(|name| !mine.contains_key(*name))
                        .cloned(),
                )
                .collect();
            differing.sort();
            differing
        }
        _ => Vec::new(),
    };
    let per_host = jobs
        .iter()
        .filter_map(|job| {
            let sides = [
                (format!("{node}'s"), &theirs.per_host),
                ("the owner's".to_owned(), &own.per_host),
            ];
            let said: Vec<String> = sides
                .into_iter()
                .filter_map(|(whose, per_host)| {
                    per_host
                        .get(job)
                        .map(|files| format!("{whose} {}", files.join(", ")))
                })
                .collect();
            (!said.is_empty()).then(|| format!("{job}: {}", said.join("; ")))
        })
        .collect();
    Some(Drift {
        node: node.clone(),
        jobs,
        per_host,
    })
}

/// Drift as one line for the log and `zkcron status`.
pub fn describe(drift: &Drift) -> String {
    if drift.jobs.is_empty() {
        format!(
            "{}: its schedule differs (no per-job detail published)",
            drift.node
        )
    } else {
        let names: Vec<&str> = drift.jobs.iter().map(JobName::as_str).collect();
        let per_host = if drift.per_host.is_empty() {
            String::new()
        } else {
            format!(" (per-host overrides: {})", drift.per_host.join("; "))
        };
        format!("{}: jobs {} differ{per_host}", drift.node, names.join(", "))
    }
}

#[cfg(test)]
mod tests {

    use super::*;

    fn jobs(tables: &str) -> Vec<JobConfig> {
        crate::config::jobs_for_test(tables)
            .into_iter()
            .map(std::sync::Arc::unwrap_or_clone)
            .collect()
    }

    const A: &str = "[[job]]\nname = \"a\"\nschedule = \"@hourly\"\nshell = \"true\"\n";
    const B: &str = "[[job]]\nname = \"b\"\nschedule = \"@daily\"\nshell = \"true\"\n";

    #[test]
    fn the_same_schedule_agrees_whatever_the_order_or_the_file_layout() {
        let one = fingerprint(&jobs(&format!("{A}{B}")));
        let two = fingerprint(&jobs(&format!("{B}\n\n# comment\n{A}")));
        assert_eq!(one, two);
        assert_eq!(compare(&one, &NodeId::new("n2"), Some(&two)), None);
        assert_eq!(one.total.len(), 8);
    }

    /// Issue 51 §5: a job a drop-in changes on one host is told as that host's override, with
    /// the drop-in's name, not as an unexplained drift.
    #[test]
    fn a_job_a_drop_in_changes_is_told_as_a_per_host_override() {
        let own = fingerprint(&jobs(&format!("{A}{B}")));
        let per_host = BTreeMap::from([(
            JobName::new("a"),
            vec![PathBuf::from("/etc/zkcron/zkcron.d/10-host.toml")],
        )]);
        let changed = jobs(&format!("{}{B}", A.replace("@hourly", "@daily")));
        let theirs = published(&changed, &per_host);
        assert_eq!(
            theirs.per_host[&JobName::new("a")],
            ["zkcron.d/10-host.toml"]
        );
        let drift = compare(&own, &NodeId::new("n2"), Some(&theirs)).expect("drift");
        assert_eq!(
            describe(&drift),
            "n2: jobs a differ (per-host overrides: a: n2's zkcron.d/10-host.toml)"
        );
    }

    #[test]
    fn a_changed_job_an_extra_job_and_a_missing_job_are_named() {
        let own = fingerprint(&jobs(&format!("{A}{B}")));
        let changed = fingerprint(&jobs(&format!("{}{B}", A.replace("@hourly", "@daily"))));
        let drift = compare(&own, &NodeId::new("n2"), Some(&changed)).expect("drift");
        assert_eq!(drift.jobs, vec![JobName::new("a")]);
        assert_eq!(describe(&drift), "n2: jobs a differ");
        let extra = fingerprint(&jobs(&format!(
            "{A}{B}[[job]]\nname = \"c\"\nshell = \"true\"\n"
        )));
        let drift = compare(&own, &NodeId::new("n3"), Some(&extra)).expect("drift");
        assert_eq!(drift.jobs, vec![JobName::new("c")]);
        let fewer = fingerprint(&jobs(A));
        assert_eq!(
            compare(&own, &NodeId::new("n4"), Some(&fewer)).map(|d| d.jobs),
            Some(vec![JobName::new("b")])
        );
        let disabled = fingerprint(&jobs(&format!("{A}enabled = false\n{B}")));
        assert!(compare(&own, &NodeId::new("n5"), Some(&disabled)).is_some());
    }

    #[test]
    fn a_job_in_another_group_drifts_and_the_default_group_hashes_as_before_groups() {
        let groups = "[[group]]\nname = \"x\"\n[[group]]\nname = \"y\"\n";
        let before = fingerprint(&jobs(A));
        assert_eq!(fingerprint(&jobs(&format!("{groups}{A}"))), before);
        let in_x = fingerprint(&jobs(&format!("{groups}{A}group = \"x\"\n")));
        let in_y = fingerprint(&jobs(&format!("{groups}{A}group = \"y\"\n")));
        let drift = compare(&in_x, &NodeId::new("n2"), Some(&in_y)).expect("drift");
        assert_eq!(drift.jobs, vec![JobName::new("a")]);
        assert!(compare(&before, &NodeId::new("n2"), Some(&in_x)).is_some());
    }

    #[test]
    fn a_member_that_publishes_nothing_counts_as_drifting_without_detail() {
        let own = fingerprint(&jobs(A));
        let drift = compare(&own, &NodeId::new("old"), None).expect("drift");
        assert!(drift.jobs.is_empty());
        assert!(describe(&drift).contains("no per-job detail"));
    }
}
