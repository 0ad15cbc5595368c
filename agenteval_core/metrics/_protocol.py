"""The metric protocol and how a metric's result is built.

A trace-level metric subclasses :class:`Metric` and implements ``compute`` (or, for metrics
that wait on I/O such as judges, ``acompute``). A session-level metric subclasses
:class:`SessionMetric`. Both register under a unique name (``_registry.py``).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from abc import ABC
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar

from .._errors import ErrorKind, JudgeError, MetricInputError
from .._sync import run_sync
from ..schema._results import MetricResult, passes, unvalidated_result
from ..schema._trace import EvalCase, RunStatus, Trace

__all__ = ["Metric", "MetricBase", "MetricKind", "Score", "SessionAccumulator", "SessionMetric"]

logger = logging.getLogger("agenteval")


class MetricKind(StrEnum):
    """How a metric scores, which decides where and when it runs."""

    DETERMINISTIC = "deterministic"
    EMBEDDING = "embedding"
    JUDGE = "judge"
    SESSION = "session"


@dataclass
class Score:
    """What a metric's computation returns; the base class turns it into a ``MetricResult``.

    ``value=None`` with ``skipped=True`` means the metric did not apply (``reason`` says why);
    ``value=None`` with ``error`` set means it failed.
    """

    value: float | None
    reason: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    skipped: bool = False
    error: str | None = None
    judge_model: str | None = None
    prompt_version: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost_usd: float | None = None

    @classmethod
    def skip(cls, reason: str, **metadata: Any) -> Score:
        """A result for input the metric does not apply to."""
        return cls(value=None, reason=reason, skipped=True, metadata=metadata)

    @classmethod
    def failure(
        cls, error: str, *, error_kind: ErrorKind = ErrorKind.METRIC_ERROR, **metadata: Any
    ) -> Score:
        """A result for a metric that could not produce a score; ``error_kind`` says why in a
        word (``metadata["error_kind"]``: what summaries count and the command line's exit
        status follows)."""
        return cls(value=None, error=error, metadata={"error_kind": error_kind, **metadata})

    @classmethod
    def from_exception(cls, exc: BaseException) -> Score:
        """The failure a metric that raised ``exc`` gives: invalid input for a
        ``MetricInputError``, a judge's or remote embedder's failure by its kind (its text
        begins with the kind's label), else a metric error (logged with its traceback: a
        bug)."""
        if isinstance(exc, MetricInputError):
            return cls.failure(f"invalid input: {exc}", error_kind=ErrorKind.INVALID_INPUT)
        if isinstance(exc, JudgeError):
            message = str(exc)  # a budget's own message begins with its label
            labelled = message.startswith(f"{exc.label}:")
            return cls.failure(
                message if labelled else f"{exc.label}: {message}", error_kind=exc.kind
            )
        logger.warning("metric raised %s: %s", type(exc).__name__, exc, exc_info=exc)
        return cls.failure(f"{type(exc).__name__}: {exc}", error_kind=ErrorKind.METRIC_ERROR)


class MetricBase(ABC):
    name: ClassVar[str]
    """Registry name."""
    version: ClassVar[str] = "1"
    kind: ClassVar[MetricKind]
    default_threshold: ClassVar[float] = 0.5

    def __init__(self, *, threshold: float | None = None) -> None:
        threshold = self.default_threshold if threshold is None else float(threshold)
        if not (0.0 <= threshold <= 1.0) or math.isnan(threshold):
            raise MetricInputError(f"{self.name}: threshold must be in [0, 1], got {threshold}")
        self.threshold = threshold

    def __repr__(self) -> str:
        return f"{type(self).__name__}(threshold={self.threshold})"

    def _result(
        self,
        score: Score,
        latency_ms: float,
        *,
        trace_id: str | None = None,
        session_id: str | None = None,
        case_id: str | None = None,
    ) -> MetricResult:
        value = score.value
        if value is not None:
            value = bounded(value)
            if value is None:
                score = Score.failure(f"metric produced a non-finite score {score.value!r}")
        name, version, metadata = self.name, self.version, score.metadata
        reason = score.reason or (score.error or "")
        values: dict[str, Any] = {
            "name": name,
            "version": version,
            "score": value,
            "threshold": self.threshold,
            "success": None if value is None else passes(value, self.threshold),
            "reason": reason,
            "metadata": metadata,
            "error": score.error,
            "skipped": score.skipped,
            "trace_id": trace_id,
            "session_id": session_id,
            "case_id": case_id,
            "judge_model": score.judge_model,
            "prompt_version": score.prompt_version,
            "input_tokens": score.input_tokens,
            "output_tokens": score.output_tokens,
            "cost_usd": score.cost_usd,
            "latency_ms": latency_ms,
        }
        # What a metric supplies (and the ids), each of exactly a type its field keeps as it
        # is (a bool is no int, a str subclass is converted), and metadata a dict with string
        # keys: validation would change nothing. Written out, not looped over: every metric
        # result of every trace passes here. The other values are numbers made floats above.
        if (
            type(name) is str
            and type(version) is str
            and type(reason) is str
            and type(score.skipped) is bool
            and type(score.error) in _OPTIONAL_TEXT
            and type(score.judge_model) in _OPTIONAL_TEXT
            and type(score.prompt_version) in _OPTIONAL_TEXT
            and type(score.input_tokens) in _OPTIONAL_INT
            and type(score.output_tokens) in _OPTIONAL_INT
            and type(score.cost_usd) in _OPTIONAL_FLOAT
            and type(trace_id) in _OPTIONAL_TEXT
            and type(session_id) in _OPTIONAL_TEXT
            and type(case_id) in _OPTIONAL_TEXT
            and type(metadata) is dict
            and set(map(type, metadata)) <= _TEXT
        ):
            values["metadata"] = metadata.copy()  # a result owns its metadata
            return unvalidated_result(values)
        return MetricResult(**values)  # raises as validation does, or converts


def no_trace_to_check() -> Score:
    """The failure of a metric that checks a run's tool calls, given a case without a trace
    (in a suite: an agent function that returned only its answer)."""
    return Score.failure(
        "invalid input: the case has no trace whose tool calls to check (a suite's agent "
        "function returns the Trace an adapter captured of its run, not only its answer)",
        error_kind=ErrorKind.INVALID_INPUT,
    )


def no_calls_to_score(trace: Trace) -> Score:
    """The skip of a metric that checks a run's tool calls, for a run that made none and did
    not complete (it failed, or paused for a human before it called a tool): its tools did
    nothing to pass on."""
    status = trace.status or RunStatus.ERROR
    return Score.skip(f"no tool calls in a run that did not complete ({status})")


def bounded(value: float) -> float | None:
    """A computed score as a result holds it: clamped to [0, 1]; ``None`` when not finite
    (the result is then a failure)."""
    return min(1.0, max(0.0, float(value))) if math.isfinite(value) else None


_TEXT = frozenset({str})
_OPTIONAL_TEXT = frozenset({str, type(None)})
_OPTIONAL_INT = frozenset({int, type(None)})
_OPTIONAL_FLOAT = frozenset({float, type(None)})


class Metric(MetricBase):
    """A trace-level metric.

    Subclasses implement ``compute`` (CPU-bound metrics) or ``acompute`` (metrics that wait on
    I/O); the other one is derived. ``history`` holds the earlier traces of the same session,
    oldest first, for metrics that compare a trace with what came before (``loop_detection``).
    ``measure`` and ``ameasure`` never raise: failures come back as results with ``error`` set.
    """

    uses_history: ClassVar[bool] = False
    """True when the metric needs the session's earlier traces."""
    history_fields: ClassVar[frozenset[str] | None] = None
    """The :class:`Trace` fields the metric reads from earlier traces, when it reads only a
    few (``None``: whole traces). When every metric that uses history names its fields, the
    engine keeps only those of each open session's traces (and ``id`` and ``session_id``):
    a replay holds a thousand open sessions, and whole traces kept that long cost memory and
    time."""
    needs_expectations: ClassVar[bool] = False
    """True when the metric only scores cases that carry expectations (it skips captures)."""
    reads_steps: ClassVar[bool] = False
    """True when the metric checks the run's steps (its tool calls, its trajectory): a trace
    whose steps were not recorded (:attr:`Trace.steps_recorded`) is then not scored."""
    reads_end: ClassVar[bool] = False
    """True when the metric judges how the run ended (its task done, its final answer, its
    end state): a run that paused for a human (``interrupted``) has not ended, and is then
    not scored."""
    blocking: ClassVar[bool] = False
    """True when ``compute`` does heavy CPU work or blocking I/O: the engine then runs it on a
    worker thread so the event loop (and the judges waiting on it) never stalls."""

    def prepare(self, cases: Sequence[EvalCase]) -> None:
        """Called with a batch of cases about to be scored, so a metric can batch costly work
        (e.g. embed all their texts in one call). Default: nothing."""

    async def aprepare(self, cases: Sequence[EvalCase]) -> None:
        """:meth:`prepare` as the engine calls it, inside its event loop; a metric whose
        preparation waits on I/O overrides this. Default: ``prepare`` on a worker thread
        when the metric is ``blocking``, inline otherwise. Never raises."""
        try:
            if type(self).prepare is Metric.prepare:
                return
            if self.blocking:
                await asyncio.to_thread(self.prepare, cases)
            else:
                self.prepare(cases)
        except Exception as exc:
            logger.debug("%s: preparing a batch failed: %s", self.name, exc)

    def compute(self, case: EvalCase, history: Sequence[Trace] = ()) -> Score:
        """Score one case. Default: run ``acompute`` to completion."""
        if type(self).acompute is Metric.acompute:
            raise NotImplementedError(
                f"{type(self).__name__} implements neither compute nor acompute"
            )
        # a judge metric's judge opens connections on run_sync's loop, which ends here
        return run_sync(self.acompute(case, history), closing=[getattr(self, "judge", None)])

    async def acompute(self, case: EvalCase, history: Sequence[Trace] = ()) -> Score:
        """Score one case asynchronously. Default: call ``compute`` inline (it is cheap)."""
        return self.compute(case, history)

    def measure(self, case: EvalCase | Trace, *, history: Sequence[Trace] = ()) -> MetricResult:
        """Score a case or a trace; never raises."""
        started = time.perf_counter()
        case = EvalCase.of(case)
        try:
            score = self._unscorable(case) or self.compute(case, history)
        except Exception as exc:
            score = Score.from_exception(exc)
        return self._ids_result(score, started, case)

    async def ameasure(
        self, case: EvalCase | Trace, *, history: Sequence[Trace] = ()
    ) -> MetricResult:
        """Score a case or a trace without blocking the event loop's other work; never raises."""
        started = time.perf_counter()
        case = EvalCase.of(case)
        try:
            score = self._unscorable(case) or await self.acompute(case, history)
        except Exception as exc:
            score = Score.from_exception(exc)
        return self._ids_result(score, started, case)

    def measure_batch(
        self, cases: Sequence[EvalCase], histories: Sequence[Sequence[Trace]]
    ) -> list[MetricResult]:
        """Score several cases, each with the earlier traces of its own session; never
        raises. Default: :meth:`measure` each. A metric whose work is cheaper for many cases
        at once (one embedding call, one matrix product) overrides this and
        :meth:`ameasure_batch`; it gives each result an equal share of the batch's time."""
        return [
            self.measure(case, history=history)
            for case, history in zip(cases, histories, strict=True)
        ]

    async def ameasure_batch(
        self, cases: Sequence[EvalCase], histories: Sequence[Sequence[Trace]]
    ) -> list[MetricResult]:
        """:meth:`measure_batch` as the engine calls it, inside its event loop. Default:
        :meth:`ameasure` each, or :meth:`measure_batch` when the metric only implements
        ``compute`` (it runs inline anyway, without a coroutine per case)."""
        if type(self).acompute is Metric.acompute:
            return self.measure_batch(cases, histories)
        return [
            await self.ameasure(case, history=history)
            for case, history in zip(cases, histories, strict=True)
        ]

    def _unscorable(self, case: EvalCase) -> Score | None:
        """The skip of a metric for a trace that does not hold what it reads: the steps of a
        trace that records none (no tool call there is no evidence of none made: a pass, or
        a trajectory's failure, made up), or the end of a run that paused for a human (its
        task is not done yet, nor failed: the run that resumes it ends it)."""
        trace = case.trace
        if trace is None:
            return None
        if self.reads_steps and not trace.steps_recorded:
            return Score.skip(
                "not scored: the trace was imported from spans that record no model or tool "
                "call, only the run's input and output, so its steps are unknown",
                steps_recorded=False,
            )
        if self.reads_end and trace.status == RunStatus.INTERRUPTED:
            return Score.skip(
                "not scored: the run paused for a human (interrupted) before it ended; "
                "whether the task was done is the run that resumes it to say",
                status=str(RunStatus.INTERRUPTED),
            )
        return None

    def _ids_result(self, score: Score, started: float, case: EvalCase) -> MetricResult:
        return self._case_result(score, (time.perf_counter() - started) * 1000.0, case)

    def _case_result(self, score: Score, latency_ms: float, case: EvalCase) -> MetricResult:
        trace = case.trace
        return self._result(
            score,
            latency_ms,
            case_id=case.id,
            trace_id=trace.id if trace else None,
            session_id=trace.session_id if trace else None,
        )


