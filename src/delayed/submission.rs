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

/// What a submit did, in either store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Submitted {
    /// The submission is new and pending.
    Created,
    /// The same request was submitted before under this id: nothing changed.
    AlreadyThere,
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
    /// The submitter's trace context (a W3C `traceparent`, checked when submitted): the run's
    /// span links to it (issue 52).
    pub traceparent: Option<String>,
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
    /// The submitter's trace context (older readers ignore it: the run's span links nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    traceparent: Option<String>,
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
            traceparent: submission.traceparent.clone(),
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
    /// A plain request: `job` due at `due_unix_ms` with `payload`, submitted at
    /// `submitted_unix_ms` under an id the submitter chose, nothing else asked.
    pub fn plain(job: JobName, due_unix_ms: i64, submitted_unix_ms: i64, payload: Vec<u8>) -> Self {
        Self {
            job,
            due_unix_ms,
            submitted_unix_ms,
            payload,
            requested_by: None,
            anonymous: false,
            marker_names_job: false,
            retry_of: None,
            after: None,
            traceparent: None,
        }
    }

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
            // Foreign data: checked where it is used (a context that is none links nothing).
            traceparent: header.traceparent,
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
            traceparent: None,
            after: None,
            payload_sha256: Some(self.payload_sha256.clone()),
            payload_bytes: Some(self.payload_bytes),
            remembered_until_unix_ms: Some(self.remembered_until_unix_ms),
        }
        .line()
    }

    /// The request this id was used for, as far as it is remembered: without its payload.
    pub fn request_without_payload(&self) -> Submission {
        Submission {
            requested_by: self.requested_by.clone(),
            ..Submission::plain(
                self.job.clone(),
                self.due_unix_ms,
                self.submitted_unix_ms,
                Vec::new(),
            )
        }
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
mod tests;
