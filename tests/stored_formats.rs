//! Every document an earlier version of zkcron stored, read by this one (issue 34,
//! docs/UPGRADING.md "Stored formats"): the fixtures under `tests/fixtures/<commit>/` were written
//! by that commit's zkcron (`scripts/capture-fixtures`). Each is parsed with the code a node of
//! this version reads it with, and rewritten wherever this version rewrites that document, with
//! every field it had kept. Documents of a newer format than this version's are left alone.
//! Pure: no ZooKeeper.

use std::path::{Path, PathBuf};

use zkcron::control::{BackfillRequest, Pause, ReleaseRequest};
use zkcron::delayed::submission::{self, FormatError, Stored, SubmissionId};
use zkcron::ids::{FencingToken, NodeId};
use zkcron::ledger::limits::LeaseHolder;
use zkcron::lock::node::{EpochData, OwnerInfo};
use zkcron::run::{RecordError, RunRecord};

/// The versions whose documents this one must read; `scripts/capture-fixtures` adds one per
/// change of a stored format.
const VERSIONS: [&str; 2] = [
    // 0.1.0: the first version users ran.
    "e495996",
    // Ledger format 2 (a submission's run kept open by its record), the audit entry, the lease.
    "0b1f728",
];

fn fixtures() -> Vec<(String, PathBuf)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut found = Vec::new();
    for version in VERSIONS {
        let dir = root.join(version);
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|err| panic!("fixtures of {version} at {}: {err}", dir.display()))
            .map(|entry| entry.expect("fixture entry").path())
            .collect();
        files.sort();
        assert!(
            files.len() >= 8,
            "{version}: only {} fixtures; capture them again",
            files.len()
        );
        found.extend(files.into_iter().map(|file| (version.to_owned(), file)));
    }
    found
}

/// The JSON object in `data`.
fn object(data: &[u8]) -> serde_json::Map<String, serde_json::Value> {
    serde_json::from_slice(data).expect("a JSON object")
}

/// Every field of `before` is in `after` with the same value, except those in `changed`.
fn keeps_every_field(
    before: &serde_json::Map<String, serde_json::Value>,
    after: &serde_json::Map<String, serde_json::Value>,
    changed: &[&str],
    what: &str,
) {
    for (key, value) in before {
        if changed.contains(&key.as_str()) {
            continue;
        }
        assert_eq!(after.get(key), Some(value), "{what}: field {key} kept");
    }
}

fn header(data: &[u8]) -> serde_json::Map<String, serde_json::Value> {
    let end = data
        .iter()
        .position(|b| *b == b'\n')
        .expect("a header line");
    object(&data[..end])
}

