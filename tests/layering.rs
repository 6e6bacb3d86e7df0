//! The module structure of `src/` against the one floor table, docs/ARCHITECTURE.md "Modules",
//! which this test reads from that file (so the two cannot drift). It fails on:
//! - a module (or submodule) with no row, and a row naming no module;
//! - an import above its floor, through a re-export too (`crate::X` where `lib.rs` re-exports X
//!   from a module is charged to that module);
//! - any circle of imports between modules, `super::` imports included;
//! - a module on a pure row that names `zk`, `tokio`, `std::process`, `std::fs`, `std::net`,
//!   `SystemTime::now` or `Instant::now`.
//!
//! And, from the same file's "### Doors", on a module that names what only others may name
//! (`zookeeper_client`, `crate::zk`, the audit trail's writer), unless it is listed as still past
//! that door — and on a listed one that no longer names it.
//!
//! It reads the source as text: `crate::…` paths anywhere outside test code, `super::…`, and
//! `use` of a child module by its bare name. A path is charged to the longest module it names.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

#[test]
fn the_code_keeps_the_floor_table_of_architecture_md() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc =
        std::fs::read_to_string(root.join("docs/ARCHITECTURE.md")).expect("docs/ARCHITECTURE.md");
    let table = FloorTable::parse(&doc).unwrap_or_else(|why| panic!("docs/ARCHITECTURE.md: {why}"));
    let wrong = violations(&table, &read_sources(&root.join("src")));
    assert!(
        wrong.is_empty(),
        "the code leaves the floor table of docs/ARCHITECTURE.md (move the code, not the table):\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_checker_catches_each_kind_of_violation() {
    let doc = "## Modules\n\n| floor | kind | modules |\n| --- | --- | --- |\n\
               | 2 | performs | `driver`, `driver::{watch}` |\n\
               | 1 | pure | `machine`, `machine::{part}` |\n\
               | 0 | pure | `ids`, `format` |\n\
               | 0 | performs | `zk`, `zk::tls`, `gone` |\n\n\
               Circles still to break:\n\
               - `zk`, `zk::tls`\n\
               - `ids`, `format`\n";
    let table = FloorTable::parse(doc).expect("a valid table");
    let sources: BTreeMap<String, String> = [
        (
            "lib",
            "pub mod driver;\npub use driver::{\n    Handle,\n};\n",
        ),
        ("driver", "use crate::ids::NodeId;\npub struct Handle;\n"),
        ("driver::watch", "use super::Handle;\n"),
        // Up through lib.rs's re-export, and a pure module naming zk and reading a clock.
        (
            "machine",
            "use crate::Handle;\nuse crate::zk;\nfn f() { let _ = std::time::Instant::now(); }\n\
             #[cfg(test)]\nmod tests { use tokio; }\n",
        ),
        // Around a circle through `super::`.
        ("machine::part", "use super::Machine;\n"),
        ("ids", "use std::{fs, collections::BTreeMap};\n"),
        ("format", "use crate::ids::JobName;\n"),
        ("zk", "use crate::ids::NodeId;\nuse tls::Config;\n"),
        ("zk::tls", "use super::Settings;\n"),
        ("unlisted", "use crate::ids::NodeId;\n"),
    ]
    .into_iter()
    .map(|(module, text)| (module.to_owned(), text.to_owned()))
    .collect();
    let mut sources = sources;
    sources
        .entry("machine".to_owned())
        .and_modify(|text| text.push_str("use part::Piece;\n"));
    let found = violations(&table, &sources);
    let expect = [
        "unlisted has no row",
        "the table's gone is no module",
        "machine (floor 1) imports driver (floor 2) through lib's re-export of Handle",
        "machine is pure but names crate::zk",
        "machine is pure but names Instant::now",
        "ids is pure but names std::fs",
        "a circle of imports: machine -> machine::part -> machine",
        "the circle of format, ids is listed as still to break but is not",
    ];
    for wanted in expect {
        assert!(
            found.iter().any(|line| line.starts_with(wanted)),
            "missed: {wanted}\nfound:\n{}",
            found.join("\n")
        );
    }
    assert_eq!(
        found.len(),
        expect.len(),
        "nothing else, and nothing from test code:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_checker_sees_the_kinds_of_import_it_must() {
    let text = "use crate::{ids::JobName, run::{Claim, RunRecord}};\n\
                use super::store;\nuse record::Name;\nfn f() { crate::zk::connect(); }\n\
                fn g() -> part::Piece { part::Piece }\n\
                use zkcron::layout::GroupPaths;\n\
                #[cfg(test)]\nmod tests { use crate::daemon; }\n";
    let children = BTreeSet::from(["record".to_owned(), "part".to_owned()]);
    let known: BTreeSet<String> = [
        "ids",
        "run",
        "control::store",
        "control::client::record",
        "control::client::part",
        "zk",
        "layout",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let found: BTreeSet<String> = imports_in(&code_of(text), "control::client", &children)
        .iter()
        .map(|path| longest_known(path, &known))
        .collect();
    assert_eq!(
        found, known,
        "each kind of import, and nothing from test code"
    );
}

/// docs/ARCHITECTURE.md's table: each module's floor, and which modules are pure.
struct FloorTable {
    floors: BTreeMap<String, usize>,
    pure: BTreeSet<String>,
    /// The circles the file still owns up to ("Circles still to break"), each as its modules:
    /// a debt that can only shrink, since a listed circle the code no longer has fails too.
    owned_circles: Vec<BTreeSet<String>>,
}

impl FloorTable {
    /// The first table under "## Modules" with the columns `floor | kind | modules`; a module
    /// cell lists backquoted paths, `a::{b, c}` standing for `a::b` and `a::c`.
    fn parse(doc: &str) -> Result<Self, String> {
        let mut rows = doc
            .lines()
            .skip_while(|line| *line != "## Modules")
            .skip(1)
            .take_while(|line| !line.starts_with("## "))
            .skip_while(|line| !line.starts_with("| floor | kind | modules |"))
            .skip(2)
            .take_while(|line| line.starts_with('|'))
            .peekable();
        if rows.peek().is_none() {
            return Err("no `| floor | kind | modules |` table under \"## Modules\"".into());
        }
        let mut table = FloorTable {
            floors: BTreeMap::new(),
            pure: BTreeSet::new(),
            owned_circles: doc
                .lines()
                .skip_while(|line| !line.starts_with("Circles still to break"))
                .skip_while(|line| !line.starts_with("- "))
                .take_while(|line| line.starts_with("- "))
                .map(|line| modules_in_cell(line).into_iter().collect())
                .collect(),
        };
        for row in rows {
            let cells: Vec<&str> = row.trim_matches('|').split('|').map(str::trim).collect();
            let [floor, kind, modules] = cells[..] else {
                return Err(format!("a row without three cells: {row}"));
            };
            let floor: usize = floor
                .parse()
                .map_err(|_| format!("floor {floor:?} is not a number: {row}"))?;
            let pure = match kind {
                "pure" => true,
                "performs" => false,
                other => {
                    return Err(format!(
                        "kind {other:?} is neither pure nor performs: {row}"
                    ));
                }
            };
            for module in modules_in_cell(modules) {
                if table.floors.insert(module.clone(), floor).is_some() {
                    return Err(format!("{module} has two rows"));
                }
                if pure {
                    table.pure.insert(module);
                }
            }
        }
        Ok(table)
    }
}

fn modules_in_cell(cell: &str) -> Vec<String> {
    let mut modules = Vec::new();
    for (index, quoted) in cell.split('`').enumerate() {
        if index % 2 == 0 {
            continue;
        }
        match quoted.split_once("::{") {
            Some((parent, children)) => modules.extend(
                children
                    .trim_end_matches('}')
                    .split(',')
                    .map(|child| format!("{parent}::{}", child.trim())),
            ),
            None => modules.push(quoted.to_owned()),
        }
    }
    modules
}

/// What names a pure module may not use: the session, the runtime, processes, files, the
/// network and the clocks. Each is matched as a path in code.
const IMPURE: &[&str] = &[
    "crate::zk",
    "tokio",
    "std::process",
    "std::fs",
    "std::net",
    "SystemTime::now",
    "Instant::now",
];

/// The sources as both checks read them: the modules, each one's code, and the re-exports.
struct Read<'a> {
    known: BTreeSet<String>,
    codes: BTreeMap<&'a String, String>,
    reexports: BTreeMap<(String, String), String>,
}

impl<'a> Read<'a> {
    fn of(sources: &'a BTreeMap<String, String>) -> Self {
        let known: BTreeSet<String> = sources.keys().cloned().collect();
        let codes: BTreeMap<&String, String> = sources
            .iter()
            .map(|(module, text)| (module, code_of(text)))
            .collect();
        let reexports = reexports(&codes, &known);
        Self {
            known,
            codes,
            reexports,
        }
    }
}

/// Every way `sources` (module path → its text; `lib` is `lib.rs`) leaves `table`.
fn violations(table: &FloorTable, sources: &BTreeMap<String, String>) -> Vec<String> {
    let Read {
        known,
        codes,
        reexports,
    } = Read::of(sources);
    let mut wrong = Vec::new();
    for module in known.iter().filter(|m| !is_root(m)) {
        if !table.floors.contains_key(module) {
            wrong.push(format!("{module} has no row"));
        }
    }
    for module in table.floors.keys().filter(|m| !known.contains(*m)) {
        wrong.push(format!("the table's {module} is no module of src/"));
    }
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, code) in &codes {
        if is_root(module) {
            continue;
        }
        let floor = table.floors.get(*module);
        for path in imports_in(code, module, &children_of(module, &known)) {
            let (target, via) = resolve(&path, &known, &reexports);
            if target.is_empty() || &target == *module {
                continue;
            }
            edges
                .entry((*module).clone())
                .or_default()
                .insert(target.clone());
            let (Some(floor), Some(target_floor)) = (floor, table.floors.get(&target)) else {
                continue;
            };
            if target_floor > floor {
                let via = via.map(|v| format!(" through {v}")).unwrap_or_default();
                wrong.push(format!(
                    "{module} (floor {floor}) imports {target} (floor {target_floor}){via}"
                ));
            }
        }
        if table.pure.contains(*module) {
            for name in impure_names(code, module, &known, &reexports) {
                wrong.push(format!("{module} is pure but names {name}"));
            }
        }
    }
    let mut owned = table.owned_circles.clone();
    for (members, circle) in circles(&edges) {
        match owned.iter().position(|listed| *listed == members) {
            Some(at) => {
                owned.remove(at);
            }
            None => wrong.push(format!("a circle of imports: {}", circle.join(" -> "))),
        }
    }
    for gone in owned {
        let gone: Vec<String> = gone.into_iter().collect();
        wrong.push(format!(
            "the circle of {} is listed as still to break but is not (or not so) in the code: \
             update the list",
            gone.join(", ")
        ));
    }
    wrong
}

