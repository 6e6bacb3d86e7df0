//! The text of a cron expression: fields, macros, names, ranges, steps and lists.
//!
//! Owns: checking an expression against crontab(5) syntax with an operator's message that names
//! the field, and reading it into the set of values each field selects (bit masks). Also reads
//! the two facts cronie takes from the *text* of a line rather than from its values: whether the
//! second, minute or hour field starts with `*` (the DST rule) and whether the day of month or
//! the day of week does (how the two day fields combine).
//! Must not: compute fire times (`matcher` and `schedule` do) or know about time zones.

use std::ops::Range;

use super::ScheduleError;

/// One of the six fields: its name in messages, its values, and the names it accepts.
struct Spec {
    name: &'static str,
    min: u32,
    max: u32,
    /// Three-letter names, case-insensitive; the first one stands for `min`.
    names: &'static [&'static str],
}

impl Spec {
    const fn new(name: &'static str, min: u32, max: u32, names: &'static [&'static str]) -> Self {
        Self {
            name,
            min,
            max,
            names,
        }
    }
}

const MONTH_NAMES: &[&str] = &[
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const DAY_NAMES: &[&str] = &["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

const SECOND: Spec = Spec::new("second", 0, 59, &[]);
const MINUTE: Spec = Spec::new("minute", 0, 59, &[]);
const HOUR: Spec = Spec::new("hour", 0, 23, &[]);
const DAY_OF_MONTH: Spec = Spec::new("day of month", 1, 31, &[]);
const MONTH: Spec = Spec::new("month", 1, 12, MONTH_NAMES);
// 0 and 7 are both Sunday, as in crontab(5); the matcher folds 7 into 0.
const DAY_OF_WEEK: Spec = Spec::new("day of week", 0, 7, DAY_NAMES);

const SPECS: [&Spec; 6] = [&SECOND, &MINUTE, &HOUR, &DAY_OF_MONTH, &MONTH, &DAY_OF_WEEK];

/// The macros of crontab(5) except `@reboot`, as six-field expressions.
const MACROS: [(&str, &str); 7] = [
    ("@hourly", "0 0 * * * *"),
    ("@daily", "0 0 0 * * *"),
    ("@midnight", "0 0 0 * * *"),
    ("@weekly", "0 0 0 * * 0"),
    ("@monthly", "0 0 0 1 * *"),
    ("@yearly", "0 0 0 1 1 *"),
    ("@annually", "0 0 0 1 1 *"),
];

/// The longest each month can be, February in a leap year.
const MONTH_MAX_DAYS: [u32; 12] = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

/// A checked expression, read into values.
#[derive(Debug)]
pub(super) struct Fields {
    /// The values each field selects, bit `n` for value `n`, in the order `sec min hour dom mon
    /// dow`; day of week 7 stays bit 7 (Sunday, like bit 0).
    pub masks: [u64; 6],
    /// The second, minute or hour field starts with `*` (cronie's `MIN_STAR`/`HR_STAR`).
    pub starred_time: bool,
    /// The day of month or the day of week field starts with `*` (cronie's `DOM_STAR`/
    /// `DOW_STAR`): then a day must match both fields, otherwise either.
    pub starred_day: bool,
    /// The same expression as plain numbers, `*`, `-`, `/` and `,` in six fields, which croner 4
    /// parses: the tests hold our search against croner's with it (croner searched for us until
    /// issue 10). A few short strings per parse, and `Fields` does not outlive `Schedule::parse`.
    #[cfg_attr(
        not(test),
        expect(dead_code, reason = "read by the croner oracle in tests")
    )]
    pub pattern: String,
}

/// Checks `expr` (six fields, five fields, or a macro) and reads its values.
pub(super) fn parse(expr: &str) -> Result<Fields, ScheduleError> {
    let words = split_with_spans(expr);
    if let Some((first, span)) = words.first().filter(|(word, _)| word.starts_with('@')) {
        let name = first.to_ascii_lowercase();
        let Some((_, expansion)) = MACROS.iter().find(|(known, _)| *known == name) else {
            return Err(ScheduleError::UnknownMacro {
                name: (*first).to_owned(),
            });
        };
        if words.len() > 1 {
            return Err(ScheduleError::MacroWithFields {
                name: (*first).to_owned(),
                extra: words.len() - 1,
            });
        }
        // Errors in an expansion would be our bug; they point at the macro either way.
        let words: Vec<_> = expansion
            .split(' ')
            .map(|word| (word, span.clone()))
            .collect();
        return parse_six(&words);
    }
    match words.len() {
        6 => parse_six(&words),
        // Classic crontab: seconds = 0.
        5 => {
            let mut six = Vec::with_capacity(6);
            six.push(("0", 0..0));
            six.extend(words);
            parse_six(&six)
        }
        found => Err(ScheduleError::FieldCount { found }),
    }
}

fn parse_six(words: &[(&str, Range<usize>)]) -> Result<Fields, ScheduleError> {
    let mut normalized = Vec::with_capacity(6);
    let mut masks = [0u64; 6];
    for (i, (spec, (text, span))) in SPECS.iter().zip(words).enumerate() {
        let (field, mask) = parse_field(spec, text).map_err(|problem| ScheduleError::Field {
            field: spec.name,
            span: span.clone(),
            problem,
        })?;
        normalized.push(field);
        masks[i] = mask;
    }
    let starts_with_star = |i: usize| words[i].0.starts_with('*');
    let starred_day = starts_with_star(3) || starts_with_star(5);

    // With a starred day of week only the day of month decides (cronie's DOM/DOW rule): refuse a
    // day that no selected month has, such as 30 FEB, instead of a job that silently never runs.
    if starts_with_star(5) && !starts_with_star(3) {
        let some_day_exists = (1..=12u32).any(|month| {
            masks[4] & (1 << month) != 0
                && (1..=MONTH_MAX_DAYS[month as usize - 1]).any(|day| masks[3] & (1 << day) != 0)
        });
        if !some_day_exists {
            return Err(ScheduleError::Field {
                field: DAY_OF_MONTH.name,
                span: words[3].1.clone(),
                problem: format!("{} never occurs in month {}", words[3].0, words[4].0),
            });
        }
    }
    Ok(Fields {
        masks,
        starred_time: (0..3).any(starts_with_star),
        starred_day,
        pattern: normalized.join(" "),
    })
}

/// One field: a comma list of `*`, `N`, `N-M`, `*/S` or `N-M/S` (crontab(5); a step needs `*` or
/// a range before it, as in cronie and croner's strict mode). Returns the field as croner reads
/// it (for the tests' oracle) and the set of values it selects as a bit mask.
fn parse_field(spec: &Spec, text: &str) -> Result<(String, u64), String> {
    let mut items = Vec::new();
    let mut mask = 0u64;
    for item in text.split(',') {
        if item.is_empty() {
            return Err(format!("empty list item in {text:?}"));
        }
        let (range, step) = match item.split_once('/') {
            Some((range, step)) => (range, Some(step)),
            None => (item, None),
        };
        let step = match step {
            None => 1,
            Some(step) => parse_step(spec, step)?,
        };
        let (first, last) = if range == "*" {
            (spec.min, spec.max)
        } else if let Some((first, last)) = range.split_once('-') {
            let (first, last) = (value(spec, first, false)?, value(spec, last, true)?);
            if first > last {
                return Err(format!(
                    "range {range} runs backwards (write {range_first}-{max},{min}-{range_last} \
                     to wrap around)",
                    range_first = first,
                    range_last = last,
                    min = spec.min,
                    max = spec.max,
                ));
            }
            (first, last)
        } else {
            let single = value(spec, range, false)?;
            if step != 1 {
                return Err(format!(
                    "{item:?} has a step without a range: write */{step} or {single}-{max}/{step}",
                    max = spec.max,
                ));
            }
            (single, single)
        };
        for v in (first..=last).step_by(step as usize) {
            mask |= 1 << v;
        }
        items.push(match (range == "*", step) {
            // croner reads a bare `*` only as the whole field; inside a list it needs the range.
            (true, 1) if text == "*" => "*".to_owned(),
            (true, 1) => format!("{}-{}", spec.min, spec.max),
            (true, step) => format!("*/{step}"),
            (false, 1) if first == last => first.to_string(),
            (false, 1) => format!("{first}-{last}"),
            (false, step) => format!("{first}-{last}/{step}"),
        });
    }
    Ok((items.join(","), mask))
}

fn parse_step(spec: &Spec, step: &str) -> Result<u32, String> {
    let range = || format!("step {step} is out of range 1-{}", spec.max);
    if step.is_empty() || !step.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("step {step:?} is not a number"));
    }
    match step.parse::<u32>() {
        Ok(step) if (1..=spec.max).contains(&step) => Ok(step),
        _ => Err(range()),
    }
}

