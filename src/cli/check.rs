//! `zkcron check`: a schedule file's problems, or its jobs with their next fires; as text for a
//! person or as one JSON document for CI (`--json`).
//!
//! Owns: what check looks up (`--lint`: nothing on this host), this host's warnings (a command
//! or working_dir missing here) located in the file, and both outputs' shapes.
//! Must not: decide what a problem is (the config module does) or when a job runs next
//! (`fire::next` does, for every view).

use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use clap::Args;
use serde_json::json;

use zkcron::config::{self, Config, ConfigError, JobConfig, LoadError, Lookups};
use zkcron::fire::next::{self, NextRun, NoRun};

use super::document::print_document;
use super::error::{CliError, print_lines};
use super::explain;

/// How many next fires each job shows.
const NEXT_FIRES: usize = 3;

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The schedule file to check, instead of --config's.
    #[arg(value_name = "FILE")]
    file: Option<std::path::PathBuf>,
    /// Make this host's warnings errors (exit 2): for the hosts that run the jobs.
    #[arg(long, conflicts_with = "lint")]
    strict: bool,
    /// Check the file alone, as CI can without this host's secrets: every key and value, but no
    /// environment variable, file or program it names is looked up (each is named, not read),
    /// and nothing is said about this host.
    #[arg(long)]
    lint: bool,
    /// One JSON document on stdout (docs/API.md, "zkcron check --json"): the problems, each
    /// with its line, column, key and severity, and for a good file each job with its next
    /// fires. The exit code is the text mode's.
    #[arg(long, conflicts_with = "explain")]
    json: bool,
    /// Show the next fires of JOB (of every job without one) with each daylight-saving
    /// transition between them: which time is skipped or moved, which fires once or twice.
    #[arg(long, value_name = "JOB", num_args = 0..=1, default_missing_value = "")]
    explain: Option<String>,
    /// With --explain: from this instant (RFC 3339, or a local date or date-time in the job's
    /// zone) instead of now.
    #[arg(long, value_name = "TIME", requires = "explain")]
    from: Option<String>,
    /// With --explain: how many fires per job.
    #[arg(long, default_value_t = 10, requires = "explain")]
    count: usize,
}

/// One warning about this host, located in the file.
struct Warning {
    job: String,
    key: &'static str,
    why: String,
    /// The file, line and column of the key's value, when a file has the key.
    at: Option<(PathBuf, usize, usize)>,
}

/// What the file leaves in the open (issue 51 §7): a secret written in it, an error where group
/// or others may read the file and a warning where they may not; nodes open to every client of
/// the ensemble, a warning.
struct Exposed {
    refused: bool,
    key: &'static str,
    why: String,
    file: PathBuf,
    /// `None`: the file as a whole (nodes open for want of credentials).
    line: Option<usize>,
}

/// The inline secrets of `config`, judged by their files' modes as they are now.
/// `lint`: the file's mode is not looked at (the checkout CI lints is not where the file is
/// deployed), only what the file says.
fn exposed(path: &Path, config: &Config, lint: bool) -> Vec<Exposed> {
    let secrets = config
        .inline_secrets
        .iter()
        .filter(|_| !lint)
        .filter_map(|secret| {
            let (refused, why) = secret.verdict(secret.file_mode()?);
            Some(Exposed {
                refused,
                key: secret.key,
                why,
                file: secret.file.clone(),
                line: Some(secret.line),
            })
        });
    let open = config.open_acl.iter().map(|open| {
        let (file, line) = open
            .written_at
            .clone()
            .map_or((path.to_owned(), None), |(file, line)| (file, Some(line)));
        Exposed {
            refused: false,
            key: "zookeeper.acl",
            why: open.why(),
            file,
            line,
        }
    });
    secrets.chain(open).collect()
}

