"""Metric results: every score says how it was made."""

from __future__ import annotations

import heapq
import math
from collections.abc import Hashable, Iterable, Sequence
from numbers import Real
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ._unvalidated import unvalidated

__all__ = [
    "REPEAT_OF",
    "RESULTS_VERSION",
    "SUCCESS_TOLERANCE",
    "MetricResult",
    "ResultsLine",
    "TraceResults",
    "failing",
    "flagged_traces",
    "passes",
    "repeats",
    "unvalidated_result",
]

SUCCESS_TOLERANCE = 1e-9
"""``success = score >= threshold`` is compared with this tolerance."""


def passes(score: float, threshold: float) -> bool:
    """True when ``score`` reaches ``threshold`` (inclusive, with a 1e-9 tolerance)."""
    return score >= threshold - SUCCESS_TOLERANCE


class MetricResult(BaseModel):
    """The outcome of one metric on one trace, case or session.

    ``score`` is in [0, 1] (higher is better) or ``None``; when it is ``None`` either ``skipped``
    is true (the metric did not apply, ``reason`` says why) or ``error`` says what went wrong.
    Aggregates leave ``None`` scores out and count them.
    """

    # bytes in metadata (a tool's raw argument) go to JSON as base64: never a failed write
    model_config = ConfigDict(extra="forbid", ser_json_bytes="base64")

    name: str
    """Registry name of the metric."""
    version: str
    """Version of the metric's definition (and of its prompts, for judge metrics)."""
    score: float | None
    threshold: float
    success: bool | None
    """``score >= threshold``; ``None`` when there is no score."""
    reason: str = ""
    metadata: dict[str, Any] = Field(default_factory=dict)
    error: str | None = None
    """Why no score could be produced (judge down, unparsable reply, invalid input)."""
    skipped: bool = False
    """The metric did not apply to this input (e.g. no expectation given, no judge configured)."""
    trace_id: str | None = None
    session_id: str | None = None
    case_id: str | None = None
    judge_model: str | None = None
    prompt_version: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost_usd: float | None = None
    latency_ms: float | None = None
    """Wall time spent producing this result (a metric that scores a batch at once gives
    each result an equal share of the batch's time)."""

    @field_validator("score", mode="before")
    @classmethod
    def _a_number(cls, value: Any) -> Any:
        # a results file may come from anywhere: true or "0.9" is never a score
        if value is not None and (isinstance(value, bool) or not isinstance(value, Real)):
            raise ValueError(f"a score is a number or null, not {type(value).__name__}")
        return value

    @property
    def status(self) -> Literal["ok", "skipped", "error"]:
        """``ok`` when scored, ``skipped`` when the metric did not apply, else ``error``."""
        if self.score is not None:
            return "ok"
        return "skipped" if self.skipped and self.error is None else "error"


_FIELDS = list(MetricResult.model_fields)
_FIELD_SET = set(_FIELDS)


def unvalidated_result(values: dict[str, Any]) -> MetricResult:
    """A :class:`MetricResult` holding ``values`` (every field, in field order, each of
    exactly the type validation keeps: what ``MetricResult(**values)`` would hold), without
    validating them.

    Every metric result of every trace is built, and validation costs about as much as the
    rest of a result; the one caller checks the values a metric supplies first, and a test
    checks that both ways give equal results."""
    if list(values) != _FIELDS:
        raise ValueError(f"a MetricResult's fields, in order, are {_FIELDS}")
    return unvalidated(MetricResult, values, _FIELD_SET.copy())


class TraceResults(BaseModel):
    """What the engine produced for one trace (or case)."""

    trace_id: str | None
    case_id: str | None = None
    session_id: str | None
    results: list[MetricResult]
    session_results: list[MetricResult] = Field(default_factory=list)
    """The session's metrics as they stand after this trace: scores, reasons and aggregates
    (agent_reliability and agent_consistency leave out ``per_trace_signals``, which the
    closed session's results carry)."""
    session_scores: dict[str, float | None] = Field(default_factory=dict)
    """The session metrics' scores after this trace, by name: those of ``session_results``,
    or these alone when the sinks read only the numbers (see
    :attr:`~agenteval_core.Sink.wants_session_scores`)."""

    def failing(self) -> list[MetricResult]:
        """Results that failed their threshold or ended in an error, in metric order."""
        return failing(self.results)

    @property
    def repeat(self) -> bool:
        """Whether these are the results of a repeat of a run read already (a capture line
        read twice): every result skipped, the trace's own results
        delivered before. A sink that sends traces on (an exporter) skips it."""
        return repeats(self.results)


