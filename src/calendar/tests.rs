//! Calendars on their own: days, hours, weekdays and iCalendar files, in the calendar's zone,
//! through a DST change.

use super::*;

fn at(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .expect("an instant")
        .with_timezone(&Utc)
}

fn calendar(zone: Tz) -> Calendar {
    Calendar {
        name: "c".into(),
        timezone: zone,
        days: None,
        hours: Vec::new(),
        weekdays: None,
    }
}

fn date(text: &str) -> NaiveDate {
    NaiveDate::parse_from_str(text, "%Y-%m-%d").expect("a date")
}

#[test]
fn a_day_is_the_calendars_day_in_its_own_zone() {
    let holidays = Calendar {
        days: Some(Days {
            dates: [date("2026-12-25")].into(),
            spans: Vec::new(),
        }),
        ..calendar(chrono_tz::Europe::Berlin)
    };
    // 23:30 UTC on the 24th is already the 25th in Berlin; 23:30 UTC on the 25th is not.
    assert!(holidays.covers(at("2026-12-24T23:30:00Z")));
    assert!(holidays.covers(at("2026-12-25T22:59:59Z")));
    assert!(!holidays.covers(at("2026-12-25T23:00:00Z")));
    assert!(!holidays.covers(at("2026-12-24T22:59:59Z")));
}

#[test]
fn business_hours_are_weekday_windows_and_a_window_may_run_past_midnight() {
    let business = Calendar {
        hours: vec![parse_hours("09:00-17:00").expect("a window")],
        weekdays: Some(
            ["mon", "Tue", "wed", "thursday", "fri"]
                .iter()
                .map(|day| parse_weekday(day).expect("a weekday"))
                .collect(),
        ),
        ..calendar(chrono_tz::UTC)
    };
    // 2026-11-27 is a Friday.
    assert!(business.covers(at("2026-11-27T09:00:00Z")));
    assert!(business.covers(at("2026-11-27T16:59:59Z")));
    assert!(
        !business.covers(at("2026-11-27T17:00:00Z")),
        "the end is out"
    );
    assert!(!business.covers(at("2026-11-28T10:00:00Z")), "Saturday");
    let night = Calendar {
        hours: vec![parse_hours("22:00-06:00").expect("a window")],
        ..calendar(chrono_tz::UTC)
    };
    assert!(night.covers(at("2026-11-27T23:00:00Z")));
    assert!(night.covers(at("2026-11-28T05:59:00Z")));
    assert!(!night.covers(at("2026-11-28T06:00:00Z")));
    let all_day = parse_hours("00:00-24:00").expect("the whole day");
    let whole = Calendar {
        hours: vec![all_day],
        ..calendar(chrono_tz::UTC)
    };
    assert!(whole.covers(at("2026-11-27T00:00:00Z")) && whole.covers(at("2026-11-27T23:59:59Z")));
    for bad in ["9-17", "09:00", "09:00-09:00", "25:00-26:00", "09:00-17:60"] {
        assert!(parse_hours(bad).is_err(), "{bad}");
    }
    assert!(parse_weekday("someday").is_err());
}

#[test]
fn an_hours_window_follows_the_wall_clock_through_a_dst_change() {
    // Berlin springs forward at 2026-03-29 01:00 UTC (02:00 CET → 03:00 CEST) and falls back at
    // 2026-10-25 01:00 UTC (03:00 CEST → 02:00 CET).
    let early = Calendar {
        hours: vec![parse_hours("01:00-04:00").expect("a window")],
        ..calendar(chrono_tz::Europe::Berlin)
    };
    // Spring: 01:00 CET is 00:00 UTC; 04:00 CEST is 02:00 UTC: the window lasts two hours.
    assert!(!early.covers(at("2026-03-28T23:59:59Z")));
    assert!(early.covers(at("2026-03-29T00:00:00Z")));
    assert!(early.covers(at("2026-03-29T01:59:59Z")));
    assert!(!early.covers(at("2026-03-29T02:00:00Z")));
    // Autumn: 01:00 CEST is 23:00 UTC the day before; 04:00 CET is 03:00 UTC: four hours, the
    // repeated hour covered on both passes.
    assert!(early.covers(at("2026-10-24T23:00:00Z")));
    assert!(early.covers(at("2026-10-25T00:30:00Z")), "02:30 CEST");
    assert!(early.covers(at("2026-10-25T01:30:00Z")), "02:30 CET");
    assert!(early.covers(at("2026-10-25T02:59:59Z")));
    assert!(!early.covers(at("2026-10-25T03:00:00Z")));
}