fn is_root(module: &str) -> bool {
    module == "lib" || module == "main"
}

fn children_of(module: &str, known: &BTreeSet<String>) -> BTreeSet<String> {
    known
        .iter()
        .filter_map(|other| other.strip_prefix(&format!("{module}::")))
        .filter(|rest| !rest.contains("::"))
        .map(str::to_owned)
        .collect()
}

/// What each module re-exports with `pub use`: (module, name) → the module the name comes from.
/// `lib` re-exports as the crate root.
fn reexports(
    codes: &BTreeMap<&String, String>,
    known: &BTreeSet<String>,
) -> BTreeMap<(String, String), String> {
    let mut found = BTreeMap::new();
    for (module, code) in codes {
        let as_seen = if module.as_str() == "lib" {
            ""
        } else {
            module.as_str()
        };
        let children = children_of(if as_seen.is_empty() { "" } else { as_seen }, known);
        // A statement may span lines (`pub use model::{\n A,\n B,\n};`).
        for (at, _) in code.match_indices("pub use ") {
            if preceded_by_word(code, at) {
                continue;
            }
            let rest = &code[at + "pub use ".len()..];
            let path: String = rest[..rest.find(';').unwrap_or(rest.len())]
                .split_whitespace()
                .collect();
            let path = path.as_str();
            let mut paths = BTreeSet::new();
            if let Some(rest) = path.strip_prefix("crate::") {
                paths_at(rest, "", &mut paths);
            } else if let Some(rest) = path.strip_prefix("self::") {
                paths_at(rest, as_seen, &mut paths);
            } else if children.contains(path.split("::").next().unwrap_or_default())
                || as_seen.is_empty()
            {
                paths_at(path, as_seen, &mut paths);
            }
            for full in paths {
                let name = full.rsplit("::").next().unwrap_or_default().to_owned();
                let from = longest_known(&full, known);
                if !from.is_empty() {
                    found.insert((as_seen.to_owned(), name), from);
                }
            }
        }
    }
    found
}

