"""An OTLP trace receiver for the traces test: a gRPC server built on the `opentelemetry-proto`
package from PyPI (the OpenTelemetry project's own generated messages and service).

It listens on 127.0.0.1 at a port of the system's choosing, prints `listening PORT`, then for
each export a JSON line `{"export": {"headers": {...}}}` and a line `{"span": {...}}` per span
it holds, with its resource's attributes, and answers every export with success. It stops when
its standard input closes (the test that started it is gone).
"""

import json
import sys
import threading
from concurrent import futures

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc


def value(any_value):
    """An attribute's value as JSON: its one set field."""
    kind = any_value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [value(v) for v in any_value.array_value.values]
    if kind == "kvlist_value":
        return attributes(any_value.kvlist_value.values)
    if kind == "bytes_value":
        return any_value.bytes_value.hex()
    return getattr(any_value, kind)


def attributes(pairs):
    return {pair.key: value(pair.value) for pair in pairs}


class Receiver(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self):
        self.lock = threading.Lock()

    def Export(self, request, context):
        headers = {key: value for key, value in context.invocation_metadata()}
        lines = [json.dumps({"export": {"headers": headers}})]
        for resource_spans in request.resource_spans:
            resource = attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    lines.append(
                        json.dumps(
                            {"span": {
                                "resource": resource,
                                "scope": scope_spans.scope.name,
                                "trace_id": span.trace_id.hex(),
                                "span_id": span.span_id.hex(),
                                "parent_span_id": span.parent_span_id.hex(),
                                "name": span.name,
                                "kind": span.kind,
                                "start_ns": span.start_time_unix_nano,
                                "end_ns": span.end_time_unix_nano,
                                "attributes": attributes(span.attributes),
                                "events": [
                                    {
                                        "name": event.name,
                                        "time_ns": event.time_unix_nano,
                                        "attributes": attributes(event.attributes),
                                    }
                                    for event in span.events
                                ],
                                "status": {
                                    "code": span.status.code,
                                    "message": span.status.message,
                                },
                            }}
                        )
                    )
        with self.lock:
            for line in lines:
                sys.stdout.write(line + "\n")
            sys.stdout.flush()
        return trace_service_pb2.ExportTraceServiceResponse()


def main():
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Receiver(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(f"listening {port}", flush=True)
    sys.stdin.read()
    server.stop(grace=None)


if __name__ == "__main__":
    main()
