"""Metrics the Ray replay tests send to Ray's workers (which import them from here)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

from agenteval_core import EvalCase, Metric, MetricKind, Score, Trace


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
