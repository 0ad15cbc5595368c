"""What importing OpenTelemetry spans costs as the file grows: ``iter_otlp`` (what
``agenteval import`` runs, a trace at a time) on JSON Lines of OpenInference spans (an
agent span and three tool spans per trace, one span a line, as a collector's file exporter
or Phoenix's export writes them), at one size and at four times that size. The time per span should stay the same (goal: ratio about 1, linear), and
``agenteval import``'s peak memory too (goal: flat, ratio about 1): it writes each trace
as its last span is read.

    python -m bench span_import [--quick]
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

from agenteval_otel import iter_otlp

from ._memory import peak_rss_mib


def _span(trace: int, span: int, parent: int | None, kind: str, text: str) -> dict[str, Any]:
    start = 1_767_225_600_000_000_000 + trace * 10_000_000 + span * 1_000
    attributes = [
        {"key": "openinference.span.kind", "value": {"stringValue": kind}},
        {"key": "input.value", "value": {"stringValue": text}},
        {"key": "output.value", "value": {"stringValue": f"{text}: done"}},
    ]
    if kind == "TOOL":
        attributes.append({"key": "tool.name", "value": {"stringValue": "get_weather"}})
    return {
        "traceId": f"{trace:032x}",
        "spanId": f"{trace:08x}{span:08x}",
        **({"parentSpanId": f"{trace:08x}{parent:08x}"} if parent is not None else {}),
        "name": "agent" if kind == "AGENT" else "get_weather",
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(start + 500),
        "attributes": attributes,
    }


def _write(path: Path, traces: int) -> int:
    """``traces`` traces, each's tool spans first and its agent span last (the order spans
    end and are exported in); the number of spans."""
    with path.open("w") as out:
        for trace in range(traces):
            for span in range(3):
                out.write(json.dumps(_span(trace, span + 2, 1, "TOOL", '{"city": "Paris"}')))
                out.write("\n")
            out.write(json.dumps(_span(trace, 1, None, "AGENT", f"Weather {trace}?")) + "\n")
    return traces * 4


_IMPORT = """
import sys
from agenteval_core.cli import cli
cli(["import", sys.argv[1], "-o", sys.argv[2]], standalone_mode=False)
"""

ROUNDS = 3
"""Each size is imported this many times; the fastest counts."""


def main(quick: bool = False) -> None:
    base = 1_000 if quick else 5_000
    per_span: list[float] = []
    peaks: list[float] = []
    with tempfile.TemporaryDirectory() as name:
        for traces in (base, base * 4):
            path = Path(name) / f"spans-{traces}.jsonl"
            spans = _write(path, traces)
            seconds = float("inf")
            for _ in range(ROUNDS):  # a neighbour on a shared machine only ever adds time
                started = time.perf_counter()
                imported = sum(1 for _ in iter_otlp(path))
                seconds = min(seconds, time.perf_counter() - started)
                assert imported == traces
            per_span.append(seconds / spans * 1e6)
            size = path.stat().st_size / 1e6
            print(
                f"{spans:,} spans ({size:.1f} MB, one a line): {seconds:.2f} s (fastest of "
                f"{ROUNDS}), "
                f"{per_span[-1]:.0f} µs per span"
            )
            _, mib = peak_rss_mib(_IMPORT, str(path), str(Path(name) / f"capture-{traces}.jsonl"))
            peaks.append(mib)
            print(f"  peak memory of `agenteval import` on them: {mib:.0f} MiB")
    print(f"µs per span, 4x the spans / 1x: {per_span[1] / per_span[0]:.2f} (goal: about 1)")
    print(f"peak memory, 4x the spans / 1x: {peaks[1] / peaks[0]:.2f} (goal: flat, about 1)")
