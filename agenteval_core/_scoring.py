"""The scoring engine shared by replay and the online evaluator.

It scores a stream of traces: trace metrics see the session's recent history, and each
session's metrics are updated incrementally from the signals the trace metrics produce.
Traces without a ``session_id`` are scored alone: no history, no session metrics.
"""

from __future__ import annotations

import asyncio
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

from ._metric import Metric, MetricKind, SessionAccumulator, SessionMetric
from ._results import MetricResult
from ._schema import EvalCase, Trace, text_of

__all__ = ["MetricSummary", "ResultSummary", "SessionHistory", "SessionScorer"]


class SessionHistory(Sequence[Trace]):
    """The earlier traces of one session, as metrics with ``uses_history`` see them.

    Indexes run over every trace seen, so a metric reports real positions, but only the last
    ``keep`` traces with a non-empty output are retained, which keeps memory flat over long
    sessions. Other positions read as empty traces.
    """

    _EMPTY = Trace(id="", output=None)

    def __init__(self, keep: int) -> None:
        self._kept: deque[tuple[int, Trace]] = deque(maxlen=max(keep, 1))
        self._count = 0

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> Trace: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Trace]: ...
    def __getitem__(self, index: int | slice) -> Trace | Sequence[Trace]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._count))]
        if index < 0:
            index += self._count
        if not 0 <= index < self._count:
            raise IndexError(index)
        for position, trace in self._kept:
            if position == index:
                return trace
        return self._EMPTY

    def __iter__(self) -> Iterator[Trace]:
        return (self[i] for i in range(self._count))

    def append(self, trace: Trace) -> None:
        if text_of(trace.output).strip():
            self._kept.append((self._count, trace))
        self._count += 1


@dataclass
class _SessionState:
    history: SessionHistory
    accumulators: dict[str, SessionAccumulator]


class SessionScorer:
    """Scores traces one at a time, keeping per-session history and session metrics.

    At most ``max_open_sessions`` sessions are kept; when a new one would exceed that, the
    least recently active session is closed: its final session results go to
    ``on_session_closed`` and its state is dropped, so memory stays flat however long the
    stream. A later trace of a closed session starts it afresh (counted in ``reopened``).
    """

    def __init__(
        self,
        metrics: Sequence[Metric],
        session_metrics: Sequence[SessionMetric] = (),
        *,
        history_window: int | None = None,
        max_open_sessions: int = 1024,
        on_session_closed: Callable[[str, list[MetricResult]], None] | None = None,
    ) -> None:
        self.metrics = list(metrics)
        # Metrics that wait on I/O run concurrently; the others are cheaper called inline.
        self._waiting = [m for m in self.metrics if m.kind is MetricKind.JUDGE]
        self.session_metrics = list(session_metrics)
        windows = [int(getattr(m, "window", 3)) for m in self.metrics if m.uses_history]
        self.history_window = (
            history_window if history_window is not None else max(windows, default=0)
        )
        self.max_open_sessions = max_open_sessions
        self.on_session_closed = on_session_closed
        self.reopened = 0
        self._sessions: OrderedDict[str, _SessionState] = OrderedDict()
        self._closed: set[str] = set()

    def _state(self, session_id: str) -> _SessionState:
        state = self._sessions.get(session_id)
        if state is not None:
            self._sessions.move_to_end(session_id)
            return state
        if session_id in self._closed:
            self.reopened += 1
            self._closed.discard(session_id)
        while len(self._sessions) >= self.max_open_sessions:
            self.close_session(next(iter(self._sessions)))
        state = _SessionState(
            SessionHistory(self.history_window),
            {m.name: m.incremental() for m in self.session_metrics},
        )
        self._sessions[session_id] = state
        return state

    def close_session(self, session_id: str) -> list[MetricResult]:
        """Finish a session: return (and pass to ``on_session_closed``) its final results."""
        results = self.session_results(session_id)
        if self._sessions.pop(session_id, None) is not None:
            self._closed.add(session_id)
            if self.on_session_closed is not None:
                self.on_session_closed(session_id, results)
        return results

    def close_all(self) -> None:
        """Close every open session, least recently active first."""
        for session_id in list(self._sessions):
            self.close_session(session_id)

    async def score_case(
        self, case: EvalCase, *, skip: Collection[Metric] = ()
    ) -> list[MetricResult]:
        """Run every trace metric (but those in ``skip``) on a case, then update its session.
        Never raises."""
        trace = case.trace
        state = self._state(trace.session_id) if trace is not None and trace.session_id else None
        history: Sequence[Trace] = state.history if state is not None else ()
        waiting = [m for m in self._waiting if m not in skip]
        waited = await asyncio.gather(*(m.ameasure(case, history=history) for m in waiting))
        by_metric = dict(zip(waiting, waited, strict=True))
        results = [
            by_metric[m] if m in by_metric else m.measure(case, history=history)
            for m in self.metrics
            if m not in skip
        ]
        if state is not None and trace is not None:
            self.add_signals(trace, results)
            state.history.append(trace)
        return results

    async def score_trace(
        self, trace: Trace, *, skip: Collection[Metric] = ()
    ) -> list[MetricResult]:
        """Score a captured trace (no expectations beyond what the trace holds)."""
        return await self.score_case(EvalCase.from_trace(trace), skip=skip)

    async def score_batch(self, cases: Sequence[EvalCase]) -> list[list[MetricResult]]:
        """Score cases in order, letting metrics batch their costly work first."""
        for metric in self.metrics:
            metric.prepare(cases)
        return [await self.score_case(case) for case in cases]

    def add_signals(self, trace: Trace, results: Sequence[MetricResult]) -> None:
        """Feed a trace's scores to its session's metrics (e.g. judge scores arriving later)."""
        if not trace.session_id or not self.session_metrics:
            return
        state = self._state(trace.session_id)
        scores = {r.name: r.score for r in results if r.score is not None}
        for metric in self.session_metrics:
            signals = {name: scores[name] for name in metric.signal_names if name in scores}
            state.accumulators[metric.name].update(trace.id, signals)

    def session_results(self, session_id: str) -> list[MetricResult]:
        """The session metrics of one session as they stand now."""
        state = self._sessions.get(session_id)
        if state is None:
            return []
        return [acc.result(session_id) for acc in state.accumulators.values()]

    def sessions(self) -> list[str]:
        """Ids of the open sessions, least recently active first."""
        return list(self._sessions)


