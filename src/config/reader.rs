//! From text to the raw tables, every parse-level problem at once.
//!
//! Owns: the file's top-level keys (merged from every file by `files.rs`, which also tells
//! every syntax error), and reading each table into its raw struct one key at a time: an unknown key (told
//! with the nearest known one), a value of the wrong type (told in words: a duration like
//! "10s") or an unknown enum value is a problem, and that key is left out so the rest of the
//! table, and every other table, is still read and validated.
//! Must not: check values or fill in defaults (the section validators do).

use std::ops::Range;

use serde::de::DeserializeOwned;
use toml::Spanned;
use toml::de::{DeTable, DeValue, ValueDeserializer};

use super::Problem;
use super::files::Merged;
use super::schema::RawConfig;

/// The file's top-level keys: its tables and arrays of tables.
const TOP_LEVEL: [&str; 14] = [
    "zookeeper",
    "lock",
    "log",
    "audit",
    "delayed",
    "http",
    "telemetry",
    "output",
    "node",
    "defaults",
    "group",
    "limit",
    "calendar",
    "job",
];

/// Keys whose value is a duration, for a wrong type told in words.
const DURATIONS: [&str; 15] = [
    "session_timeout",
    "connect_timeout",
    "takeover_delay",
    "claim_ahead",
    "max_clock_offset",
    "rebalance_after",
    "keep",
    "timeout",
    "kill_grace",
    "jitter",
    "starting_deadline",
    "retry_backoff",
    "retry_backoff_max",
    "dedup_window",
    "keep_for",
];

/// Keys whose value is a program and its arguments.
const ARGVS: [&str; 2] = ["command", "on_failure"];

/// What the file held, as far as it could be read, and every parse-level problem in it.
pub(super) struct Reading {
    pub(super) raw: RawConfig,
    pub(super) problems: Vec<Problem>,
    /// The tables that lost a key to a problem here: a validator's complaint about such a table
    /// as a whole (it has no program, say) is that problem again, not a new one.
    pub(super) refused_tables: Vec<Range<usize>>,
    /// What each drop-in set (see [`Merged::drop_ins`]).
    pub(super) drop_ins: Vec<(std::path::PathBuf, Vec<String>)>,
    /// The jobs each drop-in declares or changes (see [`Merged::job_drop_ins`]).
    pub(super) job_drop_ins: Vec<(String, std::path::PathBuf)>,
}

/// Reads the merged top-level tables of a schedule's files into the raw tables.
pub(super) fn read(merged: Merged<'_>) -> Reading {
    let mut reader = Reader {
        problems: merged.problems,
        refused_tables: Vec::new(),
    };
    let mut raw = RawConfig::default();
    let mut present = Vec::new();
    for (key, value) in merged.entries {
        let name = key.get_ref().as_str();
        present.extend(TOP_LEVEL.iter().find(|known| **known == name));
        match name {
            "zookeeper" => raw.zookeeper = reader.table(value, &Section(name)),
            "lock" => raw.lock = reader.table(value, &Section(name)),
            "log" => raw.log = reader.table(value, &Section(name)),
            "audit" => raw.audit = reader.table(value, &Section(name)),
            "delayed" => raw.delayed = reader.table(value, &Section(name)),
            "http" => raw.http = reader.table(value, &Section(name)),
            "telemetry" => raw.telemetry = reader.table(value, &Section(name)),
            "output" => raw.output = reader.table(value, &Section(name)),
            "node" => raw.node = reader.table(value, &Section(name)),
            "defaults" => raw.defaults = reader.table(value, &Section(name)),
            "group" => raw.group = reader.tables(value, "group"),
            "limit" => raw.limit = reader.tables(value, "limit"),
            "calendar" => raw.calendar = reader.tables(value, "calendar"),
            "job" => raw.job = reader.tables(value, "job"),
            _ => {
                let message = unknown("key", name, &TOP_LEVEL);
                reader.problem(key.span(), String::new(), message);
            }
        }
    }
    for name in ["zookeeper", "lock"] {
        if !present.contains(&name) {
            reader.problems.push(Problem {
                span: None,
                context: String::new(),
                message: format!("missing table [{name}]"),
                secret: false,
            });
        }
    }
    Reading {
        raw,
        problems: reader.problems,
        refused_tables: reader.refused_tables,
        drop_ins: merged.drop_ins,
        job_drop_ins: merged.job_drop_ins,
    }
}

struct Reader {
    problems: Vec<Problem>,
    refused_tables: Vec<Range<usize>>,
}

/// How a table's problems are named.
trait Naming {
    /// `zookeeper.tls`, `job "nightly": kill_grace`.
    fn key(&self, key: &str) -> String;
    /// The table as a whole: `[zookeeper]`, `job "nightly"`.
    fn whole(&self) -> String;
}

/// A single table: `[zookeeper]`.
struct Section<'a>(&'a str);

impl Naming for Section<'_> {
    fn key(&self, key: &str) -> String {
        format!("{}.{key}", self.0)
    }
    fn whole(&self) -> String {
        format!("[{}]", self.0)
    }
}

