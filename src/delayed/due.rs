//! When a submission is due, from what a person typed: `--at` (RFC 3339, or a local date-time
//! with a zone) or `--in` (a duration from now).
//!
//! Owns: parsing and resolving due times, with errors that say what was expected.
//! Must not: read the clock (callers pass `now`) or do I/O.

use chrono::{DateTime, LocalResult, NaiveDateTime, TimeZone, Utc};
use chrono_tz::Tz;

/// Why a due time was not understood.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DueError {
    #[error(
        "cannot read {text:?} as a time: expected RFC 3339 (2026-11-22T14:00:00+01:00), or a local \
         date-time (2026-11-22 14:00[:00]) with --timezone"
    )]
    Unreadable { text: String },
    #[error(
        "{text:?} has no UTC offset: say which zone it is in with --timezone (e.g. Europe/Berlin), \
         or give an offset (2026-11-22T14:00:00+01:00)"
    )]
    NoZone { text: String },
    #[error("{text:?} does not exist in {zone}: the clocks skip it (daylight saving)")]
    Skipped { text: String, zone: Tz },
    #[error(
        "{text:?} happens twice in {zone} (daylight saving ends): give the offset, e.g. {first} or {second}"
    )]
    Ambiguous {
        text: String,
        zone: Tz,
        first: String,
        second: String,
    },
    #[error("cannot read {text:?} as a duration (e.g. 30m, 2h 15m, 45s): {reason}")]
    BadDuration { text: String, reason: String },
}

/// The instant `--at TEXT` names: RFC 3339 as is, or a local date-time in `zone`.
///
/// # Errors
/// Unreadable text, a local time without a zone, or one that does not exist or is ambiguous in it.
pub fn due_at(text: &str, zone: Option<Tz>) -> Result<DateTime<Utc>, DueError> {
    let trimmed = text.trim();
    if let Ok(at) = DateTime::parse_from_rfc3339(trimmed) {
        return Ok(at.with_timezone(&Utc));
    }
    let local = [
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%d %H:%M",
        "%Y-%m-%dT%H:%M",
    ]
    .iter()
    .find_map(|format| NaiveDateTime::parse_from_str(trimmed, format).ok())
    .ok_or_else(|| DueError::Unreadable {
        text: text.to_owned(),
    })?;
    let zone = zone.ok_or_else(|| DueError::NoZone {
        text: text.to_owned(),
    })?;
    match zone.from_local_datetime(&local) {
        LocalResult::Single(at) => Ok(at.with_timezone(&Utc)),
        LocalResult::None => Err(DueError::Skipped {
            text: text.to_owned(),
            zone,
        }),
        LocalResult::Ambiguous(first, second) => Err(DueError::Ambiguous {
            text: text.to_owned(),
            zone,
            first: first.to_rfc3339(),
            second: second.to_rfc3339(),
        }),
    }
}

/// The instant `--in TEXT` names: `now` plus a duration like `30m` or `2h 15m`.
///
/// # Errors
/// The text is not a duration, or it reaches beyond the representable range.
pub fn due_in(text: &str, now: DateTime<Utc>) -> Result<DateTime<Utc>, DueError> {
    let bad = |reason: String| DueError::BadDuration {
        text: text.to_owned(),
        reason,
    };
    let duration = humantime::parse_duration(text.trim()).map_err(|err| bad(err.to_string()))?;
    chrono::Duration::from_std(duration)
        .ok()
        .and_then(|d| now.checked_add_signed(d))
        .ok_or_else(|| bad("too far ahead".to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .expect("valid")
            .with_timezone(&Utc)
    }

    #[test]
    fn rfc3339_is_taken_as_is_and_local_times_need_a_zone() {
        assert_eq!(
            due_at("2026-11-22T14:00:00+01:00", None),
            Ok(utc("2026-11-22T13:00:00Z"))
        );
        let berlin = Some(chrono_tz::Europe::Berlin);
        assert_eq!(
            due_at("2026-11-22 14:00", berlin),
            Ok(utc("2026-11-22T13:00:00Z"))
        );
        assert_eq!(
            due_at("2026-07-01T14:00:30.5", berlin),
            Ok(utc("2026-07-01T12:00:30.5Z"))
        );
        assert!(matches!(
            due_at("2026-11-22 14:00", None),
            Err(DueError::NoZone { .. })
        ));
        assert!(matches!(
            due_at("tomorrow", berlin),
            Err(DueError::Unreadable { .. })
        ));
    }

    #[test]
    fn local_times_that_daylight_saving_skips_or_repeats_are_refused_with_the_way_out() {
        let berlin = Some(chrono_tz::Europe::Berlin);
        assert!(matches!(
            due_at("2026-03-29 02:30", berlin),
            Err(DueError::Skipped { .. })
        ));
        let err = due_at("2026-10-25 02:30", berlin).expect_err("ambiguous");
        assert!(
            err.to_string()
                .contains("2026-10-25T02:30:00+02:00 or 2026-10-25T02:30:00+01:00"),
            "{err}"
        );
    }

    #[test]
    fn durations_count_from_now() {
        let now = utc("2026-11-22T13:00:00Z");
        assert_eq!(due_in("30m", now), Ok(utc("2026-11-22T13:30:00Z")));
        assert_eq!(due_in("2h 15m", now), Ok(utc("2026-11-22T15:15:00Z")));
        assert!(matches!(
            due_in("soon", now),
            Err(DueError::BadDuration { .. })
        ));
    }
}
