//! A secret value (a password, a bearer token, a webhook's signing key) that never shows in logs
//! or debug output.
//!
//! Owns: the wrapper and the one way to read the value back.
//! Must not: know where a secret comes from or where it is sent.

/// A secret that never shows in logs or debug output.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret itself, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}
