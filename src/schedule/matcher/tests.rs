//! The bit-scan matcher on its own: edges a bug in the scans or the carries would break.

use super::*;

fn matcher(expr: &str) -> Matcher {
    let fields = super::super::fields::parse(expr).unwrap_or_else(|err| panic!("{expr}: {err}"));
    Matcher::new(fields.masks, fields.starred_day)
}

fn wall(text: &str) -> NaiveDateTime {
    text.parse()
        .unwrap_or_else(|err| panic!("bad test wall time {text}: {err}"))
}

/// Edges a bug in the bit scans or the carries would break. croner gives the same answers
/// (the oracle property in `schedule::tests`); the rows say what they are.
#[test]
fn edges() {
    // (what, expression, from, inclusive, the match)
    let rows: &[(&str, &str, &str, bool, Option<&str>)] = &[
        (
            "29 Feb: next leap year",
            "0 0 0 29 2 *",
            "2025-03-01T00:00:00",
            true,
            Some("2028-02-29T00:00:00"),
        ),
        (
            "29 Feb: 2100 is no leap year",
            "0 0 0 29 2 *",
            "2096-03-01T00:00:00",
            true,
            Some("2104-02-29T00:00:00"),
        ),
        (
            "31st: February and its 28 days skipped",
            "0 0 0 31 * *",
            "2026-01-31T00:00:01",
            true,
            Some("2026-03-31T00:00:00"),
        ),
        (
            "31st: April skipped",
            "0 0 0 31 * *",
            "2026-04-01T00:00:00",
            true,
            Some("2026-05-31T00:00:00"),
        ),
        (
            "both restricted: the 13th or a Friday",
            "0 0 0 13 * FRI",
            "2026-03-01T00:00:00",
            true,
            Some("2026-03-06T00:00:00"),
        ),
        (
            "both restricted: a Friday that is no 13th",
            "0 0 0 13 * FRI",
            "2026-03-07T00:00:00",
            true,
            Some("2026-03-13T00:00:00"),
        ),
        (
            "a starred field: the 13th and a Sunday or Friday",
            "0 0 0 13 * */5",
            "2026-03-14T00:00:00",
            true,
            Some("2026-09-13T00:00:00"),
        ),
        (
            "day of week 7 is Sunday",
            "0 0 0 * * 7",
            "2026-05-13T00:00:00",
            true,
            Some("2026-05-17T00:00:00"),
        ),
        (
            "a range ending in 7",
            "0 0 0 * * 6-7",
            "2026-05-17T00:00:01",
            true,
            Some("2026-05-23T00:00:00"),
        ),
        (
            "year rollover, every second",
            "* * * * * *",
            "2026-12-31T23:59:59",
            false,
            Some("2027-01-01T00:00:00"),
        ),
        (
            "year rollover, New Year",
            "0 0 0 1 1 *",
            "2026-12-31T23:59:59",
            false,
            Some("2027-01-01T00:00:00"),
        ),
        (
            "the year's last second, inclusive",
            "59 59 23 31 12 *",
            "2026-12-31T23:59:59",
            true,
            Some("2026-12-31T23:59:59"),
        ),
        (
            "the year's last second, exclusive",
            "59 59 23 31 12 *",
            "2026-12-31T23:59:59",
            false,
            Some("2027-12-31T23:59:59"),
        ),
        (
            "an exact match, inclusive",
            "30 15 10 * * *",
            "2026-05-13T10:15:30",
            true,
            Some("2026-05-13T10:15:30"),
        ),
        (
            "an exact match, exclusive",
            "30 15 10 * * *",
            "2026-05-13T10:15:30",
            false,
            Some("2026-05-14T10:15:30"),
        ),
        (
            "nanoseconds are cut, inclusive",
            "30 15 10 * * *",
            "2026-05-13T10:15:30.5",
            true,
            Some("2026-05-13T10:15:30"),
        ),
        (
            "nanoseconds are cut, exclusive",
            "* * * * * *",
            "2026-05-13T10:15:29.5",
            false,
            Some("2026-05-13T10:15:30"),
        ),
        (
            "a minute carries into the next hour",
            "0 0,30 * * * *",
            "2026-05-13T10:45:00",
            true,
            Some("2026-05-13T11:00:00"),
        ),
        (
            "a second carries into the next day",
            "10 59 23 * * *",
            "2026-05-13T23:59:11",
            true,
            Some("2026-05-14T23:59:10"),
        ),
        (
            "a later hour resets minute and second",
            "5,10 5 3,7 * * *",
            "2026-05-13T03:06:00",
            true,
            Some("2026-05-13T07:05:05"),
        ),
        (
            "before year 1: from its start",
            "0 0 0 1 1 *",
            "0000-06-01T00:00:00",
            true,
            Some("0001-01-01T00:00:00"),
        ),
        (
            "the last year is reached",
            "0 0 0 1 1 *",
            "4999-06-01T00:00:00",
            true,
            Some("5000-01-01T00:00:00"),
        ),
        (
            "no day is stepped in the last year",
            "0 0 0 2 1 *",
            "4999-06-01T00:00:00",
            true,
            None,
        ),
        (
            "no hour is stepped in it",
            "0 0 * * * *",
            "5000-03-01T10:30:00",
            true,
            None,
        ),
        (
            "a later hour is set in it",
            "0 0 11 * * *",
            "5000-03-01T10:30:00",
            true,
            Some("5000-03-01T11:00:00"),
        ),
        (
            "past the last year",
            "* * * * * *",
            "5001-01-01T00:00:00",
            true,
            None,
        ),
    ];
    for (what, expr, from, inclusive, want) in rows {
        let got = matcher(expr).next_match(wall(from), *inclusive);
        assert_eq!(got, want.map(wall), "{what}: `{expr}` from {from}");
    }
}

#[test]
fn a_leap_second_counts_as_its_second() {
    let leap = NaiveDate::from_ymd_opt(2016, 12, 31)
        .and_then(|d| d.and_hms_nano_opt(23, 59, 59, 1_500_000_000))
        .unwrap();
    let every_second = matcher("* * * * * *");
    assert_eq!(
        every_second.next_match(leap, true),
        Some(wall("2016-12-31T23:59:59"))
    );
    assert_eq!(
        every_second.next_match(leap, false),
        Some(wall("2017-01-01T00:00:00"))
    );
}

#[test]
fn stays_small() {
    // Kept per job (issue 10): croner's pattern was about 7 KB.
    assert!(size_of::<Matcher>() <= 32, "{} bytes", size_of::<Matcher>());
}
