//! Fire times against real zones (chrono-tz), exact UTC instants in every assertion.
//!
//! Europe/Berlin 2026: clocks go 02:00 CET → 03:00 CEST on 29 March (01:00 UTC) and
//! 03:00 CEST → 02:00 CET on 25 October (01:00 UTC).

use chrono::{DateTime, NaiveDate, NaiveDateTime, TimeDelta, Utc};
use chrono_tz::Tz;
use chrono_tz::{America, Asia, Australia, Europe};
use croner::parser::{CronParser, Seconds, Year};
use proptest::prelude::*;

use super::*;

fn utc(text: &str) -> DateTime<Utc> {
    text.parse()
        .unwrap_or_else(|err| panic!("bad test instant {text}: {err}"))
}

fn schedule(expr: &str, tz: Tz) -> Schedule {
    Schedule::parse(expr, tz).unwrap_or_else(|err| panic!("{expr}: {err}"))
}

/// (what, expression, zone, after, the fires that follow in order)
type Row = (
    &'static str,
    &'static str,
    Tz,
    &'static str,
    &'static [&'static str],
);

fn check_rows(rows: &[Row]) {
    for (what, expr, tz, after, want) in rows {
        let got = schedule(expr, *tz).upcoming(utc(after), want.len());
        let want: Vec<_> = want.iter().map(|w| utc(w)).collect();
        assert_eq!(got, want, "{what}: `{expr}` in {tz} after {after}");
    }
}

/// Fires from local midnight to the next local midnight of `date` in `tz`.
fn fires_on_local_day(s: &Schedule, date: NaiveDate) -> usize {
    let tz = s.timezone();
    let start = tz
        .from_local_datetime(&date.and_hms_opt(0, 0, 0).unwrap())
        .earliest()
        .unwrap();
    let next_day = date.succ_opt().unwrap().and_hms_opt(0, 0, 0).unwrap();
    let end = tz
        .from_local_datetime(&next_day)
        .earliest()
        .unwrap()
        .to_utc();
    // Start a nanosecond early so a fire at local midnight counts.
    let mut at = start.to_utc() - TimeDelta::nanoseconds(1);
    let mut count = 0;
    while let Some(next) = s.next_after(at).filter(|next| *next < end) {
        count += 1;
        at = next;
    }
    count
}

const BERLIN: Tz = Europe::Berlin;

#[test]
fn case_1_fixed_time_in_the_spring_gap_fires_once_after_it() {
    check_rows(&[
        (
            "02:30 does not exist: 03:00 CEST",
            "0 30 2 * * *",
            BERLIN,
            "2026-03-28T12:00:00Z",
            &["2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"],
        ),
        (
            "03:00 itself, once",
            "0 0 3 * * *",
            BERLIN,
            "2026-03-28T12:00:00Z",
            &["2026-03-29T01:00:00Z", "2026-03-30T01:00:00Z"],
        ),
        (
            "seconds in the gap move to 03:00:00",
            "15 30 2 * * *",
            BERLIN,
            "2026-03-28T12:00:00Z",
            &["2026-03-29T01:00:00Z", "2026-03-30T00:30:15Z"],
        ),
        (
            "from just before the gap",
            "0 30 2 * * *",
            BERLIN,
            "2026-03-29T00:59:59.999Z",
            &["2026-03-29T01:00:00Z"],
        ),
        (
            "from the catch-up instant itself: next day",
            "0 30 2 * * *",
            BERLIN,
            "2026-03-29T01:00:00Z",
            &["2026-03-30T00:30:00Z"],
        ),
        (
            "a list in the gap is one fire",
            "0 0,30 2 * * *",
            BERLIN,
            "2026-03-28T12:00:00Z",
            &[
                "2026-03-29T01:00:00Z",
                "2026-03-30T00:00:00Z",
                "2026-03-30T00:30:00Z",
            ],
        ),
        (
            "gap times and 03:00 share one instant",
            "0 0,30 2,3 * * *",
            BERLIN,
            "2026-03-29T00:00:00Z",
            &[
                "2026-03-29T01:00:00Z",
                "2026-03-29T01:30:00Z",
                "2026-03-30T00:00:00Z",
            ],
        ),
        (
            "a range step is fixed-time (no leading *)",
            "0 0 0-22/2 * * *",
            BERLIN,
            "2026-03-28T22:30:00Z",
            &[
                "2026-03-28T23:00:00Z",
                "2026-03-29T01:00:00Z",
                "2026-03-29T02:00:00Z",
            ],
        ),
        (
            "a restricted weekday still catches up (29 March 2026 is a Sunday)",
            "0 30 2 * * SUN",
            BERLIN,
            "2026-03-28T12:00:00Z",
            &["2026-03-29T01:00:00Z", "2026-04-05T00:30:00Z"],
        ),
    ]);
}

