//! `[audit]`: how long the trail of operator actions is kept (`crate::audit`).
//!
//! Owns: `keep`, its default and its floor.
//! Must not: read or prune the trail.

use std::time::Duration;

use super::AuditConfig;
use super::schema::RawAudit;
use super::validator::Validator;

/// How long the trail is kept when `[audit] keep` does not say.
pub const DEFAULT_KEEP: Duration = Duration::from_secs(30 * 24 * 3600);
/// The shortest `keep`: a day's entries go together, so less keeps them no shorter.
const MIN_KEEP: Duration = Duration::from_secs(3600);

impl Validator<'_> {
    pub(super) fn audit(&mut self, raw: Option<RawAudit>) -> AuditConfig {
        let raw = raw.map(|raw| raw.keep).unwrap_or_default();
        let span = raw.as_ref().map(toml::Spanned::span);
        let keep = self.duration(raw, "audit.keep", DEFAULT_KEEP);
        if let Some(span) = span.filter(|_| keep < MIN_KEEP) {
            self.problem(span, "audit.keep", "expected at least \"1h\"");
        }
        AuditConfig { keep }
    }
}
