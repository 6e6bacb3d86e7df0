//! A submission as stored in ZooKeeper (docs/DELAYED.md): its id, its znode data, and where
//! its due time and id put it in the bucketed tree.
//!
//! Owns: the submission's wire format (one JSON header line, a newline, the payload bytes), the
//! tombstone that stands for a finished submission while its id is remembered, id rules, the
//! payload limit, the shard of an id and the bucket of a due time.
//! Must not: do I/O (that is `ledger::submissions`) or decide when anything fires.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::ids::JobName;

/// The largest payload a submission may carry: a job's input, not a bulk transfer.
pub const MAX_PAYLOAD: usize = 64 * 1024;
/// The longest submission id; with the shard split this bounds every `getChildren` reply
/// (DESIGN.md "ZooKeeper layout").
pub const MAX_ID_LEN: usize = 64;
/// Ids are spread over this many shards, by CRC-32 of the id.
pub const SHARDS: u32 = 256;
const MS_PER_DAY: i64 = 86_400_000;
/// The version of the header format this build writes and reads.
const FORMAT_VERSION: u32 = 1;

/// Names one submission: `[A-Za-z0-9_.-]{1,64}`, not `.` or `..`; chosen by the submitter
/// (idempotent submits) or generated.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SubmissionId(String);

/// Why a text is not a submission id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    #[error("a submission id cannot be empty")]
    Empty,
    #[error("a submission id is at most {MAX_ID_LEN} characters; this one has {0}")]
    TooLong(usize),
    #[error("a submission id may hold letters, digits, '_', '.' and '-' only (found {0:?})")]
    BadChar(char),
    #[error("a submission id cannot be \".\" or \"..\"")]
    Dots,
}

impl SubmissionId {
    /// Validates an id given by a submitter or read from a znode name.
    ///
    /// # Errors
    /// The text breaks the id rules; the error says which.
    pub fn parse(text: &str) -> Result<Self, IdError> {
        if text.is_empty() {
            return Err(IdError::Empty);
        }
        if text.len() > MAX_ID_LEN {
            return Err(IdError::TooLong(text.chars().count()));
        }
        if let Some(bad) = text
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')))
        {
            return Err(IdError::BadChar(bad));
        }
        if text == "." || text == ".." {
            return Err(IdError::Dots);
        }
        Ok(Self(text.to_owned()))
    }

    /// The id of the submission that `parent`'s run makes of chained job `child`:
    /// `<parent>.<child>`, or, where that breaks the id rules (too long), 24 hex digits of its
    /// SHA-256: the same child of the same parent always gets the same id.
    pub fn of_child(parent: &SubmissionId, child: &JobName) -> Self {
        let text = format!("{parent}.{child}");
        Self::parse(&text).unwrap_or_else(|_| {
            let mut hex = sha256_hex(text.as_bytes());
            hex.truncate(24);
            Self(hex)
        })
    }

    /// A fresh random id (96 bits, 24 hex digits): unique without asking ZooKeeper.
    pub fn generate() -> Self {
        let bits: u128 = rand::random::<u128>() >> 32;
        Self(format!("{bits:024x}"))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The shard this id lives in: CRC-32 (IEEE, as `zlib.crc32` and `java.util.zip.CRC32`) of
    /// the id's bytes, modulo [`SHARDS`], as two lowercase hex digits.
    pub fn shard(&self) -> Shard {
        Shard(crc32fast::hash(self.0.as_bytes()) % SHARDS)
    }
}

impl fmt::Display for SubmissionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&self.0)
    }
}

/// One of the [`SHARDS`] sub-splits of a bucket (and of the id index).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Shard(u32);

impl Shard {
    /// The shard's znode name.
    pub fn name(self) -> String {
        format!("{:02x}", self.0)
    }