#[test]
fn case_2_fixed_time_in_the_autumn_repeat_fires_on_the_first_pass() {
    check_rows(&[
        (
            "02:30 CEST, not 02:30 CET",
            "0 30 2 * * *",
            BERLIN,
            "2026-10-24T12:00:00Z",
            &["2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"],
        ),
        (
            "from the fire itself",
            "0 30 2 * * *",
            BERLIN,
            "2026-10-25T00:30:00Z",
            &["2026-10-26T01:30:00Z"],
        ),
        (
            "from between the passes (02:45 CEST)",
            "0 30 2 * * *",
            BERLIN,
            "2026-10-25T00:45:00Z",
            &["2026-10-26T01:30:00Z"],
        ),
        (
            "from the second pass (02:10 CET)",
            "0 30 2 * * *",
            BERLIN,
            "2026-10-25T01:10:00Z",
            &["2026-10-26T01:30:00Z"],
        ),
        (
            "a list fires once per value",
            "0 0,30 2 * * *",
            BERLIN,
            "2026-10-24T12:00:00Z",
            &[
                "2026-10-25T00:00:00Z",
                "2026-10-25T00:30:00Z",
                "2026-10-26T01:00:00Z",
            ],
        ),
        (
            "a range step is fixed-time",
            "0 0 0-22/2 * * *",
            BERLIN,
            "2026-10-24T21:30:00Z",
            &[
                "2026-10-24T22:00:00Z",
                "2026-10-25T00:00:00Z",
                "2026-10-25T03:00:00Z",
            ],
        ),
    ]);
}

#[test]
fn case_3_minute_wildcard_keeps_elapsed_time_through_both_transitions() {
    check_rows(&[
        (
            "spring: 01:45 CET, then 03:00 CEST",
            "0 */15 * * * *",
            BERLIN,
            "2026-03-29T00:30:00Z",
            &[
                "2026-03-29T00:45:00Z",
                "2026-03-29T01:00:00Z",
                "2026-03-29T01:15:00Z",
            ],
        ),
        (
            "autumn: both passes of 02:xx",
            "0 */15 * * * *",
            BERLIN,
            "2026-10-25T00:30:00Z",
            &[
                "2026-10-25T00:45:00Z",
                "2026-10-25T01:00:00Z",
                "2026-10-25T01:15:00Z",
                "2026-10-25T01:30:00Z",
                "2026-10-25T01:45:00Z",
                "2026-10-25T02:00:00Z",
            ],
        ),
        (
            "autumn: from the first pass, the second pass is next",
            "0 */15 * * * *",
            BERLIN,
            "2026-10-25T00:50:00Z",
            &["2026-10-25T01:00:00Z"],
        ),
        (
            "autumn: from the second pass",
            "0 */15 * * * *",
            BERLIN,
            "2026-10-25T01:20:00Z",
            &[
                "2026-10-25T01:30:00Z",
                "2026-10-25T01:45:00Z",
                "2026-10-25T02:00:00Z",
            ],
        ),
        (
            "every second across the gap",
            "* * * * * *",
            BERLIN,
            "2026-03-29T00:59:58Z",
            &[
                "2026-03-29T00:59:59Z",
                "2026-03-29T01:00:00Z",
                "2026-03-29T01:00:01Z",
            ],
        ),
        (
            "an hour-restricted wildcard has no fire in the gap",
            "0 */20 2 * * *",
            BERLIN,
            "2026-03-28T12:00:00Z",
            &["2026-03-30T00:00:00Z"],
        ),
    ]);
    let every_15 = schedule("0 */15 * * * *", BERLIN);
    let day = |m, d| NaiveDate::from_ymd_opt(2026, m, d).unwrap();
    assert_eq!(fires_on_local_day(&every_15, day(3, 28)), 96);
    assert_eq!(
        fires_on_local_day(&every_15, day(3, 29)),
        92,
        "the gap hour has no fires"
    );
    assert_eq!(
        fires_on_local_day(&every_15, day(10, 25)),
        100,
        "4 extra in the repeat"
    );
}

