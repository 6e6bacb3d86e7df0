//! Bad input, fuzzed (issue "Faster recovery and proof under faults"): every parser of text from
//! an operator or bytes from ZooKeeper, fed arbitrary and mutated input, answers with a value or
//! a typed error and never panics. `cargo fuzz` needs a nightly toolchain this project does not
//! have, so this is proptest over arbitrary bytes and over mutations of the seed corpus in
//! `tests/fuzz_corpus/` (real examples of each format). Bounded: a few seconds in all.

use std::path::Path;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use zkcron::delayed::{DueBucket, Shard, Submission, SubmissionId};
use zkcron::layout::{RecordName, parse_tick_node_name};
use zkcron::lock::node::{EpochData, OwnerInfo};
use zkcron::run::RunRecord;
use zkcron::schedule::{Schedule, parse_timezone};

/// Cases per parser; with the mutations below, about a second per parser in a debug build.
const CASES: u32 = 2_000;

fn corpus(name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fuzz_corpus")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|err| panic!("seed {}: {err}", path.display()))
}

/// One edit of a seed: what fuzzers do first, since most arbitrary bytes fail at the first one.
#[derive(Debug, Clone)]
enum Edit {
    Flip { at: usize, byte: u8 },
    Insert { at: usize, bytes: Vec<u8> },
    Delete { at: usize, len: usize },
    Splice { at: usize, from: usize, len: usize },
}

fn edit() -> impl Strategy<Value = Edit> {
    let at = any::<usize>();
    prop_oneof![
        (at, any::<u8>()).prop_map(|(at, byte)| Edit::Flip { at, byte }),
        (at, prop::collection::vec(any::<u8>(), 1..8))
            .prop_map(|(at, bytes)| Edit::Insert { at, bytes }),
        (at, 1..16_usize).prop_map(|(at, len)| Edit::Delete { at, len }),
        (at, any::<usize>(), 1..32_usize).prop_map(|(at, from, len)| Edit::Splice {
            at,
            from,
            len
        }),
    ]
}

fn apply(seed: &[u8], edits: &[Edit]) -> Vec<u8> {
    let mut out = seed.to_vec();
    for edit in edits {
        let n = out.len().max(1);
        match edit {
            Edit::Flip { at, byte } => {
                if let Some(b) = out.get_mut(at % n) {
                    *b = *byte;
                }
            }
            Edit::Insert { at, bytes } => {
                let at = at % (out.len() + 1);
                out.splice(at..at, bytes.iter().copied());
            }
            Edit::Delete { at, len } => {
                let at = at % n;
                let end = (at + len).min(out.len());
                if at < end {
                    out.drain(at..end);
                }
            }
            Edit::Splice { at, from, len } => {
                // A piece of the input copied elsewhere: repeated keys, nested brackets.
                let from = from % n;
                let piece: Vec<u8> = out.iter().skip(from).take(*len).copied().collect();
                let at = at % (out.len() + 1);
                out.splice(at..at, piece);
            }
        }
    }
    out
}

/// Runs `check` on arbitrary bytes and on mutations of `seed`.
fn fuzz(seed: &[u8], check: impl Fn(&[u8])) {
    fuzz_seeds(&[seed.to_vec()], CASES, check);
}

/// Runs `check` `cases` times, on arbitrary bytes and on mutations of one of `seeds`.
fn fuzz_seeds(seeds: &[Vec<u8>], cases: u32, check: impl Fn(&[u8])) {
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let mutated = (
        prop::sample::select(seeds.to_vec()),
        prop::collection::vec(edit(), 1..6),
    )
        .prop_map(|(seed, edits)| apply(&seed, &edits));
    let input = prop_oneof![prop::collection::vec(any::<u8>(), 0..256), mutated];
    runner
        .run(&input, |bytes| {
            check(&bytes);
            Ok(())
        })
        .unwrap_or_else(|failure| panic!("{failure}"));
}

