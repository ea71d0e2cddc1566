//! OpenTelemetry traces, off unless an OTLP endpoint is given (`switchboard serve
//! --otlp-endpoint`): a span per turn, with a child per tool call and per wait for a person's
//! answer, read from each session's projection ([`tracer`]) and sent over OTLP/gRPC by the
//! OpenTelemetry SDK's batch exporter, on a thread of its own.
//!
//! Nothing on a session's path waits for the exporter: a span is handed to a bounded queue
//! and dropped (counted by the SDK) when the queue is full or the collector is away. Every
//! span names its session (`session.id`), and the resource names the node
//! (`service.instance.id`), so one collector shows a fleet's turns wherever they ran.

pub mod tracer;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry::trace::{Span as _, SpanBuilder, Tracer as _};
use opentelemetry::trace::{SpanContext, SpanKind, TraceContextExt, TraceFlags, TraceState};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{WithExportConfig, WithTonicConfig};
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider};
use opentelemetry_sdk::Resource;
use tracer::Finished;

/// Spans that wait for the exporter at most: past it, new ones are dropped.
pub const MAX_QUEUED_SPANS: usize = 8192;
/// How long an export may take before it is given up.
pub const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// An OTLP header's name and value, at most (`SWITCHBOARD_OTLP_HEADERS`).
const MAX_HEADER_BYTES: usize = 8192;

/// Where and how traces go.
#[derive(Debug, Clone)]
pub struct TraceOptions {
    /// The collector's OTLP/gRPC address: `http://HOST:4317` (or `https://`).
    pub endpoint: String,
    /// Headers sent with every export (a collector's key): from `SWITCHBOARD_OTLP_HEADERS`,
    /// never from the command line, and never given to the CLIs a session runs.
    pub headers: Vec<(String, String)>,
    /// How often the spans that ended are sent.
    pub every: Duration,
}

impl TraceOptions {
    /// To `endpoint`, every 5 seconds, with no headers.
    pub fn new(endpoint: impl Into<String>) -> TraceOptions {
        TraceOptions {
            endpoint: endpoint.into(),
            headers: Vec::new(),
            every: Duration::from_secs(5),
        }
    }

    /// Reads `name=value,name=value` (the OpenTelemetry `OTEL_EXPORTER_OTLP_HEADERS` form; a
    /// value may be percent-encoded) into [`TraceOptions::headers`].
    pub fn parse_headers(text: &str) -> Result<Vec<(String, String)>, String> {
        if text.len() > MAX_HEADER_BYTES {
            return Err(format!("the OTLP headers are over {MAX_HEADER_BYTES} bytes"));
        }
        let mut headers = Vec::new();
        for pair in text.split(',').map(str::trim).filter(|pair| !pair.is_empty()) {
            let Some((name, value)) = pair.split_once('=') else {
                return Err(format!("an OTLP header is name=value, not {:?}", cut_name(pair)));
            };
            let name = name.trim().to_ascii_lowercase();
            let value: String = form_urlencoded::parse(format!("v={}", value.trim()).as_bytes())
                .next()
                .map(|(_, value)| value.into_owned())
                .unwrap_or_default();
            if name.parse::<tonic::metadata::MetadataKey<tonic::metadata::Ascii>>().is_err() {
                return Err(format!("{:?} is not a header's name", cut_name(&name)));
            }
            if value.parse::<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>().is_err() {
                return Err(format!("the OTLP header {name:?} has a value no header can carry"));
            }
            headers.push((name, value));
        }
        Ok(headers)
    }

    /// Checks the endpoint: an `http://` or `https://` address, with a host.
    pub fn check(&self) -> Result<(), String> {
        let uri: axum::http::Uri = self
            .endpoint
            .parse()
            .map_err(|_| format!("--otlp-endpoint {:?} is not an address", self.endpoint))?;
        if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
            return Err(format!(
                "--otlp-endpoint {:?} is not http://HOST:PORT or https://HOST:PORT",
                self.endpoint
            ));
        }
        if self.every.is_zero() {
            return Err("the OTLP export interval is 0".into());
        }
        Ok(())
    }
}

/// The part of a text shown in an error: at most 40 characters.
fn cut_name(text: &str) -> String {
    text.chars().take(40).collect()
}

/// The exporter: spans in, OTLP out.
pub struct Traces {
    provider: SdkTracerProvider,
    tracer: opentelemetry_sdk::trace::SdkTracer,
}

impl std::fmt::Debug for Traces {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Traces").finish_non_exhaustive()
    }
}