#[test]
fn case_4_hour_step_follows_the_existing_wall_hours() {
    check_rows(&[
        (
            "spring: 00:00 CET, 02:00 missing, 04:00 CEST",
            "0 0 */2 * * *",
            BERLIN,
            "2026-03-28T22:30:00Z",
            &[
                "2026-03-28T23:00:00Z",
                "2026-03-29T02:00:00Z",
                "2026-03-29T04:00:00Z",
            ],
        ),
        (
            "autumn: 02:00 CEST and 02:00 CET",
            "0 0 */2 * * *",
            BERLIN,
            "2026-10-24T21:30:00Z",
            &[
                "2026-10-24T22:00:00Z",
                "2026-10-25T00:00:00Z",
                "2026-10-25T01:00:00Z",
                "2026-10-25T03:00:00Z",
            ],
        ),
        (
            "@hourly sets HR_STAR too",
            "@hourly",
            BERLIN,
            "2026-10-24T23:30:00Z",
            &[
                "2026-10-25T00:00:00Z",
                "2026-10-25T01:00:00Z",
                "2026-10-25T02:00:00Z",
            ],
        ),
    ]);
}

#[test]
fn zones_without_dst_and_southern_hemisphere() {
    check_rows(&[
        (
            "UTC",
            "0 30 2 * * *",
            Tz::UTC,
            "2026-03-28T12:00:00Z",
            &["2026-03-29T02:30:00Z", "2026-03-30T02:30:00Z"],
        ),
        (
            "Tokyo is UTC+9 all year",
            "0 30 2 * * *",
            Asia::Tokyo,
            "2026-10-24T12:00:00Z",
            &["2026-10-24T17:30:00Z", "2026-10-25T17:30:00Z"],
        ),
        // Sydney: 03:00 AEDT → 02:00 AEST on 5 April 2026, 02:00 AEST → 03:00 AEDT on 4 October.
        (
            "Sydney repeat: 02:30 AEDT only",
            "0 30 2 * * *",
            Australia::Sydney,
            "2026-04-04T12:00:00Z",
            &["2026-04-04T15:30:00Z", "2026-04-05T16:30:00Z"],
        ),
        (
            "Sydney gap: 03:00 AEDT",
            "0 30 2 * * *",
            Australia::Sydney,
            "2026-10-03T12:00:00Z",
            &["2026-10-03T16:00:00Z", "2026-10-04T15:30:00Z"],
        ),
        (
            "Sydney repeat, wildcard: both passes",
            "0 0 * * * *",
            Australia::Sydney,
            "2026-04-04T15:30:00Z",
            &["2026-04-04T16:00:00Z", "2026-04-04T17:00:00Z"],
        ),
        // Lord Howe shifts by 30 minutes: 02:00 → 02:30 on 4 October 2026 (UTC+10:30 → +11).
        (
            "Lord Howe's half-hour gap",
            "0 15 2 * * *",
            Australia::Lord_Howe,
            "2026-10-03T12:00:00Z",
            &["2026-10-03T15:30:00Z", "2026-10-04T15:15:00Z"],
        ),
    ]);
    for tz in [Tz::UTC, Asia::Tokyo] {
        let every_15 = schedule("0 */15 * * * *", tz);
        for (m, d) in [(3, 29), (10, 25)] {
            let date = NaiveDate::from_ymd_opt(2026, m, d).unwrap();
            assert_eq!(fires_on_local_day(&every_15, date), 96, "{tz} {date}");
        }
    }
}