#[test]
fn the_seeds_are_valid_examples_of_their_formats() {
    // A fuzzer mutating an invalid seed tests only the first error path.
    let config = String::from_utf8(corpus("zkcron.toml")).expect("utf-8");
    zkcron::config::parse(Path::new("zkcron.toml"), &config, &|_| None).expect("config seed");
    RunRecord::parse(&corpus("record.json")).expect("record seed");
    OwnerInfo::parse(&corpus("owner.json")).expect("owner seed");
    EpochData::parse(&corpus("epoch.json")).expect("epoch seed");
    Submission::parse(&corpus("submission.json")).expect("submission seed");
    for line in String::from_utf8(corpus("cron.txt"))
        .expect("utf-8")
        .lines()
    {
        Schedule::parse(line, chrono_tz::UTC).unwrap_or_else(|err| panic!("{line}: {err}"));
    }
    for line in String::from_utf8(corpus("timezone.txt"))
        .expect("utf-8")
        .lines()
    {
        parse_timezone(line).unwrap_or_else(|err| panic!("{line}: {err}"));
    }
}

#[test]
fn any_config_text_is_a_config_or_problems_with_line_and_column() {
    fuzz(&corpus("zkcron.toml"), |bytes| {
        let text = String::from_utf8_lossy(bytes);
        if let Err(err) = zkcron::config::parse(Path::new("f.toml"), &text, &|_| None) {
            assert!(!err.problems.is_empty(), "an error names a problem");
            let rendered = err.render();
            for problem in &err.problems {
                if let Some(span) = &problem.span {
                    let (line, col) = err.line_col(span.start);
                    assert!(line >= 1 && col >= 1);
                    assert!(
                        rendered.contains(&format!("f.toml:{line}:{col}")),
                        "{rendered}"
                    );
                }
            }
        }
    });
}

#[test]
fn any_bytes_from_zookeeper_are_a_record_or_foreign_never_a_panic() {
    fuzz(&corpus("record.json"), |bytes| {
        if let Ok(record) = RunRecord::parse(bytes) {
            // What parses serialises again and reads back the same.
            let again = serde_json::to_vec(&record).expect("serialise");
            assert_eq!(RunRecord::parse(&again).ok(), Some(record));
        }
    });
    fuzz(&corpus("owner.json"), |bytes| {
        let _ = OwnerInfo::parse(bytes);
    });
    fuzz(&corpus("epoch.json"), |bytes| {
        let _ = EpochData::parse(bytes);
    });
    fuzz(&corpus("submission.json"), |bytes| {
        let _ = Submission::parse(bytes);
    });
}

#[test]
fn any_child_name_is_read_or_skipped_never_a_panic() {
    fuzz(b"1893456001500-order-42", |bytes| {
        let name = String::from_utf8_lossy(bytes);
        let _ = RecordName::parse(&name);
        let _ = parse_tick_node_name(&name);
        let _ = SubmissionId::parse(&name);
        let _ = Shard::parse(&name);
        let mut parts = name.splitn(2, '/');
        let (day, second) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        let _ = DueBucket::parse(day, second);
    });
}

#[test]
fn any_cron_expression_and_zone_is_a_schedule_or_an_error() {
    let seeds = String::from_utf8(corpus("cron.txt")).expect("utf-8");
    let seeds: Vec<Vec<u8>> = seeds.lines().map(|l| l.as_bytes().to_vec()).collect();
    // A parse builds the schedule's tables (~5 ms in a debug build): fewer cases than the rest.
    fuzz_seeds(&seeds, CASES / 4, |bytes| {
        let text = String::from_utf8_lossy(bytes);
        if let Ok(schedule) = Schedule::parse(&text, chrono_tz::Europe::Berlin) {
            // Evaluating it must not panic either, across a DST change (2024-03-31, Berlin).
            let mut at = chrono::DateTime::from_timestamp(1_711_846_800, 0).unwrap_or_default();
            for _ in 0..3 {
                match schedule.next_after(at) {
                    Some(next) => {
                        assert!(next > at, "{text:?}: {next} after {at}");
                        at = next;
                    }
                    None => break,
                }
            }
        }
    });
    fuzz(&corpus("timezone.txt"), |bytes| {
        let _ = parse_timezone(&String::from_utf8_lossy(bytes));
    });
}