/// A number or a name. `SUN` ends a range as 7, so `FRI-SUN` reads as crontab users mean it.
fn value(spec: &Spec, token: &str, range_end: bool) -> Result<u32, String> {
    if !token.is_empty() && token.bytes().all(|b| b.is_ascii_digit()) {
        return match token.parse::<u32>() {
            Ok(v) if (spec.min..=spec.max).contains(&v) => Ok(v),
            _ => Err(format!("{token} is out of range {}-{}", spec.min, spec.max)),
        };
    }
    if let Some(i) = spec
        .names
        .iter()
        .position(|name| name.eq_ignore_ascii_case(token))
    {
        let v = spec.min + i as u32;
        return Ok(if range_end && spec.max == 7 && v == 0 {
            7
        } else {
            v
        });
    }
    let names = match spec.names {
        [] => String::new(),
        [first, .., last] => format!(" or name ({first}-{last})"),
        [only] => format!(" or name ({only})"),
    };
    let hint = if token == "?" {
        "; write * for any"
    } else {
        ""
    };
    Err(format!(
        "{token:?} is not a number ({}-{}){names}{hint}",
        spec.min, spec.max
    ))
}

/// The whitespace-separated words of `expr` with their byte ranges, for error spans.
fn split_with_spans(expr: &str) -> Vec<(&str, Range<usize>)> {
    let mut words = Vec::new();
    let mut start = None;
    for (i, c) in expr.char_indices() {
        match (c.is_whitespace(), start) {
            (true, Some(s)) => {
                words.push((&expr[s..i], s..i));
                start = None;
            }
            (false, None) => start = Some(i),
            _ => {}
        }
    }
    if let Some(s) = start {
        words.push((&expr[s..], s..expr.len()));
    }
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(expr: &str) -> String {
        parse(expr).unwrap().pattern
    }

    #[test]
    fn names_become_numbers_in_their_own_field_only() {
        assert_eq!(pattern("0 0 1 jan,Dec mon-FRI"), "0 0 0 1 1,12 1-5");
        assert_eq!(pattern("0 0 0 * * SAT-SUN"), "0 0 0 * * 6-7");
        assert_eq!(pattern("0 0 0 * * SUN-SAT"), "0 0 0 * * 0-6");
        let err = parse("0 0 0 * MON *").unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"month: "MON" is not a number (1-12) or name (JAN-DEC)"#
        );
    }

    #[test]
    fn stars_inside_lists_and_steps_are_spelled_for_croner() {
        assert_eq!(pattern("*/10 *,5 * * * *"), "*/10 0-59,5 * * * *");
        assert_eq!(pattern("0 0-30/10 1-5 * * *"), "0 0-30/10 1-5 * * *");
    }

    #[test]
    fn star_flags_follow_the_first_character_as_cronie_does() {
        let f = parse("0 0-59/15 */2 * * *").unwrap();
        assert!(f.starred_time);
        let f = parse("0 0-59/15 2 * * *").unwrap();
        assert!(!f.starred_time);
        assert!(f.starred_day);
        let f = parse("0 0 2 1 * MON").unwrap();
        assert!(!f.starred_day);
        assert!(parse("@hourly").unwrap().starred_time);
        assert!(!parse("@daily").unwrap().starred_time);
    }

    #[test]
    fn spans_point_at_the_offending_field() {
        let err = parse("  0 0  25 * * *").unwrap_err();
        assert_eq!(err.span(), Some(7..9));
        let err = parse("30 25 * * *").unwrap_err();
        assert_eq!(err.span(), Some(3..5));
        assert_eq!(err.field(), Some("hour"));
    }
}
