"""A real HTTP server on 127.0.0.1 that speaks the OpenAI chat-completions API from a script.

Each request takes the next scripted reply (or asks ``responder``), so tests exercise
retries, Retry-After, timeouts, malformed bodies and JSON-mode-only servers for real.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import pytest

from agenteval_core.judges._openai import _ACCEPTED, _SHAPES


@dataclass
class Reply:
    """One scripted answer: an assistant message ``content``, or a raw ``body``, with any
    status, headers and delay."""

    content: str | list[dict[str, Any]] | None = None
    """A string, or content parts (as Mistral's reasoning models answer)."""
    status: int = 200
    body: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    usage: tuple[int, int] = (100, 20)
    cached: int | None = None
    """Of the prompt tokens, those read from the server's prompt cache: given, the usage says
    so as OpenAI does (``prompt_tokens_details.cached_tokens``)."""
    finish_reason: str = "stop"
    refusal: str | None = None
    """OpenAI's structured-outputs refusal: given, the message carries it beside ``content``."""


PROBE = 'Reply with the JSON object {"ok": true}.'
"""The judges' preflight request for an output mode."""


def _is_probe(request: dict[str, Any]) -> bool:
    return bool(request.get("messages", [{}])[0].get("content") == PROBE)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # socketserver's default backlog of 5 drops connection attempts of a concurrent burst,
    # which the client then retries after a second: far from how API servers behave
    request_queue_size = 128


class JudgeServer:
    def __init__(self, port: int = 0) -> None:
        """A server on ``port`` of 127.0.0.1 (0: a free one)."""
        self.script: deque[Reply] = deque()
        self.responder: Callable[[dict[str, Any]], Reply] | None = None
        self.requests: list[dict[str, Any]] = []
        self.embedding_requests: list[dict[str, Any]] = []
        self.embedding_headers: list[dict[str, str]] = []
        """The HTTP headers of each embeddings request, names lower-cased."""
        self.arrivals: list[float] = []
        self.embedding_arrivals: list[float] = []
        """When each embeddings request arrived (``time.monotonic``)."""
        self.completions: list[float] = []
        self.unsupported_formats: set[str] = set()
        self.format_refusal: Callable[[str], Reply] = lambda kind: Reply(
            status=400, content=f"response_format type {kind} is not supported"
        )
        """How an unsupported ``response_format`` is refused (default: 400 naming it)."""
        self.probes: list[dict[str, Any]] = []
        """The judges' preflight requests for an output mode (answered, not scripted)."""
        self.latency = 0.0
        self.models_status = 200
        self.models_body: str | None = None
        """Given, the body of the answer to ``GET /v1/models`` (else the one model's list)."""
        self.paths: list[str] = []
        """The path and query of every request, in arrival order."""
        self.embedding_input_limit = 0
        self.embedding_request_limit = 0
        """Characters an embeddings request may hold per text and in all (0: no limit),
        refused past them as OpenAI does (8,192 and 300,000 tokens)."""
        self.embedding_batch_limit = 0
        """Texts an embeddings request may hold (0: no limit), refused past it as
        text-embeddings-inference does (HTTP 413; its default is 32)."""
        self.embedding_responder: Callable[[list[str]], Reply] | None = None
        """Given, it answers each embeddings request (its texts) with a raw ``body``, any
        status and headers: servers that follow the API loosely, or break it."""
        self.reasoning_model = False
        """Answer as OpenAI does for its reasoning models (o-series, gpt-5): a request with
        ``max_tokens``, or a ``temperature`` other than 1, is refused with its HTTP 400."""
        self.in_flight = 0
        self.peak_in_flight = 0
        self.open_connections = 0
        """Client connections open now (a keep-alive connection stays open between requests)."""
        self._lock = threading.Lock()
        self._connections_changed = threading.Condition(self._lock)
        server = self

        class Handler(BaseHTTPRequestHandler):
            # headers and body go out as two writes; with Nagle's algorithm the second waits
            # for the client's delayed ACK (~40 ms), which no real API server adds
            disable_nagle_algorithm = True
            protocol_version = "HTTP/1.1"  # keep-alive, as API servers do

            def log_message(self, *args: Any) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                with server._connections_changed:
                    server.open_connections += 1

            def finish(self) -> None:
                with server._connections_changed:
                    server.open_connections -= 1
                    server._connections_changed.notify_all()
                super().finish()

            def do_GET(self) -> None:  # GET /v1/models: the judges' preflight check
                body = (
                    server.models_body or json.dumps({"data": [{"id": "judge-model"}]})
                ).encode()
                server.paths.append(self.path)
                found = urlsplit(self.path).path.rstrip("/").endswith("/v1/models")
                self.send_response(server.models_status if found else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                request = json.loads(self.rfile.read(length) or b"{}")
                server.paths.append(self.path)
                if urlsplit(self.path).path.endswith("/embeddings"):
                    self._embeddings(request)
                    return
                reply = server._next(request)
                if not _is_probe(request):  # the figures tests read are the scoring requests'
                    with server._lock:
                        server.in_flight += 1
                        server.peak_in_flight = max(server.peak_in_flight, server.in_flight)
                    time.sleep(reply.delay or server.latency)
                    with server._lock:
                        server.in_flight -= 1
                        server.completions.append(time.monotonic())
                if reply.body is not None:
                    body = reply.body
                elif reply.status >= 400:
                    body = json.dumps({"error": {"message": reply.content or "error"}})
                else:
                    body = json.dumps(
                        {
                            "id": "chatcmpl-test",
                            "object": "chat.completion",
                            "model": request.get("model"),
                            "choices": [
                                {
                                    "index": 0,
                                    "message": {
                                        "role": "assistant",
                                        "content": reply.content,
                                        **({"refusal": reply.refusal} if reply.refusal else {}),
                                    },
                                    "finish_reason": reply.finish_reason,
                                }
                            ],
                            "usage": {
                                "prompt_tokens": reply.usage[0],
                                "completion_tokens": reply.usage[1],
                                "total_tokens": sum(reply.usage),
                                **(
                                    {"prompt_tokens_details": {"cached_tokens": reply.cached}}
                                    if reply.cached is not None
                                    else {}
                                ),
                            },
                        }
                    )
                data = body.encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client timed out and left

            def _embeddings(self, request: dict[str, Any]) -> None:
                # a vector each text determines: (length, count of "a", 1)
                server.embedding_arrivals.append(time.monotonic())
                server.embedding_requests.append(request)
                server.embedding_headers.append({k.lower(): v for k, v in self.headers.items()})
                texts, status = request["input"], 200
                # a character a token, as OpenAI's limits count them at worst
                longest, total = max(map(len, texts), default=0), sum(map(len, texts))
                if server.embedding_input_limit and longest > server.embedding_input_limit:
                    status, message = (
                        400,
                        (
                            f"This model's maximum context length is "
                            f"{server.embedding_input_limit} tokens, however you requested "
                            f"{longest} tokens. Please reduce your prompt."
                        ),
                    )
                elif server.embedding_batch_limit and len(texts) > server.embedding_batch_limit:
                    status, message = (
                        413,
                        f"batch size {len(texts)} > maximum allowed batch size "
                        f"{server.embedding_batch_limit}",
                    )
                elif server.embedding_request_limit and total > server.embedding_request_limit:
                    status, message = (
                        400,
                        (
                            f"Requested {total} tokens, max {server.embedding_request_limit} "
                            "tokens per request"
                        ),
                    )
                headers = {"Content-Type": "application/json"}
                if server.embedding_responder is not None:
                    reply = server.embedding_responder(texts)
                    status, body = reply.status, (reply.body or "").encode()
                    headers |= reply.headers
                elif status == 413:  # text-embeddings-inference's own error shape
                    body = json.dumps({"error": message, "error_type": "Validation"}).encode()
                elif status != 200:
                    body = json.dumps({"error": {"message": message}}).encode()
                else:
                    data = [
                        {"index": i, "embedding": [float(len(t)), float(t.count("a")), 1.0]}
                        for i, t in enumerate(texts)
                    ]
                    body = json.dumps({"data": data, "model": request.get("model")}).encode()
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._server = _Server(("127.0.0.1", port), Handler)
        self.port = int(self._server.server_address[1])
        origin = f"http://127.0.0.1:{self.port}"
        self.base_url = f"{origin}/v1"
        # judges remember, per process, the output mode each URL accepted: a server on the
        # port of an earlier test's server (one that took JSON mode only, say) starts unseen
        for remembered in (_ACCEPTED, _SHAPES):
            for seen in [key for key in remembered if f"{key[0]}/".startswith(f"{origin}/")]:
                del remembered[seen]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def _next(self, request: dict[str, Any]) -> Reply:
        with self._lock:
            refused = self._refused_parameter(request)
            if refused is not None:
                (self.probes if _is_probe(request) else self.requests).append(request)
                return refused
            kind = (request.get("response_format") or {}).get("type")
            if _is_probe(request):
                self.probes.append(request)
                if kind in self.unsupported_formats:
                    return self.format_refusal(kind)
                return Reply(json.dumps({"ok": True}), usage=(12, 4))
            self.requests.append(request)
            self.arrivals.append(time.monotonic())
            if kind in self.unsupported_formats:
                return self.format_refusal(kind)
            if self.script:
                return self.script.popleft()
        if self.responder is not None:
            return self.responder(request)
        return Reply(status=500, content="no scripted reply left")

    def _refused_parameter(self, request: dict[str, Any]) -> Reply | None:
        if not self.reasoning_model:
            return None
        if "max_tokens" in request:
            error = {
                "message": "Unsupported parameter: 'max_tokens' is not supported with this "
                "model. Use 'max_completion_tokens' instead.",
                "type": "invalid_request_error",
                "param": "max_tokens",
                "code": "unsupported_parameter",
            }
        elif request.get("temperature", 1) != 1:
            error = {
                "message": f"Unsupported value: 'temperature' does not support "
                f"{request['temperature']} with this model. Only the default (1) value is "
                "supported.",
                "type": "invalid_request_error",
                "param": "temperature",
                "code": "unsupported_value",
            }
        else:
            return None
        return Reply(status=400, body=json.dumps({"error": error}))

    def reply(self, *replies: Reply | str | dict[str, Any]) -> None:
        """Queue replies: a ``Reply``, a content string, or a dict sent as JSON content."""
        for item in replies:
            if isinstance(item, dict):
                item = Reply(json.dumps(item))
            elif isinstance(item, str):
                item = Reply(item)
            self.script.append(item)

    def all_connections_closed(self, within: float) -> bool:
        """Whether every client connection is closed, waiting up to ``within`` seconds (the
        server sees a close a moment after the client makes it)."""
        with self._connections_changed:
            return self._connections_changed.wait_for(
                lambda: self.open_connections == 0, timeout=within
            )

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def judge_server() -> Iterator[JudgeServer]:
    server = JudgeServer()
    yield server
    server.close()
