//! Why a cron expression or a time zone name was refused, in words for operators.
//!
//! Owns: `ScheduleError` and the field and span it names.
//! Must not: parse anything (`fields` and `parse_timezone` do).

use std::ops::Range;

/// Why an expression or a time zone name was refused. Messages are for operators.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// Not 5 or 6 whitespace-separated fields.
    #[error("expected 5 or 6 fields (sec min hour dom mon dow), found {found}")]
    FieldCount {
        /// How many fields the expression has.
        found: usize,
    },
    /// `@something` that is not one of the known macros.
    #[error(
        "unknown macro {name} (known: @hourly, @daily, @midnight, @weekly, @monthly, @yearly, \
         @annually)"
    )]
    UnknownMacro {
        /// The macro as written.
        name: String,
    },
    /// A macro followed by more fields.
    #[error("macro {name} stands alone, found {extra} more field(s) after it")]
    MacroWithFields {
        /// The macro as written.
        name: String,
        /// How many fields follow it.
        extra: usize,
    },
    /// One field is wrong; the message names it, e.g. `hour: 25 is out of range 0-23`.
    #[error("{field}: {problem}")]
    Field {
        /// `second`, `minute`, `hour`, `day of month`, `month` or `day of week`.
        field: &'static str,
        /// Byte range of the field in the expression; empty for the implied seconds field.
        span: Range<usize>,
        /// What is wrong with it.
        problem: String,
    },
    /// Not an IANA time zone name.
    #[error("unknown time zone {name:?}: {}", zone_hint(.suggestion))]
    UnknownTimeZone {
        /// The name as written.
        name: String,
        /// A known zone that is spelt almost the same.
        suggestion: Option<&'static str>,
    },
}

impl ScheduleError {
    /// The field that failed (`second` … `day of week`), for the config module's context.
    pub fn field(&self) -> Option<&'static str> {
        match self {
            ScheduleError::Field { field, .. } => Some(field),
            _ => None,
        }
    }

    /// Byte range of the failed field within the expression, for a caret under it.
    pub fn span(&self) -> Option<Range<usize>> {
        match self {
            ScheduleError::Field { span, .. } if !span.is_empty() => Some(span.clone()),
            _ => None,
        }
    }
}

fn zone_hint(suggestion: &Option<&'static str>) -> String {
    match suggestion {
        Some(zone) => format!("did you mean {zone:?}?"),
        None => r#"expected an IANA name such as "Europe/Berlin" or "UTC""#.to_owned(),
    }
}
