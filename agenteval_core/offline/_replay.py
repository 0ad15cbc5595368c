"""Offline replay: stream a capture file through the same metrics the online evaluator runs."""

from __future__ import annotations

import asyncio
import gc
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._errors import CaptureFormatError
from ..embedders._local import LocalEmbedder
from ..engine._engine import Engine
from ..engine._sinks import ResultsFileSink, Sink
from ..engine._summary import ResultSummary
from ..metrics._protocol import Metric, SessionMetric
from ..schema._capture import read_capture
from ..schema._results import MetricResult, TraceResults
from ..schema._trace import Trace

__all__ = ["ReplayReport", "areplay", "replay"]

LOCAL_BATCH_SIZE = 32
"""Traces parsed and scored together when every embedder runs in this process: a few dozen
parsed traces stay in the CPU's cache (with 256, parsing alone took twice as long), and an
in-process embedder gains little from bigger batches."""
REMOTE_BATCH_SIZE = 256
"""Traces scored together when a metric's embedder is remote: one request per batch."""


def _batch_size(engine: Engine) -> int:
    embedders = [getattr(metric, "embedder", None) for metric in engine.metrics]
    if all(e is None or isinstance(e, LocalEmbedder) for e in embedders):
        return LOCAL_BATCH_SIZE
    return REMOTE_BATCH_SIZE


@dataclass
class ReplayReport:
    """What a replay found: counts, per-metric summaries, session results and bad lines.

    ``session_results`` keeps the first ``keep_sessions`` sessions (all of them go to the
    output file and into ``session_summary``), so memory stays flat on huge captures.
    """

    path: str
    keep_sessions: int = 1000
    traces: int = 0
    sessions: int = 0
    summary: ResultSummary = field(default_factory=ResultSummary)
    session_summary: ResultSummary = field(default_factory=ResultSummary)
    session_results: dict[str, list[MetricResult]] = field(default_factory=dict)
    bad_lines: list[CaptureFormatError] = field(default_factory=list)

    def __repr__(self) -> str:
        # counts, not every session's results: asyncio formats the replay task (and so this
        # report) when it restores the Ctrl-C handler, and a REPL should print a short line
        return (
            f"ReplayReport(path={self.path!r}, traces={self.traces}, sessions={self.sessions}, "
            f"metrics={list(self.summary.metrics)}, bad_lines={len(self.bad_lines)})"
        )


class _ReportSink(Sink):
    """Fills a :class:`ReplayReport` and calls the user's ``on_trace``."""

    wants_session_snapshots = False  # the report keeps each session's final results only

    def __init__(
        self,
        report: ReplayReport,
        on_trace: Callable[[Trace, list[MetricResult]], None] | None,
    ) -> None:
        self.report = report
        self.on_trace = on_trace

    def trace_scored(self, trace: Trace, results: TraceResults) -> None:
        self.report.traces += 1
        self.report.summary.add(results.results)
        if self.on_trace is not None:
            self.on_trace(trace, results.results)

    def session_scored(self, session_id: str, results: list[MetricResult]) -> None:
        report = self.report
        report.sessions += 1
        report.session_summary.add(results)
        if len(report.session_results) < report.keep_sessions:
            report.session_results[session_id] = results


async def areplay(
    path: str | os.PathLike[str],
    metrics: Sequence[str | Metric | SessionMetric] | None = None,
    *,
    judge: Any = None,
    embedder: Any = None,
    concurrency: int | None = None,
    output: str | os.PathLike[str] | None = None,
    sinks: Sequence[Sink] = (),
    on_trace: Callable[[Trace, list[MetricResult]], None] | None = None,
    on_bad_line: Callable[[CaptureFormatError], None] | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> ReplayReport:
    """Score every trace of a capture file; see :func:`replay`."""
    preflight = getattr(judge, "preflight", None)
    if preflight is not None:  # a misconfigured judge fails now, not on every trace
        await preflight()
    report = ReplayReport(path=os.fspath(path))
    all_sinks: list[Sink] = [_ReportSink(report, on_trace)]
    if output is not None:
        all_sinks.append(ResultsFileSink(output))
    all_sinks += sinks
    engine = Engine(
        metrics, judge=judge, embedder=embedder, sinks=all_sinks, concurrency=concurrency
    )

    def bad_line(error: CaptureFormatError) -> None:
        report.bad_lines.append(error)
        if on_bad_line is not None:
            on_bad_line(error)

    size = _batch_size(engine)

    def batches() -> Iterator[list[Trace]]:
        batch: list[Trace] = []
        for trace in read_capture(path, on_error=bad_line, on_progress=on_progress):
            batch.append(trace)
            if len(batch) == size:
                yield batch
                batch = []
        if batch:
            yield batch

    try:
        await engine.stream(batches())
        engine.close_all()
    finally:
        for sink in all_sinks:
            sink.close()
    return report


def replay(
    path: str | os.PathLike[str],
    metrics: Sequence[str | Metric | SessionMetric] | None = None,
    *,
    judge: Any = None,
    embedder: Any = None,
    concurrency: int | None = None,
    output: str | os.PathLike[str] | None = None,
    sinks: Sequence[Sink] = (),
    on_trace: Callable[[Trace, list[MetricResult]], None] | None = None,
    on_bad_line: Callable[[CaptureFormatError], None] | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> ReplayReport:
    """Stream a capture file through metrics and return the report.

    ``metrics`` are registry names or metric instances (default: the deterministic and
    embedding metrics that need no expectations, plus agent_reliability and
    agent_consistency, and the judge metrics when ``judge`` is given); ``judge`` and
    ``embedder`` go to the metrics that take them. Traces are scored by the same
    :class:`~agenteval_core.Engine` as online: up to ``concurrency`` at once (default: the
    judge's bound), each session in order. Bad lines go to ``on_bad_line`` and are skipped,
    so every good line is scored. With ``output``, the results file is written (see
    :class:`~agenteval_core.ResultsFileSink`); ``sinks`` receive every result too. A judge's
    preflight check runs first: a missing key, a bad URL, an unreachable server or a
    rejected key raises :class:`~agenteval_core.JudgeConfigError` before anything is scored.
    """
    # A replay keeps a batch of parsed traces alive, and each open session the traces loop
    # detection reads; with the default thresholds the cyclic collector re-scans them every
    # few hundred allocations (and the middle generation every tenth pass, ~40 ms each).
    # Traces hold no cycles, so fewer passes cost nothing in memory and save time.
    thresholds = gc.get_threshold()
    gc.set_threshold(max(thresholds[0], 10_000), max(thresholds[1], 100), *thresholds[2:])
    try:
        return asyncio.run(
            areplay(
                Path(path),
                metrics,
                judge=judge,
                embedder=embedder,
                concurrency=concurrency,
                output=output,
                sinks=sinks,
                on_trace=on_trace,
                on_bad_line=on_bad_line,
                on_progress=on_progress,
            )
        )
    finally:
        gc.set_threshold(*thresholds)