#[test]
fn every_document_an_earlier_version_stored_is_read_and_rewritten_keeping_its_fields() {
    let mut kinds = std::collections::BTreeSet::new();
    for (version, file) in fixtures() {
        let name = file
            .file_name()
            .and_then(|name| name.to_str())
            .expect("a file name")
            .to_owned();
        let data = std::fs::read(&file).expect("read fixture");
        let what = format!("{version}/{name}");
        match name.split('.').next().unwrap_or_default() {
            kind if kind.starts_with("run-record") => {
                let record = RunRecord::parse(&data).unwrap_or_else(|err| panic!("{what}: {err}"));
                assert_eq!(record.format, 1, "{what}");
                // What a final-record write, a mark or a next attempt starts from: the record
                // as this version writes it back.
                keeps_every_field(&object(&data), &object(&record.to_bytes()), &[], &what);
                let next =
                    record.next_attempt((&NodeId::new("n9"), "10.9.9.9"), FencingToken(99), 1);
                assert_eq!(
                    (next.run_id.as_str(), next.job.as_str()),
                    (record.run_id.as_str(), record.job.as_str()),
                    "{what}"
                );
                kinds.insert("run-record");
            }
            "submission" | "submission-triggered" => {
                let Ok(Stored::Request(request)) = Stored::parse(&data) else {
                    panic!("{what}: not a request");
                };
                let moved = submission::moved(&data, 7).expect("moved");
                keeps_every_field(&header(&data), &header(&moved), &["due_unix_ms"], &what);
                let Ok(Stored::Request(after)) = Stored::parse(&moved) else {
                    panic!("{what}: moved, not a request");
                };
                assert_eq!((after.due_unix_ms, &after.payload), (7, &request.payload));
                let remembered = submission::tombstone_of(&data, 9).expect("tombstone");
                keeps_every_field(&header(&data), &header(&remembered), &[], &what);
                let Ok(Stored::Tombstone(tombstone)) = Stored::parse(&remembered) else {
                    panic!("{what}: not remembered as a tombstone");
                };
                assert!(tombstone.same_request(&request), "{what}");
                kinds.insert("submission");
            }
            "submission-tombstone" => {
                assert!(
                    matches!(Stored::parse(&data), Ok(Stored::Tombstone(_))),
                    "{what}"
                );
                kinds.insert("submission-tombstone");
            }
            "member" | "lock" => {
                let owner = OwnerInfo::parse(&data).unwrap_or_else(|err| panic!("{what}: {err}"));
                assert!(!owner.version.is_empty(), "{what}");
                assert!(OwnerInfo::parse_brief(&data).is_some(), "{what}");
                kinds.insert("member");
            }
            "epoch" => {
                EpochData::parse(&data).unwrap_or_else(|err| panic!("{what}: {err}"));
                kinds.insert("epoch");
            }
            "pause" => {
                Pause::parse(&data).unwrap_or_else(|err| panic!("{what}: {err}"));
                kinds.insert("pause");
            }
            "release-request" => {
                let request =
                    ReleaseRequest::parse(&data).unwrap_or_else(|err| panic!("{what}: {err}"));
                assert!(!request.owner.as_str().is_empty(), "{what}");
                kinds.insert("release-request");
            }
            "backfill-request" => {
                let request =
                    BackfillRequest::parse(&data).unwrap_or_else(|err| panic!("{what}: {err}"));
                assert!(!request.ticks.is_empty(), "{what}");
            }
            "audit-entry" => {
                let entry: zkcron::audit::AuditEntry =
                    serde_json::from_slice(&data).unwrap_or_else(|err| panic!("{what}: {err}"));
                assert!(!entry.action.is_empty() && !entry.by.is_empty(), "{what}");
            }
            "lease" => {
                serde_json::from_slice::<LeaseHolder>(&data)
                    .unwrap_or_else(|err| panic!("{what}: {err}"));
            }
            "forget-list" => {
                let text = String::from_utf8(data).expect("ids as text");
                for line in text.lines() {
                    SubmissionId::parse(line).unwrap_or_else(|err| panic!("{what}: {err}"));
                }
            }
            "guard" => {
                let run_id = String::from_utf8(data).expect("a run id");
                assert!(!run_id.is_empty(), "{what}");
            }
            _ => panic!("{what}: a document this test does not know; teach it"),
        }
    }
    for kind in [
        "run-record",
        "submission",
        "submission-tombstone",
        "member",
        "epoch",
        "pause",
        "release-request",
    ] {
        assert!(kinds.contains(kind), "no fixture of a {kind}");
    }
}

#[test]
fn documents_of_a_newer_format_are_read_for_show_and_never_handed_out_to_rewrite() {
    // As a later zkcron might write them: a format this one does not know, fields it does not
    // know, a status it does not know.
    let record = br#"{"format":2,"job":"extract","run_id":"extract-1000","node_id":"n1","ip":"10.0.0.1","fencing_token":4,"scheduled_unix_ms":1000,"claimed_unix_ms":900,"status":"succeeded","attempt":1,"children":["load"]}"#;
    assert!(matches!(
        RunRecord::parse(record),
        Err(RecordError::Newer { format: 2, .. })
    ));
    let shown = RunRecord::parse_to_show(record).expect("shown");
    assert_eq!(shown.unknown["children"][0], "load");
    let held = br#"{"format":2,"job":"extract","status":"held_by_calendar"}"#;
    assert!(matches!(
        RunRecord::parse(held),
        Err(RecordError::Newer {
            format: 2,
            readable: None
        })
    ));

    let submission =
        b"{\"v\":2,\"job\":\"deliver\",\"due_unix_ms\":1,\"submitted_unix_ms\":1}\npayload";
    assert!(matches!(
        Stored::parse(submission),
        Err(FormatError::Version(2))
    ));
    assert!(submission::moved(submission, 5).is_err());
    assert!(submission::tombstone_of(submission, 5).is_err());

    let backfill = br#"{"format":2,"job":"a","ticks":[1],"by":"x","at_unix_ms":1}"#;
    assert!(zkcron::formats::format_of(backfill) > Some(zkcron::formats::BACKFILL_REQUEST));
}
