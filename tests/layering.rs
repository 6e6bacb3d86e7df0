//! The module structure of `src/`: every import points to a module on its own floor or below,
//! and no two modules import each other, directly or around a circle (docs/ARCHITECTURE.md
//! "Modules"). A new module must be given a floor here before it can land.
//!
//! This reads the source as text: `crate::…` paths anywhere outside test code, `super::…`, and
//! `use` of a child module by its bare name. A path is charged to the longest module it names.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Floors, bottom up. A module is placed by its longest prefix in this table.
const FLOORS: &[(usize, &[&str])] = &[
    (
        0,
        &[
            "ids",
            "identity",
            "schedule",
            "zk",
            "layout",
            "report",
            "heap",
            "lock::node",
            "lock::clock",
            "lock::balance",
            "delayed::submission",
            "delayed::due",
        ],
    ),
    (1, &["config", "run", "control"]),
    (
        2,
        &[
            "lock",
            "lock::machine",
            "fire",
            "fire::machine",
            "fire::queue",
        ],
    ),
    (
        3,
        &[
            "ledger",
            "control::store",
            "control::client",
            "delayed",
            "delayed::client",
            "runner",
            "delivery",
            "notify",
            "metrics",
            "view",
            "lock::inspect",
        ],
    ),
    (
        4,
        &[
            "fire::driver",
            "lock::driver",
            "lock::members",
            "lock::clock_watch",
            "lock::placement",
            "drift",
        ],
    ),
    (5, &["http", "status"]),
    (6, &["daemon", "logging"]),
    (7, &["main", "cli"]),
];