class SessionMetric(MetricBase):
    """A session-level metric: pure math over per-trace signals (no LLM, no embeddings).

    ``signals`` holds one mapping per trace, signal name → score in [0, 1] or ``None`` (missing).
    """

    kind: ClassVar[MetricKind] = MetricKind.SESSION
    signal_names: ClassVar[tuple[str, ...]] = ()
    """Trace-level metrics whose scores this metric reads."""

    def compute_session(
        self, trace_ids: Sequence[str], signals: Sequence[Mapping[str, float | None]]
    ) -> Score:
        """The session's score from its traces' ids and, for each, its signals (the scores
        of :attr:`signal_names`, ``None`` where a trace has none), oldest first. Override
        this; :meth:`measure_session` calls it and makes a result of what it returns."""
        raise NotImplementedError

    def measure_session(
        self,
        trace_ids: Sequence[str],
        signals: Sequence[Mapping[str, float | None]],
        *,
        session_id: str | None = None,
    ) -> MetricResult:
        """Score a session from its traces' signals; never raises."""
        if len(trace_ids) != len(signals):
            message = (
                f"{len(trace_ids)} trace ids but {len(signals)} signal rows; give one row per trace"
            )
            return self._guarded(
                lambda: Score.failure(
                    f"invalid input: {message}", error_kind=ErrorKind.INVALID_INPUT
                ),
                session_id,
            )
        return self._guarded(lambda: self.compute_session(trace_ids, signals), session_id)

    def incremental(self) -> SessionAccumulator:
        """A live form: feed each trace's signals as they arrive, read the result any time."""
        return SessionAccumulator(self)

    def _guarded(self, compute: Callable[[], Score], session_id: str | None) -> MetricResult:
        started = time.perf_counter()
        try:
            score = compute()
        except Exception as exc:
            score = Score.from_exception(exc)
        return self._result(score, (time.perf_counter() - started) * 1000.0, session_id=session_id)


