//! `[[limit]]` and a job's `limits`: cluster-wide caps on runs (issue 19).
//!
//! Owns: a limit's name (a znode name, unique) and `max`, and resolving the names a job lists to
//! declared limits.
//! Must not: hold or count leases (`ledger::limits` does, the fire machine decides).

use std::collections::BTreeSet;

use toml::Spanned;

use super::LimitConfig;
use super::error::JobContext;
use super::schema::RawLimit;
use super::validator::Validator;

/// The most runs one limit may let through at once: beyond it a limit limits nothing a lease
/// listing could still count cheaply.
const MAX_LIMIT: usize = 10_000;

impl Validator<'_> {
    /// Every `[[limit]]`, in file order; problems recorded, bad ones left out.
    pub(super) fn declared_limits(&mut self, raw: Vec<Spanned<RawLimit>>) -> Vec<LimitConfig> {
        let mut limits: Vec<LimitConfig> = Vec::new();
        for limit in raw {
            let limit = limit.into_inner();
            let name = limit.name.get_ref().clone();
            let context = format!("limit {name:?}");
            if let Err(reason) = crate::ids::validate_znode_name(&name) {
                self.problem(limit.name.span(), format!("{context}: name"), reason);
                continue;
            }
            if limits.iter().any(|known| known.name == name) {
                self.problem(limit.name.span(), context, "duplicate limit name");
                continue;
            }
            let max = match usize::try_from(*limit.max.get_ref()) {
                Ok(max) if (1..=MAX_LIMIT).contains(&max) => max,
                _ => {
                    self.problem(
                        limit.max.span(),
                        format!("{context}: max"),
                        format!(
                            "expected how many runs may hold it at once, from 1 to {MAX_LIMIT}"
                        ),
                    );
                    continue;
                }
            };
            limits.push(LimitConfig { name, max });
        }
        limits
    }

    /// A job's `limits`: each a declared `[[limit]]`, once; in name order.
    pub(super) fn job_limits(
        &mut self,
        raw: Option<Spanned<Vec<Spanned<String>>>>,
        job: JobContext<'_>,
    ) -> Vec<LimitConfig> {
        let mut taken = BTreeSet::new();
        let mut limits = Vec::new();
        for name in raw.map(Spanned::into_inner).unwrap_or_default() {
            let Some(limit) = self
                .limits
                .iter()
                .find(|l| l.name == *name.get_ref())
                .cloned()
            else {
                let declared: Vec<&str> = self.limits.iter().map(|l| l.name.as_str()).collect();
                let message = match declared.as_slice() {
                    [] => "no [[limit]] is declared".to_owned(),
                    _ => format!("expected a declared [[limit]]: {}", declared.join(", ")),
                };
                self.problem(name.span(), job.key("limits"), message);
                continue;
            };
            if !taken.insert(limit.name.clone()) {
                self.problem(name.span(), job.key("limits"), "named twice");
                continue;
            }
            limits.push(limit);
        }
        limits.sort_by(|a, b| a.name.cmp(&b.name));
        limits
    }
}
