//! The schedule's files: the main file and its per-host drop-ins (`zkcron.d/*.toml` beside it,
//! in name order), read as one schedule.
//!
//! Owns: finding and reading the drop-ins, the one text every problem's span indexes (each file
//! at its own place in it), which file and line a place is, and merging the files' top-level
//! tables as systemd merges drop-ins (issue 51): a later file overrides an earlier one key by
//! key, a `[[job]]` (`[[group]]`, `[[limit]]`, `[[calendar]]`) named as one of an earlier file
//! changes only the keys it sets, an empty list unsets its key, and the other tables of arrays
//! add up, in file order.
//! Must not: read a table's keys into raw structs (`reader.rs` does) nor check values.

use std::ops::Range;
use std::path::{Path, PathBuf};

use toml::Spanned;
use toml::de::{DeArray, DeTable, DeValue};

use super::error::{Files, LoadError, Problem};

/// The directory of drop-ins, beside the main file.
pub const DROP_IN_DIR: &str = "zkcron.d";

/// The main file's drop-ins: the `*.toml` files of [`DROP_IN_DIR`] beside it, in name order;
/// none when there is no such directory.
///
/// # Errors
/// The directory cannot be listed.
pub(super) fn drop_ins(main: &Path) -> Result<Vec<PathBuf>, LoadError> {
    let dir = main
        .parent()
        .unwrap_or_else(|| Path::new(""))
        .join(DROP_IN_DIR);
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(LoadError::Read { path: dir, source }),
    };
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| LoadError::Read {
            path: dir.clone(),
            source,
        })?;
        let path = entry.path();
        // Editors' and package managers' leftovers (.toml~, .dpkg-old) are not `.toml`.
        if path.extension().is_some_and(|ext| ext == "toml") && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// The main file's text and each of its drop-ins', in the order they merge.
///
/// # Errors
/// A file cannot be read; the main one missing is told as such.
pub(super) fn read_all(path: &Path) -> Result<Vec<(PathBuf, String)>, LoadError> {
    let read = |path: &Path| {
        std::fs::read_to_string(path).map_err(|source| LoadError::Read {
            path: path.to_owned(),
            source,
        })
    };
    let main = std::fs::read_to_string(path).map_err(|source| match source.kind() {
        std::io::ErrorKind::NotFound => LoadError::Missing {
            path: path.to_owned(),
        },
        _ => LoadError::Read {
            path: path.to_owned(),
            source,
        },
    })?;
    let mut texts = vec![(path.to_owned(), main)];
    for drop_in in drop_ins(path)? {
        let text = read(&drop_in)?;
        texts.push((drop_in, text));
    }
    Ok(texts)
}

/// The files' texts as one, each after a line break of its own.
pub(super) fn combine(files: Vec<(PathBuf, String)>) -> (String, Files) {
    let mut text = String::new();
    let mut placed = Vec::with_capacity(files.len());
    for (path, file_text) in files {
        if !text.is_empty() {
            text.push('\n');
        }
        placed.push((path, text.len()));
        text.push_str(&file_text);
    }
    (text, Files::new(placed))
}

/// Every file's top-level tables, merged, with the problems of reading and merging them.
pub(super) struct Merged<'t> {
    /// Each top-level key once, with its value: tables merged key by key, arrays of tables
    /// added up.
    pub(super) entries: Vec<(Spanned<String>, Spanned<DeValue<'t>>)>,
    pub(super) problems: Vec<Problem>,
    /// What each drop-in set: `lock.node_id`, `[[job]] "extra"`.
    pub(super) drop_ins: Vec<(PathBuf, Vec<String>)>,
    /// Each job a drop-in declares or changes, with that drop-in, in file order: this host's
    /// own, which the drift alarm names as such.
    pub(super) job_drop_ins: Vec<(String, PathBuf)>,
}