    /// The shard a znode name stands for; `None` for foreign names.
    pub fn parse(name: &str) -> Option<Self> {
        if name.len() != 2 {
            return None;
        }
        u32::from_str_radix(name, 16)
            .ok()
            .filter(|n| *n < SHARDS && name.bytes().all(|b| !b.is_ascii_uppercase()))
            .map(Shard)
    }
}

/// The whole second a submission is due in: `due/<day>/<second>` (days since the Unix epoch,
/// second of that UTC day). Buckets sort by `(day, second)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DueBucket {
    pub day: i64,
    pub second: u32,
}

impl DueBucket {
    pub fn of(due_unix_ms: i64) -> Self {
        let in_day = due_unix_ms.rem_euclid(MS_PER_DAY);
        Self {
            day: due_unix_ms.div_euclid(MS_PER_DAY),
            // In 0..86_400: fits.
            second: u32::try_from(in_day / 1000).unwrap_or(0),
        }
    }

    /// The bucket's first instant.
    pub fn start_ms(self) -> i64 {
        self.day * MS_PER_DAY + i64::from(self.second) * 1000
    }

    /// The bucket of `day` and `second` as read from znode names; `None` for foreign names.
    pub fn parse(day: &str, second: &str) -> Option<Self> {
        let day = parse_decimal(day)?;
        let second = u32::try_from(parse_decimal(second)?).ok()?;
        (second < 86_400).then_some(Self { day, second })
    }
}

/// The minute in which tombstones stop being needed: `forget/<day>/<minute>` (days since the
/// Unix epoch, minute of that UTC day). Its lists are swept once the whole minute has passed, so
/// an id is remembered up to a minute longer than asked, never shorter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ForgetBucket {
    pub day: i64,
    pub minute: u32,
}

const MS_PER_MINUTE: i64 = 60_000;

impl ForgetBucket {
    pub fn of(unix_ms: i64) -> Self {
        Self {
            day: unix_ms.div_euclid(MS_PER_DAY),
            // In 0..1440: fits.
            minute: u32::try_from(unix_ms.rem_euclid(MS_PER_DAY) / MS_PER_MINUTE).unwrap_or(0),
        }
    }

    /// The first instant after the bucket: from then on its ids are free.
    pub fn end_ms(self) -> i64 {
        self.day * MS_PER_DAY + (i64::from(self.minute) + 1) * MS_PER_MINUTE
    }

    /// The bucket of `day` and `minute` as read from znode names; `None` for foreign names.
    pub fn parse(day: &str, minute: &str) -> Option<Self> {
        let day = parse_decimal(day)?;
        let minute = u32::try_from(parse_decimal(minute)?).ok()?;
        (minute < 1440).then_some(Self { day, minute })
    }
}

fn parse_decimal(name: &str) -> Option<i64> {
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    name.parse().ok()
}

/// What a submitter asks for: a declared job, when, and the bytes its run reads on stdin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Submission {
    pub job: JobName,
    pub due_unix_ms: i64,
    pub submitted_unix_ms: i64,
    pub payload: Vec<u8>,
    /// A manual trigger (`zkcron trigger`): who asked. Its run is recorded as such.
    pub requested_by: Option<String>,
    /// Its id was generated, not chosen: no client can send it again, so nothing needs to
    /// remember it once its record is pruned.
    pub anonymous: bool,
    /// Its pending marker names its job (`<id>~<job>`, written where lock groups are declared),
    /// so an owner learns the job from the bucket's listing and reads only its groups'
    /// submissions; `false`: the marker is the id alone, as before groups (issue 19).
    pub marker_names_job: bool,
    /// Submitted again by `zkcron delayed retry`: the id of the submission whose run failed.
    pub retry_of: Option<SubmissionId>,
    /// A chained job's run (`after`) made by a submission's run of its parent (issue 36).
    pub after: Option<AfterRun>,
}

/// The parent's run a chained submission follows: its job, its run id and how it ended (as
/// records spell it), for the child's `ZKCRON_PARENT_RUN_ID` and its record's `parents`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AfterRun {
    pub job: JobName,
    pub run_id: String,
    pub status: String,
}

