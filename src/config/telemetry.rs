//! `[telemetry]`: where a node sends the spans of its runs (issue 52).
//!
//! Owns: the collector's endpoint (an `http` or `https` base URL, the OTLP/HTTP convention:
//! spans go to `<endpoint>/v1/traces`), `service.name` and the other resource attributes, and
//! their defaults. Without the section nothing is traced.
//! Must not: build the exporter or send anything (`crate::telemetry` does).

use super::TelemetryConfig;
use super::schema::RawTelemetry;
use super::validator::Validator;

/// `service.name` when `service_name` does not say.
pub const DEFAULT_SERVICE_NAME: &str = "zkcron";

impl Validator<'_> {
    pub(super) fn telemetry(&mut self, raw: RawTelemetry) -> Option<TelemetryConfig> {
        let endpoint = raw.endpoint.get_ref().trim().trim_end_matches('/');
        let expected = "expected the collector's OTLP/HTTP base URL, like \"http://otel-collector:4318\" (spans go to <endpoint>/v1/traces)";
        let endpoint = match reqwest::Url::parse(endpoint) {
            Ok(url)
                if matches!(url.scheme(), "http" | "https")
                    && url.host().is_some()
                    && url.query().is_none() =>
            {
                Some(endpoint.to_owned())
            }
            _ => {
                self.problem(raw.endpoint.span(), "telemetry.endpoint", expected);
                None
            }
        };
        let service_name = match raw.service_name {
            Some(name) if name.get_ref().trim().is_empty() => {
                let message = "expected a name for this service, like \"zkcron\"";
                self.problem(name.span(), "telemetry.service_name", message);
                None
            }
            Some(name) => Some(name.into_inner().trim().to_owned()),
            None => Some(DEFAULT_SERVICE_NAME.to_owned()),
        };
        let mut resource = Vec::new();
        for (key, value) in raw.resource.map(|r| r.into_inner()).unwrap_or_default() {
            if key == "service.name" {
                let message = "set service.name with telemetry.service_name";
                self.problem(value.span(), "telemetry.resource", message);
                continue;
            }
            resource.push((key, value.into_inner()));
        }
        Some(TelemetryConfig {
            endpoint: endpoint?,
            service_name: service_name?,
            resource,
        })
    }
}