class SessionAccumulator:
    """Collects a session's signals trace by trace for a session metric.

    ``update`` adds a trace or merges later signals into it (judge scores arrive after
    embedding scores); ``result`` scores what has arrived so far, and ``snapshot`` does the
    same for a view that refreshes after every trace.
    """

    def __init__(self, metric: SessionMetric) -> None:
        self.metric = metric
        self._rows: dict[str, dict[str, float | None]] = {}

    def __len__(self) -> int:
        return len(self._rows)

    def update(self, trace_id: str, signals: Mapping[str, float | None]) -> None:
        row = self._rows.setdefault(trace_id, {})
        row.update({name: value for name, value in signals.items() if value is not None})

    def result(self, session_id: str | None = None) -> MetricResult:
        return self.metric.measure_session(
            list(self._rows), list(self._rows.values()), session_id=session_id
        )

    def snapshot(self, session_id: str | None = None) -> MetricResult:
        """The result as it stands, for a running view after each trace: the same score and
        reason; a metric may leave out per-trace detail, which :meth:`result` carries.
        Default: :meth:`result`."""
        return self.result(session_id)

    def score(self) -> float | None:
        """The score as it stands (``snapshot().score``), for a view that keeps only the
        number; a metric may compute it for less. Default: ``snapshot().score``."""
        return self.snapshot().score