#[test]
fn five_fields_and_macros() {
    let after = "2026-05-13T10:20:30Z"; // a Wednesday
    check_rows(&[
        (
            "5 fields: seconds are 0",
            "30 2 * * *",
            Tz::UTC,
            after,
            &["2026-05-14T02:30:00Z"],
        ),
        (
            "6 fields",
            "30 30 2 * * *",
            Tz::UTC,
            after,
            &["2026-05-14T02:30:30Z"],
        ),
        (
            "@hourly",
            "@hourly",
            Tz::UTC,
            after,
            &["2026-05-13T11:00:00Z"],
        ),
        (
            "@daily",
            "@daily",
            Tz::UTC,
            after,
            &["2026-05-14T00:00:00Z"],
        ),
        (
            "@midnight",
            "@midnight",
            Tz::UTC,
            after,
            &["2026-05-14T00:00:00Z"],
        ),
        (
            "@weekly is Sunday 00:00",
            "@weekly",
            Tz::UTC,
            after,
            &["2026-05-17T00:00:00Z"],
        ),
        (
            "@monthly",
            "@monthly",
            Tz::UTC,
            after,
            &["2026-06-01T00:00:00Z"],
        ),
        (
            "@yearly",
            "@yearly",
            Tz::UTC,
            after,
            &["2027-01-01T00:00:00Z"],
        ),
        (
            "@annually",
            "@ANNUALLY",
            Tz::UTC,
            after,
            &["2027-01-01T00:00:00Z"],
        ),
        (
            "@daily in Berlin",
            "@daily",
            BERLIN,
            after,
            &["2026-05-13T22:00:00Z"],
        ),
        (
            "names",
            "0 0 12 * mar-may mon-fri",
            Tz::UTC,
            after,
            &["2026-05-13T12:00:00Z"],
        ),
    ]);
    assert_eq!(schedule("@hourly", Tz::UTC).dst_rule(), DstRule::Wildcard);
    assert_eq!(schedule("@daily", Tz::UTC).dst_rule(), DstRule::FixedTime);
    assert_eq!(
        schedule("30 2 * * *", Tz::UTC).dst_rule(),
        DstRule::FixedTime
    );
    assert_eq!(
        schedule("*/5 2 * * *", Tz::UTC).dst_rule(),
        DstRule::Wildcard
    );
}

#[test]
fn day_of_week_0_and_7_are_both_sunday() {
    let after = utc("2026-05-13T00:00:00Z");
    let sundays: Vec<_> = [
        "2026-05-17T12:00:00Z",
        "2026-05-24T12:00:00Z",
        "2026-05-31T12:00:00Z",
    ]
    .map(utc)
    .into();
    for expr in [
        "0 0 12 * * 0",
        "0 0 12 * * 7",
        "0 0 12 * * SUN",
        "0 0 12 * * sun",
    ] {
        assert_eq!(
            schedule(expr, Tz::UTC).upcoming(after, 3),
            sundays,
            "{expr}"
        );
    }
    let weekend = schedule("0 0 12 * * SAT-SUN", Tz::UTC).upcoming(after, 2);
    assert_eq!(
        weekend,
        ["2026-05-16T12:00:00Z", "2026-05-17T12:00:00Z"].map(utc)
    );
    let weekend = schedule("0 0 12 * * 6-7", Tz::UTC).upcoming(after, 2);
    assert_eq!(
        weekend,
        ["2026-05-16T12:00:00Z", "2026-05-17T12:00:00Z"].map(utc)
    );
}

#[test]
fn day_of_month_and_day_of_week_combine_as_in_cronie() {
    check_rows(&[
        // Both restricted: either matches. Fridays in March/April 2026 and every 13th.
        (
            "13th or Friday",
            "0 0 0 13 * FRI",
            Tz::UTC,
            "2026-03-26T00:00:00Z",
            &[
                "2026-03-27T00:00:00Z",
                "2026-04-03T00:00:00Z",
                "2026-04-10T00:00:00Z",
                "2026-04-13T00:00:00Z",
                "2026-04-17T00:00:00Z",
            ],
        ),
        // A day field starting with `*` makes it AND (DOM_STAR): odd days that are Mondays.
        (
            "*/2 dom AND Monday",
            "0 0 0 */2 * MON",
            Tz::UTC,
            "2026-03-01T00:00:00Z",
            &[
                "2026-03-09T00:00:00Z",
                "2026-03-23T00:00:00Z",
                "2026-04-13T00:00:00Z",
                "2026-04-27T00:00:00Z",
            ],
        ),
        // DOW_STAR: the 1st when it is a Sunday, Wednesday or Saturday.
        (
            "1st AND */3 dow",
            "0 0 0 1 * */3",
            Tz::UTC,
            "2026-01-01T00:00:00Z",
            &[
                "2026-02-01T00:00:00Z",
                "2026-03-01T00:00:00Z",
                "2026-04-01T00:00:00Z",
                "2026-07-01T00:00:00Z",
            ],
        ),
        (
            "* dom: weekday only",
            "0 0 0 * * MON",
            Tz::UTC,
            "2026-03-01T00:00:00Z",
            &["2026-03-02T00:00:00Z", "2026-03-09T00:00:00Z"],
        ),
    ]);
}