/// The module `path` is charged to, and the re-export it went through, if any.
fn resolve(
    path: &str,
    known: &BTreeSet<String>,
    reexports: &BTreeMap<(String, String), String>,
) -> (String, Option<String>) {
    let module = longest_known(path, known);
    let rest = if module.is_empty() {
        path
    } else {
        path.strip_prefix(&module)
            .map(|rest| rest.trim_start_matches(':'))
            .unwrap_or_default()
    };
    let name = rest.split("::").next().unwrap_or_default();
    let mut via = None;
    let mut target = module;
    // A re-export of a re-export (`lib` → `lock` → `lock::machine`) is followed to its end.
    for _ in 0..4 {
        let Some(from) = reexports.get(&(target.clone(), name.to_owned())) else {
            break;
        };
        let shown = if target.is_empty() { "lib" } else { &target };
        via.get_or_insert_with(|| format!("{shown}'s re-export of {name}"));
        target = from.clone();
    }
    (target, via)
}

/// The forbidden names in a pure module's code.
fn impure_names(
    code: &str,
    module: &str,
    known: &BTreeSet<String>,
    reexports: &BTreeMap<(String, String), String>,
) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for path in imports_in(code, module, &children_of(module, known)) {
        let (target, _) = resolve(&path, known, reexports);
        if target == "zk" || target.starts_with("zk::") {
            found.insert("crate::zk".to_owned());
        }
    }
    let mut std_paths = BTreeSet::new();
    for (at, _) in code.match_indices("std::") {
        if !preceded_by_ident(code, at) {
            paths_at(&code[at + "std::".len()..], "std", &mut std_paths);
        }
    }
    for name in IMPURE.iter().filter(|name| !name.starts_with("crate::")) {
        let in_code = code.match_indices(name).any(|(at, _)| {
            !preceded_by_word(code, at) && !followed_by_ident(code, at + name.len())
        });
        let in_std = std_paths
            .iter()
            .any(|path| path == name || path.starts_with(&format!("{name}::")));
        if in_code || in_std {
            found.insert((*name).to_owned());
        }
    }
    found
}

