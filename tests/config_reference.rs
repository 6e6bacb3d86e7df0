//! docs/CONFIG.md names exactly the keys the parser accepts, section by section (issue 24): a key
//! added to the parser without a line in the reference, or a line for a key the parser refuses,
//! fails here.
//!
//! The parser's keys are read from its own refusal of an unknown key ("unknown field `zz`,
//! expected one of `a`, `b`"), so nothing here lists them a second time.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

const BASE: &str = "[zookeeper]\nconnect = \"127.0.0.1:1\"\n[lock]\nname = \"g\"\n";

/// The reference's keys per section, from its tables' first column.
fn documented() -> BTreeMap<String, BTreeSet<String>> {
    let text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/CONFIG.md"))
            .expect("docs/CONFIG.md");
    let mut sections: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut section = None;
    for line in text.lines() {
        if let Some(heading) = line.strip_prefix("## `[") {
            let name = heading.trim_start_matches('[');
            section = name.split(']').next().map(str::to_owned);
            sections
                .entry(section.clone().unwrap_or_default())
                .or_default();
            continue;
        }
        let (Some(section), Some(row)) = (&section, line.strip_prefix("| `")) else {
            continue;
        };
        let key = row.split('`').next().unwrap_or_default();
        // `tls.ca` belongs to the subtable `zookeeper.tls`.
        match key.rsplit_once('.') {
            Some((table, field)) => sections
                .entry(format!("{section}.{table}"))
                .or_default()
                .insert(field.to_owned()),
            None => sections
                .entry(section.clone())
                .or_default()
                .insert(key.to_owned()),
        };
    }
    sections
}

/// The keys the parser accepts where `text` puts an unknown one.
fn accepted(text: &str) -> BTreeSet<String> {
    let err = match zkcron::config::parse(Path::new("ref.toml"), text, &|_| None) {
        Ok(_) => panic!("an unknown key was accepted:\n{text}"),
        Err(err) => err.render(),
    };
    let list = err
        .split("expected ")
        .nth(1)
        .and_then(|rest| rest.lines().next())
        .unwrap_or_else(|| panic!("no list of keys in the refusal: {err}"));
    // "`a`, `b` or `c`": every quoted word.
    list.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_reference_names_every_key_the_parser_accepts_and_no_other() {
    let in_zookeeper = |line: &str| BASE.replace("[lock]", &format!("{line}\n[lock]"));
    let parser: BTreeMap<&str, String> = BTreeMap::from([
        ("zookeeper", in_zookeeper("zz_unknown = 1")),
        (
            "zookeeper.tls",
            in_zookeeper("tls = { ca = \"/x\", zz_unknown = 1 }"),
        ),
        (
            "zookeeper.sasl",
            in_zookeeper("sasl = { mechanism = \"digest-md5\", username = \"u\", zz_unknown = 1 }"),
        ),
        ("lock", format!("{BASE}zz_unknown = 1\n")),
        ("log", format!("{BASE}[log]\nzz_unknown = 1\n")),
        (
            "http",
            format!("{BASE}[http]\nlisten = \"127.0.0.1:1\"\nzz_unknown = 1\n"),
        ),
        (
            "limit",
            format!("{BASE}[[limit]]\nname = \"a\"\nmax = 1\nzz_unknown = 1\n"),
        ),
        (
            "calendar",
            format!(
                "{BASE}[[calendar]]\nname = \"a\"\nhours = [\"09:00-17:00\"]\nzz_unknown = 1\n"
            ),
        ),
        (
            "job",
            format!("{BASE}[[job]]\nname = \"a\"\nshell = \"true\"\nzz_unknown = 1\n"),
        ),
        (
            "job.http",
            format!(
                "{BASE}[[job]]\nname = \"a\"\nhttp = {{ url = \"http://h/\", zz_unknown = 1 }}\n"
            ),
        ),
        ("node", format!("{BASE}[node]\nzz_unknown = 1\n")),
        ("delayed", format!("{BASE}[delayed]\nzz_unknown = 1\n")),
        ("defaults", format!("{BASE}[defaults]\nzz_unknown = 1\n")),
        (
            "job.on_failure_webhook",
            format!(
                "{BASE}[[job]]\nname = \"a\"\nshell = \"true\"\non_failure_webhook = {{ url = \"http://h/\", zz_unknown = 1 }}\n"
            ),
        ),
        (
            "group",
            format!("{BASE}[[group]]\nname = \"a\"\nzz_unknown = 1\n"),
        ),
    ]);
    let documented = documented();
    let mut wrong = Vec::new();
    for (section, text) in &parser {
        let accepted = accepted(text);
        let listed = documented.get(*section).cloned().unwrap_or_default();
        for key in accepted.difference(&listed) {
            wrong.push(format!(
                "[{section}] {key}: accepted by the parser, missing from docs/CONFIG.md"
            ));
        }
        for key in listed.difference(&accepted) {
            wrong.push(format!(
                "[{section}] {key}: in docs/CONFIG.md, refused by the parser"
            ));
        }
    }
    let sections = accepted(&format!("{BASE}[zz_unknown]\n"));
    let headings: BTreeSet<String> = documented
        .keys()
        .filter(|section| !section.contains('.'))
        .cloned()
        .collect();
    assert_eq!(
        headings, sections,
        "docs/CONFIG.md has a heading for each section"
    );
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
