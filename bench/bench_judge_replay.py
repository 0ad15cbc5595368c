"""Replay with a judge from the command line: requests kept in flight, and throughput.

500 traces in 100 sessions are replayed by ``agenteval replay ... --judge-concurrency 16``
(a subprocess, as a user runs it) against a loopback OpenAI-compatible server that answers
every request after 100 ms. The best a judge bound to 16 requests in flight can do is
16 / 0.1 s = 160 requests per second; the server measures what replay achieved, from the
first request's arrival to the last answer (interpreter start-up is not replay's work).

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


def main(quick: bool = False) -> None:
    count = 160 if quick else 500
    server = JudgeServer()
    server.latency = LATENCY
    server.responder = lambda request: Reply(json.dumps({"score": 1, "reason": "ok"}))
    try:
        with tempfile.TemporaryDirectory() as name:
            capture = Path(name) / "capture.jsonl"
            with CaptureWriter(capture) as writer:
                for index in range(count):
                    writer.write(
                        Trace(
                            input=f"question {index}",
                            output=f"answer {index}",
                            session_id=f"s{index % 100}",
                        )
                    )
            command = [
                sys.executable, "-m", "agenteval_core.cli", "replay", str(capture),
                "--metrics", "confidence",
                "--judge-model", "bench-model",
                "--judge-base-url", server.base_url,
                "--judge-concurrency", str(CONCURRENCY),
                "--judge-rps", "10000",
                "--no-cache", "-q",
            ]  # fmt: skip
            done = subprocess.run(
                command, capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"}
            )
            if done.returncode != 0:
                raise SystemExit(f"replay failed: {done.stderr}")
    finally:
        server.close()
    seconds = max(server.completions) - min(server.arrivals)
    achieved = len(server.requests) / seconds
    ideal = CONCURRENCY / LATENCY
    print(
        f"{count} traces, 1 judge call each, loopback latency {LATENCY * 1000:.0f} ms, "
        f"--judge-concurrency {CONCURRENCY}"
    )
    print(f"requests in flight at the peak: {server.peak_in_flight} (bound {CONCURRENCY})")
    print(f"achieved {achieved:.1f} requests/s over {seconds:.2f} s; ideal {ideal:.0f}/s")
    print(
        f"throughput as a fraction of concurrency / latency: {achieved / ideal:.3f} (goal >= 0.9)"
    )
