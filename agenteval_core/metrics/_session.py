"""Session metrics (PandaProbe's definitions): agent_reliability and agent_consistency over per-trace signals.

Both are pure math over a (traces × signals) matrix with NaN for missing signals, computed
with NumPy, and both can be updated trace by trace during a live session.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from .._errors import MetricInputError
from ..schema._results import MetricResult
from ._protocol import Score, SessionAccumulator, SessionMetric
from ._registry import register_metric

__all__ = [
    "COLUMNS",
    "DEFAULT_SIGNAL_WEIGHTS",
    "EXTRA_SIGNALS",
    "SIGNALS",
    "AgentConsistency",
    "AgentReliability",
    "IncrementalSession",
    "agent_consistency",
    "agent_reliability",
]

SIGNALS: tuple[str, ...] = ("confidence", "loop_detection", "tool_correctness", "coherence")
"""PandaProbe's signals: registry names of the trace metrics whose scores feed session metrics."""

EXTRA_SIGNALS: tuple[str, ...] = ("tool_call_loops", "run_completed", "tool_failures")
"""Three more signals, beyond PandaProbe's: ``tool_call_loops`` (loops inside one run; the loop
risk is the larger of its risk and loop_detection's), ``run_completed`` (0.0 for a run that
ended in error, was stopped, cancelled or hit a limit, so its risk is 1; absent for a run that
completed or paused for a human) and ``tool_failures`` (the deterministic tool-failure metric: its risk, weight 1.0,
lets failed tools lower a session's scores without a judge). With none present, results
equal PandaProbe's formulas exactly."""

COLUMNS: tuple[str, ...] = SIGNALS + EXTRA_SIGNALS

_RISK_KEYS = (
    "confidence_risk",
    "loop_risk",
    "tool_risk",
    "coherence_risk",
    "run_risk",
    "tool_failure_risk",
)

DEFAULT_SIGNAL_WEIGHTS: dict[str, float] = {
    "confidence": 1.0,
    "loop_detection": 1.0,
    "tool_correctness": 0.8,
    "coherence": 1.0,
    "run_completed": 1.0,
    "tool_failures": 1.0,
}
"""The loop weight applies to the loop risk, whichever of the two loop signals gives it."""

Matrix = npt.NDArray[np.float64]


def _matrix(trace_ids: Sequence[str], signals: Sequence[Mapping[str, float | None]]) -> Matrix:
    matrix = np.full((len(signals), len(COLUMNS)), np.nan)
    for row, mapping in enumerate(signals):
        for column, name in enumerate(COLUMNS):
            value = mapping.get(name)
            if value is not None:
                matrix[row, column] = float(value)
    return matrix


def _check_range(trace_ids: Sequence[str], matrix: Matrix) -> None:
    bad = (matrix < 0.0) | (matrix > 1.0)  # NaN, a missing signal, compares false
    if bad.any():
        row, column = (int(i) for i in np.argwhere(bad)[0])
        raise MetricInputError(
            f"signal {COLUMNS[column]!r} of trace {trace_ids[row]!r} is {float(matrix[row, column])!r}; "
            "signals must be scores in [0, 1] (use None for a missing signal)"
        )


def _round(values: npt.ArrayLike) -> Any:
    return np.round(np.asarray(values, dtype=np.float64), 4).tolist()


_RISK_COLUMNS = [0, 1, 2, 3, 5, 6]  # the loop risk takes column 4 (tool_call_loops) in too


def _risks(matrix: Matrix) -> Matrix:
    """(traces × COLUMNS) scores → (traces × 6) risks: PandaProbe's four, with the loop risk the
    larger of the two loop signals' (NaN only when both are missing), then the run's and the
    tool failures'."""
    risks = 1.0 - matrix[:, _RISK_COLUMNS]
    np.fmax(risks[:, 1], 1.0 - matrix[:, 4], out=risks[:, 1])  # fmax: NaN only if both are
    return risks


