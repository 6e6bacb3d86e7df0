//! A run's trace (issue 52): the W3C trace id and the id of the run's own span, chosen at the
//! run's first claim on a node where telemetry is on and stored in its record, so that every
//! attempt — a retry, or the next owner's rerun after a failover — continues the one trace as a
//! new span under the run's.
//!
//! Owns: how the ids are chosen and how a record stores them (`"<trace id>-<span id>"`, in
//! lowercase hex as a `traceparent` writes them), and which `traceparent` a submitter gives
//! is one (read by OpenTelemetry's propagator).
//! Must not: export spans or read a clock, nor draw randomness itself: the ids come from a
//! seed the node draws once ([`RunTrace::first`]), so the fire machine stays pure and its tests
//! repeatable.

use std::collections::HashMap;

use aws_lc_rs::digest::{SHA256, digest};
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceId};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A run's trace and its run span.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RunTrace {
    pub trace_id: TraceId,
    /// The run's own span: each attempt's span is its child.
    pub span_id: SpanId,
}

impl RunTrace {
    /// The trace of run `run_id` first claimed by a node whose trace seed is `seed`: drawn from
    /// a hash of both, so it looks random to a collector, never repeats across nodes and
    /// processes (each draws its own seed), and is the same for every claim of the run this
    /// process makes (a claim made again after it was refused keeps the trace).
    pub fn first(seed: u128, run_id: &str) -> Self {
        let mut input = Vec::with_capacity(16 + run_id.len());
        input.extend_from_slice(&seed.to_le_bytes());
        input.extend_from_slice(run_id.as_bytes());
        let hash = digest(&SHA256, &input);
        let bytes = hash.as_ref();
        let mut trace = [0_u8; 16];
        let mut span = [0_u8; 8];
        trace.copy_from_slice(&bytes[..16]);
        span.copy_from_slice(&bytes[16..24]);
        // All zeros is W3C's "invalid": never drawn in practice, and never stored.
        if trace == [0; 16] {
            trace[15] = 1;
        }
        if span == [0; 8] {
            span[7] = 1;
        }
        Self {
            trace_id: TraceId::from_bytes(trace),
            span_id: SpanId::from_bytes(span),
        }
    }

    /// The W3C `traceparent` of the run's span: what a chained child's span links to.
    pub fn traceparent(&self) -> String {
        format!("00-{}-{}-01", self.trace_id, self.span_id)
    }

    /// The stored form: `<32 hex>-<16 hex>`.
    pub fn stored(&self) -> String {
        format!("{}-{}", self.trace_id, self.span_id)
    }

    /// The trace of a stored form; `None` when it is not one (two lowercase hex ids of the
    /// W3C lengths, neither all zeros).
    pub fn parse(text: &str) -> Option<Self> {
        let (trace, span) = text.split_once('-')?;
        let lower_hex = |id: &str, len: usize| {
            id.len() == len && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        };
        if !lower_hex(trace, 32) || !lower_hex(span, 16) {
            return None;
        }
        let trace_id = TraceId::from_hex(trace).ok()?;
        let span_id = SpanId::from_hex(span).ok()?;
        (trace_id != TraceId::INVALID && span_id != SpanId::INVALID)
            .then_some(Self { trace_id, span_id })
    }
}

impl Serialize for RunTrace {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.stored())
    }
}

impl<'de> Deserialize<'de> for RunTrace {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Self::parse(&text).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "not a run's trace (<32 hex>-<16 hex>, lowercase): {text:?}"
            ))
        })
    }
}

/// One attempt's place in its run's trace: the span its process or request runs under, a child
/// of the run's span, named in the `traceparent` it is given (issue 52).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AttemptTrace {
    pub run: RunTrace,
    pub span_id: SpanId,
}

impl AttemptTrace {
    /// The span of attempt `attempt` of run `run_id` (whose trace is `run`) on a node whose
    /// seed is `seed`: the same when the run is prepared as when it starts.
    pub fn of(run: RunTrace, seed: u128, run_id: &str, attempt: u32) -> Self {
        let ids = RunTrace::first(seed, &format!("{run_id}#{attempt}"));
        Self {
            run,
            span_id: ids.span_id,
        }
    }

    /// The W3C `traceparent` that makes this attempt's span the parent of what the job does
    /// (version 00, sampled: a run is traced whole or not at all).
    pub fn traceparent(&self) -> String {
        format!("00-{}-{}-01", self.run.trace_id, self.span_id)
    }
}