impl Traces {
    /// Starts exporting to `options.endpoint`, as node `node`. Must be called within the
    /// daemon's runtime (the gRPC channel's task runs on it). Connects lazily: a collector
    /// that is not up yet costs the spans sent before it is, nothing more.
    pub fn start(options: &TraceOptions, node: Option<&str>) -> Result<Traces, String> {
        options.check()?;
        let mut metadata = tonic::metadata::MetadataMap::new();
        for (name, value) in &options.headers {
            let name: tonic::metadata::MetadataKey<tonic::metadata::Ascii> =
                name.parse().map_err(|_| format!("{name:?} is not a header's name"))?;
            let value = value.parse().map_err(|_| format!("the OTLP header {name:?} is bad"))?;
            metadata.insert(name, value);
        }
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(options.endpoint.clone())
            .with_timeout(EXPORT_TIMEOUT)
            .with_metadata(metadata)
            .build()
            .map_err(|error| format!("the OTLP exporter to {}: {error}", options.endpoint))?;
        let batches = BatchSpanProcessor::builder(exporter)
            .with_batch_config(
                BatchConfigBuilder::default()
                    .with_max_queue_size(MAX_QUEUED_SPANS)
                    .with_scheduled_delay(options.every)
                    .build(),
            )
            .build();
        let mut resource = Resource::builder_empty()
            .with_service_name("switchboard")
            .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")));
        if let Some(node) = node {
            resource =
                resource.with_attribute(KeyValue::new("service.instance.id", node.to_owned()));
        }
        let provider = SdkTracerProvider::builder()
            .with_span_processor(batches)
            .with_resource(resource.build())
            .build();
        let tracer = opentelemetry::trace::TracerProvider::tracer(&provider, "switchboard");
        Ok(Traces { provider, tracer })
    }

    /// Hands `spans` to the exporter's queue.
    pub fn export(&self, spans: &[Finished]) {
        for finished in spans {
            let parent = match finished.parent {
                Some(parent) => Context::new().with_remote_span_context(SpanContext::new(
                    finished.trace_id,
                    parent,
                    TraceFlags::SAMPLED,
                    true,
                    TraceState::default(),
                )),
                None => Context::new(),
            };
            let builder = SpanBuilder::from_name(finished.name.clone())
                .with_kind(SpanKind::Internal)
                .with_trace_id(finished.trace_id)
                .with_span_id(finished.span_id)
                .with_start_time(at(finished.start_ms))
                .with_attributes(finished.attributes.clone())
                .with_status(finished.status.clone());
            let mut span = self.tracer.build_with_context(builder, &parent);
            for (name, ts_ms, attributes) in &finished.events {
                span.add_event_with_timestamp(name.clone(), at(*ts_ms), attributes.clone());
            }
            span.end_with_timestamp(at(finished.end_ms));
        }
    }

    /// Sends what waits, and stops the exporter (for shutting the daemon down): on a thread
    /// that may block, for at most [`EXPORT_TIMEOUT`].
    pub async fn close(&self) {
        let provider = self.provider.clone();
        let closed =
            tokio::task::spawn_blocking(move || provider.shutdown_with_timeout(EXPORT_TIMEOUT));
        if let Ok(Err(error)) = closed.await {
            tracing::warn!(%error, "the last traces were not sent");
        }
    }

    /// Sends what waits now (the tests', and a daemon's before it stops).
    pub async fn flush(&self) {
        let provider = self.provider.clone();
        let flushed = tokio::task::spawn_blocking(move || provider.force_flush());
        if let Ok(Err(error)) = flushed.await {
            tracing::warn!(%error, "sending the traces failed");
        }
    }
}

/// Unix milliseconds as a time.
fn at(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_are_read_as_opentelemetry_writes_them() {
        let headers =
            TraceOptions::parse_headers("Authorization=Bearer%20k1, x-team = ops ,").unwrap();
        assert_eq!(
            headers,
            [("authorization".into(), "Bearer k1".into()), ("x-team".into(), "ops".into())]
        );
        for (bad, says) in [
            ("authorization", "is name=value"),
            ("bad name=v", "is not a header's name"),
            ("x=a%0Ab", "no header can carry"),
        ] {
            let error = TraceOptions::parse_headers(bad).unwrap_err();
            assert!(error.contains(says), "{bad}: {error}");
        }
        assert!(TraceOptions::parse_headers(&"x".repeat(MAX_HEADER_BYTES + 1)).is_err());
    }

    #[test]
    fn an_endpoint_is_an_http_address() {
        assert!(TraceOptions::new("http://127.0.0.1:4317").check().is_ok());
        assert!(TraceOptions::new("https://collector.example:4317").check().is_ok());
        for bad in ["127.0.0.1:4317", "ftp://h:1", "http://", "not an address"] {
            assert!(TraceOptions::new(bad).check().is_err(), "{bad}");
        }
    }
}
