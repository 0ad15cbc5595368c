"""Replay with a judge from the command line: requests kept in flight, throughput, and a
budget that stops the calls.

500 traces are replayed by ``agenteval replay ... --judge-concurrency 16`` (a subprocess,
as a user runs it) against a loopback OpenAI-compatible server that answers every request
after 100 ms, in three shapes: one session of 500 traces (a long conversation), 25 sessions
of 20 and 500 sessions of 1. The best a judge bound to 16 requests in flight can do is
16 / 0.1 s = 160 requests per second; the server measures what replay achieved, from the
first request's arrival to the last answer (interpreter start-up is not replay's work).
A second replay of the same capture with ``--judge-budget-usd`` set to 100 calls' worth
counts the calls made: replay stops issuing them at the budget, so at most the calls already
in flight (one batch of ``--judge-concurrency``) may pass it.

    python -m bench judge_replay [--quick]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from agenteval_core import CaptureWriter, Trace

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from judge_server import JudgeServer, Reply

CONCURRENCY = 16
LATENCY = 0.1


PRICED_MODEL = "gpt-4o-mini"  # 0.15 / 0.60 USD per million input / output tokens
CALL_USD = (100 * 0.15 + 20 * 0.60) / 1e6  # the server reports 100 + 20 tokens per answer


def _replay(capture: Path, server: JudgeServer, model: str, *extra: str) -> None:
    command = [
        sys.executable, "-m", "agenteval_core.cli", "replay", str(capture),
        "--metrics", "confidence",
        "--judge-model", model,
        "--judge-base-url", server.base_url,
        "--judge-concurrency", str(CONCURRENCY),
        "--judge-rps", "10000",
        "--no-cache", "-q", *extra,
    ]  # fmt: skip
    done = subprocess.run(
        command, capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"}
    )
    if done.returncode != 0:
        raise SystemExit(f"replay failed: {done.stderr}")


def _capture(path: Path, count: int, sessions: int) -> None:
    path.unlink(missing_ok=True)  # the writer appends
    with CaptureWriter(path) as writer:
        for index in range(count):
            writer.write(
                Trace(
                    input=f"question {index}",
                    output=f"answer {index}",
                    session_id=f"s{index % sessions}",
                )
            )


def main(quick: bool = False) -> None:
    count = 160 if quick else 500
    shapes = [(1, count), (count // 20, 20), (count, 1)]  # (sessions, traces per session)
    server = JudgeServer()
    server.latency = LATENCY
    server.responder = lambda request: Reply(json.dumps({"score": 1, "reason": "ok"}))
    ideal = CONCURRENCY / LATENCY
    print(
        f"{count} traces, 1 judge call each, loopback latency {LATENCY * 1000:.0f} ms, "
        f"--judge-concurrency {CONCURRENCY}; ideal {ideal:.0f} requests/s"
    )
    try:
        with tempfile.TemporaryDirectory() as name:
            capture = Path(name) / "capture.jsonl"
            for sessions, length in shapes:
                _capture(capture, count, sessions)
                server.requests.clear()
                server.arrivals.clear()
                server.completions.clear()
                server.peak_in_flight = 0
                _replay(capture, server, "bench-model")
                seconds = max(server.completions) - min(server.arrivals)
                achieved = len(server.requests) / seconds
                print(
                    f"{sessions} session(s) of {length}: {achieved:.1f} requests/s over "
                    f"{seconds:.2f} s, peak {server.peak_in_flight} in flight; fraction of "
                    f"concurrency / latency {achieved / ideal:.3f} (goal >= 0.9)"
                )
            server.requests.clear()
            budget_calls = 100
            budget = budget_calls * CALL_USD
            _replay(capture, server, PRICED_MODEL, "--judge-budget-usd", f"{budget:.6f}")
            budgeted = len(server.requests)
    finally:
        server.close()
    print(
        f"budget ${budget:.4f} = {budget_calls} calls of ${CALL_USD:.6f}: {budgeted} calls made, "
        f"{budgeted - budget_calls} past the budget (goal: at most one batch, "
        f"{CONCURRENCY} in flight)"
    )