#[test]
fn february_29_waits_for_a_leap_year() {
    check_rows(&[(
        "29 Feb",
        "0 0 0 29 2 *",
        Tz::UTC,
        "2026-01-01T00:00:00Z",
        &[
            "2028-02-29T00:00:00Z",
            "2032-02-29T00:00:00Z",
            "2036-02-29T00:00:00Z",
        ],
    )]);
    // 2100 is not a leap year.
    check_rows(&[(
        "29 Feb",
        "0 0 0 29 2 *",
        Tz::UTC,
        "2096-03-01T00:00:00Z",
        &["2104-02-29T00:00:00Z"],
    )]);
}

#[test]
fn next_after_is_strictly_after() {
    let s = schedule("0 30 2 * * *", BERLIN);
    let fire = utc("2026-05-14T00:30:00Z");
    assert_eq!(s.next_after(fire), Some(utc("2026-05-15T00:30:00Z")));
    assert_eq!(s.next_after(fire - TimeDelta::nanoseconds(1)), Some(fire));
    assert_eq!(
        s.next_after(fire + TimeDelta::nanoseconds(1)),
        Some(utc("2026-05-15T00:30:00Z"))
    );
    let every_second = schedule("* * * * * *", Tz::UTC);
    let t = utc("2026-05-14T00:30:00.5Z");
    assert_eq!(
        every_second.next_after(t),
        Some(utc("2026-05-14T00:30:01Z"))
    );
}

#[test]
fn no_fire_after_the_search_limit_and_no_panic_at_the_ends() {
    let s = schedule("0 0 0 29 2 *", BERLIN);
    assert_eq!(s.next_after(DateTime::<Utc>::MAX_UTC), None);
    assert_eq!(s.next_after(utc("4999-03-01T00:00:00Z")), None);
    assert!(s.next_after(DateTime::<Utc>::MIN_UTC).is_some());
    assert!(s.upcoming(utc("2026-01-01T00:00:00Z"), 0).is_empty());
}

#[test]
fn errors_name_the_field() {
    let rows: &[(&str, Option<&str>, &str)] = &[
        (
            "0 0 25 * * *",
            Some("hour"),
            "hour: 25 is out of range 0-23",
        ),
        ("30 25 * * *", Some("hour"), "hour: 25 is out of range 0-23"),
        (
            "* * * *",
            None,
            "expected 5 or 6 fields (sec min hour dom mon dow), found 4",
        ),
        (
            "",
            None,
            "expected 5 or 6 fields (sec min hour dom mon dow), found 0",
        ),
        (
            "0 0 0 1 1 * 2030",
            None,
            "expected 5 or 6 fields (sec min hour dom mon dow), found 7",
        ),
        (
            "@fortnightly",
            None,
            "unknown macro @fortnightly (known: @hourly, @daily, @midnight, @weekly, @monthly, \
          @yearly, @annually)",
        ),
        (
            "@reboot",
            None,
            "unknown macro @reboot (known: @hourly, @daily, @midnight, @weekly, @monthly, \
          @yearly, @annually)",
        ),
        (
            "@daily 5",
            None,
            "macro @daily stands alone, found 1 more field(s) after it",
        ),
        (
            "60 * * * * *",
            Some("second"),
            "second: 60 is out of range 0-59",
        ),
        (
            "0 60 * * * *",
            Some("minute"),
            "minute: 60 is out of range 0-59",
        ),
        (
            "0 0 0 0 * *",
            Some("day of month"),
            "day of month: 0 is out of range 1-31",
        ),
        (
            "0 0 0 * 13 *",
            Some("month"),
            "month: 13 is out of range 1-12",
        ),
        (
            "0 0 0 * * 8",
            Some("day of week"),
            "day of week: 8 is out of range 0-7",
        ),
        (
            "0 0 99999999999 * * *",
            Some("hour"),
            "hour: 99999999999 is out of range 0-23",
        ),
        (
            "0 */0 * * * *",
            Some("minute"),
            "minute: step 0 is out of range 1-59",
        ),
        (
            "0 5/10 * * * *",
            Some("minute"),
            r#"minute: "5/10" has a step without a range: write */10 or 5-59/10"#,
        ),
        (
            "0 0 22-2 * * *",
            Some("hour"),
            "hour: range 22-2 runs backwards (write 22-23,0-2 to wrap around)",
        ),
        (
            "0 1,,2 * * * *",
            Some("minute"),
            r#"minute: empty list item in "1,,2""#,
        ),
        (
            "0 0 12 ? * 6",
            Some("day of month"),
            r#"day of month: "?" is not a number (1-31); write * for any"#,
        ),
        (
            "0 0 0 L * *",
            Some("day of month"),
            r#"day of month: "L" is not a number (1-31)"#,
        ),
        (
            "0 0 0 * * 5#2",
            Some("day of week"),
            r#"day of week: "5#2" is not a number (0-7) or name (SUN-SAT)"#,
        ),
        (
            "0 0 0 * * MONDAY",
            Some("day of week"),
            r#"day of week: "MONDAY" is not a number (0-7) or name (SUN-SAT)"#,
        ),
        (
            "0 0 0 * * +MON",
            Some("day of week"),
            r#"day of week: "+MON" is not a number (0-7) or name (SUN-SAT)"#,
        ),
        (
            "0 0 0 30 2 *",
            Some("day of month"),
            "day of month: 30 never occurs in month 2",
        ),
        (
            "0 0 0 31 APR,JUN *",
            Some("day of month"),
            "day of month: 31 never occurs in month APR,JUN",
        ),
    ];
    for (expr, field, message) in rows {
        let err = Schedule::parse(expr, Tz::UTC).expect_err(expr);
        assert_eq!(err.to_string(), *message, "`{expr}`");
        assert_eq!(err.field(), *field, "`{expr}`");
    }
    // Restricting the weekday too makes 30 February harmless: Mondays in February fire.
    assert!(Schedule::parse("0 0 0 30 2 MON", Tz::UTC).is_ok());
}

