"""Offline replay: stream a capture file through the same metrics the online evaluator runs."""

from __future__ import annotations

import asyncio
import gc
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ._capture import read_capture
from ._errors import CaptureFormatError, MetricInputError
from ._metric import Metric, MetricKind, SessionMetric, create_metric, list_metrics, metric_class
from ._results import MetricResult
from ._schema import EvalCase, Trace
from ._scoring import ResultSummary, SessionScorer

__all__ = [
    "DEFAULT_SESSION_METRICS",
    "ReplayReport",
    "areplay",
    "default_metric_names",
    "default_trace_metric_names",
    "replay",
    "resolve_metrics",
]

DEFAULT_SESSION_METRICS = ("agent_reliability", "agent_consistency")
BATCH_SIZE = 256
"""Traces scored together, so embedding work is batched; small enough to keep memory flat."""


def default_trace_metric_names(*, with_judge: bool = False) -> list[str]:
    """The trace metrics that can score a plain capture: deterministic and embedding metrics
    that need no expectations, and judge metrics (that need none) when a judge is configured."""
    kinds = {MetricKind.DETERMINISTIC, MetricKind.EMBEDDING} | (
        {MetricKind.JUDGE} if with_judge else set()
    )
    return [
        info.name
        for info in list_metrics()
        if info.kind in kinds and not getattr(metric_class(info.name), "needs_expectations", False)
    ]


def default_metric_names(*, with_judge: bool = False) -> list[str]:
    """:func:`default_trace_metric_names` plus agent_reliability and agent_consistency."""
    return default_trace_metric_names(with_judge=with_judge) + list(DEFAULT_SESSION_METRICS)


def resolve_metrics(
    names: Sequence[str | Metric | SessionMetric] | None, *, judge: Any = None
) -> tuple[list[Metric], list[SessionMetric]]:
    """Build metrics from names (or take instances), split into trace and session metrics.

    Judge metrics get ``judge``; without one they return skipped results that say so.
    """
    trace_metrics: list[Metric] = []
    session_metrics: list[SessionMetric] = []
    for item in names if names is not None else default_metric_names(with_judge=judge is not None):
        if isinstance(item, str):
            options = (
                {"judge": judge} if metric_class(item).kind is MetricKind.JUDGE and judge else {}
            )
            item = create_metric(item, **options)
        if isinstance(item, SessionMetric):
            session_metrics.append(item)
        elif isinstance(item, Metric):
            trace_metrics.append(item)
        else:
            raise MetricInputError(f"not a metric: {item!r}")
    return trace_metrics, session_metrics


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


def _write_line(out: IO[str] | None, record: dict[str, Any]) -> None:
    if out is not None:
        out.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")


async def areplay(
    path: str | os.PathLike[str],
    metrics: Sequence[str | Metric | SessionMetric] | None = None,
    *,
    judge: Any = None,
    output: str | os.PathLike[str] | None = None,
    on_trace: Callable[[Trace, list[MetricResult]], None] | None = None,
    on_bad_line: Callable[[CaptureFormatError], None] | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> ReplayReport:
    """Score every trace of a capture file; see :func:`replay`."""
    trace_metrics, session_metrics = resolve_metrics(metrics, judge=judge)
    report = ReplayReport(path=os.fspath(path))
    out = open(output, "w", encoding="utf-8") if output is not None else None  # noqa: SIM115

    def session_closed(session_id: str, results: list[MetricResult]) -> None:
        if not results:  # no session metrics were asked for
            return
        report.sessions += 1
        report.session_summary.add(results)
        if len(report.session_results) < report.keep_sessions:
            report.session_results[session_id] = results
        _write_line(
            out,
            {
                "session_id": session_id,
                "session_results": [r.model_dump(mode="json") for r in results],
            },
        )

    scorer = SessionScorer(trace_metrics, session_metrics, on_session_closed=session_closed)

    async def score(traces: list[Trace]) -> None:
        cases = [EvalCase.from_trace(trace) for trace in traces]
        for trace, results in zip(traces, await scorer.score_batch(cases), strict=True):
            report.traces += 1
            report.summary.add(results)
            _write_line(
                out,
                {
                    "trace_id": trace.id,
                    "session_id": trace.session_id,
                    "results": [r.model_dump(mode="json") for r in results],
                },
            )
            if on_trace is not None:
                on_trace(trace, results)

    def bad_line(error: CaptureFormatError) -> None:
        report.bad_lines.append(error)
        if on_bad_line is not None:
            on_bad_line(error)

    try:
        batch: list[Trace] = []
        for trace in read_capture(path, on_error=bad_line, on_progress=on_progress):
            batch.append(trace)
            if len(batch) == BATCH_SIZE:
                await score(batch)
                batch.clear()
        await score(batch)
        scorer.close_all()
    finally:
        if out is not None:
            out.close()
    return report


def replay(
    path: str | os.PathLike[str],
    metrics: Sequence[str | Metric | SessionMetric] | None = None,
    *,
    judge: Any = None,
    output: str | os.PathLike[str] | None = None,
    on_trace: Callable[[Trace, list[MetricResult]], None] | None = None,
    on_bad_line: Callable[[CaptureFormatError], None] | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> ReplayReport:
    """Stream a capture file through metrics and return the report.

    ``metrics`` are registry names or metric instances (default: the deterministic and
    embedding metrics that need no expectations, plus agent_reliability and
    agent_consistency, and the judge metrics when ``judge`` is given). Bad lines go to
    ``on_bad_line`` and are skipped, so every good line is scored. With ``output``, one JSON
    line per trace (``trace_id``, ``session_id``, ``results``) is written, then one per session
    (``session_id``, ``session_results``).
    """
    # A replay keeps a batch of parsed traces alive; with the default thresholds the cyclic
    # collector re-scans them every few hundred allocations. Traces hold no cycles, so fewer
    # passes cost nothing in memory and save about a fifth of the time.
    thresholds = gc.get_threshold()
    gc.set_threshold(max(thresholds[0], 10_000), *thresholds[1:])
    try:
        return asyncio.run(
            areplay(
                Path(path),
                metrics,
                judge=judge,
                output=output,
                on_trace=on_trace,
                on_bad_line=on_bad_line,
                on_progress=on_progress,
            )
        )
    finally:
        gc.set_threshold(*thresholds)