fn preceded_by_ident(text: &str, at: usize) -> bool {
    text[..at]
        .chars()
        .next_back()
        .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':')
}

/// A letter, digit or `_` just before `at`: `at` is inside a longer name.
fn preceded_by_word(text: &str, at: usize) -> bool {
    text[..at]
        .chars()
        .next_back()
        .is_some_and(|c| c.is_alphanumeric() || c == '_')
}

fn followed_by_ident(text: &str, at: usize) -> bool {
    text[at..]
        .chars()
        .next()
        .is_some_and(|c| c.is_alphanumeric() || c == '_')
}

/// Every module of `src/` by its path (`fire::driver::listing`; `lib.rs` is `lib`), with its
/// text. Test files are not part of the structure a build has.
fn read_sources(src: &Path) -> BTreeMap<String, String> {
    let mut files = Vec::new();
    collect_rs(src, &mut files);
    let mut sources = BTreeMap::new();
    for path in files {
        let relative = path.strip_prefix(src).expect("below src");
        let mut parts: Vec<String> = relative
            .with_extension("")
            .iter()
            .map(|part| part.to_string_lossy().into_owned())
            .collect();
        if parts.iter().any(|part| part == "tests") {
            continue;
        }
        if parts.len() > 1 && parts.last().is_some_and(|last| last == "mod") {
            parts.pop();
        }
        let text = std::fs::read_to_string(&path).expect("readable source");
        sources.insert(parts.join("::"), text);
    }
    sources
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

/// `text` as code: comments, the contents of literals and test modules left out (they may name
/// any module).
fn code_of(text: &str) -> String {
    let code: String = text
        .lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .map(|line| format!("{line}\n"))
        .collect();
    without_test_modules(&blank_literals(&code))
}

/// The module paths `code` (of `module`) refers to. Each is as long as the text spells it
/// (`run::Claim`); the caller cuts it to a known module.
fn imports_in(code: &str, module: &str, children: &BTreeSet<String>) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    // The binary's modules (`main`, `cli`) name the library as `zkcron::`.
    for root in ["crate::", "zkcron::"] {
        for (at, _) in code.match_indices(root) {
            if !preceded_by_ident(code, at) {
                paths_at(&code[at + root.len()..], "", &mut found);
            }
        }
    }
    for (at, _) in code.match_indices("super::") {
        if code[..at].ends_with("::") || code[..at].ends_with("super") {
            continue;
        }
        let mut base: Vec<&str> = module.split("::").collect();
        let mut rest = &code[at..];
        while let Some(after) = rest.strip_prefix("super::") {
            base.pop();
            rest = after;
        }
        paths_at(rest, &base.join("::"), &mut found);
    }
    // A child module named by its bare name: in a `use`, or in a path in code (`runs::Runs`).
    for child in children {
        let named = format!("{child}::");
        for (at, _) in code.match_indices(&named) {
            let in_self = code[..at].ends_with("self::") && !code[..at].ends_with("::self::");
            if !preceded_by_ident(code, at) || in_self {
                paths_at(&code[at..], module, &mut found);
            }
        }
    }
    found
}