/// The header line of a submission znode.
#[derive(Debug, Serialize, Deserialize)]
struct Header {
    v: u32,
    job: JobName,
    due_unix_ms: i64,
    submitted_unix_ms: i64,
    /// Older readers ignore it: the run then counts as an ordinary submission.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    requested_by: Option<String>,
    /// The id was generated (older readers ignore it and keep a tombstone).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    anonymous: bool,
    /// The pending marker is `<id>~<job>` (lock groups), not `<id>`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    marker_names_job: bool,
    /// The submission this one retries (older readers ignore it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    retry_of: Option<String>,
    /// The parent's run a chained submission follows (older readers ignore it: the run then
    /// has no `ZKCRON_PARENT_RUN_ID`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    after: Option<AfterRun>,
    /// A tombstone: the SHA-256 of the payload it no longer holds (lowercase hex).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    payload_sha256: Option<String>,
    /// A tombstone: how many bytes the payload had.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    payload_bytes: Option<usize>,
    /// A tombstone: when the id may be used again (its run's end plus the job's
    /// `dedup_window`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    remembered_until_unix_ms: Option<i64>,
}

impl Header {
    /// A request's header (no tombstone fields).
    fn of(submission: &Submission) -> Self {
        Self {
            v: FORMAT_VERSION,
            job: submission.job.clone(),
            due_unix_ms: submission.due_unix_ms,
            submitted_unix_ms: submission.submitted_unix_ms,
            requested_by: submission.requested_by.clone(),
            anonymous: submission.anonymous,
            marker_names_job: submission.marker_names_job,
            retry_of: submission
                .retry_of
                .as_ref()
                .map(|id| id.as_str().to_owned()),
            after: submission.after.clone(),
            payload_sha256: None,
            payload_bytes: None,
            remembered_until_unix_ms: None,
        }
    }

    /// The header as one JSON line with its `\n`.
    fn line(&self) -> Vec<u8> {
        // A plain struct of strings and numbers always serialises.
        let mut bytes = serde_json::to_vec(self).unwrap_or_default();
        bytes.push(b'\n');
        bytes
    }
}

/// Why bytes read from ZooKeeper are not a submission.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    #[error("no header line (expected JSON, a newline, then the payload)")]
    NoHeader,
    #[error("the header line is not a submission header")]
    Header(#[from] serde_json::Error),
    #[error("header version {0} is newer than this zkcron understands ({FORMAT_VERSION})")]
    Version(u32),
    #[error("the payload has {0} bytes; at most {MAX_PAYLOAD} are allowed")]
    PayloadTooLarge(usize),
    #[error(
        "a tombstone needs payload_sha256, payload_bytes and remembered_until_unix_ms, and no payload"
    )]
    PartTombstone,
}

impl Submission {
    /// The znode data: the header as one JSON line, `\n`, then the payload as is.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut bytes = Header::of(self).line();
        bytes.extend_from_slice(&self.payload);
        bytes
    }

    /// Parses a submission znode's data (untrusted: written by any client).
    ///
    /// # Errors
    /// The data is not in the documented format; log it with its path and skip it.
    pub fn parse(data: &[u8]) -> Result<Self, FormatError> {
        let (header, payload) = split_header(data)?;
        Ok(Self::from_parts(header, payload))
    }

    fn from_parts(header: Header, payload: &[u8]) -> Self {
        Self {
            job: header.job,
            due_unix_ms: header.due_unix_ms,
            submitted_unix_ms: header.submitted_unix_ms,
            payload: payload.to_vec(),
            requested_by: header.requested_by,
            anonymous: header.anonymous,
            marker_names_job: header.marker_names_job,
            // Foreign data: an unusable link is dropped, not the submission.
            retry_of: header.retry_of.and_then(|id| SubmissionId::parse(&id).ok()),
            after: header.after,
        }
    }

    /// The same request, whenever it was made: an idempotent resubmit compares this.
    pub fn same_request(&self, other: &Submission) -> bool {
        self.job == other.job
            && self.due_unix_ms == other.due_unix_ms
            && self.payload == other.payload
            && self.requested_by == other.requested_by
            && self.after == other.after
    }

    /// What stays of this submission once it has run and its record is pruned: the request
    /// without its payload, remembered until `remembered_until_unix_ms`.
    pub fn tombstone(&self, remembered_until_unix_ms: i64) -> Tombstone {
        Tombstone {
            job: self.job.clone(),
            due_unix_ms: self.due_unix_ms,
            submitted_unix_ms: self.submitted_unix_ms,
            requested_by: self.requested_by.clone(),
            payload_sha256: sha256_hex(&self.payload),
            payload_bytes: self.payload.len(),
            remembered_until_unix_ms,
        }
    }
}