@dataclass
class MetricSummary:
    """Aggregate of one metric's results: None scores are left out of the mean and counted."""

    name: str
    count: int = 0
    scored: int = 0
    total: float = 0.0
    passed: int = 0
    errors: int = 0
    skipped: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    reasons: Counter[str] = field(default_factory=Counter)

    @property
    def mean(self) -> float | None:
        return self.total / self.scored if self.scored else None

    @property
    def pass_rate(self) -> float | None:
        return self.passed / self.scored if self.scored else None

    def add(self, result: MetricResult) -> None:
        self.count += 1
        self.input_tokens += result.input_tokens or 0
        self.output_tokens += result.output_tokens or 0
        self.cost_usd += result.cost_usd or 0.0
        if result.score is not None:
            self.scored += 1
            self.total += result.score
            self.passed += bool(result.success)
        elif result.status == "skipped":
            self.skipped += 1
            self.reasons[result.reason] += 1
        else:
            self.errors += 1
            self.reasons[result.error or "error"] += 1

    def as_dict(self) -> dict[str, Any]:
        return {
            "metric": self.name,
            "count": self.count,
            "scored": self.scored,
            "mean": self.mean,
            "pass_rate": self.pass_rate,
            "errors": self.errors,
            "skipped": self.skipped,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost_usd": self.cost_usd,
            "top_reasons": dict(self.reasons.most_common(3)),
        }


class ResultSummary:
    """Per-metric aggregates over a run, in the order metrics were first seen."""

    def __init__(self) -> None:
        self.metrics: dict[str, MetricSummary] = {}

    def add(self, results: Sequence[MetricResult]) -> None:
        for result in results:
            summary = self.metrics.get(result.name)
            if summary is None:
                summary = self.metrics[result.name] = MetricSummary(result.name)
            summary.add(result)

    def as_dicts(self) -> list[dict[str, Any]]:
        return [summary.as_dict() for summary in self.metrics.values()]