/// Reads the path(s) at the start of `text` (`a::b::C`, `{a::X, b::{Y, Z}}`), prefixed by `base`.
fn paths_at(text: &str, base: &str, found: &mut BTreeSet<String>) {
    let join = |segments: &str| {
        if segments.is_empty() {
            base.to_owned()
        } else if base.is_empty() {
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

/// The longest module of `known` that `path` starts with (`run::Claim` → `run`); empty for the
/// crate root.
fn longest_known(path: &str, known: &BTreeSet<String>) -> String {
    let segments: Vec<&str> = path.split("::").collect();
    (1..=segments.len())
        .rev()
        .map(|n| segments[..n].join("::"))
        .find(|candidate| known.contains(candidate) && !is_root(candidate))
        .unwrap_or_default()
}

/// Every circle in `edges`: each group of modules that reach each other, and one path around it.
fn circles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<(BTreeSet<String>, Vec<String>)> {
    let reaches = |from: &String| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(node) = todo.pop() {
            for next in edges.get(&node).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    todo.push(next.clone());
                }
            }
        }
        seen
    };
    let reach: BTreeMap<&String, BTreeSet<String>> =
        edges.keys().map(|node| (node, reaches(node))).collect();
    let mut placed = BTreeSet::new();
    let mut found = Vec::new();
    for (node, reached) in &reach {
        if placed.contains(*node) || !reached.contains(*node) {
            continue;
        }
        let group: BTreeSet<String> = reached
            .iter()
            .filter(|other| reach.get(other).is_some_and(|back| back.contains(*node)))
            .cloned()
            .collect();
        let mut path = path_around(node, &group, edges);
        let others: Vec<&str> = group
            .iter()
            .filter(|member| !path.contains(member))
            .map(String::as_str)
            .collect();
        if !others.is_empty() {
            path.push(format!("(and through {})", others.join(", ")));
        }
        placed.extend(group.iter().cloned());
        found.push((group, path));
    }
    found
}

/// The shortest path from `start` back to itself inside `group`.
fn path_around(
    start: &str,
    group: &BTreeSet<String>,
    edges: &BTreeMap<String, BTreeSet<String>>,
) -> Vec<String> {
    let mut came_from: BTreeMap<String, String> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start.to_owned()]);
    while let Some(node) = queue.pop_front() {
        for next in edges.get(&node).into_iter().flatten() {
            if !group.contains(next) || came_from.contains_key(next) {
                continue;
            }
            came_from.insert(next.clone(), node.clone());
            if next == start {
                let mut path = vec![start.to_owned()];
                let mut at = node.clone();
                while at != start {
                    path.push(at.clone());
                    at = came_from[&at].clone();
                }
                path.push(start.to_owned());
                path.reverse();
                return path;
            }
            queue.push_back(next.clone());
        }
    }
    vec![start.to_owned()]
}

