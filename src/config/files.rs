//! The schedule's files: the main file and its per-host drop-ins (`zkcron.d/*.toml` beside it,
//! in name order), read as one schedule.
//!
//! Owns: finding and reading the drop-ins, the one text every problem's span indexes (each file
//! at its own place in it), which file and line a place is, and merging the files' top-level
//! tables: a key set in two files is a problem naming both places; `[[job]]`, `[[group]]` and
//! `[[limit]]` tables add up, in file order.
//! Must not: read a table's keys into raw structs (`reader.rs` does) nor check values.

use std::ops::Range;
use std::path::{Path, PathBuf};

use toml::Spanned;
use toml::de::{DeArray, DeTable, DeValue};

use super::error::Files;
use super::{LoadError, Problem};

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
}

/// Parses each file of `text` (as [`combine`] made it) and merges their top-level tables.
pub(super) fn merge<'t>(text: &'t str, files: &Files) -> Merged<'t> {
    let mut merged = Merged {
        entries: Vec::new(),
        problems: Vec::new(),
        drop_ins: Vec::new(),
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
    /// One top-level `key` of a file; `set` collects what a drop-in sets.
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
        let earlier_key = self.entries[at].0.span();
        let (_, earlier) = &mut self.entries[at];
        match (earlier.get_mut(), value.into_inner()) {
            (DeValue::Array(earlier), DeValue::Array(later)) => {
                for element in later.iter() {
                    let span = element.span();
                    let alone = Spanned::new(span, DeValue::Array(one(element.clone())));
                    set.extend(described(&name, &alone));
                    earlier.push(element.clone());
                }
            }
            (DeValue::Table(earlier), DeValue::Table(later)) => {
                for (inner, value) in later {
                    let before = earlier.get(inner.get_ref().as_ref()).map(|v| v.span());
                    if let Some(before) = before {
                        self.problems.push(set_twice(
                            inner.span(),
                            format!("{name}.{}", inner.get_ref()),
                            &files.place(text, before.start),
                        ));
                        continue;
                    }
                    set.push((inner.span().start, format!("{name}.{}", inner.get_ref())));
                    earlier.insert(inner, value);
                }
            }
            _ => {
                let problem = set_twice(key.span(), name, &files.place(text, earlier_key.start));
                self.problems.push(problem);
            }
        }
    }
}

fn set_twice(span: Range<usize>, context: String, earlier: &str) -> Problem {
    Problem {
        span: Some(span),
        context,
        message: format!(
            "set twice: here and at {earlier} (a key is set once, in the main file or in one drop-in)"
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
