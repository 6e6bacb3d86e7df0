//! Where each key of a job comes from (issue 51, `zkcron describe`): the line of the main file
//! or drop-in that sets it in the job's own table, the `[defaults]` line that gives it, or
//! zkcron's own default.
//!
//! Owns: reading the schedule's files again for one job's places, on demand (a daemon keeps no
//! spans: 20 keys of 10 000 jobs would be kept for nothing).
//! Must not: validate: the loader does, and a file that does not load has no origins to show.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;
use toml::de::DeValue;

use super::error::LoadError;
use super::files;

/// Where a key's value comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "from", rename_all = "snake_case")]
pub enum Origin {
    /// Set in the job's own `[[job]]` table.
    Job { file: PathBuf, line: usize },
    /// Given by `[defaults]`.
    Defaults { file: PathBuf, line: usize },
    /// zkcron's default (docs/CONFIG.md), or unset.
    Default,
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Job { file, line } => write!(f, "{}:{line}", file.display()),
            Origin::Defaults { file, line } => write!(f, "[defaults] {}:{line}", file.display()),
            Origin::Default => f.write_str("default"),
        }
    }
}

/// The origin of each key that `job`'s table or `[defaults]` sets in the schedule at `path`
/// (and its drop-ins); a key in neither is [`Origin::Default`]. An inline table's keys are
/// told one by one (`http.url`), as `config::job_keys` names them.
///
/// # Errors
/// A file cannot be read.
pub fn job_origins(path: &Path, job: &str) -> Result<BTreeMap<String, Origin>, LoadError> {
    let (text, placed) = files::combine(files::read_all(path)?);
    let merged = files::merge(&text, &placed);
    let place = |offset: usize| {
        let (file, line) = placed.file_line(&text, offset);
        (file.to_owned(), line)
    };
    let mut origins = BTreeMap::new();
    for (key, value) in &merged.entries {
        match (key.get_ref().as_str(), value.get_ref()) {
            ("defaults", DeValue::Table(defaults)) => {
                for (name, _) in defaults.iter() {
                    let (file, line) = place(name.span().start);
                    origins
                        .entry(name.get_ref().to_string())
                        .or_insert(Origin::Defaults { file, line });
                }
            }
            ("job", DeValue::Array(jobs)) => {
                let table = jobs.iter().find_map(|element| match element.get_ref() {
                    DeValue::Table(table) => table
                        .get("name")
                        .is_some_and(
                            |name| matches!(name.get_ref(), DeValue::String(name) if name == job),
                        )
                        .then_some(table),
                    _ => None,
                });
                for (name, value) in table.into_iter().flat_map(|table| table.iter()) {
                    let mut set = |key: String, offset: usize| {
                        let (file, line) = place(offset);
                        origins.insert(key, Origin::Job { file, line });
                    };
                    set(name.get_ref().to_string(), name.span().start);
                    if let DeValue::Table(inline) = value.get_ref()
                        && name.get_ref() == "http"
                    {
                        for (inner, _) in inline.iter() {
                            set(format!("http.{}", inner.get_ref()), inner.span().start);
                        }
                    }
                }
            }
            _ => {}
        }
    }
    Ok(origins)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_placed_in_its_file_the_defaults_or_zkcrons_default() {
        let dir = tempfile::tempdir().unwrap_or_else(|err| panic!("{err}"));
        let main = dir.path().join("zkcron.toml");
        let text = "[zookeeper]\nconnect = \"zk:2181\"\n[lock]\nname = \"g\"\n\
                    [defaults]\nretries = 2\ntimeout = \"1m\"\n\
                    [[job]]\nname = \"other\"\nshell = \"true\"\n\
                    [[job]]\nname = \"a\"\nschedule = \"@hourly\"\ntimeout = \"5m\"\n\
                    http = { url = \"http://127.0.0.1:1/\", method = \"PUT\" }\n";
        std::fs::write(&main, text).unwrap_or_else(|err| panic!("{err}"));
        let origins = job_origins(&main, "a").unwrap_or_else(|err| panic!("{err}"));
        let at = |line| Origin::Job {
            file: main.clone(),
            line,
        };
        assert_eq!(origins["schedule"], at(13));
        assert_eq!(origins["timeout"], at(14));
        assert_eq!(origins["http.method"], at(15));
        assert_eq!(
            origins["retries"],
            Origin::Defaults {
                file: main.clone(),
                line: 6
            }
        );
        assert!(!origins.contains_key("misfire"), "a default is not placed");
        assert_eq!(
            origins["retries"].to_string(),
            format!("[defaults] {}:6", main.display())
        );
    }
}