def failing(results: Iterable[MetricResult]) -> list[MetricResult]:
    """The results that failed their threshold or ended in an error, in their order."""
    return [r for r in results if r.status == "error" or (r.score is not None and not r.success)]


REPEAT_OF = "repeat_of"
"""The metadata key of the skipped results a repeat of a trace gets (a capture line read
twice in its session): the id of the trace it repeats, whose own results hold."""


def repeats(results: Sequence[MetricResult]) -> bool:
    """Whether a trace's results are those of a repeat of a trace already scored (every
    result skipped with :data:`REPEAT_OF`): its first line's results are the trace's."""
    return bool(results) and all(REPEAT_OF in r.metadata and r.skipped for r in results)


def flagged_traces(results: Iterable[MetricResult]) -> list[str]:
    """The traces session metrics flagged (their ``metadata["flagged_traces"]``), each once,
    in order. A value of the wrong type (a file from elsewhere) flags nothing."""
    flagged: dict[str, None] = {}
    for result in results:
        listed = result.metadata.get("flagged_traces")
        if isinstance(listed, list):
            flagged.update((trace_id, None) for trace_id in listed if isinstance(trace_id, str))
    return list(flagged)


def lowest_score(results: Iterable[MetricResult]) -> float:
    """A session's lowest score, what ranks the sessions that need a look first; infinity
    when none of its metrics scored it (it ranks last)."""
    return min((r.score for r in results if r.score is not None), default=math.inf)


_Key = TypeVar("_Key", bound=Hashable)


class LowestKept(Generic[_Key]):
    """At most ``size`` keys: those offered with the lowest ranks, of equal ranks the first
    offered. What keeps the sessions that need a look (:func:`lowest_score`) from a replay
    or a results file of any size in flat memory."""

    def __init__(self, size: int) -> None:
        self.size = size
        # (-rank, -order, key): the first is the one to give up first; an entry whose
        # order is not its key's (a key discarded, or offered again) is stale
        self._heap: list[tuple[float, int, _Key]] = []
        self._order: dict[_Key, int] = {}
        self._offered = 0

    def offer(self, key: _Key, rank: float) -> tuple[bool, _Key | None]:
        """Offer ``key`` (not kept now): whether it is kept, and the key given up for it."""
        order, self._offered = self._offered, self._offered + 1
        given_up = None
        if len(self._order) >= self.size:
            heap = self._heap
            while heap and self._order.get(heap[0][2]) != -heap[0][1]:
                heapq.heappop(heap)
            if not heap or -heap[0][0] <= rank:
                return False, None
            given_up = heapq.heappop(heap)[2]
            del self._order[given_up]
        self._order[key] = order
        heapq.heappush(self._heap, (-rank, -order, key))
        return True, given_up

    def discard(self, key: _Key) -> None:
        """Stop keeping ``key``."""
        self._order.pop(key, None)

    def lowest_first(self) -> list[_Key]:
        """The keys kept, the lowest rank first (of equal ranks, the first offered)."""
        live = [item for item in self._heap if self._order.get(item[2]) == -item[1]]
        return [key for *_, key in sorted(live, reverse=True)]


RESULTS_VERSION = 1
"""Version of the results file's lines; a reader refuses lines of a newer version."""


class ResultsLine(BaseModel):
    """One line of a results file (``agenteval replay --json``, an online evaluator's
    ``results_path``), the one model its writers and readers share: a scored trace's
    results (``trace_id``, ``results``, its session's ``session_scores`` after it), a
    closed session's (``session_id``, ``session_results``), or a captured trace that was
    not scored (``trace_id``, ``unscored``: why). Lines written before the version field
    read as version 1."""

    model_config = ConfigDict(extra="forbid")

    results_version: int = RESULTS_VERSION
    trace_id: str | None = None
    session_id: str | None = None
    status: str | None = None
    """How the trace's run ended (a ``RunStatus`` value), where known."""
    results: list[MetricResult] | None = None
    session_scores: dict[str, float | None] | None = None
    """The session's scores as they stood after this trace (scores only: the full results
    grow with the session, and would make the file quadratic)."""
    session_results: list[MetricResult] | None = None
    unscored: str | None = None

    @field_validator("results_version")
    @classmethod
    def _known_version(cls, value: int) -> int:
        from ._trace import known_version

        return known_version(value, RESULTS_VERSION, "results_version")