/// Runs `zkcron check` on `args.file`, else on `config_path`.
pub fn check(args: CheckArgs, config_path: &Path) -> Result<(), CliError> {
    let path = args.file.as_deref().unwrap_or(config_path);
    let lookups = if args.lint {
        Lookups::Nothing
    } else {
        Lookups::All
    };
    let config = match config::load_with(path, lookups) {
        Ok(config) => config,
        Err(LoadError::Invalid(err)) if args.json => {
            print_document(1, json_document(path, args.lint, Err(&err), &[], false))?;
            return Err(CliError::Invalid {
                file: path.to_owned(),
                problems: err.problems.len(),
            });
        }
        Err(err) => return Err(err.into()),
    };
    let (warnings, exposed) = if args.lint {
        (Vec::new(), exposed(path, &config, true))
    } else {
        (warnings(path, &config), exposed(path, &config, false))
    };
    let refused = exposed.iter().filter(|secret| secret.refused).count();
    let now = Utc::now();
    if args.json {
        let mut document = json_document(path, args.lint, Ok(&config), &warnings, args.strict);
        if let Some(problems) = document["problems"].as_array_mut() {
            problems.extend(exposed.iter().map(|secret| {
                let (table, key) = secret.key.split_once('.').unwrap_or(("", secret.key));
                json!({
                    "severity": if secret.refused { "error" } else { "warning" },
                    "file": secret.file.display().to_string(),
                    "line": secret.line,
                    "column": null,
                    "table": table,
                    "name": null,
                    "key": key,
                    "context": secret.key,
                    "message": secret.why,
                })
            }));
        }
        if refused > 0 {
            document["valid"] = json!(false);
        }
        print_document(1, document)?;
    } else {
        for secret in &exposed {
            let severity = if secret.refused { "error" } else { "warning" };
            let line = secret
                .line
                .map(|line| format!(":{line}"))
                .unwrap_or_default();
            eprintln!(
                "zkcron: {severity}: {}{line}: {}: {}",
                secret.file.display(),
                secret.key,
                secret.why
            );
        }
        for warning in &warnings {
            let severity = if args.strict { "error" } else { "warning" };
            let at = warning.at.as_ref().map_or_else(
                || format!("{}:", path.display()),
                |(file, line, col)| format!("{}:{line}:{col}:", file.display()),
            );
            eprintln!(
                "zkcron: {severity}: {at} job {:?}: {}: {}",
                warning.job, warning.key, warning.why
            );
        }
    }
    if refused > 0 {
        return Err(CliError::Exposed { secrets: refused });
    }
    if args.strict && !warnings.is_empty() {
        return Err(CliError::Strict {
            problems: warnings.len(),
        });
    }
    if args.json {
        return Ok(());
    }
    let mut lines = summary(path, &config, args.lint);
    match args.explain.as_deref() {
        Some(job) => {
            let request = explain::ExplainRequest {
                job: (!job.is_empty()).then_some(job),
                from: args.from.as_deref(),
                count: args.count,
            };
            let file = path.display().to_string();
            lines.extend(explain::explain(&config, &file, &request, now)?);
        }
        None => lines.extend(config.jobs.iter().flat_map(|job| job_lines(job, now))),
    }
    print_lines(&lines)
}

/// What would keep each job from starting on this host, with where the files say it.
fn warnings(path: &Path, config: &Config) -> Vec<Warning> {
    let mut warnings: Vec<Warning> = config
        .jobs
        .iter()
        .flat_map(|job| {
            zkcron::runner::preflight(&job.spec)
                .into_iter()
                .map(|unstartable| Warning {
                    job: job.spec.name.to_string(),
                    key: unstartable.key,
                    why: unstartable.why,
                    at: None,
                })
        })
        .collect();
    // Each file read and parsed once for all the warnings, the main file first.
    let files = std::iter::once(path.to_owned())
        .chain(config.drop_ins.iter().map(|(drop_in, _)| drop_in.clone()));
    for file in files {
        if warnings.iter().all(|warning| warning.at.is_some()) {
            break;
        }
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        let wanted: Vec<(&str, &str)> = warnings
            .iter()
            .map(|warning| (warning.job.as_str(), warning.key))
            .collect();
        let found = config::locate(&text, &wanted);
        let lines = config::LineStarts::of(&text);
        for (warning, span) in warnings.iter_mut().zip(found) {
            if let (None, Some(span)) = (&warning.at, span) {
                let (line, col) = lines
                    .line_col(&text, span.start)
                    .unwrap_or_else(|| config::line_col(&text, span.start));
                warning.at = Some((file.clone(), line, col));
            }
        }
    }
    warnings
}

/// The first lines: the file is valid, and what `[defaults]` sets.
fn summary(path: &Path, config: &Config, lint: bool) -> Vec<String> {
    let alone = if lint {
        " (the file alone: nothing on this host looked up)"
    } else {
        ""
    };
    let mut lines = vec![format!(
        "{}: valid, {} job(s){alone}",
        path.display(),
        config.jobs.len()
    )];
    for (drop_in, set) in &config.drop_ins {
        lines.push(format!("drop-in {}: {}", drop_in.display(), set.join(", ")));
    }
    if !config.defaults_shown.is_empty() {
        lines.push(format!(
            "[defaults], for every job that does not set its own: {}",
            config.defaults_shown.join(", ")
        ));
    }
    lines
}

/// The keys a job's text lines show when it sets them: what places it, what it follows, whom it
/// runs as and which ticks it skips (every key: `check --json` and `zkcron describe`).
const SHOWN_WHEN_SET: [&str; 9] = [
    "group",
    "user",
    "after",
    "after_status",
    "broadcast",
    "requires",
    "except",
    "only",
    "limits",
];