class _SignalSessionMetric(SessionMetric):
    signal_names: ClassVar[tuple[str, ...]] = COLUMNS

    def __init__(
        self,
        *,
        weights: Mapping[str, float] | None = None,
        per_trace_limit: int = 1000,
        threshold: float | None = None,
    ) -> None:
        super().__init__(threshold=threshold)
        merged = DEFAULT_SIGNAL_WEIGHTS | dict(weights or {})
        unknown = set(merged) - set(DEFAULT_SIGNAL_WEIGHTS)
        if unknown:
            raise MetricInputError(
                f"{self.name}: unknown signal weight(s) {sorted(unknown)}; "
                f"use {list(DEFAULT_SIGNAL_WEIGHTS)}"
            )
        if any(not math.isfinite(w) or w < 0 for w in merged.values()):
            raise MetricInputError(f"{self.name}: weights must be finite and >= 0, got {merged}")
        self.signal_weights = merged
        self.weights = np.array([merged[name] for name in DEFAULT_SIGNAL_WEIGHTS])
        self.per_trace_limit = per_trace_limit

    def compute_session(
        self, trace_ids: Sequence[str], signals: Sequence[Mapping[str, float | None]]
    ) -> Score:
        return self.score_matrix(trace_ids, _matrix(trace_ids, signals))

    def score_matrix(
        self, trace_ids: Sequence[str], matrix: Matrix, *, detail: bool = True
    ) -> Score:
        """Score a (traces × COLUMNS) matrix, or one of PandaProbe's four SIGNALS columns, with
        NaN for missing signals. ``detail=False`` leaves out the per-trace table (a running
        snapshot's score, reason and aggregates are the same).

        With nothing to evaluate the result is skipped (no score), where the seed gives 1.0:
        a pass over nothing would read as a healthy session."""
        if matrix.ndim == 2 and matrix.shape[1] == len(SIGNALS):  # PandaProbe's four columns
            matrix = np.column_stack([matrix, np.full((len(matrix), len(EXTRA_SIGNALS)), np.nan)])
        _check_range(trace_ids, matrix)
        if matrix.size == 0 or np.isnan(matrix).all():
            return _nothing(trace_ids, "no traces or signals to evaluate")
        return self._score(list(trace_ids), _risks(matrix), detail)

    def _score(self, trace_ids: list[str], risks: Matrix, detail: bool) -> Score:
        raise NotImplementedError

    def _add_per_trace(
        self,
        metadata: dict[str, Any],
        detail: bool,
        note: str,
        trace_ids: list[str],
        rows: npt.NDArray[np.intp],
        risks: Matrix,
        extra: dict[str, Matrix],
    ) -> None:
        """In a detailed result, ``per_trace_signals`` for at most ``per_trace_limit`` traces,
        riskiest first (and ``note`` when the table is cut)."""
        if not detail:
            return
        truncated = len(rows) > self.per_trace_limit
        if truncated:
            leading = next(iter(extra.values()))
            order = np.argsort(-leading, kind="stable")[: self.per_trace_limit]
            rows, risks = rows[order], risks[order]
            extra = {key: values[order] for key, values in extra.items()}
        # the shown rows rounded in one pass per array, then plain floats: per value, Python's
        # round and reading an array element each cost more than the rest of this table
        risk_rows: list[list[float]] = _round(risks)
        extra_rows = {key: _round(values) for key, values in extra.items()}
        table: dict[str, dict[str, float]] = {}
        for shown, row in enumerate(rows.tolist()):
            entry = {
                key: value
                for key, value in zip(_RISK_KEYS, risk_rows[shown], strict=True)
                if not math.isnan(value)
            }
            entry.update({key: values[shown] for key, values in extra_rows.items()})
            table[trace_ids[row]] = entry
        metadata["per_trace_signals"] = table
        if truncated:
            metadata["per_trace_signals_note"] = note

    def measure_matrix(
        self,
        trace_ids: Sequence[str],
        matrix: Matrix,
        *,
        session_id: str | None = None,
        detail: bool = True,
    ) -> MetricResult:
        """Like ``measure_session`` for a ready (traces × COLUMNS) matrix; never raises."""
        return self._guarded(
            lambda: self.score_matrix(trace_ids, matrix, detail=detail), session_id
        )

    def incremental(self) -> IncrementalSession:
        """A live form of this metric: feed signals as they arrive, read the score any time."""
        return IncrementalSession(self)

    def from_rows(
        self, signals: Sequence[Mapping[str, float | None]], trace_ids: Sequence[str] | None = None
    ) -> MetricResult:
        ids = (
            list(trace_ids)
            if trace_ids is not None
            else [f"trace-{i}" for i in range(len(signals))]
        )
        return self.measure_session(ids, signals)


