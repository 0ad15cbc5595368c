"""Metrics the Ray replay tests send to Ray's workers (which import them from here), and the
captures and results those tests compare."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from agenteval_core import (
    CaptureWriter,
    EvalCase,
    Metric,
    MetricKind,
    RunStatus,
    Score,
    Span,
    SpanKind,
    ToolCall,
    Trace,
)


class HistoryIds(Metric):
    """Says which earlier traces of its session a trace was scored with."""

    name = "history_ids"
    kind: ClassVar[MetricKind] = MetricKind.DETERMINISTIC
    uses_history: ClassVar[bool] = True
    window = 1000

    def compute(self, case: EvalCase, history: Sequence[Trace] = ()) -> Score:
        return Score(1.0, metadata={"history": [trace.id for trace in history]})


class CrashOnce(Metric):
    """Kills its worker process the first time it meets the trace ``victim`` (a marker file
    remembers it across the restart), as a machine lost mid-task would."""

    name = "crash_once"
    kind: ClassVar[MetricKind] = MetricKind.DETERMINISTIC

    def __init__(self, victim: str, marker: str) -> None:
        super().__init__()
        self.victim, self.marker = victim, marker

    def compute(self, case: EvalCase, history: Sequence[Trace] = ()) -> Score:
        assert case.trace is not None
        if case.trace.id == self.victim and not Path(self.marker).exists():
            Path(self.marker).write_text("crashed")
            os._exit(1)
        return Score(1.0)


def a_trace(session: str | None, turn: int, *, failed: bool = False) -> Trace:
    name = f"{session or 'alone'}-{turn}"
    return Trace(
        id=name,
        session_id=session,
        input=f"where is order {turn} of {session}?",
        output=f"order {turn} ships on day {turn % 3}",
        status=RunStatus.ERROR if failed else RunStatus.OK,
        spans=[
            Span(
                id=f"{name}-tool",
                kind=SpanKind.TOOL,
                name="lookup",
                tool_call=ToolCall(name="lookup", arguments={"order": turn}, result=turn),
            )
        ],
    )


def write_capture(path: Path, traces: list[Trace]) -> None:
    with CaptureWriter(path) as writer:
        for trace in traces:
            writer.write(trace)


def timeless(results_file: Path) -> list[dict[str, Any]]:
    """The results file's lines without timings (the one thing allowed to differ), sorted."""
    lines = []
    for line in results_file.read_text().splitlines():
        record = json.loads(line)
        for result in record.get("results", []) + record.get("session_results", []):
            result.pop("latency_ms", None)
        lines.append(record)
    return sorted(lines, key=lambda r: json.dumps(r, sort_keys=True))


def index_elsewhere(uri: str, span: tuple[int, int | None], partitions: int) -> Any:
    """An index task on a node that does not see the capture at the driver's path (no
    shared volume): the file is looked for at a path that does not exist here."""
    from agenteval_core.offline import _ray

    return _ray._index(f"{uri}.elsewhere", span, partitions)
