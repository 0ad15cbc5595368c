"""A real OTLP/HTTP receiver on 127.0.0.1: decodes the protobuf trace and log requests the
SDK's exporters send, so export tests see what a collector would, and can answer with
errors. It also takes Phoenix-style annotation posts (JSON on any other path), answering
each with the next scripted status."""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest


class OTLPReceiver:
    def __init__(self) -> None:
        self.documents: list[dict[str, Any]] = []
        self.log_documents: list[dict[str, Any]] = []
        self.status = 200
        self.logs_status = 200  # 404: a backend that takes no logs (Jaeger, Langfuse)
        self.probe_status: int | None = None  # the answer to an empty request, else status
        self.annotation_posts: list[tuple[str, dict[str, Any]]] = []
        self.annotation_statuses: deque[int] = deque()  # then 200
        self.arrived = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.path.startswith("/v1/logs"):
                    if receiver.logs_status == 200:
                        logs = ExportLogsServiceRequest()
                        logs.ParseFromString(body)
                        with receiver.arrived:
                            receiver.log_documents.append(MessageToDict(logs))
                    self.send_response(receiver.logs_status)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if not self.path.startswith("/v1/traces"):
                    receiver.annotation_posts.append((self.path, json.loads(body)))
                    status = (
                        receiver.annotation_statuses.popleft()
                        if receiver.annotation_statuses
                        else 200
                    )
                    self.send_response(status)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                status = receiver.status
                if not body and receiver.probe_status is not None:
                    status = receiver.probe_status
                if status == 200:
                    request = ExportTraceServiceRequest()
                    request.ParseFromString(body)
                    with receiver.arrived:
                        # the OTLP JSON mapping, ids as the protobuf mapping writes them (base64)
                        receiver.documents.append(MessageToDict(request))
                        receiver.arrived.notify_all()
                self.send_response(status)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.url = f"{self.base_url}/v1/traces"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def spans(self) -> list[dict[str, Any]]:
        return [
            span
            for document in self.documents
            for resource in document.get("resourceSpans", [])
            for scope in resource.get("scopeSpans", [])
            for span in scope.get("spans", [])
        ]

    def log_records(self) -> list[dict[str, Any]]:
        return [
            record
            for document in self.log_documents
            for resource in document.get("resourceLogs", [])
            for scope in resource.get("scopeLogs", [])
            for record in scope.get("logRecords", [])
        ]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def otlp_receiver() -> Iterator[OTLPReceiver]:
    receiver = OTLPReceiver()
    yield receiver
    receiver.close()