/// docs/ARCHITECTURE.md's doors: who may name what, and the modules still past a door.
#[test]
fn the_code_keeps_the_doors_of_architecture_md() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc =
        std::fs::read_to_string(root.join("docs/ARCHITECTURE.md")).expect("docs/ARCHITECTURE.md");
    let doors = Doors::parse(&doc).unwrap_or_else(|why| panic!("docs/ARCHITECTURE.md: {why}"));
    let wrong = doors.violations(&read_sources(&root.join("src")));
    assert!(
        wrong.is_empty(),
        "the code leaves the doors of docs/ARCHITECTURE.md (move the code behind its door; a \
         module that no longer names a thing comes off its list):\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_doors_checker_catches_a_new_module_past_a_door_and_a_debt_paid() {
    let doc = "### Doors\n\n| name | may be named by | still to move behind the door |\n\
               | --- | --- | --- |\n\
               | `zookeeper_client` | `zk` | `ledger` |\n\
               | `crate::zk` | `zk`, `ledger` | `status` |\n\
               | `Trail` | `audit`, `command` | `moved` |\n";
    let doors = Doors::parse(doc).expect("a valid table");
    let sources: BTreeMap<String, String> = [
        ("zk", "use zookeeper_client::Client;\n"),
        // Listed, and still naming it: fine. `status` no longer names the zk module: listed
        // for nothing.
        (
            "ledger",
            "use zookeeper_client::Client;\nuse crate::zk::tally;\n",
        ),
        ("status", "use crate::ledger;\n"),
        // New past two doors, and the trail written from elsewhere.
        (
            "http",
            "fn f(c: zookeeper_client::Client) { crate::zk::connect(); }\n",
        ),
        (
            "daemon",
            "use crate::audit::Trail;\n#[cfg(test)]\nmod tests { use crate::zk; }\n",
        ),
        ("audit", "pub struct Trail;\n"),
        ("command", "use crate::audit::Trail;\n"),
    ]
    .into_iter()
    .map(|(module, text)| (module.to_owned(), text.to_owned()))
    .collect();
    let mut wrong = doors.violations(&sources);
    wrong.sort();
    assert_eq!(
        wrong,
        [
            "daemon names Trail: only audit, command may",
            "http names crate::zk: only ledger, zk may",
            "http names zookeeper_client: only zk may",
            "status is listed as still past the door of crate::zk but no longer names it: take it off the list",
            "the door of Trail's moved is no module of src/",
        ]
    );
}

/// docs/ARCHITECTURE.md's "### Doors" table: for each name, the modules that may name it, and
/// those that still do but should not (a debt that can only shrink).
struct Doors {
    rows: Vec<Door>,
}

struct Door {
    /// A crate (`zookeeper_client`), one of ours by its path (`crate::zk`: any import that
    /// resolves to it or below), or a name (`Trail`).
    name: String,
    allowed: BTreeSet<String>,
    pending: BTreeSet<String>,
}

impl Doors {
    fn parse(doc: &str) -> Result<Self, String> {
        let rows: Vec<&str> = doc
            .lines()
            .skip_while(|line| *line != "### Doors")
            .skip_while(|line| !line.starts_with("| name | may be named by |"))
            .skip(2)
            .take_while(|line| line.starts_with('|'))
            .collect();
        if rows.is_empty() {
            return Err("no `| name | may be named by | … |` table under \"### Doors\"".into());
        }
        let mut doors = Vec::new();
        for row in rows {
            let cells: Vec<&str> = row.trim_matches('|').split('|').map(str::trim).collect();
            let [name, allowed, pending] = cells[..] else {
                return Err(format!("a row without three cells: {row}"));
            };
            doors.push(Door {
                name: name.trim_matches('`').to_owned(),
                allowed: modules_in_cell(allowed).into_iter().collect(),
                pending: modules_in_cell(pending).into_iter().collect(),
            });
        }
        Ok(Self { rows: doors })
    }

    fn violations(&self, sources: &BTreeMap<String, String>) -> Vec<String> {
        let Read {
            known,
            codes,
            reexports,
        } = Read::of(sources);
        let mut wrong = Vec::new();
        for door in &self.rows {
            for gone in door.allowed.union(&door.pending) {
                if !known.contains(gone) {
                    wrong.push(format!(
                        "the door of {}'s {gone} is no module of src/",
                        door.name
                    ));
                }
            }
            for (module, code) in codes.iter().filter(|(m, _)| !is_root(m)) {
                let names = match door.name.strip_prefix("crate::") {
                    Some(target) => imports_in(code, module, &children_of(module, &known))
                        .iter()
                        .map(|path| resolve(path, &known, &reexports).0)
                        .any(|to| to == target || to.starts_with(&format!("{target}::"))),
                    None => code.match_indices(door.name.as_str()).any(|(at, _)| {
                        !preceded_by_word(code, at)
                            && !followed_by_ident(code, at + door.name.len())
                    }),
                };
                let listed = door.pending.contains(*module);
                if names && !listed && !door.allowed.contains(*module) {
                    let allowed: Vec<&str> = door.allowed.iter().map(String::as_str).collect();
                    wrong.push(format!(
                        "{module} names {}: only {} may",
                        door.name,
                        allowed.join(", ")
                    ));
                }
                if listed && !names {
                    wrong.push(format!(
                        "{module} is listed as still past the door of {} but no longer names \
                         it: take it off the list",
                        door.name
                    ));
                }
            }
        }
        wrong
    }
}
