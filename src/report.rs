//! Rendering errors for people: one line, the whole `source()` chain, each cause once.
//!
//! Owns: how an error reads in logs and on stderr.
//! Must not: decide exit codes (that is `cli`).

use std::error::Error;

/// `outer: cause: root cause`, for logs and for main's final message.
pub fn error_chain(err: &dyn Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        // Some errors repeat their source in their own message; say each thing once.
        if !text.ends_with(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer thing failed")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn chain_names_every_cause_once() {
        let err = Outer(std::io::Error::other("disk on fire"));
        assert_eq!(error_chain(&err), "outer thing failed: disk on fire");
    }
}
