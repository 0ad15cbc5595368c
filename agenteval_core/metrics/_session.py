"""Session metrics (PandaProbe's definitions): agent_reliability and agent_consistency over per-trace signals.

Both are pure math over a (traces × signals) matrix with NaN for missing signals, computed
with NumPy, and both can be updated trace by trace during a live session.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Protocol

import numpy as np
import numpy.typing as npt

from .._errors import MetricInputError
from ..schema._results import MetricResult
from ._protocol import Score, SessionAccumulator, SessionMetric, bounded
from ._registry import register_metric
from ._running import LargestShare, SumOfSquares, top_count

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


def _row_risks(row: Sequence[float]) -> list[float]:
    """:func:`_risks` of one trace's row of scores, as Python floats (the same values)."""
    risks = [1.0 - row[column] for column in _RISK_COLUMNS]
    loop = 1.0 - row[4]
    if math.isnan(risks[1]) or loop > risks[1]:
        risks[1] = loop
    return risks


def _mean_of_largest(values: list[float], k: int) -> float:
    """The mean of the ``k`` largest ``values`` (their sum correctly rounded)."""
    if len(values) > 256:  # a long session: NumPy's selection beats sorting a list
        top = np.partition(np.asarray(values), len(values) - k)[len(values) - k :].tolist()
    else:
        top = sorted(values)[len(values) - k :]
    return math.fsum(top) / k


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
        self.weight_list = [merged[name] for name in DEFAULT_SIGNAL_WEIGHTS]
        self.weights = np.array(self.weight_list)
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
        trace_ids = list(trace_ids)
        risks = _risks(matrix)
        rows, values = self._trace_values(risks)
        score = self._summary(trace_ids, rows.tolist(), [column.tolist() for column in values])
        if detail and score.value is not None:
            self._add_per_trace(score.metadata, trace_ids, rows, risks[rows], values)
        return score

    value_names: ClassVar[tuple[str, ...]]
    """What the metric derives from each trace's risks (the first orders the per-trace table)."""

    def _trace_values(self, risks: Matrix) -> tuple[npt.NDArray[np.intp], list[Matrix]]:
        """The traces the metric evaluates (row numbers) and, for each, its ``value_names``:
        one array per name, over all traces at once."""
        raise NotImplementedError

    def _row_values(self, risks: list[float]) -> tuple[float, ...] | None:
        """:meth:`_trace_values` of one trace (the same floats), or ``None`` when the metric
        does not evaluate it: what a running session keeps per trace."""
        raise NotImplementedError

    def _summary(self, trace_ids: list[str], rows: list[int], values: list[list[float]]) -> Score:
        """The score, reason and aggregates from the evaluated traces' values (no per-trace
        table), in one pass over them."""
        raise NotImplementedError

    def _running(self) -> RunningRisk:
        """What a running session keeps of its evaluated traces' values to give, after every
        trace, the risk and the summary :meth:`_summary` would, without a pass over them."""
        raise NotImplementedError

    per_trace_note: ClassVar[str]
    """What a cut per-trace table says it shows (``{limit}``: ``per_trace_limit``)."""

    def _add_per_trace(
        self,
        metadata: dict[str, Any],
        trace_ids: list[str],
        rows: npt.NDArray[np.intp],
        risks: Matrix,
        values: list[Matrix],
    ) -> None:
        """``per_trace_signals`` for at most ``per_trace_limit`` traces, riskiest first (and
        a note when the table is cut)."""
        truncated = len(rows) > self.per_trace_limit
        if truncated:
            order = np.argsort(-values[0], kind="stable")[: self.per_trace_limit]
            rows, risks = rows[order], risks[order]
            values = [column[order] for column in values]
        # the shown rows rounded in one pass per array, then plain floats: per value, Python's
        # round and reading an array element each cost more than the rest of this table
        risk_rows: list[list[float]] = _round(risks)
        extra_rows = {
            key: _round(column) for key, column in zip(self.value_names, values, strict=True)
        }
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
            metadata["per_trace_signals_note"] = self.per_trace_note.format(
                limit=self.per_trace_limit
            )

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

    value_names = ("step_risk",)
    per_trace_note = "riskiest {limit} traces shown"

    def _trace_values(self, risks: Matrix) -> tuple[npt.NDArray[np.intp], list[Matrix]]:
        rows = np.flatnonzero(~np.isnan(risks).all(axis=1))
        # the largest weighted risk of each trace; each row has one at least (fmax skips NaN)
        return rows, [np.fmax.reduce(risks[rows] * self.weights, axis=1)]

    def _row_values(self, risks: list[float]) -> tuple[float, ...] | None:
        weighted = [
            risk * weight
            for risk, weight in zip(risks, self.weight_list, strict=True)
            if not math.isnan(risk)
        ]
        return (max(weighted),) if weighted else None

    def _tail(self, step_risk: list[float]) -> tuple[int, float, float, float]:
        """k, the mean of the k largest step risks, the largest, and their blend (the risk)."""
        k = top_count(len(step_risk), self.top_k_percentile)
        return self._blend(k, _mean_of_largest(step_risk, k), max(step_risk))

    def _blend(self, k: int, mean_top_k: float, max_risk: float) -> tuple[int, float, float, float]:
        """:meth:`_tail` from its parts, however they were found (a running session's too)."""
        raw_risk = (1.0 - self.ensemble_weight) * mean_top_k + self.ensemble_weight * max_risk
        return k, mean_top_k, max_risk, raw_risk

    def _running(self) -> RunningRisk:
        return _RunningTail(self)

    def _summary(self, trace_ids: list[str], rows: list[int], values: list[list[float]]) -> Score:
        (step_risk,) = values
        flagged = [
            trace_ids[row]
            for row, risk in zip(rows, step_risk, strict=True)
            if risk > self.flag_threshold
        ]
        return self._scored(trace_ids, len(rows), self._tail(step_risk), flagged)

    def _scored(
        self,
        trace_ids: list[str],
        evaluated: int,
        tail: tuple[int, float, float, float],
        flagged: list[str],
    ) -> Score:
        """The score, reason and aggregates from the session's tail (:meth:`_tail`) and the
        traces it flags, in order."""
        k, mean_top_k, max_risk, raw_risk = tail
        metadata: dict[str, Any] = {
            "total_traces_in_session": len(trace_ids),
            "traces_evaluated": evaluated,
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
        reason = f"tail risk {raw_risk:.4f} over {evaluated} traces; {len(flagged)} flagged"
        return Score(1.0 - raw_risk, reason, metadata)


@register_metric
class AgentConsistency(_SignalSessionMetric):
    """Stability across a session: RMS of confidence risk amplified by the other signals' risks."""

    name = "agent_consistency"

    value_names = ("weighted_uncertainty", "situational_penalty")
    per_trace_note = "{limit} most uncertain traces shown"

    def _trace_values(self, risks: Matrix) -> tuple[npt.NDArray[np.intp], list[Matrix]]:
        rows = np.flatnonzero(~np.isnan(risks[:, 0]))
        risks = risks[rows]
        weighted = risks[:, 1:] * self.weights[1:]
        weighted[np.isnan(weighted)] = 0.0  # a missing signal adds no penalty
        # added column by column, left to right: the order one trace's row is added in
        penalty = np.zeros(len(rows))
        for column in weighted.T:
            penalty += column
        return rows, [(1.0 + penalty) * (self.weights[0] * risks[:, 0]), penalty]

    def _row_values(self, risks: list[float]) -> tuple[float, ...] | None:
        if math.isnan(risks[0]):
            return None
        penalty = 0.0
        for risk, weight in zip(risks[1:], self.weight_list[1:], strict=True):
            if not math.isnan(risk):
                penalty += risk * weight
        return (1.0 + penalty) * (self.weight_list[0] * risks[0]), penalty

    @staticmethod
    def _rms(uncertainty: list[float]) -> float:
        return math.sqrt(math.fsum([value * value for value in uncertainty]) / len(uncertainty))

    def _running(self) -> RunningRisk:
        return _RunningRms(self)

    def _summary(self, trace_ids: list[str], rows: list[int], values: list[list[float]]) -> Score:
        return self._scored(trace_ids, len(rows), self._rms(values[0]) if rows else None)

    def _scored(self, trace_ids: list[str], evaluated: int, rms: float | None) -> Score:
        """The score, reason and aggregates from the RMS of the ``evaluated`` traces'
        uncertainties (``None``: no trace has a confidence signal)."""
        if rms is None:
            return _nothing(
                trace_ids,
                "no trace has a confidence signal to evaluate "
                "(the confidence metric gives it: score with a judge)",
            )
        metadata: dict[str, Any] = {
            "total_traces_in_session": len(trace_ids),
            "traces_evaluated": evaluated,
            "raw_instability": round(rms, 4),
            "signal_weights": self.signal_weights,
            "aggregation": {"method": "weighted_rms", "rms_value": round(rms, 4)},
        }
        return Score(1.0 - rms, f"RMS instability {rms:.4f} over {evaluated} traces", metadata)


class RunningRisk(Protocol):
    """A session metric's risk and summary, kept as its evaluated traces' values (each
    trace's, by its row) come, change and go."""

    def add(self, row: int, trace_id: str, values: tuple[float, ...]) -> None: ...
    def remove(self, row: int, trace_id: str, values: tuple[float, ...]) -> None: ...
    def risk(self) -> float | None:
        """The risk over the values held (``None``: none held)."""
        ...

    def summary(self, trace_ids: list[str]) -> Score:
        """:meth:`_SignalSessionMetric._summary` of the values held (some are)."""
        ...


class _RunningTail:
    """agent_reliability's tail risk over the step risks held, and the traces it flags."""

    def __init__(self, metric: AgentReliability) -> None:
        self.metric = metric
        self.step_risks = LargestShare(metric.top_k_percentile)
        self.flagged_rows: list[int] = []  # in order, and their trace ids beside them
        self.flagged_ids: list[str] = []

    def add(self, row: int, trace_id: str, values: tuple[float, ...]) -> None:
        self.step_risks.add(values[0])
        if values[0] > self.metric.flag_threshold:
            at = bisect.bisect_left(self.flagged_rows, row)
            self.flagged_rows.insert(at, row)
            self.flagged_ids.insert(at, trace_id)

    def remove(self, row: int, trace_id: str, values: tuple[float, ...]) -> None:
        self.step_risks.remove(values[0])
        if values[0] > self.metric.flag_threshold:
            at = bisect.bisect_left(self.flagged_rows, row)
            del self.flagged_rows[at], self.flagged_ids[at]

    def tail(self) -> tuple[int, float, float, float]:
        k = self.step_risks.top_count()
        return self.metric._blend(k, self.step_risks.top_sum() / k, self.step_risks.largest())

    def risk(self) -> float | None:
        return self.tail()[3] if len(self.step_risks) else None

    def summary(self, trace_ids: list[str]) -> Score:
        flagged = self.flagged_ids.copy()  # the summary's own: this list changes
        return self.metric._scored(trace_ids, len(self.step_risks), self.tail(), flagged)


class _RunningRms:
    """agent_consistency's RMS over the weighted uncertainties held."""

    def __init__(self, metric: AgentConsistency) -> None:
        self.metric = metric
        self.squares = SumOfSquares()

    def add(self, row: int, trace_id: str, values: tuple[float, ...]) -> None:
        self.squares.add(values[0])

    def remove(self, row: int, trace_id: str, values: tuple[float, ...]) -> None:
        self.squares.remove(values[0])

    def risk(self) -> float | None:
        count = self.squares.count
        return math.sqrt(self.squares.total() / count) if count else None

    def summary(self, trace_ids: list[str]) -> Score:
        return self.metric._scored(trace_ids, self.squares.count, self.risk())


class IncrementalSession(SessionAccumulator):
    """Signals of one session, kept in a growing matrix; ``result()`` equals the batch score.

    ``update`` appends a trace or merges later signals (judge scores arrive after embedding
    scores) into its row: amortised O(1). ``result`` is one vectorised pass. ``snapshot``,
    asked after every trace for a running view, derives the values of the traces updated
    since the last one (their step risk, their uncertainty) into the metric's running form
    (O(log n) each): the same score, reason and aggregates as ``result``, without the
    per-trace table, read without a pass over the session.
    """

    def __init__(self, metric: _SignalSessionMetric) -> None:
        super().__init__(metric)
        self._signal_metric = metric
        self._index: dict[str, int] = {}
        self._ids: list[str] = []
        self._matrix = np.full((16, len(COLUMNS)), np.nan)
        self._updated: list[int] = []  # rows whose values the next snapshot derives
        self._values: dict[int, tuple[float, ...]] = {}  # of the evaluated traces, by row
        self._signalled: set[int] = set()  # rows with any signal at all
        self._running = metric._running()
        # a signal out of range was given: snapshots take the batch path, which reports it
        self._out_of_range = False

    def __len__(self) -> int:
        return len(self._ids)

    def update(self, trace_id: str, signals: Mapping[str, float | None]) -> None:
        """Record a trace's signals: a new trace adds a row; a trace seen already (a
        later metric's score of it) has the signals given set on its row, those given as
        ``None`` left as they were."""
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
        if not self._updated or self._updated[-1] != row:
            self._updated.append(row)

    def result(self, session_id: str | None = None) -> MetricResult:
        """The session metric's result over the rows so far."""
        return self._signal_metric.measure_matrix(
            self._ids, self._matrix[: len(self._ids)], session_id=session_id
        )

    def snapshot(self, session_id: str | None = None) -> MetricResult:
        self._derive_updated()
        if self._out_of_range:
            return self._signal_metric.measure_matrix(
                self._ids, self._matrix[: len(self._ids)], session_id=session_id, detail=False
            )
        return self._signal_metric._guarded(self._snapshot_score, session_id)

    def score(self) -> float | None:
        """``snapshot().score``, from the kept values alone (no reason, aggregates or
        result): what the results file records after each trace."""
        self._derive_updated()
        if self._out_of_range:  # the batch path says whether a bad signal is still there
            return self.snapshot().score
        risk = self._running.risk() if self._signalled else None
        return None if risk is None else bounded(1.0 - risk)

    def _derive_updated(self) -> None:
        for row in self._updated:
            self._derive(row)
        self._updated.clear()

    def _snapshot_score(self) -> Score:
        if not self._signalled:
            return _nothing(self._ids, "no traces or signals to evaluate")
        return self._running.summary(self._ids)

    def _derive(self, row: int) -> None:
        """Derive ``row``'s values: its earlier ones, if any, leave the running form, and its
        new ones, if it is evaluated, join it."""
        scores = self._matrix[row].tolist()
        present = [score for score in scores if not math.isnan(score)]
        if present:
            self._signalled.add(row)
        else:  # a signal given as NaN is no signal
            self._signalled.discard(row)
        if any(not 0.0 <= score <= 1.0 for score in present):
            self._out_of_range = True
        values = self._signal_metric._row_values(_row_risks(scores))
        earlier = self._values.pop(row, None)
        if earlier is not None:
            self._running.remove(row, self._ids[row], earlier)
        if values is not None:
            self._values[row] = values
            self._running.add(row, self._ids[row], values)


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