#[test]
fn time_zone_names() {
    assert_eq!(parse_timezone("Europe/Berlin"), Ok(BERLIN));
    assert_eq!(parse_timezone("UTC"), Ok(Tz::UTC));
    let rows = [
        (
            "europe/berlin",
            r#"unknown time zone "europe/berlin": did you mean "Europe/Berlin"?"#,
        ),
        (
            "Europe/Berln",
            r#"unknown time zone "Europe/Berln": did you mean "Europe/Berlin"?"#,
        ),
        (" UTC", r#"unknown time zone " UTC": did you mean "UTC"?"#),
        (
            "Mars/Olympus",
            r#"unknown time zone "Mars/Olympus": expected an IANA name such as "Europe/Berlin" or "UTC""#,
        ),
        (
            "",
            r#"unknown time zone "": expected an IANA name such as "Europe/Berlin" or "UTC""#,
        ),
    ];
    for (name, message) in rows {
        let err = parse_timezone(name).expect_err(name);
        assert_eq!(err.to_string(), message);
        assert_eq!(err.field(), None);
    }
}

#[test]
fn accessors_debug_and_display() {
    let s = schedule("30 2 * * *", BERLIN);
    assert_eq!(s.expression(), "30 2 * * *");
    assert_eq!(s.timezone(), BERLIN);
    assert_eq!(s.to_string(), "30 2 * * * (Europe/Berlin)");
    assert_eq!(
        format!("{s:?}"),
        r#"Schedule { expression: "30 2 * * *", timezone: Europe/Berlin, dst: FixedTime }"#
    );
}

// --- properties ---------------------------------------------------------------------------------

const ZONES: [Tz; 6] = [
    Europe::Berlin,
    Australia::Sydney,
    Australia::Lord_Howe,
    America::New_York,
    Asia::Tokyo,
    Tz::UTC,
];

fn expression() -> impl Strategy<Value = String> {
    prop_oneof![
        expression_from(
            &["0", "30", "*/20", "0,30", "*", "10-20/5"],
            &["0", "30", "*/15", "*", "0-10/5", "5,35"],
            &["2", "*", "*/2", "1-3", "0,2,4", "3", "1-23/2"],
        ),
        fixed_time_expression(),
    ]
}

/// No second, minute or hour field starts with `*`.
fn fixed_time_expression() -> impl Strategy<Value = String> {
    expression_from(
        &["0", "30", "0,30", "10-20/5"],
        &["0", "30", "0-10/5", "5,35", "0-59/20"],
        &["2", "1-3", "0,2,4", "3", "1-23/2", "0-22/2"],
    )
}

fn expression_from(
    seconds: &'static [&'static str],
    minutes: &'static [&'static str],
    hours: &'static [&'static str],
) -> impl Strategy<Value = String> {
    let pick = |choices: &'static [&'static str]| proptest::sample::select(choices);
    (
        pick(seconds),
        pick(minutes),
        pick(hours),
        pick(&["*", "1", "29", "*/2", "13", "25"]),
        pick(&["*", "3", "10", "3,10", "*/2", "4"]),
        pick(&["*", "0", "7", "SUN", "1-5", "*/3", "FRI"]),
    )
        .prop_map(|(s, m, h, dom, mon, dow)| format!("{s} {m} {h} {dom} {mon} {dow}"))
}