def _nothing(trace_ids: Sequence[str], reason: str) -> Score:
    return Score.skip(
        f"not scored: {reason}", total_traces_in_session=len(trace_ids), traces_evaluated=0
    )


@register_metric
class AgentReliability(_SignalSessionMetric):
    """Worst-case risk across a session: per-trace max-composed risk, top-k tail blend."""

    name = "agent_reliability"

    def __init__(
        self,
        *,
        weights: Mapping[str, float] | None = None,
        top_k_percentile: float = 0.15,
        ensemble_weight: float = 0.1,
        flag_threshold: float = 0.5,
        per_trace_limit: int = 1000,
        threshold: float | None = None,
    ) -> None:
        super().__init__(weights=weights, per_trace_limit=per_trace_limit, threshold=threshold)
        if not 0.0 < top_k_percentile <= 1.0:
            raise MetricInputError(f"top_k_percentile must be in (0, 1], got {top_k_percentile}")
        if not 0.0 <= ensemble_weight <= 1.0:
            raise MetricInputError(f"ensemble_weight must be in [0, 1], got {ensemble_weight}")
        self.top_k_percentile = top_k_percentile
        self.ensemble_weight = ensemble_weight
        self.flag_threshold = flag_threshold

    def _score(self, trace_ids: list[str], risks: Matrix, detail: bool) -> Score:
        rows = np.flatnonzero(~np.isnan(risks).all(axis=1))
        risks = risks[rows]
        # the largest weighted risk of each trace; each row has one at least (fmax skips NaN)
        step_risk = np.fmax.reduce(risks * self.weights, axis=1)
        k = max(1, math.ceil(len(rows) * self.top_k_percentile))
        top = np.partition(step_risk, len(step_risk) - k)[len(step_risk) - k :]
        mean_top_k, max_risk = float(top.mean()), float(step_risk.max())
        raw_risk = (1.0 - self.ensemble_weight) * mean_top_k + self.ensemble_weight * max_risk
        flagged = [trace_ids[i] for i in rows[step_risk > self.flag_threshold].tolist()]
        metadata: dict[str, Any] = {
            "total_traces_in_session": len(trace_ids),
            "traces_evaluated": len(rows),
            "raw_risk": round(raw_risk, 4),
            "signal_weights": self.signal_weights,
            "flagged_traces": flagged,
            "aggregation": {
                "method": "max_compose_top_k",
                "top_k_percentile": self.top_k_percentile,
                "ensemble_weight": self.ensemble_weight,
                "top_k": k,
                "mean_top_k_risk": round(mean_top_k, 4),
                "max_risk": round(max_risk, 4),
            },
        }
        self._add_per_trace(
            metadata,
            detail,
            f"riskiest {self.per_trace_limit} traces shown",
            trace_ids,
            rows,
            risks,
            {"step_risk": step_risk},
        )
        reason = f"tail risk {raw_risk:.4f} over {len(rows)} traces; {len(flagged)} flagged"
        return Score(1.0 - raw_risk, reason, metadata)


