"""Judges against hostile servers on 127.0.0.1: a gzip bomb, a 1 GiB body, a server that
trickles its answer, and usage figures that are not numbers."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
import tracemalloc
import zlib
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from judge_server import JudgeServer, Reply
from pydantic import BaseModel

from agenteval_core import JudgeUnavailableError
from agenteval_core.judges import JudgeRequest, OpenAIJudge

MiB = 1024 * 1024


class Verdict(BaseModel):
    score: float
    reason: str


def _request() -> JudgeRequest[Verdict]:
    return JudgeRequest(
        metric="test_metric",
        prompt_version="v1",
        messages=[{"role": "system", "content": "Judge."}, {"role": "user", "content": "Good?"}],
        schema=Verdict,
    )


def _gzip_of_zeros(size: int) -> bytes:
    """A gzip body of ``size`` zero bytes (1 GiB → about 1 MB)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = bytes(MiB)
    parts = [packer.compress(block) for _ in range(size // MiB)]
    return b"".join(parts) + packer.flush()


class HostileServer:
    """Answers every POST with ``respond(handler)``; counts the bytes it got out."""

    def __init__(self, respond: Callable[[BaseHTTPRequestHandler], int]) -> None:
        self.sent = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def handle(self) -> None:
                with contextlib.suppress(ConnectionResetError):  # the client hung up
                    super().handle()

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                # the client may refuse the rest and leave
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    server.sent += respond(self)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def hostile() -> Iterator[Callable[[Callable[[BaseHTTPRequestHandler], int]], HostileServer]]:
    servers: list[HostileServer] = []

    def start(respond: Callable[[BaseHTTPRequestHandler], int]) -> HostileServer:
        servers.append(HostileServer(respond))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def _ask(base_url: str, **options: Any) -> tuple[Any, float, int]:
    """Ask once; what came of it, the seconds it took, the peak of Python allocations."""
    judge = OpenAIJudge(
        "judge-model", base_url=base_url, cache=None, max_retries=0, **{"timeout": 5.0, **options}
    )
    tracemalloc.start()
    started = time.monotonic()
    try:
        outcome: Any = asyncio.run(judge.judge(_request()))
    except Exception as exc:
        outcome = exc
    elapsed = time.monotonic() - started
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return outcome, elapsed, peak


def test_a_gzip_bomb_is_refused_while_it_inflates(hostile: Any) -> None:
    bomb = _gzip_of_zeros(1024 * MiB)
    assert len(bomb) < 2 * MiB  # about 1 MB on the wire, 1 GiB inflated

    def respond(handler: BaseHTTPRequestHandler) -> int:
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Encoding", "gzip")
        handler.send_header("Content-Length", str(len(bomb)))
        handler.end_headers()
        handler.wfile.write(bomb)
        return len(bomb)

    server = hostile(respond)
    outcome, _, peak = _ask(server.base_url)
    assert isinstance(outcome, JudgeUnavailableError)
    assert str(outcome).startswith("the response body is over 4,194,304 bytes (read so far: ")
    # inflated a chunk at a time and refused at 4 MiB: far from the 1 GiB (5.1 GB RSS before)
    assert peak < 128 * MiB


def test_a_1_gib_body_is_refused_after_the_limit(hostile: Any) -> None:
    def respond(handler: BaseHTTPRequestHandler) -> int:
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(1024 * MiB))
        handler.end_headers()
        sent, block = 0, b" " * MiB
        while sent < 1024 * MiB:
            handler.wfile.write(block)
            sent += len(block)
        return sent

    server = hostile(respond)
    outcome, _, peak = _ask(server.base_url)
    assert isinstance(outcome, JudgeUnavailableError)
    assert "the response body is over 4,194,304 bytes" in str(outcome)
    assert peak < 64 * MiB  # was 3.9 GB of RSS: the whole body held
    assert outcome.usage.calls == 1  # not sent again: the same server gives the same


def test_a_server_that_trickles_its_answer_is_cut_at_the_timeout(hostile: Any) -> None:
    stop = threading.Event()

    def respond(handler: BaseHTTPRequestHandler) -> int:
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", "100000")
        handler.end_headers()
        sent = 0
        while not stop.is_set() and sent < 100_000:  # a byte every 0.5 s: each read is quick
            handler.wfile.write(b" ")
            handler.wfile.flush()
            sent += 1
            stop.wait(0.5)
        return sent

    server = hostile(respond)
    try:
        outcome, elapsed, _ = _ask(server.base_url, timeout=2.0)
    finally:
        stop.set()
    assert isinstance(outcome, JudgeUnavailableError)
    assert str(outcome).startswith("timed out; not sent again")
    # the timeout bounds the whole call (it ran past 60 s with timeout=10 before); the margin
    # is for a loaded machine, not a speed goal
    assert 2.0 <= elapsed < 10.0


@pytest.mark.parametrize(
    ("usage", "tokens"),
    [
        # a count that is not a number: estimated from characters (/ 4), marked as such
        ('{"prompt_tokens": 1e309, "completion_tokens": 20}', "estimated input"),
        ('{"prompt_tokens": "lots", "completion_tokens": "lots"}', "estimated both"),
        ('{"prompt_tokens": -5000, "completion_tokens": -100}', "estimated both"),
        ('"lots"', "estimated both"),
        ('{"prompt_tokens": 100.0, "completion_tokens": 20}', "as reported"),
    ],
)
def test_a_malformed_usage_keeps_the_verdict(
    judge_server: JudgeServer, usage: str, tokens: str
) -> None:
    content = json.dumps({"score": 0.8, "reason": "fine"})
    body = (
        '{"choices": [{"index": 0, "message": {"role": "assistant", "content": '
        f"{json.dumps(content)}}}}}], "
        f'"usage": {usage}}}'
    )
    judge_server.reply(Reply(body=body))
    judge = OpenAIJudge(
        "judge-model",
        base_url=judge_server.base_url,
        cache=None,
        prices={"judge-model": (1.0, 2.0)},
        budget_usd=1.0,
    )
    reply = asyncio.run(judge.judge(_request()))
    assert reply.parsed == Verdict(score=0.8, reason="fine")  # the verdict is kept
    sent = json.dumps(_request().messages)
    estimated = (len(sent) // 4, len(content) // 4)
    expected = {
        "estimated input": (estimated[0], 20),
        "estimated both": estimated,
        "as reported": (100, 20),
    }[tokens]
    assert (reply.input_tokens, reply.output_tokens) == expected
    assert judge.stats.estimated_usage == (0 if tokens == "as reported" else 1)
    # never a negative spend that would keep a budget from ever being reached
    assert reply.cost_usd == pytest.approx((expected[0] * 1.0 + expected[1] * 2.0) / 1e6)
    assert judge.stats.spent_usd == pytest.approx(reply.cost_usd)