/// Instants near the 2026 transitions of the zones above, and anywhere in 2020-2030.
fn instant() -> impl Strategy<Value = DateTime<Utc>> {
    let near = proptest::sample::select(
        &[
            "2026-03-29T01:00:00Z", // Europe spring
            "2026-10-25T01:00:00Z", // Europe autumn
            "2026-03-08T07:00:00Z", // New York spring
            "2026-11-01T06:00:00Z", // New York autumn
            "2026-04-04T16:00:00Z", // Sydney autumn
            "2026-10-03T16:00:00Z", // Sydney spring
            "2026-04-04T15:00:00Z", // Lord Howe autumn
            "2026-10-03T15:30:00Z", // Lord Howe spring
        ][..],
    )
    .prop_flat_map(|at| (Just(utc(at)), -3 * 3600_i64..3 * 3600, 0u32..1_000_000_000))
    .prop_map(|(at, s, ns)| at + TimeDelta::seconds(s) + TimeDelta::nanoseconds(i64::from(ns)));
    let anywhere = (1_577_836_800_i64..1_924_992_000)
        .prop_map(|s| DateTime::from_timestamp(s, 0).unwrap_or_default());
    prop_oneof![3 => near, 1 => anywhere]
}

fn zone() -> impl Strategy<Value = Tz> {
    proptest::sample::select(&ZONES[..])
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn next_is_strictly_after_and_monotone(
        expr in expression(), tz in zone(), t1 in instant(), gap in 0i64..7_200
    ) {
        let s = schedule(&expr, tz);
        let t2 = t1 + TimeDelta::seconds(gap);
        let (n1, n2) = (s.next_after(t1), s.next_after(t2));
        // Every generated expression fires within a few years.
        let n1 = n1.ok_or_else(|| TestCaseError::fail("no fire"))?;
        let n2 = n2.ok_or_else(|| TestCaseError::fail("no fire"))?;
        prop_assert!(n1 > t1, "{expr} {tz}: next_after({t1}) = {n1}");
        prop_assert!(n1 <= n2, "{expr} {tz}: not monotone: {t1} → {n1}, {t2} → {n2}");
        // One set of instants: anything between t1 and n1 leads to n1 too.
        let just_before = n1 - TimeDelta::nanoseconds(1);
        if just_before >= t1 {
            prop_assert_eq!(s.next_after(just_before), Some(n1), "{} {}", expr, tz);
        }
    }

    #[test]
    fn fixed_time_jobs_fire_once_per_wall_time_on_transition_days(
        expr in fixed_time_expression(), tz in zone(), at in instant()
    ) {
        let s = schedule(&expr, tz);
        prop_assert_eq!(s.dst_rule(), DstRule::FixedTime);
        let mut seen = std::collections::HashSet::new();
        for fire in s.upcoming(at - TimeDelta::hours(12), 50) {
            if fire > at + TimeDelta::hours(12) {
                break;
            }
            let wall = fire.with_timezone(&tz).naive_local();
            prop_assert!(seen.insert(wall), "{} {}: {} fires twice", expr, tz, wall);
        }
    }

    /// Where croner's notion of fixed-time (single second, minute and hour) agrees with
    /// cronie's (no field starts with `*`), croner's own OCPS search must give our answer.
    #[test]
    fn agrees_with_croner_where_the_rules_coincide(
        expr in expression(), tz in zone(), at in instant()
    ) {
        let s = schedule(&expr, tz);
        let cron = croner(&expr);
        let croner_fixed = cron.determine_job_type() == croner::JobType::FixedTime;
        if croner_fixed != (s.dst_rule() == DstRule::FixedTime) {
            return Ok(()); // lists and ranges: croner calls them interval jobs, cronie does not
        }
        let theirs = cron
            .find_next_occurrence(&at.with_timezone(&tz), false)
            .ok()
            .map(|fire| fire.to_utc());
        prop_assert_eq!(s.next_after(at), theirs, "{} in {} after {}", expr, tz, at);
    }
}

// --- the wall-clock search against croner --------------------------------------------------------

/// croner 4 as it searched for us until issue 10: the numeric pattern `fields` writes, parsed with
/// the options we used.
fn croner(expr: &str) -> croner::Cron {
    let fields = fields::parse(expr).unwrap_or_else(|err| panic!("{expr}: {err}"));
    CronParser::builder()
        .seconds(Seconds::Required)
        .year(Year::Disallowed)
        .dom_and_dow(fields.starred_day)
        .build()
        .parse(&fields.pattern)
        .unwrap_or_else(|err| panic!("{expr}: croner refused {:?}: {err}", fields.pattern))
}

