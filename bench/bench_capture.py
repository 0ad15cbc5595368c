"""How soon a finished trace is on disk: capture latency for traces with 2 MB tool results.

A finished trace is redacted and appended to the capture before anything else happens to
it; this measures that step (``OnlineEvaluator.submit``) for traces whose two tool calls
returned 2 MB each (the results also appear in the next LLM call's input), against writing
the same trace as JSON with no redaction, in the same run (goal: at most 50 ms).

    python -m bench capture [--quick]
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from agenteval_core import OnlineEvaluator, Span, SpanKind, ToolCall, Trace

RESULT = ("order line: item 42, qty 3; " * 80_000)[:2_000_000]


def _trace() -> Trace:
    spans = [Span(kind=SpanKind.AGENT, name="agent")]
    for index in range(2):
        call = ToolCall(name="export_orders", arguments={"page": index}, result=RESULT)
        spans.append(Span(kind=SpanKind.TOOL, name=call.name, output=RESULT, tool_call=call))
        spans.append(
            Span(kind=SpanKind.LLM, name="model", input=[{"role": "tool", "content": RESULT}])
        )
    return Trace(input="Export all orders", output="Done.", spans=spans)


def main(quick: bool = False) -> None:
    runs = 10 if quick else 40
    ours, plain = [], []
    with tempfile.TemporaryDirectory() as name:
        directory = Path(name)
        evaluator = OnlineEvaluator(
            capture=directory / "capture.jsonl", metrics=[], session_metrics=[], log=False
        )
        with open(directory / "plain.jsonl", "ab", buffering=0) as baseline:
            for _ in range(runs):  # interleaved, so a busy moment falls on both
                trace = _trace()
                started = time.perf_counter()
                evaluator.submit(trace)
                ours.append(time.perf_counter() - started)
                started = time.perf_counter()
                baseline.write(trace.model_dump_json().encode() + b"\n")
                plain.append(time.perf_counter() - started)
        evaluator.close()
    ours_ms, plain_ms = statistics.median(ours) * 1000, statistics.median(plain) * 1000
    print(f"traces with 2 x 2 MB tool results (12 MB of strings each), {runs} runs, medians")
    print(f"capture (redact, cut, append): {ours_ms:.1f} ms (goal <= 50 ms)")
    print(f"plain JSON write of the same trace: {plain_ms:.1f} ms")
    print(f"ratio capture / plain write: {ours_ms / plain_ms:.2f}")