#[test]
fn an_icalendar_files_events_become_days_and_spans_and_a_recurring_one_is_refused() {
    let text = "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//test//EN\r\n\
        BEGIN:VEVENT\r\nUID:1\r\nSUMMARY:Christmas\r\nDTSTART;VALUE=DATE:20261225\r\nDTEND;VALUE=DATE:20261227\r\nEND:VEVENT\r\n\
        BEGIN:VEVENT\r\nUID:2\r\nSUMMARY:New Year\r\nDTSTART;VALUE=DATE:20270101\r\nEND:VEVENT\r\n\
        BEGIN:VEVENT\r\nUID:3\r\nSUMMARY:Maintenance\r\nDTSTART;TZID=Europe/Berlin:20261130T220000\r\nDTEND;TZID=Europe/Berlin:20261201T020000\r\nEND:VEVENT\r\n\
        END:VCALENDAR\r\n";
    let days = read_icalendar(text, chrono_tz::UTC).expect("a calendar");
    let dates: Vec<String> = days.dates.iter().map(ToString::to_string).collect();
    assert_eq!(
        dates,
        ["2026-12-25", "2026-12-26", "2027-01-01"],
        "DTEND is exclusive"
    );
    assert_eq!(
        days.spans,
        [(at("2026-11-30T21:00:00Z"), at("2026-12-01T01:00:00Z"))]
    );
    let recurring = text.replace(
        "SUMMARY:New Year\r\n",
        "SUMMARY:New Year\r\nRRULE:FREQ=YEARLY\r\n",
    );
    let err = read_icalendar(&recurring, chrono_tz::UTC).expect_err("refused");
    assert!(err.contains("\"New Year\" recurs"), "{err}");
    let unknown = text.replace("TZID=Europe/Berlin", "TZID=Mars/Olympus");
    let err = read_icalendar(&unknown, chrono_tz::UTC).expect_err("refused");
    assert!(err.contains("unknown time zone \"Mars/Olympus\""), "{err}");
    assert!(read_icalendar("not a calendar", chrono_tz::UTC).is_err());
}

#[test]
fn a_jobs_rule_skips_what_except_covers_and_what_only_does_not() {
    let holidays = Arc::new(Calendar {
        name: "holidays".into(),
        days: Some(Days {
            dates: [date("2026-12-25")].into(),
            spans: Vec::new(),
        }),
        ..calendar(chrono_tz::UTC)
    });
    let business = Arc::new(Calendar {
        name: "business-hours".into(),
        hours: vec![parse_hours("09:00-17:00").expect("a window")],
        ..calendar(chrono_tz::UTC)
    });
    let rule = CalendarRule {
        except: vec![holidays],
        only: vec![business],
    };
    assert_eq!(rule.skips(at("2026-12-24T10:00:00Z")), None);
    let skip = rule.skips(at("2026-12-25T10:00:00Z")).expect("a holiday");
    assert_eq!(skip.reason(), "skipped by calendar \"holidays\" (except)");
    let skip = rule.skips(at("2026-12-24T18:00:00Z")).expect("after hours");
    assert_eq!(skip.reason(), "outside calendar \"business-hours\" (only)");
    assert!(
        CalendarRule::default()
            .skips(at("2026-12-25T10:00:00Z"))
            .is_none()
    );
}

/// `changes_after` names every instant where `covers` changes (so a search may jump to it):
/// minute by minute through both DST changes of a year, in a zone that changes its clocks at
/// night (Berlin) and in one that changes them at midnight (Santiago), for windows, days,
/// weekdays and a span.
#[test]
fn a_calendars_answer_changes_only_where_changes_after_says() {
    let window = |zone| Calendar {
        name: "window".into(),
        hours: vec![
            parse_hours("02:30-03:30").expect("a window"),
            parse_hours("23:30-00:30").expect("a window"),
        ],
        ..calendar(zone)
    };
    let days = |zone| Calendar {
        name: "days".into(),
        days: Some(Days {
            dates: [date("2026-03-29"), date("2026-04-05"), date("2026-09-06")].into(),
            spans: vec![(at("2026-10-25T00:17:00Z"), at("2026-10-25T01:43:00Z"))],
        }),
        weekdays: Some(vec![Weekday::Sun, Weekday::Sat]),
        ..calendar(zone)
    };
    let zones = [chrono_tz::Europe::Berlin, chrono_tz::America::Santiago];
    let days_of_change = [
        "2026-03-28T12:00:00Z",
        "2026-04-04T12:00:00Z",
        "2026-09-05T12:00:00Z",
        "2026-10-24T12:00:00Z",
    ];
    for zone in zones {
        for calendar in [window(zone), days(zone)] {
            for start in days_of_change {
                let mut before = at(start);
                for _ in 0..(2 * 24 * 60) {
                    let now = before + chrono::Duration::minutes(1);
                    let change = calendar.changes_after(before).expect("it changes");
                    assert!(
                        change > before,
                        "{} in {zone}: {change} after {before}",
                        calendar.name
                    );
                    if calendar.covers(now) != calendar.covers(before) {
                        assert!(
                            change <= now,
                            "{} in {zone}: covers changed by {now}, next change said {change}",
                            calendar.name
                        );
                    }
                    before = now;
                }
            }
        }
    }
    assert_eq!(
        calendar(chrono_tz::UTC).changes_after(at(days_of_change[0])),
        None
    );
}