/// A job's line, the keys of [`SHOWN_WHEN_SET`] it sets, and its next fires in its own zone.
fn job_lines(job: &JobConfig, now: DateTime<Utc>) -> Vec<String> {
    let tz = job.timezone;
    let state = if job.enabled { "" } else { "  (disabled)" };
    let expression = job
        .schedule
        .as_ref()
        .map_or("on demand (no schedule: fires when submitted)", |s| {
            s.expression()
        });
    let mut lines = vec![format!(
        "{}  {expression}  {}{state}",
        job.spec.name,
        tz.name()
    )];
    let shown: Vec<String> = zkcron::config::job_keys(job)
        .into_iter()
        .filter(|key| SHOWN_WHEN_SET.contains(&key.key))
        .filter(|key| {
            key.value
                .as_ref()
                .is_some_and(|value| value.as_bool() != Some(false))
        })
        .map(|key| format!("{} = {}", key.key, key.shown()))
        .collect();
    if !shown.is_empty() {
        lines.push(format!("    {}", shown.join(", ")));
    }
    let (runs, short) = next::runs_after(job, now, NEXT_FIRES);
    for NextRun {
        tick: at,
        starts: start,
    } in runs
    {
        // With a jitter: when the tick starts, the same on every node.
        let jittered = if start == at {
            String::new()
        } else {
            format!(
                "  starts {} (jitter)",
                start.with_timezone(&tz).format("%H:%M:%S%.3f")
            )
        };
        lines.push(format!(
            "    {}{jittered}",
            at.with_timezone(&tz).format("%Y-%m-%d %H:%M:%S %:z")
        ));
    }
    if let Some(NoRun::SkippedUntil(until)) = short {
        lines.push(format!(
            "    no run before {}: its calendars skip every tick until then",
            until.with_timezone(&tz).format("%Y-%m-%d %H:%M:%S %:z")
        ));
    }
    lines
}

/// `check --json`'s document (docs/API.md).
fn json_document(
    path: &Path,
    lint: bool,
    loaded: Result<&Config, &ConfigError>,
    warnings: &[Warning],
    strict: bool,
) -> serde_json::Value {
    let mut problems: Vec<serde_json::Value> = Vec::new();
    if let Err(err) = loaded {
        for (problem, place) in err.problems.iter().zip(err.places()) {
            let (line, column) = place.map_or((None, None), |(line, col)| (Some(line), Some(col)));
            let file = problem
                .span
                .as_ref()
                .map_or(err.path.as_path(), |span| err.file_of(span.start));
            let place = problem.place();
            problems.push(json!({
                "severity": "error",
                "file": file.display().to_string(),
                "line": line,
                "column": column,
                "table": place.table,
                "name": place.element,
                "key": place.key,
                "context": problem.context,
                "message": problem.message,
            }));
        }
    }
    for warning in warnings {
        problems.push(json!({
            "severity": if strict { "error" } else { "warning" },
            "file": warning.at.as_ref().map_or_else(
                || path.display().to_string(),
                |(file, _, _)| file.display().to_string(),
            ),
            "line": warning.at.as_ref().map(|(_, line, _)| line),
            "column": warning.at.as_ref().map(|(_, _, col)| col),
            "table": "job",
            "name": warning.job,
            "key": warning.key,
            "context": format!("job {:?}: {}", warning.job, warning.key),
            "message": warning.why,
        }));
    }
    let now = Utc::now();
    let (jobs, defaults, drop_ins): (Vec<_>, Vec<_>, Vec<_>) = match loaded {
        Ok(config) => (
            config.jobs.iter().map(|job| json_job(job, now)).collect(),
            config.defaults_shown.clone(),
            config
                .drop_ins
                .iter()
                .map(|(file, set)| json!({"file": file.display().to_string(), "sets": set}))
                .collect(),
        ),
        // Which drop-ins were read, though what each set is not known of a file that does not
        // load.
        Err(err) => (
            Vec::new(),
            Vec::new(),
            err.drop_ins()
                .into_iter()
                .map(|file| json!({"file": file.display().to_string(), "sets": null}))
                .collect(),
        ),
    };
    let strict_failed = strict && !warnings.is_empty();
    let valid = loaded.is_ok() && !strict_failed;
    json!({
        "file": path.display().to_string(),
        "valid": valid,
        "lint": lint,
        "problems": problems,
        "defaults": defaults,
        "drop_ins": drop_ins,
        "jobs": jobs,
    })
}

fn json_job(job: &JobConfig, now: DateTime<Utc>) -> serde_json::Value {
    let tz = job.timezone;
    let (runs, _) = next::runs_after(job, now, NEXT_FIRES);
    let next: Vec<serde_json::Value> = runs
        .into_iter()
        .map(|run| {
            json!({
                "at": run.tick.with_timezone(&tz).to_rfc3339(),
                "unix_ms": run.tick.timestamp_millis(),
                "starts_unix_ms": run.starts.timestamp_millis(),
            })
        })
        .collect();
    // Every key with the defaults applied, as `zkcron describe` shows them (`null`: unset).
    let keys: serde_json::Map<String, serde_json::Value> = zkcron::config::job_keys(job)
        .into_iter()
        .map(|key| {
            let value = key
                .value
                .map_or(serde_json::Value::Null, |value| json!(value));
            (key.key.to_owned(), value)
        })
        .collect();
    json!({
        "name": job.spec.name.as_str(),
        "schedule": job.schedule.as_ref().map(|s| s.expression()),
        "timezone": tz.name(),
        "enabled": job.enabled,
        "group": job.group,
        "keys": keys,
        "next": next,
    })
}