#[test]
fn every_import_points_down_or_sideways() {
    let modules = read_modules();
    let mut wrong = Vec::new();
    for (module, file) in &modules {
        let floor = floor_of(module).unwrap_or_else(|| panic!("{module} has no floor in FLOORS"));
        for target in &file.imports {
            let target_floor = floor_of(target).unwrap_or_else(|| panic!("{target} has no floor"));
            if target_floor > floor {
                wrong.push(format!(
                    "{module} (floor {floor}) imports {target} (floor {target_floor}) in {}",
                    file.path.display()
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports above their floor:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn no_two_table_modules_import_each_other_around_a_circle() {
    let modules = read_modules();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, file) in &modules {
        let from = unit_of(module);
        for target in &file.imports {
            let to = unit_of(target);
            if to != from {
                edges.entry(from.clone()).or_default().insert(to);
            }
        }
    }
    if let Some(circle) = find_circle(&edges) {
        panic!("a circle of imports: {}", circle.join(" -> "));
    }
}

#[test]
fn the_checker_sees_the_kinds_of_import_it_must() {
    let text = "use crate::{ids::JobName, run::{Claim, RunRecord}};\n\
                use super::store;\nuse record::Name;\nfn f() { crate::zk::connect(); }\n\
                #[cfg(test)]\nmod tests { use crate::daemon; }\n";
    let children = BTreeSet::from(["record".to_owned()]);
    let known: BTreeSet<String> = [
        "ids",
        "run",
        "control::store",
        "control::client::record",
        "zk",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let found: BTreeSet<String> = imports_in(text, "control::client", &children)
        .iter()
        .map(|path| longest_known(path, &known))
        .collect();
    assert_eq!(
        found, known,
        "each kind of import, and nothing from test code"
    );
}

/// One source file: where it is and the modules it imports.
struct SourceFile {
    path: PathBuf,
    imports: BTreeSet<String>,
}

/// Every module of `src/` by its path (`fire::driver::listing`), with its imports resolved to
/// the longest module they name.
fn read_modules() -> BTreeMap<String, SourceFile> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    collect_rs(&src, &mut files);
    let mut names: BTreeMap<String, PathBuf> = BTreeMap::new();
    for path in files {
        let relative = path.strip_prefix(&src).expect("below src");
        let mut parts: Vec<String> = relative
            .with_extension("")
            .iter()
            .map(|part| part.to_string_lossy().into_owned())
            .collect();
        if parts
            .last()
            .is_some_and(|last| last == "mod" || last == "lib")
        {
            parts.pop();
        }
        // Test files are not part of the structure a build has.
        if parts.iter().any(|part| part == "tests") {
            continue;
        }
        names.insert(parts.join("::"), path);
    }
    let known: BTreeSet<String> = names.keys().cloned().collect();
    names
        .into_iter()
        .filter(|(module, _)| !module.is_empty())
        .map(|(module, path)| {
            let text = std::fs::read_to_string(&path).expect("readable source");
            let children: BTreeSet<String> = known
                .iter()
                .filter_map(|other| other.strip_prefix(&format!("{module}::")))
                .filter(|rest| !rest.contains("::"))
                .map(str::to_owned)
                .collect();
            let imports = imports_in(&text, &module, &children)
                .into_iter()
                .map(|path| longest_known(&path, &known))
                .filter(|target| target != &module && !target.is_empty())
                .collect();
            (module, SourceFile { path, imports })
        })
        .collect()
}

fn collect_rs(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("readable src dir") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            collect_rs(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
}

/// The module paths `text` (the source of `module`) refers to, test modules left out. Each is
/// as long as the text spells it (`run::Claim`); the caller cuts it to a known module.
fn imports_in(text: &str, module: &str, children: &BTreeSet<String>) -> BTreeSet<String> {
    // Comments and strings may name any module: only code imports.
    let code: String = text
        .lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .map(|line| format!("{line}\n"))
        .collect();
    let text = without_test_modules(&blank_literals(&code));
    let mut found = BTreeSet::new();
    for (at, _) in text.match_indices("crate::") {
        let preceded_by_ident = text[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':');
        if !preceded_by_ident {
            paths_at(&text[at + "crate::".len()..], "", &mut found);
        }
    }
    for (at, _) in text.match_indices("super::") {
        if text[..at].ends_with("::") || text[..at].ends_with("super") {
            continue;
        }
        let mut base: Vec<&str> = module.split("::").collect();
        let mut rest = &text[at..];
        while let Some(after) = rest.strip_prefix("super::") {
            base.pop();
            rest = after;
        }
        paths_at(rest, &base.join("::"), &mut found);
    }
    for line in text.lines() {
        let line = line.trim_start();
        let Some(path) = line
            .strip_prefix("pub use ")
            .or_else(|| line.strip_prefix("use "))
        else {
            continue;
        };
        let first = path.split("::").next().unwrap_or_default();
        if children.contains(first) {
            paths_at(path, module, &mut found);
        }
    }
    found
}

/// Reads the path(s) at the start of `text` (`a::b::C`, `{a::X, b::{Y, Z}}`), prefixed by `base`.
fn paths_at(text: &str, base: &str, found: &mut BTreeSet<String>) {
    let join = |segments: &str| {
        if base.is_empty() {
            segments.to_owned()
        } else {
            format!("{base}::{segments}")
        }
    };
    let segment_end = text
        .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(text.len());
    let head = text[..segment_end].trim_end_matches(':');
    let rest = &text[segment_end..];
    if rest.starts_with('{') && (head.is_empty() || text[..segment_end].ends_with("::")) {
        let inner = &rest[1..matching_brace(rest).unwrap_or(rest.len())];
        let prefix = join(head);
        for item in split_top_level(inner) {
            let item = item.trim();
            if item.is_empty() || item == "self" {
                if item == "self" {
                    found.insert(prefix.clone());
                }
                continue;
            }
            paths_at(item, &prefix, found);
        }
    } else if !head.is_empty() {
        found.insert(join(head));
    }
}

/// Index (in `text`, which starts with `{`) of the brace that closes it.
fn matching_brace(text: &str) -> Option<usize> {
    let mut depth = 0;
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

fn split_top_level(text: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0, 0);
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

/// `text` with the contents of string and char literals blanked, so that their braces and
/// paths are not read as code.
fn blank_literals(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let raw_hashes = (c == 'r')
            .then(|| chars[i + 1..].iter().take_while(|c| **c == '#').count())
            .filter(|hashes| chars.get(i + 1 + hashes) == Some(&'"'));
        if let Some(hashes) = raw_hashes {
            let closing: Vec<char> = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes))
                .collect();
            let mut j = i + hashes + 2;
            while j < chars.len() && !chars[j..].starts_with(&closing) {
                j += 1;
            }
            out.push_str("\"\"");
            i = j + closing.len();
        } else if c == '"' {
            let mut j = i + 1;
            while j < chars.len() && chars[j] != '"' {
                j += if chars[j] == '\\' { 2 } else { 1 };
            }
            out.push_str("\"\"");
            i = j + 1;
        } else if c == '\'' && chars.get(i + 1) == Some(&'\\') {
            let close = chars[i + 2..].iter().position(|c| *c == '\'').unwrap_or(0);
            out.push_str("' '");
            i += close + 3;
        } else if c == '\'' && chars.get(i + 2) == Some(&'\'') {
            out.push_str("' '");
            i += 3;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// `text` without `#[cfg(test)] mod … { … }` blocks.
fn without_test_modules(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at..];
        let item_end = after.find(['{', ';']).unwrap_or(after.len());
        if after[..item_end].contains("mod ") && after[item_end..].starts_with('{') {
            let close = matching_brace(&after[item_end..]).unwrap_or(after.len() - item_end - 1);
            rest = &after[item_end + close + 1..];
        } else {
            out.push_str("#[cfg(test)]");
            rest = &after["#[cfg(test)]".len()..];
        }
    }
    out.push_str(rest);
    out
}

/// The longest module of `known` that `path` starts with (`run::Claim` → `run`).
fn longest_known(path: &str, known: &BTreeSet<String>) -> String {
    let segments: Vec<&str> = path.split("::").collect();
    (1..=segments.len())
        .rev()
        .map(|n| segments[..n].join("::"))
        .find(|candidate| known.contains(candidate))
        .unwrap_or_default()
}

/// The entry of [`FLOORS`] that places `module`.
fn unit_of(module: &str) -> String {
    let segments: Vec<&str> = module.split("::").collect();
    (1..=segments.len())
        .rev()
        .map(|n| segments[..n].join("::"))
        .find(|candidate| {
            FLOORS
                .iter()
                .any(|(_, names)| names.contains(&candidate.as_str()))
        })
        .unwrap_or_else(|| module.to_owned())
}

fn floor_of(module: &str) -> Option<usize> {
    let unit = unit_of(module);
    FLOORS
        .iter()
        .find(|(_, names)| names.contains(&unit.as_str()))
        .map(|(floor, _)| *floor)
}

/// A circle in `edges`, as the modules along it, if there is one.
fn find_circle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(start) = path.iter().position(|n| n == node) {
            let mut circle = path[start..].to_vec();
            circle.push(node.to_owned());
            return Some(circle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in edges.get(node).into_iter().flatten() {
            if let Some(circle) = visit(next, edges, path, done) {
                return Some(circle);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    edges
        .keys()
        .find_map(|node| visit(node, edges, &mut Vec::new(), &mut done))
}
