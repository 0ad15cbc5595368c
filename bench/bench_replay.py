"""Replay throughput against parse-only, memory over 10x more traces, and session math at 1M;
and what writing each tool call once (schema version 2 and later) saves against version 1.

python -m bench replay [--quick]
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from agenteval_core import (
    DEFAULT_SESSION_METRICS,
    SCHEMA_VERSION,
    EvalCase,
    Metric,
    MetricKind,
    Score,
    SessionMetric,
    Trace,
    default_metric_names,
    read_capture,
    replay,
)
from agenteval_core.metrics import AgentConsistency, AgentReliability

from ._memory import peak_rss_mib
from ._synthetic import write_capture

EMBEDDING = ("coherence", "loop_detection")

_CHILD = """
import sys
from agenteval_core import replay
print(replay(sys.argv[1]).traces)
"""


def _peak_rss_mib(path: Path) -> tuple[int, float]:
    """Replay in a fresh process; its own peak resident memory."""
    traces, mib = peak_rss_mib(_CHILD, str(path))
    return int(traces), mib


def _instant(number: int) -> Metric:
    """A metric that does no work: what scoring costs before any metric computes anything."""

    class Instant(Metric):
        name = f"instant_{number}"
        kind = MetricKind.DETERMINISTIC

        def compute(self, case: EvalCase, history: Sequence[Trace] = ()) -> Score:
            return Score(1.0, "no work")

    return Instant()


ROUNDS = 3
"""Parse-only and the default-metrics replays are each timed this many times, alternating,
and the fastest time of each counts: on a shared machine a neighbour only ever adds time."""


def _rate(run: Callable[[], int]) -> float:
    started = time.perf_counter()
    count = run()
    return count / (time.perf_counter() - started)


def throughput(directory: Path, count: int) -> None:
    path = write_capture(directory / "throughput.jsonl", count)
    workers = os.cpu_count() or 1
    results = directory / "results.jsonl"
    best = {"parse": 0.0, "one": 0.0, "file": 0.0, "workers": 0.0}
    for _ in range(ROUNDS):
        best["parse"] = max(best["parse"], _rate(lambda: sum(1 for _ in read_capture(path))))
        best["one"] = max(best["one"], _rate(lambda: replay(path).traces))
        # what `agenteval replay --json` does: every result and the session's running
        # scores written to the results file that the report reads
        results.unlink(missing_ok=True)
        best["file"] = max(best["file"], _rate(lambda: replay(path, output=results).traces))
        best["workers"] = max(best["workers"], _rate(lambda: replay(path, workers=workers).traces))
    parse_rate = best["parse"]
    print(f"metrics: {', '.join(default_metric_names())}")
    print(f"traces: {count:,} ({path.stat().st_size / count / 1024:.1f} KiB each)")
    print(f"fastest of {ROUNDS} rounds, alternating, for each figure down to the workers' ratio")
    print(f"parse only: {parse_rate:,.0f} traces/s ({1e6 / parse_rate:.0f} µs per trace)")
    rate = best["one"]
    print(f"replay with the default metrics: {rate:,.0f} traces/s ({1e6 / rate:.0f} µs per trace)")
    print(f"ratio replay/parse: {rate / parse_rate:.3f} (goal >= 0.333), one process")
    file_rate = best["file"]
    print(
        f"default metrics, writing the results file: {file_rate:,.0f} traces/s "
        f"({1e6 / file_rate:.0f} µs per trace)"
    )
    print(f"results file overhead: {rate / file_rate - 1:+.0%} of the time (goal <= +25%)")
    rate = best["workers"]
    print(
        f"replay with the default metrics, {workers} worker processes: {rate:,.0f} traces/s, "
        f"{rate / best['one']:.2f}x one process"
    )
    print(f"ratio replay/parse: {rate / parse_rate:.3f} (goal >= 0.333), {workers} workers")
    # then none (the most any replay can reach), then without the two embedding metrics,
    # then as many metrics that return at once: what the embedder costs, and the engine's
    # own floor per trace
    defaults = default_metric_names()
    runs: list[tuple[str, Sequence[str | Metric | SessionMetric]]] = [
        ("no metrics at all: parsing, cases, sessions and sinks", []),
        ("without coherence, loop_detection", [m for m in defaults if m not in EMBEDDING]),
        (
            "engine floor: 4 metrics that return at once, and the 2 session metrics",
            [_instant(i) for i in range(4)] + [m for m in defaults if m in DEFAULT_SESSION_METRICS],
        ),
    ]
    for label, names in runs:
        started = time.perf_counter()
        rate = replay(path, names).traces / (time.perf_counter() - started)
        print(f"{label}: {rate:,.0f} traces/s ({1e6 / rate:.0f} µs per trace)")
        print(f"  ratio to parse-only: {rate / parse_rate:.3f}")


def line_format(directory: Path, count: int) -> None:
    """The same traces as version-1 lines (each tool call's arguments and result also on its
    span and the results on the model's requests) and as lines of the current version (once;
    these traces' model calls carry no conversations, so version 3 writes them as 2 did)."""
    old = write_capture(directory / "v1.jsonl", count, version=1)
    new = write_capture(directory / "v2.jsonl", count)
    best = {old: 0.0, new: 0.0}
    for _ in range(ROUNDS):
        for path in best:
            best[path] = max(best[path], _rate(lambda p=path: sum(1 for _ in read_capture(p))))
    for version, path in ((1, old), (SCHEMA_VERSION, new)):
        print(
            f"schema version {version}: {path.stat().st_size / count:,.0f} bytes per trace, "
            f"parse {1e6 / best[path]:.0f} µs per trace"
        )
    print(
        f"version {SCHEMA_VERSION} / version 1: bytes {new.stat().st_size / old.stat().st_size:.3f}, "
        f"parse time {best[old] / best[new]:.3f}"
    )


def memory(directory: Path, count: int) -> None:
    """Peak memory of ``count`` and 10 × ``count`` traces. Memory grows until the engine's
    1024 open sessions are full (sessions of 10: ~10,000 traces), then stays flat, so
    ``count`` is past that point."""
    small = write_capture(directory / "small.jsonl", count)
    large = write_capture(directory / "large.jsonl", count * 10)
    small_traces, small_mib = _peak_rss_mib(small)
    large_traces, large_mib = _peak_rss_mib(large)
    print(f"peak memory, {small_traces:,} traces: {small_mib:.0f} MiB")
    print(f"peak memory, {large_traces:,} traces: {large_mib:.0f} MiB")
    print(f"ratio 10x traces / 1x traces: {large_mib / small_mib:.2f} (goal: flat, about 1)")


def session_math(count: int) -> None:
    rng = np.random.default_rng(0)
    matrix = rng.random((count, 4))
    matrix[rng.random((count, 4)) < 0.1] = np.nan  # some signals missing
    ids = [f"t{i}" for i in range(count)]
    for metric in (AgentReliability(), AgentConsistency()):
        started = time.perf_counter()
        result = metric.measure_matrix(ids, matrix)
        seconds = time.perf_counter() - started
        print(
            f"{metric.name} over {count:,} traces' signals: {seconds:.3f} s (goal < 1 s), score {result.score:.4f}"
        )
    live = AgentReliability().incremental()
    sample = min(count, 100_000)
    rows = [
        dict(zip(("confidence", "loop_detection", "tool_correctness", "coherence"), r, strict=True))
        for r in matrix[:sample].tolist()
    ]
    started = time.perf_counter()
    for trace_id, row in zip(ids, rows, strict=False):
        live.update(trace_id, row)
    per_update = (time.perf_counter() - started) / sample * 1e6
    print(f"incremental update: {per_update:.1f} µs per trace ({sample:,} updates)")


def main(quick: bool = False) -> None:
    with tempfile.TemporaryDirectory() as name:
        directory = Path(name)
        line_format(directory, 10_000 if quick else 100_000)
        throughput(directory, 10_000 if quick else 100_000)
        memory(directory, 12_000 if quick else 20_000)
    session_math(100_000 if quick else 1_000_000)
