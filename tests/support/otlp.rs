//! A real OTLP/HTTP trace receiver (issue 52): it decodes what an exporter posts to
//! `/v1/traces` with the messages generated from OpenTelemetry's official protobuf definitions
//! (`opentelemetry-proto`) and keeps every span. A body that is not an
//! `ExportTraceServiceRequest` is answered 400 and kept as a refusal, so a test that expects
//! none fails on it: not a mock that accepts anything.
//!
//! Owns: the receiver's listener and what it received.
//! Must not: start zkcron or ZooKeeper.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use prost::Message;
use tokio::net::TcpListener;

/// One span as received, its ids in lowercase hex and its attributes as text.
#[derive(Debug, Clone)]
pub struct ReceivedSpan {
    pub name: String,
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent_span_id: String,
    pub start_unix_ns: u64,
    pub end_unix_ns: u64,
    pub attributes: BTreeMap<String, String>,
    pub events: Vec<String>,
    /// The spans it links to, as `<trace id>-<span id>`.
    pub links: Vec<String>,
    /// The resource's attributes (`service.name` among them).
    pub resource: BTreeMap<String, String>,
    /// OTLP's status code: 0 unset, 1 ok, 2 error.
    pub status_code: i32,
}

impl ReceivedSpan {
    pub fn attribute(&self, key: &str) -> &str {
        self.attributes.get(key).map_or("", String::as_str)
    }
}

#[derive(Debug, Default)]
struct State {
    spans: Mutex<Vec<ReceivedSpan>>,
    refused: Mutex<Vec<String>>,
}

/// The running receiver; its task ends with the test's runtime.
pub struct OtlpReceiver {
    /// `http://127.0.0.1:PORT`: the base URL `[telemetry] endpoint` takes.
    pub endpoint: String,
    state: Arc<State>,
}

impl OtlpReceiver {
    /// A receiver on a free loopback port.
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the OTLP receiver");
        let port = listener.local_addr().expect("its address").port();
        let state = Arc::new(State::default());
        let app = Router::new()
            .route("/v1/traces", post(traces))
            .with_state(Arc::clone(&state));
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self {
            endpoint: format!("http://127.0.0.1:{port}"),
            state,
        }
    }

    /// Every span so far, in arrival order.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.state
            .spans
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Why each body that was not a trace export was refused.
    pub fn refused(&self) -> Vec<String> {
        self.state
            .refused
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

async fn traces(
    axum::extract::State(state): axum::extract::State<Arc<State>>,
    headers: HeaderMap,
    body: Bytes,
) -> impl IntoResponse {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let refuse = |why: String| {
        state
            .refused
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(why);
        (StatusCode::BAD_REQUEST, Vec::new())
    };
    if content_type != "application/x-protobuf" {
        return refuse(format!("content type {content_type:?}"));
    }
    let request = match ExportTraceServiceRequest::decode(body) {
        Ok(request) => request,
        Err(err) => return refuse(format!("not an ExportTraceServiceRequest: {err}")),
    };
    let mut received = Vec::new();
    for resource_spans in request.resource_spans {
        let resource = resource_spans
            .resource
            .map(|r| attributes(r.attributes))
            .unwrap_or_default();
        for scope_spans in resource_spans.scope_spans {
            for span in scope_spans.spans {
                received.push(ReceivedSpan {
                    name: span.name,
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    start_unix_ns: span.start_time_unix_nano,
                    end_unix_ns: span.end_time_unix_nano,
                    attributes: attributes(span.attributes),
                    events: span.events.into_iter().map(|e| e.name).collect(),
                    links: span
                        .links
                        .iter()
                        .map(|link| format!("{}-{}", hex(&link.trace_id), hex(&link.span_id)))
                        .collect(),
                    resource: resource.clone(),
                    status_code: span.status.map_or(0, |s| s.code),
                });
            }
        }
    }
    state
        .spans
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .extend(received);
    let answer = ExportTraceServiceResponse::default().encode_to_vec();
    (StatusCode::OK, answer)
}

fn attributes(
    pairs: Vec<opentelemetry_proto::tonic::common::v1::KeyValue>,
) -> BTreeMap<String, String> {
    pairs
        .into_iter()
        .map(|pair| {
            let value = match pair.value.and_then(|v| v.value) {
                Some(Value::StringValue(text)) => text,
                Some(Value::IntValue(n)) => n.to_string(),
                Some(Value::BoolValue(b)) => b.to_string(),
                Some(Value::DoubleValue(d)) => d.to_string(),
                other => format!("{other:?}"),
            };
            (pair.key, value)
        })
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