/// Parses each file of `text` (as [`combine`] made it) and merges their top-level tables.
pub(super) fn merge<'t>(text: &'t str, files: &Files) -> Merged<'t> {
    let mut merged = Merged {
        entries: Vec::new(),
        problems: Vec::new(),
        drop_ins: Vec::new(),
        job_drop_ins: Vec::new(),
    };
    let placed = files.placed();
    for (index, (path, start)) in placed.iter().enumerate() {
        let end = placed
            .get(index + 1)
            .map_or(text.len(), |(_, next)| next.saturating_sub(1));
        let (root, errors) = DeTable::parse_recoverable(text.get(*start..end).unwrap_or_default());
        for error in errors {
            merged.problems.push(Problem {
                span: error
                    .span()
                    .map(|span| span.start + start..span.end + start),
                context: String::new(),
                message: error.message().to_owned(),
                secret: false,
            });
        }
        let mut set: Vec<(usize, String)> = Vec::new();
        for (key, value) in root.into_inner() {
            if index > 0
                && key.get_ref() == "job"
                && let DeValue::Array(jobs) = value.get_ref()
            {
                let named = jobs.iter().filter_map(element_name);
                merged
                    .job_drop_ins
                    .extend(named.map(|name| (name, path.clone())));
            }
            let key = Spanned::new(moved(key.span(), *start), key.into_inner().into_owned());
            let value = shifted(value, *start);
            merged.add(key, value, (text, files), &mut set);
        }
        if index > 0 {
            // In the file's order (the parser's tables are in name order).
            set.sort();
            let set = set.into_iter().map(|(_, what)| what).collect();
            merged.drop_ins.push((path.clone(), set));
        }
    }
    merged
}

impl<'t> Merged<'t> {
    /// One top-level `key` of a file; `set` collects what a drop-in sets. A later file
    /// overrides an earlier one key by key, as systemd's drop-ins do: a table's key replaces
    /// the earlier value, a `[[job]]` (or `[[group]]`, `[[limit]]`, `[[calendar]]`) named as an
    /// earlier one changes only the keys it sets, and an empty list unsets the key.
    fn add(
        &mut self,
        key: Spanned<String>,
        value: Spanned<DeValue<'t>>,
        (text, files): (&str, &Files),
        set: &mut Vec<(usize, String)>,
    ) {
        let name = key.get_ref().clone();
        let Some(at) = self
            .entries
            .iter()
            .position(|(known, _)| *known.get_ref() == name)
        else {
            set.extend(described(&name, &value));
            self.entries.push((key, value));
            return;
        };
        let place = |offset: usize| files.place(text, offset);
        let (_, earlier) = &mut self.entries[at];
        let earlier_at = earlier.span().start;
        match (earlier.get_mut(), value.into_inner()) {
            (DeValue::Array(earlier), DeValue::Array(later)) => {
                let from_earlier_files = earlier.len();
                for element in later.iter() {
                    let named = element_name(element);
                    let same = named.as_deref().and_then(|named| {
                        earlier
                            .iter()
                            .take(from_earlier_files)
                            .position(|known| element_name(known).as_deref() == Some(named))
                    });
                    match (same, element.get_ref()) {
                        (Some(index), DeValue::Table(changes)) => {
                            let what = format!("[[{name}]] {:?}", named.unwrap_or_default());
                            if let Some(DeValue::Table(known)) =
                                earlier.get_mut(index).map(|known| known.get_mut())
                            {
                                override_keys(known, changes, (&what, true), &place, set);
                            }
                        }
                        _ => {
                            let span = element.span();
                            let alone = Spanned::new(span, DeValue::Array(one(element.clone())));
                            set.extend(described(&name, &alone));
                            earlier.push(element.clone());
                        }
                    }
                }
            }
            (DeValue::Table(earlier), DeValue::Table(later)) => {
                override_keys(earlier, &later, (&name, false), &place, set);
            }
            _ => {
                let problem = set_twice(key.span(), name, &place(earlier_at));
                self.problems.push(problem);
            }
        }
    }
}

