"""A Python client of Switchboard's gRPC API, generated from the .proto when it runs.

It creates a session with a prompt, subscribes to its events, approves the permission request
that comes, and reads to the end of the turn; then it tries a call without the token. It prints
one JSON object of what it saw. Environment: SWITCHBOARD_GRPC (host:port), SWITCHBOARD_TOKEN,
WORKDIR (the session's directory).

    python -m pip install -r e2e/requirements-grpc.txt
    SWITCHBOARD_GRPC=127.0.0.1:7777 SWITCHBOARD_TOKEN=... WORKDIR=$PWD python e2e/grpc_client.py
"""

import importlib.resources
import json
import os
import sys
import tempfile

import grpc
from grpc_tools import protoc

PROTO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "proto")


def generate(out):
    """Generates the client code into `out` and imports it."""
    well_known = str(importlib.resources.files("grpc_tools") / "_proto")
    status = protoc.main([
        "protoc", f"-I{PROTO}", f"-I{well_known}", f"--python_out={out}",
        f"--grpc_python_out={out}", "switchboard/v1/switchboard.proto",
    ])
    if status != 0:
        sys.exit(f"protoc failed ({status})")
    sys.path.insert(0, out)
    from switchboard.v1 import switchboard_pb2, switchboard_pb2_grpc
    return switchboard_pb2, switchboard_pb2_grpc


def main():
    with tempfile.TemporaryDirectory(prefix="switchboard-grpc-") as out:
        run(*generate(out))


def run(pb, rpc):
    address = os.environ["SWITCHBOARD_GRPC"]
    metadata = [("authorization", "Bearer " + os.environ["SWITCHBOARD_TOKEN"])]
    stub = rpc.SwitchboardStub(grpc.insecure_channel(address))
    session = stub.CreateSession(
        pb.CreateSessionRequest(cwd=os.environ["WORKDIR"], prompt="RUN it from Python"),
        metadata=metadata, timeout=60)
    seen = {"title": session.title, "text": "", "approved": None, "result": None,
            "output_tokens": 0, "seqs": [], "idle": False}
    events = stub.Subscribe(pb.SubscribeRequest(id=session.id, after_seq=0),
                            metadata=metadata, timeout=120)
    for event in events:
        seen["seqs"].append([event.seq, event.part, event.parts])
        kind = event.WhichOneof("event")
        if kind == "text_delta":
            seen["text"] += event.text_delta.text
        elif kind == "permission_request":
            request = event.permission_request
            stub.AnswerPermission(pb.AnswerPermissionRequest(
                id=session.id, request_id=request.request_id, behavior=pb.BEHAVIOR_ALLOW,
                by="python"), metadata=metadata, timeout=30)
            seen["approved"] = {"tool": request.tool_name,
                                "command": request.input.fields["command"].string_value}
        elif kind == "turn_result":
            seen["result"] = event.turn_result.result
        elif kind == "usage_report":
            seen["output_tokens"] = event.usage_report.output_tokens
        elif kind == "status_change" and event.status_change.to == pb.STATUS_IDLE \
                and seen["result"] is not None:
            seen["idle"] = True
            break
    events.cancel()
    try:
        stub.ListSessions(pb.ListSessionsRequest(), timeout=10)
        seen["without_token"] = "answered"
    except grpc.RpcError as error:
        seen["without_token"] = error.code().name
    print(json.dumps(seen))


if __name__ == "__main__":
    main()