/// One of an array of tables: `[[job]]` named by its `name`, else by its place.
struct Element<'a> {
    array: &'a str,
    name: Option<String>,
    index: usize,
}

impl Naming for Element<'_> {
    fn key(&self, key: &str) -> String {
        format!("{}: {key}", self.whole())
    }
    fn whole(&self) -> String {
        match &self.name {
            Some(name) => format!("{} {name:?}", self.array),
            None => format!("{} #{}", self.array, self.index + 1),
        }
    }
}

impl Reader {
    fn problem(&mut self, span: Range<usize>, context: String, message: String) {
        self.problems.push(Problem {
            span: Some(span),
            context,
            message,
            secret: false,
        });
    }

    /// Every element of an array of tables (`[[job]]`), each read on its own.
    fn tables<T: DeserializeOwned>(
        &mut self,
        value: Spanned<DeValue<'_>>,
        array: &'static str,
    ) -> Vec<Spanned<T>> {
        let span = value.span();
        let DeValue::Array(elements) = value.into_inner() else {
            let message = format!("expected an array of tables, [[{array}]]");
            self.problem(span, array.to_owned(), message);
            return Vec::new();
        };
        let elements: Vec<Spanned<DeValue<'_>>> = elements.iter().cloned().collect();
        let mut read = Vec::with_capacity(elements.len());
        for (index, element) in elements.into_iter().enumerate() {
            let name = match element.get_ref() {
                DeValue::Table(table) => table
                    .get("name")
                    .and_then(|name| name.get_ref().as_str())
                    .map(str::to_owned),
                _ => None,
            };
            let naming = Element { array, name, index };
            read.extend(self.table::<Spanned<T>>(element, &naming));
        }
        read
    }

    /// One table read into `T`: each key that cannot be read is a problem and is left out,
    /// and the rest is read again, until the rest reads or a problem names no key.
    fn table<T: DeserializeOwned>(
        &mut self,
        value: Spanned<DeValue<'_>>,
        naming: &dyn Naming,
    ) -> Option<T> {
        let span = value.span();
        if !matches!(value.get_ref(), DeValue::Table(_)) {
            let message = format!(
                "expected a table, {}",
                naming.whole().trim_start_matches('[')
            );
            self.problem(span, naming.whole(), message);
            return None;
        }
        let mut value = value;
        loop {
            let error = match T::deserialize(ValueDeserializer::from(value.clone())) {
                Ok(read) => return Some(read),
                Err(error) => error,
            };
            let at = error.span().unwrap_or_else(|| span.clone());
            let DeValue::Table(table) = value.get_mut() else {
                return None;
            };
            let Some(key) = key_at(table, at.start) else {
                // Not one key's fault: a missing required key, told for the whole table.
                let message = words(error.message(), None);
                self.problem(at, naming.whole(), message);
                self.refused_tables.push(span);
                return None;
            };
            table.remove(key.as_str());
            self.problem(at, naming.key(&key), words(error.message(), Some(&key)));
            self.refused_tables.push(span.clone());
        }
    }
}