/// The span context a W3C `traceparent` names, read by OpenTelemetry's own propagator; `None`
/// when it names none (malformed, a version it does not read, all-zero ids).
pub fn span_context_of(traceparent: &str) -> Option<SpanContext> {
    // The propagator is lenient about the fields' lengths; the specification is not.
    let mut fields = traceparent.trim().split('-');
    let lengths_kept = [2, 32, 16, 2].into_iter().all(|len| {
        fields.next().is_some_and(|field| {
            field.len() == len
                && field
                    .bytes()
                    .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        })
    });
    if !lengths_kept {
        return None;
    }
    let carrier = HashMap::from([("traceparent".to_owned(), traceparent.trim().to_owned())]);
    let context = TraceContextPropagator::new().extract(&carrier);
    let span = context.span().span_context().clone();
    span.is_valid().then_some(span)
}

/// `traceparent` as zkcron keeps it (version 00, lowercase), if it names a span context: the
/// submitter's context a submission carries, and what a run's span links to.
pub fn traceparent(text: &str) -> Option<String> {
    let span = span_context_of(text)?;
    Some(format!(
        "00-{}-{}-{:02x}",
        span.trace_id(),
        span.span_id(),
        span.trace_flags().to_u8()
    ))
}

/// A record's trace as stored, read leniently: one that is not a trace is dropped (the run
/// goes on without it, a new one chosen at its next claim) rather than making the whole record
/// unreadable.
pub(super) fn lenient<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<RunTrace>, D::Error> {
    let stored = Option::<serde_json::Value>::deserialize(deserializer)?;
    Ok(stored
        .as_ref()
        .and_then(serde_json::Value::as_str)
        .and_then(RunTrace::parse))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_keeps_its_trace_in_this_process_and_no_other_run_or_seed_shares_it() {
        let trace = RunTrace::first(7, "backup-1893456000000");
        assert_eq!(trace, RunTrace::first(7, "backup-1893456000000"));
        assert_ne!(trace, RunTrace::first(7, "backup-1893456060000"));
        assert_ne!(trace, RunTrace::first(8, "backup-1893456000000"));
        assert_ne!(trace.trace_id, TraceId::INVALID);
        assert_ne!(trace.span_id, SpanId::INVALID);
    }

    #[test]
    fn an_attempt_has_a_span_of_its_own_in_its_runs_trace() {
        let run = RunTrace::first(3, "report-0");
        let first = AttemptTrace::of(run, 3, "report-0", 1);
        assert_eq!(
            first,
            AttemptTrace::of(run, 3, "report-0", 1),
            "prepared as started"
        );
        let second = AttemptTrace::of(run, 3, "report-0", 2);
        assert_ne!(first.span_id, second.span_id);
        assert_ne!(first.span_id, run.span_id);
        assert_eq!(
            first.traceparent(),
            format!("00-{}-{}-01", run.trace_id, first.span_id)
        );
        assert_eq!(first.traceparent().len(), 55, "W3C version 00's length");
    }

    #[test]
    fn a_traceparent_is_kept_only_when_it_names_a_span() {
        let good = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        assert_eq!(traceparent(good).as_deref(), Some(good));
        assert_eq!(traceparent(&format!(" {good}\n")).as_deref(), Some(good));
        for bad in [
            "",
            "nope",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319-b7ad6b7169203331-01",
        ] {
            assert_eq!(traceparent(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_stored_form_reads_back_and_anything_else_is_refused() {
        let trace = RunTrace::first(1, "report-0");
        let stored = trace.stored();
        assert_eq!(stored.len(), 32 + 1 + 16);
        assert_eq!(RunTrace::parse(&stored), Some(trace));
        let json = serde_json::to_string(&trace).expect("a string");
        assert_eq!(json, format!("\"{stored}\""));
        assert_eq!(
            serde_json::from_str::<RunTrace>(&json).expect("read back"),
            trace
        );
        for wrong in [
            "",
            "-",
            &stored.to_uppercase(),
            &stored[1..],
            &format!("{}-{}", "0".repeat(32), "1".repeat(16)),
            &format!("{}-{}", "1".repeat(32), "0".repeat(16)),
            &format!("{}-{}", "g".repeat(32), "1".repeat(16)),
            &format!("00-{stored}-01"),
        ] {
            assert_eq!(RunTrace::parse(wrong), None, "{wrong:?}");
        }
        assert!(serde_json::from_str::<RunTrace>("\"nope\"").is_err());
    }
}