/// Sets each key of `changes` in `table` (`what` names it: `lock`, `[[job]] "backup"`),
/// replacing what an earlier file gave; an empty list removes the key. Each is listed in `set`
/// with the place it overrides. An `element` of an array of tables keeps its `name`: it is
/// what the two were matched by.
fn override_keys<'t>(
    table: &mut DeTable<'t>,
    changes: &DeTable<'t>,
    (what, element): (&str, bool),
    place: &dyn Fn(usize) -> String,
    set: &mut Vec<(usize, String)>,
) {
    for (key, value) in changes.iter() {
        if element && key.get_ref() == "name" {
            continue;
        }
        let before = table
            .get(key.get_ref().as_ref())
            .map(|earlier| place(earlier.span().start));
        let reset = matches!(value.get_ref(), DeValue::Array(items) if items.is_empty());
        let described = match (&before, reset) {
            (Some(before), true) => format!("{what}.{} (unset; was {before})", key.get_ref()),
            (Some(before), false) => format!("{what}.{} (overrides {before})", key.get_ref()),
            (None, _) => format!("{what}.{}", key.get_ref()),
        };
        set.push((key.span().start, described));
        if reset {
            table.remove(key.get_ref().as_ref());
        } else {
            table.insert(key.clone(), value.clone());
        }
    }
}

/// The `name` of an array's table, if it has one.
fn element_name(element: &Spanned<DeValue<'_>>) -> Option<String> {
    match element.get_ref() {
        DeValue::Table(table) => table
            .get("name")
            .and_then(|name| name.get_ref().as_str())
            .map(str::to_owned),
        _ => None,
    }
}

fn set_twice(span: Range<usize>, context: String, earlier: &str) -> Problem {
    Problem {
        span: Some(span),
        context,
        message: format!(
            "set twice: here and at {earlier} (a top-level key is a table or a list of tables)"
        ),
        secret: false,
    }
}

/// A one-element array.
fn one(element: Spanned<DeValue<'_>>) -> DeArray<'_> {
    let mut array = DeArray::new();
    array.push(element);
    array
}

/// What a top-level entry sets, for a drop-in's list, each with where it is: each key of a
/// table, each named element of an array of tables.
fn described(name: &str, value: &Spanned<DeValue<'_>>) -> Vec<(usize, String)> {
    match value.get_ref() {
        DeValue::Table(table) => table
            .keys()
            .map(|key| (key.span().start, format!("{name}.{}", key.get_ref())))
            .collect(),
        DeValue::Array(elements) => elements
            .iter()
            .map(|element| {
                let named = match element.get_ref() {
                    DeValue::Table(table) => table
                        .get("name")
                        .and_then(|name| name.get_ref().as_str())
                        .map(|element| format!(" {element:?}")),
                    _ => None,
                };
                let what = format!("[[{name}]]{}", named.unwrap_or_default());
                (element.span().start, what)
            })
            .collect(),
        _ => vec![(value.span().start, name.to_owned())],
    }
}

fn moved(span: Range<usize>, by: usize) -> Range<usize> {
    span.start + by..span.end + by
}

/// `value` with every span moved `by` bytes: from its file's text to the combined text.
fn shifted(value: Spanned<DeValue<'_>>, by: usize) -> Spanned<DeValue<'_>> {
    // The main file starts the text: nothing to rebuild.
    if by == 0 {
        return value;
    }
    let span = moved(value.span(), by);
    let inner = match value.into_inner() {
        DeValue::Table(table) => DeValue::Table(
            table
                .into_iter()
                .map(|(key, value)| {
                    let key = Spanned::new(moved(key.span(), by), key.into_inner());
                    (key, shifted(value, by))
                })
                .collect(),
        ),
        DeValue::Array(elements) => {
            let mut array = DeArray::new();
            for element in elements.iter() {
                array.push(shifted(element.clone(), by));
            }
            DeValue::Array(array)
        }
        other => other,
    };
    Spanned::new(span, inner)
}