fn matcher(expr: &str) -> Matcher {
    let fields = fields::parse(expr).unwrap_or_else(|err| panic!("{expr}: {err}"));
    Matcher::new(fields.masks, fields.starred_day)
}

/// One field of any shape crontab(5) allows: a list of one to three of `*`, `N`, `N-M`, `*/S`
/// and `N-M/S`, values drawn from `min..=max` (or `names` for `N`).
fn any_field(min: u32, max: u32, names: &'static [&'static str]) -> impl Strategy<Value = String> {
    let value = move || {
        if names.is_empty() {
            (min..=max).prop_map(|v| v.to_string()).boxed()
        } else {
            prop_oneof![
                3 => (min..=max).prop_map(|v| v.to_string()),
                1 => proptest::sample::select(names).prop_map(str::to_owned),
            ]
            .boxed()
        }
    };
    let range = (min..=max, min..=max).prop_map(|(a, b)| (a.min(b), a.max(b)));
    let item = prop_oneof![
        1 => Just("*".to_owned()),
        4 => value(),
        2 => range.clone().prop_map(|(a, b)| format!("{a}-{b}")),
        1 => (1..=max).prop_map(|step| format!("*/{step}")),
        1 => (range, 1..=max).prop_map(|((a, b), step)| format!("{a}-{b}/{step}")),
    ];
    proptest::collection::vec(item, 1..=3).prop_map(|items| items.join(","))
}

/// Six random fields that `fields` accepts (it refuses e.g. 30 FEB).
fn any_expression() -> impl Strategy<Value = String> {
    (
        any_field(0, 59, &[]),
        any_field(0, 59, &[]),
        any_field(0, 23, &[]),
        any_field(1, 31, &[]),
        any_field(1, 12, &["JAN", "feb", "Jun", "DEC"]),
        any_field(0, 7, &["SUN", "mon", "Fri", "SAT"]),
    )
        .prop_map(|(s, m, h, dom, mon, dow)| format!("{s} {m} {h} {dom} {mon} {dow}"))
        .prop_filter("refused by fields", |expr| fields::parse(expr).is_ok())
}

/// Wall times in this century, at the first and last years searched, and at month and year
/// ends, with or without a fraction of a second.
fn any_wall() -> impl Strategy<Value = NaiveDateTime> {
    let at = |year: std::ops::RangeInclusive<i32>| {
        (year, 1u32..=12, 1u32..=31, 0u32..24, 0u32..60, 0u32..60)
            .prop_filter_map("no such day", |(y, mo, d, h, mi, s)| {
                NaiveDate::from_ymd_opt(y, mo, d)?.and_hms_opt(h, mi, s)
            })
    };
    let end_of = |year: std::ops::RangeInclusive<i32>| {
        (year, 1u32..=12, 0i64..=3).prop_filter_map("no such month", |(y, mo, back)| {
            let next =
                NaiveDate::from_ymd_opt(y, mo, 1)?.checked_add_months(chrono::Months::new(1))?;
            next.and_hms_opt(0, 0, 0)?
                .checked_sub_signed(TimeDelta::seconds(back))
        })
    };
    let wall = prop_oneof![
        4 => at(2000..=2100),
        2 => end_of(2020..=2030),
        1 => at(4998..=5001),
        1 => end_of(4999..=5000),
        1 => at(0..=2),
    ];
    let nanos = prop_oneof![2 => Just(0u32), 1 => 0u32..1_000_000_000];
    (wall, nanos).prop_filter_map("", |(wall, ns)| wall.with_nanosecond(ns))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4000, ..ProptestConfig::default() })]

    /// Our wall-clock search answers what croner's did, inclusive and exclusive, up to its year
    /// limit (issue 10 replaced it; every DST rule above rests on these answers).
    #[test]
    fn matcher_agrees_with_croner(expr in any_expression(), wall in any_wall()) {
        let (ours, theirs) = (matcher(&expr), croner(&expr));
        for inclusive in [true, false] {
            prop_assert_eq!(
                ours.next_match(wall, inclusive),
                theirs.find_next_occurrence(&wall, inclusive).ok(),
                "`{}` from {} inclusive={}", expr, wall, inclusive
            );
        }
    }
}
