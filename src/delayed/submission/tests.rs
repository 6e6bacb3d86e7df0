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
        traceparent: None,
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

/// Issue 52: the submitter's trace context is kept with the submission; one written without it
/// (an older zkcron's) reads as none.
#[test]
fn a_submitters_trace_context_rides_in_the_header() {
    let traced = Submission {
        traceparent: Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into()),
        ..submission(b"{}")
    };
    let bytes = traced.to_bytes();
    assert!(String::from_utf8_lossy(&bytes).contains("\"traceparent\":\"00-4bf9"));
    assert_eq!(Submission::parse(&bytes).expect("a submission"), traced);
    let plain = submission(b"{}").to_bytes();
    assert!(!String::from_utf8_lossy(&plain).contains("traceparent"));
    assert_eq!(
        Submission::parse(&plain).expect("a submission").traceparent,
        None
    );
}