/// Where each (job, key) of `wanted` is in `text` (the key's value), in `wanted`'s order: the
/// text read again, once for all, for warnings found after the load.
pub(super) fn locate(text: &str, wanted: &[(&str, &str)]) -> Vec<Option<Range<usize>>> {
    let (root, _) = DeTable::parse_recoverable(text);
    let root = root.into_inner();
    let jobs: Vec<&DeTable<'_>> = match root.get("job").map(Spanned::get_ref) {
        Some(DeValue::Array(jobs)) => jobs
            .iter()
            .filter_map(|table| match table.get_ref() {
                DeValue::Table(table) => Some(table),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    let by_name: std::collections::HashMap<&str, &DeTable<'_>> = jobs
        .into_iter()
        .filter_map(|table| Some((table.get("name")?.get_ref().as_str()?, table)))
        .collect();
    wanted
        .iter()
        .map(|(job, key)| by_name.get(job)?.get(*key).map(Spanned::span))
        .collect()
}

/// The key of `table` whose key or value holds byte `offset`.
fn key_at(table: &DeTable<'_>, offset: usize) -> Option<String> {
    table.iter().find_map(|(key, value)| {
        let holds = key.span().contains(&offset) || value.span().contains(&offset);
        holds.then(|| key.get_ref().to_string())
    })
}

/// serde's message for a key that cannot be read, in a person's words.
fn words(message: &str, key: Option<&str>) -> String {
    if let Some(rest) = message.strip_prefix("unknown field `") {
        let (name, expected) = rest.split_once('`').unwrap_or((rest, ""));
        let known = backticked(expected);
        return unknown("key", name, &known);
    }
    if let Some(rest) = message.strip_prefix("unknown variant `") {
        let (value, expected) = rest.split_once('`').unwrap_or((rest, ""));
        let known = backticked(expected);
        let listed = listed(&known);
        return match nearest(value, &known) {
            Some(near) => format!("expected {listed}, not {value:?} (did you mean {near:?}?)"),
            None => format!("expected {listed}, not {value:?}"),
        };
    }
    if let Some(field) = message
        .strip_prefix("missing field `")
        .and_then(|rest| rest.split_once('`'))
        .map(|(field, _)| field)
    {
        return format!("missing key `{field}`");
    }
    if let Some(found) = message
        .strip_prefix("invalid type: ")
        .and_then(|rest| rest.split_once(", expected"))
        .map(|(found, _)| found)
    {
        let found = a_value(found);
        let key = key.unwrap_or_default();
        if DURATIONS.contains(&key) {
            return format!("expected a duration like \"10s\", \"5m\" or \"1h30m\", not {found}");
        }
        if ARGVS.contains(&key) {
            let shell = if key == "command" && found.starts_with("a string") {
                " (or shell = \"…\" for a command line)"
            } else {
                ""
            };
            return format!(
                "expected an argv array like [\"/usr/bin/backup\", \"--full\"], not {found}{shell}"
            );
        }
        let expected = message
            .split_once(", expected ")
            .map_or("another type", |(_, expected)| expected);
        return format!("expected {}, not {found}", in_words(expected));
    }
    message.to_owned()
}

/// `string "x y"` → `a string ("x y")`; `integer `10`` → `a number (10)`.
fn a_value(found: &str) -> String {
    let (kind, shown) = found.split_once(' ').unwrap_or((found, ""));
    let shown = shown.trim_matches('`');
    let kind = match kind {
        "string" => "a string",
        "integer" | "floating" => "a number",
        "boolean" => "true or false",
        "sequence" => "an array",
        "map" => "a table",
        other => other,
    };
    if shown.is_empty() || kind == "an array" || kind == "a table" {
        kind.to_owned()
    } else {
        format!("{kind} ({shown})")
    }
}

/// serde's name of an expected type in a person's words.
fn in_words(expected: &str) -> &str {
    match expected {
        "a string" => "a string (in quotes)",
        "i64" | "u32" | "u64" | "usize" => "a whole number like 3",
        "a boolean" => "true or false",
        "a sequence" => "an array like [\"a\", \"b\"]",
        "a map" => "a table like { KEY = \"value\" }",
        other => other,
    }
}

/// `unknown key `timout` (did you mean `timeout`?)`.
fn unknown(what: &str, name: &str, known: &[&str]) -> String {
    match nearest(name, known) {
        Some(near) => format!("unknown {what} `{name}` (did you mean `{near}`?)"),
        None if known.is_empty() => format!("unknown {what} `{name}`"),
        None => format!("unknown {what} `{name}`; expected {}", listed(known)),
    }
}

/// The known name most like `name`, if one is close enough to be a slip of the keyboard.
pub(super) fn nearest<'k>(name: &str, known: &[&'k str]) -> Option<&'k str> {
    known
        .iter()
        .map(|candidate| (strsim::jaro_winkler(name, candidate), *candidate))
        .filter(|(score, _)| *score >= 0.85)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, candidate)| candidate)
}

/// The backticked names in serde's "expected one of `a`, `b`".
fn backticked(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// `` `a`, `b` or `c` ``.
fn listed(names: &[&str]) -> String {
    let quoted: Vec<String> = names.iter().map(|name| format!("`{name}`")).collect();
    match quoted.split_last() {
        None => "another value".to_owned(),
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slip_of_the_keyboard_is_told_with_the_nearest_key() {
        let known = ["timeout", "timezone", "kill_grace"];
        assert_eq!(
            unknown("key", "timout", &known),
            "unknown key `timout` (did you mean `timeout`?)"
        );
        assert_eq!(
            unknown("key", "colour", &known),
            "unknown key `colour`; expected `timeout`, `timezone` or `kill_grace`"
        );
    }

    #[test]
    fn a_wrong_type_is_told_in_words() {
        assert_eq!(
            words(
                "invalid type: integer `10`, expected a string",
                Some("kill_grace")
            ),
            "expected a duration like \"10s\", \"5m\" or \"1h30m\", not a number (10)"
        );
        assert_eq!(
            words(
                "invalid type: string \"/usr/bin/backup --full\", expected a sequence",
                Some("command")
            ),
            "expected an argv array like [\"/usr/bin/backup\", \"--full\"], not a string \
             (\"/usr/bin/backup --full\") (or shell = \"…\" for a command line)"
        );
        assert_eq!(
            words(
                "unknown variant `never`, expected `allow` or `forbid`",
                None
            ),
            "expected `allow` or `forbid`, not \"never\""
        );
        assert_eq!(
            words(
                "unknown variant `forbd`, expected one of `allow`, `forbid`, `replace`",
                None
            ),
            "expected `allow`, `forbid` or `replace`, not \"forbd\" (did you mean \"forbid\"?)"
        );
        assert_eq!(
            words(
                "invalid type: string \"yes\", expected a boolean",
                Some("enabled")
            ),
            "expected true or false, not a string (\"yes\")"
        );
    }
}
