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
#[derive(Clone)]
pub struct TraceOptions {
    /// The collector's OTLP/gRPC address: `http://HOST:4317`. Plain gRPC only: a collector
    /// elsewhere is reached through an OpenTelemetry Collector on this machine or network,
    /// which forwards over TLS.
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

    /// Reads `name=value,name=value` (the OpenTelemetry `OTEL_EXPORTER_OTLP_HEADERS` form: a
    /// value's `%XX` escapes are decoded, nothing else) into [`TraceOptions::headers`]. An
    /// error names a header by its place, never by its text: a slip may have put a key there.
    pub fn parse_headers(text: &str) -> Result<Vec<(String, String)>, String> {
        if text.len() > MAX_HEADER_BYTES {
            return Err(format!("the OTLP headers are over {MAX_HEADER_BYTES} bytes"));
        }
        let mut headers = Vec::new();
        let pairs = text.split(',').map(str::trim).filter(|pair| !pair.is_empty());
        for (place, pair) in pairs.enumerate().map(|(n, pair)| (n + 1, pair)) {
            let Some((name, value)) = pair.split_once('=') else {
                return Err(format!("OTLP header {place} is not name=value"));
            };
            let name = name.trim().to_ascii_lowercase();
            let value = percent_encoding::percent_decode_str(value.trim())
                .decode_utf8()
                .map_err(|_| format!("OTLP header {place}'s value is not UTF-8 once decoded"))?
                .into_owned();
            if name.parse::<tonic::metadata::MetadataKey<tonic::metadata::Ascii>>().is_err() {
                return Err(format!("OTLP header {place}'s name is not a header's name"));
            }
            if value.parse::<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>().is_err() {
                return Err(format!("OTLP header {place} has a value no header can carry"));
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
        if uri.scheme_str() == Some("https") {
            return Err(format!(
                "--otlp-endpoint {:?}: only plain http://HOST:PORT is spoken; send to an OpenTelemetry Collector on this machine or network, which forwards over TLS",
                self.endpoint
            ));
        }
        if uri.scheme_str() != Some("http") || uri.host().is_none() {
            return Err(format!("--otlp-endpoint {:?} is not http://HOST:PORT", self.endpoint));
        }
        if self.every.is_zero() {
            return Err("the OTLP export interval is 0".into());
        }
        Ok(())
    }
}

impl std::fmt::Debug for TraceOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // A header's value is a collector's key: only the names show.
        let names: Vec<&str> = self.headers.iter().map(|(name, _)| name.as_str()).collect();
        f.debug_struct("TraceOptions")
            .field("endpoint", &self.endpoint)
            .field("headers", &names)
            .field("every", &self.every)
            .finish()
    }
}

/// Puts the daemon's headers on every export, in place of any the OpenTelemetry exporter took
/// from `OTEL_EXPORTER_OTLP_HEADERS` (set on a machine for Claude Code's own telemetry, and
/// meant for another collector).
#[derive(Clone)]
struct Headers(tonic::metadata::MetadataMap);

impl tonic::service::Interceptor for Headers {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        *request.metadata_mut() = self.0.clone();
        Ok(request)
    }
}

/// The exporter: spans in, OTLP out.
pub struct Traces {
    provider: SdkTracerProvider,
    tracer: opentelemetry_sdk::trace::SdkTracer,
    /// Set once the exporter is stopped.
    closed: std::sync::atomic::AtomicBool,
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
                name.parse().map_err(|_| "an OTLP header's name is bad".to_owned())?;
            let value = value.parse().map_err(|_| "an OTLP header's value is bad".to_owned())?;
            metadata.insert(name, value);
        }
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(options.endpoint.clone())
            .with_timeout(EXPORT_TIMEOUT)
            .with_interceptor(Headers(metadata))
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
            // Every span: a sampler from OTEL_TRACES_SAMPLER could keep a call and drop its turn.
            .with_sampler(opentelemetry_sdk::trace::Sampler::AlwaysOn)
            .with_span_processor(batches)
            .with_resource(resource.build())
            .build();
        let tracer = opentelemetry::trace::TracerProvider::tracer(&provider, "switchboard");
        Ok(Traces { provider, tracer, closed: std::sync::atomic::AtomicBool::new(false) })
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
    /// that may block, for at most [`EXPORT_TIMEOUT`]. Once.
    pub async fn close(&self) {
        if self.closed.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        let provider = self.provider.clone();
        let closed =
            tokio::task::spawn_blocking(move || provider.shutdown_with_timeout(EXPORT_TIMEOUT));
        if let Ok(Err(error)) = closed.await {
            tracing::warn!(%error, "the last traces were not sent");
        }
    }

    /// Sends what waits now, not at the next interval (what a test waits on).
    pub async fn flush(&self) {
        if self.closed.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
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
        // A base64 key keeps its `+` and `=`.
        let basic = TraceOptions::parse_headers("authorization=Basic a+b/c==").unwrap();
        assert_eq!(basic, [("authorization".into(), "Basic a+b/c==".into())]);
        for (bad, says) in [
            ("authorization", "1 is not name=value"),
            ("x-team=ops,authorization:Bearer sk-secret=", "2's name is not a header's name"),
            ("x=a%0Ab", "no header can carry"),
        ] {
            let error = TraceOptions::parse_headers(bad).unwrap_err();
            assert!(error.contains(says), "{bad}: {error}");
            assert!(!error.contains("secret"), "{error}");
        }
        let options = TraceOptions { headers: basic, ..TraceOptions::new("http://h:1") };
        assert!(!format!("{options:?}").contains("a+b"), "a key never shows in a log");
        assert!(TraceOptions::parse_headers(&"x".repeat(MAX_HEADER_BYTES + 1)).is_err());
    }

    #[test]
    fn an_endpoint_is_an_http_address() {
        assert!(TraceOptions::new("http://127.0.0.1:4317").check().is_ok());
        let refused = TraceOptions::new("https://collector.example:4317").check().unwrap_err();
        assert!(refused.contains("forwards over TLS"), "{refused}");
        for bad in ["127.0.0.1:4317", "ftp://h:1", "http://", "not an address"] {
            assert!(TraceOptions::new(bad).check().is_err(), "{bad}");
        }
    }
}