/// A finished submission whose record was pruned while its id is still remembered (the job's
/// `dedup_window` after its run ended): enough to answer a resubmit of the id, and no more.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tombstone {
    pub job: JobName,
    pub due_unix_ms: i64,
    pub submitted_unix_ms: i64,
    pub requested_by: Option<String>,
    /// The payload's SHA-256, lowercase hex: a resubmit with another payload is a conflict.
    pub payload_sha256: String,
    pub payload_bytes: usize,
    /// From then on the id is free: the tombstone is deleted by the owner's next sweep.
    pub remembered_until_unix_ms: i64,
}

impl Tombstone {
    /// The znode data: a submission header with the tombstone's fields, `\n`, no payload.
    pub fn to_bytes(&self) -> Vec<u8> {
        Header {
            v: FORMAT_VERSION,
            job: self.job.clone(),
            due_unix_ms: self.due_unix_ms,
            submitted_unix_ms: self.submitted_unix_ms,
            requested_by: self.requested_by.clone(),
            anonymous: false,
            marker_names_job: false,
            retry_of: None,
            after: None,
            payload_sha256: Some(self.payload_sha256.clone()),
            payload_bytes: Some(self.payload_bytes),
            remembered_until_unix_ms: Some(self.remembered_until_unix_ms),
        }
        .line()
    }

    /// Whether `submission` asks for what this id was used for (a client retrying).
    pub fn same_request(&self, submission: &Submission) -> bool {
        self.job == submission.job
            && self.due_unix_ms == submission.due_unix_ms
            && self.requested_by == submission.requested_by
            && self.payload_sha256 == sha256_hex(&submission.payload)
    }
}

/// What an id's node in the index holds: a request (pending, or with its record still kept),
/// or the tombstone of a finished one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stored {
    Request(Submission),
    Tombstone(Tombstone),
}

impl Stored {
    /// Parses an id node's data (untrusted: written by any client).
    ///
    /// # Errors
    /// The data is not in the documented format; log it with its path and skip it.
    pub fn parse(data: &[u8]) -> Result<Self, FormatError> {
        let (mut header, payload) = split_header(data)?;
        let tombstone = (
            header.payload_sha256.take(),
            header.payload_bytes.take(),
            header.remembered_until_unix_ms.take(),
        );
        match tombstone {
            (None, None, None) => Ok(Self::Request(Submission::from_parts(header, payload))),
            (Some(payload_sha256), Some(payload_bytes), Some(remembered_until_unix_ms))
                if payload.is_empty() =>
            {
                Ok(Self::Tombstone(Tombstone {
                    job: header.job,
                    due_unix_ms: header.due_unix_ms,
                    submitted_unix_ms: header.submitted_unix_ms,
                    requested_by: header.requested_by,
                    payload_sha256,
                    payload_bytes,
                    remembered_until_unix_ms,
                }))
            }
            _ => Err(FormatError::PartTombstone),
        }
    }

    /// Whether `submission` asks for what this id holds or held.
    pub fn same_request(&self, submission: &Submission) -> bool {
        match self {
            Self::Request(stored) => stored.same_request(submission),
            Self::Tombstone(tombstone) => tombstone.same_request(submission),
        }
    }