@register_metric
class AgentConsistency(_SignalSessionMetric):
    """Stability across a session: RMS of confidence risk amplified by the other signals' risks."""

    name = "agent_consistency"

    def _score(self, trace_ids: list[str], risks: Matrix, detail: bool) -> Score:
        rows = np.flatnonzero(~np.isnan(risks[:, 0]))
        if len(rows) == 0:
            return _nothing(
                trace_ids,
                "no trace has a confidence signal to evaluate "
                "(the confidence metric gives it: score with a judge)",
            )
        risks = risks[rows]
        weighted = risks[:, 1:] * self.weights[1:]
        weighted[np.isnan(weighted)] = 0.0  # a missing signal adds no penalty
        penalty = weighted.sum(axis=1)
        uncertainty = (1.0 + penalty) * (self.weights[0] * risks[:, 0])
        rms = float(np.sqrt(np.mean(uncertainty**2)))
        metadata: dict[str, Any] = {
            "total_traces_in_session": len(trace_ids),
            "traces_evaluated": len(rows),
            "raw_instability": round(rms, 4),
            "signal_weights": self.signal_weights,
            "aggregation": {"method": "weighted_rms", "rms_value": round(rms, 4)},
        }
        self._add_per_trace(
            metadata,
            detail,
            f"{self.per_trace_limit} most uncertain traces shown",
            trace_ids,
            rows,
            risks,
            {"weighted_uncertainty": uncertainty, "situational_penalty": penalty},
        )
        return Score(1.0 - rms, f"RMS instability {rms:.4f} over {len(rows)} traces", metadata)


class IncrementalSession(SessionAccumulator):
    """Signals of one session, kept in a growing matrix; ``result()`` equals the batch score.

    ``update`` appends a trace or merges later signals (judge scores arrive after embedding
    scores) into its row; amortised O(1). ``result`` is one vectorised pass.
    """

    def __init__(self, metric: _SignalSessionMetric) -> None:
        super().__init__(metric)
        self._signal_metric = metric
        self._index: dict[str, int] = {}
        self._ids: list[str] = []
        self._matrix = np.full((16, len(COLUMNS)), np.nan)

    def __len__(self) -> int:
        return len(self._ids)

    def update(self, trace_id: str, signals: Mapping[str, float | None]) -> None:
        row = self._index.get(trace_id)
        if row is None:
            row = len(self._ids)
            if row == len(self._matrix):
                grown = np.full((2 * row, len(COLUMNS)), np.nan)
                grown[:row] = self._matrix
                self._matrix = grown
            self._index[trace_id] = row
            self._ids.append(trace_id)
        for column, name in enumerate(COLUMNS):
            value = signals.get(name)
            if value is not None:
                self._matrix[row, column] = float(value)

    def result(self, session_id: str | None = None) -> MetricResult:
        return self._measure(session_id, detail=True)

    def snapshot(self, session_id: str | None = None) -> MetricResult:
        return self._measure(session_id, detail=False)

    def _measure(self, session_id: str | None, *, detail: bool) -> MetricResult:
        return self._signal_metric.measure_matrix(
            self._ids, self._matrix[: len(self._ids)], session_id=session_id, detail=detail
        )


def agent_reliability(
    signals: Sequence[Mapping[str, float | None]],
    trace_ids: Sequence[str] | None = None,
    **options: Any,
) -> MetricResult:
    """PandaProbe's agent_reliability for one session's per-trace signals (one mapping per trace)."""
    return AgentReliability(**options).from_rows(signals, trace_ids)


def agent_consistency(
    signals: Sequence[Mapping[str, float | None]],
    trace_ids: Sequence[str] | None = None,
    **options: Any,
) -> MetricResult:
    """PandaProbe's agent_consistency for one session's per-trace signals (one mapping per trace)."""
    return AgentConsistency(**options).from_rows(signals, trace_ids)
