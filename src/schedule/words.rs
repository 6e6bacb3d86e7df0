//! A schedule in words for people ("At 02:30, Monday through Friday"), beside the expression as
//! written. The five-field part is described by `cronspeak`; the seconds field zkcron adds is
//! put in front or after.
//!
//! Owns: that sentence. Must not: decide anything from it (the matcher decides when a job fires).

/// `expression` in words, or `None` where the describer cannot say it (the expression as written
/// is then the only form shown).
pub fn describe(expression: &str) -> Option<String> {
    let fields: Vec<&str> = expression.split_whitespace().collect();
    let options = cronspeak::Options::new().time_format(cronspeak::TimeFormat::H24);
    let five = |rest: &[&str]| cronspeak::describe_with(&rest.join(" "), &options).ok();
    match fields.as_slice() {
        [single] if single.starts_with('@') => five(&[single]),
        [_, _, _, _, _] => five(&fields),
        [seconds, rest @ ..] if rest.len() == 5 => {
            let every_minute = rest.iter().all(|field| *field == "*");
            match *seconds {
                "0" => five(rest),
                "*" if every_minute => Some("Every second".to_owned()),
                step if every_minute && step.starts_with("*/") => step
                    .strip_prefix("*/")
                    .map(|every| format!("Every {every} seconds")),
                seconds if every_minute => Some(format!("At second {seconds} of every minute")),
                seconds => Some(format!("{}, at second {seconds}", five(rest)?)),
            }
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::describe;

    #[test]
    fn the_seconds_field_is_said_too() {
        let cases = [
            ("0 30 2 * * *", Some("At 02:30")),
            ("30 2 * * *", Some("At 02:30")),
            ("* * * * * *", Some("Every second")),
            ("*/5 * * * * *", Some("Every 5 seconds")),
            ("15 * * * * *", Some("At second 15 of every minute")),
            ("0 0 9 * * MON-FRI", Some("At 09:00, Monday through Friday")),
            ("30 0 9 * * *", Some("At 09:00, at second 30")),
            ("@daily", Some("At 00:00")),
            ("1 2 3", None),
        ];
        for (expression, words) in cases {
            assert_eq!(describe(expression).as_deref(), words, "{expression}");
        }
    }
}