    pub fn job(&self) -> &JobName {
        match self {
            Self::Request(stored) => &stored.job,
            Self::Tombstone(tombstone) => &tombstone.job,
        }
    }
}

/// The data of a request's node `data` moved to `due_unix_ms`: the header's other fields,
/// those a newer zkcron added among them, and the payload are kept as they are.
///
/// # Errors
/// `data` is not a request in a format this zkcron knows.
pub fn moved(data: &[u8], due_unix_ms: i64) -> Result<Vec<u8>, FormatError> {
    rewrite_header(data, |header| {
        header.insert("due_unix_ms".into(), due_unix_ms.into());
        true
    })
}

/// The data of a request's node `data` as its tombstone, remembered until
/// `remembered_until_unix_ms`: the header keeps every field it had (a `retry_of`, fields a
/// newer zkcron added) and gains the tombstone's; the payload goes.
///
/// # Errors
/// `data` is not a request in a format this zkcron knows.
pub fn tombstone_of(data: &[u8], remembered_until_unix_ms: i64) -> Result<Vec<u8>, FormatError> {
    let (_, payload) = split_header(data)?;
    let payload_sha256 = sha256_hex(payload);
    let payload_bytes = payload.len();
    rewrite_header(data, |header| {
        header.insert("payload_sha256".into(), payload_sha256.clone().into());
        header.insert("payload_bytes".into(), payload_bytes.into());
        header.insert(
            "remembered_until_unix_ms".into(),
            remembered_until_unix_ms.into(),
        );
        false
    })
}

/// `data`'s header changed by `change` as a JSON object (every field kept that it does not
/// touch), then the payload when `change` says to keep it.
fn rewrite_header(
    data: &[u8],
    change: impl FnOnce(&mut serde_json::Map<String, serde_json::Value>) -> bool,
) -> Result<Vec<u8>, FormatError> {
    let (_, payload) = split_header(data)?;
    let split = data.len() - payload.len() - 1;
    let mut header: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&data[..split])?;
    let keep_payload = change(&mut header);
    // A map of JSON values always serialises.
    let mut bytes = serde_json::to_vec(&header).unwrap_or_default();
    bytes.push(b'\n');
    if keep_payload {
        bytes.extend_from_slice(payload);
    }
    Ok(bytes)
}

/// The header and the payload of an id node's data, the header checked.
fn split_header(data: &[u8]) -> Result<(Header, &[u8]), FormatError> {
    let split = data
        .iter()
        .position(|b| *b == b'\n')
        .ok_or(FormatError::NoHeader)?;
    let header: Header = serde_json::from_slice(&data[..split])?;
    if header.v > FORMAT_VERSION {
        return Err(FormatError::Version(header.v));
    }
    let payload = &data[split + 1..];
    if payload.len() > MAX_PAYLOAD {
        return Err(FormatError::PayloadTooLarge(payload.len()));
    }
    Ok((header, payload))
}

fn sha256_hex(bytes: &[u8]) -> String {
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, bytes);
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn submission(payload: &[u8]) -> Submission {
        Submission {
            job: JobName::new("close-order"),
            due_unix_ms: 1_700_000_000_123,
            submitted_unix_ms: 1_699_999_000_000,
            payload: payload.to_vec(),
            requested_by: None,
            anonymous: false,
            marker_names_job: false,
            retry_of: None,
            after: None,
        }
    }

    #[test]
    fn ids_follow_the_znode_name_rules() {
        assert!(SubmissionId::parse("order-42.close_v2").is_ok());
        assert_eq!(SubmissionId::parse(""), Err(IdError::Empty));
        assert_eq!(SubmissionId::parse(".."), Err(IdError::Dots));
        assert_eq!(SubmissionId::parse("a/b"), Err(IdError::BadChar('/')));
        assert_eq!(SubmissionId::parse("é"), Err(IdError::BadChar('é')));
        assert_eq!(SubmissionId::parse(&"x".repeat(64)).map(|_| ()), Ok(()));
        assert_eq!(
            SubmissionId::parse(&"x".repeat(65)),
            Err(IdError::TooLong(65))
        );
        let generated = SubmissionId::generate();
        assert_eq!(
            SubmissionId::parse(generated.as_str()),
            Ok(generated.clone())
        );
        assert_ne!(generated, SubmissionId::generate());
    }

    #[test]
    fn a_childs_id_names_its_parent_and_child_and_is_the_same_each_time() {
        let child = JobName::new("notify");
        let parent = SubmissionId::parse("order-42").expect("valid");
        assert_eq!(
            SubmissionId::of_child(&parent, &child).as_str(),
            "order-42.notify"
        );
        let longest = SubmissionId::parse(&"x".repeat(64)).expect("valid");
        let hashed = SubmissionId::of_child(&longest, &child);
        assert_eq!(hashed.as_str().len(), 24);
        assert_eq!(SubmissionId::parse(hashed.as_str()), Ok(hashed.clone()));
        assert_eq!(hashed, SubmissionId::of_child(&longest, &child));
        assert_ne!(
            hashed,
            SubmissionId::of_child(&longest, &JobName::new("page"))
        );
    }

    #[test]
    fn a_chained_submission_keeps_its_parents_run_and_older_headers_read_without_it() {
        let chained = Submission {
            after: Some(AfterRun {
                job: JobName::new("order"),
                run_id: "order-1700000000000-order-42".to_owned(),
                status: "succeeded".to_owned(),
            }),
            ..submission(b"42")
        };
        let bytes = chained.to_bytes();
        let read = Submission::parse(&bytes).expect("a submission");
        assert_eq!(read, chained);
        assert!(
            !read.same_request(&submission(b"42")),
            "another parent, another request"
        );
        assert_eq!(
            Submission::parse(&submission(b"42").to_bytes())
                .expect("read")
                .after,
            None
        );
    }

    #[test]
    fn the_shard_is_crc32_of_the_id_as_other_languages_compute_it() {
        // python3 -c 'import zlib; print("%02x" % (zlib.crc32(b"order-42") % 256))'
        let id = SubmissionId::parse("order-42").expect("valid");
        // prints "de" (crc32 0x57f706de)
        assert_eq!(id.shard().name(), "de");
        assert_eq!(Shard::parse(&id.shard().name()), Some(id.shard()));
        for foreign in ["", "0", "100", "zz", "FF"] {
            assert_eq!(Shard::parse(foreign), None, "{foreign:?}");
        }
    }

    /// docs/DELAYED.md "Why no listing outgrows a reply": a million submissions due in the same
    /// second, every id as long as allowed, still list shard by shard in replies well under
    /// ZooKeeper's default `jute.maxbuffer`.
    #[test]
    fn a_million_submissions_in_one_second_list_in_replies_under_jute_maxbuffer() {
        const JUTE_MAXBUFFER: usize = 1024 * 1024;
        let mut per_shard = vec![0usize; SHARDS as usize];
        for n in 0..1_000_000u32 {
            // Longest ids, as a submitter choosing its own would make them.
            let id = SubmissionId(format!("{n:0>64}"));
            per_shard[id.shard().0 as usize] += 1;
        }
        let fullest = per_shard.iter().copied().max().unwrap_or(0);
        // A getChildren reply: a 4-byte count, then per child a 4-byte length and its name.
        let reply = 4 + fullest * (4 + MAX_ID_LEN);
        assert!(
            reply * 3 < JUTE_MAXBUFFER,
            "the fullest shard holds {fullest} ids: a {reply}-byte reply"
        );
        // The levels above: 256 shards in a bucket, 86 400 seconds in a day.
        assert!(4 + SHARDS as usize * (4 + 2) < JUTE_MAXBUFFER / 100);
        assert!(4 + 86_400 * (4 + "86399".len()) < JUTE_MAXBUFFER);
    }

    #[test]
    fn buckets_are_utc_seconds_within_days_also_before_1970() {
        let bucket = DueBucket::of(1_700_000_000_123);
        assert_eq!((bucket.day, bucket.second), (19_675, 80_000));
        assert_eq!(bucket.start_ms(), 1_700_000_000_000);
        let before = DueBucket::of(-1);
        assert_eq!((before.day, before.second), (-1, 86_399));
        assert_eq!(before.start_ms(), -1000);
        assert!(DueBucket::of(1_000) < DueBucket::of(2_000));
        assert_eq!(DueBucket::parse("19675", "80000"), Some(bucket));
        for (day, second) in [("x", "1"), ("1", "86400"), ("-1", "0"), ("1", "")] {
            assert_eq!(DueBucket::parse(day, second), None, "{day:?} {second:?}");
        }
    }

    #[test]
    fn forget_buckets_are_utc_minutes_and_end_after_their_minute() {
        let bucket = ForgetBucket::of(1_700_000_000_123);
        assert_eq!((bucket.day, bucket.minute), (19_675, 1333));
        assert_eq!(bucket.end_ms(), 1_700_000_040_000);
        assert!(bucket.end_ms() > 1_700_000_000_123);
        assert_eq!(ForgetBucket::of(bucket.end_ms()).minute, 1334);
        assert_eq!(ForgetBucket::parse("19675", "1333"), Some(bucket));
        for (day, minute) in [("x", "1"), ("1", "1440"), ("1", "")] {
            assert_eq!(ForgetBucket::parse(day, minute), None, "{day:?} {minute:?}");
        }
    }

    #[test]
    fn submissions_round_trip_with_any_payload_bytes() {
        for payload in [&b""[..], b"{\"order\":42}", b"\n\xff\x00line\n"] {
            let sub = submission(payload);
            assert_eq!(Submission::parse(&sub.to_bytes()).expect("parses"), sub);
        }
        let text = String::from_utf8_lossy(&submission(b"p").to_bytes()).into_owned();
        assert!(
            text.starts_with("{\"v\":1,\"job\":\"close-order\",\"due_unix_ms\":1700000000123,"),
            "{text}"
        );
        assert!(
            !text.contains("anonymous"),
            "a chosen id adds nothing: {text}"
        );
        let anonymous = Submission {
            anonymous: true,
            marker_names_job: false,
            ..submission(b"p")
        };
        let bytes = anonymous.to_bytes();
        assert!(String::from_utf8_lossy(&bytes).contains("\"anonymous\":true"));
        assert_eq!(Submission::parse(&bytes).expect("parses"), anonymous);
    }

    #[test]
    fn foreign_data_is_refused_with_the_reason() {
        assert!(matches!(
            Submission::parse(b"{}"),
            Err(FormatError::NoHeader)
        ));
        assert!(matches!(
            Submission::parse(b"nope\n"),
            Err(FormatError::Header(_))
        ));
        let newer = b"{\"v\":2,\"job\":\"j\",\"due_unix_ms\":1,\"submitted_unix_ms\":1}\n";
        assert!(matches!(
            Submission::parse(newer),
            Err(FormatError::Version(2))
        ));
        let mut big = submission(b"").to_bytes();
        big.extend(std::iter::repeat_n(b'x', MAX_PAYLOAD + 1));
        assert!(matches!(
            Submission::parse(&big),
            Err(FormatError::PayloadTooLarge(n)) if n == MAX_PAYLOAD + 1
        ));
    }

    #[test]
    fn a_resubmit_is_the_same_request_whenever_it_was_made() {
        let first = submission(b"p");
        let again = Submission {
            submitted_unix_ms: first.submitted_unix_ms + 5,
            ..first.clone()
        };
        assert!(first.same_request(&again));
        assert!(!first.same_request(&submission(b"q")));
        assert!(!first.same_request(&Submission {
            due_unix_ms: 1,
            ..first.clone()
        }));
    }

    #[test]
    fn a_tombstone_answers_a_resubmit_without_the_payload() {
        let first = submission(b"{\"secret\":42}");
        let tombstone = first.tombstone(1_800_000_000_000);
        let bytes = tombstone.to_bytes();
        assert!(bytes.len() < 300, "{} bytes", bytes.len());
        assert!(
            !bytes.windows(6).any(|w| w == b"secret"),
            "the payload is gone"
        );
        let Ok(Stored::Tombstone(read)) = Stored::parse(&bytes) else {
            panic!("not read back as a tombstone");
        };
        assert_eq!(read, tombstone);
        assert_eq!(read.payload_bytes, first.payload.len());
        let again = Submission {
            submitted_unix_ms: first.submitted_unix_ms + 60_000,
            ..first.clone()
        };
        assert!(Stored::Tombstone(read.clone()).same_request(&again));
        assert!(!read.same_request(&submission(b"{\"secret\":43}")));
        assert!(!read.same_request(&Submission {
            due_unix_ms: 1,
            ..first.clone()
        }));
        assert_eq!(
            Stored::parse(&first.to_bytes()).ok(),
            Some(Stored::Request(first.clone()))
        );
    }

    #[test]
    fn a_half_tombstone_is_foreign_data() {
        let half = b"{\"v\":1,\"job\":\"j\",\"due_unix_ms\":1,\"submitted_unix_ms\":1,\"payload_sha256\":\"00\"}\n";
        assert!(matches!(
            Stored::parse(half),
            Err(FormatError::PartTombstone)
        ));
        let mut with_payload = submission(b"").tombstone(5).to_bytes();
        with_payload.extend_from_slice(b"left over");
        assert!(matches!(
            Stored::parse(&with_payload),
            Err(FormatError::PartTombstone)
        ));
    }

    #[test]
    fn a_move_and_a_tombstone_keep_every_header_field_they_do_not_change() {
        let mut request = submission(b"the payload");
        request.retry_of = SubmissionId::parse("first-try").ok();
        let data = request.to_bytes();
        let split = data.iter().position(|b| *b == b'\n').unwrap();
        let mut header: serde_json::Value = serde_json::from_slice(&data[..split]).unwrap();
        header["priority"] = "high".into();
        let mut data = serde_json::to_vec(&header).unwrap();
        data.push(b'\n');
        data.extend_from_slice(b"the payload");

        let moved_data = moved(&data, 42).unwrap();
        let Stored::Request(after) = Stored::parse(&moved_data).unwrap() else {
            panic!("still a request");
        };
        assert_eq!(
            (after.due_unix_ms, after.payload.as_slice()),
            (42, &b"the payload"[..])
        );
        assert!(String::from_utf8_lossy(&moved_data).contains(r#""priority":"high""#));

        let remembered = tombstone_of(&data, 7).unwrap();
        let Stored::Tombstone(tombstone) = Stored::parse(&remembered).unwrap() else {
            panic!("a tombstone");
        };
        assert_eq!(
            (tombstone.payload_bytes, tombstone.remembered_until_unix_ms),
            (11, 7)
        );
        assert!(
            tombstone.same_request(&request),
            "it answers a resubmit of the request"
        );
        let text = String::from_utf8_lossy(&remembered);
        assert!(text.contains(r#""priority":"high""#), "{text}");
        assert!(text.contains(r#""retry_of":"first-try""#), "{text}");
        assert!(text.ends_with('\n'), "no payload: {text}");

        // A newer header version is neither moved nor remembered.
        header["v"] = 2.into();
        let mut newer = serde_json::to_vec(&header).unwrap();
        newer.push(b'\n');
        assert!(matches!(moved(&newer, 1), Err(FormatError::Version(2))));
        assert!(matches!(
            tombstone_of(&newer, 1),
            Err(FormatError::Version(2))
        ));
    }
}
